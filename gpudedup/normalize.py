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
from importlib import resources
from typing import Sequence

import numpy as np

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


@cache
def lowercase_table() -> np.ndarray:
    """Dense lookup table: uint32, shape (max mapped code point + 1,); identity where unmapped."""
    pairs = simple_lowercase_pairs()
    table = np.arange(int(pairs[:, 0].max()) + 1, dtype=np.uint32)
    table[pairs[:, 0]] = pairs[:, 1]
    return table


@cache
def white_space_table() -> np.ndarray:
    """bool, shape (max white-space code point + 1,): True at White_Space code points."""
    table = np.zeros(max(WHITE_SPACE) + 1, dtype=bool)
    table[WHITE_SPACE] = True
    return table


def lookup(table: np.ndarray, codepoints: np.ndarray, default) -> np.ndarray:
    """table[cp] for every code point, ``default(cp)`` beyond the table's end.

    codepoints: uint32 (N,). ``default`` is a function of the out-of-range code points.
    """
    inside = codepoints < table.shape[0]
    if inside.all():
        return table[codepoints]
    out = default(codepoints).astype(table.dtype)
    out[inside] = table[codepoints[inside]]
    return out


def encode_codepoints(texts: Sequence[str | None]) -> tuple[np.ndarray, np.ndarray]:
    """Code points of a batch of texts; ``None`` counts as the empty text.

    Returns (codepoints uint32 (N,), offsets int64 (n_docs + 1,)), host arrays.
    """
    strings = ["" if text is None else text for text in texts]
    lengths = np.fromiter(map(len, strings), dtype=np.int64, count=len(strings))
    offsets = np.zeros(len(strings) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    # One C-level join and encode for the whole batch: no Python work per code point.
    # "surrogatepass" keeps lone surrogates (possible in Python strings) as their own units.
    data = "".join(strings).encode("utf-32-le", "surrogatepass")
    return np.frombuffer(data, dtype=np.uint32), offsets


def normalize_codepoints(
    codepoints: np.ndarray, offsets: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Normalise a batch: lower-case, collapse white-space runs to one space, strip the ends.

    codepoints: uint32 (N,); offsets: int64 (n_docs + 1,). Returns the normalised batch in the
    same layout: (uint32 (M,), int64 (n_docs + 1,)), M <= N.
    """
    if codepoints.size and codepoints.max() < 0x80:
        # ASCII batches (the common case) look up in tables that stay in the L1 cache.
        lowered = lowercase_table()[:0x80][codepoints]
        white = white_space_table()[:0x80][codepoints]
    else:
        lowered = lookup(lowercase_table(), codepoints, default=lambda cp: cp)
        white = lookup(white_space_table(), codepoints, default=lambda cp: np.zeros(cp.shape, bool))

    # A white run [start, stop) becomes one space when it follows text of its document and
    # more text of the same document follows it; otherwise (leading, trailing, or straddling
    # two documents) it disappears. Runs are few (about one per word), so the tests below work
    # on run boundaries, not on every position.
    previous_white = np.empty(codepoints.shape[0], dtype=bool)
    previous_white[:1] = False
    previous_white[1:] = white[:-1]
    run_starts = np.flatnonzero(white & ~previous_white)
    run_stops = np.flatnonzero(~white & previous_white)
    if run_stops.shape[0] < run_starts.shape[0]:
        run_stops = np.append(run_stops, codepoints.shape[0])
    doc_of_run = np.searchsorted(offsets, run_starts, side="right") - 1
    inner = (run_starts != offsets[doc_of_run]) & (run_stops < offsets[doc_of_run + 1])
    spaces = run_starts[inner]

    lowered[spaces] = SPACE
    keep = ~white
    keep[spaces] = True
    if keep.all():
        return lowered, offsets
    kept_before = np.zeros(codepoints.shape[0] + 1, dtype=np.int64)
    np.cumsum(keep, out=kept_before[1:])
    return lowered[keep], kept_before[offsets]


def normalize_text(text: str) -> str:
    """The normalised form of one text (convenience; the batch functions are the fast path)."""
    codepoints, offsets = encode_codepoints([text])
    normalised, _ = normalize_codepoints(codepoints, offsets)
    return normalised.tobytes().decode("utf-32-le", "surrogatepass")
