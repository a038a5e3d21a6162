"""Exact all-pairs Jaccard similarity join: the ground truth that MinHash LSH recall is measured against.

Given per-document shingle sets, ``exact_similar_pairs`` returns every pair of documents whose
Jaccard similarity ``|A & B| / |A | B|`` is at least a threshold ``t`` -- no misses, no extras.
It is the prefix-filtering join of AllPairs / PPJoin (Bayardo et al. 2007, Xiao et al. 2008),
vectorised with numpy so that it runs in a handful of array passes per chunk instead of a
Python loop per document.

Input is a CSR batch of host arrays: ``offsets`` int64 (n_docs + 1,) and ``hashes`` uint64
(offsets[-1],); document d's set is ``hashes[offsets[d]:offsets[d+1]]``, sorted ascending
without duplicates. Empty documents are never part of a pair.

The threshold is read as an exact fraction ``num / den``: the closest one with a denominator of
at most ``MAX_THRESHOLD_DENOMINATOR`` (so ``0.8`` means exactly 4/5 and a pair with J = 4/5 is
in). Every membership decision is integer arithmetic on that fraction; only the reported
``jaccard`` is a float.

The algorithm, and why it finds every pair
------------------------------------------
1. Tokens. Every distinct hash becomes a dense uint32 token id, ordered by document frequency
   (rarest first, ties by hash value). Each set is rewritten as its token ids in ascending
   order, i.e. rarest token first.

2. Overlap needed. With sizes ``|x| <= |y|``, J(x, y) >= t  <=>  ``|x & y| >= a`` where
   ``a = ceil(t / (1 + t) * (|x| + |y|))``. Because |x & y| <= |x|, that also needs the length
   filter ``|x| >= t * |y|``, which in turn gives ``a >= ceil(t * |y|)``; and ``|y| >= |x|``
   gives ``a >= ceil(2t / (1 + t) * |x|)``.

3. Prefix lemma. If |x & y| >= a, the rarest shared token lies among the first ``|x| - a + 1``
   tokens of x: otherwise all >= a shared tokens would sit among the last ``a - 1``. Likewise
   for y. By (2) it therefore lies in x's *index prefix* (first ``|x| - ceil(2t/(1+t)|x|) + 1``
   tokens) and in y's *probe prefix* (first ``|y| - ceil(t|y|) + 1`` tokens), both of which
   depend on one set's size alone. So every similar pair shares a token between the smaller
   set's index prefix and the larger set's probe prefix; prefixes are short (about
   ``(1 - t)|x|``) and hold the rarest tokens, so few dissimilar pairs share one.

4. Candidates. Documents are relabelled into *slots* by ascending size (ties by document id),
   so "x is smaller" means "x has the lower slot". The probe-prefix tokens of all sets form an
   inverted index sorted by (token, slot). An index-prefix entry of slot x pairs with the
   entries after it in the same token's list, up to the last slot whose size passes the length
   filter -- a contiguous run, found for all entries at once with one ``searchsorted``.

5. Verification. Candidates are generated for a range of left slots at a time, so a pair found
   through several shared tokens is always de-duplicated within one chunk. Each distinct
   candidate's exact intersection size comes from sorting ``(pair << 32) | token`` keys of both
   sets and counting equal neighbours (each set has no duplicates, so an equal neighbour is
   exactly one shared token), and the pair is kept iff ``|x & y| * (den + num) >= num * (|x| +
   |y|)``, which is J >= num / den rearranged without division.

Steps 3-4 never drop a similar pair and step 5 is exact, so the result is exact. Memory beyond
the O(input) token arrays is bounded by ``max_chunk_elements`` (about 60 bytes each).

``brute_force_similar_pairs`` is the O(n_docs^2) oracle for tests.
"""

from __future__ import annotations

from fractions import Fraction
from typing import NamedTuple

import numpy as np
import scipy.sparse

from gpudedup.ragged import offsets_from_counts

MAX_THRESHOLD_DENOMINATOR = 1_000_000
# Candidate pairs per generation chunk and set elements per verification batch. The peak of a
# chunk is about 60 bytes per element, so the default keeps it near 250 MB.
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
    max_chunk_elements: candidate pairs generated, and set elements verified, per batch; it
        bounds the working memory (about 60 bytes each), not the result.
    """
    offsets, hashes = _validated_sets(offsets, hashes)
    num, den = threshold_fraction(threshold)
    sizes = np.diff(offsets)
    doc_of_slot = np.argsort(sizes, kind="stable")
    slot_sizes = sizes[doc_of_slot]
    set_offsets, set_tokens = _token_sets_by_slot(offsets, hashes, doc_of_slot)
    index = _PrefixIndex.build(set_offsets, set_tokens, slot_sizes, num, den)

    empty = np.empty(0, dtype=np.int64)
    left_parts, right_parts, intersection_parts = [empty], [empty], [empty]
    for first_slot, end_slot in _chunk_ranges(index.pairs_before_slot, max_chunk_elements):
        left, right = index.candidates(first_slot, end_slot)
        intersection = _intersection_sizes(set_offsets, set_tokens, left, right, max_chunk_elements)
        similar = _meets_threshold(intersection, slot_sizes[left], slot_sizes[right], num, den)
        left_parts.append(left[similar])
        right_parts.append(right[similar])
        intersection_parts.append(intersection[similar])
    left, right = np.concatenate(left_parts), np.concatenate(right_parts)
    return _sorted_pairs(
        doc_of_slot[left], doc_of_slot[right], np.concatenate(intersection_parts), sizes
    )


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
    similar = _meets_threshold(intersection, sizes[doc_a], sizes[doc_b], num, den)
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
    # Token ids, slots and pair keys are packed into 32-bit halves of uint64 keys.
    if hashes.shape[0] >= 1 << 32:
        raise ValueError("at most 2**32 - 1 hashes in total are supported")
    # A set's elements must strictly increase: an equal neighbour would count twice in the
    # intersection, so reject it rather than return wrong sizes.
    ascending = hashes[1:] > hashes[:-1]
    boundaries = offsets[(offsets > 0) & (offsets < hashes.shape[0])]
    ascending[boundaries - 1] = True  # from one document to the next, values may go down
    if not ascending.all():
        raise ValueError("each document's hashes must be sorted ascending without duplicates")
    return offsets, hashes


def _meets_threshold(intersection, size_a, size_b, num: int, den: int) -> np.ndarray:
    """bool (m,): J >= num / den, i.e. inter * (den + num) >= num * (|A| + |B|), exactly.

    intersection, size_a, size_b: int64, shape (m,). Values stay far below 2**63 because
    num, den <= MAX_THRESHOLD_DENOMINATOR and sizes < 2**32.
    """
    return intersection * (den + num) >= num * (size_a + size_b)


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


# --- tokens ------------------------------------------------------------------------------------


def _token_sets_by_slot(offsets, hashes, doc_of_slot) -> tuple[np.ndarray, np.ndarray]:
    """Every set as ascending frequency-ordered token ids, documents laid out in slot order.

    offsets: int64 (n_docs + 1,); hashes: uint64 (N,); doc_of_slot: int64 (n_docs,), the
    document in each slot. Returns (set_offsets int64 (n_docs + 1,), set_tokens uint32 (N,)):
    slot s's tokens are ``set_tokens[set_offsets[s]:set_offsets[s+1]]``, rarest first.
    """
    sizes = np.diff(offsets)
    slot_of_doc = np.empty_like(doc_of_slot)
    slot_of_doc[doc_of_slot] = np.arange(doc_of_slot.shape[0])
    # One value sort of (slot << 32 | token) both moves each set to its slot and orders it.
    keys = np.repeat(slot_of_doc.astype(np.uint64), sizes)
    keys <<= _SHIFT32
    keys |= _frequency_ordered_tokens(hashes)
    keys.sort()
    set_tokens = (keys & _LOW32).astype(np.uint32)
    return offsets_from_counts(sizes[doc_of_slot]), set_tokens


def _frequency_ordered_tokens(hashes) -> np.ndarray:
    """Dense token id of every element, uint32 (N,), for hashes uint64 (N,).

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
    frequency = np.diff(value_starts, append=hashes.shape[0])
    value_of_element = np.cumsum(starts_value, dtype=np.uint32)
    value_of_element -= 1
    # Values are already in ascending order, so a stable sort by frequency breaks ties by value.
    token_of_value = np.empty(value_starts.shape[0], dtype=np.uint32)
    token_of_value[np.argsort(frequency, kind="stable")] = np.arange(
        value_starts.shape[0], dtype=np.uint32
    )
    tokens = np.empty(hashes.shape[0], dtype=np.uint32)
    tokens[order] = token_of_value[value_of_element]
    return tokens


# --- candidates --------------------------------------------------------------------------------


def _prefix_lengths(sizes, num: int, den: int) -> np.ndarray:
    """int64 (n,): ``s - ceil(s * num / den) + 1`` per set size s (int64 (n,)), 0 when s = 0.

    That is how many rarest tokens must be looked at so that a set sharing at least
    ``ceil(s * num / den)`` tokens with it shares one of them (module docstring, step 3).
    """
    min_overlap = -((-sizes * num) // den)  # ceil without floats
    return np.where(sizes > 0, sizes - min_overlap + 1, 0)


class _PrefixIndex(NamedTuple):
    """The inverted index of probe prefixes and, per index-prefix entry, its run of partners.

    posting_slots: int64 (P,), the slot of each probe-prefix entry, in (token, slot) order.
    partner_starts, partner_ends: int64 (L,), for each index-prefix entry (in slot order) the
        half-open range of ``posting_slots`` positions it pairs with.
    entries_before_slot: int64 (n_slots + 1,), CSR offsets of each slot's index-prefix entries.
    pairs_before_slot: int64 (n_slots + 1,), cumulative candidate pairs (with repeats) of the
        slots before each slot.
    """

    posting_slots: np.ndarray
    partner_starts: np.ndarray
    partner_ends: np.ndarray
    entries_before_slot: np.ndarray
    pairs_before_slot: np.ndarray

    @classmethod
    def build(cls, set_offsets, set_tokens, slot_sizes, num: int, den: int) -> _PrefixIndex:
        """Index the prefixes of the sets (``_token_sets_by_slot`` layout) for threshold num/den.

        set_offsets: int64 (n_slots + 1,); set_tokens: uint32 (N,); slot_sizes: int64 (n_slots,).
        """
        n_slots = slot_sizes.shape[0]
        probe_lengths = _prefix_lengths(slot_sizes, num, den)
        index_lengths = _prefix_lengths(slot_sizes, 2 * num, den + num)
        entry_slots = np.repeat(np.arange(n_slots, dtype=np.int64), probe_lengths)
        within_set = _concatenated_ranges(np.zeros(n_slots, dtype=np.int64), probe_lengths)
        entry_tokens = set_tokens[set_offsets[entry_slots] + within_set]
        is_index_entry = within_set < index_lengths[entry_slots]
        del within_set

        posting_keys = entry_tokens.astype(np.uint64) << _SHIFT32
        posting_keys |= entry_slots.astype(np.uint64)
        del entry_tokens, entry_slots
        entry_of_posting = np.argsort(posting_keys)
        posting_keys = posting_keys[entry_of_posting]
        posting_slots = (posting_keys & _LOW32).astype(np.int64)

        # Left sides: index-prefix entries, taken in posting order so that the run-end queries
        # below come sorted (searchsorted is fast on sorted queries, very slow on random ones).
        left_postings = np.flatnonzero(is_index_entry[entry_of_posting])
        last_partner_slot = _last_partner_slots(slot_sizes, num, den)
        run_end_keys = posting_keys[left_postings] & ~_LOW32
        run_end_keys |= last_partner_slot[posting_slots[left_postings]].astype(np.uint64)
        run_ends = np.searchsorted(posting_keys, run_end_keys, side="right")
        del posting_keys, run_end_keys

        # Same runs, re-ordered from posting order to slot order by scattering them to their
        # entries (entry numbers increase with slot) and dropping the probe-only entries.
        by_entry = np.zeros(is_index_entry.shape[0], dtype=np.int64)
        left_entries = entry_of_posting[left_postings]
        by_entry[left_entries] = left_postings + 1
        partner_starts = by_entry[is_index_entry]
        by_entry[left_entries] = run_ends
        partner_ends = by_entry[is_index_entry]

        entries_before_slot = offsets_from_counts(index_lengths)
        pairs_before_entry = offsets_from_counts(partner_ends - partner_starts)
        return cls(
            posting_slots=posting_slots,
            partner_starts=partner_starts,
            partner_ends=partner_ends,
            entries_before_slot=entries_before_slot,
            pairs_before_slot=pairs_before_entry[entries_before_slot],
        )

    def candidates(self, first_slot: int, end_slot: int) -> tuple[np.ndarray, np.ndarray]:
        """Distinct candidate pairs whose smaller side is a slot in [first_slot, end_slot).

        Returns (left, right): int64 (m,) slots, left < right, sorted by (left, right).
        """
        first = self.entries_before_slot[first_slot]
        end = self.entries_before_slot[end_slot]
        starts = self.partner_starts[first:end]
        run_lengths = self.partner_ends[first:end] - starts
        right = self.posting_slots[_concatenated_ranges(starts, run_lengths)]
        left = np.repeat(_slot_of_entries(self.entries_before_slot, first_slot, end_slot), run_lengths)
        pair_keys = (left.astype(np.uint64) << _SHIFT32) | right.astype(np.uint64)
        del left, right
        pair_keys.sort()
        # A pair sharing several prefix tokens was generated once per token.
        is_first = np.empty(pair_keys.shape[0], dtype=bool)
        is_first[:1] = True
        np.not_equal(pair_keys[1:], pair_keys[:-1], out=is_first[1:])
        pair_keys = pair_keys[is_first]
        return (pair_keys >> _SHIFT32).astype(np.int64), (pair_keys & _LOW32).astype(np.int64)


def _slot_of_entries(entries_before_slot, first_slot: int, end_slot: int) -> np.ndarray:
    """int64: the slot of each index-prefix entry of slots [first_slot, end_slot), in order."""
    counts = np.diff(entries_before_slot[first_slot : end_slot + 1])
    return np.repeat(np.arange(first_slot, end_slot, dtype=np.int64), counts)


def _last_partner_slots(slot_sizes, num: int, den: int) -> np.ndarray:
    """int64 (n_slots,): the last slot whose set can be similar to each slot's as the larger one.

    slot_sizes: int64 (n_slots,), ascending. A larger set y suits x only if
    |y| * num <= |x| * den (the length filter), i.e. |y| <= floor(|x| * den / num).
    """
    largest_size = slot_sizes * den // num
    return np.searchsorted(slot_sizes, largest_size, side="right") - 1


def _chunk_ranges(cumulative, budget: int) -> list[tuple[int, int]]:
    """Split items [0, n) into consecutive ranges of total weight <= budget where possible.

    cumulative: int64 (n + 1,), weight of the items before each item (cumulative[0] == 0).
    A single item heavier than the budget gets a range of its own.
    """
    n_items = cumulative.shape[0] - 1
    ranges = []
    start = 0
    while start < n_items:
        end = int(np.searchsorted(cumulative, cumulative[start] + budget, side="right")) - 1
        end = min(max(end, start + 1), n_items)
        ranges.append((start, end))
        start = end
    return ranges


# --- verification ------------------------------------------------------------------------------


def _intersection_sizes(set_offsets, set_tokens, left, right, budget: int) -> np.ndarray:
    """int64 (m,): |set(left[i]) & set(right[i])| for every pair, in batches of ``budget`` elements.

    set_offsets: int64 (n_slots + 1,); set_tokens: uint32 (N,), ascending within each set.
    left, right: int64 (m,), slots.
    """
    pair_elements = np.diff(set_offsets)[left] + np.diff(set_offsets)[right]
    intersection = np.empty(left.shape[0], dtype=np.int64)
    for first, end in _chunk_ranges(offsets_from_counts(pair_elements), budget):
        intersection[first:end] = _batch_intersection_sizes(
            set_offsets, set_tokens, left[first:end], right[first:end]
        )
    return intersection


def _batch_intersection_sizes(set_offsets, set_tokens, left, right) -> np.ndarray:
    """``_intersection_sizes`` for one batch: int64 (m,), m < 2**32."""
    n_pairs = left.shape[0]
    # Per pair, left's tokens then right's: with the pair number in the high half, the keys
    # form two ascending runs per pair, which the stable sort (timsort) merges in near-linear
    # time -- several times faster here than the default sort on the same keys.
    starts = np.column_stack((set_offsets[left], set_offsets[right])).ravel()
    lengths = np.column_stack(
        (set_offsets[left + 1] - set_offsets[left], set_offsets[right + 1] - set_offsets[right])
    ).ravel()
    keys = np.repeat(np.arange(n_pairs, dtype=np.uint64), lengths[0::2] + lengths[1::2])
    keys <<= _SHIFT32
    keys |= set_tokens[_concatenated_ranges(starts, lengths)]
    keys.sort(kind="stable")
    # Neither set repeats a token, so each equal neighbour is one shared token.
    shared = keys[1:] == keys[:-1]
    pair_of_shared = (keys[1:][shared] >> _SHIFT32).astype(np.int64)
    return np.bincount(pair_of_shared, minlength=n_pairs)


def _concatenated_ranges(starts, lengths) -> np.ndarray:
    """int64: ``concatenate([arange(s, s + n) for s, n in zip(starts, lengths)])``, no loop.

    starts, lengths: int64 (n,), lengths >= 0.
    """
    run_offsets = np.cumsum(lengths) - lengths
    values = np.repeat(starts - run_offsets, lengths)
    values += np.arange(values.shape[0], dtype=np.int64)
    return values
