"""JSONL line by line (pyarrow streams, host): the bytes of a possibly gzipped file as lines,
the shape of every line (blank, one object, other) and so each record's line number, and the
check of one line that says exactly what is wrong with it (check_jsonl_line), for the slow
path of jsonl.read_jsonl and for cuDF's reads (which need the line numbers too).
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Iterator, Optional

import numpy as np
import pyarrow as pa

from ..errors import InputError
from .content import token_list_problem
from .pieces import Piece
from . import storage
from .source import SourceFile, file_error
from .storage import Location

UTF8_BOM = b"\xef\xbb\xbf"
JSON_WHITESPACE = b" \t\r\n"
CHUNK_BYTES = 1 << 24
MAX_JSON_DEPTH = 200  # deeper records are refused: Python's and Arrow's recursion stay bounded


def open_binary(path: Location, piece: Optional[Piece] = None):
    """The file's bytes as a stream, gunzipped for .gz names (pyarrow, no full copy in memory);
    piece: only its byte range (a plain file's, io/pieces.py: a view of the file mapped in
    memory, or one ranged read of a remote file)."""
    if piece is not None:
        return pa.BufferReader(storage.read_range(path, piece.start, piece.stop))
    compression = "gzip" if path.name.lower().endswith(".gz") else None
    return storage.open_stream(path, compression)


def lines_of(path: Location, source: SourceFile) -> Iterator[bytes]:
    """The lines of a (possibly gzipped) file, or of the piece of it ``source`` reads, split at
    b'\\n' (a UTF-8 BOM before the file's first is dropped), for the slow paths: diagnosis,
    skipping and line numbers."""
    try:
        with open_binary(path, source.piece) as stream:
            pending: list[bytes] = []  # the line read so far (a long line comes in many chunks)
            first = source.at_file_start
            while chunk := stream.read(CHUNK_BYTES):
                if first:
                    chunk, first = chunk.removeprefix(UTF8_BOM), False
                pieces = chunk.split(b"\n")
                if len(pieces) == 1:
                    pending.append(chunk)
                    continue
                pending.append(pieces[0])
                yield b"".join(pending)
                yield from pieces[1:-1]
                pending = [pieces[-1]] if pieces[-1] else []
            if pending:
                yield b"".join(pending)
    except PermissionError:
        raise
    except (OSError, pa.ArrowInvalid) as error:
        raise read_error(path, source, error) from None


def read_error(path: Location, source: SourceFile, error: Exception) -> InputError:
    """The InputError for a file whose bytes cannot be read (I/O, gzip)."""
    if path.name.lower().endswith(".gz"):
        try:
            with storage.open_stream(path) as raw:
                magic = raw.read(2)
        except OSError:
            magic = b"\x1f\x8b"
        if magic != b"\x1f\x8b":
            return file_error(source.path, "not gzip-compressed (it does not start with the gzip "
                                           "signature 1f 8b); a plain JSONL file must not end in .gz")
        return file_error(source.path, f"cannot decompress: corrupt or truncated gzip data ({error})")
    return file_error(source.path, f"cannot read ({error})")


def longest_line(open_stream: Callable) -> tuple[int, int]:
    """(length in bytes, line number from 1) of the longest line of a stream."""
    longest, where, lines, current = 0, 1, 0, 0
    with open_stream() as stream:
        while chunk := stream.read(CHUNK_BYTES):
            ends = np.flatnonzero(np.frombuffer(chunk, np.uint8) == 10)
            if ends.size == 0:
                current += len(chunk)
                continue
            lengths = np.diff(ends, prepend=-1)
            lengths[0] += current
            i = int(np.argmax(lengths))
            if lengths[i] > longest:
                longest, where = int(lengths[i]), lines + i + 1
            lines += ends.size
            current = len(chunk) - int(ends[-1]) - 1
    if current > longest:
        longest, where = current, lines + 1
    return longest, where


BLANK, OBJECT, OTHER = 0, 1, 2


def line_shapes(open_stream: Callable, file_start: bool = True) -> np.ndarray:
    """For every line of a stream (split at b'\\n'; a last line without one counts; a UTF-8 BOM
    before the first is ignored where the stream is the start of its file), int8: BLANK (empty,
    or a lone '\\r'), OBJECT (starts with '{' and ends with '}', before an optional '\\r') or
    OTHER. Vectorised, in chunks."""
    shapes: list[np.ndarray] = []
    length, head, tail = 0, b"", b""  # the line being read: bytes so far, first byte, last two
    first = file_start
    with open_stream() as stream:
        while chunk := stream.read(CHUNK_BYTES):
            if first:
                chunk, first = chunk.removeprefix(UTF8_BOM), False
                if not chunk:
                    continue
            buf = np.frombuffer(chunk, np.uint8)
            ends = np.flatnonzero(buf == 10)
            if ends.size == 0:
                head = head if length else chunk[:1]
                tail, length = (tail + chunk[-2:])[-2:], length + len(chunk)
                continue
            piece = chunk[:int(ends[0])]
            shapes.append(np.array([shape_of(length + len(piece), head if length else piece[:1],
                                             (tail + piece[-2:])[-2:])], np.int8))
            if ends.size > 1:
                starts, stops = ends[:-1] + 1, ends[1:]
                sizes = stops - starts
                last = buf[stops - 1]
                cr = (sizes > 0) & (last == 13)
                sizes = sizes - cr
                last = np.where(cr, buf[np.maximum(stops - 2, 0)], last)
                is_object = (sizes >= 2) & (buf[starts] == 123) & (last == 125)
                shapes.append(np.where(sizes == 0, BLANK, np.where(is_object, OBJECT, OTHER)).astype(np.int8))
            rest = chunk[int(ends[-1]) + 1:]
            length, head, tail = len(rest), rest[:1], rest[-2:]
    if length:
        shapes.append(np.array([shape_of(length, head, tail)], np.int8))
    return np.concatenate(shapes) if shapes else np.zeros(0, np.int8)


def shape_of(length: int, head: bytes, tail: bytes) -> int:
    if tail.endswith(b"\r"):
        length, last = length - 1, tail[-2:-1]
    else:
        last = tail[-1:]
    if length <= 0:
        return BLANK
    return OBJECT if length >= 2 and head == b"{" and last == b"}" else OTHER


def record_line_numbers(open_stream: Callable, rows: int, path: Location, source: SourceFile) -> Optional[np.ndarray]:
    """The line number (from 1) of each of the ``rows`` records a parser read, or None when
    the records do not sit one to a non-blank line (a line holding something other than one
    object, or two objects on one line): then the slow path reads the file.

    Every non-blank line must start with '{' and end with '}' (JSON white space aside), so
    no record spans lines; with as many such lines as records, each holds exactly one."""
    numbers = object_line_numbers(open_stream, path, source)
    return numbers if numbers is not None and numbers.size == rows else None


def object_line_numbers(open_stream: Callable, path: Location, source: SourceFile) -> Optional[np.ndarray]:
    """The numbers (from 1, int64, in the whole file where ``source`` reads a piece of it) of the
    non-blank lines, or None when one of them does not start with '{' and end with '}' (JSON
    white space aside)."""
    shapes = line_shapes(open_stream, source.at_file_start)
    other = np.flatnonzero(shapes == OTHER)
    if other.size:  # white space around a record: look at those lines themselves
        wanted = set((other + 1).tolist())
        for number, line in enumerate(lines_of(path, source), start=1):
            if number in wanted:
                stripped = line.strip(JSON_WHITESPACE)
                if not stripped:
                    shapes[number - 1] = BLANK
                elif stripped[:1] == b"{" and stripped[-1:] == b"}":
                    shapes[number - 1] = OBJECT
                else:
                    return None
    return (np.flatnonzero(shapes == OBJECT) + 1 + source.numbers_before).astype(np.int64)


class _Refused(ValueError):
    """A JSON line that Python's parser reads but Arrow's would not."""


def _unique_pairs(pairs: list) -> dict:
    record = dict(pairs)
    if len(record) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused(f"field {key!r} appears twice in one object")
            seen.add(key)
    return record


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _Refused(f"the number {text[:40]} is too large for a double")
    return value


def _any_int(text: str):
    # Arrow reads an integer too large for a double as infinity (and a float as an error);
    # Python refuses to convert integers of more than 4,300 digits.
    return int(text) if len(text) <= 4000 else float("inf")


def check_jsonl_line(line: bytes, number: int, text_field: str, id_field: Optional[str],
                     first_seen: dict) -> tuple[str, dict]:
    """(problem, field types) of one non-blank JSONL line: problem is '' when the line is a
    usable record, else what is wrong with it; field types maps every field path (a tuple,
    '[]' for list items) with a non-null value to its JSON type, for the next lines."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"invalid UTF-8 (byte 0x{line[error.start]:02x} at column {error.start + 1})", {}
    try:
        record = json.loads(text, object_pairs_hook=_unique_pairs, parse_float=_finite_float,
                            parse_int=_any_int)
    except json.JSONDecodeError as error:
        problem = f"invalid JSON ({error.msg} at column {error.colno})"
        if "\r" in text.rstrip("\r\n"):
            problem += ("; the line holds a carriage return (\\r) that does not end it: lines must "
                        "end with \\n or \\r\\n")
        return problem, {}
    except _Refused as error:
        return str(error), {}
    except RecursionError:
        return f"JSON nested more than {MAX_JSON_DEPTH} levels deep", {}
    if not isinstance(record, dict):
        return f"expected a JSON object, got {json_type(record)}", {}
    value = record.get(text_field)
    if isinstance(value, list):  # token ids (content.check_content says whether they are wanted)
        problem = token_list_problem(value, json_type)
        if problem:
            return f"field {text_field!r} {problem}", {}
    elif value is not None and not isinstance(value, str):
        return f"field {text_field!r} is {json_type(value)}, expected a string or a list of token ids", {}
    if id_field is not None:
        value = record.get(id_field)
        if value is None:
            return f"id field {id_field!r} is missing or null", {}
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            kind = "a number that is not an integer" if isinstance(value, float) else json_type(value)
            return f"id field {id_field!r} is {kind}, expected a string or an integer", {}
    kinds: dict[tuple, str] = {}
    # (field path, value, depth), popped in line order
    stack: list[tuple[tuple[str, ...], Any, int]] = [((name,), value, 1) for name, value in reversed(record.items())]
    while stack:
        key, value, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return f"JSON nested more than {MAX_JSON_DEPTH} levels deep", {}
        kind = json_type(value)
        if kind == "null":
            continue
        problem = lone_surrogate(key, value)
        if problem:
            return problem, {}
        seen_kind, seen_line = first_seen.get(key, (None, 0))
        if seen_kind is None:
            seen_kind = kinds.setdefault(key, kind)
            seen_line = number
        if kind != seen_kind:
            where = "earlier on this line" if seen_line == number else f"on line {seen_line}"
            return (f"field {field_name(key)!r} is {kind}, but {seen_kind} {where}; "
                    "a field must hold values of one type"), {}
        if isinstance(value, dict):
            stack.extend((key + (name,), item, depth + 1) for name, item in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((key + ("[]",), item, depth + 1) for item in reversed(value))
    return "", kinds


def lone_surrogate(key: tuple, value) -> str:
    """A message when a field name or string holds a lone UTF-16 surrogate (a \\ud800 escape
    without its pair), which Python's JSON parser accepts and Arrow's does not."""
    for text in (key[-1], value if isinstance(value, str) else ""):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return f"field {field_name(key)!r} holds an unpaired UTF-16 surrogate escape (\\ud800-\\udfff)"
    return ""


def field_name(key: tuple) -> str:
    return ".".join(key).replace(".[]", "[]")


def json_type(value) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)
