"""Exact verification of candidate pairs on the host: Jaccard of the two shingle-hash sets.

Two steps:
1. ``plausible`` drops candidates whose signatures agree in so few columns that a Jaccard at
   or above the threshold is implausible: for a pair of true Jaccard J, the number of agreeing
   columns of K is Binomial(K, J), so a pair with J >= t shows x or fewer agreements with
   probability at most BinomCDF(x; K, t). Only pairs below a cut-off whose tail is under
   SIGNATURE_TAIL (1e-9) are dropped; this costs K comparisons per pair and removes most of
   the false candidates before the expensive step.
2. ``pair_jaccard`` computes |A ∩ B| / |A ∪ B| exactly. Shingle sets are not kept from the
   signature pass (8 bytes per shingle of the whole corpus, 8x the text for char n-grams): the
   documents that appear in candidate pairs are shingled once more, by the backend, whose
   ``shingle_sets`` makes each document's set (on the device, for the GPU backend) so that
   only the distinct hashes cross to the host, already in the order the sparse rows need.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import scipy.sparse

from .ragged import offsets_from_counts, weighted_ranges
from .shingling import ShingleBatch, hashes_to_columns, set_rows

SIGNATURE_TAIL = 1e-9


def agreement_cutoff(num_columns: int, threshold: float, tail: float = SIGNATURE_TAIL) -> int:
    """The largest x with BinomCDF(x; K, threshold) <= tail, or -1 if there is none.

    A pair whose signatures agree in at most x of K columns has Jaccard >= threshold with
    probability at most ``tail``.
    """
    if threshold >= 1.0:
        return num_columns - 1  # J = 1 means identical sets, so identical signatures
    log_p, log_q = math.log(threshold), math.log1p(-threshold)
    cdf, cutoff = 0.0, -1
    for x in range(num_columns + 1):
        log_pmf = (math.lgamma(num_columns + 1) - math.lgamma(x + 1) - math.lgamma(num_columns - x + 1)
                   + x * log_p + (num_columns - x) * log_q)
        cdf += math.exp(log_pmf)
        if cdf > tail:
            break
        cutoff = x
    return cutoff


def signature_agreements(signatures: np.ndarray, first, second, chunk: int = 1 << 16) -> np.ndarray:
    """Agreeing columns of each pair's signatures; signatures: uint32 (n, K) host, rows indexed
    by first/second (int64 (p,)). Returns int64 (p,)."""
    agree = np.empty(first.shape[0], dtype=np.int64)
    for start in range(0, first.shape[0], chunk):
        stop = start + chunk
        agree[start:stop] = (signatures[first[start:stop]] == signatures[second[start:stop]]).sum(axis=1)
    return agree


def plausible(signatures: np.ndarray, first, second, threshold: float) -> np.ndarray:
    """bool (p,): pairs that may reach the threshold (see the module docstring)."""
    cutoff = agreement_cutoff(signatures.shape[1], threshold)
    return signature_agreements(signatures, first, second) > cutoff


def rows_are_sets(batch: ShingleBatch) -> bool:
    """Whether every row of a host batch is strictly ascending (sorted, no repeats), as
    backend.shingle_sets makes them: one comparison per hash, no sort."""
    hashes = batch.hashes
    if hashes.shape[0] < 2:
        return True
    rising = hashes[1:] > hashes[:-1]
    # A row's first hash follows another row's last: no order is asked of that step.
    starts = np.asarray(batch.offsets[1:-1])
    starts = starts[(starts > 0) & (starts < hashes.shape[0])]
    rising[starts - 1] = True
    return bool(rising.all())


def set_columns(batch: ShingleBatch) -> tuple[np.ndarray, np.ndarray]:
    """The rows of document_sets for a host batch: (columns int64 (k,), each row's sorted,
    distinct hashes_to_columns of its hashes; counts int64 (n_docs,)).

    Rows that are sets already (backend.shingle_sets) are only mapped to columns; others
    (shingle_hashes: text order with repeats) are sorted and merged by shingling.set_rows.
    """
    if rows_are_sets(batch):
        return hashes_to_columns(batch.hashes), np.asarray(batch.counts(), dtype=np.int64)
    rows = set_rows(batch)
    return rows.indices.astype(np.int64, copy=False), np.diff(rows.indptr).astype(np.int64)


def document_sets(shingles_of: Callable[[np.ndarray], ShingleBatch], docs: np.ndarray,
                  doc_cost: np.ndarray, batch_cost: int, map_batches=map) -> scipy.sparse.csr_matrix:
    """The shingle sets of ``docs`` as a binary sparse matrix (host).

    shingles_of(docs): host ShingleBatch of the given documents: their sets
    (backend.shingle_sets), or their hashes with repeats in any order (set_columns sorts those).
    docs: int64 (m,) ascending; doc_cost: int64 (m,) text lengths in code points (a bound on
    the shingles), to shingle ``batch_cost`` at a time; map_batches: an order-keeping map over
    the batches (the in-memory store's runs threads).
    Row i is docs[i]'s set, with sorted, distinct column indices (canonical CSR).

    The column of a shingle is its 64-bit hash with the top bit flipped, viewed as int64
    (shingling.hashes_to_columns): an order-preserving map, so equal hashes share a column and
    sorted hashes are sorted columns, without a global ranking of all hashes. Some columns are
    negative; scipy's CSR arithmetic only compares column indices, which tests/test_verify.py
    checks.
    """

    def batch_sets(rows: tuple[int, int]):
        return set_columns(shingles_of(docs[rows[0] : rows[1]]))

    # The sets are written straight into one array sized by an upper bound (a document has at
    # most one shingle per code point, plus one): its pages are committed only as they are
    # written, so the sets are never held twice, and the bound costs address space only.
    columns = np.empty(int(doc_cost.sum()) + docs.shape[0], dtype=np.int64)
    counts, used = [], 0
    for part, count in map_batches(batch_sets, list(weighted_ranges(doc_cost, batch_cost))):
        if used + part.shape[0] > columns.shape[0]:  # doc_cost was not a bound after all
            columns = np.concatenate([columns[:used], np.empty(max(used, part.shape[0]), np.int64)])
        columns[used : used + part.shape[0]] = part
        used += part.shape[0]
        counts.append(count)
    # Shrink in place (realloc) rather than slice: scipy copies an index array that is a small
    # view of a larger buffer, which would hold the sets twice after all.
    columns.resize(used, refcheck=False)
    return sets_matrix(columns, np.concatenate(counts) if counts else np.zeros(0, np.int64))


def sets_matrix(columns: np.ndarray, counts: np.ndarray) -> scipy.sparse.csr_matrix:
    """Shingle sets as the binary CSR matrix pair_jaccard reads: columns int64, each row's
    sorted and distinct (shingling.hashes_to_columns), row i the next counts[i] of them
    (int64 (n,)); host. The one place this matrix is made from stored or spilled sets."""
    matrix = scipy.sparse.csr_matrix((np.ones(columns.shape[0], np.int8), columns, offsets_from_counts(counts)),
                                     shape=(counts.shape[0], np.iinfo(np.int64).max))
    matrix.has_sorted_indices = True
    return matrix


def pair_jaccard(sets: scipy.sparse.csr_matrix, first, second, chunk_elements: int = 1 << 21) -> np.ndarray:
    """Exact Jaccard |A ∩ B| / |A ∪ B| of rows ``first[i]``, ``second[i]`` of ``sets``.

    sets: binary CSR (document_sets); first, second: int64 (p,) row indices of non-empty rows.
    Returns float64 (p,). Pairs go ``chunk_elements`` set elements at a time (memory).
    """
    sizes = np.diff(sets.indptr)
    jaccard = np.empty(first.shape[0], dtype=np.float64)
    for start, stop in weighted_ranges(sizes[first] + sizes[second], chunk_elements):
        a, b = first[start:stop], second[start:stop]
        # Row-wise product of two canonical CSR matrices: a sorted merge per pair, in C++; it
        # keeps only non-zeros, so each row's entry count is |A ∩ B|.
        inter = np.diff(sets[a].multiply(sets[b]).indptr)
        jaccard[start:stop] = inter / (sizes[a] + sizes[b] - inter)
    return jaccard
