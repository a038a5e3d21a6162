"""Numba kernels of exact verification: sorted merges over the CSR arrays of a set matrix.

The build of these loops that runs where the C loops (kernels/cpu_kernels.c, the same functions
with the same arguments) were not built at install. Imported only by verify.py, lazily, when
numba's route is taken (verify.py's ``merge_kernels``): importing gpudedup never imports numba.
Each kernel reads the arrays of a canonical binary CSR matrix (verify.SetArrays: row r's
columns are ``indices[indptr[r] : indptr[r + 1]]``, sorted and distinct, int64) in place;
nothing is copied per pair. Counts only: the Jaccard itself is computed from them by
verify.py, in one place for every route, so that every route gives the same float64 bit for
bit.

Made by ``compiled.kernel``: the compiled code is cached on disk for the next process, and the
GIL is released, so that the in-memory store's threads run kernels side by side.
"""

from __future__ import annotations

import numpy as np

from ..compiled import kernel

# intersections_at_least's count for a pair whose intersection cannot reach the count needed.
RULED_OUT = -1


@kernel()
def intersections(indptr: np.ndarray, indices: np.ndarray, first: np.ndarray, second: np.ndarray,
                  out: np.ndarray) -> None:  # pragma: no cover - compiled; tested through verify.py
    """out[p] = |row first[p] ∩ row second[p]|: one sorted merge per pair.

    indptr: int64 (rows + 1,); indices: int64 (nnz,), each row's sorted and distinct; first,
    second: int64 (p,) row numbers; out: int64 (p,), written. All host.
    """
    for p in range(first.shape[0]):
        i, i_end = indptr[first[p]], indptr[first[p] + 1]
        j, j_end = indptr[second[p]], indptr[second[p] + 1]
        count = 0
        while i < i_end and j < j_end:
            x, y = indices[i], indices[j]
            if x < y:
                i += 1
            elif x > y:
                j += 1
            else:
                count += 1
                i += 1
                j += 1
        out[p] = count


@kernel()
def intersections_at_least(indptr: np.ndarray, indices: np.ndarray, indptr_b: np.ndarray, indices_b: np.ndarray,
                           first: np.ndarray, second: np.ndarray, needed: np.ndarray,
                           out: np.ndarray) -> None:  # pragma: no cover - compiled
    """out[p] = |A ∩ B| of rows A = first[p] of (indptr, indices) and B = second[p] of
    (indptr_b, indices_b) where it is at least needed[p] (int64 (p,)), else RULED_OUT, found
    without finishing the merge where possible. The two sources may be the same arrays (pairs
    within one set matrix) or two (an index's stored sets against new documents' sets).

    Every element passed over without a match is outside the intersection, so once more than
    |A| - needed elements of A (or |B| - needed of B) are, the intersection is below needed
    and the merge stops. A pair with needed > min(|A|, |B|) is not merged at all. Arrays as
    for ``intersections``.
    """
    for p in range(first.shape[0]):
        i, i_end = indptr[first[p]], indptr[first[p] + 1]
        j, j_end = indptr_b[second[p]], indptr_b[second[p] + 1]
        need = needed[p]
        # How many elements of each row may still go unmatched.
        slack_a, slack_b = (i_end - i) - need, (j_end - j) - need
        if slack_a < 0 or slack_b < 0:
            out[p] = RULED_OUT
            continue
        count = 0
        while i < i_end and j < j_end:
            x, y = indices[i], indices_b[j]
            if x < y:
                i += 1
                slack_a -= 1
                if slack_a < 0:
                    break
            elif x > y:
                j += 1
                slack_b -= 1
                if slack_b < 0:
                    break
            else:
                count += 1
                i += 1
                j += 1
        # The elements left after one row ran out are unmatched too: the count is final here,
        # and below needed exactly when the slack of a row ran out.
        out[p] = count if count >= need else RULED_OUT


@kernel()
def signature_agreements(signatures: np.ndarray, first: np.ndarray, second: np.ndarray,
                         out: np.ndarray) -> None:  # pragma: no cover - compiled; tested through verify.py
    """out[p] = the columns in which rows first[p] and second[p] of ``signatures`` agree.

    signatures: uint32 (n, K), C-contiguous; first, second: int64 (p,); out: int64 (p,),
    written. All host; no row is copied.
    """
    for p in range(first.shape[0]):
        a, b = signatures[first[p]], signatures[second[p]]
        count = 0
        for column in range(a.shape[0]):
            if a[column] == b[column]:
                count += 1
        out[p] = count
