"""The GPU backend's code on the host, reachable by name: KernelBackend with the kernels compiled
for the host (host_kernels.py), ``cupy_like`` device arrays and a stand-in runtime (streams that
hold the backend to CUDA's ordering rules, events, pinned memory), set as what
``get_backend("gpu")`` makes (gpudedup.backends.set_gpu_stand_in) so that every mode of the
public API (in memory, ``work_dir``, Dask, ``evaluate``) runs it.

``dask_setup`` makes this module a Dask worker preload: ``LocalCluster(preload=[__file__])``
gives every worker process the same stand-in, so the tasks that make their own backend by name
make this one.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from pathlib import Path
from typing import Iterator

import numpy as np

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:  # cupy_like, for a worker process that preloads this file
    sys.path.insert(0, str(TESTS))

from cupy_like import Stream, alloc_pinned_memory, get_current_stream  # noqa: E402


class StandInStream(Stream):
    """A batch stream as KernelBackend uses it (cupy_like.Stream: CUDA's ordering rules on the
    host), strict about what would be a bug with CUDA streams:
    - one batch scope at a time per stream (two threads queueing on one stream would
      serialise, and the pool promises each batch its own);
    - a scope must hand its work off before it leaves the stream: the host or another stream
      must have waited for every operation queued on it (else a later use of its arrays on
      another stream could race with the kernels that write them)."""

    created = 0
    _count_lock = threading.Lock()

    def __init__(self) -> None:
        super().__init__(non_blocking=True)
        with StandInStream._count_lock:
            StandInStream.created += 1
        self.in_use = threading.Lock()
        self.scopes = 0  # batch scopes this stream has served

    def __enter__(self) -> "StandInStream":
        if not self.in_use.acquire(blocking=False):
            raise RuntimeError("a stream was lent to two batch scopes at once")
        self.scopes += 1
        self._note("enter")
        super().__enter__()
        return self

    def __exit__(self, *exc) -> None:
        super().__exit__(*exc)
        self._note("exit")
        self.in_use.release()
        if exc[0] is None and self.handed_off < self.operations:
            raise RuntimeError(f"{self.name}: a batch scope left {self.operations - self.handed_off} operations "
                               "on its stream that neither the host nor another stream waited for")


class HostRuntime:
    """kernel_backend.DeviceRuntime on the host: stand-in streams (``stream_factory``, by default
    StandInStream), the calling thread's current cupy_like stream, cupy_like pinned memory."""

    def __init__(self, stream_factory=StandInStream):
        self.stream_factory = stream_factory

    def new_stream(self):
        return self.stream_factory()

    def current_stream(self):
        return get_current_stream()

    def pinned_buffer(self, nbytes: int) -> np.ndarray:
        return np.frombuffer(alloc_pinned_memory(nbytes), np.uint8, nbytes)


class LoggedKernels:
    """A kernel loader that queues every launch on the calling thread's current stream (so
    the stream's log and counts see kernels), then runs the kernel."""

    def __init__(self, kernels):
        self.kernels = kernels

    def get(self, file_name: str, kernel_name: str, defines: dict):
        kernel = self.kernels.get(file_name, kernel_name, defines)

        def launch(grid, block, args):
            get_current_stream().log_operation("launch", kernel_name)
            return kernel(grid, block, args)

        return launch

    def __getattr__(self, name: str):
        return getattr(self.kernels, name)


def host_gpu_backend(schedule: int = 0, streams: bool = True, stream_factory=StandInStream):
    """KernelBackend on the host: cupy_like arrays, the host kernels (launches logged on the
    current stream), stand-in streams, events and pinned memory."""
    from gpudedup.backends.kernel_backend import KernelBackend

    from cupy_like import cupy_like
    from kernel_host.host_kernels import HostKernels

    return KernelBackend(cupy_like, LoggedKernels(HostKernels(schedule)), description="kernel backend on the host shim",
                         runtime=HostRuntime(stream_factory) if streams else None)


@contextlib.contextmanager
def gpu_stand_in() -> Iterator[None]:
    """get_backend("gpu") gives host_gpu_backend() inside the context, in this process."""
    from gpudedup.backends import set_gpu_stand_in

    previous = set_gpu_stand_in(host_gpu_backend)
    try:
        yield
    finally:
        set_gpu_stand_in(previous)


def dask_setup(worker=None) -> None:
    """Dask's preload hook: the worker process makes the host GPU backend for "gpu" too."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    from gpudedup.backends import set_gpu_stand_in

    set_gpu_stand_in(host_gpu_backend)
