"""Canonical normalisation, vectorised over a batch of documents (numpy, host).

The definition (DESIGN.md, frozen so that hashes stay stable):
- lower-case every code point with the Unicode *simple* lowercase mapping of Unicode 14.0.0
  (one code point to one code point; the table is ``data/simple_lowercase.txt``);
- every run of white space becomes one space (U+0020), and white space at both ends is
  removed. White space is the Unicode ``White_Space`` property: U+0009-000D, U+0020, U+0085,
  U+00A0, U+1680, U+2000-200A, U+2028, U+2029, U+202F, U+205F and U+3000.

Options of the shingle spec (off by default; docs/hash-spec.md, "Text normalisation"):
- ``unicode``: a Unicode normalisation form, NFC or NFKC, applied first, by Arrow's
  ``utf8_normalize`` (utf8proc), on the host;
- ``strip_punctuation`` / ``strip_symbols``: after lower-casing and before the white-space
  step, remove the code points of the general categories P* / S* of Unicode 14.0.0 (the table
  is ``data/general_category_ps.txt``).

A batch is the concatenation of the documents' code points with CSR offsets:
``codepoints`` uint32 (N,) and ``offsets`` int64 (n_docs + 1,), document d being
``codepoints[offsets[d]:offsets[d+1]]``.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import NamedTuple
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError, ParameterError

# The package's tables, by path as the kernels and the docs are found: importlib.resources
# would cost every run about 16 ms of imports (python -X importtime).
DATA = Path(__file__).resolve().parents[1] / "data"

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
    text = (DATA / "simple_lowercase.txt").read_text("ascii")
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


# Bits of category_flags_table: which option removes a code point.
PUNCTUATION = 1  # general categories Pc Pd Ps Pe Pi Pf Po
SYMBOL = 2  # general categories Sm Sc Sk So


@cache
def punctuation_symbol_ranges() -> list[tuple[int, int, str]]:
    """The shipped category table: (first, last, category) for inclusive code point ranges whose
    general category (Unicode 14.0.0) is one of P* or S*, ascending."""
    text = (DATA / "general_category_ps.txt").read_text("ascii")
    rows = [line.split() for line in text.splitlines() if line and not line.startswith("#")]
    return [(int(first, 16), int(last, 16), category) for first, last, category in rows]


@cache
def category_flags_table() -> np.ndarray:
    """uint8, shape (0x110000,): PUNCTUATION at P* code points, SYMBOL at S* ones, else 0."""
    table = np.zeros(CODE_POINTS, dtype=np.uint8)
    for first, last, category in punctuation_symbol_ranges():
        table[first:last + 1] = {"P": PUNCTUATION, "S": SYMBOL}[category[0]]
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


def strings_to_arrow(texts, first: int = 0) -> pa.Array:
    """A sequence of str / None (or bytes that are UTF-8) as a large_string array.

    Raises InputError for an item that is not a string, bytes that are not UTF-8, or a string
    that holds a lone surrogate (possible in a Python str, e.g. from json.loads('"\\ud800"'), but
    not Unicode text: it has no UTF-8 form, so no backend could shingle it); first: the position
    of texts[0] in the input, which the message counts from (a batch of a longer input).
    """
    texts = list(texts)
    try:
        return pa.array(texts, pa.large_string())
    except (pa.ArrowException, UnicodeEncodeError):
        pass
    for position, text in enumerate(texts):
        if isinstance(text, bytes):  # (Arrow takes bytes that are UTF-8 as strings)
            try:
                text.decode("utf-8")
            except UnicodeDecodeError as error:
                raise InputError(f"text {first + position} is bytes that are not UTF-8 (byte {error.start}); "
                                 "expected a string or None") from None
            continue
        if text is not None and not isinstance(text, str):
            # (a path among texts: most likely a list of files with one given as a str)
            hint = "; files are given as pathlib.Path objects alone" if isinstance(text, os.PathLike) else ""
            raise InputError(f"text {first + position} is a {type(text).__name__}, expected a string or None{hint}")
        if text is not None:
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as error:
                raise InputError(
                    f"text {first + position} holds a lone surrogate U+{ord(text[error.start]):04X} at "
                    f"character {error.start}, which is not valid Unicode text"
                ) from None
    raise InputError("the texts cannot be converted to Arrow strings")


def text_buffers(texts) -> tuple[np.ndarray, np.ndarray]:
    """UTF-8 bytes and byte offsets (see utf8_buffers) of a pyarrow string array or chunked
    array, or of a sequence of str / None."""
    if isinstance(texts, (str, bytes)):  # (a str is a sequence: of one-character documents)
        raise ParameterError("a batch of documents is a list of texts; got one string: pass [text]")
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
    white_space_table; category_flags: uint8 (0x110000,), see category_flags_table. The GPU
    backend keeps one device copy per device (6.7 MB).
    """

    lowercase: np.ndarray
    white: np.ndarray
    category_flags: np.ndarray


@cache
def host_tables() -> NormalizationTables:
    return NormalizationTables(lowercase_table(), white_space_table(), category_flags_table())


def tables_on(xp) -> NormalizationTables:
    """The host tables copied to ``xp``'s side (numpy: the host tables themselves, no copy).
    Callers keep the result: one copy per device, never one per batch."""
    return NormalizationTables(*(xp.asarray(table) for table in host_tables()))


def strip_flags(spec) -> int:
    """The category_flags bits whose code points ``spec`` (a shingling.ShingleSpec) removes."""
    return (PUNCTUATION if spec.strip_punctuation else 0) | (SYMBOL if spec.strip_symbols else 0)


def normalize_codepoints(codepoints, offsets, xp=np, tables: NormalizationTables | None = None,
                         strip: int = 0):
    """Normalise a batch: lower-case, remove the code points of the categories ``strip`` names
    (PUNCTUATION | SYMBOL bits; 0, the default, removes none), collapse white-space runs to one
    space, strip the ends.

    codepoints: uint32 (N,); offsets: int64 (n_docs + 1,); numpy or cupy per ``xp``, with
    ``tables`` on the same side (default: the host tables). Returns the normalised batch in
    the same layout: (uint32 (M,), int64 (n_docs + 1,)), M <= N, same side.
    """
    tables = tables or host_tables()
    ascii_only = bool(codepoints.size) and int(codepoints.max()) < 0x80
    # ASCII batches (the common case) look up 128-entry slices of the tables, which stay in cache.
    span = 0x80 if ascii_only else CODE_POINTS
    lowered = xp.take(tables.lowercase[:span], codepoints)
    if strip:
        # After lower-casing (which maps no code point into or out of P* or S*, but the order is
        # the definition's), before the white-space step: removing "," from "a , b" leaves a
        # white run of two, which the step below makes one space.
        lowered, offsets = remove_flagged(lowered, offsets, xp.take(tables.category_flags[:span], lowered),
                                          strip, xp)
    if ascii_only:
        white = (lowered == SPACE) | (lowered - np.uint32(9) < 5)  # 9-13 or 32; wraps below 9
    else:
        # Lower-casing maps no code point into or out of White_Space, so looking up the lowered
        # code points is looking up the original ones.
        white = xp.take(tables.white, lowered)

    # A white run [start, stop) becomes one space when it follows text of its document and
    # more text of the same document follows it; otherwise (leading, trailing, or straddling
    # two documents) it disappears. Runs are few (about one per word), so the tests below work
    # on run boundaries, not on every position.
    previous_white = xp.empty(lowered.shape[0], dtype=bool)
    previous_white[:1] = False
    previous_white[1:] = white[:-1]
    run_starts = xp.flatnonzero(white & ~previous_white)
    run_stops = xp.flatnonzero(~white & previous_white)
    if run_stops.shape[0] < run_starts.shape[0]:
        run_stops = xp.concatenate([run_stops, xp.full(1, lowered.shape[0], dtype=run_stops.dtype)])
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


def remove_flagged(codepoints, offsets, flags, strip: int, xp=np):
    """Drop the code points whose ``flags`` (uint8 (N,), their category_flags) share a bit with
    ``strip``. codepoints uint32 (N,), offsets int64 (n_docs + 1,), same side; returns the
    shorter batch in the same layout."""
    removed = (flags & np.uint8(strip)) != 0
    dropped = xp.flatnonzero(removed)
    if dropped.size == 0:
        return codepoints, offsets
    return codepoints[~removed], offsets - xp.searchsorted(dropped, offsets)


# Arrow's names of the forms of ShingleSpec.unicode.
ARROW_FORMS = {"nfc": "NFC", "nfkc": "NFKC"}


# Characters each Unicode version added, as Arrow's utf8proc shows that it knows them (the
# probes of docs/hash-spec.md): (version, function, input, what a utf8proc of that version gives).
UNICODE_PROBES = (
    ("15.0", "utf8_normalize", "\U0001E030", "\u0430"),  # NFKC of MODIFIER LETTER CYRILLIC SMALL A
    ("15.1", "utf8_is_alpha", "\U0002EBF0", True),  # a CJK ideograph of Extension I
    ("16.0", "utf8_lower", "\U00010D50", "\U00010D70"),  # GARAY CAPITAL LETTER A
    ("17.0", "utf8_is_alpha", "\U00010940", True),  # a Sidetic letter
)


@cache
def unicode_form_version() -> str:
    """The Unicode version of the normalisation forms (Arrow's utf8proc) in this process, as
    far as UNICODE_PROBES tell: "17.0", "16.0", ..., or "14.0 or older". NFC/NFKC hashes of
    text with characters assigned after an index's or work directory's version may differ, so
    both record it and refuse another."""
    version = "14.0 or older"
    for name, function, text, expected in UNICODE_PROBES:
        arguments = ("NFKC",) if function == "utf8_normalize" else ()
        if getattr(pc, function)(pa.array([text]), *arguments)[0].as_py() != expected:
            break
        version = name
    return version


def unicode_form_utf8(data, offsets, form: str, xp=np):
    """The texts of a batch in a Unicode normalisation form, by Arrow's ``utf8_normalize``
    (utf8proc; docs/hash-spec.md says which Unicode version).

    data: uint8 (B,) valid UTF-8; offsets: int64 (n_docs + 1,) byte offsets from 0; numpy or
    cupy per ``xp``. form: "nfc" or "nfkc". Returns (data uint8 (B',), offsets int64
    (n_docs + 1,)) of the normalised texts, same side.
    """
    if data.size == 0 or int(data.max()) < 0x80:
        return data, offsets  # ASCII text is in every normalisation form already
    # utf8proc runs on the host: a device batch is copied to the host and its normalised form
    # back, one copy each way (cupy.asnumpy; numpy has none and needs none).
    to_host = getattr(xp, "asnumpy", np.asarray)
    host_data, host_offsets = to_host(data), to_host(offsets).astype(np.int64, copy=False)
    texts = pa.LargeStringArray.from_buffers(host_offsets.shape[0] - 1, pa.py_buffer(host_offsets),
                                             pa.py_buffer(host_data))
    normalized, normalized_offsets = utf8_buffers(pc.utf8_normalize(texts, ARROW_FORMS[form]))
    return xp.asarray(normalized), xp.asarray(normalized_offsets)


def normalize_utf8(data, offsets, spec, xp=np, tables: NormalizationTables | None = None):
    """The normalised code points of a batch of UTF-8 texts, as ``spec`` (a shingling.
    ShingleSpec) asks: the Unicode form if any (unicode_form_utf8), decoding, then
    normalize_codepoints (lower-case, the stripping asked for, white space).

    data: uint8 (B,) valid UTF-8; offsets: int64 (n_docs + 1,) byte offsets from 0; numpy or
    cupy per ``xp``, ``tables`` on the same side (default: the host tables). Returns
    (codepoints uint32 (M,), offsets int64 (n_docs + 1,)), same side.
    """
    if spec.unicode is not None:
        data, offsets = unicode_form_utf8(data, offsets, spec.unicode, xp)
    codepoints, offsets = decode_utf8(data, offsets, xp)
    return normalize_codepoints(codepoints, offsets, xp, tables, strip_flags(spec))


def normalize_text(text: str, spec=None) -> str:
    """The normalised form of one text, with the options of ``spec`` (a shingling.ShingleSpec;
    None: the canonical normalisation). A convenience; the batch functions are the fast path."""
    data, offsets = text_buffers([text])
    if spec is None:
        normalised, _ = normalize_codepoints(*decode_utf8(data, offsets))
    else:
        normalised, _ = normalize_utf8(data, offsets, spec)
    return normalised.tobytes().decode("utf-32-le")
