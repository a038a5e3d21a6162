"""Banding: choosing b bands of r rows, band keys, and candidate pairs from equal keys.

The chance that a pair of Jaccard similarity s shares at least one band key is the S-curve
P(s) = 1 - (1 - s**r)**b. ``choose_bands`` picks (b, r) from the threshold; ``band_keys`` and
``candidate_pairs`` are written once against the array module ``xp`` (numpy or cupy) and run
where their inputs live.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Optional

import numpy as np

from ..errors import ParameterError
from .hashing import poly_hash64_rows
from .ragged import ragged_arange


class Banding(NamedTuple):
    bands: int
    rows: int
    rule: str  # how (bands, rows) were chosen, for the report


def collision_probability(similarity, bands: int, rows: int):
    """P(s) = 1 - (1 - s**r)**b: the chance that a pair of Jaccard s becomes a candidate, as
    -expm1(b * log1p(-s**r)), which keeps the digits of a P near 0 (1 - (1 - x) loses those
    below 1e-16, and a target as small as that would look met). A similarity past 1 (the
    upper edge of a histogram's last bin) is 1."""
    with np.errstate(divide="ignore"):  # (s = 1: log1p(-1) is -inf, and P is 1)
        return -np.expm1(bands * np.log1p(-(np.minimum(np.asarray(similarity, dtype=float), 1.0) ** rows)))


def miss_probability(similarity, bands: int, rows: int):
    """1 - P(s) = (1 - s**r)**b: the chance that a pair of Jaccard s is not a candidate, as
    exp(b * log1p(-s**r)) (its digits near 0 kept, as collision_probability's)."""
    with np.errstate(divide="ignore"):
        return np.exp(bands * np.log1p(-(np.asarray(similarity, dtype=float) ** rows)))


def steepest_similarity(bands: int, rows: int) -> float:
    """Where the S-curve is steepest: ((r - 1) / (b*r - 1))**(1/r) (0 for r = 1, where P is
    concave and steepest at s = 0). Roughly (1/b)**(1/r), the usual "LSH threshold"."""
    if rows == 1 or bands * rows == 1:
        return 0.0
    return ((rows - 1) / (bands * rows - 1)) ** (1.0 / rows)


def fewest_bands(threshold: float, rows: int, max_false_negative: float, most: int) -> int | None:
    """The smallest b <= most with miss probability (1 - threshold**rows)**b <=
    max_false_negative, or None when there is none."""
    hit = threshold**rows
    if hit >= 1.0:
        return 1
    if hit <= 0.0:
        return None
    # (1 - hit)**b <= max_fn  <=>  b >= log(max_fn) / log(1 - hit): the root, then settled
    # against the same formula the report uses, so that rounding cannot miss by one.
    estimate = math.log(max_false_negative) / math.log1p(-hit)
    if not estimate <= most + 1:  # also inf, when hit is below float resolution
        return None  # far beyond the budget (and too large to settle by single steps)
    bands = max(1, math.ceil(estimate))
    while miss_probability(threshold, bands, rows) > max_false_negative:
        bands += 1
    while bands > 1 and miss_probability(threshold, bands - 1, rows) <= max_false_negative:
        bands -= 1
    return bands if bands <= most else None


def feasible_banding(threshold: float, num_perm: int, max_false_negative: float,
                     low: float | None, max_false_positive: float | None) -> tuple[int, int] | None:
    """(b, r) by the rule of choose_bands, or None when no b * r <= num_perm meets the targets."""
    for rows in range(num_perm, 0, -1):
        bands = fewest_bands(threshold, rows, max_false_negative, num_perm // rows)
        if bands is None:
            continue
        if low is not None and max_false_positive is not None and \
                float(collision_probability(low, bands, rows)) > max_false_positive:
            continue
        return bands, rows
    return None


def smallest_feasible_num_perm(threshold: float, max_false_negative: float, low: float | None,
                               max_false_positive: float | None, start: int, limit: int = 4096) -> int | None:
    """The smallest K >= start (up to limit) for which the targets can be met. Feasibility only
    grows with K (a larger K allows every smaller b * r), so a bisection finds it."""
    def feasible(num_perm: int) -> bool:
        return feasible_banding(threshold, num_perm, max_false_negative, low, max_false_positive) is not None

    if start > limit or not feasible(limit):
        return None
    while start < limit:
        middle = (start + limit) // 2
        if feasible(middle):
            limit = middle
        else:
            start = middle + 1
    return start


def choose_bands(threshold: float, num_perm: int, max_false_negative: float = 0.01,
                 low: float | None = None, max_false_positive: float | None = None) -> Banding:
    """The banding rule, from explicit targets.

    Targets: the miss probability at the threshold, 1 - P(threshold), at most
    ``max_false_negative``; and, when ``low`` is given, the candidate probability of a pair of
    similarity ``low``, P(low), at most ``max_false_positive``. Among all (b, r) with
    b * r <= num_perm that meet them: the largest r (the steepest S-curve, so the fewest
    candidates below the threshold), then the smallest b (fewer candidates and less signature
    work). For each r the smallest b is the root of (1 - t**r)**b = max_fn, rounded up.
    Raises ParameterError naming the smallest K that would meet the targets.
    """
    if low is not None and not 0 <= low < threshold:
        raise ParameterError(f"low must be in [0, threshold) = [0, {threshold}); got {low!r}")
    if low is not None and max_false_positive is None:
        raise ParameterError("low needs max_fp, the largest acceptable P(low)")
    found = feasible_banding(threshold, num_perm, max_false_negative, low, max_false_positive)
    if found is None:
        targets = f"the miss probability at threshold {threshold} at or below {percent(max_false_negative)}"
        if low is not None and max_false_positive is not None:  # (both or neither: checked above)
            targets += f" and P({low}) at or below {percent(max_false_positive)}"
        better = smallest_feasible_num_perm(threshold, max_false_negative, low, max_false_positive, num_perm + 1)
        hint = (f"num_perm={better} is the smallest that does" if better
                else "no num_perm= up to 4096 does; loosen the targets")
        raise ParameterError(
            f"no bands x rows within num_perm={num_perm} keeps {targets}; {hint} "
            "(or give bands= and rows=)"
        )
    bands, rows = found
    miss = float(miss_probability(threshold, bands, rows))
    rule = (f"largest r with some b*r <= num_perm={num_perm} missing at most "
            f"{percent(max_false_negative)} of pairs at the threshold {threshold}")
    if low is not None and max_false_positive is not None:
        rule += f" and making at most {percent(max_false_positive)} of pairs at similarity {low} candidates"
    rule += f"; smallest such b (miss probability at the threshold {small(miss)}"
    if low is not None:
        rule += f", P({low}) = {small(float(collision_probability(low, bands, rows)))}"
    rule += ")"
    return Banding(bands, rows, rule)


def percent(probability: float) -> str:
    """A target probability in a rule or message, as a percentage of 4 significant digits:
    "1%", "99.99%", "1e-15%" (a fixed number of decimals says 0% of a tiny target)."""
    return f"{probability * 100:.4g}%"


def small(probability: float) -> str:
    """A probability in a rule: 4 decimals, or 3 significant digits below 0.0001 (which 4
    decimals would show as 0)."""
    return f"{probability:.4f}" if probability >= 1e-4 or probability == 0 else f"{probability:.3g}"


def similarity_text(value: float) -> str:
    """A similarity (a threshold) as labels, tables and file names show it: the shortest text
    that reads back as it (0.8, 1; 0.8000001 and 0.8000000000001, which ``:g`` would show as 0.8
    too, so that two thresholds never share a label)."""
    short = f"{value:g}"
    return short if float(short) == value else repr(float(value))


def banding_summary(threshold: float, banding: Banding, low: float | None = None,
                    similarities=None) -> dict:
    """What a banding does, for ``gpudedup params`` and the report: b, r, the permutations
    computed, the S-curve's steepest point, the miss probability at the threshold, P(low), and
    P(s) -- the expected share of pairs of similarity s that become candidates -- at a row of
    similarities (default 0.1, 0.2, ..., 1.0 with the threshold and low added)."""
    if similarities is None:
        similarities = [round(0.1 * i, 1) for i in range(1, 11)]
        similarities += [value for value in (threshold, low) if value is not None]
    similarities = sorted(set(float(value) for value in similarities))
    b, r = banding.bands, banding.rows
    summary = {
        "threshold": threshold,
        "bands": b,
        "rows": r,
        "permutations_computed": b * r,
        "rule": banding.rule,
        "steepest_similarity": round(steepest_similarity(b, r), 4),
        "miss_probability_at_threshold": float(miss_probability(threshold, b, r)),
        "candidate_probability": {similarity_text(s): float(collision_probability(s, b, r)) for s in similarities},
    }
    if low is not None:
        summary["low"] = low
        summary["candidate_probability_at_low"] = float(collision_probability(low, b, r))
    return summary


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
    # A stable sort keeps each bucket in input order (CuPy's argsort is always stable and
    # accepts kind="stable").
    order = xp.argsort(keys, kind="stable")
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


# Pairs (a, b) of indices below span travel as one uint64 code a * span + b, which needs span**2
# <= 2**64: at most 2**32 documents (with shingles) in one run.
MOST_CODED_DOCUMENTS = 1 << 32


def pair_code_span(indices: int) -> np.uint64:
    """The span of pair codes a * span + b for indices 0 .. indices-1 (at least 1); more
    indices than MOST_CODED_DOCUMENTS is a ParameterError, not codes that wrap around."""
    if indices > MOST_CODED_DOCUMENTS:
        raise ParameterError(f"{indices:,} documents with shingles in one run: candidate pairs are coded in 64 "
                             f"bits, which holds at most {MOST_CODED_DOCUMENTS:,}; split the corpus")
    return np.uint64(max(indices, 1))


def pair_codes(first, second, span: np.uint64, xp=np):
    """uint64 (p,) codes first * span + second of pairs of indices (int64 (p,), below span:
    pair_code_span), on xp's side; code order is (first, second) order."""
    return first.astype(xp.uint64) * span + second.astype(xp.uint64)


def decoded_pairs(codes, span: np.uint64, xp=np) -> tuple[Any, Any]:
    """The pairs (first int64 (p,), second int64 (p,)) of pair_codes' ``codes``."""
    return (codes // span).astype(xp.int64), (codes % span).astype(xp.int64)


def candidate_pairs(keys, docs, window: int, xp=np, map_bands=map):
    """Candidate pairs over all bands, each pair once.

    keys: uint64 (n, b) band keys; docs: int64 (n,) ascending document indices of the rows;
    host or xp's side (host keys move to xp's side one band at a time). map_bands: an
    order-keeping map over the bands (the host runs them on threads: the sorts release the
    GIL). Returns (a int64 (p,), b int64 (p,)), a < b, sorted by (a, b), on xp's side.
    """
    docs = to_side(docs, xp)
    span = pair_code_span(int(docs[-1]) + 1 if docs.shape[0] else 1)

    def band_codes(band: int):
        # One uint64 code per pair, so pairs found in several bands collapse in one unique.
        first, second = bucket_pairs(to_side(keys[:, band], xp), docs, window, xp)
        return sorted_unique(pair_codes(first, second, span, xp), xp)

    unique_codes = xp.zeros(0, dtype=xp.uint64)
    for codes in map_bands(band_codes, range(keys.shape[1])):
        # Both runs are sorted: a stable sort (timsort on the host) of the two merges them in
        # linear time, so the pairs found so far are not sorted again from scratch each band.
        unique_codes = sorted_unique(xp.concatenate([unique_codes, codes]), xp, kind="stable")
    return decoded_pairs(unique_codes, span, xp)


def to_side(array, xp):
    """``array`` on xp's side: a host array is copied (contiguous) to the device when xp is
    not numpy; an array already there is returned as it is."""
    if xp is not np and isinstance(array, np.ndarray):
        return xp.asarray(np.ascontiguousarray(array))
    return array


def sorted_unique(values, xp=np, kind: Optional[str] = None):
    """The distinct values, ascending (a value sort and a neighbour test; numpy's unique is
    much slower on large uint64 arrays). kind: the sort's, e.g. "stable" where values are a
    few sorted runs."""
    ordered = xp.sort(values, kind=kind)
    keep = xp.ones(ordered.shape[0], dtype=bool)
    keep[1:] = ordered[1:] != ordered[:-1]
    return ordered[keep]
