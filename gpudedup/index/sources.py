"""Verification from source files: an index made with ``verification="source"`` stores, for
each document, where it came from instead of its shingle set, and shingles it again from there
when a match must be checked exactly.

The user promises to keep the files as they were. A segment records each source file it points
into (``sources.json``: absolute path, format, the content field, size and SHA-256 when the
documents were committed) and, per document, the file (``source_file.npy`` uint32 (n,)) and the
record's place in it (``source_row.npy`` int64 (n,): its line in a JSONL file, its row in a
Parquet file, 1 for a .txt file, counted from 1 as in messages). Before a file is read for
verification its SHA-256 is checked against the recorded one, so an edited, truncated or
replaced file is refused with one line naming it, never used to check a match with text that is
not the indexed document's. The file is read by the same reader a run uses (io/read.py), so
compressed JSONL and every format a run takes work here too.

Costs: about 12 bytes per document instead of 8 per distinct shingle (a word 5-gram document of
1 KB holds some 200), at the price of reading, hashing and shingling the source files that hold
matched documents whenever a run or a query checks them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pyarrow as pa
from pyarrow.fs import FileType

from ..backends import get_backend
from ..core.content import unit_buffers
from ..core.ragged import offsets_from_counts, ragged_arange, ragged_take
from ..core.shingling import ShingleSpec
from ..core.verify import set_columns
from ..errors import DamagedIndexError, InputError, ParameterError
from ..io import storage
from ..io.fields import field_column
from ..io.pointers import SourcePointers
from ..io.read import read_one_file
from ..io.source import SourceFile
from ..io.stamps import check_unchanged, content_digest

VERIFICATIONS = ("sets", "source")
SOURCES_FILE = "sources.json"
# The arrays a segment stores for exact verification, per kind (the rest are common).
VERIFICATION_ARRAYS = {"sets": ("set_offsets", "set_columns"), "source": ("source_file", "source_row")}


class SourceChangedError(InputError):
    """A source file an index verifies from is missing or not as it was (exit code 2)."""


def check_verification(verification: str) -> str:
    if verification not in VERIFICATIONS:
        raise ParameterError(f"verification= must be 'sets' or 'source'; got {verification!r}")
    return verification


def pointer_arrays(pointers: SourcePointers) -> tuple[list[dict], dict[str, np.ndarray]]:
    """A segment's sources.json entries (only the files some document points into, with each
    one's size and SHA-256) and its arrays source_file uint32 (k,), source_row int64 (k,).

    A file's SHA-256 is taken now, then the file is checked to be as the run read it
    (pointers.read_as; io/stamps.py): by size and time, and by that SHA-256 where the run took
    the bytes' digest (a JSONL file's, every file of a staged run): a file changed since (by
    another process while the add ran) is refused with an InputError naming it, not recorded
    as the one the documents came from."""
    used, file = np.unique(pointers.file, return_inverse=True)
    entries = []
    for position in used:
        path, format = pointers.files[int(position)]
        location = storage.location_of(path)
        digest = content_digest(location)
        entries.append({"path": path, "format": format, "field": pointers.field,
                        "bytes": storage.file_size(location), "sha256": digest})
        for piece, stamp in pointers.read_as[int(position)]:
            check_unchanged(location, storage.shown(path), stamp, piece,
                            consequence="nothing was added to the index: run the add again", digest=digest)
    return entries, {"source_file": file.reshape(-1).astype(np.uint32), "source_row": pointers.row_number}


def merge_sources(parts: list[tuple[list[dict], np.ndarray]]) -> tuple[list[dict], np.ndarray]:
    """Segments' sources.json entries and source_file arrays as one segment's (compaction):
    each file some document points into listed once (as pointer_arrays lists them: a file
    whose documents were all removed goes), the arrays renumbered."""
    entries: list[dict] = []
    position: dict[str, int] = {}
    files = []
    for part_entries, file in parts:
        renumber = np.empty(len(part_entries), dtype=np.uint32)
        for index, entry in enumerate(part_entries):
            key = json.dumps(entry, sort_keys=True)
            if key not in position:
                position[key] = len(entries)
                entries.append(entry)
            renumber[index] = position[key]
        files.append(renumber[file] if file.size else np.zeros(0, np.uint32))
    used, file = np.unique(np.concatenate([np.zeros(0, np.uint32), *files]), return_inverse=True)
    return [entries[int(position)] for position in used], file.reshape(-1).astype(np.uint32)


def write_sources(folder: Path, entries: list[dict]) -> tuple[Path, bytes]:
    """Write a segment's sources.json into ``folder``: (its path, the bytes written)."""
    path = folder / SOURCES_FILE
    contents = (json.dumps(entries, indent=1, sort_keys=True) + "\n").encode("utf-8")
    path.write_bytes(contents)
    return path, contents


def read_sources(handle, path: Path) -> list[dict]:
    """A segment's sources.json (an open, checked file); DamagedIndexError when unreadable."""
    try:
        handle.seek(0)
        entries = json.loads(handle.read().decode("utf-8"))
        return [{key: entry[key] for key in ("path", "format", "field", "bytes", "sha256")} for entry in entries]
    except (ValueError, KeyError, TypeError) as error:
        raise DamagedIndexError(f"{path}: not a valid list of source files ({type(error).__name__}: {error})") \
            from None


def rows_sets(array: Callable[[str], np.ndarray], sources: Optional[list[dict]], rows: np.ndarray,
              spec: ShingleSpec) -> tuple[np.ndarray, np.ndarray]:
    """(counts int64 (k,), columns int64 (sum counts,)): the shingle sets of ``rows`` of a set of
    documents whose arrays ``array(name)`` gives (a segment's, or a staged run's lead shard):
    stored ones, or where ``sources`` (sources.json's entries) is given, shingled from the source
    files (source_file, source_row), each checked first as it is read (source_sets)."""
    if sources is not None:
        return source_sets(sources, np.asarray(array("source_file")[rows], np.int64),
                           np.asarray(array("source_row")[rows], np.int64), spec)
    # A compaction's rows are one run or a few: a copy of each range (ragged_take).
    counts, columns = ragged_take(array("set_offsets"), array("set_columns"), rows)
    return counts, np.asarray(columns, dtype=np.int64)


def source_sets(entries: list[dict], file: np.ndarray, row_number: np.ndarray,
                spec: ShingleSpec) -> tuple[np.ndarray, np.ndarray]:
    """The shingle sets of documents pointed at by (file int64 (k,) into ``entries``,
    row_number int64 (k,)), read from their source files: (counts int64 (k,), columns int64),
    each row sorted and distinct (verify.set_columns), in the order given. Each file is checked
    (size, SHA-256) and read once per call: a file changed since an earlier call is caught."""

    backend = get_backend("cpu")
    counts = np.zeros(file.shape[0], dtype=np.int64)
    pieces: list[tuple[np.ndarray, np.ndarray]] = []  # (positions, their sets' columns in that order)
    for index in np.unique(file):
        entry = entries[int(index)]
        check_source(entry)
        part = read_one_file(storage.location_of(entry["path"]), SourceFile(entry["path"], entry["format"]),
                             entry["field"], None, False, "skip")
        numbers = part.source.row_numbers
        numbers = np.arange(1, part.table.num_rows + 1) if numbers is None else np.asarray(numbers, np.int64)
        mine = np.flatnonzero(file == index)
        local = np.minimum(np.searchsorted(numbers, row_number[mine]), max(numbers.shape[0] - 1, 0))
        found = numbers[local] == row_number[mine] if numbers.shape[0] else np.zeros(mine.shape[0], dtype=bool)
        if not found.all():
            missing = int(row_number[mine][~found][0])
            raise SourceChangedError(f"{entry['path']}: record {missing}, which the index points at, cannot be read "
                                     "any more; the index needs its source files as they were")
        texts = field_column(part.table, entry["field"]).combine_chunks().take(pa.array(local))
        columns, counts[mine] = set_columns(backend.shingle_sets(*unit_buffers(texts), spec))
        pieces.append((mine, columns))
    # Each file's sets are in its documents' order; scatter them into the order given.
    offsets = offsets_from_counts(counts)
    columns = np.empty(int(offsets[-1]), dtype=np.int64)
    for mine, part_columns in pieces:
        run, within = ragged_arange(counts[mine])
        columns[offsets[mine][run] + within] = part_columns
    return counts, columns


def check_source(entry: dict) -> None:
    """Refuse a source file that is missing or not as it was when it was indexed."""
    path = storage.location_of(entry["path"])
    kind = storage.info(path).type
    if kind != FileType.File:
        what = "missing" if kind == FileType.NotFound else "no longer a file"
        raise SourceChangedError(f"{path}: {what}; the index verifies matches from this file (made with "
                                 "verification 'source'), so it must be kept as it was")
    if storage.file_size(path) != entry["bytes"] or content_digest(path) != entry["sha256"]:
        raise SourceChangedError(f"{path}: changed since its documents were indexed (size or SHA-256 differs); "
                                 "the index verifies matches from it, so it must be kept as it was")
