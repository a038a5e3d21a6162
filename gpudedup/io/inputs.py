"""Finding the input files: paths may be files or directories; directories are walked
recursively in sorted order. Symbolic links are followed, except where following would loop or
read a file or directory a second time; such paths are skipped and explained in the notes.

Every entry inside an input directory that is not read is listed (InputFiles.skipped, each a
PassedOver with its reason): a file of no input type, a hidden file or folder (its name starts
with a dot; a folder is listed itself, not its contents), and what the include / exclude
patterns leave out (Selection). A file given by name is always read.
A folder gpudedup wrote (an output, a persistent index, a work directory: ``our_folder``) holds
no documents: inside a directory it is passed over with a note, and given by name it is
refused.

A file is shown (in ids, messages and skipped records) by ``display_path``: relative to the
working directory when it lies below it, else absolute; a URL without its credentials
(credentials.shown_url).

Below a URL (an object store's prefix) each object is taken by its key as it is: a key that no
file name can stand for one-to-one, one with an empty, "." or ".." part ("in//a.jsonl",
"in/./a.jsonl", "in/x/../a.jsonl"), which object-store clients rewrite into another key and
which deduplicated/ could not mirror, stops the run (on_error "stop") or is a skipped record
(on_error "skip"), never read as another object or passed over unsaid.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath
from typing import Iterable, Optional

import pyarrow as pa
import pyarrow.fs as pafs

from ..errors import InputError, ParameterError
from . import storage
from .dataset_folder import dataset_folder_files, remote_dataset_order
from .filesystems import URL_PATH_ENDS
from .formats import SUPPORTED_SUFFIXES, file_format
from .ours import OUTPUT, our_folder
from .source import check_on_error
from .credentials import first_line
from .storage import Given, Location, Remote, location_of, not_utf8, readable

# Why an entry inside an input directory was not read (PassedOver.reason; report.json's
# input.skipped_file_reasons). Other entries passed over carry the words of their note.
UNSUPPORTED = "unsupported type"
HIDDEN = "hidden"
EXCLUDED = "excluded by --exclude"
NOT_INCLUDED = "not matched by --include"
# The reasons no note tells (the summary names these paths itself).
UNNOTED = (UNSUPPORTED, HIDDEN, EXCLUDED, NOT_INCLUDED)


class PassedOver(str):
    """An entry inside the inputs that was not read, as shown (display_path), with ``reason``
    (one of the reasons above, or the words of its note) and whether it is a ``folder``
    (listed itself, not its contents). A str, so that a list of them reads as the paths."""

    reason: str
    folder: bool

    def __new__(cls, shown: str, reason: str, folder: bool = False) -> "PassedOver":
        self = super().__new__(cls, shown)
        self.reason, self.folder = reason, folder
        return self

    def __reduce__(self):
        return PassedOver, (str(self), self.reason, self.folder)


def listed(entry: str) -> str:
    """An entry of InputFiles.skipped as one-line messages show it: a folder with a trailing "/"."""
    return f"{entry}/" if getattr(entry, "folder", False) else str(entry)


@dataclass(frozen=True)
class Selection:
    """Which files inside input directories are read: ``include`` and ``exclude`` hold
    fnmatch patterns (``*``, ``?``, ``[seq]``; case-sensitive; ``*`` also matches "/"), each
    matched against an entry's path relative to the input directory given ("/"-separated)
    and against its name. A file is read when it matches an include pattern (or none is
    given) and no exclude pattern; a folder that matches an exclude pattern is passed over
    whole. A file given by name is always read."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    @classmethod
    def of(cls, include: Optional[Iterable[str] | str] = None,
           exclude: Optional[Iterable[str] | str] = None) -> "Selection":
        """The selection of include / exclude as the API and the command line take them: None,
        one pattern, or an iterable of patterns; ParameterError for anything else."""
        return cls(patterns("include", include), patterns("exclude", exclude))

    def left_out(self, relative: str, folder: bool = False) -> Optional[str]:
        """Why the entry at ``relative`` (its path below the input directory given) is not
        read (EXCLUDED, NOT_INCLUDED), or None; include patterns choose files only."""
        name = relative.rsplit("/", 1)[-1]

        def matched(chosen: tuple[str, ...]) -> bool:
            return any(fnmatchcase(relative, pattern) or fnmatchcase(name, pattern) for pattern in chosen)

        if matched(self.exclude):
            return EXCLUDED
        if not folder and self.include and not matched(self.include):
            return NOT_INCLUDED
        return None


# No include or exclude pattern: every file of an input type is read.
EVERY_FILE = Selection()


def patterns(option: str, given: Optional[Iterable[str] | str]) -> tuple[str, ...]:
    """The patterns of ``option`` (include, exclude) as a tuple; ParameterError for a value that
    is not None, a str or an iterable of non-empty str."""
    if given is None:
        return ()
    try:
        listed: tuple = (given,) if isinstance(given, str) else tuple(given)
    except TypeError:
        listed = (given,)
    bad = [pattern for pattern in listed if not isinstance(pattern, str) or not pattern]
    if bad:
        raise ParameterError(f"{option} takes glob patterns (a str or a list of str, none empty); got {bad[0]!r}")
    return listed


def display_path(path: Location) -> str:
    """The path as ids and messages show it: relative to the working directory when below it;
    a URL without its credentials (credentials.shown_url)."""
    if isinstance(path, Remote):
        return str(path)
    absolute = path.absolute()
    if ".." in absolute.parts:
        # The same file named through "..", or not, is shown (and its ids made) alike; but not
        # where a symbolic link before a ".." makes the shorter path another file.
        shorter = Path(os.path.normpath(absolute))
        if os.path.realpath(shorter) == os.path.realpath(absolute):
            absolute = shorter
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


@dataclass
class InputFiles:
    """What scan_inputs found: the files to read in order, the entries passed over inside
    directories (each a PassedOver), notes on paths passed over for a reason, and (on_error
    "skip") the directories that could not be read, as skipped records."""

    files: list[Location] = field(default_factory=list)
    given: list = field(default_factory=list)  # the paths scanned, as given
    skipped: list[str] = field(default_factory=list)  # PassedOver, in walk order
    notes: list[str] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    seen_files: dict = field(default_factory=dict)  # (st_dev, st_ino) -> display path
    seen_dirs: dict = field(default_factory=dict)  # (st_dev, st_ino) -> display path
    selection: Selection = EVERY_FILE

    def pass_over(self, shown: str, why: str, folder: bool = False) -> None:
        """List an entry passed over for a reason a note tells (a link loop, a pipe, ...)."""
        self.skipped.append(PassedOver(shown, why, folder))
        self.notes.append(f"{shown}: skipped: {why}")

    def leave_out(self, shown: str, reason: str, folder: bool = False) -> None:
        """List an entry not read for one of the UNNOTED reasons."""
        self.skipped.append(PassedOver(shown, reason, folder))

    def add_file(self, path: Location, status: Optional[os.stat_result]) -> None:
        """Add a file found; status: its stat (a local file), None for a URL's."""
        key = (status.st_dev, status.st_ino) if status is not None else str(path)
        shown = display_path(path)
        if key in self.seen_files:
            self.pass_over(shown, f"the same file as {self.seen_files[key]}, already read")
            return
        self.seen_files[key] = shown
        self.files.append(path)


def scan_inputs(paths: Iterable[Given], on_error: str = "stop", selection: Selection = EVERY_FILE) -> InputFiles:
    """The input files under ``paths`` (see the module docstring); ``selection``: the include
    and exclude patterns that choose the files inside directories.

    A path given that is missing, a broken link, of an unsupported type or not a regular file
    is an InputError under either on_error; a directory found inside that cannot be read is
    an InputError under "stop" and a skipped record (line None) under "skip". Inputs that
    hold no input file at all are an InputError (nothing_read) under either.
    """
    check_on_error(on_error)
    paths = list(paths)
    found = InputFiles(given=paths, selection=selection)
    for given in paths:
        path = location_of(given)
        if isinstance(path, Remote):
            scan_remote(path, found, on_error)
            continue
        try:
            status = path.stat()
        except OSError as error:
            raise InputError(f"{given}: {missing_reason(path, error)}") from None
        if stat.S_ISDIR(status.st_mode):
            ours = our_folder(path)
            if ours is not None:
                raise InputError(f"{given}: {ours}, not documents; give the files to deduplicate"
                                 + (f" (its kept rows: {path / 'deduplicated'})" if ours == OUTPUT else ""))
            before = len(found.files)
            walked = walk_directory(path, status, found, on_error)
            if walked and len(found.files) == before and len(paths) > 1:
                found.notes.append(f"{given}: no input files in this directory")
        elif file_format(path) is None:
            raise unsupported_type(given)
        elif not stat.S_ISREG(status.st_mode):
            raise InputError(f"{given}: not a regular file ({special_kind(status)}); expected a file")
        elif (odd := not_utf8(display_path(path))) is not None:
            raise InputError(f"{readable(display_path(path))}: {odd}; rename it")
        else:
            found.add_file(path, status)
    # A file given by name is read whatever --include and --exclude say, so it is not among the
    # entries a directory's walk passed over, though the walk met it (before or after).
    read = set(found.seen_files.values())
    found.skipped = [entry for entry in found.skipped if getattr(entry, "folder", False) or str(entry) not in read]
    if not found.files and not found.records:
        shown = ", ".join(storage.shown(p) for p in paths)
        raise nothing_read(found, f"no input files found in {shown} (looked for JSONL, Parquet, Arrow and .txt files)")
    return found


# How many of the entries passed over a one-line message names.
NAMED_IN_A_LINE = 5


def nothing_read(found: InputFiles, why: str) -> InputError:
    """The error of a run whose inputs hold no document (the scan found no input file, or the
    files read gave no document): one line, ``why`` then the entries passed over."""
    named = [f"{listed(entry)} ({getattr(entry, 'reason', 'skipped')})" for entry in found.skipped]
    passed = ""
    if named:
        more = f" and {len(named) - NAMED_IN_A_LINE:,} more" if len(named) > NAMED_IN_A_LINE else ""
        passed = f"; not read: {', '.join(named[:NAMED_IN_A_LINE])}{more}"
    return InputError(f"no document could be read from the inputs: {why}{passed}")


def documents_read(found: Optional[InputFiles], documents: int, sources: Iterable[str],
                   skipped_records: list[dict]) -> None:
    """Raise nothing_read when the files of ``found`` gave no document, under either on_error;
    ``sources``: the files read (as shown), ``skipped_records``: what on_error "skip" left out.
    A document with an empty text is a document. Nothing for data that is not files (found
    None)."""
    if found is None or documents:
        return
    if skipped_records:
        first = skipped_records[0]
        place = first["file"] + (f":{first['line']}" if first.get("line") is not None else "")
        count = len(skipped_records)
        why = (f"every record was left out under on_error='skip' ({count:,} "
               f"{'record or file' if count == 1 else 'records or files'}; the first: {place}: {first['reason']})")
    else:
        read = list(sources)
        more = f" and {len(read) - NAMED_IN_A_LINE:,} more" if len(read) > NAMED_IN_A_LINE else ""
        why = f"the files read hold no records ({', '.join(read[:NAMED_IN_A_LINE])}{more})"
    raise nothing_read(found, why)


def unsupported_type(given) -> InputError:
    """The error for an input given by name that is no input file's type."""
    return InputError(f"{storage.shown(given)}: unsupported file type; expected one of "
                      f"{', '.join(SUPPORTED_SUFFIXES)}")


def hidden(name: str) -> bool:
    """Whether an entry inside a folder is hidden, so passed over and listed (a folder itself,
    not its contents): its name starts with a dot."""
    return name.startswith(".")


def left_out(found: InputFiles, relative: str, folder: bool) -> Optional[str]:
    """Why the entry at ``relative`` ("/"-separated, below the input directory given) is not
    read though it may be of an input type: HIDDEN, or what the selection says; None to go on."""
    if hidden(relative.rsplit("/", 1)[-1]):
        return HIDDEN
    return found.selection.left_out(relative, folder)


def scan_remote(remote: Remote, found: InputFiles, on_error: str) -> None:
    """Add the input files at a URL: the file it names, or those below it (a folder, or an
    object store's prefix), in the order walk_directory gives a local folder's (each folder's
    files, then its subfolders in turn, by name), entries passed over and listed as there (a
    folder, which an object store only implies, once, where its first object is met). An
    input file whose key has a part that no file name can be (unmirrorable_key) is an
    InputError under on_error "stop", a skipped record under "skip"."""
    try:
        entry = storage.info(remote)
        if entry.type == pafs.FileType.NotFound:
            raise InputError(f"{remote}: no such file or directory")
        if entry.type != pafs.FileType.Directory:
            if file_format(remote) is None:
                raise unsupported_type(remote)
            found.add_file(remote, None)
            return
        relatives = remote.relative_files()
    except (OSError, pa.ArrowException) as error:
        raise InputError(f"{remote}: cannot read ({first_line(error)})") from None
    before = len(found.files)
    folders_left_out: set[str] = set()
    # A datasets save_to_disk folder: its data files in its order, its metadata not read.
    walk, strays = remote_dataset_order(remote, sorted(relatives, key=walk_order), display_path)
    for relative in walk:
        parts = relative.split("/")
        path = remote.child(relative)
        if relative in strays:
            found.pass_over(display_path(path), strays[relative])
            continue
        reason = unmirrorable_key(parts)
        passed = folder_left_out(found, parts) if reason is None else None
        if passed is not None:
            folder, folder_why = passed
            if folder not in folders_left_out:  # the folder, once
                folders_left_out.add(folder)
                found.leave_out(display_path(remote.child(folder)), folder_why, folder=True)
            continue
        why = left_out(found, relative, folder=False)
        # (The type by the key's own name: a URL cuts an odd key's at "#" or "?".)
        if why is None and file_format(PurePosixPath(relative)) is None:
            why = UNSUPPORTED
        if why is not None:
            found.leave_out(display_path(path), why)
        elif reason is None:
            found.add_file(path, None)
        elif on_error == "stop":
            raise InputError(f"{display_path(path)}: {reason}; rename the object, or pass on_error='skip' to "
                             "leave it out")
        else:
            found.records.append({"file": display_path(path), "line": None, "reason": reason})
    if len(found.files) == before and len(found.given) > 1:
        found.notes.append(f"{remote}: no input files in this directory")


def folder_left_out(found: InputFiles, parts: list[str]) -> Optional[tuple[str, str]]:
    """(the first folder on the way to the file at ``parts`` that is not read, "/"-separated
    below the folder given, and why), or None."""
    for end in range(1, len(parts)):
        folder = "/".join(parts[:end])
        why = left_out(found, folder, folder=True)
        if why is not None:
            return folder, why
    return None


def unmirrorable_key(parts: list[str]) -> Optional[str]:
    """Why an object named by ``parts`` (its key below the folder given, split at "/") cannot
    be read as itself and mirrored under deduplicated/, or None: an empty, "." or ".." part
    is one that S3 clients rewrite (into a key that may be another object's, or none) and
    that no file name below deduplicated/ can be; a "#" or "?" is where a URL's path ends."""
    odd = [part for part in parts if part in ("", ".", "..")]
    if odd:
        shown = "an empty part (//)" if "" in odd else f"a {odd[0]!r} part"
        return f"the object's key has {shown}, so it can be neither read as itself nor mirrored under deduplicated/"
    # A URL ends its path at "?" (the query) and "#" (the fragment): no URL names such a key.
    marks = sorted({mark for part in parts for mark in URL_PATH_ENDS if mark in part})
    if marks:
        held = " and ".join(repr(mark) for mark in marks)
        return f"the object's key holds {held}, which end a URL's path, so no URL names it"
    return None


def walk_order(relative: str) -> tuple:
    """A sort key for "/"-separated paths below a folder giving walk_directory's order: in
    each folder its files (by name) before its subfolders (by name, each walked whole)."""
    *folders, name = relative.split("/")
    return tuple((1, folder) for folder in folders) + ((0, name),)


def missing_reason(path: Path, error: OSError) -> str:
    """Why stat() failed on a path, in words: a missing path, a broken link, a link loop."""
    if error.errno == errno.ELOOP:
        return "symbolic link loop (the link leads back to itself)"
    if isinstance(error, FileNotFoundError):
        if path.is_symlink():
            try:
                target = os.readlink(path)
            except OSError:
                target = "?"
            return f"broken symbolic link (it points to {target}, which does not exist)"
        return "no such file or directory"
    return f"cannot read ({error.strerror or error})"


def special_kind(status: os.stat_result) -> str:
    """What a path that is neither a file nor a directory is, in words."""
    mode = status.st_mode
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a file"


def walk_directory(root: Path, root_status: os.stat_result, found: InputFiles, on_error: str) -> bool:
    """Add the input files below ``root`` in sorted order: a directory's files, then each of
    its subdirectories in turn (one that is hidden or excluded is listed there, as itself).
    Symbolic links to directories are followed unless they lead to a directory that contains
    them (a loop) or to one already read; both are noted. False when ``root`` itself was read
    already."""
    root_key = (root_status.st_dev, root_status.st_ino)
    shown_root = display_path(root)
    if root_key in found.seen_dirs:
        found.notes.append(f"{shown_root}: skipped: the same directory as {found.seen_dirs[root_key]}, already read")
        return False
    found.seen_dirs[root_key] = shown_root
    # (directory, the (dev, inode) of it and its ancestors, why it is not read or None)
    stack: list[tuple[Path, tuple[tuple[int, int], ...], Optional[str]]] = [(root, (root_key,), None)]
    while stack:
        directory, ancestors, passed = stack.pop()
        if passed is not None:  # listed in its turn, as an object store's folder is (scan_remote)
            found.leave_out(display_path(directory), passed, folder=True)
            continue
        try:
            with os.scandir(directory) as scan:
                entries = sorted(scan, key=lambda entry: entry.name)
        except OSError as error:
            shown = display_path(directory)
            reason = f"cannot read directory ({error.strerror or error})"
            if on_error == "stop":
                raise InputError(f"{shown}: {reason}") from None
            found.records.append({"file": shown, "line": None, "reason": reason})
            continue
        subdirectories: list[tuple[Path, tuple[tuple[int, int], ...], Optional[str]]] = []
        # A datasets save_to_disk folder: its data files in its order, its metadata not read.
        dataset = dataset_folder_files(Path(directory), display_path(directory))
        if dataset is not None:
            entries = dataset.entries(entries)
        for entry in entries:
            path = Path(directory) / entry.name
            shown = display_path(path)
            relative = path.relative_to(root).as_posix()
            if hidden(entry.name):  # (not even looked at: .git, .cache, a dangling .lock link)
                if entry.is_dir():
                    subdirectories.append((path, ancestors, HIDDEN))
                else:
                    found.leave_out(shown, HIDDEN)
                continue
            if dataset is not None and (stray := dataset.passed_over(entry.name)) is not None:
                found.pass_over(shown, stray, folder=entry.is_dir())
                continue
            try:
                status = path.stat()
            except OSError as error:
                found.pass_over(shown, missing_reason(path, error))
                continue
            if stat.S_ISDIR(status.st_mode):
                key = (status.st_dev, status.st_ino)
                if key in ancestors:
                    link = "symbolic link" if entry.is_symlink() else "path"
                    found.pass_over(shown, f"{link} to {found.seen_dirs.get(key, 'a directory')}, a directory "
                                           "that contains it (following it would loop)", folder=True)
                elif key in found.seen_dirs:
                    found.pass_over(shown, f"the same directory as {found.seen_dirs[key]}, already read",
                                    folder=True)
                elif (ours := our_folder(path)) is not None:
                    found.pass_over(shown, f"{ours}, not documents", folder=True)
                elif (why := found.selection.left_out(relative, folder=True)) is not None:
                    subdirectories.append((path, ancestors, why))
                else:
                    found.seen_dirs[key] = shown
                    subdirectories.append((path, ancestors + (key,), None))
                continue
            why = found.selection.left_out(relative)
            if why is None and file_format(path) is None:
                why = UNSUPPORTED
            if why is not None:
                found.leave_out(shown, why)
            elif not stat.S_ISREG(status.st_mode):
                found.pass_over(shown, f"not a regular file ({special_kind(status)})")
            elif (odd := not_utf8(shown)) is not None:
                if on_error == "stop":
                    raise InputError(f"{readable(shown)}: {odd}; rename it, or pass on_error='skip' to leave it out")
                found.records.append({"file": readable(shown), "line": None, "reason": odd})
            else:
                found.add_file(path, status)
        stack.extend(reversed(subdirectories))
    return True
