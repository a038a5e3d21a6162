"""Returning freed memory to the system between and within stages.

Arrow's allocator (mimalloc) and glibc's malloc both keep freed memory for reuse. After a
batch, that memory is the batch's temporaries, which the next batch may not fit into, so
without a release the resident set grows well past what is alive (measured on the 200 MB
benchmark corpus: 1.4 GB resident for 0.7 GB alive).
"""

from __future__ import annotations

import ctypes

import pyarrow as pa


def _load_glibc():
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:  # not glibc (macOS, Windows, musl): nothing to trim
        return None


_LIBC = _load_glibc()


def release_unused_memory() -> None:
    """Give free memory of Arrow's pool and of glibc's malloc back to the system (cheap: a few
    milliseconds; malloc_trim also returns free pages in the middle of the heap)."""
    pa.default_memory_pool().release_unused()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
