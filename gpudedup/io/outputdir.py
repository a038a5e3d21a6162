"""Where a run may write, checked before any work and again at the commit: an output
directory (local or a URL) that is not, does not hold and does not lie inside an input or the
persistent index, and that is absent, empty, or (``--overwrite``) a gpudedup output, told by
the marker OUTPUT_MARKER every output carries (``write_marker``) or a report.json of
gpudedup's (outputs of versions before the marker); a work directory apart from both.
io/commit.py's docstring gives the whole sequence of a write.
"""

from __future__ import annotations

import json
import os
import stat
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit
from typing import Callable, Iterable, Iterator, Optional, Sequence

import pyarrow as pa
import pyarrow.fs as pafs

from ..errors import InputError, OutputError
from ..version import __version__
from .credentials import first_line
from .filesystems import SAME_STORE
from .inputs import InputFiles, scan_inputs
from .layout import NAME_BYTES
from .ours import (OUTPUT_MARKER, WORK_ENTRIES, foreign_among, foreign_paths, index_holding, is_mount_point, our_folder,
                   our_kind, ours_within, written_files)
from .staging import STAGING_NAME_EXTRA, in_staging_prefix
from .storage import Given, Location, Remote, files_below, location_of, not_utf8, parts_of, read_bytes, readable
from .write import write_json

# The keys every report.json gpudedup has written holds: an output of a version before the
# marker is recognised by them.
REPORT_KEYS = frozenset({"input", "parameters", "results", "stages"})
# How many of the names a refused OUT holds its message lists.
NAMES_SHOWN = 5


def check_output_dir(path: Given, overwrite: bool, inputs: Iterable[Given] = (),
                     index: Optional[Given] = None, files: Iterable[Location] = (),
                     index_files: Sequence[Given] = (), checked: bool = False,
                     made_first: Optional[Location] = None) -> Location:
    """Refuse an output location that exists as a file; or as a directory that is not empty,
    without ``overwrite``, and with it unless it is a gpudedup output (``occupied``); or that
    is, holds or lies inside one of the ``inputs`` (replacing it would delete input, and outputs
    inside an input directory would be read as input next time) or the persistent ``index`` a
    run reads or writes; or that is or holds one of ``files``, the input files a run has read,
    as they resolve (check_apart_from_read), or of ``index_files``, those the index reads its
    documents from (check_apart_from_index). Called before any work, so a refused run costs
    nothing; and again at the write, where ``checked`` (the run checked this output before its
    work) leaves what appeared there meanwhile to the commit, which puts the results beside it
    (commit.replace_dir, remote_output.remote_output_dir) rather than losing them. A URL
    (object storage) is checked the same way, as far as object stores have folders: objects
    under it are a non-empty directory, an object of its own name a file. made_first: the
    work directory, which the run makes before it writes: the output's folder may be it, not
    made yet."""
    out = output_location(path)
    if (odd := not_utf8(str(out))) is not None:
        raise OutputError(f"{readable(str(out))}: {odd}; choose another output=")
    check_url_parts(out, "output=")
    check_apart_from_inputs(out, inputs, "the output directory", "output=")
    if index is not None:
        check_apart_from_inputs(out, [index], "the output directory", "output=", "the index")
    check_apart_from_read(out, files, (), "the output directory", "output=")
    check_apart_from_index(out, index_files, "the output directory", "output=")
    if isinstance(out, Remote):
        check_remote_output(out, overwrite, checked)
        return out
    check_outside_an_index(out, "the output directory", "output=")
    check_apart_from_here(out)
    if out.is_symlink() and out.is_dir():
        # A link to an empty directory (an output kept on a larger disk): the results go into
        # it and the link stays (replacing the link would put them beside it, on this disk).
        # Nothing is ever deleted through a link: a link to a directory that holds anything,
        # an earlier output included, is refused (the directory itself may be given).
        target = Path(os.path.realpath(out))  # (the checks above resolve links already)
        if occupied(target, False) is not None:
            if checked:  # (it changed during the run: the commit sets the results beside the link)
                return out
            raise OutputError(f"{out}: a link to {target}, which is not empty; nothing is replaced through a "
                              f"link: give {target} itself to replace an output there, or choose another output=")
        out = target
    refused = None if checked else occupied(out, overwrite)
    if refused is not None:
        raise OutputError(f"{out}: {refused[0]}" + (f"; {refused[1]}" if refused[1] else ""))
    check_renamable(out)
    parent = out.absolute().parent
    if isinstance(made_first, Path) and not os.path.lexists(made_first) and \
            os.path.realpath(parent) == os.path.realpath(made_first):  # (as links lead: link/.. too)
        return out  # (its own checks say whether it can be made; this output's are made again at the write)
    if not parent.is_dir():
        kind = "is a file, not a directory" if parent.exists() else "does not exist"  # (a dangling link: none)
        raise OutputError(f"{out}: parent directory {parent} {kind}")
    if not os.access(parent, os.W_OK):
        read_only = hasattr(os, "statvfs") and os.statvfs(parent).f_flag & os.ST_RDONLY
        raise OutputError(f"{out}: cannot write in {parent} "
                          f"({'a read-only file system' if read_only else 'permission denied'})")
    return out


def check_renamable(out: Path) -> None:
    """OutputError where the results, written into a staging folder beside ``out``, could not
    be renamed to ``out``: it is a mount point (a volume, a container's -v target), or its name
    leaves no room for the staging folder's longer one (NAME_BYTES in all)."""
    if os.path.lexists(out) and is_mount_point(out):
        raise OutputError(f"{out}: is a mount point, which the results cannot be renamed onto; give a folder inside it "
                          f"(for example {out / 'out'})")
    size = len(os.fsencode(out.name))
    if size + STAGING_NAME_EXTRA > NAME_BYTES:
        raise OutputError(f"{out}: its name is {size} bytes long, and the folder the results are written into beside "
                          f"it takes {STAGING_NAME_EXTRA} more, past the {NAME_BYTES} a file name may have; give a "
                          f"name of at most {NAME_BYTES - STAGING_NAME_EXTRA} bytes")


def check_outside_an_index(place: Path, what: str, option: str) -> None:
    """OutputError where ``place`` lies inside a gpudedup index (ours.index_holding), whose next
    writer would remove it."""
    index = index_holding(place)
    if index is not None:
        raise OutputError(f"{place}: {what} must not lie inside the index {index}, whose next add, remove or "
                          f"compact removes what the index does not list; choose another {option}")


def check_apart_from_here(out: Path) -> None:
    """OutputError where the output is or holds this process's current folder: the write puts
    a new folder in the output's place, which would leave the process, and the shell it was
    started from, in a folder that is gone."""
    try:
        here = os.path.realpath(os.getcwd())
    except FileNotFoundError:  # (gone already: nothing left to keep)
        return
    if os.path.commonpath([here, os.path.realpath(out)]) == os.path.realpath(out):
        raise OutputError(f"{out}: the output directory is or holds the current folder ({here}), which the write "
                          "replaces; run from another folder, or choose another output=")


def output_location(given: Given) -> Location:
    """An output as location_of gives it, but "." or "a/.." (no name of its own, which the
    staging beside it and the rename into place need) as the folder it is, its links followed
    (a/.. after a link a is the folder above the link's target, as the file system takes
    "a/../b")."""
    out = location_of(given)
    return Path(os.path.realpath(out)) if isinstance(out, Path) and out.name in ("", "..") else out


def check_url_parts(place: Location, option: str) -> None:
    """OutputError for a URL to write under with a "." or ".." part: object stores' clients
    (pyarrow's S3) rewrite a/./b and x/../b into another key, so that the checks of where a
    run writes would see one place and its writes go to another (inside an input, or beside
    someone's objects)."""
    if isinstance(place, Remote):
        odd = [part for part in urlsplit(place.url).path.split("/") if part in (".", "..")]
        if odd:
            raise OutputError(f"{place}: the URL has a {odd[0]!r} part, which the object store's client rewrites "
                              f"into another key; give {option} without it")


def occupied(out: Path, overwrite: bool) -> Optional[tuple[str, str]]:
    """Why what is at ``out`` may not be replaced by an output, as (what it is, what to do),
    or None where nothing is there, or an empty directory, or (``overwrite``) a gpudedup output
    (is_gpudedup_output) that holds no index, work directory, other output or mount put into it
    (ours_within), nor anything an output does not hold beside its own (others_beside). A
    directory that holds only the marker counts as empty."""
    if not os.path.lexists(out):
        return None
    if out.is_symlink() and not out.exists():  # (a link to nothing, or a loop of links)
        return f"is a link to {os.readlink(out)}, which is no directory", "choose another output="
    if not out.is_dir():
        return "exists and is not a directory", ""
    try:
        names = sorted(os.listdir(out))
    except OSError as error:
        return f"cannot be listed ({error.strerror or error})", "choose another output="
    if names in ([], [OUTPUT_MARKER]):
        return None
    if not is_gpudedup_output(lambda name: _regular_file_bytes(out / name)):
        kind = our_folder(out)  # (an index or a work directory: not to be emptied either)
        return (f"is {kind}", "choose another output=") if kind is not None else not_ours(names)
    if not overwrite:
        return not_empty("report.json" in names)
    inside = ours_within(out)
    if inside is None:
        return others_beside(foreign_paths(out))
    return (f"holds {inside[1]} ({inside[0]}), which replacing the output would delete",
            "move it out, or choose another output=")


def not_ours(names: Sequence[str]) -> tuple[str, str]:
    """``occupied``'s answer for a folder of someone's files (``names``, sorted), with overwrite
    or without: overwrite replaces only a gpudedup output, so it is no way out."""
    return (f"holds files that are not a gpudedup output ({listed(names)})", "choose another output= or empty it")


def others_beside(foreign: Sequence[str]) -> Optional[tuple[str, str]]:
    """``occupied``'s answer for a gpudedup output that holds ``foreign``, what an output does
    not (ours.output_path: a user's notes, a folder put there; paths relative to it), which
    replacing the output would delete; None where it holds nothing else."""
    if not foreign:
        return None
    return (f"holds {listed(foreign)} beside a gpudedup output, which replacing the output would delete",
            "move {} out, or choose another output=".format("it" if len(foreign) == 1 else "them"))


def not_empty(complete: bool) -> tuple[str, str]:
    """``occupied``'s answer for a gpudedup output, without overwrite: whether it is finished
    (report.json, which the commit writes last, is there; a resumed add that had committed
    finds its own output so) or not (a run stopped while writing it, on object storage, its
    old output already gone, leaves one)."""
    advice = "use overwrite=True to replace it"
    if not complete:
        return ("holds an unfinished gpudedup output (no report.json: a run stopped while it wrote there)", advice)
    return "holds a finished gpudedup output (its report.json is there)", advice


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
                     found: Optional[InputFiles] = None, index_files: Sequence[Given] = ()) -> None:
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
    have no links: their URLs as given say it all.) Nor may either be or hold one of
    ``index_files``, the files an index made with verification "source" reads its documents'
    sets from (IndexReader.source_files): replacing an output that holds them would break the index
    for good."""
    locations = [location_of(given) for given in inputs]
    out = None if output is None else location_of(output)
    work = None if work_dir is None else location_of(work_dir)
    if work is not None:
        if (odd := not_utf8(str(work))) is not None:
            raise OutputError(f"{readable(str(work))}: {odd}; choose another work_dir=")
        check_url_parts(work, "work_dir=")
        if not isinstance(work, Remote):
            check_outside_an_index(work, "the work directory", "work_dir=")
        check_apart_from_inputs(work, locations, "the work directory", "work_dir=")
        if index is not None:
            check_apart_from_inputs(work, [index], "the work directory", "work_dir=", "the index")
        if out is not None:  # replacing the output must never delete the work directory
            check_apart_from_inputs(out, [work], "the output directory", "output=", "the work directory",
                                    inside_allowed=True)
            check_apart_from_work_entries(out, work)
    if work is not None:
        check_apart_from_index(work, index_files, "the work directory", "work_dir=")
    if out is not None:
        check_output_dir(out, overwrite, locations, index, index_files=index_files, made_first=work)
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


def check_apart_from_work_entries(out: Location, work: Location) -> None:
    """Refuse an output inside the work directory ``work`` that is, or lies in, one of the
    entries the run writes there itself (ours.WORK_ENTRIES: its pairs/, stages/, ...), as the
    two resolve (URLs: as given)."""
    if isinstance(out, Remote) or isinstance(work, Remote):
        below = str(out)[len(str(work)):].strip("/") if str(out).startswith(str(work).rstrip("/") + "/") else ""
    else:
        real_out, real_work = Path(os.path.realpath(out)), Path(os.path.realpath(work))
        below = str(real_out.relative_to(real_work)) if real_out.is_relative_to(real_work) else ""
    first = below.split("/")[0] if below not in ("", ".") else ""
    if first in WORK_ENTRIES:
        raise OutputError(f"{out}: the output directory must not be the work directory's own {first} (the run "
                          f"writes it there); choose another output= (another name inside {work} will do)")


def check_apart_from_read(place: Location, files: Iterable[Location], folders: Iterable[str], what: str,
                          option: str, file_is: str = "an input file", file_named: str = "the input") -> None:
    """Refuse a directory to write in (``place``) that is or holds one of the input
    ``files`` a run reads, or is, holds or lies inside one of the ``folders`` its scan walks
    (paths), each as it resolves, symbolic links followed: where a link in an input directory
    leads into the output, replacing the output would delete input. A URL is checked against
    the files' URLs (check_apart_from_inputs). file_is, file_named: what the files are, in the
    message."""
    if isinstance(place, Remote):
        check_apart_from_inputs(place, files, what, option, f"{file_is}: {file_named}", inside_allowed=True)
        return
    target = _resolve(place)
    if target is None:
        return
    text = str(target)
    below = os.path.join(text, "")
    for file, real in _real_paths(files):
        if real == text or real.startswith(below):
            shown = str(file) if os.path.abspath(file) == real else f"{file} leads to {real}"
            raise OutputError(f"{place}: {what} must not be or hold {file_is}: {file_named} {shown}; choose another "
                              f"{option}")
    for folder in folders:
        real = os.path.realpath(folder)
        if real == text or real.startswith(below) or text.startswith(os.path.join(real, "")):
            raise OutputError(f"{place}: {what} must not be, hold or lie inside a folder the inputs are read "
                              f"from: {folder} leads to {real}; choose another {option}")


def check_apart_from_index(place: Location, index_files: Sequence[Given], what: str, option: str) -> None:
    """check_apart_from_read for the files an index made with verification "source" reads its
    documents' sets from (IndexReader.source_files): replacing an output that holds them would
    break the index for good."""
    if index_files:
        check_apart_from_read(place, [location_of(file) for file in index_files], (), what, option,
                              "a file the index verifies its documents from", "the index's source file")


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


def url_place(location: Remote) -> list[str]:
    """A URL's store (its scheme, lower-case, as filesystems.SAME_STORE names it), then its
    components (storage.parts_of): what two URLs are compared by, so that a bucket's name on
    one store is not taken for the same on another, nor gcs://b for another place than gs://b.
    An Azure container is compared by its name alone: abfs://c@account.dfs.core.windows.net/x
    and abfs://c/x (the account from the environment) may be one place, and an output that
    might lie in an input is refused rather than risked."""
    scheme = urlsplit(location.url).scheme.lower()
    store = SAME_STORE.get(scheme, scheme)
    parts = parts_of(location)
    if store == "abfs" and parts:
        parts[0] = parts[0].partition("@")[0]
    return [store] + parts


def check_apart_from_inputs(out: Location, inputs: Iterable[Given], what: str, option: str,
                            other: str = "the input", inside_allowed: bool = False) -> None:
    """Refuse a directory to write in that is, holds or lies inside one of the ``inputs``
    (inside_allowed: only that is or holds one); a URL against the inputs' URLs, by their
    scheme and components (url_place). what: the directory in words; option: the keyword argument
    that chooses it, as messages name parameters (``output=``; errors.py)."""
    if isinstance(out, Remote):
        place = url_place(out)
        for given in inputs:
            location = location_of(given)
            if not isinstance(location, Remote):
                continue
            theirs = url_place(location)
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


def check_remote_output(out: Remote, overwrite: bool, checked: bool = False) -> None:
    """check_output_dir for a URL: its bucket (the first part of its path) must exist; objects
    under it, other than what runs left in hidden staging prefixes, are a non-empty directory
    (remote_occupied), an object of its own name a file; where ``checked`` (check_output_dir's),
    what came there during the run is left to the commit (remote_output_dir puts the results
    beside it). A file system's error is one line naming the URL."""
    try:
        filesystem, path = out.filesystem()
        bucket = path.strip("/").split("/")[0]
        if not bucket or filesystem.get_file_info(bucket).type == pafs.FileType.NotFound:
            raise OutputError(f"{out}: {bucket or 'its bucket'} does not exist")
        refused = None if checked else remote_occupied(out, overwrite)
    except (OSError, pa.ArrowException) as error:
        raise OutputError(f"{out}: cannot write there ({first_line(error)})") from None
    if refused is not None:
        raise OutputError(f"{out}: {refused[0]}" + (f"; {refused[1]}" if refused[1] else ""))


def remote_ours_within(out: Remote, relative: set[str]) -> Optional[tuple[str, str]]:
    """ours_within for a URL whose files below it are ``relative`` (paths from it): the first
    folder under it that holds an output's marker or a manifest gpudedup wrote (our_kind)."""
    folders = sorted({name.rsplit("/", 1)[0] for name in relative
                      if "/" in name and name.rsplit("/", 1)[1] in (OUTPUT_MARKER, "manifest.json")})
    for folder in folders:
        what = our_kind(partial(read_present, out, relative, folder))
        if what is not None:
            return folder, what
    return None


def read_present(out: Remote, relative: set[str], folder: str, name: str) -> Optional[bytes]:
    """The bytes of ``folder/name`` below ``out``, or None where it is not among ``relative``."""
    path = f"{folder}/{name}"
    return read_bytes(out.child(path)) if path in relative else None


def remote_occupied(out: Remote, overwrite: bool) -> Optional[tuple[str, str]]:
    """``occupied`` for a URL: what is under ``out``, runs' staging prefixes left out."""
    _, path = out.filesystem()
    found = [name for name in files_below(out) if not in_staging_prefix(name[len(path) + 1:])]
    if found == [path]:
        return "exists and is not a directory", ""
    relative = {name[len(path) + 1:] for name in found}
    if relative <= {OUTPUT_MARKER}:
        return None
    if not is_gpudedup_output(lambda name: read_bytes(out.child(name)) if name in relative else None):
        return not_ours(sorted({name.split("/")[0] for name in relative}))
    if not overwrite:
        return not_empty("report.json" in relative)
    inside = remote_ours_within(out, relative)
    if inside is None:
        report = read_bytes(out.child("report.json")) if "report.json" in relative else None
        return others_beside(foreign_among(relative, written_files(report)))
    return (f"holds {inside[1]} ({out.child(inside[0])}), which replacing the output would delete",
            "move it out, or choose another output=")
