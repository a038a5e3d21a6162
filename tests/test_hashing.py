"""hashing.py: the frozen hash family, checked against plain Python-int definitions.

The oracles (tests/oracles.py) are written from the module docstring, independently of the
package's own ``*_scalar`` functions, with the frozen constants spelled out; the ``*_scalar``
functions are checked against them too.
"""

import numpy as np
import pytest

from gpudedup.core import hashing
from gpudedup.core.hashing import (
    MASK32,
    MASK64,
    POLY_BASE,
    POLY_BASE_INV,
    POLY_OFFSET,
    draw_permutations,
    fmix64,
    fmix64_scalar,
    poly_hash64_rows,
    poly_hash64_scalar,
    powers_mod64,
    splitmix64_scalar,
)
from oracles import M64, oracle_fmix64, oracle_poly_hash64, oracle_splitmix64
import oracles

EDGE_U64 = [0, 1, 2, 0x7FFFFFFF, 0x80000000, MASK32, 1 << 32, (1 << 63) - 1, 1 << 63, MASK64 - 1,
            MASK64, POLY_BASE, POLY_OFFSET]


def random_u64(rng, size):
    return rng.integers(0, 2**64, size=size, dtype=np.uint64, endpoint=False)


def test_constants():
    # The package's constants are the frozen specification values the oracles spell out.
    assert (POLY_BASE, POLY_OFFSET) == (oracles.POLY_BASE, oracles.POLY_OFFSET)
    assert (POLY_BASE * POLY_BASE_INV) % M64 == 1
    assert POLY_BASE % 2 == 1
    assert MASK64 == M64 - 1 and MASK32 == 2**32 - 1
    assert hashing.EMPTY_SIGNATURE_VALUE == oracles.EMPTY_SIGNATURE_VALUE == 0xFFFFFFFF


def test_fmix64_scalar_matches_definition():
    rng = np.random.default_rng(1)
    values = EDGE_U64 + [int(v) for v in random_u64(rng, 500)]
    assert [fmix64_scalar(v) for v in values] == [oracle_fmix64(v) for v in values]
    # fmix64 is a bijection with the single fixed point 0 among these, and mixes 1 well.
    assert fmix64_scalar(0) == 0
    assert bin(fmix64_scalar(1)).count("1") > 16


def test_fmix64_vectorised_matches_scalar():
    rng = np.random.default_rng(2)
    values = np.concatenate([np.array(EDGE_U64, dtype=np.uint64), random_u64(rng, 5000)])
    expected = [oracle_fmix64(int(v)) for v in values]
    got = fmix64(values.copy())
    assert got.dtype == np.uint64
    assert [int(v) for v in got] == expected


def test_fmix64_modifies_in_place_and_returns_its_argument():
    values = np.array([1, 2, 3], dtype=np.uint64)
    out = fmix64(values)
    assert out is values
    assert [int(v) for v in values] == [oracle_fmix64(v) for v in (1, 2, 3)]


@pytest.mark.parametrize("units", [[], [0], [0, 0], [1], [0x41, 0x42], [0x10FFFF] * 7,
                                   [MASK32, 0, MASK32], list(range(300))])
def test_poly_hash64_scalar_matches_definition(units):
    assert poly_hash64_scalar(units) == oracle_poly_hash64(units)


def test_poly_hash64_scalar_distinguishes_leading_zeros_and_order():
    assert poly_hash64_scalar([]) != poly_hash64_scalar([0])
    assert poly_hash64_scalar([0]) != poly_hash64_scalar([0, 0])
    assert poly_hash64_scalar([1, 2]) != poly_hash64_scalar([2, 1])
    assert poly_hash64_scalar([]) == oracle_fmix64(oracles.POLY_OFFSET)


@pytest.mark.parametrize("width", [0, 1, 2, 3, 8, 32])
@pytest.mark.parametrize("dtype", [np.uint32, np.uint64, np.uint8])
def test_poly_hash64_rows_matches_scalar(width, dtype):
    rng = np.random.default_rng(width)
    high = np.iinfo(dtype).max if dtype != np.uint64 else MASK32
    units = rng.integers(0, int(high) + 1, size=(200, width), dtype=np.uint64).astype(dtype)
    units[0] = 0
    units[1] = high
    got = poly_hash64_rows(units)
    assert got.dtype == np.uint64 and got.shape == (200,)
    assert [int(v) for v in got] == [oracle_poly_hash64([int(u) for u in row]) for row in units]


def test_poly_hash64_rows_of_no_rows():
    got = poly_hash64_rows(np.zeros((0, 4), dtype=np.uint32))
    assert got.shape == (0,) and got.dtype == np.uint64


def test_poly_hash64_rows_accepts_non_contiguous_band_slices():
    rng = np.random.default_rng(5)
    signatures = rng.integers(0, 2**32, size=(50, 12), dtype=np.uint64).astype(np.uint32)
    band = signatures[:, 4:8]
    got = poly_hash64_rows(band)
    assert [int(v) for v in got] == [oracle_poly_hash64([int(u) for u in row]) for row in band]


@pytest.mark.parametrize("base", [POLY_BASE, POLY_BASE_INV, 3, 2, 0, 1, MASK64])
@pytest.mark.parametrize("count", [0, 1, 2, 3, 64, 65, 70, 1000])
def test_powers_mod64(base, count):
    got = powers_mod64(base, count)
    assert got.dtype == np.uint64 and got.shape == (count,)
    assert [int(v) for v in got] == [pow(base, j, M64) for j in range(count)]


def test_powers_of_base_times_inverse_powers_are_one():
    p, q = powers_mod64(POLY_BASE, 100), powers_mod64(POLY_BASE_INV, 100)
    assert np.all(p * q == np.uint64(1))


def test_splitmix64_scalar_matches_definition():
    for seed in [0, 1, 42, MASK64, 1 << 63, -1]:
        assert splitmix64_scalar(seed, 20) == oracle_splitmix64(seed, 20)
    assert splitmix64_scalar(7, 0) == []


def test_splitmix64_published_reference_outputs():
    # Frozen specification values, not a measurement: the first outputs of Vigna's splitmix64.c
    # from seed 1477776061723855037, as published in the reference test of rand_xoshiro
    # (rust-random/rngs, rand_xoshiro/src/splitmix64.rs). They check the oracle as well.
    expected = [1985237415132408290, 2979275885539914483, 13511426838097143398,
                8488337342461049707, 15141737807933549159, 17093170987380407015,
                16389528042912955399, 13177319091862933652, 10841969400225389492,
                17094824097954834098]
    assert splitmix64_scalar(1477776061723855037, 10) == expected
    assert oracle_splitmix64(1477776061723855037, 10) == expected


@pytest.mark.parametrize("num_perm", [1, 2, 7, 128, 1000])
def test_draw_permutations_follow_splitmix(num_perm):
    perms = draw_permutations(num_perm, seed=42)
    assert perms.count == num_perm
    assert perms.a.dtype == np.uint32 and perms.b.dtype == np.uint32
    assert perms.a.shape == (num_perm,) and perms.b.shape == (num_perm,)
    a, b = oracles.oracle_permutations(42, num_perm)
    assert [int(v) for v in perms.a] == a
    assert [int(v) for v in perms.b] == b
    assert np.all(perms.a % 2 == 1)


def test_draw_permutations_deterministic_and_prefix_property():
    full = draw_permutations(256, seed=1234)
    again = draw_permutations(256, seed=1234)
    assert np.array_equal(full.a, again.a) and np.array_equal(full.b, again.b)
    for m in [1, 5, 64, 255]:
        prefix = draw_permutations(m, seed=1234)
        assert np.array_equal(prefix.a, full.a[:m])
        assert np.array_equal(prefix.b, full.b[:m])


def test_draw_permutations_differ_between_seeds():
    seeds = [0, 1, 2, 42, 2**63, 2**64 - 1]
    drawn = [draw_permutations(64, seed) for seed in seeds]
    for i in range(len(seeds)):
        for j in range(i + 1, len(seeds)):
            # Not one column in common: the streams are unrelated.
            same = (drawn[i].a == drawn[j].a) & (drawn[i].b == drawn[j].b)
            assert not same.any(), (seeds[i], seeds[j])
    # Within one draw the permutations are distinct too.
    pairs = set(zip(drawn[3].a.tolist(), drawn[3].b.tolist()))
    assert len(pairs) == 64


def test_draw_permutations_rejects_zero():
    with pytest.raises(ValueError):
        draw_permutations(0, seed=1)


@pytest.mark.parametrize("seed", [-1, 2**64, True, 1.5, "42", None])
def test_draw_permutations_refuses_a_seed_outside_its_range(seed):
    """The seed is SplitMix64's initial state, an integer below 2**64: another is refused, not
    reduced (-1 would be 2**64 - 1, and True would be 1)."""
    with pytest.raises(ValueError, match="seed must be an integer from 0 to 2\\*\\*64 - 1"):
        draw_permutations(4, seed=seed)


def test_draw_permutations_takes_every_seed_in_its_range():
    for seed in (0, np.uint64(2**64 - 1), 2**64 - 1, np.int64(7)):
        assert draw_permutations(2, seed=seed).a.shape == (2,)
    assert np.array_equal(draw_permutations(3, seed=np.uint64(5)).a, draw_permutations(3, seed=5).a)
