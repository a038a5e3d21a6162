"""The one switch for the CPU's compiled loops: which build runs, and when a process starts numba's.

The numpy backend's shingling and MinHash (backends/compiled_steps.py) and the exact
verification's merges (core/verify.py) each have a compiled route and a numpy / scipy reference
route that gives the same results bit for bit. The compiled loops are built in C at install
(kernels/cpu_kernels.c, the module gpudedup._cpu_kernels), where a C compiler was found: that
module loads in a millisecond, and a run of any size takes it (``c_loops``). Where it was not
built, numba's builds of the same loops (backends/cpu_kernels.py, core/verify_kernels.py) run
instead; they cost a process a fixed time to start, cached machine code or not: importing
numba, its type registries (which import SciPy's BLAS), the cached code itself; some tenths of a
second, which they win back only over megabytes of text. So such a process takes the reference
routes until its signature passes have read REFERENCE_WORK bytes of text (some megabytes a
core), then numba's for everything after (``compiled_route``): a run on a few documents or a
few thousand never imports numba, a large one pays for it once.

The environment switch GPUDEDUP_CPU_KERNELS=numpy keeps every step on the reference route (to
compare, or to rule the compiled loops out); =c takes the C loops (an error where they were not
built); =numba takes numba's for work of any size. Numba is imported only when a kernel module
is, never when gpudedup is. Every numba kernel is made by ``kernel``, which keeps numba's cache
of compiled code out of the package folder.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, Optional

from .errors import ParameterError
from .stages import add_compile_seconds
from .threads import HOST_THREADS

# The environment switch: "numpy" (any case) keeps every CPU step on its reference route; "c"
# takes the C loops alone; "numba" takes numba's route whatever the size of the work.
KERNEL_SWITCH = "GPUDEDUP_CPU_KERNELS"

# The work (text_work) a process does on the reference route before it starts the kernels: per
# host thread, the work on which the reference route spends, beyond what the kernels would, about
# the time their start takes one core (scripts/bench_sizes.py measures both sides). The batches
# run on every thread and the start on one, so the amount grows with the threads. Results are
# the same on either route; this decides only how long a run takes.
REFERENCE_WORK = (8 << 20) * HOST_THREADS

# The reference route's work per byte of text, by shingle kind: it costs per shingle, and a
# char n-gram starts at every code point, a word n-gram at every word. Where the whole command
# took as long on either route (cuts of the benchmark corpus, 5-grams, 2 cores, each route
# forced with GPUDEDUP_CPU_KERNELS): char 6-8 MB of text, word 35-55 MB; these weights put
# the start at 8 and 40 MB there. Token ids (4 bytes each, one shingle each) count as bytes.
TEXT_WORK_PER_BYTE = {"char": 2.0, "word": 0.4, "token": 1.0}


def text_work(text_bytes: int, kind: str) -> int:
    """The reference route's work (compiled_route, expect_text) for ``text_bytes`` bytes of
    text cut into ``kind`` shingles (ShingleSpec.kind)."""
    return int(text_bytes * TEXT_WORK_PER_BYTE[kind])


class _Start:
    """The process's account of the reference route's work, and whether the kernels are on."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reference_work = 0
        self.started = False
        self.announced = False
        self.cache_lock = threading.Lock()  # (apart: kernels are made while the other may be held)
        self.cache_writable: bool | None = None  # cache_writable's answer, once asked


_start = _Start()
_timing = False  # whether numba's compilations are timed in this process (time_compilations)


def kernels_on() -> bool:
    """Whether numba's route may be taken: numba is installed (the GPU image has none) and
    GPUDEDUP_CPU_KERNELS is not "numpy" or "c". Read on each call, so a switch set in the
    environment later (a test) applies to the next caller, which then imports its kernel module
    itself. Numba is looked up, not imported."""
    if _switch() in ("numpy", "c"):
        return False
    try:
        return importlib.util.find_spec("numba") is not None
    except ValueError:  # sys.modules holds None for it: an import would fail
        return False


def c_loops() -> Optional[ModuleType]:
    """The C build of the loops (gpudedup._cpu_kernels), or None where it was not built at
    install or the switch asks for another route; ParameterError where the switch asks for it
    (GPUDEDUP_CPU_KERNELS=c) and it was not built."""
    switch = _switch()
    if switch in ("numpy", "numba"):
        return None
    try:
        from . import _cpu_kernels  # (optional: built at install only where a C compiler was found)
    except ImportError:
        if switch == "c":
            raise ParameterError(f"{KERNEL_SWITCH}=c, but the C kernels were not built when gpudedup was installed "
                                 "(no C compiler was found): install a C compiler and reinstall, or unset the "
                                 "switch") from None
        return None
    return _cpu_kernels


def compiled_loops_on() -> bool:
    """Whether the shingling and MinHash steps may run on compiled loops (C or numba): unless
    GPUDEDUP_CPU_KERNELS is "numpy"."""
    return _switch() != "numpy"


def compiled_route(work: int = 0) -> bool:
    """Whether a step takes the compiled route: kernels_on(), and the kernels are started in
    this process, or GPUDEDUP_CPU_KERNELS=numba asks for them, or the reference route's work
    reaches REFERENCE_WORK with this step's ``work`` (text_work of a signature pass's batch),
    which then starts them. Steps that read no text of their own (verification) pass 0 and
    follow what the signature passes started."""
    if not kernels_on():
        return False
    with _start.lock:
        if not _start.started:
            _start.reference_work += work
            _start.started = _switch() == "numba" or _start.reference_work >= REFERENCE_WORK
        return _start.started


def expect_text(total: int) -> None:
    """For a caller that knows a pass's whole text ahead (``total``: its text_work; a signature
    pass): where it reaches REFERENCE_WORK, the compiled route starts now, so that every batch
    runs on it rather than the first ones on the reference route; otherwise nothing changes."""
    if total >= REFERENCE_WORK:
        start_kernels()


def start_before(total: int) -> None:
    """For a caller whose passes are timed against each other (an evaluation's grid): where the
    reference route's work so far and theirs (``total``: their text_work) would reach
    REFERENCE_WORK, the compiled route starts now, so that every pass runs on one route and none
    carries the kernels' start in its time; otherwise all of them stay on the reference route."""
    with _start.lock:
        if _start.reference_work + total >= REFERENCE_WORK:
            _start.started = True


def start_kernels() -> None:
    """Take the compiled route from now on in this process (where kernels_on()): for a caller
    that knows its work is large, or that holds the kernels already (NumpyBackend.kernels)."""
    with _start.lock:
        _start.started = True


def announce_compiling(dispatcher: Any) -> None:
    """One line on stderr, once per process, where numba's cache holds no compiled code for the
    source of ``dispatcher`` (a kernel, before its first call): the first run after an install
    or upgrade compiles the kernels, which takes seconds, and later runs load them. Reads
    numba's cache index the way its dispatcher does; where that fails, says nothing."""
    with _start.lock:  # (batches on threads load the kernels at once: one line, one timer)
        if _start.announced:
            return
        try:
            # numba.core.caching: the index of a function's cached overloads, empty where the
            # source file's stamp differs from the one they were compiled from.
            cached = dispatcher._cache._cache_file._load_index()
        except Exception:  # numba's internals moved: no line rather than a wrong one
            return
        if not cached:
            _start.announced = True
            print(f"gpudedup: compiling the CPU kernels (once after an install; later runs load them from "
                  f"{cache_folder()})", file=sys.stderr, flush=True)
            time_compilations()


def time_compilations() -> None:
    """Count the wall seconds during which numba compiles from now on in this process
    (stages.py's compile_seconds; numba's event API, numba.core.event): from the start of a
    compilation while none was going on to the end of the last one going on, so that nested
    compilations, and threads that compile or wait for one at once, count once."""
    global _timing
    if _timing:  # (once per process: a second listener would count each compilation twice)
        return
    _timing = True
    from numba.core import event  # (loaded with the kernels already)

    class CompileTimer(event.Listener):
        def __init__(self) -> None:
            self.going, self.started, self.lock = 0, 0.0, threading.Lock()

        def on_start(self, happened) -> None:
            with self.lock:
                if self.going == 0:
                    self.started = time.perf_counter()
                self.going += 1

        def on_end(self, happened) -> None:
            with self.lock:
                self.going -= 1
                if self.going == 0:
                    add_compile_seconds(time.perf_counter() - self.started)

    event.register("numba:compile", CompileTimer())


def _switch() -> str:
    """The environment switch, "" where unset; ParameterError for any value but its two (a typo
    would otherwise leave the choice to the work's size, unsaid)."""
    value = os.environ.get(KERNEL_SWITCH, "").strip().lower()
    if value not in ("", "numpy", "numba", "c"):
        raise ParameterError(f"{KERNEL_SWITCH} must be numpy, numba or c (or unset); got {os.environ[KERNEL_SWITCH]!r}")
    return value


def cache_folder() -> Path:
    """Where the kernels' compiled code is cached: ``$XDG_CACHE_HOME/gpudedup/numba`` (default
    ``~/.cache``), unless the user named a folder with numba's own NUMBA_CACHE_DIR.

    Not numba's default, a ``__pycache__`` beside the kernel's module: ``pip uninstall`` does not
    know those files, and the ``gpudedup/`` folder they leave in site-packages is then imported
    as a namespace package ahead of a later editable install.
    """
    import numba

    if numba.config.CACHE_DIR:  # type: ignore[attr-defined]  # numba makes its settings at run time
        return Path(numba.config.CACHE_DIR)  # type: ignore[attr-defined]
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "gpudedup" / "numba"


@contextlib.contextmanager
def _numba_cache_dir(folder: Path) -> Iterator[None]:
    # numba picks a function's cache folder when the function is decorated, from the
    # process-wide config.CACHE_DIR; it is set only while ours are, so that other numba users in
    # the process are untouched. Where the folder cannot be written, numba falls back to its
    # own choice.
    import numba

    settings: Any = numba.config
    saved = settings.CACHE_DIR
    settings.CACHE_DIR = str(folder)
    try:
        yield
    finally:
        settings.CACHE_DIR = saved


# The room the kernels' cache needs free where it is written (about 0.6 MB for one version's
# kernels, measured on Linux x86-64): where less is free, or the folder cannot be made or written
# to, the kernels are compiled in each process (some seconds) rather than stop a run half-way
# through numba's save.
CACHE_ROOM = 4 << 20


def cache_writable() -> bool:
    """Whether the kernels' cache (cache_folder) can be written, with CACHE_ROOM free there;
    where not, says so once on stderr (the kernels are then compiled in each process). Asked
    once per process."""
    with _start.cache_lock:
        if _start.cache_writable is None:
            folder = cache_folder()
            try:
                folder.mkdir(parents=True, exist_ok=True)
                usage = os.statvfs(folder)
                room = usage.f_bavail * usage.f_frsize
                reason = "" if os.access(folder, os.W_OK) else "it cannot be written to"
                if not reason and room < CACHE_ROOM:
                    reason = f"{room / 2**20:.1f} MB free, {CACHE_ROOM >> 20} needed"
            except OSError as error:
                reason = error.strerror or str(error)
            _start.cache_writable = not reason
            if reason:
                print(f"gpudedup: the CPU kernels' cache {folder} is not usable ({reason}): they are compiled in each "
                      "run; set XDG_CACHE_HOME (or NUMBA_CACHE_DIR) to a folder with room", file=sys.stderr, flush=True)
        return _start.cache_writable


def kernel(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """Decorator: ``numba.njit(cache=True, nogil=True, **options)``, cached in ``cache_folder()``
    where it can be written (cache_writable), else compiled afresh in each process."""
    import numba

    def decorate(function: Callable[..., Any]) -> Any:
        if not cache_writable():
            return numba.njit(nogil=True, **options)(function)
        with _numba_cache_dir(cache_folder()):
            return numba.njit(cache=True, nogil=True, **options)(function)

    return decorate
