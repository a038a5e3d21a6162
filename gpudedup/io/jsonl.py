"""Reading JSONL files (.jsonl, .ndjson, .json, each optionally .gz or .zst) with pyarrow (host).

A file whose every non-blank line is one object is parsed by Arrow in one go; anything else is
read line by line (jsonl_lines.check_jsonl_line) so that each bad line is named ``FILE:LINE``
and stops the run or is left out. A record's row number is its line number (from 1).
"""

from __future__ import annotations

import json
from typing import Callable, Iterator, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from .fields import both_ways, empty_table, field_column, has_field, named_both_ways, type_depth, with_leaf_types
from .formats import MAGIC, compression_of, input_suffix
from .jsonl_lines import (JSON_WHITESPACE, MAX_JSON_DEPTH, check_jsonl_line, lacks_field, lines_of, longest_line,
                          object_line_numbers, open_binary, read_error)
from ..core.content import bad_token_rows, is_token_type
from .source import RecordErrors, SourceFile, check_columns, file_error, strip_path
from .storage import Location

MAX_BLOCK_BYTES = 2**31 - 1  # Arrow's JSON reader needs every line within one block


def read_jsonl(path: Location, source: SourceFile, text_field: str, id_field: Optional[str],
               on_error: str = "stop"):
    """(table, line numbers, skipped records) of a JSONL file.

    Clean files are parsed by Arrow in one go (the fast path). A file Arrow cannot read, or
    whose records do not sit one to a line (or nest deeper than a record may: Arrow is not
    given those), or whose text or id column is not right (a record without the text field
    included), is read again line by line: every line is checked (check_jsonl_line), the
    first bad one raises (on_error "stop") or each bad one is recorded and left out ("skip"),
    and the good lines are parsed by Arrow.
    """
    errors = RecordErrors(on_error)
    opener = lambda: open_binary(path, source.piece)  # noqa: E731
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
    if table is not None and row_numbers is not None and table.num_rows == row_numbers.size:
        if table.num_rows == 0:  # only blank lines: no records, and no columns to check
            return empty_table(text_field), np.zeros(0, np.int64), []
        problem = check_columns(table, source, text_field, id_field, nulls=False)
        if problem and (not has_field(table.schema, text_field)
                        or (id_field is not None and not has_field(table.schema, id_field))):
            raise file_error(source.path, strip_path(problem, source.path))  # absent in every line
        if not problem and whole_table_stands(path, source, table, row_numbers, text_field, id_field):
            check_doubles_hold(path, source, table)
            return table, row_numbers, []
    # The columns of a table read whole tell what a dotted field name names (fields.py).
    columns = None if table is None else set(table.column_names)
    return read_jsonl_by_line(path, source, text_field, id_field, errors, columns)


def whole_table_stands(path: Location, source: SourceFile, table: pa.Table, row_numbers: np.ndarray,
                       text_field: str, id_field: Optional[str]) -> bool:
    """Whether a JSONL file's table as a parser read it whole (Arrow's, or cuDF's), its text and
    id columns as check_columns wants them, is the file's records as the line-by-line reading
    takes them: no null id, nothing nested deeper than a record may be, no bad token id, no
    infinity (which may be an integer too large for a double), no record without its text
    field. Otherwise the file is read line by line, which names the line."""
    return (not null_ids(table, id_field) and type_depth(table.schema) <= MAX_JSON_DEPTH
            and not bad_token_ids(table, text_field) and not holds_infinity(table)
            and not text_missing(path, source, table, row_numbers, text_field))


def holds_infinity(table: pa.Table) -> bool:
    """Whether a floating column, at any depth, holds an infinity: an Infinity literal, or an
    integer too large for a double, which Arrow reads as one and the line-by-line reading
    refuses (jsonl_lines._any_int)."""
    return any(pa.types.is_floating(values.type) and pc.any(pc.is_inf(values)).as_py()
               for column in table.columns for chunk in column.chunks for _, values in leaves(chunk))


def bad_token_ids(table: pa.Table, text_field: str) -> bool:
    """Whether a token-id column holds an id that is null or out of range (the line-by-line
    reading then names its line)."""
    column = field_column(table, text_field)
    return is_token_type(column.type) and len(bad_token_rows(column)[0]) > 0


def text_missing(path: Location, source: SourceFile, table: pa.Table, row_numbers: np.ndarray,
                 text_field: str) -> bool:
    """Whether a record read as a null text lacks the text field in its line (a record without
    text holds null there; the line-by-line reading names a line that lacks it)."""
    column = field_column(table, text_field)
    if not column.null_count:
        return False
    rows = np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))
    return lacks_field(path, source, row_numbers[rows], text_field, set(table.column_names))


def null_ids(table: pa.Table, id_field: Optional[str]) -> bool:
    return id_field is not None and field_column(table, id_field).null_count > 0


def read_jsonl_by_line(path: Location, source: SourceFile, text_field: str, id_field: Optional[str],
                       errors: RecordErrors, columns: Optional[set[str]] = None):
    """The slow path of read_jsonl: check every line, leave out (or stop at) the bad ones,
    parse the good ones with Arrow."""
    source.line_by_line = True
    kept: list[bytes] = []
    numbers: list[int] = []
    first_seen: dict[tuple, tuple[str, int]] = {}  # field path -> (JSON type, line)
    first = source.at_file_start  # (the file's first record is to come)
    for number, line in enumerate(lines_of(path, source), start=1 + source.numbers_before):
        if not line.strip(JSON_WHITESPACE):
            continue
        if first and opens_json_array(line):
            raise file_error(source.path, json_array_problem(path))
        first = False
        problem, kinds = check_jsonl_line(line, number, text_field, id_field, first_seen, columns)
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
    at = int(np.argmax([len(line) for line in kept]))
    longest = (len(kept[at]), numbers[at])
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
    if columns is None:  # (the lines were checked field by field, not knowing the file's columns)
        both = [name for name in (text_field, id_field) if name is not None and named_both_ways(table.schema, name)]
        if both:
            raise file_error(source.path, both_ways(both[0]))
    check_doubles_hold(path, source, table)
    return table, np.asarray(numbers, dtype=np.int64), errors.records


def json_array_problem(path: Location) -> str:
    """The message for a file that holds a JSON array rather than JSON Lines."""
    name = path.name
    stem = name[:len(name) - len(input_suffix(name))] or name
    # Never the file itself as the target: the shell would empty it before jq reads it.
    target = f"{stem}.jsonl" if f"{stem}.jsonl" != name else f"{stem}.lines.jsonl"
    return (f"a JSON array, not JSON Lines (one JSON object per line); convert it, e.g. "
            f"jq -c '.[]' {name} > {target}")


def opens_json_array(line: bytes) -> bool:
    """Whether a file's first non-blank line opens a JSON array of records (a .json file of one
    array, pretty-printed or on one line): a '[' followed by '{', by ']', or by nothing more
    on that line. Told by those bytes alone, so that no parser is given a line as long as
    the file; a line holding an array of other values stays a bad record of its own."""
    stripped = line.strip(JSON_WHITESPACE)
    if not stripped.startswith(b"["):
        return False
    rest = stripped[1:].lstrip(JSON_WHITESPACE)
    return not rest or rest[:1] in (b"{", b"]")


def compressed_hint(line: bytes, path: Location) -> str:
    """A hint when a file's first line shows it is compressed, Parquet or Arrow, not JSON text."""
    compression = compression_of(path)
    for magic, what in ((MAGIC["gzip"], "gzip-compressed: name it .jsonl.gz"),
                        (b"PAR1", "a Parquet file: name it .parquet"),
                        (MAGIC["zstd"], "zstd-compressed: name it .jsonl.zst"),
                        (b"ARROW1", "an Arrow IPC file: name it .arrow"),
                        (b"\xff\xff\xff\xff", "an Arrow IPC stream: name it .arrow"),
                        (b"BZh", "bzip2-compressed, which is not supported"),
                        (b"\xfd7zXZ", "xz-compressed, which is not supported")):
        if line.startswith(magic) and not (compression is not None and magic == MAGIC[compression]):
            return f"; the file looks {what}"
    return ""


def parse_jsonl(open_stream: Callable, path: Location, source: SourceFile,
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
        if longest is None:
            length, line = longest_line(open_stream)
            line += source.numbers_before  # (counted in the piece read)
        else:
            length, line = longest
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
    # Nor round a number: integers past int64 (a uint64 hash) make the reader type their column,
    # or a struct field or list item of it, double, which holds none past 2**53 exactly. Such
    # a column is read again with that value as whole decimals of 38 digits, or of 76 where one
    # is longer, each on its own (every read keeps the types chosen before it). A value no
    # decimal takes (a fraction, or a number of more than 76 digits: 1e80) keeps the doubles.
    exact, chosen = table, {field.name: field.type for field in table.schema}
    found = whole_number_leaves(table)

    def read_as(types: dict[str, pa.DataType]) -> Optional[pa.Table]:
        schema = pa.schema([field.with_type(types[field.name]) for field in table.schema],
                           metadata=table.schema.metadata)
        try:
            return read_json(open_stream, read_options, pajson.ParseOptions(explicit_schema=schema))
        except pa.ArrowInvalid:
            return None

    # All at once first (one read again, where every one takes 38 digits), else one by one.
    every = dict(chosen)
    for name, leaf in found:
        every[name] = with_type_at(every[name], leaf, WHOLE_NUMBERS[0])
    if len(found) > 1 and (read := read_as(every)) is not None:
        return read
    for name, leaf in found:
        for decimal in WHOLE_NUMBERS:
            tried = {**chosen, name: with_type_at(chosen[name], leaf, decimal)}
            if (read := read_as(tried)) is not None:
                exact, chosen = read, tried
                break
    return exact


# Whole numbers from here up are not all doubles: 2**53 + 1 reads as 2**53.
EXACT_DOUBLE_LIMIT = 2.0**53
# The types a column of whole numbers past int64 is read as: the first that holds all its values.
WHOLE_NUMBERS = (pa.decimal128(38, 0), pa.decimal256(76, 0))


def whole_number_leaves(table: pa.Table) -> list[tuple[str, tuple[int, ...]]]:
    """(column name, path) of the table's double values, at the top level or inside its
    structs and lists, that are all whole numbers, some at or past 2**53 in magnitude:
    integers the reader typed double (one past int64, or among such), which a double cannot
    keep. A path is the struct fields' indices and the lists' items (-1) down to the value
    (with_type_at)."""
    return [(name, path) for name, path, whole in large_double_leaves(table) if whole]


def large_double_leaves(table: pa.Table) -> list[tuple[str, tuple[int, ...], bool]]:
    """(column name, path, whether all are whole numbers) of the table's double values, at
    the top level or inside its structs and lists (leaves), some at or past 2**53 in
    magnitude: where integers may have been read as doubles that do not hold them."""
    found = []
    for field, column in zip(table.schema, table.columns):
        chunks = [leaves(chunk) for chunk in column.chunks]
        for number, (path, _) in enumerate(chunks[0] if chunks else []):
            values = pa.chunked_array([leaves_of[number][1] for leaves_of in chunks])
            if pa.types.is_floating(values.type) and values.null_count < len(values) \
                    and pc.max(pc.abs(values)).as_py() >= EXACT_DOUBLE_LIMIT:
                found.append((field.name, path, pc.all(pc.equal(values, pc.floor(values))).as_py()))
    return found


# A line's digits as b"0" and its other bytes as b" " (bytes.translate, at C speed): a line
# without SIXTEEN_DIGITS then holds no integer past 2**53, and is not parsed again.
DIGITS_AS_ZERO = bytes(48 if 48 <= byte <= 57 else 32 for byte in range(256))
SIXTEEN_DIGITS = b"0" * 16


def check_doubles_hold(path: Location, source: SourceFile, table: pa.Table) -> None:
    """FileError where a field of the file's table is double and a line gives it an integer
    past 2**53 that a double does not hold (2**53 + 1 reads as 2**53): its kept rows would be
    written back with another value. Whole numbers alone are read as decimals (parse_jsonl); a
    field stays double where it holds a fraction, or a number no decimal takes. The lines are
    read again with Python's exact integers only where a double field reaches 2**53."""
    large = [(name, at) for name, at, _ in large_double_leaves(table)]
    if not large:
        return
    types = {field.name: field.type for field in table.schema}
    for number, line in enumerate(lines_of(path, source), start=1 + source.numbers_before):
        if line.translate(DIGITS_AS_ZERO).find(SIXTEEN_DIGITS) < 0:  # (no integer past 2**53: 16 digits)
            continue
        try:
            record = json.loads(line)
        except ValueError:  # (blank, or a bad record left out: not in the table)
            continue
        for name, at in large:
            for value in values_at(record.get(name) if isinstance(record, dict) else None, at, types[name]):
                if type(value) is int and not kept_as_double(value):
                    raise file_error(source.path, f"field {name!r} holds the integer {value}, which its type, double "
                                                  "(for the fractions or the numbers of more than 76 digits beside "
                                                  f"it), would keep as {float(value):.17g}: write such numbers as "
                                                  "strings", f"{source.path}:{number}")


def kept_as_double(value: int) -> bool:
    """Whether a double holds the integer ``value`` exactly; one past the largest double counts
    as kept here: Arrow reads it as an infinity, which the line-by-line reading refuses
    (holds_infinity)."""
    try:
        return float(value) == value
    except OverflowError:
        return True


def values_at(value, at: tuple[int, ...], data_type: pa.DataType) -> Iterator:
    """The values a JSON ``value`` of type ``data_type`` holds at the leaf path ``at`` (leaves'):
    a struct's field by its index, every item of a list (-1)."""
    if not at:
        yield value
    elif at[0] == -1 and isinstance(value, list):
        for item in value:
            yield from values_at(item, at[1:], data_type.value_type)
    elif at[0] >= 0 and isinstance(value, dict):
        field = data_type.field(at[0])
        yield from values_at(value.get(field.name), at[1:], field.type)


def leaves(array: pa.Array, path: tuple[int, ...] = ()) -> list[tuple[tuple[int, ...], pa.Array]]:
    """(path, values) of every value of ``array`` that is no struct or list, in the order of
    its type's fields: a struct's fields by index (its nulls their nulls), a list's items (-1)."""
    if pa.types.is_struct(array.type):
        return [leaf for index, child in enumerate(array.flatten()) for leaf in leaves(child, path + (index,))]
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        return leaves(array.flatten(), path + (-1,))
    return [(path, array)]


def with_type_at(data_type: pa.DataType, path: tuple[int, ...], new: pa.DataType) -> pa.DataType:
    """``data_type`` with the type at ``path`` (leaves') made ``new``."""
    if not path:
        return new
    if path[0] == -1:
        items = data_type.value_field.with_type(with_type_at(data_type.value_type, path[1:], new))
        return pa.list_(items) if pa.types.is_list(data_type) else pa.large_list(items)
    return pa.struct([field.with_type(with_type_at(field.type, path[1:], new)) if index == path[0] else field
                      for index, field in enumerate(data_type)])


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
    return pa.schema([field.with_type(with_leaf_types(field.type, lambda leaf: pa.string()
                                                      if pa.types.is_timestamp(leaf) else leaf))
                      for field in schema])
