"""Large input files cut into pieces, so that one file is not one task of a staged or Dask run.

A piece is read as a shard of its own (pipeline/disk.py): a plain (not compressed) JSONL file is
cut by byte ranges that start right after a newline, a Parquet file by runs of whole row groups.
Every other file (gzip- or zstd-compressed JSONL, which cannot be entered in the middle; Arrow
IPC; text; a file under the shard size) is one shard, read whole. A piece's records keep the
line (JSONL) or row (Parquet) numbers they have in the whole file, so ids (``<path>:<line>``),
messages and the kept rows are those of the whole file read at once.

How many lines come before a JSONL piece is known only by reading up to it: the cut points are
found here (a short read at each), the newlines of each piece are counted by a task of their
own (count_newlines, on the cluster for a Dask run), and plan_shards adds them up.

A piece stands for its part of the file only where reading it alone gives what reading the
whole file gives for those lines. That holds for a Parquet piece that reads without a
file-level error, and for a JSONL piece that Arrow reads in one go (no line read on its own,
nothing left out) with the very columns, of the very types, that the file's other pieces
with records have, in both cases with a content column that suits the shingles: Arrow
infers each piece's types from its own lines, and the checks that read a file line by line (a
field's type against the line where it was first seen, a field missing from every line)
depend on the lines before. When a piece of a file does not stand,
the run reads that file whole instead (pipeline/disk.py: WorkDirStore.sign), so the results are
always those of the files read whole; only its memory is then the whole file's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from . import storage
from .formats import compression_of, format_of
from .storage import Location

DEFAULT_SHARD_BYTES = 512 * 2**20  # a piece's bytes in its file: a task's read, well under a worker's memory
SCAN_BYTES = 1 << 16  # read at a time when looking for a newline or counting them


@dataclass(frozen=True)
class Piece:
    """A part of one input file: JSONL bytes [start, stop), or Parquet row groups [start, stop);
    before: the lines (JSONL: newlines before ``start``) or rows (Parquet) of the file before
    it, added to the piece's own numbers (from 1) to give the file's."""

    start: int
    stop: int
    before: int


@dataclass(frozen=True)
class Shard:
    """What one task reads: input file ``file`` (an index into the run's files), whole (piece
    None) or one piece of it; absorbed: nothing, a piece of a file that turned out to need
    reading whole (see the module docstring), which the file's first shard now reads."""

    file: int
    piece: Optional[Piece] = None
    absorbed: bool = False


def cuttable(path: Location, format: str) -> bool:
    """Whether a file can be cut: plain JSONL (a gzip or zstd stream cannot be entered in the
    middle) and Parquet."""
    return (format == "jsonl" and compression_of(path) is None) or format == "parquet"


def jsonl_cuts(path: Location, shard_bytes: int) -> list[int]:
    """The byte offsets where the pieces of a JSONL file start (the first is 0): each piece
    ends with the line that holds its ``shard_bytes``-th byte (so a piece is at least that
    long, the last aside); a cut that would start an empty piece (at the end of the file) is
    not made."""
    size = storage.file_size(path)
    cuts = [0]
    with storage.open_random(path) as stream:
        while (target := cuts[-1] + shard_bytes) < size:
            stream.seek(target - 1)
            at = target - 1
            while chunk := stream.read(SCAN_BYTES):
                newline = chunk.find(b"\n")
                if newline >= 0:
                    at += newline + 1
                    break
                at += len(chunk)
            else:
                break  # no newline after the target: the rest is one piece
            if at >= size:
                break
            cuts.append(at)
    return cuts


def count_newlines(path: str, start: int, stop: int) -> int:
    """Task: the newlines in bytes [start, stop) of a file."""
    count = 0
    with storage.open_random(storage.location_of(path)) as stream:
        stream.seek(start)
        left = stop - start
        while left > 0 and (chunk := stream.read(min(SCAN_BYTES * 64, left))):
            count += chunk.count(b"\n")
            left -= len(chunk)
    return count


def parquet_pieces(path: Location, shard_bytes: int) -> list[Piece]:
    """Runs of consecutive row groups of a Parquet file, each of at most ``shard_bytes`` of
    uncompressed data (a row group larger than that is a piece of its own)."""
    metadata = storage.parquet_metadata(path)
    pieces, start, rows_before, size, rows = [], 0, 0, 0, 0
    for group in range(metadata.num_row_groups):
        group_meta = metadata.row_group(group)
        if group > start and size + group_meta.total_byte_size > shard_bytes:
            pieces.append(Piece(start, group, rows_before))
            start, rows_before, size, rows = group, rows_before + rows, 0, 0
        size += group_meta.total_byte_size
        rows += group_meta.num_rows
    pieces.append(Piece(start, metadata.num_row_groups, rows_before))
    return pieces


class PieceGone(Exception):
    """The bytes that hold a piece cannot be found in its file any more: a Parquet file
    rewritten with a footer that does not parse, or with fewer row groups (byte_ranges)."""


def byte_ranges(path: Location, piece: Piece) -> list[tuple[int, int]]:
    """The byte ranges [start, stop) of a file that hold what ``piece`` reads: a JSONL piece's
    own range; for a Parquet piece, the span of its row groups' column chunks and the footer
    (whose schema and offsets say how those bytes are read), so that a digest of them
    (io/stamps.py) changes where the rows the piece reads do. PieceGone where the file no
    longer holds the piece's row groups."""
    if format_of(path) != "parquet":
        return [(piece.start, piece.stop)]
    try:
        metadata = storage.parquet_metadata(path)
        groups = [metadata.row_group(group) for group in range(piece.start, piece.stop)]
    except (ValueError, IndexError) as error:  # (Arrow's ArrowInvalid is a ValueError)
        raise PieceGone(str(error)) from None
    starts, stops = [], []
    for group_meta in groups:
        for column in range(group_meta.num_columns):
            chunk = group_meta.column(column)
            first = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
            starts.append(first)
            stops.append(first + chunk.total_compressed_size)
    size = storage.file_size(path)
    footer = (size - metadata.serialized_size - 8, size)  # (metadata, its 4-byte length, "PAR1")
    return [(min(starts), max(stops)), footer] if starts else [footer]


CountTask = Callable[[list[tuple[str, int, int]]], list[int]]


def plan_shards(files: list[Location], shard_bytes: int, count: CountTask) -> list[Shard]:
    """The shards of a run over ``files`` (absolute, in order): each file larger than
    ``shard_bytes`` that can be cut (cuttable) in pieces of about that size, every other file
    whole. count(tasks) runs count_newlines over (path, start, stop) tasks and gives their
    results in order (an executor's map). A file that cannot be looked into here (unreadable,
    not Parquet after all) is left whole: its reader says what is wrong with it."""
    parquet: dict[int, list[Piece]] = {}
    jsonl: dict[int, list[tuple[int, int]]] = {}  # file -> the (start, stop) of its pieces
    for index, path in enumerate(files):
        format = format_of(path)
        try:
            if not cuttable(path, format) or (size := storage.file_size(path)) <= shard_bytes:
                continue
            if format == "parquet":
                pieces = parquet_pieces(path, shard_bytes)
                if len(pieces) > 1:
                    parquet[index] = pieces
            else:
                cuts = jsonl_cuts(path, shard_bytes)
                jsonl[index] = list(zip(cuts, cuts[1:] + [size]))
        except (OSError, ValueError):  # (pyarrow's errors are OSError or ValueError)
            continue
    # The newlines of every piece but a file's last: the lines before each of its pieces.
    tasks = [(storage.full_name(files[index]), start, stop)
             for index, ranges in jsonl.items() for start, stop in ranges[:-1]]
    counts = iter(count(tasks) if tasks else [])
    shards: list[Shard] = []
    for index in range(len(files)):
        if index in parquet:
            shards.extend(Shard(index, piece) for piece in parquet[index])
        elif index in jsonl and len(jsonl[index]) > 1:
            before = 0
            for number, (start, stop) in enumerate(jsonl[index]):
                shards.append(Shard(index, Piece(start, stop, before)))
                if number < len(jsonl[index]) - 1:
                    before += next(counts)
        else:
            shards.append(Shard(index))
    return shards
