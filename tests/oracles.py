"""Independent oracles: the expected answers of the test suite, in plain Python.

Everything here is written from the specification, never from gpudedup's code, and imports
nothing from gpudedup, so that a test comparing gpudedup with an oracle compares two
independent implementations of one definition:

- canonical shingling: DESIGN.md ("Canonical shingling") and normalize.py's docstring, on
  Python strings; its options (docs/hash-spec.md, "Text normalisation"): the Unicode forms by
  Python's ``unicodedata.normalize``, punctuation and symbols by ``unicodedata.category``;
- the hash family: the definitions written in hashing.py's docstring and docs/hash-spec.md
  (frozen constants, spelled out here on purpose);
- Jaccard similarity: Python sets; the threshold rule: allpairs.py's docstring (a pair is similar
  when its exact Jaccard is at least the threshold read as the nearest fraction whose
  denominator is at most 10**6, so 0.8 means 4/5);
- all pairs: every pair of Python sets compared (brute force), or, for corpora where that is
  too slow, every pair's intersection size at once as a product of incidence matrices
  (``similar_pairs_matrix``, checked against the brute force in test_allpairs.py);
- clusters: union-find in plain Python, with the keep policies of README;
- LSH: the S-curve 1 - (1 - s**r)**b, the banding rule by exhaustive search, and bucket
  pairs by grouping keys in a dict;
- the signature pre-filter's cut-off: the binomial CDF in exact rational arithmetic.
"""

from __future__ import annotations

import itertools
import math
import re
import unicodedata
from collections import defaultdict
from fractions import Fraction
from typing import Iterable, Optional, Sequence

import numpy as np
import scipy.sparse

# --- canonical shingling --------------------------------------------------------------------

# Unicode 14 PropList.txt, White_Space (25 code points), written out here on purpose: NOT
# str.isspace, which also accepts the information separators U+001C..U+001F.
WHITE_SPACE = (
    "\u0009\u000a\u000b\u000c\u000d\u0020\u0085\u00a0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
WHITE_RUN = re.compile("[" + re.escape(WHITE_SPACE) + "]+")


def oracle_lower(ch: str) -> str:
    """The simple (one code point) lowercase mapping of one code point: str.lower, except
    U+0130 (capital I with dot above), whose simple mapping is 'i' where str.lower gives
    'i' + U+0307. Per code point, so a Greek capital sigma is always U+03C3."""
    if ch == "\u0130":
        return "i"
    lowered = ch.lower()
    assert len(lowered) == 1, f"U+{ord(ch):04X} has a multi-code-point lowercase"
    return lowered


def oracle_normalize(text: Optional[str], *, unicode: Optional[str] = None, strip_punctuation: bool = False,
                     strip_symbols: bool = False) -> str:
    """The normalised text; a null text normalises to the empty text. In order: the Unicode
    normalisation form ``unicode`` ("nfc", "nfkc" or None) by Python's unicodedata; lower-case
    per code point; remove the code points whose general category (unicodedata.category) is
    P* (strip_punctuation) or S* (strip_symbols); every run of White_Space one space, both ends
    stripped.

    Python's unicodedata is Unicode 14.0.0 on Python 3.11 (the version of gpudedup's tables);
    gpudedup's forms come from Arrow's utf8proc, which follows a later version: by Unicode's
    normalisation stability policy both give the same forms of text whose code points were all
    assigned in Unicode 14.0.0, so comparisons with this oracle use such text."""
    if text is None:
        return ""
    if unicode is not None:
        text = unicodedata.normalize(unicode.upper(), text)
    lowered = "".join(oracle_lower(ch) for ch in text)
    removed = ("P" if strip_punctuation else "") + ("S" if strip_symbols else "")
    if removed:
        lowered = "".join(ch for ch in lowered if unicodedata.category(ch)[0] not in removed)
    return " ".join(token for token in WHITE_RUN.split(lowered) if token)


def oracle_shingles(text: Optional[str], kind: str, n: int, **options) -> list[str]:
    """The shingles of a text in text order, repeats included: word n-grams (n tokens of the
    normalised text joined by one space) or char n-grams (n code points); a non-empty text
    shorter than n units has one shingle, itself; an empty one has none. ``options``: those of
    oracle_normalize (unicode, strip_punctuation, strip_symbols)."""
    norm = oracle_normalize(text, **options)
    if not norm:
        return []
    units = norm.split(" ") if kind == "word" else list(norm)
    joiner = " " if kind == "word" else ""
    if len(units) < n:
        return [norm]
    return [joiner.join(units[i:i + n]) for i in range(len(units) - n + 1)]


def shingle_set(text: Optional[str], kind: str = "word", n: int = 5, **options) -> frozenset[str]:
    """The SET of canonical shingles of a text, as strings (what Jaccard is defined over);
    ``options`` as for oracle_normalize."""
    return frozenset(oracle_shingles(text, kind, n, **options))


# --- the hash family (frozen specification) -------------------------------------------------

M64 = 2**64
M32 = 2**32
# Frozen specification values (hashing.py's docstring, docs/hash-spec.md): stored
# signatures and band keys depend on them, so they are spelled out here, not imported.
POLY_OFFSET = 0xCBF29CE484222325
POLY_BASE = 0x9E3779B97F4A7C15
EMPTY_SIGNATURE_VALUE = 0xFFFFFFFF


def oracle_fmix64(h: int) -> int:
    """MurmurHash3's fmix64 (Appleby), Python ints."""
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) % M64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) % M64
    h ^= h >> 33
    return h


def oracle_poly_hash64(units: Iterable[int]) -> int:
    """h = POLY_OFFSET; h = h * POLY_BASE + u (mod 2**64) per unit; fmix64(h)."""
    h = POLY_OFFSET
    for u in units:
        h = (h * POLY_BASE + u) % M64
    return oracle_fmix64(h)


def oracle_splitmix64(seed: int, count: int) -> list[int]:
    """The first ``count`` outputs of Vigna's SplitMix64 from ``seed`` (mod 2**64)."""
    state, out = seed % M64, []
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) % M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % M64
        out.append(z ^ (z >> 31))
    return out


def oracle_hashes(text: Optional[str], kind: str, n: int, **options) -> list[int]:
    """The 64-bit hash of every shingle of a text, in text order: poly_hash64 of its code points;
    ``options`` as for oracle_normalize."""
    return [oracle_poly_hash64(map(ord, s)) for s in oracle_shingles(text, kind, n, **options)]


def oracle_permutations(seed: int, count: int) -> tuple[list[int], list[int]]:
    """(a, b) of the first ``count`` MinHash permutations: SplitMix64 draw z gives
    a = (z mod 2**32) | 1 and b = z >> 32."""
    draws = oracle_splitmix64(seed, count)
    return [(z % M32) | 1 for z in draws], [z >> 32 for z in draws]


def oracle_signatures(rows: Sequence[Sequence[int]], a: Sequence[int], b: Sequence[int]) -> list[list[int]]:
    """MinHash signature of each row of 64-bit hashes: min over x of (a_k * (x mod 2**32) + b_k)
    mod 2**32 per permutation k; a row with no hashes is all EMPTY_SIGNATURE_VALUE."""
    a, b = [int(v) for v in a], [int(v) for v in b]
    out = []
    for row in rows:
        if len(row) == 0:
            out.append([EMPTY_SIGNATURE_VALUE] * len(a))
        else:
            low = [int(x) % M32 for x in row]
            out.append([min((ak * x + bk) % M32 for x in low) for ak, bk in zip(a, b)])
    return out


# --- Jaccard and all pairs ------------------------------------------------------------------

# Frozen specification value (allpairs.py's docstring): the threshold is read as the nearest
# fraction with a denominator of at most this, so that 0.8 means exactly 4/5.
THRESHOLD_DENOMINATOR = 1_000_000


def exact_threshold(threshold: float) -> Fraction:
    """The threshold as the exact fraction a Jaccard similarity is compared with."""
    return Fraction(threshold).limit_denominator(THRESHOLD_DENOMINATOR)


def jaccard(a: set | frozenset, b: set | frozenset) -> float:
    """|A ∩ B| / |A ∪ B| over two sets; 0.0 when both are empty (empty documents are never
    similar to anything)."""
    shared = len(a & b)
    union = len(a) + len(b) - shared
    return shared / union if union else 0.0


def is_similar(a: set | frozenset, b: set | frozenset, threshold: float) -> bool:
    """Whether two non-empty sets have an exact Jaccard at or above the threshold."""
    if not a or not b:
        return False
    shared = len(a & b)
    return Fraction(shared, len(a) + len(b) - shared) >= exact_threshold(threshold)


def similar_pairs(sets: Sequence[set | frozenset], threshold: float) -> dict[tuple[int, int], float]:
    """{(a, b): Jaccard} of every pair a < b of non-empty sets at or above the threshold,
    comparing every pair (brute force)."""
    return {(a, b): jaccard(sets[a], sets[b]) for a, b in itertools.combinations(range(len(sets)), 2)
            if is_similar(sets[a], sets[b], threshold)}


def similar_pairs_matrix(sets: Sequence[set | frozenset], threshold: float) -> dict[tuple[int, int], float]:
    """What ``similar_pairs`` gives, for corpora where comparing every pair of Python sets is
    too slow: the intersection size of every pair at once, as the product M @ M.T of the
    document-by-element incidence matrix (elements numbered in order of first appearance; the
    sets' own elements, never their hashes). A pair sharing nothing has Jaccard 0 and is never
    similar; every pair sharing something is decided exactly, as in ``is_similar``."""
    column: dict = {}
    rows: list[int] = []
    columns: list[int] = []
    for doc, s in enumerate(sets):
        for element in s:
            columns.append(column.setdefault(element, len(column)))
            rows.append(doc)
    incidence = scipy.sparse.csr_matrix((np.ones(len(rows), dtype=np.int64), (rows, columns)),
                                        shape=(len(sets), len(column)))
    shared = scipy.sparse.triu(incidence @ incidence.T, k=1).tocoo()  # pairs a < b sharing something
    sizes = np.array([len(s) for s in sets], dtype=np.int64)
    union = sizes[shared.row] + sizes[shared.col] - shared.data
    bound = exact_threshold(threshold)
    # common / union >= num / den, in integers (both sides stay far below 2**63).
    similar = shared.data * bound.denominator >= bound.numerator * union
    found = {(a, b): common / total for a, b, common, total in
             zip(shared.row[similar].tolist(), shared.col[similar].tolist(), shared.data[similar].tolist(),
                 union[similar].tolist())}
    return dict(sorted(found.items()))


# --- clusters -------------------------------------------------------------------------------


def oracle_clusters(n_docs: int, edges: Iterable[tuple[int, int]], lengths: Sequence[int],
                    policy: str = "first") -> tuple[list[int], list[int], list[bool]]:
    """(docs, cluster, keep) of the connected components of two or more documents, by
    union-find: docs ascending; clusters numbered in the order of their first documents; one
    document kept per cluster, the first in input order ("first") or the longest, the first of
    equals ("longest")."""
    parent = list(range(n_docs))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    members: dict[int, list[int]] = {}
    for d in range(n_docs):
        members.setdefault(root(d), []).append(d)
    groups = sorted((m for m in members.values() if len(m) > 1), key=lambda m: m[0])
    docs: list[int] = []
    cluster: dict[int, int] = {}
    keep: dict[int, bool] = {}
    for number, group in enumerate(groups):
        if policy == "first":
            kept = group[0]
        else:
            kept = max(group, key=lambda d: (lengths[d], -d))  # longest, then the first
        for d in group:
            cluster[d] = number
            keep[d] = d == kept
        docs += group
    docs.sort()
    return docs, [cluster[d] for d in docs], [keep[d] for d in docs]


# --- LSH probabilities and the banding rule -------------------------------------------------


def s_curve(similarity, bands: int, rows: int):
    """P(a pair of Jaccard s shares at least one of b bands of r rows) = 1 - (1 - s**r)**b
    (floats or numpy arrays)."""
    return 1 - (1 - similarity**rows) ** bands


def min_bands(threshold: float, rows: int, max_fn: float, limit: int) -> Optional[int]:
    """The smallest b <= limit with miss probability (1 - t**r)**b <= max_fn, else None (a
    direct search, no closed form)."""
    miss_one_band = 1.0 - threshold**rows
    for b in range(1, limit + 1):
        if miss_one_band**b <= max_fn:
            return b
    return None


def oracle_banding(threshold: float, num_perm: int, max_fn: float = 0.01, low: Optional[float] = None,
                   max_fp: Optional[float] = None) -> Optional[tuple[int, int]]:
    """The banding rule by exhaustive search: among every (b, r) with b * r <= num_perm whose
    miss probability at the threshold is at most max_fn (and, with low, whose candidate
    probability at low is at most max_fp), the largest r, then the smallest b; None if none."""
    feasible = [(b, r) for r in range(1, num_perm + 1) for b in range(1, num_perm // r + 1)
                if (1 - threshold**r) ** b <= max_fn
                and (low is None or 1 - (1 - low**r) ** b <= max_fp)]
    if not feasible:
        return None
    best_r = max(r for _, r in feasible)
    return min(b for b, r in feasible if r == best_r), best_r


def precise_banding(threshold: float, num_perm: int, max_fn: float, low: Optional[float] = None,
                    max_fp: Optional[float] = None) -> Optional[tuple[int, int]]:
    """oracle_banding in 60-digit decimal arithmetic, for targets so small (1e-17, 1e-300) that
    floats' 1 - (1 - x) would round them away."""
    from decimal import Decimal, localcontext

    with localcontext() as context:
        context.prec = 60
        t, fn = Decimal(threshold), Decimal(max_fn)
        feasible = [(b, r) for r in range(1, num_perm + 1) for b in range(1, num_perm // r + 1)
                    if (1 - t**r) ** b <= fn
                    and (low is None or 1 - (1 - Decimal(low) ** r) ** b <= Decimal(max_fp))]
    if not feasible:
        return None
    best_r = max(r for _, r in feasible)
    return min(b for b, r in feasible if r == best_r), best_r


def oracle_bucket_pairs(keys: Sequence[int], docs: Sequence[int], window: int) -> list[tuple[int, int]]:
    """The pairs one band's buckets give: documents with equal keys, each paired with the next
    ``window`` members of its bucket (in the order given)."""
    buckets: dict[int, list[int]] = defaultdict(list)
    for key, doc in zip(keys, docs):
        buckets[int(key)].append(int(doc))
    pairs = []
    for members in buckets.values():
        for i, a in enumerate(members):
            for b in members[i + 1:i + 1 + window]:
                pairs.append((a, b))
    return pairs


def oracle_candidate_pairs(keys, docs: Sequence[int], window: int) -> list[tuple[int, int]]:
    """The distinct pairs of every band's buckets, sorted; keys: (n_docs, bands)."""
    pairs: set[tuple[int, int]] = set()
    for band in range(keys.shape[1]):
        pairs.update(oracle_bucket_pairs(keys[:, band], docs, window))
    return sorted(pairs)


# --- the signature pre-filter ---------------------------------------------------------------


def exact_cutoff(num_columns: int, threshold: float, tail: float) -> int:
    """Largest x with BinomCDF(x; K, t) <= tail, exactly (integer arithmetic on the exact
    rational values of the floats t and tail), or -1."""
    p, exact_tail = Fraction(threshold), Fraction(tail)
    # pmf(x) = comb(K, x) * P**x * (D - P)**(K - x) / D**K with p = P / D.
    P, D = p.numerator, p.denominator
    limit = exact_tail.numerator * D**num_columns  # cdf <= tail  <=>  cdf * D**K * tail_den <= limit
    cdf, cutoff = 0, -1
    for x in range(num_columns + 1):
        cdf += math.comb(num_columns, x) * P**x * (D - P) ** (num_columns - x)
        if cdf * exact_tail.denominator > limit:
            break
        cutoff = x
    return cutoff
