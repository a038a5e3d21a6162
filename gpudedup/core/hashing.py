"""The hash family: every integer function whose bits the numpy and CUDA backends must share.

All arithmetic here is unsigned and wraps: 64-bit values modulo 2**64, 32-bit values modulo
2**32. docs/hash-spec.md restates these definitions; they are frozen,
because stored signatures and band keys must stay valid across releases.

1. ``poly_hash64(units)``: the 64-bit hash of a sequence of integer units (code points of a
   shingle, or the rows of a signature band)::

       h = POLY_OFFSET
       for u in units: h = h * POLY_BASE + u          (mod 2**64)
       return fmix64(h)

   ``fmix64`` is MurmurHash3's 64-bit finaliser. Starting from a non-zero offset makes leading
   zero units count, and the finaliser spreads the polynomial's weak low bits over the word.

2. MinHash permutation k of a shingle hash ``x`` (uint64) works on its low 32 bits::

       perm_k(x) = (a_k * (x mod 2**32) + b_k)       (mod 2**32),   a_k odd

   so that a signature entry costs one 32-bit multiply-add and one min on any hardware. The
   shingle hash is already uniformly mixed, which is what the min-wise property needs; the
   affine map gives K different orderings of the same values.

3. ``(a_k, b_k)`` come from SplitMix64 seeded with ``seed``: draw k gives ``z``; ``a_k`` is
   ``(z mod 2**32) | 1`` and ``b_k`` is ``z >> 32``. Permutation k does not depend on how many
   permutations are drawn, so the first m columns of a K-column signature are the m-column
   signature.

Python-int versions (``*_scalar``) state the definitions plainly and serve as test oracles; the
numpy versions are what the numpy backend runs.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

import numpy as np

MASK64 = (1 << 64) - 1
MASK32 = (1 << 32) - 1

POLY_BASE = 0x9E3779B97F4A7C15
POLY_OFFSET = 0xCBF29CE484222325
# The multiplicative inverse of POLY_BASE modulo 2**64 (it exists because POLY_BASE is odd);
# the prefix-sum form of poly_hash64 in shingling.py divides by powers of the base.
POLY_BASE_INV = pow(POLY_BASE, -1, 1 << 64)

FMIX_C1 = 0xFF51AFD7ED558CCD
FMIX_C2 = 0xC4CEB9FE1A85EC53

SPLITMIX_GAMMA = 0x9E3779B97F4A7C15
SPLITMIX_M1 = 0xBF58476D1CE4E5B9
SPLITMIX_M2 = 0x94D049BB133111EB

# Signature entry of a document with no shingles. A permutation can produce this value too,
# so it marks nothing by itself: empty documents are told apart by their shingle counts and
# are never banded.
EMPTY_SIGNATURE_VALUE = MASK32


# --- scalar definitions (oracles) -------------------------------------------------------------


def fmix64_scalar(h: int) -> int:
    """MurmurHash3 fmix64 of a Python int in [0, 2**64)."""
    h ^= h >> 33
    h = (h * FMIX_C1) & MASK64
    h ^= h >> 33
    h = (h * FMIX_C2) & MASK64
    h ^= h >> 33
    return h


def poly_hash64_scalar(units: Iterable[int]) -> int:
    """poly_hash64 of a sequence of non-negative ints (< 2**32), as a Python int."""
    h = POLY_OFFSET
    for u in units:
        h = (h * POLY_BASE + u) & MASK64
    return fmix64_scalar(h)


def splitmix64_scalar(seed: int, count: int) -> list[int]:
    """The first ``count`` outputs of SplitMix64 started from ``seed`` (taken modulo 2**64)."""
    state = seed & MASK64
    out = []
    for _ in range(count):
        state = (state + SPLITMIX_GAMMA) & MASK64
        z = state
        z = ((z ^ (z >> 30)) * SPLITMIX_M1) & MASK64
        z = ((z ^ (z >> 27)) * SPLITMIX_M2) & MASK64
        out.append(z ^ (z >> 31))
    return out


# --- permutation parameters -------------------------------------------------------------------


class Permutations(NamedTuple):
    """MinHash permutation parameters, host arrays.

    a: uint32, shape (K,), every entry odd.
    b: uint32, shape (K,).
    """

    a: np.ndarray
    b: np.ndarray

    @property
    def count(self) -> int:  # type: ignore[override]  # the number of permutations, not tuple.count
        return int(self.a.shape[0])


def draw_permutations(num_perm: int, seed: int) -> Permutations:
    """Draw ``num_perm`` permutations from ``seed`` (SplitMix64, see the module docstring):
    an integer 0 <= seed < 2**64, SplitMix64's initial state (another is refused, not reduced:
    -1 and 2**64 - 1 would be one seed)."""
    if num_perm < 1:
        raise ValueError(f"num_perm must be >= 1, got {num_perm}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2**64:
        raise ValueError(f"seed must be an integer from 0 to 2**64 - 1, got {seed!r}")
    draws = np.array(splitmix64_scalar(int(seed), num_perm), dtype=np.uint64)
    a = ((draws & np.uint64(MASK32)) | np.uint64(1)).astype(np.uint32)
    b = (draws >> np.uint64(32)).astype(np.uint32)
    return Permutations(a=a, b=b)


# --- vectorised (numpy) -----------------------------------------------------------------------


def fmix64(h):
    """fmix64 of every element; h: uint64 numpy or cupy array. Modifies and returns h."""
    h ^= h >> np.uint64(33)
    h *= np.uint64(FMIX_C1)
    h ^= h >> np.uint64(33)
    h *= np.uint64(FMIX_C2)
    h ^= h >> np.uint64(33)
    return h


def poly_hash64_rows(units, xp=np):
    """poly_hash64 of every row of a 2-D array (numpy or cupy, per ``xp``).

    units: unsigned integer array, shape (n, m): values < 2**32 for the hash specification's
    rows (a band of signature columns, lsh.band_keys); any uint64 values otherwise
    (copies.band_key_row_hash; the arithmetic is modulo 2**64 either way). Returns uint64,
    shape (n,), on the same side as ``units``.
    """
    h = xp.full(units.shape[0], POLY_OFFSET, dtype=xp.uint64)
    for column in range(units.shape[1]):
        h *= np.uint64(POLY_BASE)
        h += units[:, column].astype(xp.uint64)
    return fmix64(h)


def powers_mod64(base: int, count: int) -> np.ndarray:
    """base**0, base**1, ... base**(count-1) modulo 2**64; uint64, shape (count,) (host)."""
    powers = np.empty(count, dtype=np.uint64)
    powers[:1] = 1
    # Doubling: powers[k:2k] = powers[:k] * base**k, log2(count) vectorised products rather than
    # a cumprod, which numpy runs element by element. uint64 products wrap modulo 2**64, which
    # is exactly the arithmetic we want.
    filled, step = 1, np.uint64(base)  # step: base**filled
    with np.errstate(over="ignore"):
        while filled < count:
            more = min(filled, count - filled)
            np.multiply(powers[:more], step, out=powers[filled:filled + more])
            filled += more
            step = step * step
    return powers
