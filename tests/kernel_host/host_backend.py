"""The GPU backend's code on the host, reachable by name: KernelBackend with the kernels compiled
for the host (host_kernels.py), ``cupy_like`` device arrays and stand-in streams, set as what
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

TESTS = Path(__file__).resolve().parents[1]


class StandInStream:
    """A stream as KernelBackend uses it (a context manager that makes it current), strict about
    what would be a bug with CUDA streams: one batch scope at a time per stream (two threads
    queueing on one stream would serialise, and the pool promises each batch its own)."""

    created = 0
    _count_lock = threading.Lock()

    def __init__(self) -> None:
        with StandInStream._count_lock:
            StandInStream.created += 1
        self.in_use = threading.Lock()
        self.scopes = 0  # batch scopes this stream has served

    def __enter__(self) -> "StandInStream":
        if not self.in_use.acquire(blocking=False):
            raise RuntimeError("a stream was lent to two batch scopes at once")
        self.scopes += 1
        return self

    def __exit__(self, *exc) -> None:
        self.in_use.release()


def host_gpu_backend(schedule: int = 0, streams: bool = True):
    """KernelBackend on the host: cupy_like arrays, the host kernels, stand-in streams."""
    from gpudedup.backends.kernel_backend import KernelBackend

    from cupy_like import cupy_like
    from kernel_host.host_kernels import HostKernels

    return KernelBackend(cupy_like, HostKernels(schedule), description="kernel backend on the host shim",
                         stream_factory=StandInStream if streams else None)


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
