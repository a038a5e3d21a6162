"""Errors that are the user's to fix: the CLI prints them as one line and exits with code 2.

Anything else that escapes is a bug in gpudedup and keeps its traceback.

A message names a parameter as the Python API takes it, a keyword argument: ``bands=`` alone, or
with the value given, ``bands=10`` (the value's repr: ``backend='gpu'``; a flag given,
``overwrite=True``). The command line shows the same message in its own words, each keyword
argument that is an option of the running command as that option (``--bands``, ``--bands 10``,
``--backend gpu``, ``--overwrite``): cli/common.py's in_option_words, in one place for every
message. So a message is written once, and neither interface names the other's words.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator

# How the interface running now says a message (the identity for the Python API; the command
# line's in_option_words inside a command): for the messages a run writes into its outputs
# (errors.jsonl's reasons), which the command line does not print itself.
_words: ContextVar[Callable[[str], str]] = ContextVar("message_words", default=lambda message: message)


def in_interface_words(message: str) -> str:
    """``message`` as the interface running now says it (the module docstring)."""
    return _words.get()(message)


@contextmanager
def spoken_as(words: Callable[[str], str]) -> Iterator[None]:
    """Inside: in_interface_words is ``words`` (a command line's, for its command)."""
    token = _words.set(words)
    try:
        yield
    finally:
        _words.reset(token)


class GpudedupError(Exception):
    """A problem with the input, the parameters or the environment, explained in its message."""


class ParameterError(GpudedupError, ValueError):
    """A parameter is out of range: the message names it, its value and what is allowed."""


class InputError(GpudedupError):
    """An input file or record cannot be used: the message names the file, line or field."""


class DamagedIndexError(InputError):
    """A corrupt, truncated or foreign persistent index (exit code 2, one line naming the file)."""


class OutputError(GpudedupError):
    """The output location cannot be written as asked (exists, not a directory, ...)."""


class BackendUnavailableError(GpudedupError):
    """The requested backend cannot run here (for example backend="gpu" without a GPU)."""


class MemoryLimitError(GpudedupError):
    """A stage would need more memory than max_memory allows: said before it starts."""


class ClusterError(GpudedupError):
    """The Dask cluster failed under a run (a worker lost, the scheduler gone): ``failure``,
    what failed, and ``advice``, how to go on (by default: the stages it finished stay in the
    work directory, so the run can be resumed)."""

    def __init__(self, failure: str,
                 advice: str = "the finished stages are in the work directory: run again with resume=True"):
        super().__init__(failure, advice)
        self.failure = failure

    def __str__(self) -> str:
        return "; ".join(self.args)
