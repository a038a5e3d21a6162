"""The folders gpudedup writes (outputs, persistent indexes, work directories), told apart
from a user's folders: an input scan passes them over and --overwrite replaces only an output."""

from __future__ import annotations

import json
import os
import re
import unicodedata
from pathlib import Path
from typing import Callable, Iterable, Optional

# The file every output holds (written first), by which --overwrite tells a gpudedup output
# from a folder of someone's files; its content: {"written_by": "gpudedup", ...}.
OUTPUT_MARKER = ".gpudedup-output"

# The names an output holds at its top level (docs/output-formats.md), all that --overwrite
# deletes with it: the tables, each a folder or one file of an output format (.parquet,
# .jsonl), and the files beside them (the PNG figures: an older gpudedup's). Anything else in
# the folder was put there by someone, and replacing the output would delete it.
OUTPUT_TABLES = ("deduplicated", "removed", "pairs", "clusters")
OUTPUT_FILES = frozenset({OUTPUT_MARKER, "report.json", "report.html", "errors.jsonl", "s_curve.svg",
                          "candidates_histogram.svg", "cluster_sizes.svg", "s_curve.png", "candidates_histogram.png"})

# The entries of a work directory's top level (pipeline/workdir.py's layout): an output put
# inside a work directory must not be one of them, nor lie in one (the run writes them itself).
WORK_ENTRIES = frozenset({"manifest.json", "run.lock", "plan.npy", "shards", "indexed", "sets", "stages", "pairs",
                          "clusters"})

PART_FILE = re.compile(r"part-[0-9]{5,}\.parquet")  # a file of pairs/ and clusters/ (io/layout.py)

OUTPUT = "a gpudedup output"
INDEX = "a gpudedup index"
# The largest manifest.json our_folder reads to tell an index or a work directory (theirs are
# a few kilobytes; a user's file of that name may be anything).
MANIFEST_BYTES = 1 << 20


def our_folder(directory: Path) -> Optional[str]:
    """What gpudedup wrote ``directory`` as, in words, or None for any other folder: an output
    (it holds OUTPUT_MARKER), a persistent index or a work directory (its manifest.json is an
    object with the keys gpudedup writes there). Reading one as input would take its reports
    and manifests for documents, and its kept rows for a second corpus."""
    def read(name: str) -> Optional[bytes]:
        path = directory / name
        if not path.is_file():
            return None
        if name != "manifest.json":  # (the marker is known by its name)
            return b""
        return path.read_bytes() if path.stat().st_size <= MANIFEST_BYTES else None

    try:
        return our_kind(read)
    except OSError:
        return None


def our_kind(read: Callable[[str], Optional[bytes]]) -> Optional[str]:
    """our_folder for a folder whose files ``read`` gives by name (None for none; the marker's
    bytes need not be read), local or on object storage."""
    if read(OUTPUT_MARKER) is not None:
        return OUTPUT
    manifest = read("manifest.json")
    try:
        data = json.loads(manifest) if manifest is not None else None
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    if {"format", "parameters", "verification"} <= data.keys():
        return INDEX
    if {"work_dir_format", "gpudedup_version"} <= data.keys():
        return "a gpudedup work directory"
    return None


def mount_points() -> list[str]:
    """Every mount point of this process's file systems, from the kernel's table
    (/proc/self/mountinfo: a bind mount of the same file system has no other device number to
    tell it by); none where there is no such table (not Linux)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as table:
            lines = table.read().splitlines()
    except OSError:
        return []
    # (the fifth field; its spaces, tabs, newlines and backslashes written as \ooo)
    return [re.sub(r"\\([0-7]{3})", lambda code: chr(int(code.group(1), 8)), fields[4])
            for fields in (line.split(" ") for line in lines) if len(fields) > 4]


def mount_point_within(folder: Path) -> Optional[Path]:
    """The first mount point strictly under ``folder`` (as it resolves), or None."""
    below = os.path.realpath(folder).rstrip(os.sep) + os.sep
    return next((Path(point) for point in mount_points() if point.startswith(below)), None)


def is_mount_point(path: Path) -> bool:
    """Whether ``path`` (as it resolves) is a mount point."""
    return os.path.ismount(path) or os.path.realpath(path) in mount_points()


def index_holding(place: Path) -> Optional[Path]:
    """The nearest folder above ``place`` (a local path) that is a gpudedup index, or None:
    what an output or work directory must not lie in, since the index's next writer removes
    what its manifest does not list there (index/files.collect_garbage)."""
    # (as the file system resolves it: "idx/../out" is beside the index, a link may lead into it)
    return next((folder for folder in Path(os.path.realpath(place)).parents if our_folder(folder) == INDEX), None)


def output_file_name(name: str) -> bool:
    """Whether ``name`` is a file an output holds at its top level: OUTPUT_FILES, or a table
    written as one file of an output format (deduplicated.parquet, pairs.jsonl, ...)."""
    table, _, suffix = name.partition(".")
    return name in OUTPUT_FILES or (table in OUTPUT_TABLES and suffix in ("parquet", "jsonl"))


def output_path(path: str, written: Optional[frozenset[str]] = None) -> bool:
    """Whether ``path`` (relative to an output, "/"-separated) is one an output holds: a
    top-level folder (written with a trailing "/") of OUTPUT_TABLES; a top-level file of
    output_file_name; in pairs/ and clusters/ a part (part-NNNNN.parquet); in deduplicated/
    and removed/ a file the output's report.json names (``written``: its kept_files and
    removed_files), or, where it names none (None: an older report), a file of an output format
    at any depth (they are laid out as the inputs are); anywhere a Finder's .DS_Store."""
    if path.endswith("/"):
        return path[:-1] in OUTPUT_TABLES
    parts = path.split("/")
    if parts[-1] == ".DS_Store":
        return True
    if len(parts) == 1:
        return output_file_name(path)
    if parts[0] in ("pairs", "clusters"):
        return len(parts) == 2 and PART_FILE.fullmatch(parts[1]) is not None
    if parts[0] in ("deduplicated", "removed"):
        # (by NFC: a disk that stores names decomposed, as HFS+ does, lists them so)
        return unicodedata.normalize("NFC", path) in written if written is not None else \
            parts[-1].endswith((".parquet", ".jsonl"))
    return False


def written_files(report: Optional[bytes]) -> Optional[frozenset[str]]:
    """The files of deduplicated/ and removed/ an output's report.json (``report``: its bytes,
    None where there is none) names as written (output.kept_files, output.removed_files), or
    None where it names none (an older version's report, or one that cannot be read)."""
    if report is None:
        return None
    try:
        written = json.loads(report)["output"]
        files = written["kept_files"] + written.get("removed_files", [])
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if not all(isinstance(name, str) for name in files):
        return None
    return frozenset(unicodedata.normalize("NFC", name) for name in files)


def foreign_among(paths: Iterable[str], written: Optional[frozenset[str]] = None) -> list[str]:
    """Of ``paths`` under an output (relative, "/"-separated: its files, its top-level entries,
    a folder with a trailing "/"), those output_path refuses (``written``: as it takes it),
    but for a Finder AppleDouble file ._NAME beside the output's NAME (one of its files, or a
    folder in its tables), sorted, each named by its top-level entry where that is no folder of
    an output, else by itself."""
    listed = set(paths)

    def ours(path: str) -> bool:
        folder, _, name = path.rpartition("/")
        if not name.startswith("._") or name == "._":
            return output_path(path, written)
        # An AppleDouble file (macOS's, on a share) beside a file or folder of the output's.
        twin = f"{folder}/{name[2:]}" if folder else name[2:]
        if twin in listed:
            return output_path(twin, written)
        return twin.split("/")[0] in OUTPUT_TABLES and any(entry.startswith(f"{twin}/") for entry in listed)

    return sorted({path if path.split("/")[0] in OUTPUT_TABLES else path.split("/")[0]
                   for path in paths if not ours(path)})


def foreign_paths(folder: Path) -> list[str]:
    """foreign_among of what the local output ``folder`` holds, by what its report.json names:
    its top-level entries (a folder's name with "/", not a link's: replacing the output
    removes a link alone), and the files (not links) at any depth of its tables' folders."""
    paths = []
    for entry in os.listdir(folder):
        if not (folder / entry).is_dir() or (folder / entry).is_symlink():
            paths.append(entry)
            continue
        paths.append(f"{entry}/")
        if entry in OUTPUT_TABLES:  # (another folder is refused by its name)
            paths += [Path(parent, file).relative_to(folder).as_posix() for parent, _, files in os.walk(folder / entry)
                      for file in files if not Path(parent, file).is_symlink()]
    try:
        report: Optional[bytes] = (folder / "report.json").read_bytes()
    except OSError:
        report = None
    return foreign_among(paths, written_files(report))


def ours_within(folder: Path) -> Optional[tuple[Path, str]]:
    """The first folder under ``folder``, at any depth (links not followed), that gpudedup
    wrote as something of its own (our_folder: an index, a work directory, another output) or
    that another file system is mounted on, with what it is in words; None where there is
    none. An output holds none of these, so one found in it was put there: replacing the
    output would delete it (a mount: the files of that file system)."""
    mount = mount_point_within(folder)
    if mount is not None:
        return mount, "a mount point"
    for parent, subfolders, _ in os.walk(folder):
        for name in sorted(subfolders):
            path = Path(parent) / name
            if path.is_symlink():  # (replacing the output removes the link alone)
                continue
            what = our_folder(path)
            if what is not None:
                return path, what
    return None
