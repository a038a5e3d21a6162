"""Backends: where the stages from texts to signatures run.

A backend turns a batch of texts into shingle hashes and signatures, on its own side (host
memory for numpy, device memory for cupy). Banding and candidate generation are written once
against the backend's array module ``xp`` (lsh.py). Everything after candidates (verification,
clusters, output) runs on the host.

    texts (UTF-8 bytes uint8 + byte offsets int64, host; one copy to the device per batch)
      -> shingle_hashes  -> ShingleBatch (offsets int64, hashes uint64), backend side
      -> signatures      -> uint32 (n_docs, K), backend side
      -> band_keys       -> uint64 (n_docs, bands), backend side
      -> to_host          (keys and signatures)
    shingle_sets: each document's distinct hashes, sorted (host): what exact verification reads.
    lsh.candidate_pairs with xp=backend.xp, one band at a time on the backend's side.

Two implementations: numpy_backend.NumpyBackend (the reference) and kernel_backend.
KernelBackend, whose GPU form is cupy_backend.CupyBackend (CUDA kernels from kernels/).

``get_backend("auto")`` picks cupy when it imports and a device is present, numpy otherwise.
Nothing here imports cupy until a GPU backend is asked for.
"""

from __future__ import annotations

import ctypes
import importlib.util
import sys
from typing import Any, Callable, Optional, Protocol

import numpy as np

from ..errors import BackendUnavailableError, ParameterError
from ..core.hashing import Permutations
from ..core.shingling import ShingleBatch, ShingleSpec

BACKEND_NAMES = ("auto", "cpu", "gpu")



class Backend(Protocol):
    name: str  # "cpu" or "gpu"
    @property
    def xp(self) -> Any:
        """The array module: numpy or cupy."""

    @property
    def description(self) -> str:
        """For the report, e.g. "numpy 2.4.6 + numba 0.68.1 kernels"."""

    parallel_batches: int  # batches processed at once (threads)
    default_batch_bytes: int  # text bytes per batch unless DedupParams.batch_bytes says

    def shingle_hashes(self, data: np.ndarray, offsets: np.ndarray, spec: ShingleSpec) -> ShingleBatch:
        """Shingle hashes of a batch of valid UTF-8 texts: data uint8 (B,), byte offsets int64
        (n_docs + 1,) from 0, host arrays."""

    def shingle_sets(self, data: np.ndarray, offsets: np.ndarray, spec: ShingleSpec) -> ShingleBatch:
        """Each document's set of shingle hashes, sorted ascending without repeats (what
        shingling.unique_per_row makes of shingle_hashes), as a HOST ShingleBatch; data and
        offsets as for shingle_hashes. The GPU backend sorts on the device and brings back
        only the sets."""

    def signatures(self, shingles: ShingleBatch, permutations: Permutations):
        """MinHash signatures: uint32 (n_docs, K) on the backend's side."""

    def band_keys(self, signatures, banding):
        """uint64 (n_docs, bands) LSH keys of uint32 (n_docs, K) signatures, backend side."""

    def to_host(self, array) -> np.ndarray:
        """The array as a host numpy array (no copy when it already is one)."""

    def batch_scope(self):
        """A context manager around one batch's calls on one thread (a CUDA stream). When it
        ends, the batch's work is complete and its arrays may be used anywhere."""

    def synchronize(self) -> None:
        """Wait for the calling thread's queued work (for timings)."""

    def release_memory(self) -> None:
        """Return cached device memory (a GPU memory pool's free blocks) after a run."""


# What "gpu" makes instead of CuPy's backend, where set: the tests run the GPU backend's own code
# (KernelBackend) on a machine without a GPU by setting a factory of it with the kernels compiled
# for the host (tests/kernel_host), and so reach it through every mode of the public API.
_gpu_stand_in: Optional[Callable[[], Backend]] = None


def host_threads(backend: "Backend") -> int:
    """Threads for a host stage that runs a part per thread over a backend's arrays (the
    bands of the candidate stage, of an index's probe): the backend's batches at once on the
    host; one where its arrays are on a device, read one part at a time on its stream."""
    return backend.parallel_batches if backend.xp is np else 1


def set_gpu_stand_in(factory: Optional[Callable[[], Backend]]) -> Optional[Callable[[], Backend]]:
    """Make get_backend("gpu") return ``factory()`` in this process (None: CuPy's backend again);
    returns the factory set before. For tests: "auto" is not affected."""
    global _gpu_stand_in
    previous, _gpu_stand_in = _gpu_stand_in, factory
    return previous


def get_backend(name: "str | Backend" = "auto") -> Backend:
    """The backend called ``name``: "cpu" (numpy), "gpu" (cupy) or "auto"; a Backend made
    before is returned as it is (so every entry point takes either)."""
    if not isinstance(name, str):
        if hasattr(name, "xp") and hasattr(name, "signatures"):
            return name
        raise ParameterError(f"backend= must be one of {', '.join(BACKEND_NAMES)} or a backend; got {name!r}")
    if name not in BACKEND_NAMES:
        raise ParameterError(f"backend= must be one of {', '.join(BACKEND_NAMES)}; got {name!r}")
    if name == "cpu":
        # (start-up: the backend's module is loaded when it is chosen)
        from .numpy_backend import NumpyBackend

        return NumpyBackend()
    if name == "gpu" and _gpu_stand_in is not None:
        return _gpu_stand_in()
    reason = gpu_unavailable_reason()
    if reason is None:
        try:
            from .cupy_backend import CupyBackend  # (CuPy is optional)

            return CupyBackend()
        except Exception as error:  # NVRTC missing, a device CuPy cannot compile for, ...
            reason = f"the GPU backend could not start ({type(error).__name__}: {error})"
    if name == "gpu":
        raise BackendUnavailableError(
            f"backend='gpu' needs a CUDA GPU with CuPy, but {reason}. Install CuPy for your CUDA "
            "version: pip install 'gpudedup[gpu]' (cupy-cuda12x, CUDA 12) or "
            "pip install 'gpudedup[gpu-cuda13]' (cupy-cuda13x, CUDA 13); or use backend='cpu'."
        )
    # (start-up: the backend's module is loaded when it is chosen)
    from .numpy_backend import NumpyBackend

    return NumpyBackend(auto_reason=reason)


def gpu_unavailable_reason() -> str | None:
    """None when a GPU backend can run here, else why not (for messages and the report)."""
    if not installed("cupy"):
        return "CuPy is not installed"
    missing_driver = cuda_driver_missing()
    if missing_driver is not None:
        return missing_driver
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed"
    except Exception as error:  # a broken CUDA install raises all sorts of errors on import
        return f"CuPy failed to import ({error})"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device is visible"
    except Exception as error:
        return f"no usable CUDA device ({error})"
    return None


# The CUDA driver's library, which CuPy loads (as does any CUDA program), by platform.
CUDA_DRIVER = {"linux": "libcuda.so.1", "win32": "nvcuda.dll"}
CUDA_ERROR_NO_DEVICE = 100  # cuInit's result where the driver sees no device


def cuda_driver_missing() -> str | None:
    """Why no CUDA device can be used here, learnt from the driver without importing CuPy (a few
    tenths of a second, on every CPU run where it is installed): its library does not load, or
    it sees no device. None where it may be used; CuPy's own checks follow."""
    name = CUDA_DRIVER.get(sys.platform)
    if name is None:
        return None
    try:
        driver = ctypes.CDLL(name)
    except OSError:
        return f"no CUDA driver ({name} cannot be loaded)"
    if driver.cuInit(0) == CUDA_ERROR_NO_DEVICE:
        return "no CUDA device is visible"
    return None


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, as far as finding it tells (it is not imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # in sys.modules without a spec (a stand-in): there it is
        return True
