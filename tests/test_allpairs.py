"""Tests for gpudedup.core.allpairs: the prefix-filtering join and the package's own brute force,
each against the independent oracle (tests/oracles.py: every pair of Python sets compared, with
the exact threshold rule), and the oracle's fast form against its brute force."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudedup.core import allpairs
from gpudedup.core.allpairs import SimilarPairs, brute_force_similar_pairs, exact_similar_pairs
from oracles import is_similar, similar_pairs, similar_pairs_matrix

THRESHOLDS = [1 / 3, 0.5, 0.65, 0.7, 0.8, 0.9, 1.0]
# An odd multiplier maps small ints to distinct 64-bit values spread over the whole range, so
# the tests also cover hashes >= 2**63 and an order unrelated to the ints'.
SCRAMBLE = 0x9E3779B97F4A7C15


def to_csr(sets: list[set[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(offsets int64 (n + 1,), hashes uint64 (N,)) of int sets, each scrambled and sorted."""
    rows = [np.sort(np.array(list(s), dtype=np.uint64) * np.uint64(SCRAMBLE)) for s in sets]
    offsets = np.zeros(len(sets) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([row.shape[0] for row in rows])
    hashes = np.concatenate(rows) if rows else np.empty(0, dtype=np.uint64)
    return offsets, hashes


def as_list(pairs: SimilarPairs) -> list[tuple[int, int, float]]:
    return list(zip(pairs.doc_a.tolist(), pairs.doc_b.tolist(), pairs.jaccard.tolist()))


def assert_oracle_pairs(actual: SimilarPairs, expected: dict[tuple[int, int], float]) -> None:
    """The pairs, in order, and their Jaccard values, bit for bit, are the oracle's."""
    assert actual.doc_a.dtype == np.int64 and actual.doc_b.dtype == np.int64
    assert actual.jaccard.dtype == np.float64
    assert as_list(actual) == [(a, b, j) for (a, b), j in sorted(expected.items())]


def planted_corpus(
    rng: np.random.Generator, n_docs: int, max_size: int, vocabulary: int
) -> list[set[int]]:
    """Random sets from a Zipf-like vocabulary, about half of them edited copies of earlier ones."""
    sets: list[set[int]] = []
    for _ in range(n_docs):
        if sets and rng.random() < 0.5:
            copy = set(sets[rng.integers(len(sets))])
            for _ in range(rng.integers(0, 1 + max(1, len(copy)) // 4)):
                if copy and rng.random() < 0.5:
                    copy.discard(rng.choice(sorted(copy)))
                else:
                    copy.add(int(rng.integers(vocabulary)))
            sets.append(copy)
        else:
            size = int(rng.integers(0, max_size + 1))
            sets.append({int(x) % vocabulary for x in rng.zipf(1.3, size)})
    return sets


# --- the package's brute force, and the oracle's two forms ------------------------------------


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("threshold", THRESHOLDS)
def test_brute_force_matches_python_sets(seed, threshold):
    sets = planted_corpus(np.random.default_rng(seed), n_docs=40, max_size=10, vocabulary=30)
    assert_oracle_pairs(brute_force_similar_pairs(*to_csr(sets), threshold), similar_pairs(sets, threshold))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("threshold", THRESHOLDS + [0.05])
def test_oracle_matrix_form_equals_its_brute_force(seed, threshold):
    # similar_pairs_matrix stands in for the brute force on corpora too large for it (the
    # shipped sample); it must find exactly the same pairs, empty and identical sets included.
    sets = planted_corpus(np.random.default_rng(50 + seed), n_docs=150, max_size=30, vocabulary=60)
    sets += [set(), set(), sets[0]]
    expected = similar_pairs(sets, threshold)
    assert len(expected) > 0
    assert similar_pairs_matrix(sets, threshold) == expected
    assert list(similar_pairs_matrix(sets, threshold)) == sorted(expected)


# --- exact_similar_pairs against the oracle ----------------------------------------------------


@st.composite
def corpora(draw) -> list[set[int]]:
    """Small sets over a small universe (so pairs overlap a lot), with planted near-copies,
    identical and empty documents."""
    universe = draw(st.integers(1, 40))
    element = st.integers(0, universe - 1)
    max_size = draw(st.sampled_from([3, 12, 30]))
    sets = draw(st.lists(st.sets(element, max_size=max_size), max_size=25))
    for _ in range(draw(st.integers(0, 15))):
        if not sets:
            break
        copy = set(sets[draw(st.integers(0, len(sets) - 1))])
        copy -= draw(st.sets(element, max_size=2))
        copy |= draw(st.sets(element, max_size=2))
        sets.insert(draw(st.integers(0, len(sets))), copy)
    return sets


@settings(max_examples=300, deadline=None)
@given(
    sets=corpora(),
    threshold=st.one_of(st.sampled_from(THRESHOLDS), st.floats(0.05, 1.0)),
    max_chunk_elements=st.sampled_from([1, 7, 64, allpairs.DEFAULT_MAX_CHUNK_ELEMENTS]),
)
def test_exact_matches_brute_force(sets, threshold, max_chunk_elements):
    offsets, hashes = to_csr(sets)
    actual = exact_similar_pairs(offsets, hashes, threshold, max_chunk_elements=max_chunk_elements)
    assert_oracle_pairs(actual, similar_pairs(sets, threshold))


@pytest.mark.parametrize("threshold", [0.5, 0.7, 0.8, 0.9])
def test_exact_matches_brute_force_on_larger_sets(threshold):
    # Sets of tens of elements from a shared Zipf vocabulary: long prefixes, common tokens in
    # many sets, and copies at every edit distance around the threshold. Small chunks force
    # many generation and comparison batches.
    sets = planted_corpus(np.random.default_rng(7), n_docs=600, max_size=80, vocabulary=400)
    offsets, hashes = to_csr(sets)
    expected = similar_pairs_matrix(sets, threshold)
    assert len(expected) > 100
    for max_chunk_elements in (1 << 10, allpairs.DEFAULT_MAX_CHUNK_ELEMENTS):
        actual = exact_similar_pairs(
            offsets, hashes, threshold, max_chunk_elements=max_chunk_elements
        )
        assert_oracle_pairs(actual, expected)


@pytest.mark.parametrize("head_extension", [0, 1, 1000])
@pytest.mark.parametrize("threshold", [0.5, 0.8, 1.0])
def test_result_does_not_depend_on_head_extension(monkeypatch, head_extension, threshold):
    # The extension only changes how many candidates are filtered where; 1000 caps every head
    # at its whole set, the case where the filter's bound has no tail at all.
    monkeypatch.setattr(allpairs, "HEAD_EXTENSION", head_extension)
    sets = planted_corpus(np.random.default_rng(3), n_docs=200, max_size=40, vocabulary=150)
    offsets, hashes = to_csr(sets)
    actual = exact_similar_pairs(offsets, hashes, threshold)
    assert_oracle_pairs(actual, similar_pairs(sets, threshold))


# --- boundaries and special cases --------------------------------------------------------------


@pytest.mark.parametrize(
    "shared, only_first, only_second, threshold, similar",
    [
        (4, 1, 0, 0.8, True),  # J = 4/5 exactly at 0.8 (0.8 is not exactly 4/5 in binary)
        (4, 1, 1, 0.8, False),  # J = 4/6
        (7, 3, 0, 0.7, True),  # J = 7/10
        (7, 2, 2, 0.7, False),  # J = 7/11
        (9, 1, 0, 0.9, True),  # J = 9/10
        (1, 1, 1, 1 / 3, True),  # J = 1/3
        (2, 0, 0, 1.0, True),  # identical
        (2, 0, 1, 1.0, False),  # J = 2/3
        (39, 61, 0, 0.39, True),  # J = 39/100
        (38, 62, 0, 0.39, False),  # J = 38/100
        (1, 0, 0, 0.05, True),  # one-element sets
    ],
)
def test_exactly_at_threshold(shared, only_first, only_second, threshold, similar):
    common = set(range(shared))
    first = common | set(range(100, 100 + only_first))
    second = common | set(range(200, 200 + only_second))
    assert is_similar(first, second, threshold) == similar  # the oracle reads the rule the same way
    offsets, hashes = to_csr([first, second])
    expected = [(0, 1)] if similar else []
    for find in (exact_similar_pairs, brute_force_similar_pairs):
        pairs = find(offsets, hashes, threshold)
        assert list(zip(pairs.doc_a.tolist(), pairs.doc_b.tolist())) == expected
        if similar:
            assert pairs.jaccard[0] == shared / (shared + only_first + only_second)


def test_identical_and_empty_documents():
    sets = [set(), {1, 2, 3}, set(), {1, 2, 3}, {1, 2, 3}, {4}, {4}, set()]
    offsets, hashes = to_csr(sets)
    pairs = exact_similar_pairs(offsets, hashes, 1.0)
    assert as_list(pairs) == [(1, 3, 1.0), (1, 4, 1.0), (3, 4, 1.0), (5, 6, 1.0)]


@pytest.mark.parametrize("n_docs", [0, 1, 4])
def test_no_elements_at_all(n_docs):
    offsets = np.zeros(n_docs + 1, dtype=np.int64)
    pairs = exact_similar_pairs(offsets, np.empty(0, dtype=np.uint64), 0.5)
    assert pairs.doc_a.shape == pairs.doc_b.shape == pairs.jaccard.shape == (0,)


def test_pairs_are_ordered_and_distinct():
    sets = planted_corpus(np.random.default_rng(11), n_docs=300, max_size=20, vocabulary=60)
    pairs = exact_similar_pairs(*to_csr(sets), 0.5)
    assert np.all(pairs.doc_a < pairs.doc_b)
    keys = pairs.doc_a * len(sets) + pairs.doc_b
    assert np.all(np.diff(keys) > 0)


# --- input checks ------------------------------------------------------------------------------


@pytest.mark.parametrize("threshold", [0.0, -0.1, 1.5, float("nan"), 1e-9])
def test_rejects_bad_thresholds(threshold):
    offsets, hashes = to_csr([{1, 2}, {1, 2}])
    with pytest.raises(ValueError, match="threshold"):
        exact_similar_pairs(offsets, hashes, threshold)


@pytest.mark.parametrize(
    "offsets, hashes",
    [
        ([0, 2, 3], [5, 5, 1]),  # repeated element in a document
        ([0, 2, 3], [5, 4, 1]),  # descending within a document
        ([0, 2, 2], [1, 2, 3]),  # offsets do not cover the hashes
        ([1, 3], [1, 2, 3]),  # offsets do not start at 0
        ([0, 2, 1, 3], [1, 2, 3]),  # decreasing offsets
    ],
)
def test_rejects_malformed_sets(offsets, hashes):
    with pytest.raises(ValueError):
        exact_similar_pairs(
            np.array(offsets, dtype=np.int64), np.array(hashes, dtype=np.uint64), 0.5
        )


def test_rejects_signed_hashes():
    with pytest.raises(ValueError, match="uint64"):
        exact_similar_pairs(np.array([0, 2]), np.array([1, 2], dtype=np.int64), 0.5)


def test_accepts_descending_values_across_documents():
    offsets = np.array([0, 2, 4], dtype=np.int64)
    hashes = np.array([7, 9, 1, 9], dtype=np.uint64)
    pairs = exact_similar_pairs(offsets, hashes, 1 / 3)
    assert as_list(pairs) == [(0, 1, 1 / 3)]
