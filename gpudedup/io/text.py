"""Reading plain-text files (.txt, UTF-8, an optional BOM): one file is one document, so one
row (row number 1) with the whole file as its text and no other fields."""

from __future__ import annotations

from typing import Optional

import numpy as np
import pyarrow as pa

from . import storage
from .source import FileError, SourceFile, file_error
from .storage import Location


def read_text(path: Location, source: SourceFile, text_field: str,
              id_field: Optional[str]) -> tuple[pa.Table, np.ndarray, list[dict]]:
    """(table, row numbers int64 (1,), skipped records: none) of a .txt file; it has no id
    field to give, so an id_field refuses it."""
    if id_field is not None:
        raise file_error(source.path, f"a .txt file is one document without fields, so it has no id "
                                      f"field {id_field!r}; leave out the id field or the .txt files")
    table = read_text_file(path, source, text_field)
    return table, np.arange(1, table.num_rows + 1), []


def read_text_file(path: Location, source: SourceFile, text_field: str) -> pa.Table:
    """The file's text as a one-row table; text that is not UTF-8 is a file error naming the
    line, recorded for the whole file (line None) with the line in its reason."""
    raw = storage.read_bytes(path)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as decoding:
        line = raw.count(b"\n", 0, decoding.start) + 1
        detail = f"invalid UTF-8 (byte 0x{raw[decoding.start]:02x} at byte offset {decoding.start})"
        # The message points at the line; the record is the whole file's (one document).
        error = FileError(f"{source.path}:{line}: {detail}")
        error.record = {"file": source.path, "line": None, "reason": f"line {line}: {detail}"}
        raise error from None
    # 32-bit string offsets cannot hold a text of 2 GiB or more
    return pa.table({text_field: pa.array([text], pa.large_string() if len(raw) >= 2**31 - 1 else pa.string())})
