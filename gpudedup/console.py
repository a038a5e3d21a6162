"""The `gpudedup` command's entry point: the signal handlers first, then the slower imports
(typer, rich, numpy, pyarrow, scipy: about half a second), so that a Ctrl-C or SIGTERM at any
moment after start-up ends the command with one line and no traceback (interrupts.py)."""

from __future__ import annotations


def main() -> None:
    from .interrupts import install_signal_handlers  # the standard library only

    install_signal_handlers()
    from .cli import main as run_command

    run_command()
