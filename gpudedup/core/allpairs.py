"""Exact all-pairs Jaccard similarity join: the ground truth for MinHash LSH recall measurements.

Given per-document shingle sets, ``exact_similar_pairs`` returns every pair of documents whose
Jaccard similarity ``|A & B| / |A | B|`` is at least a threshold ``t`` -- no misses, no extras.
It is the prefix-filtering join of AllPairs / PPJoin (Bayardo et al. 2007; Xiao et al. 2008)
with an extended-prefix filter in the spirit of Wang et al. 2012 ("Can we beat the prefix
filtering?"), vectorised with numpy and scipy: a few array passes per chunk of candidates, no
Python loop per document or per token.

Input is a CSR batch of host arrays: ``offsets`` int64 (n_docs + 1,) and ``hashes`` uint64
(offsets[-1],); document d's set is ``hashes[offsets[d]:offsets[d+1]]``, sorted ascending
without duplicates. Empty documents are never part of a pair.

The threshold is read as an exact fraction ``num / den``: the closest one with a denominator of
at most ``MAX_THRESHOLD_DENOMINATOR`` (so ``0.8`` means exactly 4/5 and a pair with J = 4/5 is
in). Every membership decision is integer arithmetic on that fraction; only the reported
``jaccard`` is a float.

The algorithm, and why it finds every pair
------------------------------------------
1. Tokens. Every distinct hash becomes a dense token id, ordered by document frequency (rarest
   first, ties by hash value), and each set is rewritten as its token ids in ascending order,
   rarest first. Documents are relabelled into *slots* by ascending size (ties by document
   id), so in a pair "x" is the set in the lower slot and ``|x| <= |y|``.

2. Overlap needed. J(x, y) >= t  <=>  ``|x & y| >= a`` with ``a = ceil(t / (1 + t) *
   (|x| + |y|))``. As |x & y| <= |x|, this needs the length filter ``|x| >= t |y|``, which in
   turn gives ``a >= ceil(t |y|)``; and ``|y| >= |x|`` gives ``a >= ceil(2t / (1 + t) |x|)``.

3. Prefix lemma. If |x & y| >= a, the rarest shared token is among the first ``|x| - a + 1``
   tokens of x -- otherwise all a or more shared tokens would sit among the last ``a - 1`` --
   and likewise for y. By (2) it is therefore in x's *index prefix*, its first
   ``|x| - ceil(2t/(1+t) |x|) + 1`` tokens, and in y's *probe prefix*, its first
   ``|y| - ceil(t |y|) + 1`` tokens. Each length depends on one set's size only; prefixes hold
   the rarest tokens and are short (about (1 - t) of the set), so few dissimilar pairs share
   one.

4. Candidates. Extend both prefixes by g = ``HEAD_EXTENSION`` tokens (capped at the set) into
   the *left head* hx (index prefix + g) and the *right head* hy (probe prefix + g). The right
   heads of all sets form an inverted index sorted by (token, slot). Each left-head entry of
   slot x pairs with the entries after it in its token's list, up to the last slot whose size
   passes the length filter: a contiguous run, located for all entries at once by one
   ``searchsorted``. Generating these pairs for a range of x slots at a time, sorting them and
   counting repeats yields every pair that shares a head token, each once, with
   ``|hx & hy|``. By (3) every similar pair is among them.

5. Extended-prefix filter (after Wang et al. 2012). Say x's last head token comes no later in
   the token order than y's. Every shared token up to it lies in both heads, and every later
   one lies in x's tail, so ``|x & y| <= |hx & hy| + |x| - |hx|``; symmetrically when y's last
   head token is the earlier one. Pairs whose bound is below ``a`` are dropped. When no head is
   capped the tail is at most ``a - 1 - g`` long, so a similar pair must share g + 1 head
   tokens, which a dissimilar pair that met through one rare token seldom does: this removes
   most candidates for the price of a slightly longer index.

6. Verification. The exact |x & y| of the survivors is the row-wise product of two canonical
   CSR matrices (scipy merges each pair of sorted rows in C++); the pair is kept iff
   ``|x & y| * (den + num) >= num * (|x| + |y|)``, which is J >= num / den without division.

Steps 3-5 never drop a similar pair and step 6 is exact, so the result is exact. Working memory
beyond the O(input) token arrays is bounded by ``max_chunk_elements`` (about 50 bytes each).

``brute_force_similar_pairs`` is the O(n_docs^2) oracle for tests.
"""

from __future__ import annotations

from fractions import Fraction
from typing import NamedTuple

import numpy as np
import scipy.sparse

from gpudedup.core.ragged import offsets_from_counts, ragged_arange, weighted_ranges

MAX_THRESHOLD_DENOMINATOR = 1_000_000
# Tokens added to both prefixes to make the heads (module docstring, steps 4-5). A dissimilar
# candidate must share g + 1 head tokens to reach verification; a few extra tokens per set
# already stop nearly all of them, while each one lengthens the inverted index.
HEAD_EXTENSION = 4
# Candidate pairs per generation chunk, and set elements per comparison batch. A chunk needs
# about 50 bytes per element at its peak, so the default keeps it near 200 MB.
DEFAULT_MAX_CHUNK_ELEMENTS = 1 << 22

_LOW32 = np.uint64(0xFFFF_FFFF)
_SHIFT32 = np.uint64(32)


class SimilarPairs(NamedTuple):
    """Document pairs with Jaccard >= threshold, sorted by (doc_a, doc_b), doc_a < doc_b.

    doc_a: int64, shape (m,). doc_b: int64, shape (m,). jaccard: float64, shape (m,), the
    similarity |A & B| / |A | B| of each pair.
    """

    doc_a: np.ndarray
    doc_b: np.ndarray
    jaccard: np.ndarray


# --- public API --------------------------------------------------------------------------------


def exact_similar_pairs(
    offsets: np.ndarray,
    hashes: np.ndarray,
    threshold: float,
    *,
    max_chunk_elements: int = DEFAULT_MAX_CHUNK_ELEMENTS,
) -> SimilarPairs:
    """Every document pair with Jaccard >= threshold, by prefix filtering (module docstring).

    offsets: int64, shape (n_docs + 1,), CSR offsets into ``hashes``.
    hashes: uint64, shape (offsets[-1],); each document's slice sorted ascending, no duplicates.
    threshold: in (0, 1], read as the fraction described in the module docstring.
    max_chunk_elements: candidate pairs generated, and set elements compared, per batch; it
        bounds the working memory, not the size of the result.
    """
    offsets, hashes = _validated_sets(offsets, hashes)
    num, den = threshold_fraction(threshold)
    sizes = np.diff(offsets)
    doc_of_slot = np.argsort(sizes, kind="stable")
    sets = _token_sets_by_slot(offsets, hashes, doc_of_slot)
    slot_sizes = sizes[doc_of_slot]
    left_heads = _Heads.of(sets, _prefix_lengths(slot_sizes, 2 * num, den + num) + HEAD_EXTENSION)
    right_heads = _Heads.of(sets, _prefix_lengths(slot_sizes, num, den) + HEAD_EXTENSION)
    last_partner_slot = _last_partner_slots(slot_sizes, num, den)
    index = _HeadIndex.build(sets, left_heads, right_heads, last_partner_slot)

    found = [(np.empty(0, dtype=np.int64),) * 3]
    for first_slot, end_slot in weighted_ranges(np.diff(index.pairs_before_slot), max_chunk_elements):
        left, right, shared_in_heads = index.candidates(first_slot, end_slot)
        bound = shared_in_heads + _tail_bound(left_heads, right_heads, left, right)
        plausible = _meets_overlap(bound, slot_sizes[left], slot_sizes[right], num, den)
        left, right = left[plausible], right[plausible]
        intersection = _row_overlaps(sets, left, right, max_chunk_elements)
        similar = _meets_overlap(intersection, slot_sizes[left], slot_sizes[right], num, den)
        found.append((left[similar], right[similar], intersection[similar]))
    left, right, intersection = (np.concatenate(part) for part in zip(*found))
    return _sorted_pairs(doc_of_slot[left], doc_of_slot[right], intersection, sizes)


def brute_force_similar_pairs(
    offsets: np.ndarray, hashes: np.ndarray, threshold: float
) -> SimilarPairs:
    """The same result as ``exact_similar_pairs`` by comparing every pair: a test oracle only.

    It forms the full sparse product ``M @ M.T`` of the document-by-hash incidence matrix M,
    which holds |A & B| for every pair sharing a hash: O(n_docs^2) time and memory in the worst
    case. Pairs sharing nothing have J = 0 < threshold, so they are rightly absent.

    offsets: int64, shape (n_docs + 1,); hashes: uint64, shape (offsets[-1],); as for
    ``exact_similar_pairs``.
    """
    offsets, hashes = _validated_sets(offsets, hashes)
    num, den = threshold_fraction(threshold)
    sizes = np.diff(offsets)
    distinct_hashes, hash_ids = np.unique(hashes, return_inverse=True)
    incidence = scipy.sparse.csr_matrix(
        (np.ones(hashes.shape[0], dtype=np.int64), hash_ids, offsets),
        shape=(sizes.shape[0], distinct_hashes.shape[0]),
    )
    shared = scipy.sparse.triu(incidence @ incidence.T, k=1).tocoo()
    doc_a, doc_b = shared.row.astype(np.int64), shared.col.astype(np.int64)
    intersection = shared.data.astype(np.int64)
    similar = _meets_overlap(intersection, sizes[doc_a], sizes[doc_b], num, den)
    return _sorted_pairs(doc_a[similar], doc_b[similar], intersection[similar], sizes)


def threshold_fraction(threshold: float) -> tuple[int, int]:
    """The threshold as an exact fraction (num, den), den <= MAX_THRESHOLD_DENOMINATOR."""
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    fraction = Fraction(threshold).limit_denominator(MAX_THRESHOLD_DENOMINATOR)
    if fraction == 0:
        raise ValueError(f"threshold {threshold} is too small to be represented")
    return fraction.numerator, fraction.denominator


# --- input and output --------------------------------------------------------------------------


def _validated_sets(offsets, hashes) -> tuple[np.ndarray, np.ndarray]:
    """Check the CSR input contract; returns (offsets int64 (n_docs + 1,), hashes uint64 (N,))."""
    offsets = np.asarray(offsets)
    hashes = np.asarray(hashes)
    if offsets.ndim != 1 or offsets.shape[0] < 1 or offsets.dtype.kind not in "iu":
        raise ValueError("offsets must be a non-empty 1-D integer array")
    if hashes.ndim != 1 or hashes.dtype != np.uint64:
        raise ValueError("hashes must be a 1-D uint64 array")
    offsets = offsets.astype(np.int64, copy=False)
    if offsets[0] != 0 or offsets[-1] != hashes.shape[0] or np.any(np.diff(offsets) < 0):
        raise ValueError("offsets must start at 0, never decrease and end at len(hashes)")
    # Token ids are int32 column indices, and slots and tokens fill 32-bit halves of sort keys.
    if hashes.shape[0] >= 1 << 31 or offsets.shape[0] > 1 << 31:
        raise ValueError("at most 2**31 - 1 documents and hashes in total are supported")
    # A set's elements must strictly increase: a repeated element would be counted twice in
    # intersections, so reject it rather than return wrong pairs.
    ascending = hashes[1:] > hashes[:-1]
    boundaries = offsets[(offsets > 0) & (offsets < hashes.shape[0])]
    ascending[boundaries - 1] = True  # from one document to the next, values may go down
    if not ascending.all():
        raise ValueError("each document's hashes must be sorted ascending without duplicates")
    return offsets, hashes


def _meets_overlap(overlap, size_x, size_y, num: int, den: int) -> np.ndarray:
    """bool (m,): whether an overlap this large gives J >= num / den, decided exactly.

    overlap, size_x, size_y: int64, shape (m,). J = o / (|x| + |y| - o) >= num / den is
    o * (den + num) >= num * (|x| + |y|); values stay far below 2**63 because sizes < 2**31
    and num, den <= MAX_THRESHOLD_DENOMINATOR.
    """
    return overlap * (den + num) >= num * (size_x + size_y)


def _sorted_pairs(doc_x, doc_y, intersection, sizes) -> SimilarPairs:
    """SimilarPairs from unordered pairs.

    doc_x, doc_y, intersection: int64, shape (m,), each pair once, doc_x != doc_y.
    sizes: int64, shape (n_docs,), set sizes.
    """
    doc_a, doc_b = np.minimum(doc_x, doc_y), np.maximum(doc_x, doc_y)
    order = np.lexsort((doc_b, doc_a))
    doc_a, doc_b, intersection = doc_a[order], doc_b[order], intersection[order]
    union = sizes[doc_a] + sizes[doc_b] - intersection
    return SimilarPairs(doc_a=doc_a, doc_b=doc_b, jaccard=intersection / union)


# --- token sets --------------------------------------------------------------------------------


def _token_sets_by_slot(offsets, hashes, doc_of_slot) -> scipy.sparse.csr_matrix:
    """Every set as its frequency-ordered token ids, documents laid out in slot order.

    offsets: int64 (n_docs + 1,); hashes: uint64 (N,); doc_of_slot: int64 (n_docs,), the
    document in each slot. Returns a canonical CSR matrix (n_slots, n_tokens) of int8 ones: row
    s holds slot s's token ids in ascending order (rarest first) as int32 column indices.
    """
    sizes = np.diff(offsets)
    slot_of_doc = np.empty_like(doc_of_slot)
    slot_of_doc[doc_of_slot] = np.arange(doc_of_slot.shape[0])
    tokens, n_tokens = _frequency_ordered_tokens(hashes)
    # One value sort of (slot << 32 | token) both moves each set to its slot and orders it.
    keys = np.repeat(slot_of_doc.astype(np.uint64), sizes)
    keys <<= _SHIFT32
    keys |= tokens
    del tokens
    keys.sort()
    set_tokens = (keys & _LOW32).astype(np.int32)
    del keys
    return _binary_rows(offsets_from_counts(sizes[doc_of_slot]), set_tokens, n_tokens)


def _frequency_ordered_tokens(hashes) -> tuple[np.ndarray, int]:
    """(token id of every element uint32 (N,), number of tokens) for hashes uint64 (N,).

    Token ids order the distinct hash values by how many sets contain them (each set holds a
    value at most once, so that is the value's count), rarest first, ties by value.
    """
    order = np.argsort(hashes)
    sorted_hashes = hashes[order]
    starts_value = np.empty(hashes.shape[0], dtype=bool)
    starts_value[:1] = True
    np.not_equal(sorted_hashes[1:], sorted_hashes[:-1], out=starts_value[1:])
    del sorted_hashes
    value_starts = np.flatnonzero(starts_value)
    n_values = value_starts.shape[0]
    frequency = np.diff(value_starts, append=hashes.shape[0])
    del value_starts
    value_of_element = np.cumsum(starts_value, dtype=np.uint32)
    value_of_element -= 1
    del starts_value
    # Values are already in ascending order, so a stable sort by frequency breaks ties by value.
    token_of_value = np.empty(n_values, dtype=np.uint32)
    token_of_value[np.argsort(frequency, kind="stable")] = np.arange(n_values, dtype=np.uint32)
    tokens = np.empty(hashes.shape[0], dtype=np.uint32)
    tokens[order] = token_of_value[value_of_element]
    return tokens, n_values


def _binary_rows(row_offsets, columns, n_columns: int) -> scipy.sparse.csr_matrix:
    """A 0/1 int8 CSR matrix from row offsets int64 (n + 1,) and columns int32 (nnz,).

    Columns must be ascending and distinct within each row (canonical CSR), which is what lets
    scipy intersect two rows by a linear merge.
    """
    matrix = scipy.sparse.csr_matrix(
        (np.ones(columns.shape[0], dtype=np.int8), columns, row_offsets),
        shape=(row_offsets.shape[0] - 1, n_columns),
    )
    matrix.has_sorted_indices = True
    return matrix


def _prefix_lengths(sizes, num: int, den: int) -> np.ndarray:
    """int64 (n,): ``s - ceil(s * num / den) + 1`` per set size s (int64 (n,)), 0 when s = 0.

    That is how many rarest tokens must be looked at so that a set sharing at least
    ``ceil(s * num / den)`` tokens with it shares one of them (module docstring, step 3).
    """
    min_overlap = -((-sizes * num) // den)  # ceil without floats
    return np.where(sizes > 0, sizes - min_overlap + 1, 0)


# --- candidates --------------------------------------------------------------------------------


class _Heads(NamedTuple):
    """Per slot, the first ``lengths[s]`` tokens of its set (module docstring, step 4).

    lengths: int64 (n_slots,), capped at the set sizes. tails: int64 (n_slots,), how many
    tokens follow the head. last_tokens: int64 (n_slots,), the head's last token id (-1 if
    the head is empty).
    """

    lengths: np.ndarray
    tails: np.ndarray
    last_tokens: np.ndarray

    @classmethod
    def of(cls, sets, wanted_lengths) -> _Heads:
        """Heads of the rows of ``sets`` (``_token_sets_by_slot``).

        wanted_lengths: int64 (n_slots,), head lengths before capping at the set sizes.
        """
        sizes = np.diff(sets.indptr).astype(np.int64)
        lengths = np.minimum(wanted_lengths, sizes)
        last_tokens = np.full(lengths.shape[0], -1, dtype=np.int64)
        non_empty = lengths > 0
        last_tokens[non_empty] = sets.indices[sets.indptr[:-1][non_empty] + lengths[non_empty] - 1]
        return cls(lengths=lengths, tails=sizes - lengths, last_tokens=last_tokens)


class _HeadIndex(NamedTuple):
    """The inverted index of right heads and, per left-head entry, its run of partners.

    posting_slots: int64 (P,), the slot of each right-head entry, in (token, slot) order.
    partner_starts, partner_ends: int64 (L,), for each left-head entry (in slot order) the
        half-open range of ``posting_slots`` positions it pairs with.
    entries_before_slot: int64 (n_slots + 1,), CSR offsets of each slot's left-head entries.
    pairs_before_slot: int64 (n_slots + 1,), cumulative candidate pairs (with repeats) of the
        slots before each slot.
    """

    posting_slots: np.ndarray
    partner_starts: np.ndarray
    partner_ends: np.ndarray
    entries_before_slot: np.ndarray
    pairs_before_slot: np.ndarray

    @classmethod
    def build(cls, sets, left_heads, right_heads, last_partner_slot) -> _HeadIndex:
        """Index the heads of ``sets`` (``_token_sets_by_slot``).

        left_heads, right_heads: ``_Heads``, every left head no longer than the right head.
        last_partner_slot: int64 (n_slots,), the last slot each slot may pair with
        (``_last_partner_slots``).
        """
        n_slots = right_heads.lengths.shape[0]
        entry_slots = np.repeat(np.arange(n_slots, dtype=np.int64), right_heads.lengths)
        within_set = _concatenated_ranges(np.zeros(n_slots, dtype=np.int64), right_heads.lengths)
        entry_tokens = sets.indices[sets.indptr[entry_slots] + within_set]
        is_left_entry = within_set < left_heads.lengths[entry_slots]
        del within_set

        posting_keys = entry_tokens.astype(np.uint64) << _SHIFT32
        posting_keys |= entry_slots.astype(np.uint64)
        del entry_tokens, entry_slots
        entry_of_posting = np.argsort(posting_keys)
        posting_keys = posting_keys[entry_of_posting]
        posting_slots = (posting_keys & _LOW32).astype(np.int64)

        # Left-head entries, taken in posting order so that the run-end queries below come
        # sorted (searchsorted is fast on sorted queries, very slow on random ones).
        left_postings = np.flatnonzero(is_left_entry[entry_of_posting])
        run_end_keys = posting_keys[left_postings] & ~_LOW32
        run_end_keys |= last_partner_slot[posting_slots[left_postings]].astype(np.uint64)
        run_ends = np.searchsorted(posting_keys, run_end_keys, side="right")
        del posting_keys, run_end_keys

        # Same runs, re-ordered from posting order to slot order by scattering them to their
        # entries (entry numbers increase with slot) and dropping the right-only entries.
        by_entry = np.zeros(is_left_entry.shape[0], dtype=np.int64)
        left_entries = entry_of_posting[left_postings]
        by_entry[left_entries] = left_postings + 1
        partner_starts = by_entry[is_left_entry]
        by_entry[left_entries] = run_ends
        partner_ends = by_entry[is_left_entry]

        entries_before_slot = offsets_from_counts(left_heads.lengths)
        pairs_before_entry = offsets_from_counts(partner_ends - partner_starts)
        return cls(
            posting_slots=posting_slots,
            partner_starts=partner_starts,
            partner_ends=partner_ends,
            entries_before_slot=entries_before_slot,
            pairs_before_slot=pairs_before_entry[entries_before_slot],
        )

    def candidates(self, first_slot: int, end_slot: int) -> tuple[np.ndarray, ...]:
        """Pairs sharing a head token whose left side is a slot in [first_slot, end_slot).

        Returns (left, right, shared): int64 (m,) each; left < right are slots, sorted by
        (left, right); shared is the number of tokens the pair's left and right heads share.
        """
        first = self.entries_before_slot[first_slot]
        end = self.entries_before_slot[end_slot]
        starts = self.partner_starts[first:end]
        run_lengths = self.partner_ends[first:end] - starts
        right = self.posting_slots[_concatenated_ranges(starts, run_lengths)]
        entry_slots = np.repeat(
            np.arange(first_slot, end_slot, dtype=np.int64),
            np.diff(self.entries_before_slot[first_slot : end_slot + 1]),
        )
        left = np.repeat(entry_slots, run_lengths)
        pair_keys = (left.astype(np.uint64) << _SHIFT32) | right.astype(np.uint64)
        del left, right
        pair_keys.sort()
        # A pair appears once per head token its two sides share.
        is_first = np.empty(pair_keys.shape[0], dtype=bool)
        is_first[:1] = True
        np.not_equal(pair_keys[1:], pair_keys[:-1], out=is_first[1:])
        first_positions = np.flatnonzero(is_first)
        shared = np.diff(first_positions, append=pair_keys.shape[0])
        pair_keys = pair_keys[first_positions]
        left = (pair_keys >> _SHIFT32).astype(np.int64)
        return left, (pair_keys & _LOW32).astype(np.int64), shared


def _last_partner_slots(slot_sizes, num: int, den: int) -> np.ndarray:
    """int64 (n_slots,): the last slot whose set can be similar to each slot's as the larger one.

    slot_sizes: int64 (n_slots,), ascending. A larger set y suits x only if
    |y| * num <= |x| * den (the length filter), i.e. |y| <= floor(|x| * den / num).
    """
    largest_size = slot_sizes * den // num
    return np.searchsorted(slot_sizes, largest_size, side="right") - 1


# --- filtering and verification ----------------------------------------------------------------


def _tail_bound(left_heads, right_heads, left, right) -> np.ndarray:
    """int64 (m,): how many shared tokens a pair can have beyond those its heads share.

    left_heads, right_heads: ``_Heads``; left, right: int64 (m,) slots of non-empty sets. The
    bound is the tail of the side whose head ends earlier in the token order (docstring, step 5).
    """
    left_ends_first = left_heads.last_tokens[left] <= right_heads.last_tokens[right]
    return np.where(left_ends_first, left_heads.tails[left], right_heads.tails[right])


def _row_overlaps(sets, rows_a, rows_b, budget: int) -> np.ndarray:
    """int64 (m,): |sets[rows_a[i]] & sets[rows_b[i]]| for a 0/1 canonical CSR matrix.

    rows_a, rows_b: int64 (m,). Pairs go about ``budget`` row elements at a time.
    """
    overlap = np.empty(rows_a.shape[0], dtype=np.int64)
    sizes = np.diff(sets.indptr).astype(np.int64)
    for first, end in weighted_ranges(sizes[rows_a] + sizes[rows_b], budget):
        # Row-wise product of canonical CSR matrices: a sorted merge per pair, in C++; the
        # product keeps only non-zeros, so each row's entry count is the overlap.
        product = sets[rows_a[first:end]].multiply(sets[rows_b[first:end]])
        overlap[first:end] = np.diff(product.indptr)
    return overlap


# --- array helpers -----------------------------------------------------------------------------


def _concatenated_ranges(starts, lengths) -> np.ndarray:
    """int64: ``concatenate([arange(s, s + n) for s, n in zip(starts, lengths)])``, no loop.

    starts, lengths: int64 (n,), lengths >= 0.
    """
    row, within = ragged_arange(lengths)
    return starts[row] + within
