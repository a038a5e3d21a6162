"""The numpy backend: the reference implementation, host memory, always available."""

from __future__ import annotations

import contextlib
import os

import numpy as np

from ..hashing import Permutations
from ..lsh import Banding, band_keys
from ..minhash import minhash_signatures
from ..params import DEFAULT_BATCH_BYTES
from ..shingling import ShingleBatch, ShingleSpec, unique_per_row, utf8_shingle_hashes


class NumpyBackend:
    name = "cpu"
    xp = np
    # Batches run on this many threads at once (numpy releases the GIL in its loops).
    parallel_batches = os.cpu_count() or 1
    default_batch_bytes = DEFAULT_BATCH_BYTES

    def __init__(self, auto_reason: str | None = None):
        self.description = f"numpy {np.__version__}"
        if auto_reason:
            self.description += f" (auto: no GPU backend, {auto_reason})"

    def shingle_hashes(self, data: np.ndarray, offsets: np.ndarray, spec: ShingleSpec) -> ShingleBatch:
        return utf8_shingle_hashes(data, offsets, spec)

    def shingle_sets(self, data: np.ndarray, offsets: np.ndarray, spec: ShingleSpec) -> ShingleBatch:
        return unique_per_row(utf8_shingle_hashes(data, offsets, spec))

    def signatures(self, shingles: ShingleBatch, permutations: Permutations) -> np.ndarray:
        return minhash_signatures(shingles, permutations)

    def band_keys(self, signatures: np.ndarray, banding: Banding) -> np.ndarray:
        return band_keys(signatures, banding, np)

    def to_host(self, array) -> np.ndarray:
        return np.asarray(array)

    def batch_scope(self):
        return contextlib.nullcontext()

    def synchronize(self) -> None:
        pass

    def release_memory(self) -> None:
        pass  # host memory: memory.release_unused_memory does it for every backend
