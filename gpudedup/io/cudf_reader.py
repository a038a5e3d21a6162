"""Reading JSONL and Parquet with cuDF, straight to the GPU (used only when cuDF is installed
and the GPU backend runs).

cuDF parses a file on the device. The table then comes to the host once (``to_arrow``), where
the same checks, ids and outputs as the pyarrow path apply; the text column's UTF-8 bytes stay
on the device, so the signature pass copies no text to the GPU. Where cuDF is not installed
(the ``gpu`` extra needs only CuPy), jsonl.py and parquet.py read with pyarrow on the host and the backend
copies each batch to the device once; both give the same documents, so the same results.

Nothing here imports cuDF until a file is read with it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core.normalize import text_buffers
from .fields import field_column
from .jsonl import whole_table_stands
from .jsonl_lines import object_line_numbers, open_binary
from .source import SourceFile, check_columns


def cudf_installed() -> bool:
    return importlib.util.find_spec("cudf") is not None


def read_table(path: Path, file_format: str):
    """(cudf.DataFrame, pyarrow.Table) of one JSONL (optionally .gz) or Parquet file (io/read.py
    gives cuDF no other: zstd-compressed JSONL, Arrow IPC and nested text fields are pyarrow's)."""
    import cudf

    if file_format == "parquet":
        frame = cudf.read_parquet(str(path))
    else:
        frame = cudf.read_json(str(path), lines=True, compression="infer")
    table = frame.to_arrow()
    table.validate(full=True)  # invalid UTF-8 raises here, and pyarrow then names the problem
    return frame, table


def device_utf8(column):
    """The UTF-8 bytes and byte offsets of a cuDF string Series, on the device, without copies.

    Returns (data cupy uint8 (B,), offsets cupy int64 (n + 1,) from 0). cuDF's internal layout
    has changed across releases (the chars child became the data buffer in 24.02), so the
    pylibcudf view is tried first, then the column's own buffers; the result is checked
    against ``str.byte_count()`` (public API), so a layout we misread fails loudly instead of
    hashing the wrong bytes.
    """
    import cupy

    column = column.fillna("")
    n = len(column)
    data = offsets = None
    try:  # cuDF >= 24.12: a zero-copy pylibcudf view of the Series' column
        plc_column = column._column.to_pylibcudf(mode="read")
        raw_offsets = cupy.asarray(plc_column.child(0).data())
        width = 8 if plc_column.child(0).type().id().name == "INT64" else 4
        offsets = raw_offsets.view(cupy.int64 if width == 8 else cupy.int32)
        offsets = offsets[plc_column.offset(): plc_column.offset() + n + 1].astype(cupy.int64)
        data = cupy.asarray(plc_column.data()).view(cupy.uint8) if n else cupy.zeros(0, cupy.uint8)
    except (AttributeError, TypeError, ValueError):
        internal = column._column  # older cuDF: the column's own buffers
        offsets = cupy.asarray(internal.children[0].values)[internal.offset: internal.offset + n + 1]
        offsets = offsets.astype(cupy.int64)
        data = cupy.asarray(internal.base_data).view(cupy.uint8) if n else cupy.zeros(0, cupy.uint8)
    first = int(offsets[0]) if n else 0
    last = int(offsets[-1]) if n else 0
    data, offsets = data[first:last], offsets - first
    expected = cupy.asarray(column.str.byte_count().values).astype(cupy.int64)
    if not bool((offsets[1:] - offsets[:-1] == expected).all()):
        raise RuntimeError("cuDF's string layout was misread (offsets disagree with byte_count)")
    return data, offsets


def concat_device_utf8(parts) -> tuple:
    """Concatenate (data, offsets) parts from device_utf8 into one: data on the device, offsets
    (int64 (n + 1,)) on the host, where the pipeline cuts batches."""
    import cupy

    if not parts:
        return cupy.zeros(0, cupy.uint8), np.zeros(1, np.int64)
    host_offsets, shift = [np.zeros(1, np.int64)], 0
    for data, offsets in parts:
        host_offsets.append(cupy.asnumpy(offsets[1:]) + shift)
        shift += int(data.shape[0])
    data = parts[0][0] if len(parts) == 1 else cupy.concatenate([data for data, _ in parts])
    # The batch threads read the text on their own non-blocking streams, which do not wait for
    # work queued here.
    cupy.cuda.get_current_stream().synchronize()
    return data, np.concatenate(host_offsets)


def arrow_text_matches(table: pa.Table, text_field: str, data, offsets) -> bool:
    """Whether the device text equals the host table's text column (tests and debugging)."""

    host_data, host_offsets = text_buffers(table[text_field])
    return bool(np.array_equal(host_offsets, offsets) and np.array_equal(host_data, data.get()))

# --- a file read by cuDF, with the pyarrow path's checks ------------------------------------------


def read_file_with_cudf(path: Path, source: SourceFile, text_field: str,
                        id_field: Optional[str]) -> Optional[tuple[pa.Table, np.ndarray, Optional[tuple]]]:
    """(table, row numbers int64 from 1, device text or None) of a file read by cuDF, or None
    when cuDF cannot read it (then pyarrow reads it and reports what is wrong)."""
    row_numbers = np.zeros(0, np.int64)
    if source.format == "jsonl":
        # Each record on a line of its own, none nested deeper than a record may: cuDF's parser
        # is given only such files, as Arrow's is.
        found = object_line_numbers(lambda: open_binary(path), path, source)
        if found is None:
            return None
        row_numbers = found
    try:
        frame, table = read_table(path, source.format)
    except Exception:  # cuDF raises many kinds; the pyarrow path gives the user's error
        return None
    if check_columns(table, source, text_field, id_field):
        return None
    if source.format == "jsonl":
        # (as many records as lines of one object each: one record a line)
        if row_numbers.size != table.num_rows or not whole_table_stands(path, source, table, row_numbers, text_field,
                                                                        id_field):
            return None
    else:
        row_numbers = np.arange(1, table.num_rows + 1)
    try:
        device_part = device_utf8(frame[text_field])
    except (AttributeError, TypeError, ValueError, RuntimeError):  # a string layout we cannot view
        device_part = None  # device_text_of copies the host text instead
    return table, row_numbers, device_part


def device_text_of(tables: list[pa.Table], text_field: str, device_parts: list) -> tuple:
    """The corpus text on the device: cuDF's parts, and a copy of the host text of the files
    pyarrow read."""
    import cupy

    parts = []
    for table, part in zip(tables, device_parts):
        if part is None:
            data, offsets = text_buffers(pc.cast(field_column(table, text_field), pa.large_string()))
            part = (cupy.asarray(data), cupy.asarray(offsets))
        parts.append(part)
    return concat_device_utf8(parts)
