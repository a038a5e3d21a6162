"""Reading documents from JSONL (.jsonl, .jsonl.gz), Parquet and plain-text files (pyarrow, host).

Paths may be files or directories; directories are walked recursively in sorted order (hidden
entries and files of other types are skipped, and the skipped files are reported). Every
problem is raised as an InputError naming the file and line (JSONL), row (Parquet) or field.

Document ids: the ``id_field`` column when given, else ``<path>:<row>``, where path is the file
as found (relative to the working directory when it lies below it) and row counts from 1 (for
JSONL it is the line number).
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
import pyarrow.parquet as pq

from ..errors import InputError

JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json", ".jsonl.gz", ".ndjson.gz", ".json.gz")
PARQUET_SUFFIXES = (".parquet", ".pq")
TEXT_SUFFIXES = (".txt",)


@dataclass
class SourceFile:
    path: str  # as shown in ids and messages
    format: str  # "jsonl", "parquet" or "text"
    rows: int = 0
    row_numbers: Optional[np.ndarray] = None  # int64 (rows,): line (JSONL) or row, from 1

    def where(self, row: int) -> str:
        """'FILE:LINE' (JSONL) or 'FILE row N' for the row-th record (from 0) of this file."""
        number = int(self.row_numbers[row]) if self.row_numbers is not None else row + 1
        return f"{self.path}:{number}" if self.format == "jsonl" else f"{self.path} row {number}"


@dataclass
class Corpus:
    """Documents in input order (host).

    table: every input column of every row (pyarrow Table, columns unified across files).
    text_field: the name of the text column in ``table`` (string or large_string; null = empty).
    ids: pyarrow Array of unique document ids (string or int64), one per row.
    files: where the rows came from, in order; skipped: files passed over in directories.
    """

    table: pa.Table
    text_field: str
    ids: pa.Array
    files: list[SourceFile] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def texts(self) -> pa.ChunkedArray:
        return self.table[self.text_field]

    @property
    def num_rows(self) -> int:
        return self.table.num_rows


def file_format(path: Path) -> Optional[str]:
    name = path.name.lower()
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    if name.endswith(TEXT_SUFFIXES):
        return "text"
    return None


def display_path(path: Path) -> str:
    absolute = path.absolute()
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


def find_input_files(paths: Iterable[str | os.PathLike]) -> tuple[list[Path], list[str]]:
    """The files to read, in order, and the files skipped inside directories."""
    files, skipped = [], []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            for root, dirs, names in os.walk(path, onerror=_raise_walk_error):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(names):
                    candidate = Path(root) / name
                    if name.startswith(".") or file_format(candidate) is None:
                        skipped.append(display_path(candidate))
                    else:
                        files.append(candidate)
        elif path.exists():
            if file_format(path) is None:
                raise InputError(
                    f"{given}: unsupported file type; expected one of "
                    f"{', '.join(JSONL_SUFFIXES + PARQUET_SUFFIXES + TEXT_SUFFIXES)}"
                )
            files.append(path)
        else:
            raise InputError(f"{given}: no such file or directory")
    if not files:
        shown = ", ".join(str(p) for p in paths)
        raise InputError(
            f"no input files found in {shown} (looked for JSONL, Parquet and .txt files)"
        )
    return files, skipped


def _raise_walk_error(error: OSError) -> None:
    raise InputError(f"{error.filename}: cannot read directory ({error.strerror})")


def read_corpus(
    paths: Iterable[str | os.PathLike], text_field: str = "text", id_field: Optional[str] = None
) -> Corpus:
    """Read every document under ``paths`` into one Corpus."""
    files, skipped = find_input_files(list(paths))
    tables, sources, ids = [], [], []
    for path in files:
        source = SourceFile(display_path(path), file_format(path))
        table, row_numbers = read_file(path, source, text_field, id_field)
        source.rows, source.row_numbers = table.num_rows, row_numbers
        tables.append(table)
        sources.append(source)
        if id_field is None:
            ids.append(pc.binary_join_element_wise(
                source.path, pa.array(row_numbers.astype(str)), ":"
            ) if table.num_rows else pa.array([], pa.string()))
        else:
            ids.append(table[id_field].combine_chunks())
    table = concat_tables(tables, sources)
    corpus = Corpus(table, text_field, concat_ids(ids, sources, id_field), sources, skipped)
    check_unique_ids(corpus)
    return corpus


def read_file(path: Path, source: SourceFile, text_field: str, id_field: Optional[str]):
    """One file as (table, row numbers int64 (rows,) counted from 1)."""
    try:
        if source.format == "jsonl":
            return read_jsonl(path, source, text_field, id_field)
        if source.format == "parquet":
            table = read_parquet(path, source, text_field, id_field)
        else:
            table = read_text_file(path, source, text_field)
    except PermissionError:
        raise InputError(f"{source.path}: permission denied") from None
    except IsADirectoryError:
        raise InputError(f"{source.path}: is a directory, expected a file") from None
    return table, np.arange(1, table.num_rows + 1)


# --- JSONL --------------------------------------------------------------------------------------


def read_raw(path: Path, source: SourceFile) -> bytes:
    try:
        raw = path.read_bytes()
        if path.name.lower().endswith(".gz"):
            raw = gzip.decompress(raw)
    except PermissionError:
        raise InputError(f"{source.path}: permission denied") from None
    except (OSError, EOFError, zlib.error) as error:
        raise InputError(f"{source.path}: cannot decompress gzip data ({error})") from None
    return raw


def read_jsonl(path: Path, source: SourceFile, text_field: str, id_field: Optional[str]):
    raw = read_raw(path, source)
    if not raw.strip():
        return pa.table({text_field: pa.array([], pa.string())}), np.zeros(0, np.int64)
    try:
        table = parse_jsonl(raw)
        table.validate(full=True)  # pyarrow's JSON reader does not check UTF-8 itself
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        raise InputError(diagnose_jsonl(raw, source, text_field, id_field)) from None
    row_numbers = jsonl_line_numbers(raw, table.num_rows)
    problem = check_columns(table, source, text_field, id_field)
    if problem:
        raise InputError(diagnose_jsonl(raw, source, text_field, id_field) or problem)
    return table, row_numbers


def parse_jsonl(raw: bytes) -> pa.Table:
    # Every line must fit in one block; retry with one block for the whole file when a very
    # long record straddles the default block boundary.
    try:
        return pajson.read_json(pa.BufferReader(raw))
    except pa.ArrowInvalid as error:
        if "straddl" not in str(error):
            raise
    options = pajson.ReadOptions(block_size=len(raw) + 1)
    return pajson.read_json(pa.BufferReader(raw), read_options=options)


def jsonl_line_numbers(raw: bytes, rows: int) -> np.ndarray:
    """The line number (from 1) of every record: lines that hold only white space are not
    records."""
    data = np.frombuffer(raw, dtype=np.uint8)
    line_starts = np.concatenate([[0], np.flatnonzero(data == ord("\n")) + 1])
    line_starts = line_starts[line_starts < data.shape[0]]
    if line_starts.shape[0] == rows:
        return np.arange(1, rows + 1)
    blank = np.array([not raw[s : raw.find(b"\n", s) if raw.find(b"\n", s) >= 0 else None].strip()
                      for s in line_starts])
    return np.flatnonzero(~blank) + 1


def diagnose_jsonl(raw: bytes, source: SourceFile, text_field: str, id_field: Optional[str]) -> str:
    """The first bad line of a JSONL file, described (slow path, only after a failure)."""
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        where = f"{source.path}:{number}"
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as error:
            return f"{where}: invalid UTF-8 (byte 0x{line[error.start]:02x} at column {error.start + 1})"
        try:
            record = json.loads(text)
        except json.JSONDecodeError as error:
            return f"{where}: invalid JSON ({error.msg} at column {error.colno})"
        if not isinstance(record, dict):
            return f"{where}: expected a JSON object, got {json_type(record)}"
        value = record.get(text_field)
        if value is not None and not isinstance(value, str):
            return f"{where}: field {text_field!r} is {json_type(value)}, expected a string"
        if id_field is not None:
            if record.get(id_field) is None:
                return f"{where}: id field {id_field!r} is missing or null"
            if not isinstance(record[id_field], (str, int)) or isinstance(record[id_field], bool):
                return f"{where}: id field {id_field!r} is {json_type(record[id_field])}, expected a string or an integer"
    return ""


def json_type(value) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


# --- Parquet and text ---------------------------------------------------------------------------


def read_parquet(path: Path, source: SourceFile, text_field: str, id_field: Optional[str]):
    try:
        table = pq.read_table(path)
        table.validate(full=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as error:
        if isinstance(error, PermissionError):
            raise
        raise InputError(f"{source.path}: not a readable Parquet file ({error})") from None
    problem = check_columns(table, source, text_field, id_field)
    if problem:
        raise InputError(problem)
    return table


def read_text_file(path: Path, source: SourceFile, text_field: str) -> pa.Table:
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        raise InputError(
            f"{source.path}:{line}: invalid UTF-8 (byte 0x{raw[error.start]:02x} at byte offset {error.start})"
        ) from None
    return pa.table({text_field: pa.array([text], pa.string())})


# --- checks across columns and files ------------------------------------------------------------


def check_columns(table: pa.Table, source: SourceFile, text_field: str, id_field: Optional[str]) -> str:
    """A message when the text or id column is missing or of the wrong type, else ''."""
    if text_field not in table.column_names:
        return (f"{source.path}: no field {text_field!r} (fields: {', '.join(table.column_names)}); "
                "choose the text field with --text-field")
    text_type = table.schema.field(text_field).type
    if not (pa.types.is_string(text_type) or pa.types.is_large_string(text_type) or pa.types.is_null(text_type)):
        return f"{source.path}: field {text_field!r} has type {text_type}, expected a string"
    if id_field is not None:
        if id_field not in table.column_names:
            return f"{source.path}: no id field {id_field!r} (fields: {', '.join(table.column_names)})"
        id_column = table[id_field]
        id_type = id_column.type
        if not (pa.types.is_string(id_type) or pa.types.is_large_string(id_type) or pa.types.is_integer(id_type)):
            return f"{source.path}: id field {id_field!r} has type {id_type}, expected strings or integers"
        if id_column.null_count:
            row = int(np.flatnonzero(id_column.is_null().to_numpy(zero_copy_only=False))[0]) + 1
            return f"{source.path}: row {row}: id field {id_field!r} is null"
    return ""


def concat_tables(tables: list[pa.Table], sources: list[SourceFile]) -> pa.Table:
    if len(tables) == 1:
        return tables[0]
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise InputError(
            f"the input files have columns of incompatible types and cannot be combined ({error}); "
            f"files: {', '.join(s.path for s in sources)}"
        ) from None


def concat_ids(ids: list[pa.Array], sources: list[SourceFile], id_field: Optional[str]) -> pa.Array:
    if id_field is None:
        return pa.concat_arrays([a.cast(pa.string()) for a in ids])
    kinds = {pa.types.is_integer(a.type) for a in ids if len(a)}
    if len(kinds) > 1:
        raise InputError(f"id field {id_field!r} holds integers in some files and strings in others")
    target = pa.int64() if kinds == {True} else pa.string()
    return pa.concat_arrays([a.cast(target) for a in ids])


def check_unique_ids(corpus: Corpus) -> None:
    ids = corpus.ids
    if len(ids) == 0:
        return
    counts = pc.value_counts(ids)
    repeated = pc.filter(counts.field("values"), pc.greater(counts.field("counts"), 1))
    if len(repeated) == 0:
        return
    first = repeated[0].as_py()
    rows = np.flatnonzero(pc.equal(ids, repeated[0]).to_numpy(zero_copy_only=False))
    raise InputError(
        f"duplicate id {first!r}: documents {', '.join(locate_row(corpus, int(r)) for r in rows[:3])} "
        f"share it ({len(repeated)} ids repeat in all); ids must be unique"
    )


def locate_row(corpus: Corpus, row: int) -> str:
    """Where a corpus row (from 0) came from: 'FILE:LINE' or 'FILE row N'."""
    for source in corpus.files:
        if row < source.rows:
            return source.where(row)
        row -= source.rows
    return f"row {row + 1}"
