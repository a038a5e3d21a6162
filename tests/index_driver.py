"""``gpudedup ARGS`` in a child process that a test stops at a chosen step of its file-system
work inside a persistent index (tests/test_index_faults.py).

    python tests/index_driver.py INDEX_ROOT gpudedup-args...    one run
    python tests/index_driver.py --serve                        many runs (below)

A step is one call, on a path inside INDEX_ROOT, of what a writer changes the index with:
os.replace, os.rename, os.mkdir, os.unlink, os.rmdir, os.fsync, shutil.rmtree, np.save and
pyarrow.parquet.write_table. Environment of a run:

- TEST_INDEX_EVENTS=FILE: each step is appended to FILE as one line "<call> <path relative to
  INDEX_ROOT>" before it happens (flushed, so a test reads the steps of a killed run too);
- TEST_INDEX_AT: the step to stop at, its number (1 = the first step) or a text that the step's
  line contains (its first such step);
- TEST_INDEX_ACTION: ``kill`` (SIGKILL itself before the step; at an np.save, after writing
  half of the file's bytes, as a death in the middle of a write), ``interrupt`` (send itself
  SIGINT before the step, as Ctrl-C there) or ``pause`` (write "paused <step>" to stderr and
  wait for a line on stdin, then go on).

uuid.uuid4 gives the same sequence in every run, so an uninterrupted run and a killed one name
their files alike, and their committed states can be compared byte for byte.

``--serve``: a fork server. It imports what the command needs once, then reads one JSON request
a line on stdin -- {"root", "args", "env", "cwd", "stderr": a file, "kill_after": seconds or
null} -- forks a child that runs the command as the entry point does (gpudedup.console.main),
SIGKILLs it after ``kill_after`` seconds if it is still running, and answers {"status": exit
code, or minus the signal}. The children are real processes killed by a real SIGKILL; only the
second or two of imports each would spend before doing anything to the index is saved, and
the report's figures (``serve``).
"""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import signal
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

import gpudedup.index.files as index_files

CONFIG: dict = {"root": None, "events": None, "at": None, "action": "kill", "steps": 0}
_uuids = [random.Random()]


def configure(root: str, env: dict) -> None:
    """Set up a run: its index root and the TEST_INDEX_* settings; the step count and the
    uuid sequence start again."""
    CONFIG.update(root=Path(root).resolve(), events=env.get("TEST_INDEX_EVENTS"), at=env.get("TEST_INDEX_AT"),
                  action=env.get("TEST_INDEX_ACTION", "kill"), steps=0)
    _uuids[0] = random.Random(20240614)


def _inside(path) -> str | None:
    """``path`` relative to the index root, or None when it is elsewhere (an output directory)."""
    try:
        resolved = Path(os.fsdecode(path)).resolve()
    except (TypeError, ValueError, OSError):
        return None
    root = CONFIG["root"]
    return str(resolved.relative_to(root)) if root is not None and resolved.is_relative_to(root) else None


def _step(call: str, path, half_write=None) -> None:
    """Count a step on ``path``; record it, and kill or pause here when it is the chosen one.
    ``half_write``: for a step that writes a file, writes half of it (before a kill)."""
    where = _inside(path)
    if where is None:
        return
    CONFIG["steps"] += 1
    line = f"{call} {where}"
    if CONFIG["events"]:
        with open(CONFIG["events"], "a", encoding="utf-8") as events:
            events.write(line + "\n")
    at = CONFIG["at"]
    if at is None or not (str(CONFIG["steps"]) == at if at.isdigit() else at in line):
        return
    CONFIG["at"] = None  # a text names its first step only
    if CONFIG["action"] == "pause":
        sys.stderr.write(f"paused {line}\n")
        sys.stderr.flush()
        sys.stdin.readline()
        return
    if CONFIG["action"] == "interrupt":
        os.kill(os.getpid(), signal.SIGINT)  # (its handler runs here, or once a held block is over)
        return
    if half_write is not None:
        half_write()
    os.kill(os.getpid(), signal.SIGKILL)


def _wrap_path_call(module, name: str) -> None:
    real = getattr(module, name)

    def wrapped(path, *args, **kwargs):
        _step(name, path)
        return real(path, *args, **kwargs)

    setattr(module, name, wrapped)


for _name in ("replace", "rename", "mkdir", "unlink", "rmdir"):
    _wrap_path_call(os, _name)
_wrap_path_call(shutil, "rmtree")

_real_fsync = os.fsync


def _fsync(descriptor: int) -> None:
    _step("fsync", os.readlink(f"/proc/self/fd/{descriptor}"))
    _real_fsync(descriptor)


os.fsync = _fsync

_real_write_npy = index_files.write_npy


def _write_npy(path, array):
    """A segment's array file: its step's action may write half of it first (then die)."""
    def half_write() -> None:
        buffer = io.BytesIO()
        np.save(buffer, np.ascontiguousarray(array))
        data = buffer.getvalue()
        with open(path, "wb") as partial:
            partial.write(data[:len(data) // 2])

    _step("save", path, half_write)
    return _real_write_npy(path, array)


index_files.write_npy = _write_npy  # write_segment looks the name up in its module when it runs

_real_write_table = pq.write_table


def _write_table(table, where, *args, **kwargs):
    _step("write_table", where)
    return _real_write_table(table, where, *args, **kwargs)


pq.write_table = _write_table
uuid.uuid4 = lambda: uuid.UUID(int=_uuids[0].getrandbits(128), version=4)


def run_command(args: list[str]) -> int:
    """The command as the `gpudedup` entry point runs it; its exit code."""
    from gpudedup.console import main

    sys.argv = ["gpudedup", *args]
    try:
        main()
    except SystemExit as leaving:
        code = leaving.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


def serve() -> None:
    """The fork server (see the module docstring)."""
    # What the index's commands import when they start, once for every child. Nothing is
    # computed here: a fork copies only the calling thread.
    import gpudedup.api  # noqa: F401
    import gpudedup.cli  # noqa: F401
    import gpudedup.results.html_report  # noqa: F401
    import gpudedup.index  # noqa: F401
    import gpudedup.interrupts  # noqa: F401

    for request_line in sys.stdin:
        request = json.loads(request_line)
        # Made here, not by the child: a child killed before it opens its stderr leaves it empty.
        os.close(os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
        pid = os.fork()
        if pid == 0:
            try:
                os.chdir(request["cwd"])
                os.environ.update(request["env"])
                configure(request["root"], request["env"])
                error = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                null = os.open(os.devnull, os.O_RDWR)
                os.dup2(null, 0)
                os.dup2(null, 1)
                os.dup2(error, 2)
                code = run_command(request["args"])
                sys.stdout.flush()
                sys.stderr.flush()
            except BaseException:  # noqa: BLE001 -- the child must never return into the server loop
                import traceback

                traceback.print_exc()
                code = 99
            os._exit(code)
        deadline = None if request.get("kill_after") is None else time.monotonic() + request["kill_after"]
        while True:
            done, status = os.waitpid(pid, os.WNOHANG if deadline is not None else 0)
            if done:
                break
            if deadline is not None and time.monotonic() >= deadline:
                os.kill(pid, signal.SIGKILL)
                deadline = None  # then wait for it
            else:
                time.sleep(0.001)
        code = os.waitstatus_to_exitcode(status)
        sys.stdout.write(json.dumps({"status": code}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        serve()
    else:
        configure(sys.argv[1], dict(os.environ))
        sys.exit(run_command(sys.argv[2:]))
