"""Writing files: a table as Parquet or JSON lines (all its rows, or the kept ones, a slice at
a time), a dict as JSON, and a task's file wherever its target is (a path, or a URL on object
storage, written locally and uploaded once).
"""

from __future__ import annotations

import base64
import json
import math
import tempfile
from decimal import Decimal
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import OutputError
from .fields import with_leaf_types
from .storage import location_of, upload

# The formats the kept rows are written in (format=, --format).
OUTPUT_FORMATS = ("parquet", "jsonl")
# The rows a write takes at a time.
ROWS_PER_WRITE = 16384


def kept_batches(table: pa.Table, keep: np.ndarray) -> Iterator[pa.RecordBatch]:
    """The rows of ``table`` where ``keep`` (bool (n,)) is True, in order, a slice at a time,
    so that the kept rows are never all copied at once."""
    for start in range(0, table.num_rows, ROWS_PER_WRITE):
        piece = table.slice(start, ROWS_PER_WRITE).filter(pa.array(keep[start : start + ROWS_PER_WRITE]))
        yield from piece.to_batches()


def write_to(target: str, write: Callable[[Path], None]) -> None:
    """``write(path)`` into ``target`` (a path, or a URL on object storage, as storage.location_of
    takes it): a task's file of an output on the workers (the kept rows of an input file, a
    part of pairs/), written where the target is, or into a temporary file and uploaded once."""
    located = location_of(target)
    if isinstance(located, Path):
        write(located)
        return
    with tempfile.TemporaryDirectory(prefix="gpudedup-part-") as folder:
        write(Path(folder) / located.name)
        upload(Path(folder) / located.name, located)


def write_parquet(table: pa.Table, path: Path, keep: Optional[np.ndarray] = None) -> None:
    """Write ``table`` (only the rows where ``keep`` is True, when given) as Parquet."""
    with parquet_writer(path, table.schema) as writer:
        if keep is None:
            writer.write_table(table)  # (as pq.write_table: its row groups)
            return
        for batch in kept_batches(table, keep):
            writer.write_batch(batch)


def parquet_writer(path: Path, schema: pa.Schema) -> pq.ParquetWriter:
    """A Parquet writer of kept rows of ``schema`` into ``path``; an OutputError where a
    column's type is one Parquet has none for (not_in_parquet), in the words of the option
    that writes them otherwise."""
    try:
        return pq.ParquetWriter(path, schema)
    except pa.ArrowNotImplementedError:
        unstorable = not_in_parquet(schema)
        if not unstorable:
            raise
        raise OutputError(f"{path.name}: the kept rows cannot be written as Parquet, which has no type for "
                          f"column {unstorable[0].name!r} ({unstorable[0].type}); write them as JSONL "
                          "(format='jsonl')") from None


def not_in_parquet(schema: pa.Schema) -> list[pa.Field]:
    """The fields of ``schema`` that Parquet cannot store (a struct of no fields, an interval
    of months, days and nanoseconds, a union, ...): each tried alone as a file of no rows."""
    unstorable = []
    for field in schema:
        try:
            pq.write_table(pa.table([pa.array([], field.type)], names=[field.name]), pa.BufferOutputStream())
        except pa.ArrowNotImplementedError:
            unstorable.append(field)
    return unstorable


def write_jsonl(table: pa.Table, path: Path, keep: Optional[np.ndarray] = None) -> None:
    """One JSON object per row (only the rows where ``keep`` is True, when given), columns in
    table order, UTF-8, strict JSON (json_value's rules for what JSON has no value for)."""
    write_jsonl_batches(kept_batches(table, keep) if keep is not None else table.to_batches(ROWS_PER_WRITE), path)


def write_jsonl_batches(batches, path: Path) -> None:
    """Record batches as JSON lines into one file (see write_jsonl)."""
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for batch in batches:
            handle.writelines(json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in json_rows(batch))


def json_rows(batch: pa.RecordBatch, alone: bool = False) -> list[dict]:
    """The rows of ``batch`` as JSON holds them (json_value's rules). Two choices depend on the
    values: a map whose keys repeat is written as pairs (batch_rows), and nanosecond values
    inside lists, structs and maps that are not whole microseconds as Arrow's text
    (nanoseconds_as_text). Each is made per row, so that a row is written the same in whichever
    batch it comes (an in-memory run's whole file, a staged run's pieces): a batch where either
    applies is written a row at a time (alone: a batch of one row taken so)."""
    try:
        converted, per_batch = nanoseconds_as_text(batch)
        converted = finite_floats(converted)
        # (Most tables hold strings, integers and plain floats: their rows go as Arrow gives
        # them, the floats' NaNs and infinities made null by Arrow first.)
        if needs_json_values(converted.schema):
            rows, maps_per_batch = batch_rows(converted)
            per_batch = per_batch and maps_per_batch
        else:
            rows = converted.to_pylist()
    except OverflowError:  # (a time or duration past Python's datetime, through which rows go)
        raise OutputError(out_of_python_range(batch)) from None
    if per_batch or alone:
        return rows
    # (take, not slice: a slice's list column shares its parent's items, which Arrow's cast
    # checks all of, also those of other rows)
    return [row for number in range(batch.num_rows) for row in json_rows(batch.take(pa.array([number])), True)]


def finite_floats(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with the NaNs and infinities of its top-level float columns made null (what
    json_value makes of them), by Arrow compute rather than row by row."""
    columns = list(batch.columns)
    for number, column in enumerate(columns):
        if pa.types.is_floating(column.type):
            columns[number] = pc.if_else(pc.is_finite(column), column, None)
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)


def is_nanosecond_time(data_type: pa.DataType) -> bool:
    """Whether ``data_type`` is a timestamp, duration or time of day in nanoseconds: Python's
    datetime, timedelta and time hold microseconds, and pyarrow makes such values Python's only
    through pandas (or, for times of day, loses their nanoseconds)."""
    return (pa.types.is_timestamp(data_type) or pa.types.is_duration(data_type)
            or pa.types.is_time64(data_type)) and data_type.unit == "ns"


def nanoseconds_as_text(batch: pa.RecordBatch) -> tuple[pa.RecordBatch, bool]:
    """``batch`` with its nanosecond values (is_nanosecond_time) as text, every digit kept: a
    column of them (or of a dictionary of them) as nanosecond_texts writes them; those inside
    lists, structs and maps cast to microseconds where every one is a whole number of them
    (then written as a microsecond column's are), else as Arrow's cast to string writes them;
    and whether the batch's values were all written the first way (else the way a value is
    written depends on the others of its column: json_rows writes such a batch row by row)."""
    whole_microseconds = True
    columns = list(batch.columns)
    for number, column in enumerate(columns):
        data_type = column.type
        if pa.types.is_dictionary(data_type) and is_nanosecond_time(data_type.value_type):
            column, data_type = column.dictionary_decode(), data_type.value_type
        if is_nanosecond_time(data_type):
            columns[number] = nanosecond_texts(column)
            continue
        micro = with_leaf_types(data_type, lambda leaf: micro_type(leaf) if is_nanosecond_time(leaf) else leaf)
        if micro == data_type:
            continue
        try:
            columns[number] = column.cast(micro)  # (a safe cast: refused where a digit would go)
        except pa.ArrowInvalid:
            whole_microseconds = False
            columns[number] = column.cast(with_leaf_types(
                data_type, lambda leaf: pa.string() if is_nanosecond_time(leaf) else leaf))
    if all(new is old for new, old in zip(columns, batch.columns)):
        return batch, whole_microseconds
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names), whole_microseconds


def micro_type(data_type: pa.DataType) -> pa.DataType:
    """The microsecond type of a nanosecond one (is_nanosecond_time)."""
    if pa.types.is_timestamp(data_type):
        return pa.timestamp("us", data_type.tz)
    return pa.duration("us") if pa.types.is_duration(data_type) else pa.time64("us")


def nanosecond_texts(column: pa.Array) -> pa.Array:
    """string (n,): each value of a nanosecond timestamp, duration or time of day ``column``
    as Python writes its microseconds (``str``: what a microsecond column's values are written
    as), with the three digits of its nanoseconds added where they are not 000; nulls stay."""
    nanoseconds = pc.cast(column, pa.int64())
    counts = nanoseconds.fill_null(0).to_numpy()
    micro, rest = np.divmod(counts, 1000)  # (floor: the rest is 0 .. 999 before 1970 too)
    unit_type = column.type
    values = pa.array(micro, pa.int64()).cast(micro_type(unit_type)).to_pylist()
    texts: list[Optional[str]] = []
    for value, extra, missing in zip(values, rest.tolist(), nanoseconds.is_null().to_pylist()):
        if missing:
            texts.append(None)
        elif not extra:
            texts.append(str(value))
        elif pa.types.is_duration(unit_type):  # "[-]D day[s], H:MM:SS[.ffffff]"
            texts.append(f"{value}{'' if value.microseconds else '.000000'}{extra:03d}")
        else:  # "[YYYY-MM-DD ]HH:MM:SS.ffffff[+HH:MM]": the digits after the microseconds
            text = value.isoformat(sep=" ", timespec="microseconds") if pa.types.is_timestamp(unit_type) \
                else value.isoformat(timespec="microseconds")
            cut = text.index(".") + 7
            texts.append(f"{text[:cut]}{extra:03d}{text[cut:]}")
    return pa.array(texts, pa.string())


def needs_json_values(schema: pa.Schema) -> bool:
    """Whether a schema holds a type json_value changes that finite_floats leaves: floats
    inside lists and structs, binary, maps, decimals (at any depth)."""
    def changed(data_type: pa.DataType) -> bool:
        if pa.types.is_floating(data_type) or pa.types.is_binary(data_type) or pa.types.is_large_binary(data_type) \
                or pa.types.is_fixed_size_binary(data_type) or pa.types.is_binary_view(data_type) \
                or pa.types.is_map(data_type) or pa.types.is_decimal(data_type):
            return True
        if pa.types.is_dictionary(data_type):
            return changed(data_type.value_type)
        return any(changed(data_type.field(i).type) for i in range(data_type.num_fields))

    return any(changed(field.type) for field in schema if not pa.types.is_floating(field.type))


def batch_rows(batch: pa.RecordBatch) -> tuple[list[dict], bool]:
    """A batch's rows as json_value makes them, maps as objects where the keys of every map of
    the batch are distinct, else as pairs; and whether they are objects (or there are none)."""
    try:
        rows, objects = batch.to_pylist(maps_as_pydicts="strict"), True
    except (pa.ArrowException, KeyError, ValueError, TypeError):  # (a key repeated: pairs)
        rows, objects = batch.to_pylist(), False
    return [json_value(row) for row in rows], objects


def out_of_python_range(batch: pa.RecordBatch) -> str:
    """The message for a batch whose values Python cannot hold (a timestamp past the year
    9999, a duration of more than a billion days), naming the first column that holds one."""
    for name, column in zip(batch.schema.names, batch.columns):
        try:
            column.to_pylist()
        except OverflowError:
            return (f"column {name!r} ({column.type}) holds a value past what Python's datetime takes, through "
                    "which JSON Lines are written: write Parquet (format='parquet')")
    return "a value past what Python's datetime takes cannot be written as JSON Lines: write Parquet (format='parquet')"


def text_of(value) -> str:
    """A value json_value made, as a JSON object's key: itself where a string, else its text."""
    return value if isinstance(value, str) else str(value)


def json_value(value):
    """A value as strict JSON holds it: a float JSON has no number for (NaN, infinities) as
    null; bytes as their text where they are UTF-8 (a text column stored as binary), else as
    base64; a decimal of scale 0 as the integer it is; lists, tuples and dicts item by item;
    anything else as it is (json.dumps writes what JSON has no type for, dates and other
    decimals, as its text)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Decimal) and value.is_finite() and value.as_tuple().exponent >= 0:
        return int(value)  # (scale 0: an integer, such as a JSONL one past int64 read exactly)
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):  # (a map's keys of other types, dates or bytes, as their JSON text)
        return {key if isinstance(key, (str, int, float, bool)) or key is None else text_of(json_value(key)):
                json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(item) for item in value]
    return value


def write_json(data: dict, path: Path) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
