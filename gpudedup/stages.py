"""Time and peak memory per stage, and progress reporting, for the report and the CLI.

A run says which stage it is in: when the environment variable GPUDEDUP_STAGE_EVENTS names a
file, every stage appends its name and a newline to that file as it starts (the stages of a
staged run's shards once per shard, on whichever process or Dask worker runs them). Tests use
it to signal a run in a chosen stage instead of guessing from elapsed time; a tool watching a
long run can tail it. Unset, it costs one dictionary look-up per stage.
"""

from __future__ import annotations

import importlib.util
import os
import resource
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional


def _read_peak_rss_bytes() -> int:
    """The process's resident-set high-water mark (Linux VmHWM; ru_maxrss elsewhere)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


STAGE_EVENTS_VARIABLE = "GPUDEDUP_STAGE_EVENTS"


def announce_stage(name: str) -> None:
    """Append ``name`` and a newline to the file named by GPUDEDUP_STAGE_EVENTS, if set.

    One write of a short line with O_APPEND: lines from several processes (Dask workers) never
    interleave. O_NONBLOCK, so that a FIFO without a reader (or a full one) never blocks the
    run. A file that cannot be written is ignored: watching a run must never stop it.
    """
    path = os.environ.get(STAGE_EVENTS_VARIABLE)
    if not path:
        return
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644)
    except OSError:
        return
    try:
        os.write(descriptor, f"{name}\n".encode())
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _reset_peak_rss() -> bool:
    """Start a new high-water mark (Linux >= 4.0); False where that is not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


# Seconds this process has spent compiling kernels (compiled.py adds them, as numba reports its
# compilations): a stage's seconds leave them out, and a run's log gives them as "compile".
_compiling = {"seconds": 0.0}
_compiling_lock = threading.Lock()


def add_compile_seconds(seconds: float) -> None:
    """Count ``seconds`` of kernel compilation (compiled.py's listener of numba's compilations)."""
    with _compiling_lock:
        _compiling["seconds"] += seconds


def compile_seconds() -> float:
    """The seconds this process has spent compiling kernels so far."""
    with _compiling_lock:
        return _compiling["seconds"]


class StageLog:
    """Seconds and peak resident memory of each named stage, accumulated over its runs.

    Peak memory is the process's high-water mark while the stage ran (everything alive then,
    not only what the stage allocated); where the mark cannot be reset it is the high-water
    mark of the run so far. Parts of a parallel stage are ``timed``: their busy seconds add up
    over the threads and have no memory figure of their own. The first run after an install
    compiles the CPU kernels inside whichever stage first calls each: those seconds are taken
    out of that stage and logged as "compile" (compile_seconds).
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.peak_bytes: dict[str, int] = {}
        self.busy_seconds: dict[str, float] = {}
        self._started: dict[str, float] = {}
        self._lock = threading.Lock()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time stage ``name`` and record its peak memory; it is announced as it starts
        (announce_stage)."""
        _reset_peak_rss()
        start = self._started[name] = time.perf_counter()
        compiled_before = compile_seconds()
        announce_stage(name)
        try:
            yield
        finally:
            peak = _read_peak_rss_bytes()
            compiling = compile_seconds() - compiled_before
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start - compiling
            self.peak_bytes[name] = max(self.peak_bytes.get(name, 0), peak)
            if compiling > 0:
                self.seconds["compile"] = self.seconds.get("compile", 0.0) + compiling
                self.peak_bytes["compile"] = max(self.peak_bytes.get("compile", 0), peak)

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """Add the time of a block to stage ``name`` (thread-safe; no memory reading). Used for
        the parts of a parallel stage, whose seconds then add up over the worker threads."""
        start = time.perf_counter()
        try:
            yield
        finally:
            with self._lock:
                self.busy_seconds[name] = self.busy_seconds.get(name, 0.0) + time.perf_counter() - start

    def snapshot(self, name: str) -> dict:
        """The figures of stage ``name`` while it is still running (seconds since it began)."""
        return {"seconds": round(time.perf_counter() - self._started[name], 4),
                "peak_rss_mb": round(_read_peak_rss_bytes() / 2**20, 1)}

    def as_dict(self) -> dict:
        stages = {
            name: {"seconds": round(self.seconds[name], 4),
                   "peak_rss_mb": round(self.peak_bytes[name] / 2**20, 1)}
            for name in self.seconds
        }
        for name, seconds in self.busy_seconds.items():
            stages[name] = {"busy_seconds": round(seconds, 4)}
        return stages

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds.values())

    @property
    def peak_rss_mb(self) -> float:
        return round(max(self.peak_bytes.values(), default=0) / 2**20, 1)


class Progress:
    """Progress of the long stages; this base class shows nothing (library use, --quiet).
    A stage's bar counts ``total`` of what ``unit`` names (documents, pairs, bands), so that
    its figures read as what they are beside the run's summary."""

    def start(self, description: str, total: int, unit: str = "documents") -> None:
        pass

    def advance(self, amount: int) -> None:
        pass

    def stop(self) -> None:
        pass


class RichProgress(Progress):
    """A progress bar per stage on stderr (rich), for the CLI and for notebooks."""

    def __init__(self):
        from rich.console import Console  # (start-up: a progress display is made only where it shows)
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress as Bars,
                                   TextColumn, TimeElapsedColumn)

        self._bars = Bars(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(),
                          TextColumn("{task.fields[unit]:<9}"), TimeElapsedColumn(), console=Console(stderr=True),
                          transient=False)
        self._task = None

    def start(self, description: str, total: int, unit: str = "documents") -> None:
        if self._task is None:
            self._bars.start()
        elif not self._bars.tasks[self._task].finished:
            self._bars.update(self._task, completed=self._bars.tasks[self._task].total)
        self._task = self._bars.add_task(description, total=max(total, 1), unit=unit)

    def advance(self, amount: int) -> None:
        self._bars.advance(self._task, amount)

    def stop(self) -> None:
        if self._task is not None:
            self._bars.update(self._task, completed=self._bars.tasks[self._task].total)
            self._bars.stop()


class NotebookTextProgress(Progress):
    """Progress as plain text in a notebook cell, one line per stage (description, done of
    total, seconds), the cell's output updated in place (IPython's display handles): the display
    where rich's bars, which need ipywidgets in a notebook, cannot draw."""

    INTERVAL = 0.25  # seconds between two updates of the cell (each is a message to the front end)

    def __init__(self) -> None:
        self._lines: list[list] = []  # [description, completed, total, unit, start, end or None] per stage
        self._handle = None
        self._shown_at = 0.0
        self._lock = threading.Lock()

    def start(self, description: str, total: int, unit: str = "documents") -> None:
        with self._lock:
            self._finish_last()
            self._lines.append([description, 0, max(total, 1), unit, time.perf_counter(), None])
            self._show(force=True)

    def advance(self, amount: int) -> None:
        with self._lock:
            if self._lines:
                self._lines[-1][1] += amount
                self._show(force=False)

    def stop(self) -> None:
        with self._lock:
            self._finish_last()
            self._show(force=True)

    def text(self) -> str:
        """The lines as shown: each stage's description, done of total, unit and seconds."""
        width = max((len(str(line[2])) for line in self._lines), default=1)
        now = time.perf_counter()
        return "\n".join(f"{d:<28} {c:>{width}}/{t} {u:<9}  {seconds_text((end or now) - start)} s"
                          for d, c, t, u, start, end in self._lines)

    def _finish_last(self) -> None:
        if self._lines and self._lines[-1][5] is None:
            last = self._lines[-1]
            last[1], last[5] = last[2], time.perf_counter()

    def _show(self, force: bool) -> None:
        now = time.perf_counter()
        if not force and now - self._shown_at < self.INTERVAL:
            return
        self._shown_at = now
        from IPython.display import display  # (loaded: the caller runs in an IPython kernel)

        content = {"text/plain": self.text()}
        if self._handle is None:
            self._handle = display(content, raw=True, display_id=True)
        else:
            self._handle.update(content, raw=True)


def in_notebook() -> bool:
    """Whether this process is an IPython kernel (Jupyter, VS Code, Colab): a notebook shows
    what the code displays. IPython is not imported here: a kernel has loaded it already."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return getattr(shell, "kernel", None) is not None


def progress_display(shown: Optional[bool]) -> Progress:
    """The progress display of ``progress=``: True shows one, False none, None (the Python
    API's default) one where a notebook shows it (in_notebook). In a notebook rich's bars draw
    in a widget (ipywidgets); without ipywidgets, lines of text (NotebookTextProgress)."""
    notebook = in_notebook()
    if not (notebook if shown is None else shown):
        return Progress()
    if notebook and importlib.util.find_spec("ipywidgets") is None:
        return NotebookTextProgress()
    return RichProgress()


def seconds_text(value: float) -> str:
    """A time in seconds as the terminal and report.html show it: three significant places
    or so (0.842, 12.35, 123.4)."""
    if value >= 100:
        return f"{value:,.1f}"
    if value >= 10:
        return f"{value:.2f}"
    return f"{value:.3f}"
