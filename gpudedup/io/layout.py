"""The output layout of a run over files: one output file of kept rows per input file.

A run over files writes ``deduplicated/`` as a copy of the input's tree: each input file's kept
rows go to ``deduplicated/<its name>``, where its name is its path relative to the inputs'
common directory, its input extension (``.jsonl``, ``.json.gz``, ``.parquet``, ``.txt``, ...)
replaced by the output format's (``.parquet`` or ``.jsonl``); ``pairs/`` and ``clusters/`` are
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

import base64
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InputError, ParameterError
from .jsonl_lines import lines_of
from .inputs import JSONL_SUFFIXES, PARQUET_SUFFIXES, TEXT_SUFFIXES, display_path, scan_inputs
from .source import SourceFile
from .writer import write_jsonl, write_parquet

KEPT_DIR = "deduplicated"
PAIRS_DIR = "pairs"
CLUSTERS_DIR = "clusters"
INPUT_SUFFIXES = sorted(JSONL_SUFFIXES + PARQUET_SUFFIXES + TEXT_SUFFIXES, key=len, reverse=True)


def part_name(number: int) -> str:
    """The file name of part ``number`` of a Parquet dataset (pairs/, clusters/)."""
    return f"part-{number:05d}.parquet"


def output_names(files: list[Path], inputs: Iterable[str | os.PathLike], format: str) -> list[str]:
    """The name under deduplicated/ of each input file (in order; POSIX separators): its path
    relative to the common directory of the inputs as given (a directory given is its own
    root; a file given counts by its directory), the input extension replaced by ``format``'s.
    Files that would share that name (``a.jsonl`` and ``a.txt`` side by side) keep their whole
    name, the format's extension added (``a.jsonl.parquet``, ``a.txt.parquet``); two that would
    still share one are a ParameterError naming both, before any work."""
    roots = [Path(os.path.abspath(path)) for path in inputs]
    roots = [root if root.is_dir() else root.parent for root in roots]
    common = Path(os.path.commonpath(roots)) if roots else Path("/")
    relatives = [Path(os.path.abspath(path)).relative_to(common).as_posix() for path in files]
    stems = []
    for relative in relatives:
        suffix = next((s for s in INPUT_SUFFIXES if relative.lower().endswith(s)), "")
        stems.append(relative[: len(relative) - len(suffix)])
    shared = {stem for stem in stems if stems.count(stem) > 1} if len(set(stems)) < len(stems) else set()
    names: list[str] = []
    taken: dict[str, Path] = {}
    for path, relative, stem in zip(files, relatives, stems):
        name = f"{relative if stem in shared else stem}.{format}"
        if name in taken:
            raise ParameterError(
                f"{display_path(taken[name])} and {display_path(path)} would both be written as "
                f"{KEPT_DIR}/{name}; rename one of them, or write one file of kept rows with --single-file")
        taken[name] = path
        names.append(name)
    return names


def check_output_names(inputs: Iterable[str | os.PathLike], format: str, on_error: str = "stop") -> None:
    """Refuse, before any work, inputs two of whose files would share an output name."""
    inputs = list(inputs)
    output_names(scan_inputs(inputs, on_error).files, inputs, format)


def stored_schema(path: Path, read: pa.Schema) -> pa.Schema:
    """The schema of a file's kept rows: for Parquet the Arrow schema its writer stored where
    there is one (fields by name; what pyarrow reads back may differ, see the module), else
    ``read``, the columns as read."""
    if not str(path).lower().endswith(PARQUET_SUFFIXES):
        return read
    metadata = pq.read_metadata(path).metadata or {}
    serialized = metadata.get(b"ARROW:schema")
    if serialized is None:
        return read
    stored = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(serialized)))
    fields = {field.name: field for field in stored}
    # The stored schema as a whole where it names the same columns (its metadata too).
    if [field.name for field in stored] == read.names:
        return stored
    return pa.schema([fields.get(field.name, field) for field in read], metadata=read.metadata)


def as_input(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table``'s columns of ``schema``, in its order, cast back to its types: rows of a run's
    table (whose columns may be unified across files, the text column made plain) as their
    input file had them."""
    # A column all null in its file has Arrow's null type, which no other type casts to.
    return pa.table([pa.nulls(table.num_rows) if pa.types.is_null(field.type) else table[field.name].cast(field.type)
                     for field in schema], schema=schema)


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
    order)."""
    for name, rows in zip(names, files, strict=True):
        write_kept_file(rows, folder / name, format)


def write_kept_file(rows: FileRows, path: Path, format: str) -> None:
    """One input file's kept rows into ``path``, its folders made: from a JSONL file to JSONL,
    the kept records' lines as they are in the file (copy_kept_lines); otherwise its rows with
    its own columns and types (as_input, stored_schema). A file that keeps no row is written
    too, empty (with its columns, for Parquet)."""
    source = rows.source
    assert source.location is not None and source.schema is not None, "a file as read_one_file read it"
    path.parent.mkdir(parents=True, exist_ok=True)
    if format == "jsonl" and source.format == "jsonl":
        numbers = source.row_numbers if source.row_numbers is not None else np.arange(1, source.rows + 1)
        copy_kept_lines(Path(source.location), source, np.asarray(numbers)[rows.keep], path)
        return
    table = as_input(rows.table, stored_schema(Path(source.location), source.schema))
    if format == "parquet":
        write_parquet(table, path, keep=rows.keep)
    else:
        write_jsonl(table, path, keep=rows.keep)


def copy_kept_lines(location: Path, source: SourceFile, kept_lines: np.ndarray, path: Path) -> None:
    """The lines ``kept_lines`` (int64, ascending, from 1) of a JSONL file (gzipped or not), byte
    for byte, each ended with a newline, into ``path``: a kept record comes back exactly as it
    was written (its fields, their order, its numbers' spelling), not as Arrow typed it. A UTF-8
    BOM before the first line is dropped, as the reader drops it."""
    wanted = iter(kept_lines.tolist())
    next_line = next(wanted, None)
    with open(path, "wb") as sink:
        if next_line is None:
            return
        for number, line in enumerate(lines_of(location, source), 1):
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
