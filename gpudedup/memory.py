"""Returning freed memory to the system between and within stages.

Arrow's allocator (mimalloc) and glibc's malloc both keep freed memory for reuse. After a
batch, that memory is the batch's temporaries, which the next batch may not fit into, so
without a release the resident set grows well past what is alive (measured on the 200 MB
benchmark corpus: 1.4 GB resident for 0.7 GB alive).
"""

from __future__ import annotations

import ctypes
import math
import os
import re
from fractions import Fraction
from typing import Optional

import pyarrow as pa

from .errors import MemoryLimitError, ParameterError


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


# --- the --max-memory budget ----------------------------------------------------------------

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
          "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30, "T": 1 << 40, "TB": 1 << 40, "TIB": 1 << 40}


def parse_sizes(**sizes) -> dict[str, Optional[int]]:
    """The sizes given by name (None, or what parse_size takes), in bytes: batch_bytes,
    max_memory, shard_bytes as every entry point takes them."""
    return {name: None if text is None else parse_size(text, name) for name, text in sizes.items()}


def parse_size(text, name: str = "max_memory") -> int:
    """Bytes of a size like 4G, 512M, 1.5GiB or 1000000 (binary units: 1G = 2**30 bytes); name:
    the parameter's, for the error."""

    # (exact fractions: a float would turn 99999999999999999999 into 10**20)
    if isinstance(text, int) and not isinstance(text, bool) or isinstance(text, float) and math.isfinite(text):
        value, unit = Fraction(text), ""
    else:
        match = re.fullmatch(r"\s*([0-9]{0,40}\.?[0-9]{1,40})\s*([A-Za-z]*)\s*", str(text))
        if not match or match.group(2).upper() not in _UNITS:
            raise ParameterError(f"{name}= must be a size like 8G, 512M or a number of bytes; got {text!r}")
        value, unit = Fraction(match.group(1)), match.group(2).upper()
    size = int(value * _UNITS[unit])
    if size <= 0:
        raise ParameterError(f"{name}= must be positive; got {text!r}")
    if size >= 2**63:  # (numpy's int64 sizes and offsets would overflow)
        raise ParameterError(f"{name}= must be below 2**63 bytes (8 EiB); got {text!r}")
    return size


def resident_bytes() -> int:
    """The process's resident set now (Linux /proc/self/statm; elsewhere its high-water mark)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource  # (optional: a module of Unix only, where /proc is not)

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class MemoryBudget:
    """--max-memory: before a stage starts, its estimated need plus what is resident now must
    fit, or the run stops with MemoryLimitError (exit code 2, nothing written) instead of being
    killed by the system half way. limit None: no budget."""

    def __init__(self, limit: int | None):
        self.limit = limit

    def check(self, stage: str, need, advice: str) -> None:
        """need: bytes, or a function computing them (called only when there is a limit)."""
        if self.limit is None:
            return
        need = need() if callable(need) else need
        release_unused_memory()  # what is resident, not what the allocators keep for reuse
        now = resident_bytes()
        if now + need > self.limit:
            needs = f"{stage} needs about {size_words(need)} more, with" if need else f"before {stage},"
            raise MemoryLimitError(f"max_memory={size_words(self.limit)}: {needs} {size_words(now)} in use; {advice}")


def size_words(count: float) -> str:
    """A number of bytes for a message: whole MiB from 1 MiB up, whole KiB from 1 KiB, else
    bytes (a limit of a few bytes is not "0 MiB")."""
    for unit, name in ((2**20, "MiB"), (2**10, "KiB")):
        if count >= unit:
            return f"{count / unit:,.0f} {name}"
    return f"{count:,.0f} {'byte' if count == 1 else 'bytes'}"
