"""Exact verification of candidate pairs on the host: Jaccard of the two shingle-hash sets.

Two steps:
1. ``plausible`` drops candidates whose signatures agree in so few columns that a Jaccard at
   or above the threshold is implausible: for a pair of true Jaccard J, the number of agreeing
   columns of K is Binomial(K, J), so a pair with J >= t shows x or fewer agreements with
   probability at most BinomCDF(x; K, t). Only pairs below a cut-off whose tail is under
   SIGNATURE_TAIL (1e-9) are dropped; this costs K comparisons per pair and removes most of
   the false candidates before the expensive step.
2. ``pair_jaccard`` computes |A ∩ B| / |A ∪ B| exactly. A run in memory on the host keeps the
   shingle sets of its signature pass where they turn out small, and an index add
   keeps them whatever they take (pipeline.memory.MemoryStore's kept_sets_bytes); they are read
   in place. Otherwise (SET_ELEMENT_BYTES per shingle of the whole corpus, up to 9x the text
   for char n-grams; a run on a work directory or a GPU) the documents that appear in
   candidate pairs are shingled once more, by the backend, whose ``shingle_sets`` makes each
   document's set (on the device, for the GPU backend) so that only the distinct hashes cross
   to the host, already in the order the sparse rows need.

Intersections are counted by a sorted merge of the two rows per pair, read in place from the
CSR arrays: the C loops built at install, or numba's (verify_kernels.py) where those were not
built and numba's route is taken (compiled.py). scipy's row-wise product
(``scipy_intersections``) is the reference, and the route taken otherwise or where the
environment sets GPUDEDUP_CPU_KERNELS=numpy. Both routes give exact counts, and the Jaccard
is computed from them in one place (``jaccard_of``), so both give the same float64 bit for bit.

Where only pairs at or above a threshold t matter, ``pair_jaccard_at_least`` rules out pairs
by two bounds, both exact (zero error). Let J(i) be the Jaccard as ``jaccard_of`` computes it
for sets of sizes a <= b with i elements in common: float64 i / (a + b - i), correctly rounded.
J(i) never decreases as i grows (the exact quotient rises; rounding keeps order), so a pair
reaches t exactly when its intersection reaches ``needed``, the least i <= a with J(i) >= t
(``needed_intersections``: it starts from ceil(t (a + b) / (1 + t)) and steps by J itself, so
float rounding in the start costs steps, never a wrong answer).
- size bound: the most a pair can reach is J(a) = a / b; if that is below t (no i qualifies),
  the pair is ruled out with no merge at all;
- merge bound: an element passed over without a match is outside the intersection, so once
  more than a - needed elements of A (or b - needed of B) have been, the merge stops.
A pair is ruled out only if its Jaccard, computed in full, would be below t; every other pair
gets its exact Jaccard. No approximation is involved: the outcome is that of pair_jaccard
followed by ``>= t``. The pipeline checks pairs this way wherever only the threshold matters
(verification, identical copies at t = 1, index adds and queries), so a rejected pair's
Jaccard is not known: DedupResult.checked_jaccard holds BELOW_THRESHOLD for it, and the
report counts rejected pairs without a histogram of their values.
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional, Union

import numpy as np

from ..compiled import announce_compiling, c_loops, compiled_route
from .ragged import offsets_from_counts, ragged_take, weighted_ranges
from .shingling import ShingleBatch, hashes_to_columns, set_rows
from ..threads import map_parallel

if TYPE_CHECKING:
    import scipy.sparse

SIGNATURE_TAIL = 1e-9

# pair_jaccard_at_least's value for a pair whose Jaccard is below the threshold: no Jaccard is
# negative, and it fails every ``>= threshold`` test.
BELOW_THRESHOLD = -1.0


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


def signature_agreements(signatures: Any, first, second, chunk: int = 1 << 16) -> np.ndarray:
    """Agreeing columns of each pair's signatures; signatures: uint32 (n, K) host, rows indexed
    by first/second (int64 (p,)), or anything that gathers such rows by ``[positions]`` (a
    staged store's). Returns int64 (p,): counted in place by the kernel (verify_kernels) from
    an array, else by numpy on gathered rows ``chunk`` pairs at a time."""
    agree = np.empty(first.shape[0], dtype=np.int64)
    kernels = merge_kernels()
    if kernels is not None and isinstance(signatures, np.ndarray):  # not a store's row gatherer
        kernels.signature_agreements(np.ascontiguousarray(signatures), np.ascontiguousarray(first, dtype=np.int64),
                                     np.ascontiguousarray(second, dtype=np.int64), agree)
        return agree
    for start in range(0, first.shape[0], chunk):
        stop = start + chunk
        agree[start:stop] = (signatures[first[start:stop]] == signatures[second[start:stop]]).sum(axis=1)
    return agree


def plausible(signatures: Any, first, second, threshold: float) -> np.ndarray:
    """bool (p,): pairs that may reach the threshold (see the module docstring); signatures
    as signature_agreements takes them."""
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
                  doc_cost: np.ndarray, batch_cost: int, map_batches=map) -> "SetArrays":
    """The shingle sets of ``docs`` as the arrays of a binary CSR matrix (SetArrays, host).

    shingles_of(docs): host ShingleBatch of the given documents: their sets
    (backend.shingle_sets), or their hashes with repeats in any order (set_columns sorts those).
    docs: int64 (m,) ascending; doc_cost: int64 (m,) text lengths in code points (a bound on
    the shingles), to shingle ``batch_cost`` at a time; map_batches: an order-keeping map over
    the batches (the in-memory store's runs threads).
    Row i is docs[i]'s set, with sorted, distinct column indices (canonical CSR).

    The column of a shingle is its 64-bit hash with the top bit flipped, viewed as int64
    (shingling.hashes_to_columns): an order-preserving map, so equal hashes share a column and
    sorted hashes are sorted columns, without a global ranking of all hashes. Some columns are
    negative; the merges and scipy's CSR arithmetic (as_set_matrix) only compare column
    indices, which tests/test_verify.py checks.
    """

    def batch_sets(rows: tuple[int, int]):
        return set_columns(shingles_of(docs[rows[0] : rows[1]]))

    sets = SetsBuilder(doc_cost)
    for columns, counts in map_batches(batch_sets, list(weighted_ranges(doc_cost, batch_cost))):
        sets.append(columns, counts)
    return sets.arrays()


# Bytes per shingle of a set: its int64 column, and the int8 value scipy's matrix adds where the
# reference route makes one (as_set_matrix), counted always so that either route fits.
SET_ELEMENT_BYTES = 9


class SetsBuilder:
    """Shingle sets gathered batch by batch, in row order, into one SetArrays (host).

    The columns are written straight into one int64 array sized by an upper bound on the
    elements: its pages are committed only as they are written, so the sets are never held
    twice, and the bound costs address space only. Used by document_sets and by a signature
    pass that keeps the sets it made (pipeline.signatures.signature_pass), which gives a
    ``limit``: the sets are let go (``kept`` turns False) as soon as they would take more than
    that many bytes (SET_ELEMENT_BYTES a shingle), counted as they come and projected over the
    units still to come at the rate so far, so that a pass whose sets will not fit stops
    making them after its first batches. (A projection that overshoots loses a saving, never
    memory: the last one is the sets' own size.)
    """

    def __init__(self, lengths: np.ndarray, limit: Optional[int] = None):
        """lengths: int64 (n,), each document's code points (or tokens) to come, in row order:
        a document has at most one shingle per unit, plus one; limit: bytes, or None for none."""
        self.lengths, self.limit = lengths, limit
        self.total_units = int(np.sum(lengths))
        self.columns = np.empty(self.total_units + lengths.shape[0], dtype=np.int64)
        self.counts: list[np.ndarray] = []
        self.used = self.rows = self.units = 0
        self.kept = True

    def append(self, columns: np.ndarray, counts: np.ndarray) -> None:
        """The next rows: set_columns' (columns int64, counts int64 (rows,)) of a batch; past
        the limit (as projected), every set so far is let go, and later rows are not kept."""
        if not self.kept:
            return
        self.units += int(self.lengths[self.rows : self.rows + counts.shape[0]].sum())
        self.rows += counts.shape[0]
        if self.limit is not None:
            projected = (self.used + columns.shape[0]) * max(self.total_units, 1) / max(self.units, 1)
            if SET_ELEMENT_BYTES * projected > self.limit:
                self.kept, self.columns, self.counts = False, np.zeros(0, np.int64), []
                return
        if self.used + columns.shape[0] > self.columns.shape[0]:  # the bound was not one after all
            grown = np.empty(self.used + max(self.used, columns.shape[0]), np.int64)
            grown[: self.used] = self.columns[: self.used]
            self.columns = grown
        self.columns[self.used : self.used + columns.shape[0]] = columns
        self.used += columns.shape[0]
        self.counts.append(counts)

    def arrays(self) -> "SetArrays":
        """The rows appended so far, as set_arrays makes them; the builder is spent."""
        assert self.kept, "sets let go past their limit"
        # Shrink in place (realloc) rather than slice: a small view of a larger buffer would hold
        # the whole buffer, and scipy (as_set_matrix) copies such a view: the sets twice.
        columns, self.columns = self.columns, np.zeros(0, np.int64)
        columns.resize(self.used, refcheck=False)
        return set_arrays(columns, np.concatenate(self.counts) if self.counts else np.zeros(0, np.int64))


def stacked_sets(parts: list[tuple[np.ndarray, np.ndarray]]) -> "SetArrays":
    """The rows of every part in turn as one SetArrays, in one concatenation. parts: (counts
    int64 (k,), columns int64 (sum counts,)) each, as csr_parts and the index's stored sets
    give them; host."""
    if not parts:
        return set_arrays(np.zeros(0, np.int64), np.zeros(0, np.int64))
    counts, columns = zip(*parts)
    return set_arrays(np.concatenate(columns), np.concatenate(counts))


def csr_parts(sets: "SetRows") -> tuple[np.ndarray, np.ndarray]:
    """(counts int64, columns int64) of sets, for stacked_sets."""
    return np.diff(sets.indptr).astype(np.int64), sets.indices.astype(np.int64, copy=False)


def rows_of(sets: "SetRows", rows: np.ndarray) -> "SetArrays":
    """Rows ``rows`` (int64 (k,), ascending) of sets, as one SetArrays (host): a copy per run
    of consecutive rows (ragged_take), as most of a store's rows are asked for together
    (verification, an index add's commit)."""
    counts, columns = ragged_take(sets.indptr, sets.indices, rows)
    return set_arrays(columns, counts)


def set_arrays(columns: np.ndarray, counts: np.ndarray) -> "SetArrays":
    """Shingle sets as the arrays every route reads: columns int64, each row's sorted and
    distinct (shingling.hashes_to_columns), row i the next counts[i] of them (int64 (n,));
    host. The one place sets are put together from their columns."""
    return SetArrays(offsets_from_counts(np.asarray(counts, dtype=np.int64)), np.asarray(columns, dtype=np.int64))


def merge_kernels() -> Optional[ModuleType]:
    """The compiled merges: the C loops where they were built at install (compiled.c_loops),
    else verify_kernels (numba) where numba's route is taken (compiled.compiled_route: started in
    this process by a signature pass, or asked for by the switch), else None: then
    scipy_intersections counts, and numpy the signature agreements."""
    loops = c_loops()
    if loops is not None:
        return loops
    if not compiled_route():
        return None
    # (numba is heavy: imported with the kernels, when a run takes numba's route)
    from . import verify_kernels

    announce_compiling(verify_kernels.intersections_at_least)
    return verify_kernels


def jaccard_of(inter: np.ndarray, size_a: np.ndarray, size_b: np.ndarray) -> np.ndarray:
    """float64 (p,): inter / (size_a + size_b - inter), the one place a Jaccard is computed from
    counts (integer arrays (p,), host), whichever route counted them. Two empty sets: nan."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return inter / (size_a + size_b - inter)


def scipy_intersections(sets: "SetRows", first: np.ndarray, second: np.ndarray, chunk_elements: int = 1 << 21,
                        second_sets: Optional["SetRows"] = None) -> np.ndarray:
    """int64 (p,): |row first[i] of sets ∩ row second[i] of second_sets (default: sets)| by
    scipy's row-wise product (the reference route). Pairs go ``chunk_elements`` set elements at
    a time: the product copies both rows of every pair first."""
    sets_a = as_set_matrix(sets)
    sets_b = sets_a if second_sets is None else as_set_matrix(second_sets)
    sizes_a, sizes_b = np.diff(sets_a.indptr), np.diff(sets_b.indptr)
    inter = np.empty(first.shape[0], dtype=np.int64)
    for start, stop in weighted_ranges(sizes_a[first] + sizes_b[second], chunk_elements):
        # Row-wise product of two canonical CSR matrices: a sorted merge per pair, in C++; it
        # keeps only non-zeros, so each row's entry count is |A ∩ B|.
        inter[start:stop] = np.diff(sets_a[first[start:stop]].multiply(sets_b[second[start:stop]]).indptr)
    return inter


def pair_jaccard(sets: "SetRows", first, second, chunk_elements: int = 1 << 21) -> np.ndarray:
    """Exact Jaccard |A ∩ B| / |A ∪ B| of rows ``first[i]``, ``second[i]`` of ``sets``.

    sets: SetArrays (document_sets, set_arrays) or a binary CSR matrix; first, second: int64
    (p,) row indices of non-empty rows (two empty rows give nan). Returns float64 (p,), host. chunk_elements: the
    scipy route's pairs per step, in set elements (memory); the merge kernel copies nothing.
    """
    first, second = np.asarray(first, dtype=np.int64), np.asarray(second, dtype=np.int64)
    sizes = np.diff(sets.indptr)
    kernels = merge_kernels()
    if kernels is None:
        inter = scipy_intersections(sets, first, second, chunk_elements)
    else:
        inter = np.empty(first.shape[0], dtype=np.int64)
        kernels.intersections(*csr_arrays(sets), np.ascontiguousarray(first), np.ascontiguousarray(second), inter)
    return jaccard_of(inter, sizes[first], sizes[second])


def rows_jaccard_at_least(sets_of: Callable[[np.ndarray], "SetRows"], first, second,
                          threshold: float, threads: int = 1) -> np.ndarray:
    """pair_jaccard_at_least of the row pairs (first[i], second[i]) (int64 (p,), host) of a
    store: sets_of(docs) gives the set matrix of its rows ``docs`` (int64, ascending, distinct),
    asked once for every row of the pairs. Returns float64 (p,), host."""
    first, second = np.asarray(first, dtype=np.int64), np.asarray(second, dtype=np.int64)
    if first.shape[0] == 0:  # no sets to read (nor SciPy to load for them)
        return np.zeros(0, dtype=np.float64)
    docs = np.unique(np.concatenate([first, second]))
    return pair_jaccard_at_least(sets_of(docs), np.searchsorted(docs, first), np.searchsorted(docs, second),
                                 threshold, threads)


def needed_intersections(size_a: np.ndarray, size_b: np.ndarray, threshold: float) -> np.ndarray:
    """int64 (p,): for sets of sizes size_a, size_b (int64 (p,), host), the least i with
    jaccard_of(i, size_a, size_b) >= threshold; min(size_a, size_b) + 1 where no i up to the
    smaller size qualifies (the size bound). Exact: see the module docstring."""
    size_a, size_b = np.asarray(size_a, np.int64), np.asarray(size_b, np.int64)
    smaller = np.minimum(size_a, size_b)
    # The real root of i / (a + b - i) = t, give or take float rounding: a start, not the answer.
    start = np.ceil(threshold * (size_a + size_b).astype(np.float64) / (1.0 + threshold))
    needed = np.clip(np.nan_to_num(start), 0, smaller + 1).astype(np.int64)

    def reaches(i: np.ndarray, where: np.ndarray) -> np.ndarray:
        return jaccard_of(i[where], size_a[where], size_b[where]) >= threshold

    # J(i) never falls as i grows, so stepping down while one less still reaches t, then up
    # while this count does not, ends at the least count that does (or smaller + 1). Each
    # step looks again only at the pairs the last one moved (a step or two in all).
    where = np.flatnonzero(needed > 0)
    while where.shape[0]:
        where = where[reaches(needed - 1, where)]
        needed[where] -= 1
        where = where[needed[where] > 0]
    where = np.flatnonzero(needed <= smaller)
    while where.shape[0]:
        where = where[~reaches(needed, where)]
        needed[where] += 1
        where = where[needed[where] <= smaller[where]]
    return needed


def pair_jaccard_at_least(sets: "SetRows", first, second, threshold: float, threads: int = 1,
                          chunk_pairs: int = 1 << 18, second_sets: Optional["SetRows"] = None) -> np.ndarray:
    """The exact Jaccard of the pairs that reach ``threshold``; BELOW_THRESHOLD (-1.0) for the
    others.

    sets, first, second as for pair_jaccard; second_sets: where the second row of each pair is
    read (SetArrays or a set matrix: an index's stored sets against new documents' sets),
    ``sets`` when None; threshold: float in
    (0, 1]. Returns float64 (p,), host: value[i] == pair_jaccard(...)[i] wherever that is >=
    threshold, BELOW_THRESHOLD wherever it is below threshold or nan (two empty rows); the same
    on every route. Pairs are ruled out by the size and merge bounds of the module docstring
    where they can be. threads: the merge kernel's pairs are split over this many threads (it
    releases the GIL); chunk_pairs: pairs per step, so that the per-pair counts and bounds
    (about 60 bytes a pair) stay small next to the sets.
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
    first, second = np.ascontiguousarray(first, dtype=np.int64), np.ascontiguousarray(second, dtype=np.int64)
    jaccard = np.empty(first.shape[0], dtype=np.float64)
    kernels = merge_kernels()
    if kernels is None:  # scipy's product needs matrices: stored sets' rows of these pairs only
        if second_sets is None:
            sets, both = gathered_rows(sets, np.concatenate([first, second]))
            first, second = both[:first.shape[0]], both[first.shape[0]:]
        else:
            sets, first = gathered_rows(sets, first)
            second_sets, second = gathered_rows(second_sets, second)
    source_a = csr_arrays(sets)
    source_b = source_a if second_sets is None else csr_arrays(second_sets)
    # No threads for a handful of pairs (an index query): starting them would cost more.
    threads = threads if kernels is not None and first.shape[0] >= 1024 else 1
    for start in range(0, first.shape[0], chunk_pairs):
        stop = min(start + chunk_pairs, first.shape[0])
        jaccard[start:stop] = jaccard_at_least_chunk(sets, second_sets, source_a, source_b, first[start:stop],
                                                     second[start:stop], threshold, kernels, threads)
    return jaccard


def jaccard_at_least_chunk(sets: "SetRows", second_sets: Optional["SetRows"],
                           source_a: tuple[np.ndarray, np.ndarray], source_b: tuple[np.ndarray, np.ndarray],
                           first: np.ndarray, second: np.ndarray, threshold: float,
                           kernels: Optional[ModuleType], threads: int) -> np.ndarray:
    """pair_jaccard_at_least of one chunk of pairs (float64 (c,)); source_a, source_b: the
    (indptr, indices) of ``sets`` and of ``second_sets`` (csr_arrays). The kernel's merges run
    on ``threads`` threads, or scipy's product counts (kernels None)."""
    (indptr_a, indices_a), (indptr_b, indices_b) = source_a, source_b
    size_a = indptr_a[first + 1] - indptr_a[first]
    size_b = indptr_b[second + 1] - indptr_b[second]
    needed = needed_intersections(size_a, size_b, threshold)
    if kernels is None:
        # The size bound here too: scipy's product copies both rows of each pair it is given.
        # -1 marks a pair ruled out, as the kernel's RULED_OUT does.
        inter = np.full(first.shape[0], -1, dtype=np.int64)
        possible = np.flatnonzero(needed <= np.minimum(size_a, size_b))
        inter[possible] = scipy_intersections(sets, first[possible], second[possible], second_sets=second_sets)
    else:
        inter = np.empty(first.shape[0], dtype=np.int64)

        def merge(span: tuple[int, int]) -> None:
            # Each thread writes its own slice of inter.
            a, b = span
            kernels.intersections_at_least(indptr_a, indices_a, indptr_b, indices_b, first[a:b], second[a:b],
                                           needed[a:b], inter[a:b])

        # A merge costs at most the smaller set's size (then a bound stops it): four spans of
        # about equal cost per thread even out pairs that stop early.
        cost = np.minimum(size_a, size_b)
        spans = weighted_ranges(cost, max(int(cost.sum()) // (4 * threads), 1)) if threads > 1 else [(0, len(first))]
        for _ in map_parallel(merge, spans, threads):
            pass
    jaccard = jaccard_of(inter, size_a, size_b)
    # A count below needed (any route; the kernel's RULED_OUT) is exactly a Jaccard below t.
    return np.where((inter >= 0) & (jaccard >= threshold), jaccard, BELOW_THRESHOLD)


class SetArrays(NamedTuple):
    """Shingle sets as the two arrays of a binary CSR matrix, without the matrix: row r's sorted,
    distinct columns are indices[indptr[r] : indptr[r + 1]]; indptr int64 (rows + 1,), indices
    int64 (nnz,), host, in memory or memory-mapped (an index segment's stored sets,
    index/reader.py). The merges read them in place; only scipy's reference route makes a
    matrix of them (as_set_matrix), so a run on the compiled merges never imports scipy.sparse."""

    indptr: np.ndarray
    indices: np.ndarray


# What the routes read sets from: SetArrays, or a binary CSR matrix with the same two arrays
# (shingling.set_rows, the reference route's own).
SetRows = Union["scipy.sparse.csr_matrix", SetArrays]


def as_set_matrix(sets: SetRows) -> scipy.sparse.csr_matrix:
    """``sets`` as a binary CSR matrix, for the scipy route; a matrix as it is. The columns are
    shared, not copied: scipy adds its int8 values (SET_ELEMENT_BYTES counts them)."""
    if not isinstance(sets, SetArrays):
        return sets
    import scipy.sparse  # (heavy: loaded by the runs on the reference route, not by every start-up)

    indptr, indices = csr_arrays(sets)
    matrix = scipy.sparse.csr_matrix((np.ones(indices.shape[0], np.int8), indices, indptr),
                                     shape=(indptr.shape[0] - 1, np.iinfo(np.int64).max))
    matrix.has_sorted_indices = True
    return matrix


def gathered_rows(sets: SetRows, rows: np.ndarray) -> tuple[SetRows, np.ndarray]:
    """(sets, rows) to read rows ``rows`` (int64 (p,)) from on the scipy route: every row's
    sets as a matrix (as_set_matrix) where the rows are most of them; else (an index segment's
    stored sets, maybe millions of rows) a matrix of those rows alone (ragged_take) and their
    places in it, so that the scipy route's cost follows the pairs, not the segment."""
    if not isinstance(sets, SetArrays):
        return sets, rows
    distinct = np.unique(rows)
    if 2 * distinct.shape[0] >= sets.indptr.shape[0] - 1:
        return as_set_matrix(sets), rows
    counts, columns = ragged_take(sets.indptr, sets.indices, distinct)
    return as_set_matrix(set_arrays(columns, counts)), np.searchsorted(distinct, rows)


def csr_arrays(sets: SetRows) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, indices) of ``sets`` as the kernels take them: int64, contiguous (no copy for
    the SetArrays set_arrays makes, nor for an index's stored sets: int64 already)."""
    return (np.ascontiguousarray(sets.indptr, dtype=np.int64), np.ascontiguousarray(sets.indices, dtype=np.int64))
