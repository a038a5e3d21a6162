"""Runs of the gpudedup CLI in a subprocess, and waiting until such a run is in a chosen stage.

A run told GPUDEDUP_STAGE_EVENTS=FILE appends each stage's name to FILE as the stage starts
(gpudedup/stages.py). A test waits for that event, then sends its signal: the signal lands in
the stage the test chose on a fast machine and on a slow one alike, where a delay guessed from
a measured run lands anywhere. The limits below only keep a run that never gets there from
hanging the suite: they fail the test with a message and are never what a test checks.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import pytest

from gpudedup.stages import STAGE_EVENTS_VARIABLE

# Seconds a run may take to reach a stage, or to exit once signalled: far beyond any run here.
WAIT_LIMIT = 300.0
POLL_SECONDS = 0.005  # how often the events file is read while waiting (not a bound on anything)


def with_stage_events(events: Path, env: Optional[dict] = None) -> dict[str, str]:
    """The environment of a run that writes its stage events to ``events`` (started empty)."""
    events.parent.mkdir(parents=True, exist_ok=True)
    events.write_text("")
    return {**os.environ, **(env or {}), STAGE_EVENTS_VARIABLE: str(events)}


def stages_begun(events: Path) -> list[str]:
    """The stages a run has begun, in order (a line still being written is left out)."""
    try:
        text = events.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]


def wait_until(reached: Callable[[], bool], process: subprocess.Popen, what: str,
               describe: Callable[[], str] = lambda: "", limit: float = WAIT_LIMIT) -> bool:
    """Wait until ``reached()`` (True returned), or until ``process`` has ended without it
    (False: the caller decides whether that may happen). Fails the test after ``limit`` s."""
    deadline = time.monotonic() + limit
    while not reached():
        if process.poll() is not None:
            return reached()  # it may have got there just before it ended
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"the run had not {what} after {limit:.0f} s (a hang?){describe()}")
        time.sleep(POLL_SECONDS)
    return True


def wait_for_stage(process: subprocess.Popen, events: Path, stage: str, occurrence: int = 1) -> None:
    """Return once ``process`` has begun ``stage`` for the ``occurrence``-th time; fail if it
    ended before that."""
    def reached() -> bool:
        return stages_begun(events).count(stage) >= occurrence

    def describe() -> str:
        return f"; the stages it began: {stages_begun(events)}"

    what = f"begun stage {stage!r} (#{occurrence})"
    if not wait_until(reached, process, what, describe):
        pytest.fail(f"the run ended (exit code {process.returncode}) before it had {what}{describe()}")


def finish(process: subprocess.Popen, limit: float = WAIT_LIMIT) -> str:
    """Wait for ``process`` to exit; its stderr. Fails the test (and kills it) after ``limit`` s."""
    try:
        _, stderr = process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail(f"the run had not exited after {limit:.0f} s (a hang?)")
    return stderr or ""


def cli_process(args: list[str], cwd: Path, env: Optional[dict] = None, own_group: bool = False) -> subprocess.Popen:
    """``gpudedup ARGS`` in a subprocess, through the entry point (console.main: its signal
    handlers), stderr piped as text, stdout discarded. Python's
    fault handler is on, so a process that aborts (SIGABRT, SIGSEGV) prints every thread's
    stack into the stderr a failing assertion shows. own_group: in a process group of its own
    (a session: its pid is the group's id), which the test signals as a terminal signals its
    foreground group."""
    return subprocess.Popen([sys.executable, "-X", "faulthandler", "-c",
                             "from gpudedup.console import main; main()", *args],
                            cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=own_group)


def kill_then_resume(args: list[str], cwd: Path, events_dir: Path, points: list[tuple[str, int]],
                     out: Path | Callable[[], bool]) -> int:
    """Run ``gpudedup ARGS`` (a run that resumes: ``--resume``, writing ``out``) once per kill
    point (stage, occurrence), each killed with SIGKILL as that stage begins, then once more to
    the end unless a run finished first (a kill that came after the output's commit). ``out``:
    the local output folder, or a function saying whether the output is finished (one on
    object storage). Returns how many runs were killed; the last run must have succeeded."""
    finished = out.exists if isinstance(out, Path) else out
    killed = 0
    for attempt, (stage, occurrence) in enumerate(points):
        events = events_dir / f"{attempt}.txt"
        run = cli_process(args, cwd, with_stage_events(events))
        wait_for_stage(run, events, stage, occurrence)
        run.send_signal(signal.SIGKILL)
        stderr = finish(run)
        assert run.returncode in (0, -signal.SIGKILL), (run.returncode, stderr)
        killed += run.returncode == -signal.SIGKILL
        print(f"SIGKILL as {stage} #{occurrence} began: rc {run.returncode}, stages begun {stages_begun(events)}")
        if finished():  # the kill came after the write's commit: the output is complete (checked by the caller)
            return killed
    final = cli_process(args, cwd)
    stderr = finish(final)
    assert final.returncode == 0, stderr
    return killed
