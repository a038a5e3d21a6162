"""Reading Parquet files (.parquet, .pq), or runs of their row groups (io/pieces.py), with
pyarrow (host). A record's row number is its row in the file (from 1)."""

from __future__ import annotations

import base64
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..core.content import bad_token_rows, invalid_utf8_rows, is_token_type, plain_strings, without_view
from . import storage
from .fields import field_column, has_field, repeated_names, with_field
from .source import RecordErrors, SourceFile, check_columns, file_error, listed, strip_path
from .storage import Location


def read_parquet(path: Location, source: SourceFile, text_field: str, id_field: Optional[str],
                 on_error: str = "stop"):
    """(table, row numbers, skipped records) of a Parquet file. A text column of binary or
    dictionary type is read as strings; rows with a null id or a text that is not valid UTF-8
    are per-record problems, everything else is about the whole file (checked_rows)."""
    try:
        metadata = storage.parquet_metadata(path)
        repeated = repeated_names(metadata.schema.to_arrow_schema().names)
        if repeated:  # (Arrow's reader cannot tell them apart, and no output could hold both)
            raise file_error(source.path, f"columns share a name ({listed(repeated, 5)}); each column of a "
                                          "Parquet file needs a name of its own")
        if source.piece is None:
            table = storage.read_parquet(path)
        else:  # a run of its row groups (io/pieces.py)
            with storage.parquet_file(path) as file:
                table = file.read_row_groups(range(source.piece.start, source.piece.stop))
        # The columns as the file holds them, before the text is made plain (the kept rows' schema).
        source.schema = stored_schema(metadata, table.schema)
    except PermissionError:
        raise
    except (pa.ArrowException, OSError) as error:
        raise file_error(source.path, f"not a readable Parquet file ({error})") from None
    return checked_rows(table, source, text_field, id_field, on_error, "not a readable Parquet file")


def checked_rows(table: pa.Table, source: SourceFile, text_field: str, id_field: Optional[str], on_error: str,
                 unreadable: str) -> tuple[pa.Table, np.ndarray, list[dict]]:
    """(table, row numbers, skipped records) of a file's table of typed columns as read
    (Parquet, Arrow IPC): the text field made plain (plain_text_column); a missing or
    mistyped text or id field is about the whole file; a null id, a text that is not valid
    UTF-8 or a bad token id is a per-record problem (its row raised, or recorded and left
    out); a table that does not validate is about the whole file (``unreadable`` starts its
    message)."""
    errors = RecordErrors(on_error)
    if has_field(table.schema, text_field):
        table = plain_text_column(table, text_field)
    problem = check_columns(table, source, text_field, id_field, nulls=False)
    if problem:
        raise file_error(source.path, strip_path(problem, source.path))
    keep = np.ones(table.num_rows, dtype=bool)
    texts = field_column(table, text_field)
    if is_token_type(texts.type):
        bad_text, reasons = bad_token_rows(texts)
    else:
        bad_text = invalid_utf8_rows(texts)
        reasons = ["is not valid UTF-8"] * len(bad_text)
    row_numbers = np.arange(1, table.num_rows + 1) + source.numbers_before  # the file's rows, from 1
    for row, reason in zip(bad_text, reasons):
        number = int(row_numbers[row])
        errors.add(source.path, number, f"field {text_field!r} {reason}", f"{source.path}: row {number}")
    keep[bad_text] = False
    ids = field_column(table, id_field) if id_field is not None else None
    if ids is not None and ids.null_count:
        null_rows = np.flatnonzero(ids.is_null().to_numpy(zero_copy_only=False) & keep)
        for row in null_rows:
            number = int(row_numbers[row])
            errors.add(source.path, number, f"id field {id_field!r} is null", f"{source.path}: row {number}")
        keep[null_rows] = False
    if not keep.all():
        table, row_numbers = table.filter(pa.array(keep)), row_numbers[keep]
        errors.records.sort(key=lambda r: r["line"])
    try:
        table.validate(full=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise file_error(source.path, f"{unreadable} ({error})") from None
    return table, row_numbers, errors.records


def stored_schema(metadata: pq.FileMetaData, read: pa.Schema) -> pa.Schema:
    """A Parquet file's own Arrow schema: the one its writer stored (ARROW:schema) where there
    is one and it names the columns read (pyarrow reads some types back otherwise: a dictionary
    of large_string as a dictionary of string), else ``read``, the columns as pyarrow read them."""
    serialized = (metadata.metadata or {}).get(b"ARROW:schema")
    if serialized is None:
        return read
    stored = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(serialized)))
    return stored if stored.names == read.names else read


def plain_text_column(table: pa.Table, text_field: str) -> pa.Table:
    """The table with its text field made plain strings (plain_strings: a dictionary of texts
    decoded, a binary or binary_view field, strings some writers store without their UTF-8
    annotation, viewed as strings, not yet validated: invalid_utf8_rows checks); the field a
    column or nested in one (io/fields.py). A string_view field stays (a table keeps it), and
    a field of another type too (the reader names it)."""
    column = field_column(table, text_field)
    kind = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
    plain = without_view(kind)
    if pa.types.is_string_view(column.type) or not (pa.types.is_string(plain) or pa.types.is_large_string(plain)
                                                    or pa.types.is_binary(plain) or pa.types.is_large_binary(plain)):
        return table
    strings = plain_strings(column)
    return table if strings is column else with_field(table, text_field, strings)
