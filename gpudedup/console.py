"""The `gpudedup` command's entry point: the signal handlers first, then everything else, so
that a Ctrl-C or SIGTERM at any moment after start-up ends the command with one line and no
traceback (interrupts.py). The cli package itself loads only typer and rich; a command that runs imports
numpy, pyarrow, scipy and the api when it starts (a few tenths of a second), still covered."""

from __future__ import annotations

from .interrupts import install_signal_handlers  # (the standard library only)


def main() -> None:
    install_signal_handlers()
    from .cli import main as run_command  # (start-up: the signal handlers are installed before the rest loads)

    run_command()
