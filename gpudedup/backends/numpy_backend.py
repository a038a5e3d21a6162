"""The numpy backend: the reference implementation, host memory, always available."""

from __future__ import annotations

import os

import numpy as np

from ..hashing import Permutations
from ..minhash import minhash_signatures
from ..shingling import ShingleBatch, ShingleSpec, utf8_shingle_hashes


class NumpyBackend:
    name = "cpu"
    xp = np
    # Batches run on this many threads at once (numpy releases the GIL in its loops).
    parallel_batches = os.cpu_count() or 1

    def __init__(self, auto_reason: str | None = None):
        self.description = f"numpy {np.__version__}"
        if auto_reason:
            self.description += f" (auto: no GPU backend, {auto_reason})"

    def shingle_hashes(self, data: np.ndarray, offsets: np.ndarray, spec: ShingleSpec) -> ShingleBatch:
        return utf8_shingle_hashes(data, offsets, spec)

    def signatures(self, shingles: ShingleBatch, permutations: Permutations) -> np.ndarray:
        return minhash_signatures(shingles, permutations)

    def to_host(self, array) -> np.ndarray:
        return np.asarray(array)
