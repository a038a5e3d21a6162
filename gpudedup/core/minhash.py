"""MinHash signatures (numpy reference, host).

signature[d, k] = min over the shingle hashes x of document d of
    (a_k * (x mod 2**32) + b_k) mod 2**32
(hashing.py states the family). A document without shingles gets EMPTY_SIGNATURE_VALUE in
every column; such rows are never banded, so they can never become candidates.
"""

from __future__ import annotations

import numpy as np

from .hashing import EMPTY_SIGNATURE_VALUE, Permutations
from .shingling import ShingleBatch

# Shingles per block of the signature loop: the block's 32-bit values (256 KiB) stay in the
# L2 cache while all K permutations pass over them.
BLOCK_SHINGLES = 1 << 16


def minhash_signatures(shingles: ShingleBatch, permutations: Permutations) -> np.ndarray:
    """Signatures of a batch: uint32, shape (n_docs, K), host.

    shingles: ShingleBatch with uint64 hashes (repeats allowed; they do not change a minimum).
    permutations: K permutation parameters (hashing.draw_permutations).
    """
    counts = shingles.counts()
    signatures = np.full((shingles.n_docs, permutations.count), EMPTY_SIGNATURE_VALUE, np.uint32)
    nonempty = np.flatnonzero(counts > 0)
    if nonempty.size == 0:
        return signatures
    low_bits = shingles.hashes.astype(np.uint32)  # the permutations read the low 32 bits
    for docs in blocks_of_documents(shingles.offsets, nonempty, BLOCK_SHINGLES):
        first, stop = shingles.offsets[docs[0]], shingles.offsets[docs[-1] + 1]
        block = low_bits[first:stop]
        segment_starts = shingles.offsets[docs] - first
        permuted = np.empty_like(block)
        for k in range(permutations.count):
            np.multiply(block, permutations.a[k], out=permuted)
            np.add(permuted, permutations.b[k], out=permuted)
            signatures[docs, k] = np.minimum.reduceat(permuted, segment_starts)
    return signatures


def blocks_of_documents(offsets: np.ndarray, docs: np.ndarray, target: int):
    """Split ``docs`` (int64 (m,), ascending, consecutive in storage once empty documents are
    skipped) into runs of whole documents holding about ``target`` shingles each."""
    ends = offsets[docs + 1]
    boundaries = np.searchsorted(ends - offsets[docs[0]], np.arange(target, ends[-1], target))
    for run in np.split(docs, np.unique(boundaries + 1)):
        if run.size:
            yield run
