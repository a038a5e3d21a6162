"""verify.py's routes of counting intersections (the merges of the C loops built at install and
of numba's verify_kernels.py, and scipy's row-wise product) and the exact bounds of
pair_jaccard_at_least.

Oracles: Python sets (len(A & B) / len(A | B), a float division of Python ints) for every
Jaccard, and a brute-force scan over every intersection count for needed_intersections. The
rule the bounds must keep: a pair is ruled out only if its Jaccard, computed as pair_jaccard
computes it, is below the threshold; so the oracle compares with the same float64 quotient,
not with exact fractions.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import gpudedup
from gpudedup import _cpu_kernels
from gpudedup.core import verify
from gpudedup.compiled import KERNEL_SWITCH
from gpudedup.core.verify import (BELOW_THRESHOLD, merge_kernels, needed_intersections, pair_jaccard,
                             pair_jaccard_at_least, set_arrays)

THRESHOLDS = [0.8, 0.5, 0.7, 0.75, 0.85, 0.9, 0.95, 0.99, 1.0, 1 / 3, 2 / 3, 0.1, 0.01]


# The switch's value that takes each route (as a user would switch it).
ROUTE_SWITCH = {"c": "c", "numba": "numba", "scipy": "numpy"}


@pytest.fixture(params=["c", "numba", "scipy"])
def route(request, monkeypatch) -> str:
    """Each test once per route: the C loops (CI builds them), numba's kernels (numba is a base
    dependency, so they must load), and scipy's product."""
    monkeypatch.setenv(KERNEL_SWITCH, ROUTE_SWITCH[request.param])
    assert (merge_kernels() is None) == (request.param == "scipy")
    return request.param


def matrix_of(rows: list[set[int]]):
    """The sets of int64 columns (verify.set_arrays), row i = rows[i]."""
    columns = [np.array(sorted(row), dtype=np.int64) for row in rows]
    return set_arrays(np.concatenate(columns) if columns else np.zeros(0, np.int64),
                       np.array([len(row) for row in rows], dtype=np.int64))


def set_jaccard(a: set, b: set) -> float:
    """The oracle: |A ∩ B| / |A ∪ B| of Python sets (nan for two empty sets, as 0 / 0 gives)."""
    union = len(a | b)
    return len(a & b) / union if union else float("nan")


def python_needed(a: int, b: int, threshold: float) -> int:
    """Brute force: the least i in 0 .. min(a, b) whose Jaccard i / (a + b - i), as a Python
    float, reaches the threshold; min(a, b) + 1 if none does."""
    for i in range(min(a, b) + 1):
        union = a + b - i
        if union and i / union >= threshold:
            return i
    return min(a, b) + 1


def random_values(rng: np.random.Generator, count: int) -> list[int]:
    """``count`` distinct int64 values of both signs, the extremes among them now and then
    (columns are 64-bit hashes with the top bit flipped: any int64)."""
    extremes = [int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max), -1, 0]
    values = set(rng.choice(extremes, size=int(rng.integers(0, 3)), replace=False).tolist())
    while len(values) < count:
        values.update(rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, size=count, dtype=np.int64,
                                   endpoint=True).tolist())
    return list(values)[:count]


def pair_with(rng: np.random.Generator, a: int, b: int, common: int) -> tuple[set[int], set[int]]:
    """Sets A, B with |A| = a, |B| = b and |A ∩ B| = common, of random int64 values."""
    values = random_values(rng, a + b - common)
    shared = values[:common]
    return set(shared + values[common:a]), set(shared + values[a:])


# --- needed_intersections: the count a pair must reach -----------------------------------------


def boundary_thresholds(limit: int, rng: np.random.Generator, count: int) -> list[float]:
    """Thresholds right at a size ratio a / b (a < b <= limit), and one ulp either side."""
    ratios = sorted({a / b for b in range(1, limit + 1) for a in range(1, b)})
    chosen = rng.choice(ratios, size=count, replace=False).tolist()
    return [x for t in chosen for x in (t, float(np.nextafter(t, 0.0)), float(np.nextafter(t, 2.0))) if x <= 1.0]


def test_needed_intersections_is_the_least_count_reaching_t_small_sizes():
    rng = np.random.default_rng(3)
    sizes = np.arange(0, 31, dtype=np.int64)
    a, b = (grid.ravel() for grid in np.meshgrid(sizes, sizes))
    for threshold in THRESHOLDS + boundary_thresholds(30, rng, 40):
        got = needed_intersections(a, b, threshold)
        expected = [python_needed(x, y, threshold) for x, y in zip(a.tolist(), b.tolist())]
        assert got.tolist() == expected, threshold


@pytest.mark.parametrize("seed", [0, 1])
def test_needed_intersections_at_large_sizes(seed):
    """Sizes up to 2**40, where the start t (a + b) / (1 + t) is rounded: the answer still
    is the least count reaching t, checked by its definition (J(needed) >= t > J(needed - 1))."""
    rng = np.random.default_rng(seed)
    b = rng.integers(1, 1 << 40, size=20_000, dtype=np.int64)
    # Smaller sizes near and at b * t, so most pairs can reach t and some just cannot.
    for threshold in THRESHOLDS + [float(rng.uniform(0.05, 1.0)) for _ in range(5)]:
        a = np.minimum(b, np.floor(b * threshold).astype(np.int64) + rng.integers(-3, 4, size=b.shape[0]))
        a = np.maximum(a, 0)
        needed = needed_intersections(a, b, threshold)
        for x, y, n in zip(a.tolist(), b.tolist(), needed.tolist()):
            smaller = min(x, y)
            assert 0 <= n <= smaller + 1
            if n <= smaller:
                assert n / (x + y - n) >= threshold
            else:  # the size bound: not even A inside B reaches t
                assert smaller / (x + y - smaller) < threshold
            if 0 < n:
                assert (n - 1) / (x + y - (n - 1)) < threshold


def test_size_bound_at_the_exact_ratio():
    """|A| / |B| exactly t is kept (A inside B has Jaccard t); one element less is ruled out."""
    for threshold, a, b in [(0.8, 4, 5), (0.8, 80, 100), (0.8, 800_000, 1_000_000), (0.5, 1, 2), (0.9, 9, 10),
                            (1.0, 7, 7), (0.75, 3, 4)]:
        assert a / b == threshold
        assert needed_intersections(np.array([a]), np.array([b]), threshold).tolist() == [a]
        assert needed_intersections(np.array([a - 1]), np.array([b]), threshold).tolist() == [a]  # a - 1 + 1
        assert needed_intersections(np.array([b]), np.array([a]), threshold).tolist() == [a]  # either order


# --- pair_jaccard_at_least against Python sets --------------------------------------------------


def boundary_pairs(rng: np.random.Generator, threshold: float, count: int) -> list[tuple[int, int, int]]:
    """(|A|, |B|, |A ∩ B|) at the edges of the bounds: sizes at the ratio t and just off it,
    intersections at the count needed and one below, full containment, nothing shared."""
    cases = []
    for _ in range(count):
        b = int(rng.integers(1, 300))
        at_ratio = int(np.floor(b * threshold))
        for a in {max(at_ratio + d, 0) for d in (-1, 0, 1)} | {int(rng.integers(0, b + 1))}:
            a = min(a, b)
            need = python_needed(a, b, threshold)
            for common in {need, need - 1, a, 0, int(rng.integers(0, a + 1))}:
                if 0 <= common <= a:
                    cases.append((a, b, common) if rng.random() < 0.5 else (b, a, common))
    return cases


@pytest.mark.parametrize("threshold", [0.8, 0.5, 0.9, 1.0, 1 / 3, 0.85])
def test_pair_jaccard_at_least_matches_python_sets(route, threshold):
    rng = np.random.default_rng(int(threshold * 1000))
    rows, first, second = [], [], []
    for a, b, common in boundary_pairs(rng, threshold, 60):
        left, right = pair_with(rng, a, b, common)
        first.append(len(rows))
        second.append(len(rows) + 1)
        rows += [left, right]
    sets = matrix_of(rows)
    got = pair_jaccard_at_least(sets, np.array(first), np.array(second), threshold)
    oracle = [set_jaccard(rows[x], rows[y]) for x, y in zip(first, second)]
    expected = [j if j >= threshold else BELOW_THRESHOLD for j in oracle]
    assert got.dtype == np.float64 and got.tolist() == expected
    # The cases reach both sides of the threshold, and some sit on it exactly.
    assert (got >= threshold).sum() > 10 and (got == BELOW_THRESHOLD).sum() > 10
    assert threshold in oracle


def test_pair_jaccard_at_least_on_random_sets(route):
    """Random sets over a small universe (many partial overlaps), every pair, many thresholds:
    value for value, what pair_jaccard followed by ``>= t`` gives, and the Python sets' Jaccard."""
    rng = np.random.default_rng(11)
    rows = [set(rng.integers(-40, 40, size=int(rng.integers(1, 50))).tolist()) for _ in range(80)]
    sets = matrix_of(rows)
    first, second = (x.ravel() for x in np.meshgrid(np.arange(80), np.arange(80)))
    exact = pair_jaccard(sets, first, second)
    assert exact.tolist() == [set_jaccard(rows[x], rows[y]) for x, y in zip(first.tolist(), second.tolist())]
    for threshold in THRESHOLDS:
        got = pair_jaccard_at_least(sets, first, second, threshold)
        assert np.array_equal(got, np.where(exact >= threshold, exact, BELOW_THRESHOLD)), threshold
    # In small chunks of pairs, and over threads: the same values in the same order.
    for threads, chunk_pairs in ((3, 1000), (2, 7), (1, 1)):
        got = pair_jaccard_at_least(sets, first, second, 0.3, threads=threads, chunk_pairs=chunk_pairs)
        assert np.array_equal(got, np.where(exact >= 0.3, exact, BELOW_THRESHOLD)), (threads, chunk_pairs)


def test_pair_jaccard_at_least_refuses_a_threshold_out_of_range():
    sets = matrix_of([{1}, {1}])
    for threshold in [0.0, -0.5, 1.5, float("nan")]:
        with pytest.raises(ValueError, match=r"threshold must be in \(0, 1\]"):
            pair_jaccard_at_least(sets, np.array([0]), np.array([1]), threshold)


# --- the kernels themselves ---------------------------------------------------------------------


@pytest.mark.parametrize("build", ["c", "numba"])
def test_kernel_counts_with_any_needed_count(build):
    """Each build's merges called directly, intersections_at_least with arbitrary counts asked
    for (not only a threshold's): the exact count where it reaches the one asked, RULED_OUT
    where not (the merge stopped early, or never started: a count above the smaller size)."""
    from gpudedup.core import verify_kernels
    from gpudedup.core.verify_kernels import RULED_OUT

    loops = _cpu_kernels if build == "c" else verify_kernels
    intersections, intersections_at_least = loops.intersections, loops.intersections_at_least
    rng = np.random.default_rng(5)
    rows = [set(rng.integers(-30, 30, size=int(rng.integers(0, 40))).tolist()) for _ in range(60)]
    sets = matrix_of(rows)
    first = rng.integers(0, 60, size=5000).astype(np.int64)
    second = rng.integers(0, 60, size=5000).astype(np.int64)
    common = [len(rows[x] & rows[y]) for x, y in zip(first.tolist(), second.tolist())]
    needed = np.array([c + int(rng.integers(-3, 4)) for c in common], dtype=np.int64).clip(0)
    out = np.empty(first.shape[0], np.int64)
    intersections_at_least(*verify.csr_arrays(sets), *verify.csr_arrays(sets), first, second, needed, out)
    assert out.tolist() == [c if c >= n else RULED_OUT for c, n in zip(common, needed.tolist())]
    intersections(*verify.csr_arrays(sets), first, second, out)
    assert out.tolist() == common
    # Two sources: the second row of each pair from another matrix (an index's new documents).
    others = [set(rng.integers(-30, 30, size=int(rng.integers(0, 40))).tolist()) for _ in range(45)]
    second = rng.integers(0, 45, size=5000).astype(np.int64)
    common = [len(rows[x] & others[y]) for x, y in zip(first.tolist(), second.tolist())]
    needed = np.array([c + int(rng.integers(-3, 4)) for c in common], dtype=np.int64).clip(0)
    intersections_at_least(*verify.csr_arrays(sets), *verify.csr_arrays(matrix_of(others)), first, second, needed,
                           out)
    assert out.tolist() == [c if c >= n else RULED_OUT for c, n in zip(common, needed.tolist())]


@pytest.mark.parametrize("build", ["c", "numba"])
def test_signature_agreements_kernel_against_a_python_count(monkeypatch, build):
    """The signature filter's agreement counts, by each build's kernel from the array in place
    and by numpy on gathered rows (the route of a store's row gatherer, and with the kernels
    off): each equal to a plain Python count of the equal columns."""
    rng = np.random.default_rng(3)
    signatures = rng.integers(0, 4, size=(50, 16)).astype(np.uint32)  # few values: many agreements
    first, second = rng.integers(0, 50, size=(2, 3000)).astype(np.int64)
    expected = [sum(int(x == y) for x, y in zip(signatures[a], signatures[b]))
                for a, b in zip(first.tolist(), second.tolist())]
    monkeypatch.setenv(KERNEL_SWITCH, build)
    assert verify.signature_agreements(signatures, first, second).tolist() == expected

    class Gatherer:  # a staged store's signatures: rows by [positions] only
        def __getitem__(self, positions):
            return signatures[positions]

    assert verify.signature_agreements(Gatherer(), first, second, chunk=700).tolist() == expected
    monkeypatch.setenv(KERNEL_SWITCH, "numpy")
    assert verify.signature_agreements(signatures, first, second, chunk=700).tolist() == expected


@pytest.mark.parametrize("route", ["c", "numba", "scipy"])
def test_pair_jaccard_at_least_across_two_sources(route, monkeypatch, tmp_path):
    """Pairs whose second row is read from another source (second_sets), the first from a
    SetArrays over memory-mapped files as an index segment stores them: the Jaccard of
    Python sets where it reaches the threshold, BELOW_THRESHOLD elsewhere, on both routes."""
    if route == "scipy":
        monkeypatch.setenv(KERNEL_SWITCH, "numpy")
        # The scipy route makes matrices of the pairs' stored rows, never of the whole segment's
        # 440 (below): the pairs read 40 of them.
        whole = verify.as_set_matrix
        monkeypatch.setattr(verify, "as_set_matrix", lambda sets: whole(sets) if sets.indptr.shape[0] != 441 else
                            pytest.fail("a matrix of every stored set was made"))
    else:
        monkeypatch.setenv(KERNEL_SWITCH, route)
    rng = np.random.default_rng(11)
    base = [set(rng.integers(0, 60, size=int(rng.integers(1, 50))).tolist()) for _ in range(40)]
    # Near copies of stored sets, so that many pairs reach the threshold.
    news = [set(list(base[i % 40])[: max(1, len(base[i % 40]) - int(rng.integers(0, 4)))]) | {100 + i % 3}
            for i in range(70)]
    news[:10] = base[:10]  # and some copies, for the threshold 1
    # The pairs read 40 of the 440 stored sets (an index segment holds many more than a run asks for).
    stored = matrix_of(base + [set(rng.integers(0, 60, size=5).tolist()) for _ in range(400)])
    np.save(tmp_path / "offsets.npy", stored.indptr.astype(np.int64))
    np.save(tmp_path / "columns.npy", stored.indices.astype(np.int64))
    mapped = verify.SetArrays(np.load(tmp_path / "offsets.npy", mmap_mode="r"),
                              np.load(tmp_path / "columns.npy", mmap_mode="r"))
    first = rng.integers(0, 40, size=3000).astype(np.int64)
    second = rng.integers(0, 70, size=3000).astype(np.int64)
    second[:70] = np.arange(70)
    first[:70] = np.arange(70) % 40
    for threshold in (0.5, 0.8, 1.0):
        got = pair_jaccard_at_least(mapped, first, second, threshold, threads=2, chunk_pairs=1000,
                                    second_sets=matrix_of(news))
        exact = [len(base[a] & news[b]) / len(base[a] | news[b]) for a, b in zip(first.tolist(), second.tolist())]
        assert got.tolist() == [j if j >= threshold else BELOW_THRESHOLD for j in exact]
        assert (got >= threshold).sum() > 0


def test_routes_agree_bit_for_bit_on_shingle_sets(jaccard_pairs, batch_from_rows, monkeypatch):
    """Both routes on sets of 64-bit hashes (both column signs, intersections in the hundreds):
    the same float64 values, equal to the construction's exact Jaccard."""
    from gpudedup.core.verify import document_sets

    batches = [jaccard_pairs(30, target, union=500, seed=int(target * 100)) for target in (0.3, 0.79, 0.8, 1.0)]
    rows = [batch.hashes[batch.offsets[d]:batch.offsets[d + 1]] for batch, _ in batches for d in range(batch.n_docs)]
    expected = np.concatenate([np.full(batch.n_docs // 2, jaccard) for batch, jaccard in batches])
    docs = np.arange(len(rows), dtype=np.int64)
    sets = document_sets(lambda part: batch_from_rows([rows[int(d)] for d in part]), docs,
                         np.full(len(rows), 500, np.int64), 10_000)
    first, second = docs[0::2], docs[1::2]  # views with a stride: the kernel routes cope
    monkeypatch.setenv(KERNEL_SWITCH, "numba")
    merged = pair_jaccard(sets, first, second)
    bounded = pair_jaccard_at_least(sets, first, second, 0.8)
    monkeypatch.setenv(KERNEL_SWITCH, "c")
    assert np.array_equal(pair_jaccard(sets, first, second), merged)
    assert np.array_equal(pair_jaccard_at_least(sets, first, second, 0.8), bounded)
    monkeypatch.setenv(KERNEL_SWITCH, "numpy")
    assert np.array_equal(pair_jaccard(sets, first, second, chunk_elements=700), merged)
    assert np.array_equal(pair_jaccard_at_least(sets, first, second, 0.8), bounded)
    assert np.array_equal(merged, expected)
    assert np.array_equal(bounded, np.where(expected >= 0.8, expected, BELOW_THRESHOLD))


def test_empty_rows(route):
    """Empty rows: Jaccard 0 with a non-empty row, nan (0 / 0) with another empty row, on both
    routes; pair_jaccard_at_least rules all of them out. No pairs, and a matrix of no rows."""
    sets = matrix_of([set(), {3, -9}, set(), {3}])
    first, second = np.array([0, 1, 0, 0, 2, 3]), np.array([1, 0, 2, 0, 3, 1])
    got = pair_jaccard(sets, first, second)
    assert got[:2].tolist() == [0.0, 0.0] and np.isnan(got[2:4]).all()
    assert got[4:].tolist() == [0.0, 0.5]
    assert pair_jaccard_at_least(sets, first, second, 0.5).tolist() == [BELOW_THRESHOLD] * 5 + [0.5]
    none = np.zeros(0, np.int64)
    assert pair_jaccard(sets, none, none).shape == (0,)
    assert pair_jaccard_at_least(sets, none, none, 0.8).shape == (0,)
    assert pair_jaccard_at_least(matrix_of([]), none, none, 0.8).shape == (0,)


# --- the switch, the fallback, and what importing loads ----------------------------------------


def test_no_numba_falls_back_to_scipy(monkeypatch, without_c_loops):
    """Where neither the C loops were built nor numba can be imported (the GPU image may have
    neither), the scipy route counts."""
    monkeypatch.delenv(KERNEL_SWITCH, raising=False)
    monkeypatch.setitem(sys.modules, "numba", None)  # `import numba` raises ImportError
    monkeypatch.delitem(sys.modules, "gpudedup.core.verify_kernels", raising=False)
    monkeypatch.delattr(gpudedup, "verify_kernels", raising=False)
    assert merge_kernels() is None
    calls = []
    scipy_route = verify.scipy_intersections
    monkeypatch.setattr(verify, "scipy_intersections",
                        lambda *args, **kwargs: calls.append(1) or scipy_route(*args, **kwargs))
    rows = [{1, 2, 3}, {2, 3, 4}, {1, 2, 3, 4}]
    got = pair_jaccard(matrix_of(rows), np.array([0, 0, 1]), np.array([1, 2, 2]))
    assert got.tolist() == [0.5, 0.75, 0.75] and calls == [1]


@pytest.mark.parametrize("value", ["numpy", "NumPy", " numpy "])
def test_the_switch_turns_the_kernels_off(monkeypatch, value):
    monkeypatch.setenv(KERNEL_SWITCH, value)
    assert merge_kernels() is None
    monkeypatch.setenv(KERNEL_SWITCH, "numba")  # the other values take a build
    assert merge_kernels() is not None and merge_kernels() is not _cpu_kernels
    monkeypatch.setenv(KERNEL_SWITCH, "c")
    assert merge_kernels() is _cpu_kernels
    monkeypatch.delenv(KERNEL_SWITCH)  # unset: the C loops where they were built
    assert merge_kernels() is _cpu_kernels


def test_the_c_merges_refuse_rows_that_are_not_there():
    """The C loops check every row number against the matrix before they read (numba's
    kernels trust their callers): a row past the end, or negative, is a ValueError naming it."""
    sets = matrix_of([{1, 2}, {2, 3}])
    indptr, indices = verify.csr_arrays(sets)
    out = np.empty(2, np.int64)
    with pytest.raises(ValueError, match=r"^second\[1\] is 9, not a row of the 2 there are$"):
        _cpu_kernels.intersections(indptr, indices, np.array([0, 1]), np.array([1, 9]), out)
    with pytest.raises(ValueError, match=r"^first\[0\] is -1"):
        _cpu_kernels.intersections_at_least(indptr, indices, indptr, indices, np.array([-1, 0]), np.array([0, 1]),
                                            np.ones(2, np.int64), out)
    with pytest.raises(ValueError, match="two dimensions"):
        _cpu_kernels.signature_agreements(np.zeros(8, np.uint32), np.array([0, 1]), np.array([1, 0]), out)
    _cpu_kernels.intersections(indptr, indices, np.array([0, 1]), np.array([1, 1]), out)
    assert out.tolist() == [1, 2]
