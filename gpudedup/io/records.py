"""Records (dicts) given from Python, read as a JSONL file's records are (``read_records``):
batch by batch, each batch converted by Arrow at once where every record in it is right, and a
record at a time where one is not, so that the bad one is named by its position."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any, Optional

import numpy as np
import pyarrow as pa

from ..core.content import bad_token_rows, is_id_type, is_text_type, is_token_type, plain_ids
from ..errors import InputError
from .fields import field_column, has_field, leaf_types
from .rules import id_groups
from .source import INT64_MAX, RecordErrors, first_id_above_int64, listed

# What a record's text may be besides a string: token ids.
TOKEN_LIST_TYPES = (list, tuple, np.ndarray)


def read_records(batches: Iterable[list], name: str, text_field: str, id_field: Optional[str],
                 on_error: str) -> tuple[pa.Table, np.ndarray, int, list[dict]]:
    """(table, positions read, records given, records left out) of records (dicts) given in
    batches, read as a JSONL file's records are: the text in text_field (a string, None for a
    record without text, or a list of token ids), the id in id_field (a string or an integer).
    A record that is not a dict, lacks the text field or has a bad text or id stops the run
    with an InputError naming it by its position (from 0), or under on_error "skip" is left
    out and recorded as {"file": name, "line": position, "reason": ...}, as is (with id_field,
    under "skip" only) one that repeats an earlier record's id (under "stop" the corpus's id
    check names both). positions read: int64, the position of each row of the table among the
    records given."""
    errors = RecordErrors(on_error)
    tables: list[pa.Table] = []
    positions: list[np.ndarray] = []
    schema = pa.schema([])  # the columns of every record read so far
    count = 0
    for batch in batches:
        table, read, problems, schema = records_batch(batch, count, schema, text_field, id_field)
        for position, reason in problems:
            errors.add(name, position, reason, f"record {position} (from 0)")
        tables.append(table)
        positions.append(read)
        count += len(batch)
    read_positions = np.concatenate(positions) if positions else np.zeros(0, np.int64)
    if count and not read_positions.size:  # nothing to deduplicate is never a result
        first = errors.records[0]
        raise InputError(f"none of the {count:,} records could be read (record {first['line']} (from 0): "
                         f"{first['reason']})")
    table = pa.concat_tables(tables, promote_options="permissive") if tables else pa.table(
        {text_field: pa.array([], pa.large_string())})
    if errors.skip and id_field is not None and has_field(table.schema, id_field):
        table, read_positions = first_of_each_id(table, read_positions, id_field, name, errors)
    return table, read_positions, count, errors.records


def first_of_each_id(table: pa.Table, positions: np.ndarray, id_field: str, name: str,
                     errors: RecordErrors) -> tuple[pa.Table, np.ndarray]:
    """(the rows of ``table`` whose id no earlier row has, their positions among the records
    given): on_error "skip" leaves a repeated id's later records out, the first kept, as a
    file's are (rules.plan_combination), each recorded in ``errors`` (in order of position).
    positions: int64, the position of each row of ``table`` among the records given."""
    groups = id_groups(plain_ids(field_column(table, id_field).combine_chunks()))
    if not groups:
        return table, positions
    for identifier, rows in groups:
        for row in rows[1:]:
            errors.add(name, int(positions[row]), f"duplicate id {identifier!r}: the same id as record "
                       f"{int(positions[rows[0]])} (from 0), which is kept", "")
    errors.records.sort(key=lambda record: record["line"])
    keep = np.ones(table.num_rows, dtype=bool)
    keep[np.concatenate([rows[1:] for _, rows in groups])] = False
    return table.filter(pa.array(keep)), positions[keep]


def records_batch(batch: list, start: int, schema: pa.Schema, text_field: str,
                  id_field: Optional[str]) -> tuple[pa.Table, np.ndarray, list[tuple[int, str]], pa.Schema]:
    """(table, positions read, problems, schema) of one batch of records whose first is
    record ``start``; problems: (position, reason) of each record left out, in order; schema:
    ``schema`` (that of the records before) unified with the batch's. The batch is converted
    by Arrow as a whole where every record is right and its types agree with the records
    before; otherwise record by record, to name each one that is not."""
    if all(type(record) is dict for record in batch):
        try:
            table = pa.Table.from_struct_array(pa.array(batch))
            if records_right(table, batch, text_field, id_field) and times_changed(table, batch) is None:
                unified = pa.unify_schemas([schema, table.schema], promote_options="permissive")
                return table, np.arange(start, start + len(batch), dtype=np.int64), [], unified
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            pass  # named below, record by record
    problems: list[tuple[int, str]] = []
    kept: list[dict] = []
    read: list[int] = []
    for offset, record in enumerate(batch):
        problem, single = record_problem(record, text_field, id_field)
        if single is not None:
            try:
                schema = pa.unify_schemas([schema, single.schema], promote_options="permissive")
            except (pa.ArrowTypeError, pa.ArrowInvalid) as error:
                problem = type_conflict(schema, single.schema, error)
        if problem:
            problems.append((start + offset, problem))
        else:
            kept.append(record)
            read.append(start + offset)
    try:
        table = pa.Table.from_struct_array(pa.array(kept, pa.struct(schema))) if kept else schema.empty_table()
    except (pa.ArrowException, OverflowError) as error:  # (a value the records' type for it cannot hold)
        raise InputError(value_not_held(kept, read, schema, error)) from None
    return table, np.asarray(read, dtype=np.int64), problems, schema


def value_not_held(records: list[dict], positions: list[int], schema: pa.Schema, error: Exception) -> str:
    """The message for records whose types combine (``schema``) but one of whose values the
    combined type cannot hold (2**53 + 1 where another record makes the field double), naming
    the first such record (positions: each record's, from 0)."""
    for record, position in zip(records, positions):
        try:
            pa.array([record], pa.struct(schema))
        except (pa.ArrowException, OverflowError) as own:
            return (f"record {position} (from 0): {str(own).splitlines()[0]}, in the type the records give its "
                    "fields together (one holds a value the type of another cannot)")
    return f"the records cannot be combined ({str(error).splitlines()[0]})"


# The values whose conversion times_changed checks: a datetime is a date (pandas' Timestamp a datetime).
PYTHON_TIMES = (datetime.date, datetime.time, datetime.timedelta)
# What times_changed finds, in a refusal's words.
TIMES_CHANGED = ("dates or times that Arrow would not keep as they are (a date beside a datetime, a naive beside an "
                 "aware datetime, nanoseconds, a time of day with a zone)")


def times_changed(table: pa.Table, records: list[dict]) -> Optional[str]:
    """The first column whose dates and times Arrow's conversion of the records changed, else
    None (kept as they are): a field holding a datetime beside a date is made dates (the time
    of day lost), one holding a naive datetime beside an aware one takes both as one (a wall
    time shifted), whether the two lie in one column, in a struct's field or in a list; a
    Timestamp's nanoseconds and a time's zone are dropped. Only the values of a date or time
    type are compared with the records, each column that holds any read back once."""
    return next((name for name, column in zip(table.column_names, table.columns) if holds_times(column.type)
                 and not same_times(column.type, column.to_pylist(), [record.get(name) for record in records])),
                None)


def holds_times(data_type: pa.DataType) -> bool:
    """Whether ``data_type`` is, or has at any depth of structs and lists, a date or time type."""
    return any(pa.types.is_temporal(leaf) for leaf in leaf_types(data_type))


def same_times(data_type: pa.DataType, converted: list, given: list) -> bool:
    """Whether the dates and times Arrow holds (``converted``: values of ``data_type`` as
    Python reads them back) are the records' own (``given``: the same values as the records
    hold them, same_time), walking structs by key and lists item by item; a value Arrow holds
    as null, or did not take as a dict or a list, has nothing to compare, nor has one the
    records give as anything but Python's date, time or timedelta (pandas' NaT and numpy's
    datetime64 among a DataFrame's objects are Arrow's as they are)."""
    if converted == given:  # (the common case, compared at C speed; what differs is walked)
        return True
    if pa.types.is_struct(data_type):
        held = [(back, own) for back, own in zip(converted, given) if back is not None and isinstance(own, dict)]
        return all(same_times(field.type, [back[field.name] for back, _ in held],
                              [own.get(field.name) for _, own in held])
                   for field in data_type if holds_times(field.type))
    if pa.types.is_temporal(data_type):
        return all(same_time(back, own) for back, own in zip(converted, given)
                   if back is not None and isinstance(own, PYTHON_TIMES))
    return all(same_times(data_type.value_type, list(back), list(own)) for back, own in zip(converted, given)
               if back is not None and isinstance(own, (list, tuple)))


def same_time(back: Any, own: Any) -> bool:
    """Whether Arrow's value ``back`` is the date or time ``own``: a date no datetime, and a
    datetime the same instant, both aware (compared as UTC times: ``==`` calls two zones'
    times of an ambiguous hour unequal, PEP 495, and two times of one zone object compare by
    their wall times), or the same wall time, both naive,
    to the nanosecond (pandas' Timestamp)."""
    if not isinstance(own, datetime.datetime):
        return not isinstance(back, datetime.datetime) and back == own
    if not isinstance(back, datetime.datetime) or (back.utcoffset() is None) != (own.utcoffset() is None):
        return False
    if own.utcoffset() is not None:
        back, own = back.astimezone(datetime.timezone.utc), own.astimezone(datetime.timezone.utc)
    return back - own == datetime.timedelta(0) and getattr(back, "nanosecond", 0) == getattr(own, "nanosecond", 0)


def records_right(table: pa.Table, records: list[dict], text_field: str, id_field: Optional[str]) -> bool:
    """Whether every record of a batch converted to ``table`` has its text field, a text of
    a text or token-id type (good token ids), and an id of a string or integer type that fits
    int64: the checks of record_problem, made on the batch's columns."""
    if not has_field(table.schema, text_field):
        return False
    text = field_column(table, text_field)
    if not (is_text_type(text.type) or is_token_type(text.type)):
        return False
    if is_token_type(text.type) and len(bad_token_rows(text)[0]):
        return False
    if text.null_count:  # a null is a record without text only where the record has the field
        nulls = np.flatnonzero(text.is_null().to_numpy(zero_copy_only=False))
        if not all(field_value(records[row], text_field)[0] for row in nulls.tolist()):
            return False
    if id_field is None:
        return True
    if not has_field(table.schema, id_field):
        return False
    ids = field_column(table, id_field)
    return is_id_type(ids.type) and not ids.null_count and first_id_above_int64(ids) is None


def record_problem(record: Any, text_field: str, id_field: Optional[str]) -> tuple[str, Optional[pa.Table]]:
    """(problem, table) of one record: problem is '' when it is a usable record (the rules of
    a JSONL line's record, jsonl_lines.check_jsonl_line, on Python values), and then table is
    the record as a one-row table (for its types), else None."""
    if not isinstance(record, dict):
        return f"expected a dict (a record), got a value of type {type(record).__name__}", None
    found, text = field_value(record, text_field)
    if not found:
        return (f"no field {text_field!r} (its fields: {listed([str(key) for key in record]) or 'none'}); give a "
                "record without text as None, or choose the text field with text_field= (token ids: "
                "token_field=)"), None
    if text is not None and not isinstance(text, (str,) + TOKEN_LIST_TYPES):
        return (f"field {text_field!r} holds a value of type {type(text).__name__}, expected a string or a list "
                "of token ids"), None
    if id_field is not None:
        _, value = field_value(record, id_field)
        if value is None:
            return f"id field {id_field!r} is missing or null", None
        if isinstance(value, np.integer):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            return (f"id field {id_field!r} holds a value of type {type(value).__name__}, expected a string or an "
                    "integer"), None
        if isinstance(value, int) and not -INT64_MAX - 1 <= value <= INT64_MAX:
            return (f"id field {id_field!r} is {value}, outside the range of integer ids ({-INT64_MAX - 1} to "
                    f"{INT64_MAX}); integer ids must fit a signed 64-bit integer"), None
    try:
        single = pa.Table.from_struct_array(pa.array([record]))
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as error:
        return f"cannot be converted to Arrow ({error})", None
    changed = times_changed(single, [record])
    if changed is not None:
        return f"field {changed!r} holds {TIMES_CHANGED}", None
    if has_field(single.schema, text_field):
        column = field_column(single, text_field)
        if not (is_text_type(column.type) or is_token_type(column.type)):
            return f"field {text_field!r} is {column.type}, expected a string or a list of token ids", None
        if is_token_type(column.type):
            rows, reasons = bad_token_rows(column)
            if len(rows):
                return f"field {text_field!r} {reasons[0]}", None
    return "", single


def field_value(record: dict, name: str) -> tuple[bool, Any]:
    """(found, value) of the field ``name`` of a record, by the rule of io/fields.py: its key,
    else a dotted path through the dicts it holds ("meta.id"), a None on the way giving None."""
    if name in record:
        return True, record[name]
    value: Any = record
    for part in name.split("."):
        if value is None:
            return True, None
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


def type_conflict(schema: pa.Schema, other: pa.Schema, error: Exception) -> str:
    """Why a record of columns ``other`` cannot join the records before it (of ``schema``)."""
    for field in other:
        if field.name in schema.names:
            before = schema.field(field.name)
            try:
                pa.unify_schemas([pa.schema([before]), pa.schema([field])], promote_options="permissive")
            except (pa.ArrowTypeError, pa.ArrowInvalid):
                return (f"field {field.name!r} is {field.type}, but {before.type} in the records before it; a "
                        "field must hold values of one type")
    return f"cannot be combined with the records before it ({error})"
