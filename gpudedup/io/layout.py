"""The output layout of a run over files: one output file of kept rows per input file.

A run over files writes ``deduplicated/`` as a copy of the input's tree: each input file's kept
rows go to ``deduplicated/<its name>``, where its name is its path relative to the inputs'
common directory, its input extension (``.jsonl``, ``.json.gz``, ``.jsonl.zst``, ``.parquet``,
``.arrow``, ``.txt``, ...) replaced by the output format's (``.parquet`` or ``.jsonl``): a JSONL
file's kept lines are copied as they are (uncompressed) to JSONL, and every other input's kept
rows (Parquet, Arrow IPC, text) are written in the run's output format, as a table of the file's
own columns (a ``save_to_disk`` folder's ``data-00000-of-00001.arrow`` becomes
``data-00000-of-00001.parquet`` in its folder); ``pairs/`` and ``clusters/`` are
Parquet datasets (directories of ``part-NNNNN.parquet`` files) that ``pyarrow.parquet.read_table``
and every Parquet reader take whole. So a downstream job finds the same files whichever way the
run went, in one process, staged or on a cluster. ``--single-file`` (``single_file=True``)
writes the one-file layout instead (``deduplicated.<format>``, ``pairs.parquet``,
``clusters.parquet``), which in-memory data (lists, tables) always gets: it has no file names.

Kept rows keep their input file's schema exactly: the columns it has, in its order, of its
types. A Parquet file's own Arrow schema (stored in its ``ARROW:schema`` metadata) is the one
kept where pyarrow reads a type back otherwise (a dictionary of ``large_string`` is read as a
dictionary of ``string``).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError, OutputError, ParameterError
from ..threads import HOST_THREADS, map_parallel
from . import storage
from .jsonl_lines import lines_of
from .fields import lossy_columns
from .filesystems import PATTERN_MARKS, URL_PATH_ENDS, unnameable_marks
from .formats import input_suffix
from .inputs import InputFiles, display_path
from .source import SourceFile
from .stamps import unchanged_while
from .storage import Given, Location
from .write import ROWS_PER_WRITE, parquet_writer, write_jsonl, write_jsonl_batches, write_parquet, write_to

KEPT_DIR = "deduplicated"
PAIRS_DIR = "pairs"
CLUSTERS_DIR = "clusters"
NAME_BYTES = 255  # the longest file name most file systems take (ext4, XFS, APFS, NTFS in UTF-16 units)


# Rows per part of the pairs and clusters datasets. Parts are cut from the sorted table by row
# count alone, so that the layout is the same however the run went (in one process or on a
# cluster) and a task could write any part from its rank range. Measured on bench.jsonl, a
# pair takes about 7 bytes in Parquet and 100 in memory (ids of 40 characters): a part is
# tens of MB on disk and about 200 MB to build.
PART_ROWS = 2_000_000
# Replaces PART_ROWS where set: files of fewer rows (smaller files for a reader that takes one
# at a time; a small corpus in many parts, as the tests make one).
PART_ROWS_VARIABLE = "GPUDEDUP_PART_ROWS"


def part_rows() -> int:
    """The rows of a part of pairs/ and clusters/: PART_ROWS_VARIABLE where set (an integer
    >= 1), else PART_ROWS. Read by the process that cuts the tables (the client of a cluster's
    run), on each call."""
    given = os.environ.get(PART_ROWS_VARIABLE, "").strip()
    if not given:
        return PART_ROWS
    if not given.isdigit() or int(given) < 1:
        raise ParameterError(f"{PART_ROWS_VARIABLE}={given!r}: expected a whole number of rows, 1 or more")
    return int(given)


def part_name(number: int) -> str:
    """The file name of part ``number`` of a Parquet dataset (pairs/, clusters/)."""
    return f"part-{number:05d}.parquet"


def table_parts(rows: int, size: Optional[int] = None) -> list[tuple[int, int]]:
    """(start, length) of each part of a table of ``rows`` rows: consecutive slices of
    ``size`` (default part_rows()) rows, the last one shorter; one empty part for an empty
    table (a dataset always has a file, which holds its columns)."""
    size = size or part_rows()
    return [(start, min(size, rows - start)) for start in range(0, rows, size)] or [(0, 0)]


def table_slices(sizes, part_rows: Optional[int] = None) -> list[list[tuple[int, int, int]]]:
    """Each part of a table (table_parts; part_rows: its default, where None) of the
    rows of consecutive pieces of ``sizes`` rows, as the slices (piece, start, stop) of the
    pieces that hold its rows."""
    offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).tolist()
    slices = []
    for start, length in table_parts(offsets[-1], part_rows):
        stop = start + length
        # The pieces that hold rows start .. stop-1, each one's slice of them.
        first, last = int(np.searchsorted(offsets, start, side="right")) - 1, int(np.searchsorted(offsets, stop))
        slices.append([(index, max(start - offsets[index], 0), min(stop, offsets[index + 1]) - offsets[index])
                       for index in range(first, min(last, len(offsets) - 1)) if length])
    return slices


def output_bases(files: list[Location], inputs: Iterable[Given]) -> dict[str, str]:
    """The name under deduplicated/ of each input file (storage.key_of -> name, POSIX
    separators), without the output format's extension: its path relative to the common
    directory of the inputs as given (a directory given is its own root; a file given counts by
    its directory), its input extension dropped. Files that would share a name (``a.jsonl``
    and ``a.txt`` side by side; compared without case, as some file systems compare) keep
    their whole name. Decided once, over every file the scan found (``files``), when the input
    is read, so that neither the files a run leaves out nor a later working directory changes
    a name."""
    roots = [storage.folder_parts(storage.location_of(path)) for path in inputs]
    common = len(os.path.commonprefix(roots)) if roots else 0
    keys = [storage.key_of(path) for path in files]
    relatives = ["/".join(part for part in storage.parts_of(path)[common:] if part != "/") for path in files]
    stems = [relative[: len(relative) - len(input_suffix(relative))] for relative in relatives]
    shared = Counter(stem.casefold() for stem in stems)
    return {key: relative if shared[stem.casefold()] > 1 else stem
            for key, relative, stem in zip(keys, relatives, stems)}


def output_names(files: list[Location], bases: dict[str, str], format: str,
                 out: Optional[Location] = None) -> list[str]:
    """The output names (output_bases, then ``format``'s extension) of ``files`` (in order).
    Two files whose names would still be one (compared without case), a name that another one
    needs as a folder, a name longer than a file system takes, or, below an output ``out`` on
    object storage, one that holds a character its URLs cannot name (unnameable_marks), are a
    ParameterError naming the files."""
    names = [f"{bases[storage.key_of(path)]}.{format}" for path in files]
    marks = unnameable_marks(out.url) if isinstance(out, storage.Remote) else ""
    for path, name in zip(files, names):
        held = [mark for mark in marks if mark in name]
        if held:
            why = [words for marks_of, words in ((URL_PATH_ENDS, "a URL's path ends there"),
                                                 (PATTERN_MARKS, "the store's deletion takes it for a pattern"))
                   if any(mark in marks_of for mark in held)]
            raise ParameterError(f"{display_path(path)}: its output name {name!r} holds "
                                 f"{' and '.join(repr(mark) for mark in held)}, which no file below {out} can be "
                                 f"named by ({'; '.join(why)}); rename it, or write one file of kept rows with "
                                 "single_file=True")
    for path, name in zip(files, names):
        longest = max(Path(name).parts, key=lambda part: len(part.encode()))
        if len(longest.encode()) > NAME_BYTES:
            raise ParameterError(f"{display_path(path)}: its output name {longest!r} would be longer than "
                                 f"{NAME_BYTES} bytes; rename it, or write one file of kept rows with single_file=True")
    as_files: dict[str, Location] = {}  # name (case folded) -> the input written there
    as_folders: dict[str, Location] = {}  # folder (case folded) -> an input written below it
    for path, name in zip(files, names):
        folders = [parent.as_posix().casefold() for parent in Path(name).parents if parent != Path(".")]
        clashes = [(name, as_files.get(name.casefold()) or as_folders.get(name.casefold()))]
        clashes += [(folder, as_files.get(folder)) for folder in folders]
        for taken, other in clashes:
            if other is not None:
                raise ParameterError(
                    f"{display_path(other)} and {display_path(path)} would both be written as {KEPT_DIR}/{taken} "
                    "(a file, or a file and a folder); rename one of them, or write one file of kept rows with "
                    "single_file=True")
        as_files[name.casefold()] = path
        for folder in folders:
            as_folders.setdefault(folder, path)
    return names


def check_output_names(found: InputFiles, format: str, out: Optional[Location] = None) -> None:
    """Refuse, before any work, inputs two of whose files (``found``: the run's scan of them)
    would share an output name, or one whose output name the output ``out`` cannot hold."""
    output_names(found.files, output_bases(found.files, found.given), format, out)


def as_input(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table``'s columns of ``schema``, in its order (a column it lacks: nulls), cast to its
    types: rows of a run's table (whose columns may be unified across files, the text column
    made plain) as their input file had them."""
    present = set(table.column_names)  # (a set: a table may have tens of thousands of columns)
    for name, kind in lossy_columns(table, schema):  # (a file's rows cast to the types of files combined)
        raise not_one_table(name, kind)
    return pa.table([cast_column(table[field.name], field.type) if field.name in present
                     else pa.nulls(table.num_rows, field.type) for field in schema], schema=schema)


def not_one_table(name: str, kind: pa.DataType) -> OutputError:
    """The refusal of one table or file of every input file's rows where the column ``name``
    of one of them holds values that ``kind``, its type in the files combined, rounds."""
    return OutputError(f"column {name!r} holds values that its type in the files combined ({kind}) does not take "
                       "unchanged, so their rows are no one table or file: write each input file's rows apart, "
                       "without single_file=True")


def cast_column(column: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    """``column`` cast to ``target``. A column all null in its file has Arrow's null type, which
    nothing casts to; a large_string (or large_binary) column of 2 GiB or more goes back to
    32-bit offsets a slice under 2 GiB at a time, each slice copied so that its offsets start
    at 0."""
    if pa.types.is_null(target):
        return pa.chunked_array([pa.nulls(len(column))], pa.null())
    if len(column) == 0:  # (no values to cast: an empty file's column of strings made token ids)
        return pa.chunked_array([], target)
    try:
        return column.cast(target)
    except pa.ArrowNotImplementedError:
        # (a field all null in the file, of Arrow's null type there, given a type by another
        # file; a dictionary read back as its values; a run-end encoded column held decoded,
        # fields.plain_columns) Arrow casts nothing to the null type or to run-end encoding,
        # and values to a dictionary of strings only: nested_cast makes these.
        return pa.chunked_array([nested_cast(chunk, target) for chunk in column.chunks], target)
    except pa.ArrowInvalid:
        if not (pa.types.is_string(target) or pa.types.is_binary(target)):
            raise
    pieces = []
    for chunk in column.chunks:
        offsets = np.frombuffer(chunk.buffers()[1], np.int64)[chunk.offset: chunk.offset + len(chunk) + 1]
        start = 0
        while start < len(chunk):
            # The most rows from ``start`` whose values stay under 1 GiB (at least one row).
            stop = max(int(np.searchsorted(offsets, offsets[start] + 2**30, side="right")) - 1, start + 1)
            piece = chunk.slice(start, stop - start)
            pieces.append(piece.take(pa.array(np.arange(len(piece)))).cast(target))
            start = stop
    return pa.chunked_array(pieces, target)


def is_nested(data_type: pa.DataType) -> bool:
    return pa.types.is_struct(data_type) or pa.types.is_list(data_type) or pa.types.is_large_list(data_type)


def nested_cast(array: pa.Array, target: pa.DataType) -> pa.Array:
    """``array`` cast to ``target``, through its structs and lists (is_nested) one field at a
    time: a field of the null type given nulls, one of a dictionary type encoded (then its
    indices cast), one of a run-end encoded type encoded; the rest as Arrow casts them."""
    if pa.types.is_null(target):
        return pa.nulls(len(array))
    if pa.types.is_dictionary(target) and not pa.types.is_dictionary(array.type):
        return nested_cast(array, target.value_type).dictionary_encode().cast(target)
    if pa.types.is_run_end_encoded(target) and not pa.types.is_run_end_encoded(array.type):
        return pc.run_end_encode(nested_cast(array, target.value_type), run_end_type=target.run_end_type)
    if not is_nested(target) or not is_nested(array.type):
        return array.cast(target)
    missing = array.is_null() if array.null_count else None
    if pa.types.is_struct(target):
        fields = array.flatten()  # (each field of the struct's rows, its slice applied)
        return pa.StructArray.from_arrays([nested_cast(fields[array.type.get_field_index(field.name)], field.type)
                                           for field in target], fields=list(target), mask=missing)
    list_type = pa.LargeListArray if pa.types.is_large_list(target) else pa.ListArray
    offsets = array.offsets.cast(pa.int64() if pa.types.is_large_list(target) else pa.int32())
    return list_type.from_arrays(offsets, nested_cast(array.values, target.value_type), type=target, mask=missing)


@dataclass
class FileRows:
    """One input file's rows as a run holds them, and which are kept.

    source: the file as read (io.source.SourceFile with its location, format, schema and
    row_numbers: the JSONL line or row of each row, from 1); table: its rows (columns possibly
    unified across files, the text column made plain: as_input undoes that); keep: bool (rows,).
    """

    source: SourceFile
    table: pa.Table
    keep: np.ndarray


def write_kept_files(folder: Path, names: list[str], files: Iterator[FileRows], format: str) -> None:
    """Each input file's kept rows into folder/<its name> (output_names; ``files`` in the same
    order): as Parquet, several files at once where cores are free (files_at_once: Arrow's
    Parquet writer releases the GIL); as JSONL one after another (json.dumps and the line
    copies hold it, so threads would add memory and no speed). An error is the first file's
    in order, raised once the files in flight are done."""
    jobs = list(zip(names, files, strict=True))
    at_once = files_at_once([rows.table.nbytes for _, rows in jobs], HOST_THREADS) if format == "parquet" else 1
    for _ in map_parallel(lambda job: write_kept_file(job[1], folder / job[0], format), jobs, at_once):
        pass


def files_at_once(sizes: list[int], threads: int) -> int:
    """How many kept files to write at once, of files of ``sizes`` bytes: as many as
    ``threads``, while the largest that many files together hold at most a quarter of all the
    bytes; at least one. Each file in flight holds a copy of its kept rows and their encoded
    row group beside it, so the files written at once add a small multiple of a quarter of
    the table (or of one file) to the run's memory, not the whole table's."""
    largest = sorted(sizes, reverse=True)
    quarter, at_once = sum(largest) // 4, 1
    while at_once < min(threads, len(largest)) and sum(largest[:at_once + 1]) <= quarter:
        at_once += 1
    return at_once


def write_kept_file(rows: FileRows, path: Path, format: str) -> None:
    """One input file's kept rows into ``path``, its folders made: from a JSONL file to JSONL,
    the kept records' lines as they are in the file (copy_kept_lines), the file refused where
    it is not as its stamp says, the one its run took as it read it (io/stamps.py); otherwise
    its kept rows with its own columns and types (as_input; source.schema). A file that keeps
    no row is written too, empty (with its columns, for Parquet)."""
    source = rows.source
    assert source.location is not None and source.schema is not None, "a file as read_one_file read it"
    path.parent.mkdir(parents=True, exist_ok=True)
    if format == "jsonl" and source.format == "jsonl":
        numbers = source.row_numbers if source.row_numbers is not None else np.arange(1, source.rows + 1)
        location = storage.location_of(source.location)
        # (A staged run's files have no stamp here: its task checks each shard's itself.)
        with unchanged_while(location, source.path, source.stamp):
            copy_kept_lines(location, source, np.asarray(numbers)[rows.keep], path)
        return
    source.check_not_rounded()
    # Filtered first: the kept rows of one file are copied once, their offsets from 0, and
    # types that Arrow cannot filter (string_view) are only cast to, never filtered.
    table = as_input(rows.table.filter(pa.array(rows.keep)), source.schema)
    if format == "parquet":
        write_parquet(table, path)
    else:
        write_jsonl(table, path)


def write_kept_pieces(pieces: Iterator[FileRows], path: Path, format: str) -> None:
    """One input file's kept rows into ``path``, as write_kept_file writes them, from the pieces
    a run cut it into (io/pieces.py; ``pieces``, those with records, read one at a time, in
    order): from JSONL to JSONL the kept lines of the whole file, otherwise each piece's kept
    rows appended, with the file's columns (every piece has them: a Parquet file's stored
    schema, or the columns Arrow gave each piece of a JSONL file, the same in all of them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pieces = iter(pieces)
    first = next(pieces)
    source, columns = first.source, first.source.schema
    every = itertools.chain([first], pieces)
    del first  # (a piece at a time)
    if format == "jsonl" and source.format == "jsonl":
        kept = [np.asarray(rows.source.row_numbers)[rows.keep] for rows in every]
        assert source.location is not None, "a file as read_one_file read it"
        copy_kept_lines(storage.location_of(source.location), source, np.concatenate(kept), path)
        return
    tables = (as_input(rows.table.filter(pa.array(rows.keep)), columns) for rows in every)
    if format == "parquet":
        with parquet_writer(path, columns) as writer:
            for table in tables:
                if table.num_rows:  # (no empty row groups)
                    writer.write_table(table)
    else:
        write_jsonl_batches((batch for table in tables for batch in table.to_batches(ROWS_PER_WRITE)), path)


def copy_kept_lines(location: Location, source: SourceFile, kept_lines: np.ndarray, path: Path) -> None:
    """The lines ``kept_lines`` (int64, ascending, from 1) of a JSONL file (compressed or not), byte
    for byte, each ended with a newline, into ``path``: a kept record comes back exactly as it
    was written (its fields, their order, its numbers' spelling), not as Arrow typed it. A UTF-8
    BOM before the first line is dropped, as the reader drops it. The whole file is read, also
    where ``source`` read a piece of it (line numbers are the file's)."""
    wanted = iter(kept_lines.tolist())
    next_line = next(wanted, None)
    with open(path, "wb") as sink:
        if next_line is None:
            return
        for number, line in enumerate(lines_of(location, dataclasses.replace(source, piece=None)), 1):
            if number == next_line:
                sink.write(line + b"\n")  # a line keeps its \r of \r\n, as it was
                next_line = next(wanted, None)
                if next_line is None:
                    return
    raise InputError(f"{source.path}: changed since the run read it (line {next_line} is gone); nothing was written")


def rows_by_file(table: pa.Table, sources: list[SourceFile], keep: np.ndarray) -> Iterator[FileRows]:
    """For write_kept_files: the rows of an in-memory run's ``table`` (the files' rows one
    file after another, as read_corpus joined them) cut back into the files of ``sources``."""
    start = 0
    for source in sources:
        yield FileRows(source, table.slice(start, source.rows), keep[start:start + source.rows])
        start += source.rows


def write_pairs_part(pieces: list, id_type: pa.DataType, path: str) -> None:
    """Task: a part of pairs/ (tables.pairs_table's columns) from ``pieces``, the slices of
    sorted pandas DataFrames (id_a, id_b, jaccard) that hold its rows, in order
    (pipeline/dask.write_pairs_by_tasks), written to ``path`` (a path or URL); id_type: the
    ids' wide type."""
    import pandas as pd  # (start-up: pandas only where a cluster's frames are)

    rows = pd.concat([frame.iloc[start:stop] for frame, start, stop in pieces]) if pieces else None
    table = pa.table({name: pa.array([], id_type) if rows is None else pa.Array.from_pandas(rows[name], type=id_type)
                      for name in ("id_a", "id_b")}
                     | {"jaccard": pa.array(np.zeros(0) if rows is None else rows["jaccard"].to_numpy(np.float64),
                                            pa.float64())})
    # One chunk per column, as one process writes it: Arrow-backed pandas strings keep a chunk
    # per piece, and the Parquet writer's pages (their bytes) follow the chunks.
    table = table.combine_chunks()
    write_to(path, lambda local: write_parquet(table, local))
