"""Writing a run's results into an output directory, atomically, never replacing what is not
a gpudedup output.

An interrupted, killed or failed run leaves either the previous complete output or none, never
a half-written directory that looks complete; and nothing at OUT that is not a gpudedup output
is ever deleted, whatever happens at OUT during the run. ``atomic_output_dir`` does it in
this order:

1. ``check_output_dir`` (the CLI and the API also call it, through ``check_run_places``,
   before any work): OUT must not be, hold or lie inside an input or the persistent index a
   run reads or writes; an existing OUT must be a directory, empty, or (``--overwrite``) a
   gpudedup output: it holds the marker OUTPUT_MARKER that every output carries, or a
   report.json of gpudedup's (outputs of versions before the marker).
2. Staging directories left beside OUT by earlier runs of this machine that were killed
   (SIGKILL, a power cut) and whose process is gone are removed (``remove_stale_staging``).
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

On object storage (OUT a URL: ``remote_output_dir``) there is no rename, so the commit is made
by order instead, and report.json is what marks a complete output. Every file is written into
a local staging directory first, except the kept rows of a staged or Dask run (and a Dask
run's pairs and clusters tables), which its tasks
upload into a hidden staging prefix under OUT (``remote_staging``); a failure before the
commit leaves OUT's own objects untouched and the staging prefix is removed. The commit: what
is under OUT is checked again by the rule of step 1 (an object store has no no-replace
rename, so this check and the writes after it are not one step: a write by someone else in
that instant is not seen); anything else is left alone and the results go to the prefix
``<OUT name>.results-<pid>-<random>`` beside OUT. Then the marker is written (before anything
is deleted, so that what a failure leaves under OUT is always recognisably a gpudedup output);
where OUT already holds an output (``--overwrite``), its report.json is deleted, so that it
stops looking complete, then everything else of it; then the staged kept rows are moved into
place (``storage.move_object``: server-side copies, except an S3 object over 5 GiB, streamed
anew) and the local files uploaded, each object appearing whole, report.json last; the staging
prefix is removed. An interrupted or failed commit leaves objects under OUT but no report.json
(and says so: the old output is gone); readers (and people) take a folder without report.json
for an unfinished one. Unlike on a local file system the old output is gone before the new one
is complete.

Nothing in this module reads what an input contains, nor an existing OUT beyond listing it and
reading its marker and report.json (to tell a gpudedup output, and on object storage to delete
it); OUT's name and parent come from the caller only, never from the data.
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
import stat
import sys
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence
from urllib.parse import urlsplit

import numpy as np

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..errors import InputError, OutputError
from ..interrupts import note_replacing, note_written
from ..version import __version__
from .inputs import InputFiles, scan_inputs
from .ours import OUTPUT_MARKER
from .storage import (Given, Location, Remote, file_entries, files_below, first_line, location_of, move_object,
                      parts_of, read_bytes, upload)

OUTPUT_FORMATS = ("parquet", "jsonl")

# The keys every report.json gpudedup has written holds: an output of a version before the
# marker is recognised by them.
REPORT_KEYS = frozenset({"input", "parameters", "results", "stages"})
# How many of the names a refused OUT holds its message lists.
NAMES_SHOWN = 5


def check_output_dir(path: Given, overwrite: bool, inputs: Iterable[Given] = (),
                     index: Optional[Given] = None, files: Iterable[Location] = ()) -> Location:
    """Refuse an output location that exists as a file; or as a directory that is not empty,
    without ``overwrite``, and with it unless it is a gpudedup output (``occupied``); or that
    is, holds or lies inside one of the ``inputs`` (replacing it would delete input, and outputs
    inside an input directory would be read as input next time) or the persistent ``index`` a
    run reads or writes; or that is or holds one of ``files``, the input files a run has read,
    as they resolve (check_apart_from_read). Called before any work, so a refused run costs
    nothing. A URL (object storage) is checked the same way, as far as object stores have
    folders: objects under it are a non-empty directory, an object of its own name a file."""
    out = location_of(path)
    check_apart_from_inputs(out, inputs, "the output directory", "output=")
    if index is not None:
        check_apart_from_inputs(out, [index], "the output directory", "output=", "the index")
    check_apart_from_read(out, files, (), "the output directory", "output=")
    if isinstance(out, Remote):
        check_remote_output(out, overwrite)
        return out
    refused = occupied(out, overwrite)
    if refused is not None:
        raise OutputError(f"{out}: {refused[0]}" + (f"; {refused[1]}" if refused[1] else ""))
    parent = out.absolute().parent
    if not parent.is_dir():
        raise OutputError(f"{out}: parent directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"{out}: cannot write in {parent} (permission denied)")
    return out


def occupied(out: Path, overwrite: bool) -> Optional[tuple[str, str]]:
    """Why what is at ``out`` may not be replaced by an output, as (what it is, what to do),
    or None where nothing is there, or an empty directory, or (``overwrite``) a gpudedup output
    (is_gpudedup_output). A directory that holds only the marker counts as empty."""
    if not os.path.lexists(out):
        return None
    if not out.is_dir():  # a file, or a link to none (broken, a loop)
        return "exists and is not a directory", ""
    try:
        names = sorted(os.listdir(out))
    except OSError as error:
        return f"cannot be listed ({error.strerror or error})", "choose another output="
    if names in ([], [OUTPUT_MARKER]):
        return None
    if not overwrite:
        return "output directory exists and is not empty", "use overwrite=True to replace it"
    if is_gpudedup_output(lambda name: _regular_file_bytes(out / name)):
        return None
    return (f"holds files that are not a gpudedup output ({listed(names)})",
            "choose another output= or empty it")


def listed(names: Sequence[str]) -> str:
    """The first NAMES_SHOWN of ``names``, comma-separated, with "..." for the rest."""
    return ", ".join(list(names[:NAMES_SHOWN]) + (["..."] if len(names) > NAMES_SHOWN else []))


def is_gpudedup_output(read: Callable[[str], Optional[bytes]]) -> bool:
    """Whether a folder is an output gpudedup wrote, from ``read(name)``: the bytes of its file
    ``name``, or None where it has none. It holds OUTPUT_MARKER, or a report.json whose object
    has gpudedup's REPORT_KEYS (an output of a version before the marker)."""
    for name, holds in ((OUTPUT_MARKER, lambda data: data.get("written_by") == "gpudedup"),
                        ("report.json", lambda data: REPORT_KEYS <= data.keys())):
        content = read(name)
        if content is None:
            continue
        try:
            data = json.loads(content)
        except ValueError:
            continue
        if isinstance(data, dict) and holds(data):
            return True
    return False


def _regular_file_bytes(path: Path) -> Optional[bytes]:
    """The bytes of ``path`` where it is a regular file (not a link: a link's target is not
    what the folder holds), else None."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        return path.read_bytes()
    except OSError:
        return None


def write_marker(folder: Path) -> None:
    """Write the marker OUTPUT_MARKER into the staging folder ``folder`` of an output."""
    write_json(marker_content(), folder / OUTPUT_MARKER)


def marker_content() -> dict:
    return {"written_by": "gpudedup", "gpudedup_version": __version__}


def check_run_places(inputs: Sequence[Given], output: Optional[Given] = None, overwrite: bool = False,
                     work_dir: Optional[Given] = None, index: Optional[Given] = None, scan: bool = True,
                     found: Optional[InputFiles] = None) -> None:
    """Every rule on where a run writes, checked before any work: the output (check_output_dir)
    and the work directory must not be, hold or lie inside an input (as given) or the index
    (``index``: the persistent index the run reads or writes); the output must not be or hold
    the work directory (replacing it would delete what --resume needs; the work directory may
    lie inside it). With ``scan``, the same against what the local inputs resolve to: every
    file their scan finds and every folder it walks, symbolic links followed
    (check_apart_from_read); an input a link leads out of its folder is as much an input:
    ``found``, the run's own scan of ``inputs``, where the caller made it (one scan serves the
    checks and the reading), else a scan of the local inputs made here. (The run's own scan
    reports what is wrong with an input: a scan that fails here checks nothing. Object stores
    have no links: their URLs as given say it all.)"""
    locations = [location_of(given) for given in inputs]
    out = None if output is None else location_of(output)
    work = None if work_dir is None else location_of(work_dir)
    if work is not None:
        check_apart_from_inputs(work, locations, "the work directory", "work_dir=")
        if index is not None:
            check_apart_from_inputs(work, [index], "the work directory", "work_dir=", "the index")
        if out is not None:  # replacing the output must never delete the work directory
            check_apart_from_inputs(out, [work], "the output directory", "output=", "the work directory",
                                    inside_allowed=True)
    if out is not None:
        check_output_dir(out, overwrite, locations, index)
    if out is None and work is None:
        return
    if found is None:
        local = [location for location in locations if not isinstance(location, Remote)]
        if not scan or not local:
            return
        try:
            found = scan_inputs(local, "skip")
        except InputError:
            return
    for place, what, option in ((out, "the output directory", "output="), (work, "the work directory", "work_dir=")):
        if place is not None:
            check_apart_from_read(place, found.files, found.seen_dirs.values(), what, option)


def check_apart_from_read(place: Location, files: Iterable[Location], folders: Iterable[str], what: str,
                          option: str) -> None:
    """Refuse a local directory to write in (``place``) that is or holds one of the input
    ``files`` a run reads, or is, holds or lies inside one of the ``folders`` its scan walks
    (paths), each as it resolves, symbolic links followed: where a link in an input directory
    leads into the output, replacing the output would delete input. Files on object storage
    are passed over."""
    if isinstance(place, Remote):
        return
    target = _resolve(place)
    if target is None:
        return
    text = str(target)
    below = os.path.join(text, "")
    for file, real in _real_paths(files):
        if real == text or real.startswith(below):
            raise OutputError(f"{place}: {what} must not be or hold an input file: the input {file} leads to "
                              f"{real}; choose another {option}")
    for folder in folders:
        real = os.path.realpath(folder)
        if real == text or real.startswith(below) or text.startswith(os.path.join(real, "")):
            raise OutputError(f"{place}: {what} must not be, hold or lie inside a folder the inputs are read "
                              f"from: {folder} leads to {real}; choose another {option}")


def _real_paths(files: Iterable[Location]) -> Iterator[tuple[Path, str]]:
    """(file, the path it resolves to) for the local ``files``: each folder resolved once, then
    the file itself where it is a symbolic link."""
    folders: dict[str, str] = {}
    for file in files:
        if isinstance(file, Remote):
            continue
        folder, name = os.path.split(os.fspath(file))
        real_folder = folders.get(folder)
        if real_folder is None:
            real_folder = folders[folder] = os.path.realpath(folder or ".")
        joined = os.path.join(real_folder, name)
        yield file, os.path.realpath(joined) if os.path.islink(joined) else joined


def check_apart_from_inputs(out: Location, inputs: Iterable[Given], what: str, option: str,
                            other: str = "the input", inside_allowed: bool = False) -> None:
    """Refuse a directory to write in that is, holds or lies inside one of the ``inputs``
    (inside_allowed: only that is or holds one); a URL against the inputs' URLs, by their
    components (storage.parts_of). what: the directory in words; option: the keyword argument
    that chooses it, as messages name parameters (``output=``; errors.py)."""
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
                raise OutputError(f"{out}: {what} must not {where} {other} {location}; choose another {option}")
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
def atomic_output_dir(path: Given, overwrite: bool, inputs: Iterable[Given] = (),
                      index: Optional[Given] = None, files: Iterable[Location] = ()) -> Iterator[Path]:
    """Yield a new staging directory (holding the marker only) to fill; when the block ends
    without an exception it takes the place of ``path`` (see the module's docstring for the
    exact sequence, and ``replace_dir``); when it raises (KeyboardInterrupt included) the
    staging directory is removed and ``path`` is untouched. inputs, index, files:
    check_output_dir's. A URL: remote_output_dir."""
    out = check_output_dir(path, overwrite, inputs, index, files)
    if isinstance(out, Remote):
        with remote_output_dir(out, overwrite) as local_staging:
            yield local_staging
        return
    parent = out.absolute().parent
    remove_stale_staging(parent, out.name)
    staging: Optional[Path] = None
    made: Optional[tuple[int, int]] = None  # (device, inode) of the staging directory this run made
    committed = False
    try:
        with signals_held():
            staging = new_staging_dir(parent, out.name, "tmp")
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
        raise


def _identity(path: Path) -> Optional[tuple[int, int]]:
    """(device, inode) of what ``path`` names (not followed), or None where nothing is there."""
    try:
        status = os.lstat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino


def check_remote_output(out: Remote, overwrite: bool) -> None:
    """check_output_dir for a URL: its bucket (the first part of its path) must exist; objects
    under it, other than what runs left in hidden staging prefixes, are a non-empty directory
    (remote_occupied), an object of its own name a file. A file system's error is one line
    naming the URL."""
    try:
        filesystem, path = out.filesystem()
        bucket = path.strip("/").split("/")[0]
        if not bucket or filesystem.get_file_info(bucket).type == pafs.FileType.NotFound:
            raise OutputError(f"{out}: {bucket or 'its bucket'} does not exist")
        refused = remote_occupied(out, overwrite)
    except (OSError, pa.ArrowException) as error:
        raise OutputError(f"{out}: cannot write there ({first_line(error)})") from None
    if refused is not None:
        raise OutputError(f"{out}: {refused[0]}" + (f"; {refused[1]}" if refused[1] else ""))


def remote_occupied(out: Remote, overwrite: bool) -> Optional[tuple[str, str]]:
    """``occupied`` for a URL: what is under ``out``, runs' staging prefixes left out."""
    _, path = out.filesystem()
    found = [name for name in files_below(out) if not in_staging_prefix(name[len(path) + 1:])]
    if found == [path]:
        return "exists and is not a directory", ""
    relative = {name[len(path) + 1:] for name in found}
    if relative <= {OUTPUT_MARKER}:
        return None
    if not overwrite:
        return "output directory exists and is not empty", "use overwrite=True to replace it"
    if is_gpudedup_output(lambda name: read_bytes(out.child(name)) if name in relative else None):
        return None
    return (f"holds files that are not a gpudedup output ({listed(sorted({r.split('/')[0] for r in relative}))})",
            "choose another output= or empty it")


@contextmanager
def remote_output_dir(out: Remote, overwrite: bool = False) -> Iterator[Path]:
    """Yield a local staging directory (holding the marker only) to fill, beside which
    ``remote_staging(out, staging)`` is a prefix under ``out`` that tasks on other machines may
    upload files into (the kept rows of a Dask run); when the block ends without an exception,
    the two take the place of whatever is under ``out`` on object storage, by order (the
    module's docstring), where remote_occupied still allows it: the marker written, the old
    report.json deleted, then the rest of the old output and the staging prefixes of killed
    runs of this machine (stale_remote_staging), then the uploaded files moved into place
    (storage.move_object) and the local ones uploaded, report.json last. Where something else
    is under ``out`` by then, it is left alone: the results go to a prefix beside it, which an
    OutputError names. When the block raises, nothing under ``out`` but the staging prefix is
    touched, and that is removed."""
    staging = Path(tempfile.mkdtemp(prefix=f"{REMOTE_STAGING}{_host_tag()}-{os.getpid()}-"))
    write_marker(staging)
    uploaded = remote_staging(out, staging)
    filesystem, root = out.filesystem()
    _, prefix = uploaded.filesystem()
    replacing = False
    try:
        yield staging
        moved = file_entries(uploaded)
        refused = remote_occupied(out, overwrite)
        target, target_root = out, root
        if refused is not None:  # it changed during the run: the results go beside it
            target = remote_sibling(out, refused[0])
            target_root = target.filesystem()[1]
        write_remote_marker(filesystem, target_root)
        if refused is None:
            present = [name for name in files_below(out) if not name.startswith(prefix + "/")]
            old = [name for name in present if not in_staging_prefix(name[len(root) + 1:])
                   and name != f"{root}/{OUTPUT_MARKER}"]
            replacing = True  # from here on the old output is being taken apart
            note_replacing(out)  # (what an interrupt now leaves: interrupts.interrupted_outcome)
            for name in sorted(old, key=lambda n: n != f"{root}/report.json"):  # the old report first
                filesystem.delete_file(name)
            # Killed runs' staging prefixes, with the folder markers some stores keep for them.
            for stale in stale_remote_staging({name[len(root) + 1:].split("/")[0] for name in present
                                               if in_staging_prefix(name[len(root) + 1:])}):
                filesystem.delete_dir(f"{root}/{stale}")
        for entry in moved:
            move_object(filesystem, entry, f"{target_root}/{entry.path[len(prefix) + 1:]}")
        written = sorted(file for file in staging.rglob("*")
                         if file.is_file() and file.relative_to(staging).as_posix() != OUTPUT_MARKER)
        report = staging / "report.json"
        for file in sorted(written, key=lambda f: f == report):  # the report last
            upload(file, target.child(file.relative_to(staging).as_posix()))
        if refused is not None:
            raise OutputError(f"{out}: {refused[0]} (it changed during the run); it was left as it is, and the "
                              f"results were written to {target}")
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


def write_remote_marker(filesystem: pafs.FileSystem, root: str) -> None:
    """Write the marker of an output on object storage at ``root`` (a path of ``filesystem``)."""
    with filesystem.open_output_stream(f"{root}/{OUTPUT_MARKER}") as stream:
        stream.write((json.dumps(marker_content(), indent=2) + "\n").encode("utf-8"))


def remote_sibling(out: Remote, why: str) -> Remote:
    """A new prefix beside ``out`` for results that may not go there, named
    ``<name>.results-<pid>-<random>``; OutputError (``why`` said) where ``out`` is a bucket's
    root, which has nothing beside it."""
    parts = urlsplit(out.url)
    path = parts.path.rstrip("/")
    if not path.strip("/"):
        raise OutputError(f"{out}: {why} (it changed during the run); it was left as it is, and nothing was written")
    parent = path.rsplit("/", 1)[0]
    for _ in range(100):
        sibling = Remote(parts._replace(path=f"{parent}/{out.name}.{ASIDE}-{os.getpid()}-{secrets.token_hex(3)}")
                         .geturl())
        if not files_below(sibling):
            return sibling
    raise FileExistsError(errno.EEXIST, "no free name beside the output", str(out))


def remote_staging(out: Remote, staging: Path) -> Remote:
    """The prefix under ``out`` that the run writing into the local ``staging`` uploads files
    into before its commit (hidden, as local staging folders are)."""
    return out.child(f".{staging.name}")


def in_staging_prefix(relative: str) -> bool:
    """Whether an object's path relative to an output URL lies in a run's staging prefix
    (remote_staging's: "." and the name of a local staging folder), a killed run's included."""
    return relative.startswith(f".{REMOTE_STAGING}")


def stale_remote_staging(prefixes: Iterable[str]) -> list[str]:
    """Of runs' staging prefixes under an output (their names), those that no run may still
    write into: this machine's whose process is gone, and those of versions that named no
    process. Another machine's are left alone: its run may be going on."""
    pattern, host, stale = re.compile(rf"\.{re.escape(REMOTE_STAGING)}([0-9a-f]{{8}})-([0-9]+)-"), _host_tag(), []
    for name in sorted(prefixes):
        match = pattern.match(name)
        if match is None or (match[1] == host and not process_running(int(match[2]))):
            stale.append(name)
    return stale


# The local staging folders of outputs on object storage (then host, process and a random
# part), and (with a "." before) the hidden prefixes under the outputs that tasks upload into.
REMOTE_STAGING = "gpudedup-output-"
# The folders beside OUT that results go to when OUT may not be replaced at the commit
# ("<OUT name>.results-<pid>-<random>"), and what was at OUT where it could not be put back
# (".kept-"): not hidden, and no clean-up matches them.
ASIDE, KEPT = "results", "kept"


def replace_dir(staging: Path, out: Path, overwrite: bool = True) -> None:
    """Put ``staging`` where ``out`` is, as the module's docstring says (step 5): in one step
    where nothing is there; where something is, only if ``occupied`` allows it (an empty
    directory, or with ``overwrite`` a gpudedup output), the old one deleted after the new one
    is in place and after it is checked again; otherwise OutputError, the results moved to a
    folder beside ``out`` (move_beside). What is not ours is never left under a staging name,
    which a later run's clean-up would remove."""
    if rename_no_replace(staging, out):
        return
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
    names (results set aside, ``<name>.results-*``, included) are never touched; on systems
    without POSIX processes nothing is removed. Returns what was removed."""
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
