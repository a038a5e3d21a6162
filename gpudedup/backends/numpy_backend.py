"""The numpy backend: the reference implementation, host memory, always available.

Shingling (shingle_hashes, shingle_sets) and the MinHash signatures run on numba kernels
(cpu_kernels.py), bit for bit the numpy reference's results and faster, where numba imports and
the environment does not set GPUDEDUP_CPU_KERNELS=numpy; otherwise on the numpy reference
(shingling.py, minhash.py). Numba is
imported when the backend is made, never when gpudedup is.
"""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Optional

import numpy as np

from ..compiled import kernels_on
from ..core.hashing import Permutations
from ..core.lsh import Banding, band_keys
from ..core.minhash import minhash_signatures
from ..params import DEFAULT_BATCH_BYTES
from ..core.shingling import ShingleBatch, ShingleSpec, unique_per_row, utf8_shingle_hashes
from ..threads import HOST_THREADS


def shingling_kernels() -> Optional[ModuleType]:
    """cpu_kernels (numba), or None where the compiled route is off (compiled.kernels_on)."""
    if not kernels_on():
        return None
    from . import cpu_kernels

    return cpu_kernels


class NumpyBackend:
    name = "cpu"
    xp = np
    parallel_batches = HOST_THREADS
    default_batch_bytes = DEFAULT_BATCH_BYTES

    def __init__(self, auto_reason: str | None = None):
        self.kernels = shingling_kernels()
        self.description = f"numpy {np.__version__}"
        if self.kernels is not None:
            import numba  # already imported by the kernels

            self.description += f" + numba {numba.__version__} kernels"
        if auto_reason:
            self.description += f" (auto: no GPU backend, {auto_reason})"

    def shingle_hashes(self, data: np.ndarray, offsets: np.ndarray, spec: ShingleSpec) -> ShingleBatch:
        if self.kernels is not None:
            return self.kernels.shingle_hashes(data, offsets, spec)
        return utf8_shingle_hashes(data, offsets, spec)

    def shingle_sets(self, data: np.ndarray, offsets: np.ndarray, spec: ShingleSpec) -> ShingleBatch:
        if self.kernels is not None:
            return self.kernels.shingle_sets(data, offsets, spec)
        return unique_per_row(utf8_shingle_hashes(data, offsets, spec))

    def signatures(self, shingles: ShingleBatch, permutations: Permutations) -> np.ndarray:
        if self.kernels is not None:
            return self.kernels.signatures(shingles, permutations)
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
