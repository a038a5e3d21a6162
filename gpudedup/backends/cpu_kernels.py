"""The CPU backend's shingling and MinHash loops in numba: the build of them that runs where the C
extension (kernels/cpu_kernels.c) was not compiled at install.

Each loop has the C build's arguments and results, bit for bit; compiled_steps.CompiledSteps
runs the steps over either build (the order of the loops, the arrays they are given) and gives
what the numpy reference gives. The loops, per batch (host arrays throughout):

- ``normalize_batch``: decode UTF-8, lower-case, strip, collapse white space, in one loop over
  the bytes, with normalize's tables; it also counts each document's words;
- ``char_hashes`` / ``word_hashes``: each document's shingle hashes, poly_hash64 computed in
  a loop over the document rather than from a batch-wide prefix sum;
- ``sort_unique_rows``: each document's hashes sorted and de-duplicated in place;
- ``minhash_rows``: the MinHash signatures in one pass per document.

Imported only when a run takes numba's route (numpy_backend.py), so that importing gpudedup
never imports numba. Every kernel is made by ``compiled.kernel``, which caches compiled code
on disk for the next process and releases the GIL, so that the backend's threads
(NumpyBackend.parallel_batches) run batches side by side.
"""

from __future__ import annotations

import numpy as np

from ..compiled import kernel
from ..core.hashing import FMIX_C1, FMIX_C2, POLY_BASE, POLY_OFFSET
from ..core.normalize import SPACE

# Every integer in the hash arithmetic, and every array index, is a np.uint64. Numba types a
# plain Python int as int64, and int64 mixed with uint64 gives float64 (numpy's rule), hence the
# named constants. Indices in the loops over units and hashes are unsigned because numba checks
# every signed index for a negative value to wrap around, which took up to 40% of these loops'
# time; no index here is negative.
BASE = np.uint64(POLY_BASE)
OFFSET = np.uint64(POLY_OFFSET)
SPACE_UNIT = np.uint64(SPACE)
C1 = np.uint64(FMIX_C1)
C2 = np.uint64(FMIX_C2)
SHIFT = np.uint64(33)
ZERO, ONE, TWO, THREE, FOUR = (np.uint64(k) for k in range(5))

# --- hashing ------------------------------------------------------------------------------------


@kernel(inline="always")
def fmix64(h: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    """MurmurHash3's fmix64 of one uint64 (hashing.fmix64 is the array form)."""
    h ^= h >> SHIFT
    h *= C1
    h ^= h >> SHIFT
    h *= C2
    h ^= h >> SHIFT
    return h


# --- normalisation ------------------------------------------------------------------------------


@kernel(inline="always")
def decode_at(data: np.ndarray, i: np.uint64) -> tuple[np.uint32, np.uint64]:  # pragma: no cover - compiled
    """(code point, index of the next sequence) of the UTF-8 sequence at data[i] (uint8; valid
    UTF-8, so the continuation bytes are there and need no checks)."""
    lead = data[i]
    if lead < 0x80:
        return np.uint32(lead), i + ONE
    if lead < 0xE0:
        return np.uint32(((lead & 0x1F) << 6) | (data[i + ONE] & 0x3F)), i + TWO
    if lead < 0xF0:
        return np.uint32(((lead & 0x0F) << 12) | ((data[i + ONE] & 0x3F) << 6) | (data[i + TWO] & 0x3F)), i + THREE
    return np.uint32(((lead & 0x07) << 18) | ((data[i + ONE] & 0x3F) << 12) | ((data[i + TWO] & 0x3F) << 6)
                     | (data[i + THREE] & 0x3F)), i + FOUR


@kernel()
def normalize_batch(data: np.ndarray, offsets: np.ndarray, lowercase: np.ndarray, white: np.ndarray,
                    category_flags: np.ndarray, strip: np.uint8, units: np.ndarray, unit_offsets: np.ndarray,
                    word_counts: np.ndarray) -> None:  # pragma: no cover - compiled
    """Normalise every document of a batch (normalize.normalize_utf8 after the Unicode form).

    data: uint8 (B,) valid UTF-8; offsets: uint64 (n_docs + 1,) byte offsets from 0; lowercase,
    white, category_flags: normalize.host_tables(); strip: normalize.strip_flags bits.
    Writes units uint32 (>= code points of the batch,): the normalised code points, packed;
    unit_offsets uint64 (n_docs + 1,): document d's are units[unit_offsets[d]:unit_offsets[d+1]];
    word_counts uint64 (n_docs,): its words (space-separated tokens). All host.
    """
    written = ZERO
    unit_offsets[0] = ZERO
    for d in range(offsets.shape[0] - 1):
        words, has_text = ZERO, ZERO
        # A white run is written as one space only when text came before it in this document and
        # more text follows: the space is held back (pending) until the next kept code point.
        space_pending = ZERO
        i, end = offsets[d], offsets[d + 1]
        while i < end:
            code_point, i = decode_at(data, i)
            lower = lowercase[code_point]
            # Lower-casing maps nothing into or out of White_Space, P* or S*, so the lowered code
            # point's flags are the original's; the order is docs/hash-spec.md's all the same.
            if strip != 0 and (category_flags[lower] & strip) != 0:
                continue  # removed: no trace, so "a , b" has a white run of two, one space below
            # No branches from here on (white space comes every few bytes, so a branch on it would
            # mispredict): a space is written, then the code point over or after it; ``written``
            # moves past each only where it counts. The dependency chain from one code point to
            # the next is short: space_pending depends on has_text, not on ``written``.
            is_white = np.uint64(white[lower])
            emit_space = space_pending & (ONE - is_white)
            units[written] = SPACE
            units[written + emit_space] = lower
            written += emit_space + ONE - is_white
            words += emit_space
            has_text |= ONE - is_white
            space_pending = is_white & has_text
        word_counts[d] = words + has_text  # n spaces separate n + 1 words
        unit_offsets[d + 1] = written


# --- shingle hashes -----------------------------------------------------------------------------


@kernel(inline="always")
def poly_hash64(units: np.ndarray, start: np.uint64, stop: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    """poly_hash64 of units[start:stop] (uint32), by Horner's rule as the definition states it."""
    h = OFFSET
    for j in range(start, stop):
        h = h * BASE + np.uint64(units[j])
    return fmix64(h)


@kernel()
def char_hashes(units: np.ndarray, unit_offsets: np.ndarray, n: np.uint64, base_power_n: np.uint64,
                offset_term: np.uint64, shingle_offsets: np.ndarray,
                hashes: np.ndarray) -> None:  # pragma: no cover - compiled
    """The hashes of every n-gram of units (char and token shingles), in text order.

    units: uint32 (M,); unit_offsets: uint64 (n_docs + 1,); base_power_n: POLY_BASE**n and
    offset_term: POLY_OFFSET * POLY_BASE**n, both mod 2**64; shingle_offsets: uint64
    (n_docs + 1,), ngram_counts of the lengths. Writes hashes uint64 (shingle_offsets[-1],). Host.

    A window's polynomial without the offset, t = sum units[j] * BASE**(stop-1-j), rolls one unit
    on as t * BASE + (new unit - dropped unit * BASE**n); the bracket does not depend on t, so the
    chain from one window to the next is one multiply-add. The hash is fmix64(offset_term + t):
    Horner's rule from POLY_OFFSET over the window's n units, regrouped.
    """
    for d in range(unit_offsets.shape[0] - 1):
        start, stop = unit_offsets[d], unit_offsets[d + 1]
        out = shingle_offsets[d]
        if stop - start < n:
            if stop > start:  # the short-document rule: one shingle, the whole text
                hashes[out] = poly_hash64(units, start, stop)
            continue
        t = ZERO
        for j in range(start, start + n):
            t = t * BASE + np.uint64(units[j])
        hashes[out] = fmix64(offset_term + t)
        for j in range(start + n, stop):
            t = t * BASE + (np.uint64(units[j]) - np.uint64(units[j - n]) * base_power_n)
            out += ONE
            hashes[out] = fmix64(offset_term + t)


@kernel()
def word_hashes(units: np.ndarray, unit_offsets: np.ndarray, word_counts: np.ndarray, n: np.uint64,
                shingle_offsets: np.ndarray, hashes: np.ndarray) -> None:  # pragma: no cover - compiled
    """The hashes of every word n-gram of normalised text, in text order.

    units: uint32 (M,) normalised (single spaces, none at the ends); unit_offsets: uint64
    (n_docs + 1,); word_counts: uint64 (n_docs,) (normalize_batch); shingle_offsets: uint64
    (n_docs + 1,), ngram_counts of word_counts. Writes hashes uint64 (shingle_offsets[-1],). Host.

    Each word w is reduced once to its polynomial p_w (Horner from 0) and BASE**len(w); a shingle
    of words a..b, the text "w_a w_b ...", then hashes by Horner's rule over words:
    h = OFFSET * BASE**len(a) + p_a, then h = (h * BASE + SPACE) * BASE**len(w) + p_w for each
    later word: 2 multiplications per word of a shingle, whatever the words' lengths. (A rolling
    form would need BASE**len of any stretch of words; for the usual n of 5 this is as fast.)
    """
    most_words = ZERO
    for d in range(word_counts.shape[0]):
        most_words = max(most_words, word_counts[d])
    word_poly = np.empty(most_words, np.uint64)
    word_power = np.empty(most_words, np.uint64)
    for d in range(unit_offsets.shape[0] - 1):
        start, stop = unit_offsets[d], unit_offsets[d + 1]
        if stop == start:
            continue
        words = ZERO
        poly, power = ZERO, ONE
        for j in range(start, stop):
            unit = units[j]
            if unit == SPACE:
                word_poly[words] = poly
                word_power[words] = power
                words += ONE
                poly, power = ZERO, ONE
            else:
                poly = poly * BASE + np.uint64(unit)
                power *= BASE
        word_poly[words] = poly
        word_power[words] = power
        words += ONE
        span = min(n, words)  # fewer than n words: the short-document rule, one whole-text shingle
        out = shingle_offsets[d]
        for first in range(words - span + ONE):
            h = OFFSET * word_power[first] + word_poly[first]
            for w in range(first + ONE, first + span):
                h = (h * BASE + SPACE_UNIT) * word_power[w] + word_poly[w]
            hashes[out] = fmix64(h)
            out += ONE


# --- sets ---------------------------------------------------------------------------------------

# Rows of at most this many hashes are sorted by insertion alone.
SMALL_ROW = np.uint64(16)
# The most buckets sort_row spreads a row over (2**20: 4 MiB of uint32 bucket offsets); longer rows
# share buckets, which costs the insertion pass more moves, never a wrong order.
MAX_BUCKET_BITS = np.uint64(20)
# Bucket offsets are uint32 (half the cache of uint64); a row this long or longer is sorted by
# numba's quicksort instead (only a document of some 4 GB of text has one).
LONGEST_BUCKETED_ROW = np.uint64(1 << 32)


@kernel()
def insertion_sort(values: np.ndarray, stop: np.uint64, budget: np.uint64) -> bool:  # pragma: no cover - compiled
    """Sort values[:stop] (uint64) ascending in place by insertion, unless that takes more than
    ``budget`` moves of single values: then stop early (the values still all there, in some
    order) and return False. Host."""
    moves = ZERO
    for i in range(ONE, stop):
        value = values[i]
        j = i
        while j > ZERO and values[j - ONE] > value:
            values[j] = values[j - ONE]
            j -= ONE
        values[j] = value
        moves += i - j
        if moves > budget:
            return False
    return True


@kernel()
def sort_row(row: np.ndarray, sorted_row: np.ndarray, bucket_offsets: np.ndarray) -> None:  # pragma: no cover
    """row (uint64 (L,)) sorted ascending into sorted_row[:L] (uint64).

    bucket_offsets: uint32 scratch of min(2 L, 2**MAX_BUCKET_BITS) + 1 entries at least. Host.

    Shingle hashes are fmix64 outputs, spread evenly over 64 bits, so a counting sort on their top
    bits into about one bucket per hash leaves each value among a handful of others of its bucket;
    one insertion pass then finishes in about one move per value. Repeats of a value share a
    bucket but never move past each other. Should the insertion pass take more than a few moves
    per value (values clustered far beyond chance), numba's quicksort finishes the row instead.
    """
    length = np.uint64(row.shape[0])
    if length <= SMALL_ROW:
        sorted_row[:length] = row
        insertion_sort(sorted_row, length, length * length)  # at most length**2 / 2 moves
        return
    if length >= LONGEST_BUCKETED_ROW:
        sorted_row[:length] = row
        sorted_row[:length].sort()
        return
    bits = ONE
    while (ONE << bits) < length and bits < MAX_BUCKET_BITS:
        bits += ONE
    shift = np.uint64(64) - bits
    buckets = ONE << bits
    bucket_offsets[:buckets + ONE] = 0
    for i in range(length):
        bucket_offsets[(row[i] >> shift) + ONE] += 1
    for bucket in range(buckets):
        bucket_offsets[bucket + ONE] += bucket_offsets[bucket]
    for i in range(length):
        bucket = row[i] >> shift
        sorted_row[bucket_offsets[bucket]] = row[i]
        bucket_offsets[bucket] += 1
    if not insertion_sort(sorted_row, length, FOUR * length):
        sorted_row[:length].sort()


@kernel()
def sort_unique_rows(offsets: np.ndarray, hashes: np.ndarray, set_offsets: np.ndarray) -> np.uint64:  # pragma: no cover
    """Each row of a ragged uint64 array sorted ascending without repeats, packed in place.

    offsets: uint64 (n_docs + 1,); hashes: uint64 (offsets[-1],), overwritten: row d's set ends
    up at hashes[set_offsets[d]:set_offsets[d+1]]. Writes set_offsets uint64 (n_docs + 1,);
    returns set_offsets[-1]. Host. A row's set is written no further right than the row was, so
    packing never overwrites a value not yet read.
    """
    longest = ZERO
    for d in range(offsets.shape[0] - 1):
        longest = max(longest, offsets[d + 1] - offsets[d])
    sorted_row = np.empty(longest, np.uint64)
    bucket_offsets = np.empty(min(max(longest, SMALL_ROW) * TWO, ONE << MAX_BUCKET_BITS) + ONE, np.uint32)
    written = ZERO
    set_offsets[0] = ZERO
    for d in range(offsets.shape[0] - 1):
        start, stop = offsets[d], offsets[d + 1]
        if stop > start:
            sort_row(hashes[start:stop], sorted_row, bucket_offsets)
            previous = sorted_row[0]
            hashes[written] = previous
            written += ONE
            for i in range(ONE, stop - start):
                # Written always, kept only when new: repeats are common and unpredictable, so
                # a branch on them would mispredict. written <= start + i < stop: in bounds.
                value = sorted_row[i]
                hashes[written] = value
                written += np.uint64(value != previous)
                previous = value
        set_offsets[d + 1] = written
    return written


# --- MinHash signatures ---------------------------------------------------------------------------

@kernel()
def minhash_rows(offsets: np.ndarray, low_bits: np.ndarray, a: np.ndarray, b: np.ndarray,
                 signatures: np.ndarray) -> None:  # pragma: no cover - compiled
    """signatures[d, k] = min(signatures[d, k], min over document d's shingles x of
    (a[k] * x + b[k]) mod 2**32).

    offsets: uint64 (n + 1,); low_bits: uint32, each shingle hash mod 2**32; a, b: uint32 (K,);
    signatures: uint32 (n, K), filled with EMPTY_SIGNATURE_VALUE (2**32 - 1, above every
    value) by the caller and written in place. Whether numba multiplies the uint32 values in 32
    or 64 bits, the cast to uint32 keeps the product mod 2**32, minhash.minhash_signatures's
    arithmetic. A document's row stays in cache while each shingle passes over all K
    permutations (one pass, where numpy makes three per permutation).
    """
    permutations = a.shape[0]
    for d in range(offsets.shape[0] - ONE):
        row = signatures[d]
        for i in range(offsets[d], offsets[d + ONE]):
            x = low_bits[i]
            for k in range(permutations):
                value = np.uint32(a[k] * x + b[k])
                if value < row[k]:
                    row[k] = value
