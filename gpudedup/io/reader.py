"""Reading documents from JSONL (.jsonl, .jsonl.gz), Parquet and plain-text files (pyarrow, host).

Paths may be files or directories; directories are walked recursively in sorted order (hidden
entries and files of other types are skipped, and the skipped files are reported). Symbolic
links are followed, except where following would loop or read a file or directory a second
time; such paths are skipped and explained in ``Corpus.notes``. Every problem is raised as an
InputError naming the file and line (JSONL), row (Parquet) or field; with ``on_error="skip"``
bad records and unreadable files are left out and listed in ``Corpus.skipped_records`` instead
(see ``read_corpus``).

Document ids: the ``id_field`` column when given, else ``<path>:<row>``, where path is the file
as found (relative to the working directory when it lies below it) and row counts from 1 (for
JSONL it is the line number). Leaving records out never changes the ids of the others.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
import pyarrow.parquet as pq

from ..errors import InputError, ParameterError
from ..memory import MemoryBudget
from ..normalize import text_buffers, utf8_buffers
from .sizes import read_bytes_estimate

JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json", ".jsonl.gz", ".ndjson.gz", ".json.gz")
PARQUET_SUFFIXES = (".parquet", ".pq")
TEXT_SUFFIXES = (".txt",)
ON_ERROR_CHOICES = ("stop", "skip")

UTF8_BOM = b"\xef\xbb\xbf"
JSON_WHITESPACE = b" \t\r\n"
CHUNK_BYTES = 1 << 24
MAX_JSON_DEPTH = 200  # deeper records are refused: Python's and Arrow's recursion stay bounded
MAX_BLOCK_BYTES = 2**31 - 1  # Arrow's JSON reader needs every line within one block


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
    skipped_records: with on_error="skip", what was left out, in input order: one dict
        {"file": display path, "line": int from 1 or None, "reason": str} per bad record
        (JSONL: its line; Parquet: its row) or per whole file left out (line None).
    notes: one line per path passed over for a reason worth telling (a symbolic link that
        would loop or read something twice, a broken link, a pipe or device, an input
        directory without input files).
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
    skipped_records: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

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


# --- errors: stop at the first, or leave the record out ----------------------------------------


def file_error(path: str, reason: str, where: Optional[str] = None) -> InputError:
    """An InputError for a whole file: 'WHERE: REASON' (WHERE defaults to the path); under
    on_error="skip" the file is left out and ``error.record`` is what is recorded."""
    error = InputError(f"{where or path}: {reason}")
    error.record = {"file": path, "line": None, "reason": reason}
    return error


class RecordErrors:
    """Per-record problems of one file: raised at once (on_error "stop") or collected
    (on_error "skip") as {"file", "line", "reason"} dicts."""

    def __init__(self, on_error: str):
        check_on_error(on_error)
        self.skip = on_error == "skip"
        self.records: list[dict] = []

    def add(self, path: str, line: int, reason: str, where: str) -> None:
        """Record ``line`` (JSONL line or Parquet row, from 1); ``where`` starts the message."""
        if not self.skip:
            raise InputError(f"{where}: {reason}")
        self.records.append({"file": path, "line": int(line), "reason": reason})


def check_on_error(on_error: str) -> None:
    if on_error not in ON_ERROR_CHOICES:
        raise ParameterError(f"on_error must be one of {', '.join(ON_ERROR_CHOICES)}; got {on_error!r}")


# --- finding the files --------------------------------------------------------------------------


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


@dataclass
class InputFiles:
    """What scan_inputs found: the files to read in order, the files passed over inside
    directories, notes on paths passed over for a reason, and (on_error "skip") the
    directories that could not be read, as skipped records."""

    files: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    seen_files: dict = field(default_factory=dict)  # (st_dev, st_ino) -> display path
    seen_dirs: dict = field(default_factory=dict)  # (st_dev, st_ino) -> display path

    def pass_over(self, shown: str, why: str) -> None:
        self.skipped.append(shown)
        self.notes.append(f"{shown}: skipped: {why}")

    def add_file(self, path: Path, status: os.stat_result) -> None:
        key = (status.st_dev, status.st_ino)
        shown = display_path(path)
        if key in self.seen_files:
            self.pass_over(shown, f"the same file as {self.seen_files[key]}, already read")
            return
        self.seen_files[key] = shown
        self.files.append(path)


def find_input_files(paths: Iterable[str | os.PathLike]) -> tuple[list[Path], list[str]]:
    """The files to read, in order, and the files skipped inside directories."""
    found = scan_inputs(paths)
    return found.files, found.skipped


def scan_inputs(paths: Iterable[str | os.PathLike], on_error: str = "stop") -> InputFiles:
    """The input files under ``paths`` (see the module docstring).

    A path given that is missing, a broken link, of an unsupported type or not a regular file
    is an InputError under either on_error; a directory found inside that cannot be read is
    an InputError under "stop" and a skipped record (line None) under "skip".
    """
    check_on_error(on_error)
    paths = list(paths)
    found = InputFiles()
    for given in paths:
        path = Path(given)
        try:
            status = path.stat()
        except OSError as error:
            raise InputError(f"{given}: {missing_reason(path, error)}") from None
        if stat.S_ISDIR(status.st_mode):
            before = len(found.files)
            walked = walk_directory(path, status, found, on_error)
            if walked and len(found.files) == before and len(paths) > 1:
                found.notes.append(f"{given}: no input files in this directory")
        elif file_format(path) is None:
            raise InputError(
                f"{given}: unsupported file type; expected one of "
                f"{', '.join(JSONL_SUFFIXES + PARQUET_SUFFIXES + TEXT_SUFFIXES)}"
            )
        elif not stat.S_ISREG(status.st_mode):
            raise InputError(f"{given}: not a regular file ({special_kind(status)}); expected a file")
        else:
            found.add_file(path, status)
    if not found.files and not found.records:
        shown = ", ".join(str(p) for p in paths)
        raise InputError(
            f"no input files found in {shown} (looked for JSONL, Parquet and .txt files)"
        )
    return found


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
    stack = [(root, (root_key,))]  # (directory, the (dev, inode) of it and its ancestors)
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
            if entry.name.startswith("."):  # hidden: directories (.git, ...) silently, files listed
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


# --- the corpus -----------------------------------------------------------------------------------


def read_corpus(
    paths: Iterable[str | os.PathLike], text_field: str = "text", id_field: Optional[str] = None,
    use_cudf: bool = False, on_error: str = "stop", budget: Optional[MemoryBudget] = None,
) -> Corpus:
    """Read every document under ``paths`` into one Corpus.

    use_cudf: parse JSONL and Parquet files with cuDF on the GPU and keep the text there
    (Corpus.device_text); a file cuDF cannot read is read by pyarrow, which also gives the
    errors. Needs cuDF (and the GPU backend); the documents are the same either way.

    on_error: "stop" (default) raises an InputError at the first problem, naming the file and
    line (JSONL), row (Parquet) or field. "skip" leaves out what cannot be used and lists it
    in ``Corpus.skipped_records`` ({"file", "line", "reason"}), so the run goes on:

    * per record (that record is left out; "line" is the JSONL line or Parquet row, from 1):
      a JSONL line that is not valid UTF-8, not valid JSON (or two values on one line), not
      an object, nested more than MAX_JSON_DEPTH deep, with a number too large for a double
      or a field given twice; a text field that is neither a string nor null (missing is
      null, kept and counted as a null text); an id field (id_field) that is missing, null,
      or neither a string nor an integer; a field whose JSON type differs from its type on
      the first line that had it; with id_field, a duplicate id (the first is kept); in
      Parquet, a null id or a text that is not valid UTF-8;
    * per file (the whole file is left out, recorded once with line None, and per-record
      entries of that file are dropped): a file that cannot be opened or read (permission,
      corrupt or truncated gzip, not Parquet, corrupt Parquet), a file without the text field
      or id field at all or with a column of the wrong type (Parquet), a .txt file that is
      not valid UTF-8 (or any .txt file when id_field is given: it has no fields), a JSONL
      line over 1 GiB (Arrow's block limit), a file whose columns cannot be combined with the
      files before it, and a directory inside the inputs that cannot be read.

    A path given that does not exist or has an unsupported type stops the run either way, as
    do inputs that hold no input files at all. Leaving records out never changes the ids of
    the records kept (a JSONL record keeps ``<path>:<line>``).

    budget: --max-memory; reading stops before the first file with MemoryLimitError when the
    files' estimated size (io/sizes.py) does not fit.
    """
    check_on_error(on_error)
    skip = on_error == "skip"
    paths = [str(p) for p in paths]
    found = scan_inputs(paths, on_error)
    if budget is not None:
        budget.check("reading the input", lambda: read_bytes_estimate([(p, file_format(p)) for p in found.files]),
                     "deduplicate the input in parts, or raise --max-memory")
    parts: list[FilePart] = []
    records = list(found.records)
    for path in found.files:
        source = SourceFile(display_path(path), file_format(path))
        try:
            part = read_one_file(path, source, text_field, id_field, use_cudf, on_error)
        except InputError as error:
            if not skip:
                raise
            records.append(getattr(error, "record", None) or
                           {"file": source.path, "line": None, "reason": strip_path(str(error), source.path)})
            continue
        records.extend(part.records)
        parts.append(part)
    parts = compatible_parts(parts, text_field, id_field, records, skip)
    if skip and id_field is not None:
        parts = drop_duplicate_ids(parts, records)
    corpus = build_corpus(parts, text_field, id_field, found, paths)
    corpus.skipped_records = sorted_records(records, found)
    check_unique_ids(corpus)
    if use_cudf and any(part.device_part is not None for part in parts):
        corpus.device_text = device_text_of([p.table for p in parts], text_field,
                                            [p.device_part for p in parts])
    return corpus


@dataclass
class FilePart:
    """One file as read: its rows, their ids, where they came from, what was left out."""

    source: SourceFile
    table: pa.Table
    ids: pa.Array
    device_part: Optional[tuple] = None
    records: list[dict] = field(default_factory=list)


def read_one_file(path: Path, source: SourceFile, text_field: str, id_field: Optional[str],
                  use_cudf: bool, on_error: str) -> FilePart:
    """One file as a FilePart; every problem with it is an InputError naming it."""
    table, row_numbers, device_part, records = None, None, None, []
    try:
        if use_cudf and source.format in ("jsonl", "parquet"):
            table, row_numbers, device_part = read_file_with_cudf(path, source, text_field, id_field)
        if table is None:
            table, row_numbers, records = read_file(path, source, text_field, id_field, on_error)
    except InputError:
        raise
    except PermissionError:
        raise file_error(source.path, "permission denied") from None
    except IsADirectoryError:
        raise file_error(source.path, "is a directory, expected a file") from None
    except (pa.ArrowException, OSError, UnicodeError, RecursionError, MemoryError) as error:
        # The readers turn every problem they know into a message of their own; this names
        # the file for anything else the libraries raise on content they cannot read.
        raise file_error(source.path, f"cannot read ({type(error).__name__}: {error})") from None
    source.rows, source.row_numbers = table.num_rows, row_numbers
    if id_field is None:
        ids = pc.binary_join_element_wise(
            source.path, pa.array(row_numbers.astype(str)), ":"
        ) if table.num_rows else pa.array([], pa.string())
    elif id_field in table.column_names:
        ids = table[id_field].combine_chunks()
    elif table.num_rows == 0:  # a file without records (empty, blank lines, all left out)
        ids = pa.array([], pa.string())
    else:
        raise file_error(source.path, f"no id field {id_field!r}")
    return FilePart(source, table, ids, device_part, records)


def strip_path(message: str, path: str) -> str:
    return message[len(path) + 2:] if message.startswith(f"{path}: ") else message


def sorted_records(records: list[dict], found: InputFiles) -> list[dict]:
    """Skipped records in input order: by file (in reading order), then line."""
    order = {display_path(p): i for i, p in enumerate(found.files)}
    return sorted(records, key=lambda r: (order.get(r["file"], -1), r["line"] or 0))


def build_corpus(parts: list[FilePart], text_field: str, id_field: Optional[str],
                 found: InputFiles, paths: list[str]) -> Corpus:
    sources = [p.source for p in parts]
    if parts:
        table = concat_tables([p.table for p in parts], sources)
        ids = concat_ids([p.ids for p in parts], sources, id_field)
    else:  # every file was left out (on_error "skip")
        table = pa.table({text_field: pa.array([], pa.large_string())})
        ids = pa.array([], pa.string())
    return Corpus(table, text_field, ids, sources, found.skipped, paths, notes=found.notes)


def compatible_parts(parts: list[FilePart], text_field: str, id_field: Optional[str],
                     records: list[dict], skip: bool) -> list[FilePart]:
    """The parts whose columns (and id types) can be combined; under "skip" a file that cannot
    be combined with the files before it is left out (under "stop" concat_tables and
    concat_ids raise)."""
    if not skip or len(parts) < 2:
        return parts
    kept, schema, id_kind = [], None, None
    for part in parts:
        try:
            merged = part.table.schema if schema is None else pa.unify_schemas(
                [schema, part.table.schema], promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
            records.append({"file": part.source.path, "line": None,
                            "reason": f"its columns cannot be combined with the files read before it ({error})"})
            drop_records_of(records, part)
            continue
        kind = pa.types.is_integer(part.ids.type) if id_field is not None and len(part.ids) else None
        if kind is not None and id_kind is not None and kind != id_kind:
            records.append({"file": part.source.path, "line": None,
                            "reason": f"id field {id_field!r} holds {'integers' if kind else 'strings'}, "
                                      f"but {'integers' if id_kind else 'strings'} in the files read before it"})
            drop_records_of(records, part)
            continue
        id_kind = kind if kind is not None else id_kind
        schema = merged
        kept.append(part)
    return kept


def drop_records_of(records: list[dict], part: FilePart) -> None:
    """Forget the per-record entries of a file that is left out whole."""
    for record in part.records:
        for i in range(len(records) - 1, -1, -1):
            if records[i] is record:
                del records[i]
                break


def drop_duplicate_ids(parts: list[FilePart], records: list[dict]) -> list[FilePart]:
    """Under "skip": keep the first document of every id, leave out the later ones."""
    lengths = [len(p.ids) for p in parts]
    if sum(lengths) == 0:
        return parts
    ids = concat_ids([p.ids for p in parts], [p.source for p in parts], "id")
    codes = ids.dictionary_encode().indices.to_numpy(zero_copy_only=False)
    _, first = np.unique(codes, return_index=True)
    keep = np.zeros(len(codes), dtype=bool)
    keep[first] = True
    if keep.all():
        return parts
    first_row = first[codes]  # the row where each row's id is first used (codes are 0..k-1)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    owner = np.searchsorted(starts, np.arange(len(codes)), side="right") - 1

    def where(row: int) -> str:
        part = parts[owner[row]]
        return part.source.where(row - starts[owner[row]])

    for row in np.flatnonzero(~keep):
        part = parts[owner[row]]
        local = row - starts[owner[row]]
        records.append({"file": part.source.path, "line": int(part.source.row_numbers[local]),
                        "reason": f"duplicate id {ids[int(row)].as_py()!r}: the same id as {where(int(first_row[row]))}, which is kept"})
    for i, part in enumerate(parts):
        mask = keep[starts[i]:starts[i + 1]]
        if mask.all():
            continue
        part.table = part.table.filter(pa.array(mask))
        part.ids = part.ids.filter(pa.array(mask))
        part.source.row_numbers = part.source.row_numbers[mask]
        part.source.rows = part.table.num_rows
        part.device_part = None  # the device copy is made from the kept host text instead
    return parts


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
        row_numbers = record_line_numbers(lambda: open_binary(path), table.num_rows, path, source)
        if row_numbers is None:
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


def read_file(path: Path, source: SourceFile, text_field: str, id_field: Optional[str],
              on_error: str = "stop"):
    """One file as (table, row numbers int64 (rows,) counted from 1, skipped records)."""
    if source.format == "jsonl":
        return read_jsonl(path, source, text_field, id_field, on_error)
    if source.format == "parquet":
        return read_parquet(path, source, text_field, id_field, on_error)
    if id_field is not None:
        raise file_error(source.path, f"a .txt file is one document without fields, so it has no id "
                                      f"field {id_field!r}; leave out the id field or the .txt files")
    table = read_text_file(path, source, text_field)
    return table, np.arange(1, table.num_rows + 1), []


# --- JSONL --------------------------------------------------------------------------------------


def open_binary(path: Path):
    """The file's bytes as a stream, gunzipped for .gz names (pyarrow, no full copy in memory)."""
    compression = "gzip" if path.name.lower().endswith(".gz") else None
    return pa.input_stream(str(path), compression=compression)


def lines_of(path: Path, source: SourceFile) -> Iterator[bytes]:
    """The lines of a (possibly gzipped) file, split at b'\\n' (a UTF-8 BOM before the first
    is dropped), for the slow paths: diagnosis, skipping and line numbers."""
    try:
        with open_binary(path) as stream:
            pending: list[bytes] = []  # the line read so far (a long line comes in many chunks)
            first = True
            while chunk := stream.read(CHUNK_BYTES):
                if first:
                    chunk, first = chunk.removeprefix(UTF8_BOM), False
                pieces = chunk.split(b"\n")
                if len(pieces) == 1:
                    pending.append(chunk)
                    continue
                pending.append(pieces[0])
                yield b"".join(pending)
                yield from pieces[1:-1]
                pending = [pieces[-1]] if pieces[-1] else []
            if pending:
                yield b"".join(pending)
    except PermissionError:
        raise
    except (OSError, pa.ArrowInvalid) as error:
        raise read_error(path, source, error) from None


def read_error(path: Path, source: SourceFile, error: Exception) -> InputError:
    """The InputError for a file whose bytes cannot be read (I/O, gzip)."""
    if path.name.lower().endswith(".gz"):
        try:
            with open(path, "rb") as raw:
                magic = raw.read(2)
        except OSError:
            magic = b"\x1f\x8b"
        if magic != b"\x1f\x8b":
            return file_error(source.path, "not gzip-compressed (it does not start with the gzip "
                                           "signature 1f 8b); a plain JSONL file must not end in .gz")
        return file_error(source.path, f"cannot decompress: corrupt or truncated gzip data ({error})")
    return file_error(source.path, f"cannot read ({error})")


def read_jsonl(path: Path, source: SourceFile, text_field: str, id_field: Optional[str],
               on_error: str = "stop"):
    """(table, line numbers, skipped records) of a JSONL file.

    Clean files are parsed by Arrow in one go (the fast path). A file Arrow cannot read, or
    whose records do not sit one to a line, or whose text or id column is not right, is read
    again line by line: every line is checked (check_jsonl_line), the first bad one raises
    (on_error "stop") or each bad one is recorded and left out ("skip"), and the good lines
    are parsed by Arrow.
    """
    errors = RecordErrors(on_error)
    opener = lambda: open_binary(path)  # noqa: E731
    table = None
    try:
        # Arrow 26 crashes (SIGSEGV) on a line holding `null` at the start of a block, so it
        # only ever sees files whose every non-blank line looks like one object.
        row_numbers = object_line_numbers(opener, path, source)
        if row_numbers is not None:
            table = parse_jsonl(opener, path, source)
            table.validate(full=True)  # pyarrow's JSON reader does not check UTF-8 itself
    except PermissionError:
        raise
    except OSError as error:  # I/O and gzip errors (Arrow's parse errors are ArrowInvalid)
        raise read_error(path, source, error) from None
    except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeError, RecursionError):
        table = None  # the slow path finds the line and says what is wrong
    if table is not None and table.num_rows == row_numbers.size:
        if table.num_rows == 0:  # only blank lines: no records, and no columns to check
            return empty_table(text_field), np.zeros(0, np.int64), []
        problem = check_columns(table, source, text_field, id_field, nulls=False)
        if problem and (text_field not in table.column_names
                        or (id_field is not None and id_field not in table.column_names)):
            raise file_error(source.path, strip_path(problem, source.path))  # absent in every line
        if not problem and not null_ids(table, id_field) and type_depth(table.schema) <= MAX_JSON_DEPTH:
            return table, row_numbers, []
    return read_jsonl_by_line(path, source, text_field, id_field, errors)


def empty_table(text_field: str) -> pa.Table:
    return pa.table({text_field: pa.array([], pa.string())})


def type_depth(schema: pa.Schema) -> int:
    """How deeply the schema's types nest (a flat column counts 1), without recursion."""
    deepest, stack = 0, [(f.type, 1) for f in schema]
    while stack:
        data_type, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((data_type.field(i).type, depth + 1) for i in range(data_type.num_fields))
    return deepest


def null_ids(table: pa.Table, id_field: Optional[str]) -> bool:
    return id_field is not None and table[id_field].null_count > 0


def read_jsonl_by_line(path: Path, source: SourceFile, text_field: str, id_field: Optional[str],
                       errors: RecordErrors):
    """The slow path of read_jsonl: check every line, leave out (or stop at) the bad ones,
    parse the good ones with Arrow."""
    kept: list[bytes] = []
    numbers: list[int] = []
    first_seen: dict[tuple, tuple[str, int]] = {}  # field path -> (JSON type, line)
    for number, line in enumerate(lines_of(path, source), start=1):
        if not line.strip(JSON_WHITESPACE):
            continue
        problem, kinds = check_jsonl_line(line, number, text_field, id_field, first_seen)
        if problem:
            if number == 1:
                problem += compressed_hint(line, path)
            errors.add(source.path, number, problem, f"{source.path}:{number}")
            continue
        for key, kind in kinds.items():
            first_seen.setdefault(key, (kind, number))
        # A carriage return outside a string is white space; inside one it is invalid and
        # json.loads has refused it already. Arrow might take a lone one for a line end.
        kept.append(line.replace(b"\r", b" "))
        numbers.append(number)
    if not kept:
        return empty_table(text_field), np.zeros(0, np.int64), errors.records
    data = b"\n".join(kept)
    longest = int(np.argmax([len(line) for line in kept]))
    longest = (len(kept[longest]), numbers[longest])
    del kept
    try:
        table = parse_jsonl(lambda: pa.BufferReader(data), path, source, longest=longest)
        table.validate(full=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeError, RecursionError) as error:
        raise file_error(source.path, f"cannot read as JSON Lines ({error})") from None
    if table.num_rows != len(numbers):
        raise file_error(source.path, f"cannot read as JSON Lines (Arrow read {table.num_rows} records "
                                      f"from {len(numbers)} lines)")
    problem = check_columns(table, source, text_field, id_field)
    if problem:
        raise file_error(source.path, strip_path(problem, source.path))
    return table, np.asarray(numbers, dtype=np.int64), errors.records


def compressed_hint(line: bytes, path: Path) -> str:
    """A hint when a file's first line shows it is compressed or Parquet, not JSON text."""
    for magic, what in ((b"\x1f\x8b", "gzip-compressed: name it .jsonl.gz"),
                        (b"PAR1", "a Parquet file: name it .parquet"),
                        (b"\x28\xb5\x2f\xfd", "zstd-compressed, which is not supported"),
                        (b"BZh", "bzip2-compressed, which is not supported"),
                        (b"\xfd7zXZ", "xz-compressed, which is not supported")):
        if line.startswith(magic) and not (magic == b"\x1f\x8b" and path.name.lower().endswith(".gz")):
            return f"; the file looks {what}"
    return ""


def parse_jsonl(open_stream: Callable, path: Path, source: SourceFile,
                longest: Optional[tuple[int, int]] = None) -> pa.Table:
    """The records of a JSONL stream as they are: strings stay strings.
    longest: (length, line) of the longest line when known (else measured when needed)."""
    read_options = None
    try:
        table = read_json(open_stream, read_options)
    except pa.ArrowInvalid as error:
        if "straddl" not in str(error):
            raise
        # Every line must fit in one block: read again with blocks as large as the longest line.
        length, line = longest if longest is not None else longest_line(open_stream)
        if 2 * length + 2 > MAX_BLOCK_BYTES:
            raise file_error(source.path, f"line {line} is {length:,} bytes long; JSON lines longer "
                                          f"than {MAX_BLOCK_BYTES // 2 - 1:,} bytes are not supported") from None
        read_options = pajson.ReadOptions(block_size=2 * length + 2)
        table = read_json(open_stream, read_options)
    # Arrow's JSON reader turns ISO-8601-looking strings into timestamps; a deduplicator must
    # neither reject a text that looks like a date nor rewrite a column. Read again with
    # those fields declared as strings.
    as_strings = strings_for_timestamps(table.schema)
    if as_strings != table.schema:
        table = read_json(open_stream, read_options, pajson.ParseOptions(explicit_schema=as_strings))
    return table


def read_json(open_stream: Callable, read_options=None, parse_options=None) -> pa.Table:
    # The streaming reader holds about half the memory of read_json, but it fixes the schema
    # from the first block; when a later block adds a field or changes a type, read it whole.
    try:
        with open_stream() as stream:
            reader = pajson.open_json(stream, read_options=read_options, parse_options=parse_options)
            return pa.Table.from_batches(list(reader), schema=reader.schema)
    except pa.ArrowInvalid:
        pass
    with open_stream() as stream:
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


def longest_line(open_stream: Callable) -> tuple[int, int]:
    """(length in bytes, line number from 1) of the longest line of a stream."""
    longest, where, lines, current = 0, 1, 0, 0
    with open_stream() as stream:
        while chunk := stream.read(CHUNK_BYTES):
            ends = np.flatnonzero(np.frombuffer(chunk, np.uint8) == 10)
            if ends.size == 0:
                current += len(chunk)
                continue
            lengths = np.diff(ends, prepend=-1)
            lengths[0] += current
            i = int(np.argmax(lengths))
            if lengths[i] > longest:
                longest, where = int(lengths[i]), lines + i + 1
            lines += ends.size
            current = len(chunk) - int(ends[-1]) - 1
    if current > longest:
        longest, where = current, lines + 1
    return longest, where


BLANK, OBJECT, OTHER = 0, 1, 2


def line_shapes(open_stream: Callable) -> np.ndarray:
    """For every line of a stream (split at b'\\n'; a last line without one counts; a UTF-8 BOM
    before the first is ignored), int8: BLANK (empty, or a lone '\\r'), OBJECT (starts with
    '{' and ends with '}', before an optional '\\r') or OTHER. Vectorised, in chunks."""
    shapes: list[np.ndarray] = []
    length, head, tail = 0, b"", b""  # the line being read: bytes so far, first byte, last two
    first = True
    with open_stream() as stream:
        while chunk := stream.read(CHUNK_BYTES):
            if first:
                chunk, first = chunk.removeprefix(UTF8_BOM), False
                if not chunk:
                    continue
            buf = np.frombuffer(chunk, np.uint8)
            ends = np.flatnonzero(buf == 10)
            if ends.size == 0:
                head = head if length else chunk[:1]
                tail, length = (tail + chunk[-2:])[-2:], length + len(chunk)
                continue
            piece = chunk[:int(ends[0])]
            shapes.append(np.array([shape_of(length + len(piece), head if length else piece[:1],
                                             (tail + piece[-2:])[-2:])], np.int8))
            if ends.size > 1:
                starts, stops = ends[:-1] + 1, ends[1:]
                sizes = stops - starts
                last = buf[stops - 1]
                cr = (sizes > 0) & (last == 13)
                sizes = sizes - cr
                last = np.where(cr, buf[np.maximum(stops - 2, 0)], last)
                is_object = (sizes >= 2) & (buf[starts] == 123) & (last == 125)
                shapes.append(np.where(sizes == 0, BLANK, np.where(is_object, OBJECT, OTHER)).astype(np.int8))
            rest = chunk[int(ends[-1]) + 1:]
            length, head, tail = len(rest), rest[:1], rest[-2:]
    if length:
        shapes.append(np.array([shape_of(length, head, tail)], np.int8))
    return np.concatenate(shapes) if shapes else np.zeros(0, np.int8)


def shape_of(length: int, head: bytes, tail: bytes) -> int:
    if tail.endswith(b"\r"):
        length, last = length - 1, tail[-2:-1]
    else:
        last = tail[-1:]
    if length <= 0:
        return BLANK
    return OBJECT if length >= 2 and head == b"{" and last == b"}" else OTHER


def record_line_numbers(open_stream: Callable, rows: int, path: Path, source: SourceFile) -> Optional[np.ndarray]:
    """The line number (from 1) of each of the ``rows`` records a parser read, or None when
    the records do not sit one to a non-blank line (a line holding something other than one
    object, or two objects on one line): then the slow path reads the file.

    Every non-blank line must start with '{' and end with '}' (JSON white space aside), so
    no record spans lines; with as many such lines as records, each holds exactly one."""
    numbers = object_line_numbers(open_stream, path, source)
    return numbers if numbers is not None and numbers.size == rows else None


def object_line_numbers(open_stream: Callable, path: Path, source: SourceFile) -> Optional[np.ndarray]:
    """The numbers (from 1, int64) of the non-blank lines, or None when one of them does not
    start with '{' and end with '}' (JSON white space aside)."""
    shapes = line_shapes(open_stream)
    other = np.flatnonzero(shapes == OTHER)
    if other.size:  # white space around a record: look at those lines themselves
        wanted = set((other + 1).tolist())
        for number, line in enumerate(lines_of(path, source), start=1):
            if number in wanted:
                stripped = line.strip(JSON_WHITESPACE)
                if not stripped:
                    shapes[number - 1] = BLANK
                elif stripped[:1] == b"{" and stripped[-1:] == b"}":
                    shapes[number - 1] = OBJECT
                else:
                    return None
    return (np.flatnonzero(shapes == OBJECT) + 1).astype(np.int64)


class _Refused(ValueError):
    """A JSON line that Python's parser reads but Arrow's would not."""


def _unique_pairs(pairs: list) -> dict:
    record = dict(pairs)
    if len(record) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused(f"field {key!r} appears twice in one object")
            seen.add(key)
    return record


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _Refused(f"the number {text[:40]} is too large for a double")
    return value


def _any_int(text: str):
    # Arrow reads an integer too large for a double as infinity (and a float as an error);
    # Python refuses to convert integers of more than 4,300 digits.
    return int(text) if len(text) <= 4000 else float("inf")


def check_jsonl_line(line: bytes, number: int, text_field: str, id_field: Optional[str],
                     first_seen: dict) -> tuple[str, dict]:
    """(problem, field types) of one non-blank JSONL line: problem is '' when the line is a
    usable record, else what is wrong with it; field types maps every field path (a tuple,
    '[]' for list items) with a non-null value to its JSON type, for the next lines."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"invalid UTF-8 (byte 0x{line[error.start]:02x} at column {error.start + 1})", {}
    try:
        record = json.loads(text, object_pairs_hook=_unique_pairs, parse_float=_finite_float,
                            parse_int=_any_int)
    except json.JSONDecodeError as error:
        problem = f"invalid JSON ({error.msg} at column {error.colno})"
        if "\r" in text.rstrip("\r\n"):
            problem += ("; the line holds a carriage return (\\r) that does not end it: lines must "
                        "end with \\n or \\r\\n")
        return problem, {}
    except _Refused as error:
        return str(error), {}
    except RecursionError:
        return f"JSON nested more than {MAX_JSON_DEPTH} levels deep", {}
    if not isinstance(record, dict):
        return f"expected a JSON object, got {json_type(record)}", {}
    value = record.get(text_field)
    if value is not None and not isinstance(value, str):
        return f"field {text_field!r} is {json_type(value)}, expected a string", {}
    if id_field is not None:
        value = record.get(id_field)
        if value is None:
            return f"id field {id_field!r} is missing or null", {}
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            kind = "a number that is not an integer" if isinstance(value, float) else json_type(value)
            return f"id field {id_field!r} is {kind}, expected a string or an integer", {}
    kinds: dict[tuple, str] = {}
    stack = [((name,), value, 1) for name, value in reversed(record.items())]  # in line order
    while stack:
        key, value, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return f"JSON nested more than {MAX_JSON_DEPTH} levels deep", {}
        kind = json_type(value)
        if kind == "null":
            continue
        problem = lone_surrogate(key, value)
        if problem:
            return problem, {}
        seen_kind, seen_line = first_seen.get(key, (None, 0))
        if seen_kind is None:
            seen_kind = kinds.setdefault(key, kind)
            seen_line = number
        if kind != seen_kind:
            where = "earlier on this line" if seen_line == number else f"on line {seen_line}"
            return (f"field {field_name(key)!r} is {kind}, but {seen_kind} {where}; "
                    "a field must hold values of one type"), {}
        if isinstance(value, dict):
            stack.extend((key + (name,), item, depth + 1) for name, item in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((key + ("[]",), item, depth + 1) for item in reversed(value))
    return "", kinds


def lone_surrogate(key: tuple, value) -> str:
    """A message when a field name or string holds a lone UTF-16 surrogate (a \\ud800 escape
    without its pair), which Python's JSON parser accepts and Arrow's does not."""
    for text in (key[-1], value if isinstance(value, str) else ""):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return f"field {field_name(key)!r} holds an unpaired UTF-16 surrogate escape (\\ud800-\\udfff)"
    return ""


def field_name(key: tuple) -> str:
    return ".".join(key).replace(".[]", "[]")


def json_type(value) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


# --- Parquet and text ---------------------------------------------------------------------------


def read_parquet(path: Path, source: SourceFile, text_field: str, id_field: Optional[str],
                 on_error: str = "stop"):
    """(table, row numbers, skipped records) of a Parquet file. A text column of binary or
    dictionary type is read as strings; rows with a null id or a text that is not valid UTF-8
    are per-record problems, everything else is about the whole file."""
    errors = RecordErrors(on_error)
    try:
        table = pq.read_table(path)
    except PermissionError:
        raise
    except (pa.ArrowException, OSError) as error:
        raise file_error(source.path, f"not a readable Parquet file ({error})") from None
    if text_field in table.column_names:
        table = plain_text_column(table, text_field)
    problem = check_columns(table, source, text_field, id_field, nulls=False)
    if problem:
        raise file_error(source.path, strip_path(problem, source.path))
    keep = np.ones(table.num_rows, dtype=bool)
    bad_text = invalid_utf8_rows(table[text_field])
    for row in bad_text:
        errors.add(source.path, row + 1, f"field {text_field!r} is not valid UTF-8",
                   f"{source.path}: row {row + 1}")
    keep[bad_text] = False
    if id_field is not None and table[id_field].null_count:
        null_rows = np.flatnonzero(table[id_field].is_null().to_numpy(zero_copy_only=False) & keep)
        for row in null_rows:
            errors.add(source.path, row + 1, f"id field {id_field!r} is null", f"{source.path}: row {row + 1}")
        keep[null_rows] = False
    row_numbers = np.arange(1, table.num_rows + 1)
    if not keep.all():
        table, row_numbers = table.filter(pa.array(keep)), row_numbers[keep]
        errors.records.sort(key=lambda r: r["line"])
    try:
        table.validate(full=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise file_error(source.path, f"not a readable Parquet file ({error})") from None
    return table, row_numbers, errors.records


def plain_text_column(table: pa.Table, text_field: str) -> pa.Table:
    """The table with a dictionary-of-strings text column decoded, and a binary text column
    (strings some writers store without their UTF-8 annotation) viewed as strings (not yet
    validated: invalid_utf8_rows checks)."""
    column = table[text_field]
    data_type = column.type
    if pa.types.is_dictionary(data_type):
        value_type = data_type.value_type
        if not (pa.types.is_string(value_type) or pa.types.is_large_string(value_type)
                or pa.types.is_binary(value_type) or pa.types.is_large_binary(value_type)):
            return table
        column = column.cast(value_type)
        data_type = value_type
    if pa.types.is_binary(data_type) or pa.types.is_large_binary(data_type):
        target = pa.string() if pa.types.is_binary(data_type) else pa.large_string()
        column = pa.chunked_array([chunk.view(target) for chunk in column.chunks], target)
    if column is table[text_field]:
        return table
    return table.set_column(table.schema.get_field_index(text_field), text_field, column)


def invalid_utf8_rows(column: pa.ChunkedArray) -> np.ndarray:
    """Rows (from 0) of a string column whose value is not valid UTF-8 (checked chunk by
    chunk; only a chunk that fails is looked at row by row)."""
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        return np.zeros(0, np.int64)
    bad, offset = [], 0
    for chunk in column.chunks:
        try:
            chunk.validate(full=True)
        except pa.ArrowInvalid:
            raw = chunk.view(pa.binary() if pa.types.is_string(chunk.type) else pa.large_binary())
            for i, value in enumerate(raw.to_pylist()):
                if value is not None:
                    try:
                        value.decode("utf-8")
                    except UnicodeDecodeError:
                        bad.append(offset + i)
        offset += len(chunk)
    return np.asarray(bad, dtype=np.int64)


def read_text_file(path: Path, source: SourceFile, text_field: str) -> pa.Table:
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        detail = f"invalid UTF-8 (byte 0x{raw[error.start]:02x} at byte offset {error.start})"
        error = InputError(f"{source.path}:{line}: {detail}")
        error.record = {"file": source.path, "line": None, "reason": f"line {line}: {detail}"}
        raise error from None
    # 32-bit string offsets cannot hold a text of 2 GiB or more
    return pa.table({text_field: pa.array([text], pa.large_string() if len(raw) >= 2**31 - 1 else pa.string())})


# --- checks across columns and files ------------------------------------------------------------


def check_columns(table: pa.Table, source: SourceFile, text_field: str, id_field: Optional[str],
                  nulls: bool = True) -> str:
    """A message when the text or id column is missing or of the wrong type (or, with
    ``nulls``, an id is null), else ''."""
    if text_field not in table.column_names:
        return (f"{source.path}: no field {text_field!r} (fields: {', '.join(table.column_names)}); "
                "choose the text field with --text-field")
    text_type = table.schema.field(text_field).type
    if not (pa.types.is_string(text_type) or pa.types.is_large_string(text_type) or pa.types.is_null(text_type)
            or getattr(pa.types, "is_string_view", bool)(text_type)):
        return f"{source.path}: field {text_field!r} has type {text_type}, expected a string"
    if id_field is not None:
        if id_field not in table.column_names:
            return f"{source.path}: no id field {id_field!r} (fields: {', '.join(table.column_names)})"
        id_column = table[id_field]
        id_type = id_column.type
        if not (pa.types.is_string(id_type) or pa.types.is_large_string(id_type) or pa.types.is_integer(id_type)):
            return f"{source.path}: id field {id_field!r} has type {id_type}, expected strings or integers"
        if nulls and id_column.null_count:
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
        raise InputError(f"id field {id_field!r} holds integers in some files and strings in others "
                         f"(files: {', '.join(s.path for s in sources)})")
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
