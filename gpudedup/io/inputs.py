"""Finding the input files: paths may be files or directories; directories are walked
recursively in sorted order (hidden entries and files of other types are skipped, and the
skipped files are reported). Symbolic links are followed, except where following would loop or
read a file or directory a second time; such paths are skipped and explained in the notes.
A folder gpudedup wrote (an output, a persistent index, a work directory: ``our_folder``) holds
no documents: inside a directory it is passed over with a note, and given by name it is
refused.

A file is shown (in ids, messages and skipped records) by ``display_path``: relative to the
working directory when it lies below it, else absolute; a URL without its credentials
(storage.shown_url).

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
from pathlib import Path
from typing import Iterable, Optional

import pyarrow as pa
import pyarrow.fs as pafs

from ..errors import InputError
from . import storage
from .formats import JSONL_SUFFIXES, PARQUET_SUFFIXES, TEXT_SUFFIXES, file_format
from .ours import OUTPUT, our_folder
from .source import check_on_error
from .storage import Given, Location, Remote, location_of

def display_path(path: Location) -> str:
    """The path as ids and messages show it: relative to the working directory when below it;
    a URL without its credentials (storage.shown_url)."""
    if isinstance(path, Remote):
        return str(path)
    absolute = path.absolute()
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


@dataclass
class InputFiles:
    """What scan_inputs found: the files to read in order, the files passed over inside
    directories, notes on paths passed over for a reason, and (on_error "skip") the
    directories that could not be read, as skipped records."""

    files: list[Location] = field(default_factory=list)
    given: list = field(default_factory=list)  # the paths scanned, as given
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    seen_files: dict = field(default_factory=dict)  # (st_dev, st_ino) -> display path
    seen_dirs: dict = field(default_factory=dict)  # (st_dev, st_ino) -> display path

    def pass_over(self, shown: str, why: str) -> None:
        self.skipped.append(shown)
        self.notes.append(f"{shown}: skipped: {why}")

    def add_file(self, path: Location, status: Optional[os.stat_result]) -> None:
        """Add a file found; status: its stat (a local file), None for a URL's."""
        key = (status.st_dev, status.st_ino) if status is not None else str(path)
        shown = display_path(path)
        if key in self.seen_files:
            self.pass_over(shown, f"the same file as {self.seen_files[key]}, already read")
            return
        self.seen_files[key] = shown
        self.files.append(path)


def find_input_files(paths: Iterable[Given]) -> tuple[list[Location], list[str]]:
    """The files to read, in order, and the files skipped inside directories."""
    found = scan_inputs(paths)
    return found.files, found.skipped


def scan_inputs(paths: Iterable[Given], on_error: str = "stop") -> InputFiles:
    """The input files under ``paths`` (see the module docstring).

    A path given that is missing, a broken link, of an unsupported type or not a regular file
    is an InputError under either on_error; a directory found inside that cannot be read is
    an InputError under "stop" and a skipped record (line None) under "skip".
    """
    check_on_error(on_error)
    paths = list(paths)
    found = InputFiles(given=paths)
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
        else:
            found.add_file(path, status)
    if not found.files and not found.records:
        shown = ", ".join(storage.shown(p) for p in paths)
        raise InputError(
            f"no input files found in {shown} (looked for JSONL, Parquet and .txt files)"
        )
    return found


def unsupported_type(given) -> InputError:
    """The error for an input given by name that is no input file's type."""
    return InputError(f"{storage.shown(given)}: unsupported file type; expected one of "
                      f"{', '.join(JSONL_SUFFIXES + PARQUET_SUFFIXES + TEXT_SUFFIXES)}")


def hidden(name: str) -> bool:
    """Whether an entry inside a folder is hidden, so passed over (a file listed as skipped, a
    folder silently): its name starts with a dot."""
    return name.startswith(".")


def scan_remote(remote: Remote, found: InputFiles, on_error: str) -> None:
    """Add the input files at a URL: the file it names, or those below it (a folder, or an
    object store's prefix), in the order walk_directory gives a local folder's (each folder's
    files, then its subfolders in turn, by name), hidden entries passed over as there. An
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
        raise InputError(f"{remote}: cannot read ({storage.first_line(error)})") from None
    before = len(found.files)
    for relative in sorted(relatives, key=walk_order):
        parts = relative.split("/")
        path = remote.child(relative)
        reason = unmirrorable_key(parts)
        if reason is None and any(hidden(part) for part in parts[:-1]):
            continue  # inside a hidden folder: silently, as walk_directory
        if hidden(parts[-1]) or file_format(path) is None:
            found.skipped.append(display_path(path))
        elif reason is None:
            found.add_file(path, None)
        elif on_error == "stop":
            raise InputError(f"{display_path(path)}: {reason}; rename the object, or pass --on-error skip to "
                             "leave it out")
        else:
            found.records.append({"file": display_path(path), "line": None, "reason": reason})
    if len(found.files) == before and len(found.given) > 1:
        found.notes.append(f"{remote}: no input files in this directory")


def unmirrorable_key(parts: list[str]) -> Optional[str]:
    """Why an object named by ``parts`` (its key below the folder given, split at "/") cannot
    be read as itself and mirrored under deduplicated/, or None: an empty, "." or ".." part
    is one that S3 clients rewrite (into a key that may be another object's, or none) and
    that no file name below deduplicated/ can be."""
    odd = [part for part in parts if part in ("", ".", "..")]
    if not odd:
        return None
    shown = "an empty part (//)" if "" in odd else f"a {odd[0]!r} part"
    return f"the object's key has {shown}, so it can be neither read as itself nor mirrored under deduplicated/"


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
    its subdirectories in turn. Symbolic links to directories are followed unless they lead to
    a directory that contains them (a loop) or to one already read; both are noted.
    False when ``root`` itself was read already."""
    root_key = (root_status.st_dev, root_status.st_ino)
    shown_root = display_path(root)
    if root_key in found.seen_dirs:
        found.notes.append(f"{shown_root}: skipped: the same directory as {found.seen_dirs[root_key]}, already read")
        return False
    found.seen_dirs[root_key] = shown_root
    # (directory, the (dev, inode) of it and its ancestors)
    stack: list[tuple[Path, tuple[tuple[int, int], ...]]] = [(root, (root_key,))]
    while stack:
        directory, ancestors = stack.pop()
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
        subdirectories = []
        for entry in entries:
            path = Path(directory) / entry.name
            shown = display_path(path)
            if hidden(entry.name):  # hidden: directories (.git, ...) silently, files listed
                if not entry.is_dir():
                    found.skipped.append(shown)
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
                                           "that contains it (following it would loop)")
                elif key in found.seen_dirs:
                    found.pass_over(shown, f"the same directory as {found.seen_dirs[key]}, already read")
                elif (ours := our_folder(path)) is not None:
                    found.pass_over(shown, f"{ours}, not documents")
                else:
                    found.seen_dirs[key] = shown
                    subdirectories.append((path, ancestors + (key,)))
                continue
            if file_format(path) is None:
                found.skipped.append(shown)
            elif not stat.S_ISREG(status.st_mode):
                found.pass_over(shown, f"not a regular file ({special_kind(status)})")
            else:
                found.add_file(path, status)
        stack.extend(reversed(subdirectories))
    return True
