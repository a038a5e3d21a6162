"""The numpy backend: the reference implementation, host memory, always available.

Shingling (shingle_hashes, shingle_sets) and the MinHash signatures run on numba kernels
(cpu_kernels.py), bit for bit the numpy reference's results and faster, where the compiled
route is taken (compiled.compiled_route: numba installed, not switched off, and the process
has shingled enough text for their start to pay); otherwise on the numpy reference
(shingling.py, minhash.py). Numba is imported when the first batch takes the compiled route,
never when gpudedup is or the backend is made.
"""

from __future__ import annotations

import contextlib
import sys
from types import ModuleType
from typing import Optional

import numpy as np

from ..compiled import announce_compiling, compiled_route, kernels_on, start_kernels, text_work
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
    # (numba is heavy: imported with the kernels, when a run takes the compiled route)
    from . import cpu_kernels

    announce_compiling(cpu_kernels.normalize_batch)
    return cpu_kernels


class NumpyBackend:
    name = "cpu"
    xp = np
    parallel_batches = HOST_THREADS
    default_batch_bytes = DEFAULT_BATCH_BYTES

    def __init__(self, auto_reason: str | None = None):
        self.auto_reason = auto_reason
        self._kernels: Optional[ModuleType] = None  # cpu_kernels, once a batch has taken them

    @property
    def kernels(self) -> Optional[ModuleType]:
        """cpu_kernels where the compiled route is on (kernels_on), else None. Asking for them
        loads them and starts the compiled route in this process (compiled.start_kernels)."""
        if self._kernels is None and kernels_on():
            start_kernels()
            self._kernels = shingling_kernels()
        return self._kernels

    @property
    def description(self) -> str:
        """For the report: numpy's version, and numba's where this backend's batches ran on the
        kernels (a run too small to start them runs on the numpy reference alone)."""
        text = f"numpy {np.__version__}"
        if self._kernels is not None:
            text += f" + numba {sys.modules['numba'].__version__} kernels"  # (imported by the kernels)
        if self.auto_reason:
            text += f" (auto: no GPU backend, {self.auto_reason})"
        return text

    def _route(self, work: int) -> Optional[ModuleType]:
        """The kernels for a step of ``work`` (compiled.text_work), or None: the numpy reference."""
        if self._kernels is None and compiled_route(work):
            self._kernels = shingling_kernels()
        return self._kernels if kernels_on() else None

    def shingle_hashes(self, data: np.ndarray, offsets: np.ndarray, spec: ShingleSpec) -> ShingleBatch:
        kernels = self._route(text_work(data.nbytes, spec.kind))
        if kernels is not None:
            return kernels.shingle_hashes(data, offsets, spec)
        return utf8_shingle_hashes(data, offsets, spec)

    def shingle_sets(self, data: np.ndarray, offsets: np.ndarray, spec: ShingleSpec) -> ShingleBatch:
        kernels = self._route(text_work(data.nbytes, spec.kind))
        if kernels is not None:
            return kernels.shingle_sets(data, offsets, spec)
        return unique_per_row(utf8_shingle_hashes(data, offsets, spec))

    def signatures(self, shingles: ShingleBatch, permutations: Permutations) -> np.ndarray:
        kernels = self._route(0)  # (the batch's text was counted when it was shingled)
        if kernels is not None:
            return kernels.signatures(shingles, permutations)
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
