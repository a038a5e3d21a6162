"""Signals during a command: SIGINT (Ctrl-C), SIGTERM and SIGHUP end a run cleanly.

Python's default for SIGTERM and SIGHUP kills the process without running finally blocks, so
an interrupted run's staging directory would stay behind. Here the three raise Interrupted
inside a command, the output's staging directory is removed on the way out, and the CLI ends
with one line and exit code 128 + the signal (130, 143, 129). tests/test_interrupt.py kills
real runs as seeded random stages start (gpudedup/stages.py announces them) and at chosen
points, and checks what is left.

Python runs a signal's handler in the main thread, between two of its bytecodes: a main thread
blocked inside a C extension (a file system's client waiting on a network that never answers)
would hold the signal until the call returns. A watcher thread (``_watch``) learns of each
signal as it arrives (signal.set_wakeup_fd) and, when the main thread has not taken it within
UNTAKEN_SIGNAL_S, ends the process itself with the same line and exit code. It does so only
where an interrupt may end the command anyway: never while a commit or a clean-up holds signals
back (io/commit.py's signals_held), so the output is the previous complete one or none, as
after a SIGKILL (a staging directory left behind is removed by a later run).
"""

from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
import time

# How long a signal may wait for the main thread to take it before the process ends without
# it: long enough for the main thread to come back to Python between two calls into numpy,
# pyarrow or a kernel on one batch (well under a second each, a few on a loaded machine), so
# that a run interrupted anywhere else still ends through its handler and its clean-up; short
# enough that a supervisor's SIGTERM ends the process before its SIGKILL follows (docker stop
# waits 10 s).
UNTAKEN_SIGNAL_S = 5.0
# The signals a command ends on, by number.
ENDING_SIGNALS = frozenset(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP during a command, as an exception: finally blocks run (the
    output's staging directory is removed) and the command ends with one line and exit code
    128 + the signal number."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


_phase = "starting"  # "running" inside a command, "done" after it
_written = None  # the output a command has committed (io.commit.atomic_output_dir), if any
_replacing = None  # what a command leaves once it began to change an output on object storage (note_replacing)
_last_signal = None  # the signal last raised as Interrupted
_index_state = None  # what an index add leaves of its index, in words (note_index)
_index_state_written = None  # the same once its output is written (note_index's once_written)
_in_hook = False  # inside _unraisable
_taken = 0  # how many signals the main thread has taken (_on_signal has run), for _watch


def set_phase(phase: str) -> None:
    global _phase
    _phase = phase


def note_written(path) -> None:
    """Record that ``path`` now holds a command's complete output (called at the commit, with
    signals held), so that an interrupt after it can say so (None: a command starts)."""
    global _written, _replacing
    _written, _replacing = path, None


def note_replacing(path, previous: bool) -> str:
    """Record that objects of an output on object storage (which has no rename) begin to change
    at ``path``: the old output's deleted, where there is one (``previous``), then the new one's
    moved in. Returns what a command stopped from here on leaves, in words."""
    global _replacing
    if previous:
        _replacing = f"the previous output at {path} was removed and the new one is incomplete"
    else:
        _replacing = f"the output at {path} is incomplete"
    _replacing += " (it has no report.json)"
    return _replacing


def note_index(state, once_written=None) -> None:
    """Record what an index add leaves of its index from now on, in words, for an interrupt's
    line (None: nothing to say): unchanged before its commit, the new generation after it;
    ``once_written``: what to say from the instant its output is written (note_written, in the
    commit's held block), where ``state`` is None."""
    global _index_state, _index_state_written
    _index_state, _index_state_written = state, once_written


def interrupted_outcome(written=None) -> str:
    """What an interrupted command leaves, in words: its output (``written``, or the one it
    recorded), an output on object storage half replaced, or nothing; and an index add's index
    (note_index)."""
    written = written or _written
    outcome = f"the results were written to {written}" if written else _replacing or "nothing was written"
    index_state = _index_state if _index_state is not None or not written else _index_state_written
    return outcome if index_state is None else f"{outcome}; {index_state}"


def last_signal():
    return _last_signal


def signal_word(signum: int) -> str:
    return "interrupted" if signum == signal.SIGINT else f"terminated ({signal.Signals(signum).name})"


def _on_signal(signum, frame):
    global _last_signal, _taken
    _taken += 1
    if _in_hook:  # raised here it would be dropped like the one being resent: later, then
        _resend_later(signum)
        return
    if _phase == "running":
        _last_signal = signum
        raise Interrupted(signum)
    if _phase == "starting":  # typer is parsing: nothing to clean up (and typer would turn an
        # exception here into a silent exit 130)
        os.write(2, f"{signal_word(signum)}: nothing was written\n".encode())
        os._exit(128 + signum)
    # "done": the command has finished; the process ends as it was going to.


def _unraisable(unraisable, _interrupted=Interrupted, _default=sys.__unraisablehook__) -> None:
    """A signal handled inside a __del__ or a callback, where Python can only print the
    exception and drop it: send it again, from another thread 10 ms later (once this hook and
    the __del__ have returned), so that it is raised where it stops the run. (The defaults
    keep what it needs while the interpreter shuts down and clears module globals.)"""
    global _in_hook
    _in_hook = True
    try:
        if isinstance(unraisable.exc_value, _interrupted):
            _resend_later(unraisable.exc_value.signum)
        else:
            _default(unraisable)
    finally:
        _in_hook = False


def _resend_later(signum: int) -> None:
    # A bare thread, not threading.Timer: Timer.start() waits until its thread runs, and under
    # load the signal could then come back while this hook still runs (and be dropped again).
    def resend():
        time.sleep(0.01)
        os.kill(os.getpid(), signum)

    _thread.start_new_thread(resend, ())


def _watch(reader: int) -> None:
    """The watcher thread: read the number of each signal as it arrives (written to ``reader``
    by Python's C-level handler, set_wakeup_fd) and, for one that ends a command, wait
    UNTAKEN_SIGNAL_S for the main thread to take it. Where it has not and an interrupt is
    what the main thread would do (untaken), write the command's line and end the process
    with 128 + the signal, as _on_signal and the CLI would."""
    while True:
        seen = _taken
        try:
            arrived = os.read(reader, 64)
        except OSError:
            return
        if not arrived:
            return
        ours = [signum for signum in arrived if signum in ENDING_SIGNALS]
        if not ours:
            continue
        deadline = time.monotonic() + UNTAKEN_SIGNAL_S
        while _taken == seen and time.monotonic() < deadline:
            time.sleep(0.05)
        if _taken == seen and untaken(ours[-1]):
            os.write(2, f"{signal_word(ours[-1])}: {interrupted_outcome()}\n".encode())
            os._exit(128 + ours[-1])


def untaken(signum: int) -> bool:
    """Whether a signal the main thread has not taken should end the process from the watcher:
    a command is starting or running, no interrupt is already ending it (_last_signal), and
    _on_signal is the signal's handler (not io/commit.py's signals_held, which holds signals
    back while a commit or a clean-up must not be cut short, nor a handler of someone else's)."""
    return _phase in ("starting", "running") and _last_signal is None and signal.getsignal(signum) is _on_signal


def _stop_watching_in_child() -> None:
    # A forked child shares the watcher's pipe but not its thread: its signals must not end
    # the parent.
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:  # (forked from a thread other than the main one)
        pass


def watch_signals() -> None:
    """Start the watcher thread (_watch) on a pipe that Python's C-level signal handler writes
    each signal's number to, unless something else has a wakeup fd already. Main thread only."""
    reader, writer = os.pipe()
    os.set_blocking(writer, False)  # (set_wakeup_fd's requirement: a signal never blocks on it)
    theirs = signal.set_wakeup_fd(writer, warn_on_full_buffer=False)
    if theirs != -1:  # (someone else's: put it back, unwatched)
        signal.set_wakeup_fd(theirs)
        os.close(reader)
        os.close(writer)
        return
    os.register_at_fork(after_in_child=_stop_watching_in_child)
    threading.Thread(target=_watch, args=(reader,), name="gpudedup signal watcher", daemon=True).start()


def install_signal_handlers() -> None:
    """Ctrl-C, SIGTERM and SIGHUP end a run cleanly, a main thread blocked in a C extension
    included (watch_signals). Main thread only; handlers set by others, and ignored signals
    (nohup), are left alone."""
    if threading.current_thread() is not threading.main_thread():
        return
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(signum, _on_signal)
    if sys.unraisablehook is sys.__unraisablehook__:
        sys.unraisablehook = _unraisable
    watch_signals()
