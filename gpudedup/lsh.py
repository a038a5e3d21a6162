"""Banding: choosing b bands of r rows, band keys, and candidate pairs from equal keys.

The chance that a pair of Jaccard similarity s shares at least one band key is the S-curve
P(s) = 1 - (1 - s**r)**b. ``choose_bands`` picks (b, r) from the threshold; ``band_keys`` and
``candidate_pairs`` are written once against the array module ``xp`` (numpy or cupy) and run
where their inputs live.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .errors import ParameterError
from .hashing import poly_hash64_rows
from .ragged import ragged_arange


class Banding(NamedTuple):
    bands: int
    rows: int
    rule: str  # how (bands, rows) were chosen, for the report


def collision_probability(similarity, bands: int, rows: int):
    """P(s) = 1 - (1 - s**r)**b: the chance that a pair of Jaccard s becomes a candidate."""
    return 1.0 - (1.0 - np.asarray(similarity, dtype=float) ** rows) ** bands


def choose_bands(threshold: float, num_perm: int, max_false_negative: float = 0.01) -> Banding:
    """The default banding rule.

    Among all (b, r) with b * r <= num_perm whose miss probability at the threshold,
    1 - P(threshold), is at most ``max_false_negative``: take the largest r (the steepest
    S-curve, so the fewest candidates below the threshold), then the smallest b that meets the
    target (fewer bands: fewer candidates and less signature work).
    """
    for rows in range(num_perm, 0, -1):
        hit = threshold**rows
        if hit >= 1.0:
            bands = 1
        elif hit <= 0.0:
            continue
        else:
            # (1 - hit)**b <= max_fn  <=>  b >= log(max_fn) / log(1 - hit); the estimate is then
            # settled against the same formula the report uses, so rounding cannot miss by one.
            bands = max(1, math.ceil(math.log(max_false_negative) / math.log1p(-hit)))
            if (bands - 1) * rows > num_perm:
                continue  # too many bands even after the correction below
            while 1.0 - collision_probability(threshold, bands, rows) > max_false_negative:
                bands += 1
            while bands > 1 and 1.0 - collision_probability(threshold, bands - 1, rows) <= max_false_negative:
                bands -= 1
        if bands * rows <= num_perm:
            miss = 1.0 - float(collision_probability(threshold, bands, rows))
            rule = (
                f"largest r with some b*r <= num_perm={num_perm} missing at most "
                f"{max_false_negative:.0%} of pairs at the threshold {threshold}; smallest such b "
                f"(miss probability at the threshold {miss:.4f})"
            )
            return Banding(bands, rows, rule)
    raise ParameterError(
        f"no bands x rows within num_perm={num_perm} keeps the miss probability at threshold "
        f"{threshold} at or below {max_false_negative:.0%}; raise --num-perm or --threshold, "
        "or give --bands and --rows"
    )


def band_keys(signatures, banding: Banding, xp=np):
    """One 64-bit key per (document, band): poly_hash64 of the band's r signature values.

    signatures: uint32 (n, K) with K >= b * r, numpy or cupy. Returns uint64 (n, b), same side.
    """
    rows = banding.rows
    if signatures.shape[1] < banding.bands * rows:
        raise ValueError(f"band_keys needs {banding.bands} * {rows} signature columns, "
                         f"the signatures have {signatures.shape[1]}")
    keys = xp.empty((signatures.shape[0], banding.bands), dtype=xp.uint64)
    for band in range(banding.bands):
        keys[:, band] = poly_hash64_rows(signatures[:, band * rows : (band + 1) * rows], xp)
    return keys


def bucket_pairs(keys, docs, window: int, xp=np):
    """Candidate pairs from one band: documents with equal keys share a bucket.

    keys: uint64 (n,); docs: int64 (n,), ascending document indices. In a bucket, documents
    are taken in input order and each is paired with the next ``window`` documents of the
    bucket: every pair of a bucket of up to window + 1 documents, and at most m * window pairs
    from a bucket of m (thousands of copies of one boilerplate text must not give millions of
    pairs). Returns (a int64 (p,), b int64 (p,)) with a < b, same side as the inputs.
    """
    # A stable sort keeps each bucket in input order (numpy: kind="stable"; cupy's argsort is
    # always a stable radix sort and accepts no ``kind``).
    order = xp.argsort(keys, kind="stable") if xp is np else xp.argsort(keys)
    sorted_keys = keys[order]
    starts_bucket = xp.ones(keys.shape[0], dtype=bool)
    starts_bucket[1:] = sorted_keys[1:] != sorted_keys[:-1]
    bucket_starts = xp.flatnonzero(starts_bucket)
    sizes = xp.diff(xp.concatenate([bucket_starts, xp.full(1, keys.shape[0], dtype=bucket_starts.dtype)]))
    shared = sizes > 1
    if not bool(shared.any()):
        empty = xp.zeros(0, dtype=xp.int64)
        return empty, empty
    # Position of every member of a shared bucket in sorted order, and how many members
    # follow it in its bucket.
    bucket, rank = ragged_arange(sizes[shared], xp)
    position = bucket_starts[shared][bucket] + rank
    following = sizes[shared][bucket] - rank - 1
    partners = xp.minimum(following, window)
    member, step = ragged_arange(partners, xp)
    first = position[member]
    second = first + step + 1
    return docs[order[first]], docs[order[second]]


def candidate_pairs(keys, docs, window: int, xp=np):
    """Candidate pairs over all bands, each pair once.

    keys: uint64 (n, b) band keys; docs: int64 (n,) ascending document indices of the rows;
    host or xp's side. Bands move to xp's side one at a time, so a device holds one band's keys,
    never all of them. Returns (a int64 (p,), b int64 (p,)), a < b, sorted by (a, b), on xp's
    side.
    """
    codes = []
    docs = to_side(docs, xp)
    span = np.uint64(int(docs[-1]) + 1 if docs.shape[0] else 1)
    for band in range(keys.shape[1]):
        first, second = bucket_pairs(to_side(keys[:, band], xp), docs, window, xp)
        # One uint64 code per pair, so pairs found in several bands collapse in one unique.
        codes.append(first.astype(xp.uint64) * span + second.astype(xp.uint64))
        codes = [sorted_unique(xp.concatenate(codes), xp)]
    unique_codes = codes[0] if codes else xp.zeros(0, dtype=xp.uint64)
    return (unique_codes // span).astype(xp.int64), (unique_codes % span).astype(xp.int64)


def to_side(array, xp):
    """``array`` on xp's side: a host array is copied (contiguous) to the device when xp is
    not numpy; an array already there is returned as it is."""
    if xp is not np and isinstance(array, np.ndarray):
        return xp.asarray(np.ascontiguousarray(array))
    return array


def sorted_unique(values, xp=np):
    """The distinct values, ascending (a value sort and a neighbour test; numpy's unique is
    much slower on large uint64 arrays)."""
    ordered = xp.sort(values)
    keep = xp.ones(ordered.shape[0], dtype=bool)
    keep[1:] = ordered[1:] != ordered[:-1]
    return ordered[keep]
