"""Field names that reach into nested data: ``--text-field``, ``--id-field`` and
``--token-field`` (text_field=, id_field=, token_field=) name a top-level column or, with dots,
a path through struct columns (Arrow, Parquet) or JSON objects (JSONL): ``content.text``,
``meta.id``.

A top-level column whose own name holds the dots wins: ``meta.id`` is the column of that name
where the table has one, and the field ``id`` of the struct (object) ``meta`` otherwise. The
columns of a JSONL file are the keys of its records: where any record has the key ``meta.id`` it
names that key in every record, and a record without it lacks the field (record_value), as
reading the file's table gives. A null anywhere on the path is a null value (a record whose
``meta`` is null has a null ``meta.id``); a path that runs into a missing field or into
something that is not a struct (object) is a field the data does not have. Lists are not
entered.

The columns are resolved where they are read (``field_column``): a table keeps its columns as
they are, so kept rows keep the input's own columns, a struct column as it was.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Iterable, Optional

import pyarrow as pa
import pyarrow.compute as pc

from ..core.content import without_view
from ..errors import ParameterError

# How deeply a record's values may nest (a top-level field is at depth 1, an item of a list in
# it at depth 2, ...); a JSONL record nested deeper is a bad record, an Arrow file or a table
# given in Python with a column that does is refused (too_deep). Real records nest a few levels.
# The bound is what the formats the run writes take back: a Parquet schema nests at most 100
# levels (pyarrow refuses to read a deeper one), two for each list, so a column of 50 nested
# lists is written and cannot be read; an Arrow IPC schema (a work directory's shard columns)
# nests at most 64. Lower than both, every record read is also written where it can be read
# back. Arrow's JSON parser recurses once per level, takes time quadratic in the depth of a
# list (27 s at 10,000 levels) and overflows its stack (SIGSEGV) between 15,000 and 20,000;
# Python's json stops at its recursion limit. A line is measured by its brackets before either
# parser sees it (nesting_depths), so neither ever gets one nested much deeper than this.
MAX_JSON_DEPTH = 50


def type_depth(schema: pa.Schema) -> int:
    """How deeply the schema's types nest (a flat column counts 1), without recursion."""
    deepest, stack = 0, [(f.type, 1) for f in schema]
    while stack:
        data_type, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((data_type.field(i).type, depth + 1) for i in range(data_type.num_fields))
    return deepest


def too_deep(schema: pa.Schema) -> Optional[str]:
    """Why a table of ``schema`` cannot be read (a message naming its first column that nests
    deeper than MAX_JSON_DEPTH, the depth a JSONL record may have), or None: its kept rows
    would be written as Parquet that cannot be read back."""
    for field in schema:
        depth = type_depth(pa.schema([field]))
        if depth > MAX_JSON_DEPTH:
            return (f"column {field.name!r} nests {depth} levels deep, more than the {MAX_JSON_DEPTH} a record may "
                    "(deeper, its kept rows would be written as Parquet that cannot be read back)")
    return None


# The fields a run reads where none is named: the text, or (token shingles) the token ids.
TEXT_FIELD = "text"
TOKEN_FIELD = "input_ids"


def check_fields_read(shingles: Iterable[str], text_field: str, token_field: str) -> None:
    """ParameterError where a field named other than by default would be read by nothing:
    text_field where every shingle kind of ``shingles`` is "token" (cut from token ids),
    token_field where none is (cut from a text)."""
    kinds = set(shingles)
    if kinds == {"token"} and text_field != TEXT_FIELD:
        raise ParameterError(f"text_field={text_field!r} names a text, but token shingles are cut from token ids: "
                             "name their column with token_field=")
    if "token" not in kinds and token_field != TOKEN_FIELD:
        shingle = " and ".join(sorted(kinds))
        raise ParameterError(f"token_field={token_field!r} names token ids, but {shingle} shingles are cut "
                             "from a text: name its column with text_field=")


def field_path(schema: pa.Schema, name: str) -> Optional[tuple[int, ...]]:
    """The indices that lead to the field ``name`` in ``schema``: (column,) for a top-level
    column of that name, (column, child, ...) for a dotted path through struct columns, None
    where the schema has no such field."""
    index = schema.get_field_index(name)
    if index >= 0:
        return (index,)
    if "." not in name:
        return None
    first, *rest = name.split(".")
    index = schema.get_field_index(first)
    if index < 0:
        return None
    path, data_type = [index], schema.field(index).type
    for part in rest:
        if not pa.types.is_struct(data_type):
            return None
        child = data_type.get_field_index(part)
        if child < 0:
            return None
        path.append(child)
        data_type = data_type.field(child).type
    return tuple(path)


def named_both_ways(schema: pa.Schema, name: str) -> bool:
    """Whether ``schema`` has a top-level column ``name`` (dotted) and the dotted path through
    struct columns too: a JSONL file whose records name the field in both ways."""
    if "." not in name or schema.get_field_index(name) < 0:
        return False
    index = schema.get_field_index(name.partition(".")[0])
    return index >= 0 and field_path(pa.schema([schema.field(index)]), name) is not None


def has_field(schema: pa.Schema, name: str) -> bool:
    """Whether ``schema`` has the field ``name`` (a column, or a dotted path into one)."""
    return field_path(schema, name) is not None


def with_leaf_types(data_type: pa.DataType, leaf: Callable[[pa.DataType], pa.DataType]) -> pa.DataType:
    """``data_type`` with ``leaf`` applied to every type in it that is no struct, list or map
    (a column's own, a struct's fields', a list's items', a map's keys and values), the
    nesting kept."""
    if pa.types.is_struct(data_type):
        return pa.struct([field.with_type(with_leaf_types(field.type, leaf)) for field in data_type])
    if pa.types.is_map(data_type):
        return pa.map_(data_type.key_field.with_type(with_leaf_types(data_type.key_type, leaf)),
                       data_type.item_field.with_type(with_leaf_types(data_type.item_type, leaf)),
                       keys_sorted=data_type.keys_sorted)
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type) or pa.types.is_fixed_size_list(data_type):
        items = data_type.value_field.with_type(with_leaf_types(data_type.value_type, leaf))
        if pa.types.is_fixed_size_list(data_type):
            return pa.list_(items, data_type.list_size)
        return pa.list_(items) if pa.types.is_list(data_type) else pa.large_list(items)
    return leaf(data_type)


def leaf_types(data_type: pa.DataType) -> list[pa.DataType]:
    """The types in ``data_type`` that are no struct, list or map (with_leaf_types' leaves)."""
    leaves: list[pa.DataType] = []

    def kept(leaf: pa.DataType) -> pa.DataType:
        leaves.append(leaf)
        return leaf

    with_leaf_types(data_type, kept)
    return leaves


def without_views(data_type: pa.DataType) -> pa.DataType:
    """``data_type`` with every string_view and binary_view in it (a column's own type, or a
    struct's field, a list's items, a map's keys and values, a dictionary's values) made
    large_string and large_binary, and a run-end encoded column its values' type: types
    Arrow's filter and take have kernels for."""
    if pa.types.is_run_end_encoded(data_type):  # (decoded by plain_columns: Arrow casts none)
        return without_views(data_type.value_type)

    def plain(leaf: pa.DataType) -> pa.DataType:
        if pa.types.is_dictionary(leaf):
            return pa.dictionary(leaf.index_type, without_views(leaf.value_type), leaf.ordered)
        return without_view(leaf)

    return with_leaf_types(data_type, plain)


def holds_views(data_type: pa.DataType) -> bool:
    """Whether ``data_type`` has a string_view or binary_view at any depth (without_views); a
    run-end encoded type never counts (Arrow casts none: it is filtered as it is)."""
    return not pa.types.is_run_end_encoded(data_type) and without_views(data_type) != data_type


def filtered(values, keep) -> Any:
    """``values`` (pa.Array or ChunkedArray) where ``keep`` (bool (n,)), in their own type: a
    type that holds views, which Arrow's filter has no kernel for, is filtered without them
    (without_views) and cast back."""
    if not holds_views(values.type):
        return values.filter(pa.array(keep))
    return values.cast(without_views(values.type)).filter(pa.array(keep)).cast(values.type)


def plain_columns(table: pa.Table) -> pa.Table:
    """``table`` with its run-end encoded columns (an Arrow file's) decoded, which Arrow
    neither casts nor takes rows of (without_views gives their type)."""
    for index, field in enumerate(table.schema):
        if pa.types.is_run_end_encoded(field.type):
            table = table.set_column(index, field.name, pc.run_end_decode(table.column(index)))
    return table


def held_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` as a run holds such columns (without_views: Arrow filters and takes no view
    type), and as columns of files combine (a polars string_view with a large_string)."""
    return pa.schema([field.with_type(without_views(field.type)) for field in schema], metadata=schema.metadata)


def held_table(table: pa.Table) -> pa.Table:
    """``table`` with the columns of held_schema: run-end encoded ones decoded, view types
    plain (the kept rows are cast back to the input's schema: layout.as_input)."""
    held = held_schema(table.schema)
    return table if held == table.schema else plain_columns(table).cast(held)


def writable_schema(schema: pa.Schema) -> pa.Schema:
    """An input's columns as its kept rows are written: as they are, but a dictionary of view
    values (polars' Categorical in an Arrow file) with plain ones (without_views), which
    Arrow's Parquet writer can write."""
    def writable(leaf: pa.DataType) -> pa.DataType:
        return without_views(leaf) if pa.types.is_dictionary(leaf) else leaf

    fields = [field.with_type(with_leaf_types(field.type, writable)) for field in schema]
    return schema if all(a.type == b.type for a, b in zip(fields, schema)) else pa.schema(fields, schema.metadata)


def field_type(schema: pa.Schema, name: str) -> pa.DataType:
    """The type of the field ``name``, which ``schema`` has (has_field)."""
    path = field_path(schema, name)
    assert path is not None, f"no field {name!r}"
    data_type = schema.field(path[0]).type
    for child in path[1:]:
        data_type = data_type.field(child).type
    return data_type


def field_column(table: pa.Table, name: str) -> pa.ChunkedArray:
    """The values of the field ``name`` of ``table``: the column itself for a top-level one (no
    copy), else the struct's child, null where a struct on the path is null (pc.struct_field).
    KeyError where the table has no such field."""
    path = field_path(table.schema, name)
    if path is None:
        raise KeyError(name)
    column = table.column(path[0])
    if len(path) == 1:
        return column
    return pc.struct_field(column, list(path[1:]))


def content_of(table, name: str):
    """The field ``name`` of a run's input rows: of a pyarrow Table by field_column (nested
    too), of anything else (a staged run's ShardedTable) by its own ``[name]``."""
    return field_column(table, name) if isinstance(table, pa.Table) else table[name]


def with_field(table: pa.Table, name: str, values: pa.ChunkedArray) -> pa.Table:
    """``table`` with the field ``name`` (which it has) holding ``values`` (as many rows, its
    type may differ): the column replaced, or for a nested field its struct column rebuilt
    with that child replaced (the other children and every struct's nulls as they were)."""
    path = field_path(table.schema, name)
    assert path is not None, f"no field {name!r}"
    if len(path) == 1:
        return table.set_column(path[0], name, values)
    column = table.column(path[0])
    # One chunk: a struct's children are cut by the struct's own chunks.
    whole = column.combine_chunks() if column.num_chunks else pa.array([], column.type)
    column = pa.chunked_array([replaced_child(whole, path[1:], values.combine_chunks())])
    return table.set_column(path[0], table.schema.field(path[0]).with_type(column.type), column)


def replaced_child(array: pa.StructArray, path: tuple[int, ...], values: pa.Array) -> pa.StructArray:
    """A struct array with the child at ``path`` (indices, the first among its own children)
    replaced by ``values``; its children are taken as the struct sees them (sliced to its
    offset), its nulls kept."""
    children = [array.field(i) for i in range(array.type.num_fields)]
    index = path[0]
    children[index] = values if len(path) == 1 else replaced_child(children[index], path[1:], values)
    fields = [array.type.field(i).with_type(children[i].type) for i in range(array.type.num_fields)]
    mask = array.is_null() if array.null_count else None
    return pa.StructArray.from_arrays(children, fields=fields, mask=mask)


def empty_table(name: str) -> pa.Table:
    """A table of no rows whose one field is ``name``, of Arrow's null type (which combines
    with the texts or token ids of other files alike): the column of that name, or for a
    dotted name the struct column that holds it, so that it joins the tables of files whose
    field is nested (a top-level column "content.text" would win over their content.text,
    all null)."""
    first, *rest = name.split(".")
    data_type: pa.DataType = pa.null()
    for part in reversed(rest):
        data_type = pa.struct([(part, data_type)])
    return pa.table({first: pa.array([], data_type)})


def field_names(schema: pa.Schema) -> list[str]:
    """Every field of ``schema`` a field name can give, in order, for messages: each column,
    and after a struct column its fields as dotted paths (``content``, ``content.text``)."""
    names: list[str] = []
    stack: list[tuple[str, pa.DataType]] = [(f.name, f.type) for f in reversed(schema)]
    while stack:
        name, data_type = stack.pop()
        names.append(name)
        if pa.types.is_struct(data_type):
            stack.extend((f"{name}.{child.name}", child.type) for child in reversed(list(data_type)))
    return names


MISSING = object()


def record_value(record: dict, name: str, columns: Optional[set[str]] = None) -> Any:
    """The value of the field ``name`` of one JSON record (a dict), the rules of field_path
    over objects: the key itself where the record has it, else a dotted path through objects;
    None where an object on the path is null; MISSING where the record has no such field.
    columns: the top-level columns of the record's file where they are known (the keys of all
    its records): a name among them is that key alone, MISSING where the record lacks it."""
    if name in record or (columns is not None and name in columns):
        return record.get(name, MISSING)
    if "." not in name:
        return MISSING
    value: Any = record
    for part in name.split("."):
        if value is None:
            return None
        if not isinstance(value, dict) or part not in value:
            return MISSING
        value = value[part]
    return value


def both_ways(name: str) -> str:
    """The problem of a field ``name`` that some records of a file hold as a key of its own
    and others as a path through objects."""
    return (f"field {name!r} is a key of its own in some records and a path through objects in others: give "
            "every record the one form")


def record_field_names(record: dict) -> list[str]:
    """Every field of one JSON record a field name can give (field_names for a dict)."""
    names: list[str] = []
    stack: list[tuple[str, Any]] = [(str(key), value) for key, value in reversed(record.items())]
    while stack:
        name, value = stack.pop()
        names.append(name)
        if isinstance(value, dict):
            stack.extend((f"{name}.{key}", item) for key, item in reversed(value.items()))
    return names


def repeated_names(names: list[str]) -> list[str]:
    """The names given to more than one column, quoted, in order of first use."""
    counts = Counter(names)
    return [repr(name) for name in dict.fromkeys(names) if counts[name] > 1]


def lossy_columns(table: pa.Table, schema: pa.Schema) -> list[tuple[str, pa.DataType]]:
    """(name, type in ``schema``) of each top-level column of ``table`` whose integers,
    decimals or times would not come back the same from their type in ``schema``: a column of
    files combined whose values another file's type does not hold (a uint64 beside doubles, a
    decimal of 20 digits beside doubles, milliseconds of the year 3000 beside nanoseconds), at
    the top level or inside its structs and lists (a uint64 hash in a struct beside doubles).
    Only such columns cast to a number or time, or nested ones holding a number or time, are
    cast, twice; floats and dictionaries are not checked."""
    def exact_number(data_type: pa.DataType) -> bool:
        return pa.types.is_integer(data_type) or pa.types.is_decimal(data_type) or pa.types.is_temporal(data_type)

    def holds_exact_number(data_type: pa.DataType) -> bool:
        return any(exact_number(leaf) for leaf in leaf_types(data_type))

    lossy = []
    for field in schema:
        index = table.schema.get_field_index(field.name)
        if index < 0:
            continue
        column = table.column(index)
        kind = column.type
        if kind == field.type:
            continue
        if pa.types.is_nested(kind):
            if not holds_exact_number(kind):
                continue
        elif not exact_number(kind) or not (exact_number(field.type) or pa.types.is_floating(field.type)):
            continue
        try:
            same = column.cast(field.type).cast(kind).equals(column)
        except pa.ArrowInvalid:  # (a value out of the other type's range)
            same = False
        except pa.ArrowNotImplementedError:  # (cast_column's own way: nothing to lose)
            continue
        if not same:
            lossy.append((field.name, field.type))
    return lossy
