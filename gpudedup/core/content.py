"""What the content column of a corpus holds, written once for every reader and store: text
(strings) for word and char shingles, or token ids (lists of integers) for token shingles.

Readers accept either kind in the content column (``--text-field``, or ``--token-field`` for
token shingles) and check each value; ``check_content`` then says, once per run, whether the
kind read is the kind the shingles need. The stages see a column only through
``unit_buffers``: the units shingles are cut from, as one flat host array with offsets.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from .normalize import utf8_buffers

# Token ids are hashed as 32-bit units (docs/hash-spec.md), so every id must fit one.
TOKEN_ID_MAX = 2**32 - 1
TOKEN_EXPECTED = f"a list of token ids (integers from 0 to {TOKEN_ID_MAX})"


def is_token_type(data_type: pa.DataType) -> bool:
    """Whether a column of ``data_type`` holds token ids: a list or large_list of integers (of
    any width; a list of nulls is what Arrow's JSON reader makes of a column of empty lists)."""
    if not (pa.types.is_list(data_type) or pa.types.is_large_list(data_type)):
        return False
    value_type = data_type.value_type
    return pa.types.is_integer(value_type) or pa.types.is_null(value_type)


def is_text_type(data_type: pa.DataType) -> bool:
    """Whether a column of ``data_type`` holds text (string, large_string, string_view; null:
    every text missing; a dictionary of text: pandas' categorical texts)."""
    if pa.types.is_dictionary(data_type):
        return is_text_type(data_type.value_type)
    return (pa.types.is_string(data_type) or pa.types.is_large_string(data_type) or pa.types.is_null(data_type)
            or pa.types.is_string_view(data_type))


def is_id_type(data_type: pa.DataType) -> bool:
    """Whether a column of ``data_type`` holds ids: integers, or strings in any of Arrow's forms
    (string_view from polars or DuckDB, a dictionary: pandas' categorical; plain_ids makes them
    string or large_string)."""
    return pa.types.is_integer(data_type) or (is_text_type(data_type) and not pa.types.is_null(data_type))


def plain_ids(ids):
    """An id column (pa.Array or ChunkedArray) of strings in another form than string or
    large_string (string_view, a dictionary) as large_string, which Arrow's take and hash
    kernels all take; any other column as it is."""
    if is_text_type(ids.type) and not (pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type)
                                       or pa.types.is_null(ids.type)):
        return ids.cast(pa.large_string())
    return ids


def bad_token_rows(column) -> tuple[np.ndarray, list[str]]:
    """The rows (int64, from 0, ascending) of a token-id column (pa.Array or ChunkedArray of
    is_token_type) holding a null id, a negative id or one above TOKEN_ID_MAX, and what is
    wrong with each. A null list is an empty document, not an error."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    values, offsets = token_values(array)
    if len(values) == 0:
        return np.zeros(0, np.int64), []
    if pa.types.is_null(values.type):  # lists of nothing but nulls: every non-empty one is bad
        rows = np.flatnonzero(np.diff(offsets) > 0).astype(np.int64)
        return rows, [f"holds a null token id; expected {TOKEN_EXPECTED}"] * len(rows)
    bad = values.is_null()
    if pa.types.is_signed_integer(values.type):
        bad = pc.or_kleene(bad, pc.less(values, 0))
    if values.type.bit_width == 64:
        bad = pc.or_kleene(bad, pc.greater(values, pa.scalar(TOKEN_ID_MAX, values.type)))
    positions = np.flatnonzero(bad.to_numpy(zero_copy_only=False))
    if positions.size == 0:
        return np.zeros(0, np.int64), []
    rows = np.searchsorted(offsets, positions, side="right") - 1
    rows, first = np.unique(rows, return_index=True)
    reasons = []
    for position in positions[first]:
        value = values[int(position)].as_py()
        what = "a null token id" if value is None else f"token id {value}, out of range"
        reasons.append(f"holds {what}; expected {TOKEN_EXPECTED}")
    return rows.astype(np.int64), reasons


def token_list_problem(values: list, kind_of: Callable[[object], str]) -> str:
    """What is wrong with one document's token ids as JSON gave them (a list of Python values),
    or '' when each is an integer from 0 to TOKEN_ID_MAX; kind_of names a value's JSON type
    ("a string", ...) for the message."""
    for position, value in enumerate(values):
        if value is None:
            return f"holds a null token id at position {position}; expected {TOKEN_EXPECTED}"
        if isinstance(value, np.integer):
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            return (f"is an array holding {kind_of(value)} at position {position}, expected a string "
                    "or a list of token ids")
        if not 0 <= value <= TOKEN_ID_MAX:
            return f"holds token id {value}, out of range, at position {position}; expected {TOKEN_EXPECTED}"
    return ""


def token_lists_to_arrow(items: Sequence, first: int = 0) -> pa.Array:
    """Token-id lists as a large_list<int64> array; InputError naming the first item that is
    not a list of integers from 0 to 2**32 - 1 (counted from ``first``: the position of
    items[0] in the input, for a batch of a longer input)."""
    for position, item in enumerate(items):
        if item is None:
            continue
        values = item.tolist() if isinstance(item, np.ndarray) else list(item)
        problem = token_list_problem(values, lambda value: f"a {type(value).__name__}")
        if problem:
            raise InputError(f"item {first + position} {problem}")
    return pa.array([None if item is None else np.asarray(item, dtype=np.int64) for item in items],
                    pa.large_list(pa.int64()))


def unit_buffers(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The units of a content array as host buffers (values, offsets int64 (n + 1,) from 0):
    UTF-8 bytes uint8 of a text array (normalize.utf8_buffers), or the token ids uint32 of a
    token array (checked by the reader; null lists are empty documents)."""
    if not is_token_type(array.type):
        return utf8_buffers(array)
    values, offsets = token_values(array)
    if pa.types.is_null(values.type):  # only empty lists: no ids at all
        return np.zeros(0, np.uint32), offsets
    return values.to_numpy(zero_copy_only=False).astype(np.uint32, copy=False), offsets


def token_values(array: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """(values, offsets int64 (n + 1,) from 0) of a token array: every document's ids in one
    Arrow array, document d being values[offsets[d]:offsets[d + 1]]; null lists are empty
    (filled first: Arrow lets a null list's range hold values that are not its ids)."""
    if array.null_count:
        array = pc.fill_null(array, pa.scalar([], array.type))
    offsets = np.asarray(array.offsets).astype(np.int64)
    values = array.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    return values, offsets - offsets[0]


def units_bytes(buffers: tuple[np.ndarray, np.ndarray]) -> int:
    """The bytes of all the content's units, from its unit_buffers (what content_bytes gives
    per document, summed): what a signature pass counts as its text (compiled.text_work)."""
    values, offsets = buffers
    return int(offsets[-1]) * values.dtype.itemsize


def content_bytes(buffers: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """int64 (n,): the bytes of each document's content, from its unit_buffers: UTF-8 bytes of
    a text, 4 per token id (the 32-bit units the backends read)."""
    values, offsets = buffers
    return np.diff(offsets).astype(np.int64) * values.dtype.itemsize


def unit_lengths(column) -> np.ndarray:
    """int64 (n,): the units of each document of a content column (pa.Array or ChunkedArray):
    code points of a text, ids of a token list; 0 for null."""
    length = pc.list_value_length if is_token_type(column.type) else pc.utf8_length
    return pc.fill_null(length(column), 0).to_numpy(zero_copy_only=False).astype(np.int64)


def gathered_type(data_type: pa.DataType) -> pa.DataType:
    """One type that content gathered from several files (of their own types) is cast to:
    large_list<int64> for token ids, large_string for text."""
    return pa.large_list(pa.int64()) if is_token_type(data_type) else pa.large_string()


def check_content(data_type: pa.DataType, shingle: str, field: str, where: Optional[str] = None) -> None:
    """InputError unless the content column (of ``data_type``, named ``field``) holds what
    ``shingle`` shingles need: token ids for "token", text otherwise. ``where``: the file that
    shows it (messages start with it)."""
    prefix = f"{where}: " if where else ""
    if shingle == "token" and not is_token_type(data_type):
        if pa.types.is_null(data_type):
            return  # every value missing: empty documents of either kind
        raise InputError(f"{prefix}field {field!r} has type {data_type}, but token shingles need "
                         f"{TOKEN_EXPECTED}; name the token column with token_field=")
    if shingle != "token" and is_token_type(data_type):
        raise InputError(f"{prefix}field {field!r} holds token ids ({data_type}); {shingle} shingles need "
                         "text: use shingle='token' for token ids, or name the text column with text_field=")


def invalid_utf8_rows(column) -> np.ndarray:
    """Rows (int64, from 0) of a string column (pa.Array or ChunkedArray) whose value is not
    valid UTF-8, which only what Arrow did not check holds (bytes viewed as strings, an array
    made from buffers); none for a column of another type. Checked chunk by chunk; only a
    chunk that fails is looked at row by row."""
    column = plain_strings(pa.chunked_array([column]) if isinstance(column, pa.Array) else column)
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


def without_view(data_type: pa.DataType) -> pa.DataType:
    """string_view as large_string, binary_view as large_binary (types Arrow's take, filter and
    Parquet writer have kernels for); any other type as it is."""
    if pa.types.is_string_view(data_type):
        return pa.large_string()
    return pa.large_binary() if pa.types.is_binary_view(data_type) else data_type


def decoded_dictionary(array):
    """A dictionary array (pa.DictionaryArray or ChunkedArray of them) as its values in row
    order, of without_view(its value type): views are cast first, as Arrow takes none."""
    value_type = without_view(array.type.value_type)

    def decoded(chunk: pa.DictionaryArray) -> pa.Array:
        return chunk.dictionary.cast(value_type).take(chunk.indices)

    if isinstance(array, pa.ChunkedArray):
        return pa.chunked_array([decoded(chunk) for chunk in array.chunks], value_type)
    return decoded(array)


def plain_strings(texts):
    """Texts (pa.Array or ChunkedArray) as a string or large_string array of the same kind: a
    dictionary decoded, string_view cast to large_string, bytes (binary, as some writers store
    strings) viewed as strings (the bytes kept, not checked: invalid_utf8_rows); any other
    array as it is."""
    if pa.types.is_dictionary(texts.type):
        texts = decoded_dictionary(texts)
    if without_view(texts.type) != texts.type:
        texts = texts.cast(without_view(texts.type))
    if pa.types.is_binary(texts.type) or pa.types.is_large_binary(texts.type):
        target = pa.string() if pa.types.is_binary(texts.type) else pa.large_string()
        if isinstance(texts, pa.ChunkedArray):
            return pa.chunked_array([chunk.view(target) for chunk in texts.chunks], target)
        return texts.view(target)
    return texts
