"""The `gpudedup` command's entry point: the signal handlers first, then everything else, so
that a Ctrl-C or SIGTERM at any moment after start-up ends the command with one line and no
traceback (interrupts.py). The cli package itself loads only typer and rich; a command that runs imports
numpy, pyarrow, scipy and the api when it starts (a few tenths of a second), still covered."""

from __future__ import annotations

import atexit
import os
import sys
from typing import Optional

from .interrupts import install_signal_handlers  # (the standard library only)

# The exit code of the command that run() ran, once it has ended with one.
_ended_with: list[Optional[int]] = [None]


def main() -> None:
    """Run the command of sys.argv; it ends by SystemExit with its exit code."""
    install_signal_handlers()
    from .cli import main as run_command  # (start-up: the signal handlers are installed before the rest loads)

    run_command()


def run() -> None:
    """The process's entry point (the `gpudedup` script, ``python -m gpudedup``): main, then the
    process ends without the interpreter's teardown. Freeing every module and object of numpy,
    pyarrow and the package is a share of a short run's time that leaves nothing done: the
    outputs are written, closed and renamed before the command returns, and the exit comes
    after the other atexit handlers (a Dask cluster's, temporary folders') and the threads'
    joins; only a handler registered before run (a .pth file's at start-up, such as
    coverage's for subprocesses) does not run. Not for a process that calls main among other
    work: use main there."""
    atexit.register(_exit_without_teardown)  # (registered first: it runs after every other handler)
    try:
        main()
        _ended_with[0] = 0
    except SystemExit as leaving:
        if leaving.code is None or isinstance(leaving.code, int):
            _ended_with[0] = leaving.code or 0
        raise


def _exit_without_teardown() -> None:
    """End the process with run()'s exit code, the standard streams flushed; where it has none
    (an error that escaped), or a stream cannot be flushed (a closed pipe), the interpreter's
    own exit goes on and says so as it would."""
    code = _ended_with[0]
    if code is None:
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):  # (AttributeError: a stream that is None)
        return
    os._exit(code)
