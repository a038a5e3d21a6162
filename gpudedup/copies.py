"""Identical copies: documents whose shingle set equals that of an earlier document.

A corpus with a thousand copies of one boilerplate page puts the copies into one bucket of
every band, where each is paired with ``bucket_window`` others: a million such documents give
hundreds of millions of candidate pairs, all of Jaccard 1. This stage takes the copies out
before LSH instead:

1. ``same_signature_rows`` groups the documents whose MinHash signatures are identical (a
   64-bit hash of each row, a stable sort, and a column-by-column comparison with the group's
   first row, so a hash collision never groups two different signatures).
2. ``identical_copies`` checks each later member of a group exactly against the group's first
   document, a batch of documents at a time, with verification's exact Jaccard: a member whose
   Jaccard is 1.0 has the same shingle set and is a confirmed copy.

A confirmed copy has the same band keys and the same Jaccard with every document as its
group's first document, so the copies need no place in the buckets: the first document stands
for the group, and each copy becomes the verified pair (first, copy) with Jaccard 1.0. The
clusters are the same; what changes is that pairs.parquet lists a group of copies as a star
around its first document rather than as every pair of the group. A member that turns out not
to be a copy (its signature agrees by chance) stays in LSH like any other document, and its
check is not reported (LSH may pair it with the group's first document again).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .hashing import poly_hash64_rows
from .ragged import offsets_from_counts, ragged_arange, weighted_ranges
from .stages import Progress
from .verify import signature_agreements


@dataclass
class Copies:
    """Confirmed copies, as corpus row indices.

    first: int64 (c,) the first document of a group; member: int64 (c,) a later document with
    the same shingle set (first < member), ascending by (first, member); jaccard: float64 (c,),
    all 1.0 (the exact Jaccard that confirmed them).
    """

    first: np.ndarray
    member: np.ndarray
    jaccard: np.ndarray

    @classmethod
    def none(cls) -> "Copies":
        empty = np.zeros(0, np.int64)
        return cls(empty, empty, np.zeros(0, np.float64))


def same_signature_rows(signatures: np.ndarray, row_hash: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rows with the same signature as an earlier row.

    signatures: uint32 (m, K), host, or anything that gathers rows by ``signatures[rows]``
    (streaming.SpilledSignatures); row_hash: uint64 (m,) poly_hash64_rows of the rows, when
    already known. Returns (first, member), int64 (q,) row indices with first < member and
    equal signature rows; first is the lowest row of its group; ascending by (first, member).
    """
    if signatures.shape[0] < 2:
        empty = np.zeros(0, np.int64)
        return empty, empty
    if row_hash is None:
        row_hash = poly_hash64_rows(signatures)
    order = np.argsort(row_hash, kind="stable")  # stable: a group's rows stay ascending
    sorted_hash = row_hash[order]
    starts = np.ones(order.shape[0], dtype=bool)
    starts[1:] = sorted_hash[1:] != sorted_hash[:-1]
    group_first = order[np.flatnonzero(starts)][np.cumsum(starts) - 1]
    later = ~starts
    first, member = group_first[later], order[later]
    # The hash only proposes groups; rows must agree in every column to be grouped.
    same = signature_agreements(signatures, first, member) == signatures.shape[1]
    first, member = first[same], member[same]
    by_group = np.lexsort((member, first))
    return first[by_group].astype(np.int64), member[by_group].astype(np.int64)


# Rounds of identical_copies: a group whose first document is not a copy of the others (a
# superset whose extra shingles never hold a minimum, a 32-bit hash collision) is checked
# again against the first of the rest; a group needing more rounds than this keeps its last
# unconfirmed members in LSH, where they are still found, at m * bucket_window pairs.
COPY_ROUNDS = 4


def identical_copies(signatures: np.ndarray, active: np.ndarray, lengths: np.ndarray, batch_cost: int,
                     exact_jaccard: Callable[[np.ndarray, np.ndarray], np.ndarray],
                     progress: Progress | None = None, row_hash: np.ndarray | None = None) -> Copies:
    """Check the members of every same-signature group exactly against the group's first
    document; those that are not copies of it are checked in the next round against the first
    of them, up to COPY_ROUNDS rounds.

    signatures: uint32 (m, K) host, the rows of the documents ``active`` (int64 (m,),
    ascending corpus rows); lengths: int64 (n,) text lengths in code points over the corpus.
    exact_jaccard(first, second): float64 exact Jaccard of corpus-row pairs. The members go
    ``batch_cost`` code points at a time (counting both documents of a pair), so the shingle
    sets alive at once stay about one batch however many copies there are.
    """
    progress = progress or Progress()
    first, member = same_signature_rows(signatures, row_hash)
    progress.start("Checking identical copies", first.shape[0])
    first, member = active[first], active[member]
    confirmed_first, confirmed_member = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for _ in range(COPY_ROUNDS):
        if first.shape[0] == 0:
            break
        jaccard = np.empty(first.shape[0], np.float64)
        for start, stop in weighted_ranges(lengths[first] + lengths[member], batch_cost):
            jaccard[start:stop] = exact_jaccard(first[start:stop], member[start:stop])
            progress.advance(stop - start)
        # |A ∩ B| / |A ∪ B| is exactly 1.0 only for equal sets (inter / inter).
        same = jaccard == 1.0
        confirmed_first.append(first[same])
        confirmed_member.append(member[same])
        first, member = next_round(first[~same], member[~same])
    first, member = np.concatenate(confirmed_first), np.concatenate(confirmed_member)
    order = np.lexsort((member, first))
    return Copies(first[order], member[order], np.ones(order.shape[0], np.float64))


def next_round(first: np.ndarray, member: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The unconfirmed members of each group (first, member: int64 (u,), ascending by (first,
    member)) as the next round's pairs: the lowest of them is the group's new first document."""
    if first.shape[0] == 0:
        return first, member
    starts = np.ones(first.shape[0], dtype=bool)
    starts[1:] = first[1:] != first[:-1]
    new_first = member[np.flatnonzero(starts)][np.cumsum(starts) - 1]
    return new_first[~starts], member[~starts]


def implied_pairs(a: np.ndarray, b: np.ndarray, first: np.ndarray, member: np.ndarray,
                  n_docs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair that a list of pairs stands for once groups of copies are spelled out.

    a, b: int64 (p,) pairs of documents (a != b), for example the verified pairs; first,
    member: int64 (c,) the copies (Copies.first, Copies.member, or any pairs of documents with
    identical shingle sets). A copy has every Jaccard of the document it copies, so a pair
    (x, y) stands for every (x', y') with x' a copy of x or x itself and likewise y', and the
    documents of one group of copies are pairs of each other.

    Returns (a int64 (q,), b int64 (q,), source int64 (q,)) with a < b, each pair once,
    ascending: source is the index in the input of a pair it came from, or -1 for a pair
    inside one group (Jaccard 1). Used where pairs are compared with an all-pairs truth
    (evaluate.py, tests); the output is quadratic in the size of a group.
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    graph = coo_matrix((np.ones(first.shape[0], np.int8), (first, member)), shape=(n_docs, n_docs))
    _, group = connected_components(graph, directed=False)
    # The documents of each group, as a ragged array over group numbers.
    by_group = np.argsort(group, kind="stable")
    size = np.bincount(group, minlength=n_docs)
    start = offsets_from_counts(size)[:-1]

    def spelled_out(x, y, source):
        count = size[group[x]] * size[group[y]]
        pair, k = ragged_arange(count)
        wide = size[group[y[pair]]]
        x2 = by_group[start[group[x[pair]]] + k // wide]
        y2 = by_group[start[group[y[pair]]] + k % wide]
        return np.minimum(x2, y2), np.maximum(x2, y2), source[pair]

    listed = spelled_out(a, b, np.arange(a.shape[0], dtype=np.int64))
    # Inside a group: every ordered pair of its documents, then the ones with x < y.
    groups = np.flatnonzero(size > 1)
    inside = spelled_out(by_group[start[groups]], by_group[start[groups]], np.full(groups.shape[0], -1, np.int64))
    x, y, source = (np.concatenate(parts) for parts in zip(listed, inside))
    distinct = x != y
    x, y, source = x[distinct], y[distinct], source[distinct]
    codes = x * np.int64(max(n_docs, 1)) + y
    _, once = np.unique(codes, return_index=True)
    return x[once], y[once], source[once]
