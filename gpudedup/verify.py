"""Exact verification of candidate pairs on the host: Jaccard of the two shingle-hash sets.

Shingle sets are not kept from the signature pass: they would cost 8 bytes per shingle of the
whole corpus (8x the text for char n-grams). The documents of each chunk of candidate pairs
are shingled again instead, by the backend, and only their hashes cross to the host.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .ragged import gather_rows
from .shingling import ShingleBatch, unique_ranks_per_row


def intersection_sizes(offsets, ranks, first, second) -> np.ndarray:
    """|A ∩ B| for pairs of rows of a ragged array of per-row distinct ranks.

    offsets: int64 (n + 1,); ranks: int64 (U,) distinct within each row, < 2**32;
    first, second: int64 (p,) row indices. Returns int64 (p,).
    """
    pair = np.arange(first.shape[0], dtype=np.int64)
    a_index, a_offsets = gather_rows(offsets, first)
    b_index, b_offsets = gather_rows(offsets, second)
    # (pair, rank) keys of both sides in one sorted array: an element of A ∩ B shows up as two
    # equal neighbours, because each side holds a rank at most once.
    keys = np.concatenate(
        [
            (np.repeat(pair, np.diff(a_offsets)) << 32) | ranks[a_index],
            (np.repeat(pair, np.diff(b_offsets)) << 32) | ranks[b_index],
        ]
    )
    keys.sort()
    repeated = keys[1:][keys[1:] == keys[:-1]]
    return np.bincount(repeated >> 32, minlength=first.shape[0]).astype(np.int64)


def pair_jaccard(sets_of: Callable[[np.ndarray], ShingleBatch], first, second, cost,
                 chunk_cost: int, on_chunk: Callable[[int], None] = lambda pairs: None) -> np.ndarray:
    """Exact Jaccard |A ∩ B| / |A ∪ B| of every pair; float64 (p,), host.

    sets_of(docs): the shingle hashes (ShingleBatch on the host, repeats allowed) of the
    documents ``docs`` (int64 (m,), ascending, distinct), row i for docs[i].
    first, second: int64 (p,) document indices; no document in a pair may be empty.
    cost: int64 (p,), the size of each pair's two texts; pairs are verified in chunks whose
    cost adds up to about ``chunk_cost``, so memory follows the chunk, not the corpus.
    on_chunk(pairs) is called after each chunk (progress).
    """
    jaccard = np.empty(first.shape[0], dtype=np.float64)
    total = np.cumsum(cost)
    start = 0
    while start < first.shape[0]:
        spent = total[start - 1] if start else 0
        stop = max(int(np.searchsorted(total, spent + chunk_cost, side="right")), start + 1)
        a, b = first[start:stop], second[start:stop]
        docs = np.unique(np.concatenate([a, b]))
        offsets, ranks, _ = unique_ranks_per_row(sets_of(docs))
        a_row, b_row = np.searchsorted(docs, a), np.searchsorted(docs, b)
        inter = intersection_sizes(offsets, ranks, a_row, b_row)
        sizes = np.diff(offsets)
        jaccard[start:stop] = inter / (sizes[a_row] + sizes[b_row] - inter)
        on_chunk(stop - start)
        start = stop
    return jaccard
