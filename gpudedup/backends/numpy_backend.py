"""The numpy backend: the reference implementation, host memory, always available.

Shingling (shingle_hashes, shingle_sets) and the MinHash signatures run on compiled loops,
bit for bit the numpy reference's results and faster, over one of two builds
(compiled_steps.CompiledSteps):

- the C extension compiled at install (kernels/cpu_kernels.c), for work of any size: it loads
  in about a millisecond;
- where it was not built (no C compiler at install), numba's (cpu_kernels.py), once the process
  has shingled enough text for their start to pay (compiled.compiled_route); numba is imported
  then, never when gpudedup is or the backend is made;

otherwise, and with GPUDEDUP_CPU_KERNELS=numpy, on the numpy reference (shingling.py,
minhash.py). GPUDEDUP_CPU_KERNELS=c or =numba takes one build whatever the size.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Optional

import numpy as np

from ..compiled import (announce_compiling, c_loops, compiled_loops_on, compiled_route, kernels_on, start_kernels,
                        text_work)
from ..core.hashing import Permutations
from ..core.lsh import Banding, band_keys
from ..core.minhash import minhash_signatures
from ..params import DEFAULT_BATCH_BYTES
from ..core.shingling import ShingleBatch, ShingleSpec, unique_per_row, utf8_shingle_hashes
from ..threads import HOST_THREADS
from .compiled_steps import CompiledSteps


def extension_steps() -> Optional[CompiledSteps]:
    """The steps over the C loops, or None where they were not built at install or the switch
    asks for another route (compiled.c_loops, which refuses GPUDEDUP_CPU_KERNELS=c without
    them)."""
    loops = c_loops()
    return None if loops is None else CompiledSteps(loops, "C")


def numba_steps() -> Optional[CompiledSteps]:
    """The steps over numba's loops, or None where numba's route is off (compiled.kernels_on)."""
    if not kernels_on():
        return None
    # (numba is heavy: imported with the kernels, when a run takes numba's route)
    from . import cpu_kernels

    announce_compiling(cpu_kernels.normalize_batch)
    return CompiledSteps(cpu_kernels, f"numba {sys.modules['numba'].__version__}")


class NumpyBackend:
    name = "cpu"
    xp = np
    parallel_batches = HOST_THREADS
    default_batch_bytes = DEFAULT_BATCH_BYTES

    def __init__(self, auto_reason: str | None = None):
        self.auto_reason = auto_reason
        self._steps: Optional[CompiledSteps] = None  # the compiled steps, once a batch has taken them

    @property
    def steps(self) -> Optional[CompiledSteps]:
        """The compiled steps this backend takes (the C build where there is one, else numba's
        where its route is on), else None. Asking for numba's starts its route in this process
        (compiled.start_kernels)."""
        if self._steps is None:
            self._steps = extension_steps()
        if self._steps is None and kernels_on():
            start_kernels()
            self._steps = numba_steps()
        return self._steps

    @property
    def description(self) -> str:
        """For the report: numpy's version, and the compiled build where this backend's batches
        ran on one (a run too small to start numba's runs on the numpy reference alone)."""
        text = f"numpy {np.__version__}"
        if self._steps is not None:
            text += f" + {self._steps.name} kernels"
        if self.auto_reason:
            text += f" (auto: no GPU backend, {self.auto_reason})"
        return text

    def _route(self, work: int) -> Optional[CompiledSteps]:
        """The compiled steps for a step of ``work`` (compiled.text_work), or None: the numpy
        reference. The work is counted whichever route runs it: the exact verification's route
        follows it (compiled.compiled_route)."""
        numba_started = compiled_route(work)
        if self._steps is None:
            self._steps = extension_steps() or (numba_steps() if numba_started else None)
        return self._steps if compiled_loops_on() else None

    def shingle_hashes(self, data: np.ndarray, offsets: np.ndarray, spec: ShingleSpec) -> ShingleBatch:
        steps = self._route(text_work(data.nbytes, spec.kind))
        if steps is not None:
            return steps.shingle_hashes(data, offsets, spec)
        return utf8_shingle_hashes(data, offsets, spec)

    def shingle_sets(self, data: np.ndarray, offsets: np.ndarray, spec: ShingleSpec) -> ShingleBatch:
        steps = self._route(text_work(data.nbytes, spec.kind))
        if steps is not None:
            return steps.shingle_sets(data, offsets, spec)
        return unique_per_row(utf8_shingle_hashes(data, offsets, spec))

    def signatures(self, shingles: ShingleBatch, permutations: Permutations) -> np.ndarray:
        steps = self._route(0)  # (the batch's text was counted when it was shingled)
        if steps is not None:
            return steps.signatures(shingles, permutations)
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
