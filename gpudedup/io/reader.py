"""Reading documents from JSONL (.jsonl, .jsonl.gz), Parquet and plain-text files (pyarrow, host).

Paths may be files or directories; directories are walked recursively in sorted order (hidden
entries and files of other types are skipped, and the skipped files are reported). Every
problem is raised as an InputError naming the file and line (JSONL), row (Parquet) or field.

Document ids: the ``id_field`` column when given, else ``<path>:<row>``, where path is the file
as found (relative to the working directory when it lies below it) and row counts from 1 (for
JSONL it is the line number).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
import pyarrow.parquet as pq

from ..errors import InputError
from ..normalize import text_buffers, utf8_buffers

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
    inputs: the paths the corpus was read from, as given (outputs must stay clear of them).
    """

    table: pa.Table
    text_field: str
    ids: pa.Array
    files: list[SourceFile] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    # The text column already on the GPU when cuDF read it (io/cudf_reader.py): (UTF-8 bytes,
    # cupy uint8 (B,); byte offsets, host int64 (n + 1,)). None: the text is on the host only.
    device_text: Optional[tuple] = None

    def __post_init__(self):
        # The stages want the text as one string or large_string array: an all-null column
        # has Arrow's null type, newer producers may send string_view, and a column in many
        # chunks (one per block read) would make every take() concatenate all of them first.
        texts = self.table[self.text_field]
        if not (pa.types.is_string(texts.type) or pa.types.is_large_string(texts.type)):
            texts = texts.cast(pa.large_string())
        elif pa.types.is_string(texts.type) and texts.nbytes >= 2**31 - 2**20:
            texts = texts.cast(pa.large_string())  # 32-bit offsets cannot span > 2 GiB
        if texts.num_chunks != 1 or texts is not self.table[self.text_field]:
            single = texts.combine_chunks() if texts.num_chunks else pa.array([], texts.type)
            index = self.table.schema.get_field_index(self.text_field)
            self.table = self.table.set_column(index, self.text_field, pa.chunked_array([single]))

    @property
    def texts(self) -> pa.ChunkedArray:
        return self.table[self.text_field]

    def text_array(self) -> pa.Array:
        """The text column as one string or large_string array (no copy)."""
        return self.texts.chunk(0) if self.texts.num_chunks else pa.array([], pa.large_string())

    def utf8(self) -> tuple[np.ndarray, np.ndarray]:
        """The texts as UTF-8 bytes uint8 (B,) and byte offsets int64 (n + 1,), host views of
        the text column (no copy; nulls give empty texts, copied then)."""
        return utf8_buffers(self.text_array())

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
    paths: Iterable[str | os.PathLike], text_field: str = "text", id_field: Optional[str] = None,
    use_cudf: bool = False,
) -> Corpus:
    """Read every document under ``paths`` into one Corpus.

    use_cudf: parse JSONL and Parquet files with cuDF on the GPU and keep the text there
    (Corpus.device_text); a file cuDF cannot read is read by pyarrow, which also gives the
    errors. Needs cuDF (and the GPU backend); the documents are the same either way.
    """
    paths = [str(p) for p in paths]
    files, skipped = find_input_files(paths)
    tables, sources, ids, device_parts = [], [], [], []
    for path in files:
        source = SourceFile(display_path(path), file_format(path))
        table, row_numbers, device_part = None, None, None
        if use_cudf and source.format in ("jsonl", "parquet"):
            table, row_numbers, device_part = read_file_with_cudf(path, source, text_field, id_field)
        if table is None:
            table, row_numbers = read_file(path, source, text_field, id_field)
        device_parts.append(device_part)
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
    corpus = Corpus(table, text_field, concat_ids(ids, sources, id_field), sources, skipped, paths)
    check_unique_ids(corpus)
    if use_cudf and any(part is not None for part in device_parts):
        corpus.device_text = device_text_of(tables, text_field, device_parts)
    return corpus


def read_file_with_cudf(path: Path, source: SourceFile, text_field: str, id_field: Optional[str]):
    """(table, row numbers, device text) of a file read by cuDF, or (None, None, None) when
    cuDF cannot read it (then pyarrow reads it and reports what is wrong)."""
    from . import cudf_reader

    try:
        frame, table = cudf_reader.read_table(path, source.format)
    except Exception:  # cuDF raises many kinds; the pyarrow path gives the user's error
        return None, None, None
    if check_columns(table, source, text_field, id_field):
        return None, None, None
    if source.format == "jsonl":
        row_numbers = jsonl_line_numbers(path, source, table.num_rows)
        if non_object_lines(path, source, table, row_numbers):
            return None, None, None
    else:
        row_numbers = np.arange(1, table.num_rows + 1)
    try:
        device_part = cudf_reader.device_utf8(frame[text_field])
    except (AttributeError, TypeError, ValueError, RuntimeError):  # a string layout we cannot view
        device_part = None  # device_text_of copies the host text instead
    return table, row_numbers, device_part


def device_text_of(tables: list[pa.Table], text_field: str, device_parts: list) -> tuple:
    """The corpus text on the device: cuDF's parts, and a copy of the host text of the files
    pyarrow read."""
    import cupy

    from . import cudf_reader

    parts = []
    for table, part in zip(tables, device_parts):
        if part is None:
            data, offsets = text_buffers(pc.cast(table[text_field], pa.large_string()))
            part = (cupy.asarray(data), cupy.asarray(offsets))
        parts.append(part)
    return cudf_reader.concat_device_utf8(parts)


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


def open_binary(path: Path):
    """The file's bytes as a stream, gunzipped for .gz names (pyarrow, no full copy in memory)."""
    compression = "gzip" if path.name.lower().endswith(".gz") else None
    return pa.input_stream(str(path), compression=compression)


def lines_of(path: Path, source: SourceFile) -> Iterator[bytes]:
    """The lines of a (possibly gzipped) file, for the slow paths: diagnosis and line numbers."""
    try:
        with open_binary(path) as stream:
            pending = b""
            while chunk := stream.read(1 << 24):
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()
                yield from lines
            if pending:
                yield pending
    except (OSError, pa.ArrowInvalid) as error:
        raise InputError(f"{source.path}: cannot read ({error})") from None


def read_jsonl(path: Path, source: SourceFile, text_field: str, id_field: Optional[str]):
    try:
        table = parse_jsonl(path)
        table.validate(full=True)  # pyarrow's JSON reader does not check UTF-8 itself
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as error:
        if isinstance(error, PermissionError):
            raise
        problem = diagnose_jsonl(path, source, text_field, id_field)
        if problem:
            raise InputError(problem) from None
        if "Empty JSON" in str(error) or not any(line.strip() for line in lines_of(path, source)):
            return pa.table({text_field: pa.array([], pa.string())}), np.zeros(0, np.int64)
        raise InputError(f"{source.path}: cannot read as JSON Lines ({error})") from None
    if table.num_rows == 0:  # only blank lines: no records, and no columns to check
        return pa.table({text_field: pa.array([], pa.string())}), np.zeros(0, np.int64)
    problem = check_columns(table, source, text_field, id_field)
    if problem:
        raise InputError(diagnose_jsonl(path, source, text_field, id_field) or problem)
    row_numbers = jsonl_line_numbers(path, source, table.num_rows)
    problem = non_object_lines(path, source, table, row_numbers)
    if problem:
        raise InputError(problem)
    return table, row_numbers


def parse_jsonl(path: Path) -> pa.Table:
    """The records of a JSONL file as they are: strings stay strings."""
    read_options = None
    try:
        table = read_json(path, read_options)
    except pa.ArrowInvalid as error:
        if "straddl" not in str(error):
            raise
        # Every line must fit in one block: read again with blocks as large as the longest line.
        longest = max(len(line) for line in lines_of(path, SourceFile(str(path), "jsonl")))
        read_options = pajson.ReadOptions(block_size=min(2 * longest + 2, 2**31 - 1))
        table = read_json(path, read_options)
    # Arrow's JSON reader turns ISO-8601-looking strings into timestamps; a deduplicator must
    # neither reject a text that looks like a date nor rewrite a column. Read again with
    # those fields declared as strings.
    as_strings = strings_for_timestamps(table.schema)
    if as_strings != table.schema:
        table = read_json(path, read_options, pajson.ParseOptions(explicit_schema=as_strings))
    return table


def read_json(path: Path, read_options=None, parse_options=None) -> pa.Table:
    # The streaming reader holds about half the memory of read_json, but it fixes the schema
    # from the first block; when a later block adds a field or changes a type, read it whole.
    try:
        with open_binary(path) as stream:
            reader = pajson.open_json(stream, read_options=read_options, parse_options=parse_options)
            return pa.Table.from_batches(list(reader), schema=reader.schema)
    except pa.ArrowInvalid:
        pass
    with open_binary(path) as stream:
        return pajson.read_json(stream, read_options=read_options, parse_options=parse_options)


def strings_for_timestamps(schema: pa.Schema) -> pa.Schema:
    """The schema with every timestamp type, also inside structs and lists, made a string."""

    def fix(data_type: pa.DataType) -> pa.DataType:
        if pa.types.is_timestamp(data_type):
            return pa.string()
        if pa.types.is_struct(data_type):
            return pa.struct([field.with_type(fix(field.type)) for field in data_type])
        if pa.types.is_list(data_type):
            return pa.list_(data_type.value_field.with_type(fix(data_type.value_type)))
        return data_type

    return pa.schema([field.with_type(fix(field.type)) for field in schema])


def non_object_lines(path: Path, source: SourceFile, table: pa.Table, row_numbers) -> str:
    """Arrow reads a line holding ``null`` as a record of nulls; find such lines among the
    (rare) all-null records and describe the first, or return ''."""
    all_null = np.ones(table.num_rows, dtype=bool)
    for column in table.columns:
        all_null &= column.is_null().to_numpy(zero_copy_only=False)
    suspects = set(row_numbers[all_null].tolist())
    if not suspects:
        return ""
    for number, line in enumerate(lines_of(path, source), start=1):
        if number in suspects and not line.strip().startswith(b"{"):
            return f"{source.path}:{number}: expected a JSON object, got {line.strip()[:20].decode(errors='replace')}"
    return ""


def count_lines(path: Path) -> int:
    """Lines in a file (a last line without a newline counts), read in large chunks."""
    count, last = 0, b"\n"
    with open_binary(path) as stream:
        while chunk := stream.read(1 << 24):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")


def jsonl_line_numbers(path: Path, source: SourceFile, rows: int) -> np.ndarray:
    """The line number (from 1) of every record. Lines holding only white space are not
    records, so the numbers are simply 1..rows unless the file has such lines."""
    numbers = np.arange(1, rows + 1)
    if rows == 0 or count_lines(path) == rows:
        return numbers
    blank = [i for i, line in enumerate(lines_of(path, source), start=1) if not line.strip()]
    if not blank:
        return numbers
    lines = np.arange(1, rows + len(blank) + 1)
    return np.setdiff1d(lines, blank)[:rows]


def diagnose_jsonl(path: Path, source: SourceFile, text_field: str, id_field: Optional[str]) -> str:
    """The first bad line of a JSONL file, described, or '' (slow path, only after a failure)."""
    first_seen: dict[str, tuple[str, int]] = {}  # field -> (JSON type, line) where first seen
    for number, line in enumerate(lines_of(path, source), start=1):
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
        for name, value in record.items():
            kind = json_type(value)
            if kind == "null":
                continue
            seen_kind, seen_line = first_seen.setdefault(name, (kind, number))
            if kind != seen_kind:
                return (f"{where}: field {name!r} is {kind}, but {seen_kind} on line {seen_line}; "
                        "a field must hold values of one type")
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
        f"share it ({len(repeated)} distinct ids are repeated); ids must be unique"
    )


def locate_row(corpus: Corpus, row: int) -> str:
    """Where a corpus row (from 0) came from: 'FILE:LINE' or 'FILE row N'."""
    for source in corpus.files:
        if row < source.rows:
            return source.where(row)
        row -= source.rows
    return f"row {row + 1}"
