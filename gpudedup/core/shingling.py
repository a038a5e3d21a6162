"""Shingles and their 64-bit hashes, vectorised over a batch (numpy reference, host).

Definitions (DESIGN.md): on the normalised text, ``word`` n-grams are n consecutive tokens
(split on single spaces) joined by one space; ``char`` n-grams are n consecutive code points. A
non-empty normalised text shorter than n units has exactly one shingle, the whole text; an
empty one has none.

Every shingle is a substring of its document's normalised text, so its hash is
``poly_hash64`` (see hashing.py) of that substring's code points. Hashing a substring
``[s, e)`` costs O(1) after one prefix sum over the batch::

    G[k] = sum_{j<k} c_j * Q**j                      with Q = POLY_BASE**-1 (mod 2**64)
    sum_{j=s}^{e-1} c_j * P**(e-1-j) = (G[e] - G[s]) * P**(e-1)
    poly_hash64(c_s..c_{e-1}) = fmix64(POLY_OFFSET * P**(e-s) + (G[e] - G[s]) * P**(e-1))

all modulo 2**64, which is exactly Horner's rule from the definition, reordered.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, NamedTuple, Optional

import numpy as np
import pyarrow as pa

from ..errors import InputError
from .content import bad_token_rows, invalid_utf8_rows, plain_strings, token_lists_to_arrow, unit_buffers
from .hashing import POLY_BASE, POLY_BASE_INV, POLY_OFFSET, fmix64, powers_mod64
from .normalize import SPACE, normalize_utf8, text_buffers
from .ragged import offsets_from_counts, ragged_arange

if TYPE_CHECKING:
    import scipy.sparse

ShingleKind = Literal["word", "char", "token"]
SHINGLE_KINDS = ("word", "char", "token")
UnicodeForm = Literal["nfc", "nfkc"]
UNICODE_FORMS = ("nfc", "nfkc")


@dataclass(frozen=True)
class ShingleSpec:
    """How documents are cut into shingles (docs/hash-spec.md is the definition).

    kind: ``word`` or ``char`` n-grams of the normalised text, or ``token`` n-grams of a
        document's token ids (no text, no normalisation).
    n: units (words, code points, token ids) per shingle.
    unicode: a Unicode normalisation form applied to the text before lower-casing ("nfc",
        "nfkc"), or None (the default, which every earlier release used).
    strip_punctuation, strip_symbols: remove the code points of the general categories P* /
        S* after lower-casing, before white space is collapsed.
    """

    kind: ShingleKind = "word"
    n: int = 5
    unicode: Optional[UnicodeForm] = None
    strip_punctuation: bool = False
    strip_symbols: bool = False

    def __post_init__(self):
        if self.kind not in SHINGLE_KINDS:
            raise ValueError(f"shingle kind must be 'word', 'char' or 'token', got {self.kind!r}")
        if not isinstance(self.n, (int, np.integer)) or self.n < 1:
            raise ValueError(f"ngram must be an integer >= 1, got {self.n!r}")
        if self.unicode is not None and self.unicode not in UNICODE_FORMS:
            raise ValueError(f"unicode must be 'nfc', 'nfkc' or None, got {self.unicode!r}")
        if self.kind == "token" and self.normalizes_text:
            raise ValueError("unicode, strip_punctuation and strip_symbols apply to text; "
                             "token shingles are n-grams of the ids as given")

    @property
    def normalizes_text(self) -> bool:
        """Whether anything beyond the canonical lower-casing and white space is asked for."""
        return self.unicode is not None or self.strip_punctuation or self.strip_symbols


class ShingleBatch(NamedTuple):
    """Shingle hashes of a batch of documents, as a ragged array (host or device).

    offsets: int64, shape (n_docs + 1,).
    hashes: uint64, shape (offsets[-1],); document d's shingle hashes are
        ``hashes[offsets[d]:offsets[d+1]]``, in text order with repeats, unless the batch was
        made by ``shingle_sets`` (then sorted ascending without repeats).
    """

    offsets: np.ndarray
    hashes: np.ndarray

    @property
    def n_docs(self) -> int:
        return int(self.offsets.shape[0]) - 1

    def counts(self) -> np.ndarray:
        """int64 (n_docs,): shingles per document."""
        return self.offsets[1:] - self.offsets[:-1]


def shingle_spans(codepoints, offsets, spec: ShingleSpec, xp=np):
    """Where the shingles of a normalised batch are (numpy or cupy, per ``xp``).

    codepoints: uint32 (M,) normalised; offsets: int64 (n_docs + 1,).
    Returns (starts int64 (S,), ends int64 (S,), shingle_offsets int64 (n_docs + 1,)), same
    side: shingle i is ``codepoints[starts[i]:ends[i]]``, grouped by document in text order.
    """
    if spec.kind != "word":  # char: code points; token: token ids
        return ngram_unit_ranges(offsets, spec.n, xp)
    token_starts, token_ends, token_offsets = word_spans(codepoints, offsets, xp)
    first, stop, shingle_offsets = ngram_unit_ranges(token_offsets, spec.n, xp)
    return token_starts[first], token_ends[stop - 1], shingle_offsets


def ngram_unit_ranges(unit_offsets, n: int, xp=np):
    """The n-grams of ragged rows of units (code points or tokens), as unit index ranges.

    unit_offsets: int64 (n_docs + 1,). A row of L >= n units has L - n + 1 n-grams
    ``[i, i + n)``; a row of 0 < L < n units has one, the whole row; an empty row none.
    Returns (first int64 (S,), stop int64 (S,), ngram_offsets int64 (n_docs + 1,)).
    """
    lengths = xp.diff(unit_offsets)
    counts = ngram_counts(lengths, n, xp)
    # Every unit starts an n-gram except the last min(n, L) - 1 of each row: clear those few
    # instead of building per-unit row indices.
    starts_ngram = xp.ones(int(unit_offsets[-1]), dtype=bool)
    row, within = ragged_arange(lengths - counts, xp)
    starts_ngram[unit_offsets[:-1][row] + counts[row] + within] = False
    first = xp.flatnonzero(starts_ngram)
    stop = first + n
    short = xp.flatnonzero((lengths > 0) & (lengths < n))
    ngram_offsets = offsets_from_counts(counts, xp)
    stop[ngram_offsets[short]] = unit_offsets[short + 1]
    return first, stop, ngram_offsets


def ngram_counts(lengths, n: int, xp=np):
    """The n-grams of rows of ``lengths`` units (int64 (n_docs,)), int64 (n_docs,): L - n + 1
    for L >= n, one (the whole row) for 0 < L < n, none for an empty row."""
    return xp.where(lengths > 0, xp.maximum(lengths - n + 1, 1), 0)


def word_spans(codepoints, offsets, xp=np):
    """Token spans of a normalised batch (tokens are separated by exactly one space).

    Returns (starts int64 (T,), ends int64 (T,), token_offsets int64 (n_docs + 1,)).
    """
    nonempty = xp.diff(offsets) > 0
    spaces = xp.flatnonzero(codepoints == SPACE)
    # A token starts at a non-empty document's start or after a space, and ends at a space or
    # at its document's end; normalisation guarantees no leading, trailing or double spaces,
    # so these positions are distinct, and marking them finds them in order without a sort.
    starts = _marked(codepoints.shape[0], offsets[:-1][nonempty], spaces + 1, xp)
    ends = _marked(codepoints.shape[0], spaces, offsets[1:][nonempty], xp)
    token_offsets = xp.searchsorted(starts, offsets).astype(xp.int64)
    return starts, ends, token_offsets


def _marked(size: int, some, others, xp=np):
    """int64: the positions of ``some`` and ``others`` (int64, in 0 .. size) in ascending order."""
    marks = xp.zeros(size + 1, dtype=bool)
    marks[some] = True
    marks[others] = True
    return xp.flatnonzero(marks)


_POWER_TABLES: list[np.ndarray] = []
_POWER_TABLES_LOCK = threading.Lock()


def base_powers(size: int) -> tuple[np.ndarray, np.ndarray]:
    """(POLY_BASE_INV**j, POLY_BASE**j) for j < size, uint64 (size,) views of cached tables.

    Every batch needs the same tables, so they are computed once and grown when a larger
    batch comes (they cost 16 bytes per code point of the largest batch so far).
    """
    with _POWER_TABLES_LOCK:  # batches run on several threads; tables only ever grow
        if not _POWER_TABLES or _POWER_TABLES[0].shape[0] < size:
            _POWER_TABLES[:] = [powers_mod64(POLY_BASE_INV, size), powers_mod64(POLY_BASE, size)]
        inverse_powers, powers = _POWER_TABLES
    return inverse_powers[:size], powers[:size]


def span_hashes(codepoints, starts, ends, xp=np, power_tables=None):
    """poly_hash64 of the code points of every span ``[starts[i], ends[i])``.

    codepoints: uint32 (M,); starts, ends: int64 (S,), 0 <= start < end <= M. Returns uint64
    (S,). numpy or cupy per ``xp``; ``power_tables`` (POLY_BASE_INV**j, POLY_BASE**j), uint64
    (>= M + 1,) on the same side, default the host's base_powers.
    """
    size = codepoints.shape[0] + 1
    inverse_powers, powers = power_tables or base_powers(size)
    inverse_powers, powers = inverse_powers[:size], powers[:size]
    prefix = xp.zeros(size, dtype=xp.uint64)
    xp.cumsum(codepoints * inverse_powers[:-1], out=prefix[1:])  # wraps modulo 2**64
    hashes = prefix[ends] - prefix[starts]
    hashes *= powers[ends - 1]
    hashes += np.uint64(POLY_OFFSET) * powers[ends - starts]
    return fmix64(hashes)


def shingle_hashes(texts, spec: ShingleSpec) -> ShingleBatch:
    """Hash every shingle of every text (numpy reference implementation, host).

    texts: a batch of documents, a pyarrow string array or a sequence of str (``None`` / null
    is the empty document); for token shingles, token ids: a pyarrow list array or a sequence
    of lists of integers. Returns a ShingleBatch in text order with repeats (MinHash does not
    need sets; exact verification builds them).
    """
    if spec.kind == "token":
        ids = texts if isinstance(texts, pa.Array) else token_lists_to_arrow(list(texts))
        rows, reasons = bad_token_rows(ids)
        if len(rows):  # (an Arrow array's ids, which token_lists_to_arrow has not seen)
            raise InputError(f"item {int(rows[0])} {reasons[0]}")
        return utf8_shingle_hashes(*unit_buffers(ids), spec)
    if isinstance(texts, (pa.Array, pa.ChunkedArray)):
        texts = plain_strings(texts)
        if (bad := invalid_utf8_rows(texts)).shape[0]:
            raise InputError(f"item {int(bad[0])} is not valid UTF-8; expected text")
    return utf8_shingle_hashes(*text_buffers(texts), spec)


def utf8_shingle_hashes(data, offsets, spec: ShingleSpec, xp=np, tables=None, power_tables=None) -> ShingleBatch:
    """shingle_hashes of a batch given as its units' buffers (see shingle_units): for text,
    valid UTF-8 bytes uint8 (B,); for token shingles, token ids uint32 (B,); offsets int64
    (n_docs + 1,) starting at 0. This is the numpy backend's entry point; with ``xp=cupy`` and
    device tables (normalize.NormalizationTables, base_powers copied to the device) it is the
    same computation in plain CuPy array operations, the reference the GPU benchmark compares
    the kernels with."""
    units, offsets = shingle_units(data, offsets, spec, xp, tables)
    starts, ends, shingle_offsets = shingle_spans(units, offsets, spec, xp)
    return ShingleBatch(shingle_offsets, span_hashes(units, starts, ends, xp, power_tables))


def shingle_units(data, offsets, spec: ShingleSpec, xp=np, tables=None):
    """The units a batch's shingles are cut from, on ``xp``'s side: (units uint32 (M,),
    offsets int64 (n_docs + 1,)).

    Text (word, char): data is UTF-8 uint8 (B,) with byte offsets; the units are the code points
    of the normalised text (normalize.normalize_utf8). Token shingles: data is the documents'
    token ids, any unsigned integer type up to 32 bits, already checked by the reader; the
    units are the ids themselves, so a token n-gram hashes exactly like a char n-gram whose
    code points are the ids (docs/hash-spec.md)."""
    if spec.kind == "token":
        return xp.asarray(data).astype(xp.uint32, copy=False), xp.asarray(offsets, dtype=xp.int64)
    return normalize_utf8(data, offsets, spec, xp, tables)


# Shingle hashes as CSR column indices: flipping the top bit and viewing as int64 maps uint64
# order to int64 order, so scipy's sparse matrices can hold sets of 64-bit hashes as rows.
TOP_BIT = np.uint64(1 << 63)


def hashes_to_columns(hashes: np.ndarray) -> np.ndarray:
    """uint64 hashes -> int64 column indices, order-preserving (a new array)."""
    return (hashes ^ TOP_BIT).view(np.int64)


def columns_to_hashes(columns: np.ndarray) -> np.ndarray:
    """The inverse of hashes_to_columns (a new array)."""
    return columns.view(np.uint64) ^ TOP_BIT


def set_rows(batch: ShingleBatch) -> scipy.sparse.csr_matrix:
    """Each document's set of shingle hashes as a row of a binary sparse matrix (host).

    Columns are hashes_to_columns(hash); rows come out sorted and without repeats (canonical
    CSR). scipy sorts and merges each row in C++, several times faster than any vectorised
    numpy route to a per-row sort (which needs a global argsort).
    """
    import scipy.sparse  # (heavy: loaded by the runs that make sets, not by every start-up)

    matrix = scipy.sparse.csr_matrix(
        (np.ones(batch.hashes.shape[0], np.int8), hashes_to_columns(batch.hashes), batch.offsets.copy()),
        shape=(batch.n_docs, np.iinfo(np.int64).max),
    )
    matrix.sum_duplicates()  # sorts every row's indices and merges repeats, in place
    matrix.data[:] = 1  # membership, not counts (and int8 counts could wrap)
    return matrix


def unique_per_row(batch: ShingleBatch) -> ShingleBatch:
    """The set of each document: hashes sorted ascending without repeats (host)."""
    rows = set_rows(batch)
    return ShingleBatch(rows.indptr.astype(np.int64), columns_to_hashes(rows.indices))


def shingle_sets(texts, spec: ShingleSpec) -> ShingleBatch:
    """Per-document shingle-hash sets (sorted, no repeats): the input of exact Jaccard."""
    return unique_per_row(shingle_hashes(texts, spec))
