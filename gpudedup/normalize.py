"""Canonical normalisation, vectorised over a batch of documents (numpy, host).

The definition (DESIGN.md, frozen so that hashes stay stable):
- lower-case every code point with the Unicode *simple* lowercase mapping of Unicode 14.0.0
  (one code point to one code point; the table is ``data/simple_lowercase.txt``);
- every run of white space becomes one space (U+0020), and white space at both ends is
  removed. White space is the Unicode ``White_Space`` property: U+0009-000D, U+0020, U+0085,
  U+00A0, U+1680, U+2000-200A, U+2028, U+2029, U+202F, U+205F and U+3000.

A batch is the concatenation of the documents' code points with CSR offsets:
``codepoints`` uint32 (N,) and ``offsets`` int64 (n_docs + 1,), document d being
``codepoints[offsets[d]:offsets[d+1]]``.
"""

from __future__ import annotations

from functools import cache
from typing import NamedTuple
from importlib import resources
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import InputError

SPACE = 0x20
WHITE_SPACE = (
    list(range(0x09, 0x0E))
    + [0x20, 0x85, 0xA0, 0x1680]
    + list(range(0x2000, 0x200B))
    + [0x2028, 0x2029, 0x202F, 0x205F, 0x3000]
)


@cache
def simple_lowercase_pairs() -> np.ndarray:
    """The shipped lowercase table: uint32, shape (m, 2), rows (code point, lowercase)."""
    text = resources.files("gpudedup").joinpath("data/simple_lowercase.txt").read_text("ascii")
    rows = [line.split() for line in text.splitlines() if line and not line.startswith("#")]
    return np.array([[int(cp, 16), int(lower, 16)] for cp, lower in rows], dtype=np.uint32)


CODE_POINTS = 0x110000


@cache
def lowercase_table() -> np.ndarray:
    """uint32, shape (0x110000,): the lowercase of every code point (identity where unmapped).

    4.4 MB, but lookups touch only the few cache lines of the scripts a text uses.
    """
    pairs = simple_lowercase_pairs()
    table = np.arange(CODE_POINTS, dtype=np.uint32)
    table[pairs[:, 0]] = pairs[:, 1]
    return table


@cache
def white_space_table() -> np.ndarray:
    """bool, shape (0x110000,): True at White_Space code points."""
    table = np.zeros(CODE_POINTS, dtype=bool)
    table[WHITE_SPACE] = True
    return table


def utf8_buffers(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The UTF-8 bytes and byte offsets of a string array, without copying when possible.

    texts: pyarrow string or large_string array (validated UTF-8); nulls become empty texts.
    Returns (data uint8 (B,), offsets int64 (n + 1,) with offsets[0] == 0), host.
    """
    if texts.null_count:
        texts = pc.fill_null(texts, "")
    offset_type = np.int64 if pa.types.is_large_string(texts.type) else np.int32
    _, offsets_buffer, data_buffer = texts.buffers()
    offsets = np.frombuffer(offsets_buffer, offset_type)[texts.offset : texts.offset + len(texts) + 1]
    offsets = offsets.astype(np.int64)
    data = np.frombuffer(data_buffer, np.uint8)[offsets[0] : offsets[-1]] if len(texts) else np.zeros(0, np.uint8)
    return data, offsets - offsets[0]


def decode_utf8(data, offsets, xp=np):
    """Code points of valid UTF-8 text, vectorised (numpy or cupy, per ``xp``).

    data: uint8 (B,); offsets: int64 (n + 1,) byte offsets of the documents.
    Returns (codepoints uint32 (N,), offsets int64 (n + 1,) in code points), same side.
    """
    if data.size == 0 or int(data.max()) < 0x80:
        return data.astype(xp.uint32), offsets  # ASCII: one byte, one code point
    # Most text is mostly ASCII, so work on the few multi-byte sequences only: drop their
    # continuation bytes (10xxxxxx), then rebuild the code points at their lead bytes.
    continuation = xp.flatnonzero((data & 0xC0) == 0x80)
    keep = xp.ones(data.shape[0], dtype=bool)
    keep[continuation] = False
    codepoints = data[keep].astype(xp.uint32)
    leads = xp.flatnonzero(data >= 0xC0)
    lead_bytes = data[leads]
    length = 2 + (lead_bytes >= 0xE0).astype(xp.int64) + (lead_bytes >= 0xF0)
    value = (lead_bytes & (0x7F >> length)).astype(xp.uint32)
    for k in (1, 2, 3):
        # Gathering k bytes ahead of every lead is safe: a lead byte is followed by its
        # continuation bytes, and for shorter sequences the value is not used (xp.where).
        ahead = data[xp.minimum(leads + k, data.shape[0] - 1)].astype(xp.uint32) & 0x3F
        value = xp.where(length > k, (value << 6) | ahead, value)
    codepoints[leads - xp.searchsorted(continuation, leads)] = value
    return codepoints, offsets - xp.searchsorted(continuation, offsets)


def strings_to_arrow(texts) -> pa.Array:
    """A sequence of str / None as a large_string array.

    Raises InputError for an item that is not a string, or that holds a lone surrogate
    (possible in a Python str, e.g. from json.loads('"\\ud800"'), but not Unicode text: it has no
    UTF-8 form, so no backend could shingle it).
    """
    texts = list(texts)
    try:
        return pa.array(texts, pa.large_string())
    except (pa.ArrowException, UnicodeEncodeError):
        pass
    for position, text in enumerate(texts):
        if text is not None and not isinstance(text, str):
            raise InputError(f"text {position} is a {type(text).__name__}, expected a string or None")
        if text is not None:
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as error:
                raise InputError(
                    f"text {position} holds a lone surrogate U+{ord(text[error.start]):04X} at "
                    f"character {error.start}, which is not valid Unicode text"
                ) from None
    raise InputError("the texts cannot be converted to Arrow strings")


def text_buffers(texts) -> tuple[np.ndarray, np.ndarray]:
    """UTF-8 bytes and byte offsets (see utf8_buffers) of a pyarrow string array or chunked
    array, or of a sequence of str / None."""
    if not isinstance(texts, (pa.Array, pa.ChunkedArray)):
        texts = strings_to_arrow(texts)
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks() if texts.num_chunks else pa.array([], pa.large_string())
    return utf8_buffers(texts)


def encode_codepoints(texts) -> tuple[np.ndarray, np.ndarray]:
    """Code points of a batch of texts (pyarrow string array, or a sequence of str / None).

    Returns (codepoints uint32 (N,), offsets int64 (n_docs + 1,)), host arrays.
    """
    return decode_utf8(*text_buffers(texts))


class NormalizationTables(NamedTuple):
    """The lookup tables of normalisation, on one side (host numpy, or one device's cupy).

    lowercase: uint32 (0x110000,), see lowercase_table; white: bool (0x110000,), see
    white_space_table. The GPU backend keeps one device copy per device (5.6 MB).
    """

    lowercase: np.ndarray
    white: np.ndarray


@cache
def host_tables() -> NormalizationTables:
    return NormalizationTables(lowercase_table(), white_space_table())


def normalize_codepoints(codepoints, offsets, xp=np, tables: NormalizationTables | None = None):
    """Normalise a batch: lower-case, collapse white-space runs to one space, strip the ends.

    codepoints: uint32 (N,); offsets: int64 (n_docs + 1,); numpy or cupy per ``xp``, with
    ``tables`` on the same side (default: the host tables). Returns the normalised batch in
    the same layout: (uint32 (M,), int64 (n_docs + 1,)), M <= N, same side.
    """
    tables = tables or host_tables()
    if codepoints.size and int(codepoints.max()) < 0x80:
        # ASCII batches (the common case): a 128-entry table, and white space is 9-13 or 32.
        lowered = xp.take(tables.lowercase[:0x80], codepoints)
        white = (codepoints == SPACE) | (codepoints - np.uint32(9) < 5)  # wraps below 9
    else:
        lowered = xp.take(tables.lowercase, codepoints)
        white = xp.take(tables.white, codepoints)

    # A white run [start, stop) becomes one space when it follows text of its document and
    # more text of the same document follows it; otherwise (leading, trailing, or straddling
    # two documents) it disappears. Runs are few (about one per word), so the tests below work
    # on run boundaries, not on every position.
    previous_white = xp.empty(codepoints.shape[0], dtype=bool)
    previous_white[:1] = False
    previous_white[1:] = white[:-1]
    run_starts = xp.flatnonzero(white & ~previous_white)
    run_stops = xp.flatnonzero(~white & previous_white)
    if run_stops.shape[0] < run_starts.shape[0]:
        run_stops = xp.concatenate([run_stops, xp.full(1, codepoints.shape[0], dtype=run_stops.dtype)])
    doc_of_run = xp.searchsorted(offsets, run_starts, side="right") - 1
    inner = (run_starts != offsets[doc_of_run]) & (run_stops < offsets[doc_of_run + 1])
    spaces = run_starts[inner]

    lowered[spaces] = SPACE
    keep = ~white
    keep[spaces] = True
    dropped = xp.flatnonzero(~keep)
    if dropped.size == 0:
        return lowered, offsets
    # A document's new start: its old start less the positions dropped before it.
    return lowered[keep], offsets - xp.searchsorted(dropped, offsets)


def normalize_utf8(data, offsets, spec, xp=np, tables: NormalizationTables | None = None):
    """The normalised code points of a batch of UTF-8 texts, as ``spec`` (a shingling.
    ShingleSpec) asks: decoding, then the canonical normalisation (normalize_codepoints).

    data: uint8 (B,) valid UTF-8; offsets: int64 (n_docs + 1,) byte offsets from 0; numpy or
    cupy per ``xp``. Returns (codepoints uint32 (M,), offsets int64 (n_docs + 1,)), same side.
    """
    if spec.normalizes_text:
        raise NotImplementedError("unicode forms and punctuation stripping are not wired in yet")
    codepoints, offsets = decode_utf8(data, offsets, xp)
    return normalize_codepoints(codepoints, offsets, xp, tables)


def normalize_text(text: str) -> str:
    """The normalised form of one text (convenience; the batch functions are the fast path)."""
    codepoints, offsets = encode_codepoints([text])
    normalised, _ = normalize_codepoints(codepoints, offsets)
    return normalised.tobytes().decode("utf-32-le")
