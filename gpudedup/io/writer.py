"""Writing a run's results into an output directory, atomically.

An interrupted, killed or failed run leaves either the previous complete output or none, never
a half-written directory that looks complete. ``atomic_output_dir`` does it in this order:

1. ``check_output_dir`` (the CLI also calls it before any work).
2. Staging directories left beside OUT by earlier runs of this machine that were killed
   (SIGKILL, a power cut) and whose process is gone are removed (``remove_stale_staging``).
3. A staging directory ``.<OUT name>.tmp-<host>-<pid>-<random>`` is made beside OUT, on the
   same file system, with ``mkdir`` mode 0o777 so that the user's umask applies to it as to
   any directory (``tempfile.mkdtemp`` would make it 0700, and OUT with it).
4. The caller writes every file into it (report.json last).
5. The commit, with SIGINT, SIGTERM and SIGHUP held back (``signals_held``):
   - OUT does not exist: ``rename(staging, OUT)``: OUT appears complete, in one step.
   - OUT exists (``--overwrite``): on Linux ``renameat2(staging, OUT, RENAME_EXCHANGE)`` swaps
     the two names in one step, so OUT is at every moment the old complete output or the new
     one; only then is the old one, now under the staging name, deleted. Where the system or
     the file system cannot exchange: ``rename(OUT, .<OUT name>.old-<host>-<pid>-<random>)``,
     ``rename(staging, OUT)`` (if that fails, the old one is renamed back), then the old one is
     deleted. Either way the old output is deleted only after the new one is complete and in
     place; in the fallback OUT is absent between the two renames (microseconds, with signals
     held back, so only SIGKILL or a crash can stop there, leaving the old output whole under
     its .old- name).
   A signal that arrives during the commit is delivered again right after it; the
   KeyboardInterrupt it raises then carries ``output_written`` (the path of OUT), so that a
   caller can say that the results were written.
6. Any exception or interrupt before the commit removes the staging directory (signals held
   back meanwhile) and goes on; OUT is untouched.

On object storage (OUT a URL: ``remote_output_dir``) there is no rename, so the commit is made
by order instead, and report.json is what marks a complete output. Every file is written into
a local staging directory first, except the kept rows of a staged or Dask run (and a Dask
run's pairs and clusters tables), which its tasks
upload into a hidden staging prefix under OUT (``remote_staging``); a failure before the
commit leaves OUT's own objects untouched and the staging prefix is removed. The commit: where
OUT already holds objects (``--overwrite``), its report.json is deleted first, so that it
stops looking complete, then everything else under it; then the staged kept rows are moved
into place (``storage.move_object``: server-side copies, except an S3 object over 5 GiB,
streamed anew) and the local files uploaded, each object appearing whole, report.json last;
the staging prefix is removed. An interrupted or failed commit leaves objects under OUT but no report.json
(and says so: the old output is gone); readers (and people) take a folder without report.json
for an unfinished one. Unlike on a local file system the old output is gone before the new one
is complete.

Nothing in this module reads what an input contains, nor an existing OUT beyond listing it
(to check that it is empty, and on object storage to delete it); OUT's name and parent come
from the caller only, never from the data.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

import numpy as np

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..errors import OutputError
from ..interrupts import note_replacing, note_written
from .storage import (Given, Location, Remote, file_entries, files_below, first_line, location_of, move_object,
                      parts_of, upload)

OUTPUT_FORMATS = ("parquet", "jsonl")


def check_output_dir(path: Given, overwrite: bool, inputs: Iterable[Given] = ()) -> Location:
    """Refuse an output location that exists as a file, or as a non-empty directory unless
    ``overwrite``, or that is, holds or lies inside one of the ``inputs`` (replacing it would
    delete input, and outputs inside an input directory would be read as input next time).
    Called before any work, so a refused run costs nothing. A URL (object storage) is checked
    the same way, as far as object stores have folders: objects under it are a non-empty
    directory, an object of its own name a file."""
    out = location_of(path)
    check_apart_from_inputs(out, inputs, "the output directory", "--output")
    if isinstance(out, Remote):
        check_remote_output(out, overwrite)
        return out
    if os.path.lexists(out) and not out.is_dir():  # a file, or a link to none (broken, a loop)
        raise OutputError(f"{out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise OutputError(f"{out}: output directory exists and is not empty; use --overwrite to replace it")
    parent = out.absolute().parent
    if not parent.is_dir():
        raise OutputError(f"{out}: parent directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"{out}: cannot write in {parent} (permission denied)")
    return out


def check_apart_from_inputs(out: Location, inputs: Iterable[Given], what: str, option: str,
                            other: str = "the input", inside_allowed: bool = False) -> None:
    """Refuse a directory to write in that is, holds or lies inside one of the ``inputs``
    (inside_allowed: only that is or holds one); a URL against the inputs' URLs, by their
    components (storage.parts_of)."""
    if isinstance(out, Remote):
        place = parts_of(out)
        for given in inputs:
            location = location_of(given)
            if not isinstance(location, Remote):
                continue
            theirs = parts_of(location)
            shorter = min(len(place), len(theirs))
            if place[:shorter] == theirs[:shorter] and not (inside_allowed and len(place) > len(theirs)):
                where = "be or hold" if inside_allowed else "be, hold or lie inside"
                raise OutputError(f"{out}: {what} must not {where} {other} {given}; choose another {option}")
        return
    resolved = _resolve(out)
    for given in inputs:
        local = location_of(given)
        if isinstance(local, Remote):  # an object store's files cannot be a local folder's
            continue
        source = _resolve(local)
        if source is None or resolved is None:  # a symbolic link loop: the reader explains it
            continue
        inside = source.is_dir() and source in resolved.parents and not inside_allowed
        if source == resolved or resolved in source.parents or inside:
            where = "be or hold" if inside_allowed else "be, hold or lie inside"
            raise OutputError(f"{out}: {what} must not {where} {other} {given}; choose another {option}")


def _resolve(path: Path) -> Optional[Path]:
    """``path.resolve()``, or None for a symbolic link loop (RuntimeError before Python 3.13)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return None


@contextmanager
def atomic_output_dir(path: Given, overwrite: bool, inputs: Iterable[Given] = ()) -> Iterator[Path]:
    """Yield a new, empty staging directory to fill; when the block ends without an exception
    it replaces ``path`` (see the module's docstring for the exact sequence); when it raises
    (KeyboardInterrupt included) the staging directory is removed and ``path`` is untouched.
    A URL: remote_output_dir."""
    out = check_output_dir(path, overwrite, inputs)
    if isinstance(out, Remote):
        with remote_output_dir(out) as local_staging:
            yield local_staging
        return
    parent = out.absolute().parent
    remove_stale_staging(parent, out.name)
    staging: Optional[Path] = None
    committed = False
    try:
        with signals_held():
            staging = new_staging_dir(parent, out.name, "tmp")
        yield staging
        with signals_held():
            replace_dir(staging, out)
            committed = True
            note_written(out)  # an interrupt from here on must say that the results are there
    except BaseException as error:
        if committed:  # an interrupt delivered right after the commit: OUT is the new output
            if isinstance(error, KeyboardInterrupt):
                error.output_written = out  # type: ignore[attr-defined]  # read by the CLI (getattr)
            raise
        if staging is not None:
            with signals_held():
                remove_path(staging)
        raise


def check_remote_output(out: Remote, overwrite: bool) -> None:
    """check_output_dir for a URL: its bucket (the first part of its path) must exist; objects
    under it, other than what killed runs left in hidden staging prefixes, are a non-empty
    directory, an object of its own name a file. A file system's error is one line naming
    the URL."""
    try:
        filesystem, path = out.filesystem()
        bucket = path.strip("/").split("/")[0]
        if not bucket or filesystem.get_file_info(bucket).type == pafs.FileType.NotFound:
            raise OutputError(f"{out}: {bucket or 'its bucket'} does not exist")
        found = [name for name in files_below(out) if not in_staging_prefix(name[len(path) + 1:])]
    except (OSError, pa.ArrowException) as error:
        raise OutputError(f"{out}: cannot write there ({first_line(error)})") from None
    if found == [path]:
        raise OutputError(f"{out}: exists and is not a directory")
    if found and not overwrite:
        raise OutputError(f"{out}: output directory exists and is not empty; use --overwrite to replace it")


@contextmanager
def remote_output_dir(out: Remote) -> Iterator[Path]:
    """Yield a local staging directory to fill, beside which ``remote_staging(out, staging)``
    is a prefix under ``out`` that tasks on other machines may upload files into (the kept
    rows of a Dask run); when the block ends without an exception, the two replace whatever is
    under ``out`` on object storage, by order (the module's docstring): the old report.json
    deleted first, then the rest (earlier runs' staging prefixes included), then the uploaded
    files moved into place (storage.move_object) and the local ones uploaded, report.json last.
    When the block raises, nothing under ``out`` but the staging prefix is touched, and that
    is removed."""
    staging = Path(tempfile.mkdtemp(prefix=REMOTE_STAGING))
    uploaded = remote_staging(out, staging)
    filesystem, root = out.filesystem()
    _, prefix = uploaded.filesystem()
    replacing = False
    try:
        yield staging
        moved = file_entries(uploaded)
        old = [name for name in files_below(out) if not name.startswith(prefix + "/")]
        old_report = f"{root}/report.json"
        replacing = True  # from here on the old output is being taken apart
        note_replacing(out)  # (what an interrupt now leaves: interrupts.interrupted_outcome)
        for name in sorted(old, key=lambda n: n != old_report):  # the old report first
            filesystem.delete_file(name)
        # Killed runs' staging prefixes, with the folder markers some stores keep for them.
        for stale in sorted({name[len(root) + 1:].split("/")[0] for name in old
                             if in_staging_prefix(name[len(root) + 1:])}):
            filesystem.delete_dir(f"{root}/{stale}")
        for entry in moved:
            move_object(filesystem, entry, f"{root}/{entry.path[len(prefix) + 1:]}")
        written = sorted(file for file in staging.rglob("*") if file.is_file())
        report = staging / "report.json"
        for file in sorted(written, key=lambda f: f == report):  # the report last
            upload(file, out.child(file.relative_to(staging).as_posix()))
        note_written(out)
    except (OSError, pa.ArrowException) as error:
        if replacing:  # not "nothing was written": what was there is gone
            raise OutputError(f"{out}: cannot write the results ({first_line(error)}); the previous output there "
                              "was removed and the new one is incomplete (it has no report.json)") from None
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        try:  # the staging prefix (and the folder markers some stores keep): nothing left
            filesystem.delete_dir(prefix)
        except (OSError, pa.ArrowException):
            pass  # absent, or unreachable: the original error, if any, is what to report


def remote_staging(out: Remote, staging: Path) -> Remote:
    """The prefix under ``out`` that the run writing into the local ``staging`` uploads files
    into before its commit (hidden, as local staging folders are)."""
    return out.child(f".{staging.name}")


def in_staging_prefix(relative: str) -> bool:
    """Whether an object's path relative to an output URL lies in a run's staging prefix
    (remote_staging's: "." and the name of a local staging folder), a killed run's included."""
    return relative.startswith(f".{REMOTE_STAGING}")


# The local staging folders of outputs on object storage, and (with a "." before) the hidden
# prefixes under the outputs that tasks upload into.
REMOTE_STAGING = "gpudedup-output-"


def replace_dir(staging: Path, out: Path) -> None:
    """Put ``staging`` where ``out`` is; the old ``out``, if any, is deleted after the new one
    is in place (exchanged in one step where the system can, else moved aside first)."""
    if not os.path.lexists(out):
        staging.rename(out)
        return
    if exchange_paths(staging, out):
        remove_path(staging)  # now the old output
        return
    old = new_staging_dir(out.absolute().parent, out.name, "old", create=False)
    out.rename(old)
    try:
        staging.rename(out)
    except BaseException:
        old.rename(out)
        raise
    remove_path(old)


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


def exchange_paths(a: Path, b: Path) -> bool:
    """Swap the names ``a`` and ``b`` in one step (Linux renameat2 with RENAME_EXCHANGE, since
    Linux 3.15 on ext4, XFS, Btrfs, tmpfs, ...). False where the system, the C library or the
    file system cannot; OSError for other failures."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # a C library without renameat2 (glibc < 2.28, old musl)
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(a), None, str(b))


def remove_path(path: Path) -> None:
    """Delete a directory tree, or a symbolic link itself (never what it points to)."""
    if path.is_symlink() or (os.path.lexists(path) and not path.is_dir()):
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def _host_tag() -> str:
    return hashlib.sha256(socket.gethostname().encode("utf-8", "surrogateescape")).hexdigest()[:8]


def new_staging_dir(parent: Path, name: str, kind: str, create: bool = True) -> Path:
    """A new name ``.<name>.<kind>-<host>-<pid>-<random>`` in ``parent`` (hidden, and plainly
    temporary, so never mistaken for an output); made as a directory with mode 0o777 less the
    umask unless ``create`` is False."""
    for _ in range(100):
        candidate = parent / f".{name}.{kind}-{_host_tag()}-{os.getpid()}-{secrets.token_hex(4)}"
        if not create:
            if not os.path.lexists(candidate):
                return candidate
            continue
        try:
            candidate.mkdir(mode=0o777)  # the umask applies, as to any directory the user makes
            return candidate
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(parent / f".{name}.{kind}-*"))


def staging_pattern(name: str) -> re.Pattern:
    """The names ``new_staging_dir`` gives for outputs called ``name``: kind, host, pid."""
    return re.compile(rf"\.{re.escape(name)}\.(tmp|old)-([0-9a-f]{{8}})-([0-9]+)-[0-9a-f]+")


def process_running(pid: int) -> bool:
    """Whether process ``pid`` exists (signal 0 only checks; POSIX only)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # someone else's process; a pid no system has: keep
        return True
    return True


def remove_stale_staging(parent: Path, name: str) -> list[Path]:
    """Remove what runs killed before they could clean up left beside the output ``name``:
    staging directories (``.tmp-``) of processes of this machine that are no longer running,
    and moved-aside old outputs (``.old-``) of such processes when the output exists (without
    it, an .old- directory may hold the only copy of the previous results: it is left alone).
    Directories of running processes, of other machines (a shared file system) or with other
    names are never touched; on systems without POSIX processes nothing is removed.
    Returns what was removed."""
    if os.name != "posix":
        return []
    pattern, host, removed = staging_pattern(name), _host_tag(), []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return []
    output_exists = os.path.lexists(parent / name)
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is None or match[2] != host or not entry.is_dir(follow_symlinks=False):
            continue
        pid = int(match[3])
        if pid == os.getpid() or process_running(pid) or (match[1] == "old" and not output_exists):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed


ROWS_PER_WRITE = 16384


def kept_batches(table: pa.Table, keep: np.ndarray) -> Iterator[pa.RecordBatch]:
    """The rows of ``table`` where ``keep`` (bool (n,)) is True, in order, a slice at a time,
    so that the kept rows are never all copied at once."""
    for start in range(0, table.num_rows, ROWS_PER_WRITE):
        piece = table.slice(start, ROWS_PER_WRITE).filter(pa.array(keep[start : start + ROWS_PER_WRITE]))
        yield from piece.to_batches()


def write_to(target: str, write: Callable[[Path], None]) -> None:
    """``write(path)`` into ``target`` (a path, or a URL on object storage, as storage.location_of
    takes it): a task's file of an output on the workers (the kept rows of an input file, a
    part of pairs/), written where the target is, or into a temporary file and uploaded once."""
    located = location_of(target)
    if isinstance(located, Path):
        write(located)
        return
    with tempfile.TemporaryDirectory(prefix="gpudedup-part-") as folder:
        write(Path(folder) / located.name)
        upload(Path(folder) / located.name, located)


def write_parquet(table: pa.Table, path: Path, keep: Optional[np.ndarray] = None) -> None:
    """Write ``table`` (only the rows where ``keep`` is True, when given) as Parquet."""
    if keep is None:
        pq.write_table(table, path)
        return
    with pq.ParquetWriter(path, table.schema) as writer:
        for batch in kept_batches(table, keep):
            writer.write_batch(batch)


def write_jsonl(table: pa.Table, path: Path, keep: Optional[np.ndarray] = None) -> None:
    """One JSON object per row (only the rows where ``keep`` is True, when given), columns in
    table order, UTF-8; values JSON cannot hold (dates, bytes) are written as strings."""
    write_jsonl_batches(kept_batches(table, keep) if keep is not None else table.to_batches(ROWS_PER_WRITE), path)


def write_jsonl_batches(batches, path: Path) -> None:
    """Record batches as JSON lines into one file (see write_jsonl)."""
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for batch in batches:
            handle.writelines(
                json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in batch.to_pylist()
            )


def write_json(data: dict, path: Path) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
