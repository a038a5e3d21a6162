"""The GPU backend: KernelBackend with CuPy arrays and the kernels compiled by NVRTC.

Imported only when a GPU backend is asked for (backends.get_backend); importing gpudedup never
imports CuPy.
"""

from __future__ import annotations

import cupy
import numpy as np

from ..core.normalize import NormalizationTables, tables_on
from .cuda_kernels import CupyKernels
from .kernel_backend import KernelBackend

_TABLES: dict[int, NormalizationTables] = {}


def device_tables() -> NormalizationTables:
    """The normalisation tables on the current device (6.7 MB), copied once per device."""
    device = cupy.cuda.Device().id
    if device not in _TABLES:
        _TABLES[device] = tables_on(cupy)
        cupy.cuda.get_current_stream().synchronize()  # batch streams read them without waiting
    return _TABLES[device]


def device_name() -> str:
    properties = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = properties["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


class CupyRuntime:
    """kernel_backend.DeviceRuntime with CuPy: non-blocking streams, the thread's current
    stream, and page-locked host memory from CuPy's pinned memory pool."""

    def new_stream(self):
        return cupy.cuda.Stream(non_blocking=True)

    def current_stream(self):
        return cupy.cuda.get_current_stream()

    def pinned_buffer(self, nbytes: int) -> np.ndarray:
        # The numpy view keeps the PinnedMemoryPointer alive; when both go, the pool takes the
        # memory back.
        return np.frombuffer(cupy.cuda.alloc_pinned_memory(nbytes), np.uint8, nbytes)


class CupyBackend(KernelBackend):
    def __init__(self):
        runtime = cupy.cuda.runtime.runtimeGetVersion()
        super().__init__(
            cupy,
            CupyKernels(cupy),
            description=(f"cupy {cupy.__version__} on {device_name()} "
                         f"(CUDA runtime {runtime // 1000}.{runtime % 1000 // 10})"),
            tables=device_tables(),
            runtime=CupyRuntime(),
        )
        # Compile now (about a second the first time, then CuPy's disk cache), so that a
        # missing NVRTC or an unsupported device shows when the backend is chosen, not mid-run.
        for file_name, kernel_name in (("shingle_hash.cu", "span_hashes_u32"),
                                       ("minhash.cu", "minhash_signatures_u64"),
                                       ("band_keys.cu", "band_keys_u32")):
            self.kernels.get(file_name, kernel_name, {})
