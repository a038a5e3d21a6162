"""JSONL line by line (pyarrow streams, host): the bytes of a possibly compressed file as lines,
the shape of every line (blank, one object, other) and so each record's line number, and the
check of one line that says exactly what is wrong with it (check_jsonl_line), for the slow
path of jsonl.read_jsonl and for cuDF's reads (which need the line numbers too).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import numpy as np
import pyarrow as pa

from ..errors import InputError
from ..core.content import token_list_problem
from .fields import MAX_JSON_DEPTH, MISSING, both_ways, record_field_names, record_value
from .formats import MAGIC, compression_of
from .pieces import Piece
from . import storage
from .source import INT64_MAX, SourceFile, file_error, listed
from .storage import Location

UTF8_BOM = b"\xef\xbb\xbf"
JSON_WHITESPACE = b" \t\r\n"
CHUNK_BYTES = 1 << 24
# The brackets of a line hold its record's own braces too: one level more than its values.
MAX_BRACKET_DEPTH = MAX_JSON_DEPTH + 1
OPENING = 0x7B  # '{'; '[' (0x5B) is the same byte with bit 0x20 cleared (as are '}' and ']')
CLOSING = 0x7D


def open_binary(path: Location, piece: Optional[Piece] = None):
    """The file's bytes as a stream, decompressed for .gz and .zst names (formats.compression_of:
    pyarrow's codecs, no full copy in memory); piece: only its byte range (a plain file's,
    io/pieces.py: a view of the file mapped in memory, or one ranged read of a remote file)."""
    if piece is not None:
        return pa.BufferReader(storage.read_range(path, piece.start, piece.stop))
    compression = compression_of(path)
    if compression is not None and not pa.Codec.is_available(compression):
        raise OSError(f"this pyarrow is built without the {compression} codec; install a pyarrow that has it "
                      "(the wheels on PyPI do)")
    return storage.open_stream(path, compression)


def lines_of(path: Location, source: SourceFile) -> Iterator[bytes]:
    """The lines of a (possibly compressed) file, or of the piece of it ``source`` reads, split at
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
    """The InputError for a file whose bytes cannot be read (I/O, gzip, zstd)."""
    compression = compression_of(path)
    if compression is not None and pa.Codec.is_available(compression):
        signature = MAGIC[compression]
        try:
            with storage.open_stream(path) as raw:
                magic = raw.read(len(signature))
        except OSError:
            magic = signature
        if magic != signature:
            suffix = path.name[path.name.rfind("."):]
            return file_error(source.path, f"not {compression}-compressed (it does not start with the {compression} "
                                           f"signature {signature.hex(' ')}); a plain JSONL file must not end in "
                                           f"{suffix}")
        return file_error(source.path, f"cannot decompress: corrupt or truncated {compression} data ({error})")
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


BLANK, OBJECT, OTHER, DEEP = 0, 1, 2, 3


def line_shapes(open_stream: Callable, file_start: bool = True) -> np.ndarray:
    """For every line of a stream (split at b'\\n'; a last line without one counts; a UTF-8 BOM
    before the first is ignored where the stream is the start of its file), int8: BLANK (empty,
    or a lone '\\r'), OBJECT (starts with '{' and ends with '}', before an optional '\\r'),
    OTHER, or DEEP: a line whose brackets nest deeper than MAX_BRACKET_DEPTH, or may (a line
    begun in an earlier chunk, of more opening brackets than that, in strings or not: too_deep
    says). Vectorised, in chunks: the nesting is measured (nesting_depths) only in lines of
    more opening brackets than MAX_BRACKET_DEPTH."""
    shapes: list[np.ndarray] = []
    length, head, tail = 0, b"", b""  # the line being read: bytes so far, first byte, last two
    opened = 0  # the opening brackets of the line being read
    deep: list[int] = []  # the lines (from 0) that are DEEP
    done = 0  # the lines ended before this chunk
    first = file_start
    scratch, found = np.empty(0, np.uint8), np.empty(0, bool)
    with open_stream() as stream:
        while chunk := stream.read(CHUNK_BYTES):
            if first:
                chunk, first = chunk.removeprefix(UTF8_BOM), False
                if not chunk:
                    continue
            buf = np.frombuffer(chunk, np.uint8)
            if scratch.size < buf.size:  # (buffers for every chunk: fresh ones cost more than the scan)
                size = max(buf.size, CHUNK_BYTES)
                scratch, found = np.empty(size, np.uint8), np.empty(size, bool)
            opens = opening_brackets(buf, scratch[:buf.size], found[:buf.size])
            ends = np.flatnonzero(buf == 10)
            if ends.size == 0:
                head = head if length else chunk[:1]
                tail, length = (tail + chunk[-2:])[-2:], length + len(chunk)
                opened += opens.size
                continue
            if opened + opens.size > MAX_BRACKET_DEPTH:  # (otherwise no line here can have more)
                per_line = np.bincount(np.searchsorted(ends, opens), minlength=ends.size + 1)
                per_line[0] += opened
                many = np.flatnonzero(per_line[:-1] > MAX_BRACKET_DEPTH)
                deep.extend((deep_lines(chunk, ends, many, length > 0) + done).tolist())
                opened = int(per_line[-1])
            else:
                opened = opens.size - int(np.searchsorted(opens, ends[-1]))
            done += ends.size
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
        if opened > MAX_BRACKET_DEPTH:
            deep.append(done)
    every = np.concatenate(shapes) if shapes else np.zeros(0, np.int8)
    every[deep] = DEEP
    return every


def opening_brackets(buf: np.ndarray, scratch: np.ndarray, found: np.ndarray) -> np.ndarray:
    """The positions (int64, ascending) of the bytes '{' and '[' in ``buf`` (uint8), in strings
    or not; scratch (uint8) and found (bool) of buf's size are overwritten."""
    np.bitwise_or(buf, 0x20, out=scratch)
    np.equal(scratch, OPENING, out=found)
    return np.flatnonzero(found)


def deep_lines(chunk: bytes, ends: np.ndarray, lines: np.ndarray, continued: bool) -> np.ndarray:
    """Of ``lines`` (int64 ascending: lines of a chunk, the k-th ended by the newline at
    ends[k]), those whose brackets nest deeper than MAX_BRACKET_DEPTH, and line 0 where it is
    ``continued`` from an earlier chunk (it may: too_deep looks at it whole)."""
    whole = (lines > 0) | (not continued)
    measured = lines[whole]
    starts = np.where(measured > 0, ends[np.maximum(measured - 1, 0)] + 1, 0)
    depths = nesting_depths([chunk[start:stop] for start, stop in zip(starts.tolist(), ends[measured].tolist())])
    return np.sort(np.concatenate([lines[~whole], measured[depths > MAX_BRACKET_DEPTH]]))


def nesting_depths(lines: list[bytes]) -> np.ndarray:
    """line_depths of lines given apart."""
    if not lines:
        return np.zeros(0, np.int64)
    data = np.frombuffer(b"\n".join(lines) + b"\n", np.uint8)
    return line_depths(data, np.cumsum([len(line) + 1 for line in lines]) - 1)


def line_depths(data: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """int64 (ends.size,): how deeply the brackets ('{' and '[' against '}' and ']') of each
    line of ``data`` (uint8, line k ended by the newline at ends[k]) nest outside JSON strings;
    a quote escaped by an odd run of backslashes does not end a string. Exact for a valid JSON
    line; for any other, exact up to where it stops being valid JSON, which is as far as a
    parser goes into it. Vectorised; its work is in the quotes and the bytes outside strings
    (few: a record's text is one string), besides one pass over the bytes for quotes."""
    depths = np.zeros(ends.size, np.int64)
    outside = outside_strings(data, ends)
    level, step = outside.levels(data)
    if level.size:
        first = np.flatnonzero(np.diff(outside.line, prepend=-1))  # each line's first byte outside
        deepest = np.maximum.reduceat(level, first) - (level[first] - step[first])
        depths[outside.line[first]] = np.maximum(deepest, 0)
    return depths


@dataclass
class Outside:
    """The bytes of JSON lines outside their strings (outside_strings), in order.

    at: int64, their positions; line: int64, the line of each (from 0); after: int64, for
    each, the index in ``quotes`` of the quote that closes the string before it on its line
    (-1: none); quotes: int64, the positions of the unescaped quotes; first_quote: int64, for
    each line the index in ``quotes`` of its first quote."""

    at: np.ndarray
    line: np.ndarray
    after: np.ndarray
    quotes: np.ndarray
    first_quote: np.ndarray

    def levels(self, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(level, step), int64 each byte: how deeply the brackets nest just after it, counted
        from the start of the whole data (subtract a line's level before its first byte), and
        +1 for '{' or '[', -1 for '}' or ']', else 0."""
        folded = data[self.at] | 0x20  # '{' and '[' alike, '}' and ']' alike
        step = (folded == OPENING).astype(np.int64) - (folded == CLOSING)
        return np.cumsum(step), step


def outside_strings(data: np.ndarray, ends: np.ndarray) -> Outside:
    """Outside of ``data`` (uint8: JSON lines, line k ended by the newline at ends[k], int64
    ascending): each line is cut at its unescaped quotes, its strings running from a quote of
    even rank to the next (an odd quote: to the end of the line)."""
    lines = ends.size
    starts = np.concatenate([[0], ends[:-1] + 1])
    quotes = unescaped_quotes(data)
    quote_line = np.searchsorted(ends, quotes)
    per_line = np.bincount(quote_line, minlength=lines)
    first_quote = np.cumsum(per_line) - per_line
    closing = np.flatnonzero((np.arange(quotes.size) - first_quote[quote_line]) % 2 == 1)
    # A span outside strings starts at its line's start or after a closing quote, and stops at
    # the line's next quote or newline.
    start = np.concatenate([starts, quotes[closing] + 1])
    line = np.concatenate([np.arange(lines), quote_line[closing]])
    after = np.concatenate([np.full(lines, -1), closing])
    following = np.concatenate([first_quote, closing + 1])  # the index of the quote that would stop it
    stops_at_quote = following < (first_quote + per_line)[line]
    stop = ends[line].copy()
    stop[stops_at_quote] = quotes[following[stops_at_quote]]
    order = np.argsort(start, kind="stable")
    start, stop, line, after = start[order], stop[order], line[order], after[order]
    lengths = stop - start
    shift = np.cumsum(lengths) - lengths
    at = np.repeat(start - shift, lengths) + np.arange(int(lengths.sum()))
    return Outside(at, np.repeat(line, lengths), np.repeat(after, lengths), quotes, first_quote)


def unescaped_quotes(data: np.ndarray) -> np.ndarray:
    """The positions (int64, ascending) of the '"' bytes of ``data`` (uint8) that are not
    escaped, that is not after an odd run of backslashes."""
    quotes = np.flatnonzero(data == 0x22)
    after = np.flatnonzero(data[np.maximum(quotes - 1, 0)] == 0x5C) if quotes.size else quotes
    after = after[quotes[after] > 0]  # (the quotes right after a backslash)
    if not after.size:
        return quotes
    backslashes = np.flatnonzero(data == 0x5C)
    new_run = np.ones(backslashes.size, bool)
    new_run[1:] = np.diff(backslashes) != 1
    run_start = backslashes[np.maximum.accumulate(np.where(new_run, np.arange(backslashes.size), 0))]
    run = quotes[after] - run_start[np.searchsorted(backslashes, quotes[after] - 1)]
    keep = np.ones(quotes.size, bool)
    keep[after[run % 2 == 1]] = False
    return quotes[keep]


def too_deep(line: bytes) -> bool:
    """Whether a JSONL line's brackets nest deeper than MAX_BRACKET_DEPTH, so that its record
    holds a value deeper than MAX_JSON_DEPTH (measured only where it has that many brackets)."""
    return (line.count(b"{") + line.count(b"[") > MAX_BRACKET_DEPTH
            and int(nesting_depths([line])[0]) > MAX_BRACKET_DEPTH)


def shape_of(length: int, head: bytes, tail: bytes) -> int:
    if tail.endswith(b"\r"):
        length, last = length - 1, tail[-2:-1]
    else:
        last = tail[-1:]
    if length <= 0:
        return BLANK
    return OBJECT if length >= 2 and head == b"{" and last == b"}" else OTHER


def object_line_numbers(open_stream: Callable, path: Location, source: SourceFile) -> Optional[np.ndarray]:
    """The numbers (from 1, int64, in the whole file where ``source`` reads a piece of it) of the
    non-blank lines, or None when one of them does not start with '{' and end with '}' (JSON
    white space aside) or nests deeper than a record may (too_deep): Arrow's parser is given
    a file only where this is not None."""
    shapes = line_shapes(open_stream, source.at_file_start)
    other = np.flatnonzero(shapes >= OTHER)
    if other.size:  # white space around a record, or many brackets: look at those lines themselves
        wanted = set((other + 1).tolist())
        for number, line in enumerate(lines_of(path, source), start=1):
            if number in wanted:
                stripped = line.strip(JSON_WHITESPACE)
                if not stripped:
                    shapes[number - 1] = BLANK
                elif stripped[:1] == b"{" and stripped[-1:] == b"}" and not too_deep(stripped):
                    shapes[number - 1] = OBJECT
                else:
                    return None
    return (np.flatnonzero(shapes == OBJECT) + 1 + source.numbers_before).astype(np.int64)


def lacks_field(path: Location, source: SourceFile, numbers: np.ndarray, name: str, columns: set[str]) -> bool:
    """Whether one of the lines ``numbers`` (int64 ascending, from 1, the whole file's) of a
    JSONL file of records (lines a parser read, into a table of ``columns``) lacks the field
    ``name`` (a key, or a dotted path through objects: fields.record_value), where a parser
    gives the same null for a field missing and a field holding null. A line Python's parser
    does not take counts as lacking it: the line-by-line reading says what is wrong."""
    wanted = iter(numbers.tolist())
    next_number = next(wanted, None)
    for number, line in enumerate(lines_of(path, source), start=1 + source.numbers_before):
        if next_number is None:
            break
        if number == next_number:
            try:
                if record_value(json.loads(line), name, columns) is MISSING:
                    return True
            except (ValueError, RecursionError, TypeError, AttributeError):
                return True
            next_number = next(wanted, None)
    return False


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
    # Arrow reads an integer past the largest double (1.8e308: 309 digits or more) as infinity,
    # where it refuses the same number with an exponent; both are refused here. (Python converts
    # integers of at most 4,300 digits: a longer one is past every double anyway.)
    if len(text.lstrip("-")) >= 309:
        try:
            float(int(text))
        except (OverflowError, ValueError):
            raise _Refused(f"the number {text[:40]}... ({len(text.lstrip('-'))} digits) is too large for a "
                           "double") from None
    return int(text)


def check_jsonl_line(line: bytes, number: int, text_field: str, id_field: Optional[str],
                     first_seen: dict, columns: Optional[set[str]] = None) -> tuple[str, dict]:
    """(problem, field types) of one non-blank JSONL line: problem is '' when the line is a
    usable record, else what is wrong with it; field types maps every field path (a tuple,
    '[]' for list items) with a non-null value to its JSON type, for the next lines.
    columns: the file's columns where known (fields.record_value)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"invalid UTF-8 (byte 0x{line[error.start]:02x} at column {error.start + 1})", {}
    if too_deep(line):  # (before a parser recurses into it)
        return f"JSON nested more than {MAX_JSON_DEPTH} levels deep", {}
    # The \r of a \r\n line end is no part of the line: a line cut inside a string is then
    # "unterminated", as with \n alone, not "invalid control character" at its \r.
    text = text.removesuffix("\r")
    try:
        record = json.loads(text, object_pairs_hook=_unique_pairs, parse_float=_finite_float,
                            parse_int=_any_int)
    except json.JSONDecodeError as error:
        # (Some of json's messages end in "at" already: "Unterminated string starting at".)
        problem = f"invalid JSON ({error.msg.removesuffix(' at')} at column {error.colno})"
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
    for name in (text_field, id_field):  # (the file's key of that name is what the record lacks)
        if columns is not None and name in columns and name not in record and record_value(record, name) is not MISSING:
            return both_ways(name), {}
    value = record_value(record, text_field, columns)
    if value is MISSING:  # (null is a record without text; a missing field is a mistake)
        return (f"no field {text_field!r} (its fields: {listed(record_field_names(record))}); give a record "
                "without text as null, or choose the text field with text_field= (token ids: token_field=)"), {}
    if isinstance(value, list):  # token ids (content.check_content says whether they are wanted)
        problem = token_list_problem(value, json_type)
        if problem:
            return f"field {text_field!r} {problem}", {}
    elif value is not None and not isinstance(value, str):
        return f"field {text_field!r} is {json_type(value)}, expected a string or a list of token ids", {}
    if id_field is not None:
        value = record_value(record, id_field, columns)
        if value is None or value is MISSING:
            return f"id field {id_field!r} is missing or null", {}
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            kind = "a number that is not an integer" if isinstance(value, float) else json_type(value)
            return f"id field {id_field!r} is {kind}, expected a string or an integer", {}
        if isinstance(value, int) and not -INT64_MAX - 1 <= value <= INT64_MAX:
            digits = str(value) if len(str(value)) <= 40 else f"{str(value)[:40]}... ({len(str(value))} digits)"
            return (f"id field {id_field!r} is {digits}, outside the range of integer ids "
                    f"({-INT64_MAX - 1} to {INT64_MAX}); integer ids must fit a signed 64-bit integer"), {}
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
