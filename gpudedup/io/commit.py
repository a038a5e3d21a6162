"""Committing a run's results into a local output directory, atomically, never replacing what
is not a gpudedup output.

An interrupted, killed or failed run leaves either the previous complete output or none, never
a half-written directory that looks complete; and nothing at OUT that is not a gpudedup output
is ever deleted, whatever happens at OUT during the run. ``atomic_output_dir`` does it in
this order:

1. ``check_output_dir`` (io/outputdir.py; the CLI and the API also call it, through ``check_run_places``,
   before any work): OUT must not be, hold or lie inside an input or the persistent index a
   run reads or writes; an existing OUT must be a directory, empty, or (``--overwrite``) a
   gpudedup output: it holds the marker OUTPUT_MARKER that every output carries, or a
   report.json of gpudedup's (outputs of versions before the marker).
2. Staging directories left beside OUT by earlier runs of this machine that were killed
   (SIGKILL, a power cut) and whose process is gone are removed (``remove_stale_staging``;
   io/staging.py names them).
3. A staging directory ``.<OUT name>.tmp-<host>-<pid>-<random>`` is made beside OUT, on the
   same file system, with ``mkdir`` mode 0o777 so that the user's umask applies to it as to
   any directory (``tempfile.mkdtemp`` would make it 0700, and OUT with it); the marker is
   written into it first.
4. The caller writes every file into it (report.json last).
5. The commit (``replace_dir``), with SIGINT, SIGTERM and SIGHUP held back (``signals_held``):
   - ``rename_no_replace(staging, OUT)``: on Linux renameat2 with RENAME_NOREPLACE, which
     puts the output in place in one step only where nothing is at OUT, whatever appeared
     there since the start. Where the system or the file system has no such rename, rename(2),
     which never replaces a non-empty directory or a non-directory with a directory; an empty
     directory that appears at OUT between its check and the rename is replaced (nothing is
     lost with it).
   - Something is at OUT: it is replaced only if it is still what the start allowed, an empty
     directory or (``--overwrite``) a gpudedup output. On Linux ``renameat2(staging, OUT,
     RENAME_EXCHANGE)`` swaps the two names in one step, so OUT is at every moment the old
     complete output or the new one; what was at OUT, now under the staging name where no one
     else looks, is checked again (it may have changed in the instant between the check and
     the swap) and deleted, or swapped back. Where the system or the file system cannot
     exchange: ``rename(OUT, .<OUT name>.old-<host>-<pid>-<random>)``, checked there,
     ``rename_no_replace(staging, OUT)`` (if that fails, the old one is renamed back), then the
     old one is deleted; OUT is absent between the two renames (microseconds, with signals held
     back, so only SIGKILL or a crash can stop there, leaving the old output whole under its
     .old- name).
   - Anything else at OUT (a directory that appeared during the run: another run's results,
     someone's files; a gpudedup output without ``--overwrite``) is left as it is: the results
     are renamed to a folder ``<OUT name>.results-<pid>-<random>`` beside OUT, which no clean-up
     ever deletes, and an OutputError names it (``results_beside``).
   A signal that arrives during the commit is delivered again right after it; the
   KeyboardInterrupt it raises then carries ``output_written`` (the path of OUT), so that a
   caller can say that the results were written.
6. Any exception or interrupt before the commit removes the staging directory (signals held
   back meanwhile; only while the name still holds the directory this run made) and goes on;
   OUT is untouched.

On object storage (OUT a URL) there is no rename: ``atomic_output_dir`` hands it to
io/remote_output.py's ``remote_output_dir``, which commits by order instead.

Nothing in this module, io/outputdir.py or io/remote_output.py reads what an input contains,
nor an existing OUT beyond listing it and reading its marker and report.json (to tell a
gpudedup output, and on object storage to delete it); OUT's name and parent come from the
caller only, never from the data.
"""

from __future__ import annotations

import ctypes
import errno
import os
import secrets
import shutil
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence

from ..errors import OutputError
from ..interrupts import note_written
from ..locks import hold_folder
from .outputdir import check_output_dir, occupied, write_marker
from .remote_output import remote_output_dir
from .staging import ASIDE, KEPT, new_staging_dir, remove_stale_staging
from .storage import Given, Location, Remote


@contextmanager
def atomic_output_dir(path: Given, overwrite: bool, inputs: Iterable[Given] = (),
                      index: Optional[Given] = None, files: Iterable[Location] = (),
                      index_files: Sequence[Given] = (), checked: bool = False) -> Iterator[Path]:
    """Yield a new staging directory (holding the marker only) to fill; when the block ends
    without an exception it takes the place of ``path`` (see the module's docstring for the
    exact sequence, and ``replace_dir``); when it raises (KeyboardInterrupt included) the
    staging directory is removed and ``path`` is untouched. inputs, index, files,
    index_files, checked: check_output_dir's. A URL: remote_output_dir."""
    out = check_output_dir(path, overwrite, inputs, index, files, index_files, checked)
    if isinstance(out, Remote):
        with remote_output_dir(out, overwrite) as local_staging:
            yield local_staging
        return
    parent = out.absolute().parent
    remove_stale_staging(parent, out.name)
    staging: Optional[Path] = None
    made: Optional[tuple[int, int]] = None  # (device, inode) of the staging directory this run made
    held: Optional[int] = None  # the lock on it (locks.hold_folder), which clean-ups see
    committed = False
    try:
        with signals_held():
            staging = new_staging_dir(parent, out.name, "tmp")
            held = hold_folder(staging)
            made = _identity(staging)
            write_marker(staging)
        yield staging
        with signals_held():
            replace_dir(staging, out, overwrite)
            committed = True
            note_written(out)  # an interrupt from here on must say that the results are there
    except BaseException as error:
        if committed:  # an interrupt delivered right after the commit: OUT is the new output
            if isinstance(error, KeyboardInterrupt):
                error.output_written = out  # type: ignore[attr-defined]  # read by the CLI (getattr)
            raise
        if staging is not None and _identity(staging) == made:  # (set aside: the name holds nothing now)
            with signals_held():
                remove_path(staging)
            _abandoned.append(staging)
        raise
    finally:
        if held is not None:
            os.close(held)


# Staging directories of writes that failed or were interrupted: a cluster's tasks may still be
# writing into one as it is removed (they are not stopped by the client's interrupt), so a run
# on Dask removes them again once its cluster is closed (remove_abandoned).
_abandoned: list[Path] = []


def remove_abandoned() -> None:
    """Remove again the staging directories of this process's failed writes (what a cluster's
    tasks wrote into them after they were removed): called once the cluster is closed."""
    while _abandoned:
        remove_path(_abandoned.pop())


def _identity(path: Path) -> Optional[tuple[int, int]]:
    """(device, inode) of what ``path`` names (not followed), or None where nothing is there."""
    try:
        status = os.lstat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino


def replace_dir(staging: Path, out: Path, overwrite: bool = True) -> None:
    """Put ``staging`` where ``out`` is, as the module's docstring says (step 5): in one step
    where nothing is there; where something is, only if ``occupied`` allows it (an empty
    directory, or with ``overwrite`` a gpudedup output), the old one deleted after the new one
    is in place and after it is checked again; otherwise OutputError, the results moved to a
    folder beside ``out`` (move_beside). What is not ours is never left under a staging name,
    which a later run's clean-up would remove."""
    if rename_no_replace(staging, out):
        return
    if out.is_symlink():  # (one that appeared during the run: nothing is replaced through a link, nor it)
        raise results_beside(staging, out, f"is a link to {os.readlink(out)}, which is not replaced (it changed "
                                           "during the run)")
    refused = occupied(out, overwrite)
    if refused is not None:
        raise results_beside(staging, out, f"{refused[0]} (it changed during the run)")
    if exchange_paths(staging, out):
        refused = occupied(staging, overwrite)  # what was at OUT, now under the staging name
        if refused is None:
            remove_path(staging)
            return
        try:  # it changed in that instant: back where it was
            back = exchange_paths(staging, out)
        except OSError:
            back = False
        if not back:
            kept = move_beside(staging, out, KEPT)
            raise OutputError(f"{out}: {refused[0]} (it changed during the run); the results were written there, and "
                              f"what was there was moved to {kept}")
        raise results_beside(staging, out, f"{refused[0]} (it changed during the run)")
    old = new_staging_dir(out.absolute().parent, out.name, "old", create=False)
    out.rename(old)
    refused = occupied(old, overwrite)
    if refused is not None:
        if not rename_no_replace(old, out):
            kept = move_beside(old, out, KEPT)
            raise results_beside(staging, out, f"{refused[0]} (it changed during the run), and something else "
                                               f"appeared there as it was moved aside (it is in {kept})")
        raise results_beside(staging, out, f"{refused[0]} (it changed during the run)")
    try:
        placed = rename_no_replace(staging, out)
    except BaseException:
        old.rename(out)
        raise
    if not placed:  # something appeared at OUT between the two renames: the old output stays aside
        kept = move_beside(old, out, KEPT)
        raise results_beside(staging, out, f"something appeared there as the old output was moved aside (to {kept})")
    remove_path(old)


def results_beside(staging: Path, out: Path, why: str) -> OutputError:
    """Move the complete results in ``staging`` beside ``out`` (move_beside) and return the
    error that says why ``out`` was left as it is and where the results are."""
    aside = move_beside(staging, out, ASIDE)
    return OutputError(f"{out}: {why}; it was left as it is, and the results were written to {aside}")


def move_beside(path: Path, out: Path, kind: str) -> Path:
    """Rename ``path`` (a folder beside ``out``) to a new name ``<out name>.<kind>-<pid>-<random>``
    beside ``out``, which no clean-up matches, and return it."""
    for _ in range(100):
        beside = out.absolute().parent / f"{out.name}.{kind}-{os.getpid()}-{secrets.token_hex(3)}"
        if rename_no_replace(path, beside):
            return beside
    raise FileExistsError(errno.EEXIST, "no free name beside the output", str(out))


# --- the pieces of the commit --------------------------------------------------------------------

_HELD_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextmanager
def signals_held() -> Iterator[list]:
    """Hold back SIGINT, SIGTERM and SIGHUP during a block that must not be cut short (a
    commit, a clean-up); those that arrive are recorded (the yielded list) and delivered again
    to the handlers in place before, once the block is over. Python runs signal handlers in the
    main thread only, so elsewhere this does nothing; ignored signals stay ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    received: list[int] = []
    previous: dict[int, Any] = {}  # signal.getsignal's handlers: a callable, or SIG_DFL

    def hold(signum, frame):
        received.append(signum)

    try:
        for signum in _HELD_SIGNALS:
            handler = signal.getsignal(signum)
            if handler is None or handler == signal.SIG_IGN:  # set outside Python, or ignored
                continue
            previous[signum] = handler
            signal.signal(signum, hold)
        yield received
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(received):
            signal.raise_signal(signum)  # the handler (or the default action) runs now


# renameat2's flags (linux/fs.h).
RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2


def renameat2(a: Path, b: Path, flags: int) -> bool:
    """Linux renameat2(a, b, flags) (since Linux 3.15 on ext4, XFS, Btrfs, tmpfs, ...): True
    when done; False where the system, the C library or the file system has no such rename;
    OSError for other failures (FileExistsError for RENAME_NOREPLACE onto an existing ``b``)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # a C library without renameat2 (glibc < 2.28, old musl)
        return False
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    at_fdcwd = -100
    if function(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), flags) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(a), None, str(b))


def exchange_paths(a: Path, b: Path) -> bool:
    """Swap the names ``a`` and ``b`` in one step (renameat2 with RENAME_EXCHANGE). False
    where the system, the C library or the file system cannot; OSError for other failures."""
    return renameat2(a, b, RENAME_EXCHANGE)


def rename_no_replace(a: Path, b: Path) -> bool:
    """Rename the directory ``a`` to ``b`` unless something is at ``b``: True when done, False
    where ``b`` exists (and is left as it is). renameat2 with RENAME_NOREPLACE where the system
    and the file system have it: one step, nothing at ``b`` is ever replaced. Elsewhere
    rename(2) after a look at ``b``: it never replaces a non-empty directory or a non-directory
    with a directory, so the one thing that can be replaced is an empty directory made at
    ``b`` in the instant between the look and the rename (and nothing is lost with it)."""
    try:
        if renameat2(a, b, RENAME_NOREPLACE):
            return True
    except FileExistsError:
        return False
    if os.path.lexists(b):
        return False
    try:
        a.rename(b)
    except OSError as error:
        if error.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR) and os.path.lexists(b):
            return False
        raise
    return True


def remove_path(path: Path) -> None:
    """Delete a directory tree, or a symbolic link itself (never what it points to)."""
    if path.is_symlink() or (os.path.lexists(path) and not path.is_dir()):
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)
