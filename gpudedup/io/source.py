"""One input file as the readers see it: where each of its records came from (``FILE:LINE``
for JSONL, ``FILE row N`` otherwise), how a problem with it is raised (on_error "stop") or
recorded and left out ("skip"), and the columns it must have.

A skipped record, as every mode writes it to ``errors.jsonl``, is the dict
``{"file": display path, "line": JSONL line or Parquet row from 1 (None for a whole file),
"reason": str}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError, OutputError, ParameterError
from ..core.content import is_id_type, is_text_type, is_token_type
from .fields import field_column, field_names, field_type, has_field

if TYPE_CHECKING:
    from .pieces import Piece
    from .stamps import FileStamp

ON_ERROR_CHOICES = ("stop", "skip")


def locate(path: str, format: str, number: int) -> str:
    """Where a record is, in messages: 'FILE:LINE' for JSONL, else 'FILE row N' (number from
    1); data passed in ("<list>", "<table>") by its position from 0, as Python counts it."""
    if format in ("list", "table"):
        return f"{path} row {number - 1} (from 0)"
    return f"{path}:{number}" if format == "jsonl" else f"{path} row {number}"


@dataclass
class SourceFile:
    """Where a corpus's rows came from: one file (or "<list>", "<table>" for data passed in)."""

    path: str  # as shown in ids and messages
    format: str  # "jsonl", "parquet" or "text" ("list", "table": not read from a file)
    rows: int = 0
    row_numbers: Optional[np.ndarray] = None  # int64 (rows,): line (JSONL) or row, from 1
    location: Optional[str] = None  # a file's absolute path (its kept rows' output: io/layout.py)
    schema: Optional[pa.Schema] = None  # a file's columns as it holds them, before any unifying
    piece: Optional["Piece"] = None  # the part of the file read (io/pieces.py); None: all of it
    line_by_line: bool = False  # the JSONL reader had to read it line by line (jsonl.read_jsonl_by_line)
    stamp: Optional["FileStamp"] = None  # a file as read (io/stamps.py), which the write checks
    # Columns held in a type of the files combined that rounds some of this file's values
    # (name, that type; io/read.py concat_tables): its rows cannot be written back in its types.
    rounded: tuple[tuple[str, pa.DataType], ...] = ()

    def check_not_rounded(self) -> None:
        """OutputError where this file's rows would be written back from rounded values."""
        if self.rounded:
            name, kind = self.rounded[0]
            raise OutputError(f"{self.path}: column {name!r} holds values that its type in the files combined "
                              f"({kind}, which another file's values give it) does not hold exactly, so its rows "
                              "cannot be written back as they were: deduplicate such files in separate runs, or "
                              "with a work directory (each file then keeps its own types)")

    @property
    def numbers_before(self) -> int:
        """The lines (JSONL) or rows of the file before the part read, added to the part's own
        numbers (from 1) to give the file's."""
        return self.piece.before if self.piece is not None else 0

    @property
    def at_file_start(self) -> bool:
        """Whether the part read starts at the file's first byte (where a UTF-8 BOM is dropped)."""
        return self.piece is None or self.piece.start == 0

    def where(self, row: int) -> str:
        """'FILE:LINE' (JSONL) or 'FILE row N' for the row-th record (from 0) of this file."""
        number = int(self.row_numbers[row]) if self.row_numbers is not None else row + 1
        return locate(self.path, self.format, number)


class FileError(InputError):
    """An InputError about one whole file; ``record`` is what on_error "skip" records for it
    (line None). (An attribute, not an argument, so that the error pickles to a Dask client.)"""

    record: dict


def file_error(path: str, reason: str, where: Optional[str] = None) -> FileError:
    """A FileError: 'WHERE: REASON' (WHERE defaults to the path); under on_error="skip" the
    file is left out and ``error.record`` is what is recorded."""
    error = FileError(f"{where or path}: {reason}")
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
    """ParameterError unless on_error is one of ON_ERROR_CHOICES."""
    if on_error not in ON_ERROR_CHOICES:
        raise ParameterError(f"on_error= must be one of {', '.join(ON_ERROR_CHOICES)}; got {on_error!r}")


def file_record(error: InputError, path: str) -> dict:
    """The skipped record of a file left out whole (on_error "skip") for the error that its
    reading raised: the error's own record (file_error), else one made of its message."""
    if isinstance(error, FileError):
        return error.record
    return {"file": path, "line": None, "reason": strip_path(str(error), path)}


def strip_path(message: str, path: str) -> str:
    """The message without its leading 'PATH: ' (for a record, which names the file apart)."""
    return message[len(path) + 2:] if message.startswith(f"{path}: ") else message


INT64_MAX = 2**63 - 1


def first_id_above_int64(ids) -> Optional[tuple[int, int]]:
    """(row from 0, value) of the first unsigned 64-bit id (pa.Array or ChunkedArray) that does
    not fit int64, the type integer ids are kept in; None when there is none."""
    if not pa.types.is_uint64(ids.type) or len(ids) == 0:
        return None

    above = pc.fill_null(pc.greater(ids, pa.scalar(INT64_MAX, pa.uint64())), False)
    rows = np.flatnonzero(above.to_numpy(zero_copy_only=False))
    return None if rows.size == 0 else (int(rows[0]), int(ids[int(rows[0])].as_py()))


def listed(names, most: int = 10) -> str:
    """Names for a message, comma-separated: the first ``most`` of them and how many more."""
    names = list(names)
    shown = ", ".join(names[:most])
    return shown if len(names) <= most else f"{shown} and {len(names) - most:,} more"


def check_columns(table: pa.Table, source: SourceFile, text_field: str, id_field: Optional[str],
                  nulls: bool = True) -> str:
    """A message when the text or id field (a column, or a dotted path into struct columns:
    io/fields.py) is missing or of the wrong type (or, with ``nulls``, an id is null), else ''."""
    schema = table.schema
    if not has_field(schema, text_field):
        return (f"{source.path}: no field {text_field!r} (fields: {listed(field_names(schema))}); "
                "choose the text field with text_field= (token ids: token_field=)")
    text_type = field_type(schema, text_field)
    if not (is_text_type(text_type) or is_token_type(text_type)):
        return (f"{source.path}: field {text_field!r} has type {text_type}, expected a string "
                "or a list of token ids")
    if id_field is not None:
        if not has_field(schema, id_field):
            return f"{source.path}: no id field {id_field!r} (fields: {listed(field_names(schema))})"
        id_column = field_column(table, id_field)
        id_type = id_column.type
        if not is_id_type(id_type):
            return f"{source.path}: id field {id_field!r} has type {id_type}, expected strings or integers"
        too_large = first_id_above_int64(id_column)
        if too_large is not None:
            row, value = too_large
            number = int(source.row_numbers[row]) if source.row_numbers is not None else row + 1
            where = f"line {number}" if source.format == "jsonl" else f"row {number}"
            return (f"{source.path}: id field {id_field!r} is {value} ({where}), above the largest integer id "
                    f"({INT64_MAX}); integer ids must fit a signed 64-bit integer")
        if nulls and id_column.null_count:
            row = int(np.flatnonzero(id_column.is_null().to_numpy(zero_copy_only=False))[0]) + 1
            return f"{source.path}: row {row}: id field {id_field!r} is null"
    return ""
