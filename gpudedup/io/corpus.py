"""The Corpus: the documents of a run held in memory, in input order (host; the text also on
the device when cuDF read it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pyarrow as pa

from ..core.content import is_token_type, unit_buffers
from .fields import field_column, held_table
from .source import SourceFile

@dataclass
class Corpus:
    """Documents in input order (host).

    table: every input column of every row (pyarrow Table, columns unified across files).
    text_field: the name of the content field in ``table``: a column, or a dotted path into a
        struct column (io/fields.py); text (string or large_string) or, for token shingles,
        token ids (a list of integers); null = an empty document.
    ids: pyarrow Array of unique document ids (string or int64), one per row.
    files: where the rows came from, in order; skipped: files passed over in directories.
    inputs: the paths the corpus was read from, as given (outputs must stay clear of them).
    skipped_records: with on_error="skip", what was left out, in input order: one dict
        {"file": display path, "line": int from 1 or None, "reason": str} per bad record
        (JSONL: its line; Parquet: its row) or per whole file left out (line None).
    notes: one line per path passed over for a reason worth telling (a symbolic link that
        would loop or read something twice, a broken link, a pipe or device, an input
        directory without input files).
    output_bases: for files, each scanned file's name under deduplicated/ (io/layout.py).
    given_rows: records given from Python of which on_error="skip" left some out: (int64
        (n,), the position among them of each row; how many were given); else None.
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
    given_rows: Optional[tuple[np.ndarray, int]] = None
    skipped_records: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Files: each scanned file's output name, absolute path -> name (io.layout.output_bases).
    output_bases: dict[str, str] = field(default_factory=dict)

    # A nested content field's values (a struct's child), held apart so that the table keeps
    # its columns as they are; None where the content field is a column of ``table``.
    nested_texts: Optional[pa.ChunkedArray] = field(default=None, init=False, repr=False)

    def __post_init__(self):
        # Arrow filters and takes no view type (string_view, binary_view, within structs, lists
        # and maps too): such columns are held as their plain large types, and the kept rows
        # cast back to the input's schema (layout.as_input).
        self.table = held_table(self.table)
        # The stages want the text as one string or large_string array: an all-null column
        # has Arrow's null type, newer producers may send string_view, and a column in many
        # chunks (one per block read) would make every take() concatenate all of them first.
        nested = self.table.schema.get_field_index(self.text_field) < 0
        texts = field_column(self.table, self.text_field)
        if is_token_type(texts.type):
            pass  # token ids stay as read (content.unit_buffers reads any integer width)
        elif plain_text_type(texts.type) != texts.type:
            texts = texts.cast(plain_text_type(texts.type))
        elif pa.types.is_string(texts.type) and texts.nbytes >= 2**31 - 2**20:
            texts = texts.cast(pa.large_string())  # 32-bit offsets cannot span > 2 GiB
        single = texts.combine_chunks() if texts.num_chunks else pa.array([], texts.type)
        if nested:
            self.nested_texts = pa.chunked_array([single])
        else:
            index = self.table.schema.get_field_index(self.text_field)
            self.table = self.table.set_column(index, self.text_field, pa.chunked_array([single]))

    @property
    def texts(self) -> pa.ChunkedArray:
        return self.nested_texts if self.nested_texts is not None else self.table[self.text_field]

    def text_array(self) -> pa.Array:
        """The text column as one string or large_string array (no copy)."""
        return self.texts.chunk(0) if self.texts.num_chunks else pa.array([], pa.large_string())

    def units(self) -> tuple[np.ndarray, np.ndarray]:
        """The content as host buffers (content.unit_buffers): UTF-8 bytes uint8 (B,) of the
        texts, or token ids uint32 (B,), with offsets int64 (n + 1,) from 0 (views of the
        column where possible; nulls give empty documents)."""
        return unit_buffers(self.text_array())

    @property
    def tokens(self) -> bool:
        """Whether the content column holds token ids rather than text."""
        return is_token_type(self.texts.type)

    @property
    def num_rows(self) -> int:
        return self.table.num_rows

    def input_schemas(self) -> list[tuple[str, pa.Schema]]:
        """(path as shown, columns) of each input read: a file's own, else the table's."""
        return [(f.path, f.schema if f.schema is not None else self.table.schema) for f in self.files]


def plain_text_type(data_type: pa.DataType) -> pa.DataType:
    """The type a text column of ``data_type`` has in a Corpus: string and large_string stay,
    anything else a reader lets through (null: all texts null; string_view; a dictionary of
    texts) is large_string.
    (A string column of 2 GiB or more is made large_string too, by its size.)"""
    if pa.types.is_string(data_type) or pa.types.is_large_string(data_type) or is_token_type(data_type):
        return data_type
    return pa.large_string()
