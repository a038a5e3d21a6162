"""lsh.py: the S-curve against Monte Carlo, the banding rule, and candidate pairs against a
brute-force bucket oracle (including the bound on huge buckets and its effect on recall).

The probabilities expected are the formula 1 - (1 - s**r)**b and the banding rule by exhaustive
search (tests/oracles.py), never lsh.collision_probability or lsh.choose_bands themselves."""

import itertools
import math
import re

import numpy as np
import pytest

from gpudedup.core.cluster import find_clusters
from gpudedup.errors import ParameterError
from gpudedup.core.hashing import draw_permutations
from gpudedup.threads import map_parallel
from gpudedup.core.ragged import last_of_runs, last_over_parts
from gpudedup.core.lsh import (
    Banding,
    band_keys,
    bucket_pairs,
    candidate_pairs,
    choose_bands,
    collision_probability,
    steepest_similarity,
)
from gpudedup.core.minhash import minhash_signatures
from gpudedup.core.shingling import ShingleSpec, shingle_hashes
from gpudedup.core.verify import document_sets, pair_jaccard
from oracles import (min_bands, oracle_banding, oracle_bucket_pairs, oracle_candidate_pairs, oracle_poly_hash64,
                     precise_banding, s_curve)

# --- the S-curve --------------------------------------------------------------------------


def test_collision_probability_formula():
    for s, b, r in [(0.0, 5, 3), (1.0, 5, 3), (0.5, 1, 1), (0.8, 9, 13), (0.3, 50, 2)]:
        assert float(collision_probability(s, b, r)) == pytest.approx(s_curve(s, b, r), abs=1e-15)
    curve = collision_probability(np.linspace(0, 1, 101), 20, 5)
    assert curve.shape == (101,)
    assert np.all(np.diff(curve) >= 0) and curve[0] == 0 and curve[-1] == 1
    with np.errstate(invalid="raise"):  # (a histogram's last bin past 1: evaluate --threshold 1)
        assert collision_probability(np.array([1.0, 1.05]), 20, 5).tolist() == [1.0, 1.0]


def any_band_equal(signatures, first, second, banding):
    b, r = banding.bands, banding.rows
    sa = signatures[first, : b * r].reshape(-1, b, r)
    sb = signatures[second, : b * r].reshape(-1, b, r)
    return (sa == sb).all(axis=2).any(axis=1)


PAIRS = 2000


@pytest.mark.parametrize("bands, rows, similarity",
                         [(20, 5, 0.5), (10, 10, 0.8), (32, 4, 0.6), (8, 16, 0.9), (9, 13, 0.8),
                          (4, 2, 0.2)])
def test_candidate_rate_matches_s_curve(jaccard_pairs, bands, rows, similarity):
    batch, jaccard = jaccard_pairs(PAIRS, similarity, union=100, seed=bands * rows)
    banding = Banding(bands, rows, "test")
    signatures = minhash_signatures(batch, draw_permutations(bands * rows, seed=bands + 1000 * rows))
    keys = band_keys(signatures, banding)
    docs = np.arange(2 * PAIRS, dtype=np.int64)
    first, second = candidate_pairs(keys, docs, window=4)

    # Only the planted pairs can share a band (other documents are unrelated random sets).
    assert np.all(first % 2 == 0) and np.all(second == first + 1)
    pair_index = np.arange(PAIRS)
    expected = any_band_equal(signatures, 2 * pair_index, 2 * pair_index + 1, banding)
    assert np.array_equal(np.flatnonzero(expected), first // 2)

    p = s_curve(jaccard, bands, rows)
    rate = first.shape[0] / PAIRS
    assert abs(rate - p) <= 5 * math.sqrt(p * (1 - p) / PAIRS) + 1e-9, (rate, p)


def test_band_keys_hash_each_band():
    rng = np.random.default_rng(0)
    signatures = rng.integers(0, 2**32, size=(20, 30), dtype=np.uint64).astype(np.uint32)
    signatures[1] = signatures[0]
    signatures[2, :4] = signatures[0, :4]
    banding = Banding(7, 4, "test")  # 28 of 30 columns
    keys = band_keys(signatures, banding)
    assert keys.dtype == np.uint64 and keys.shape == (20, 7)
    for d in range(20):
        for band in range(7):
            units = [int(v) for v in signatures[d, band * 4:(band + 1) * 4]]
            assert int(keys[d, band]) == oracle_poly_hash64(units)
    assert np.array_equal(keys[0], keys[1])
    assert keys[0, 0] == keys[2, 0] and not np.any(keys[0, 1:] == keys[2, 1:])


# --- choosing bands -----------------------------------------------------------------------


THRESHOLDS = [0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95]
NUM_PERMS = [32, 48, 64, 96, 128, 192, 256]


@pytest.mark.parametrize("num_perm", NUM_PERMS)
def test_choose_bands_grid(num_perm):
    for threshold in THRESHOLDS:
        expected = oracle_banding(threshold, num_perm)
        if expected is None:
            with pytest.raises(ParameterError):
                choose_bands(threshold, num_perm)
            continue
        banding = choose_bands(threshold, num_perm)
        b, r = banding.bands, banding.rows
        assert b >= 1 and r >= 1 and b * r <= num_perm
        miss = (1 - threshold**r) ** b
        assert miss <= 0.01, (threshold, num_perm, b, r, miss)
        assert 1 - s_curve(threshold, b, r) <= 0.01 + 1e-12
        # No larger r is feasible, and b is the smallest that meets the target.
        for larger in range(r + 1, num_perm + 1):
            assert min_bands(threshold, larger, 0.01, num_perm // larger) is None
        assert b == 1 or (1 - threshold**r) ** (b - 1) > 0.01
        assert (b, r) == expected
        assert isinstance(banding.rule, str) and banding.rule


def test_choose_bands_default_settings_are_all_feasible():
    # At the grid's every point a banding exists (the grid is the supported range).
    for threshold, num_perm in itertools.product(THRESHOLDS, NUM_PERMS):
        assert oracle_banding(threshold, num_perm) is not None


def test_choose_bands_other_targets_and_edges():
    assert choose_bands(1.0, 64)[:2] == (1, 64)
    for threshold, num_perm, max_fn in [(0.8, 128, 0.05), (0.7, 64, 0.001), (0.9, 100, 0.2)]:
        banding = choose_bands(threshold, num_perm, max_false_negative=max_fn)
        assert (banding.bands, banding.rows) == oracle_banding(threshold, num_perm, max_fn)


@pytest.mark.parametrize("threshold, num_perm", [(0.0, 128), (0.3, 8), (0.9, 1), (0.5, 6), (0.1, 32)])
def test_choose_bands_impossible_raises(threshold, num_perm):
    assert oracle_banding(threshold, num_perm) is None
    with pytest.raises(ParameterError) as info:
        choose_bands(threshold, num_perm)
    assert str(num_perm) in str(info.value)


# --- buckets and candidate pairs ----------------------------------------------------------


def random_keys(rng, n, bands, alphabet):
    # Few distinct keys, spread over the 64-bit range (top bit included), so buckets form.
    values = rng.integers(0, 2**64, size=alphabet, dtype=np.uint64)
    return values[rng.integers(0, alphabet, size=(n, bands))]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("window", [1, 2, 3, 100])
def test_bucket_pairs_match_oracle(seed, window):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 80))
    keys = random_keys(rng, n, 1, alphabet=int(rng.integers(1, 12)))[:, 0]
    docs = np.sort(rng.choice(10_000, size=n, replace=False)).astype(np.int64)
    first, second = bucket_pairs(keys, docs, window)
    assert first.dtype == np.int64 and second.dtype == np.int64
    got = list(zip(first.tolist(), second.tolist()))
    assert all(a < b for a, b in got)
    assert len(got) == len(set(got))  # one band never repeats a pair
    assert sorted(got) == sorted(oracle_bucket_pairs(keys, docs, window))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("window", [1, 2, 5, 1000])
@pytest.mark.parametrize("threads", [1, 3])
def test_candidate_pairs_match_oracle(seed, window, threads):
    # threads: the bands on a thread pool, as the pipeline runs them on the host (bands finish
    # in any order; the map keeps theirs).
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(0, 120))
    bands = int(rng.integers(1, 6))
    keys = random_keys(rng, n, bands, alphabet=int(rng.integers(1, 20)))
    docs = np.sort(rng.choice(5_000, size=n, replace=False)).astype(np.int64)
    first, second = candidate_pairs(keys, docs, window,
                                    map_bands=lambda band_codes, bands: map_parallel(band_codes, list(bands), threads))
    assert first.dtype == np.int64 and second.dtype == np.int64
    got = list(zip(first.tolist(), second.tolist()))
    assert got == oracle_candidate_pairs(keys, docs, window)  # sorted, unique, a < b


def test_candidate_pairs_edge_cases():
    empty_keys = np.zeros((0, 3), dtype=np.uint64)
    first, second = candidate_pairs(empty_keys, np.zeros(0, dtype=np.int64), 4)
    assert first.shape == (0,) and second.shape == (0,)
    one = candidate_pairs(np.ones((1, 3), dtype=np.uint64), np.array([7], dtype=np.int64), 4)
    assert one[0].shape == (0,)
    # All keys distinct: no pairs. All keys equal in every band: each pair once.
    distinct = np.arange(30, dtype=np.uint64).reshape(10, 3)
    assert candidate_pairs(distinct, np.arange(10, dtype=np.int64), 4)[0].shape == (0,)
    same = np.full((4, 3), 2**63 + 5, dtype=np.uint64)
    first, second = candidate_pairs(same, np.array([2, 3, 9, 10], dtype=np.int64), 10)
    assert list(zip(first.tolist(), second.tolist())) == sorted(itertools.combinations([2, 3, 9, 10], 2))


def test_huge_bucket_is_bounded_by_window():
    m, window = 5000, 64
    keys = np.full(m, 12345, dtype=np.uint64)
    docs = np.arange(m, dtype=np.int64) * 3
    first, second = bucket_pairs(keys, docs, window)
    assert first.shape[0] == m * window - window * (window + 1) // 2 <= m * window
    assert sorted(zip(first.tolist(), second.tolist())) == sorted(oracle_bucket_pairs(keys, docs, window))
    # Every member is paired with its successor, so the bucket stays connected.
    assert set(zip(docs[:-1].tolist(), docs[1:].tolist())) <= set(zip(first.tolist(), second.tolist()))


def test_huge_bucket_recall_through_clusters():
    """5000 copies of one text among 200 unrelated texts, through the real stages.

    Direct pair recall drops to about 2 * window / m because of the bucket bound, while the
    clusters (connected components of the verified pairs) still hold all 5000 copies."""
    rng = np.random.default_rng(7)
    m, window, threshold = 5000, 64, 0.8
    vocabulary = [f"w{i}" for i in range(20_000)]
    copy_text = " ".join(rng.choice(vocabulary, size=30))
    others = [" ".join(rng.choice(vocabulary, size=30)) for _ in range(200)]
    is_copy = np.zeros(m + len(others), dtype=bool)
    is_copy[rng.choice(is_copy.shape[0], size=m, replace=False)] = True
    other_texts = iter(others)
    texts = [copy_text if c else next(other_texts) for c in is_copy]

    spec = ShingleSpec("word", 5)
    batch = shingle_hashes(texts, spec)
    signatures = minhash_signatures(batch, draw_permutations(128, seed=42))
    banding = choose_bands(threshold, 128)
    docs = np.arange(len(texts), dtype=np.int64)
    first, second = candidate_pairs(band_keys(signatures, banding), docs, window)

    copies = np.flatnonzero(is_copy)
    among_copies = is_copy[first] & is_copy[second]
    assert among_copies.sum() <= m * window
    assert among_copies.sum() == m * window - window * (window + 1) // 2

    def shingles_of(chosen):
        return shingle_hashes([texts[d] for d in chosen], spec)

    lengths = np.array([len(t) for t in texts], dtype=np.int64)
    sets = document_sets(shingles_of, docs, lengths, batch_cost=1 << 20)
    jaccard = pair_jaccard(sets, first, second)
    assert np.all(jaccard[among_copies] == 1.0)
    verified = jaccard >= threshold
    assert np.array_equal(verified, among_copies)  # the unrelated texts share nothing

    true_pairs = m * (m - 1) // 2
    direct_recall = int(verified.sum()) / true_pairs
    assert direct_recall < 0.03

    clusters = find_clusters(len(texts), first[verified], second[verified], lengths)
    assert np.array_equal(clusters.docs, copies)
    assert clusters.count == 1 and np.all(clusters.cluster == 0)
    same_cluster = dict(zip(clusters.docs.tolist(), clusters.cluster.tolist()))
    # Cluster recall: a true pair counts when both documents are in one cluster. All copies
    # share cluster 0, so every one of the m(m-1)/2 true pairs is recalled.
    recalled = sum(1 for d in copies.tolist() if same_cluster.get(d) == 0)
    cluster_recall = (recalled * (recalled - 1) // 2) / true_pairs
    assert cluster_recall == 1.0
    assert int(clusters.keep.sum()) == 1 and clusters.docs[clusters.keep][0] == copies[0]


# --- targets on both sides of the threshold ---------------------------------------------------


@pytest.mark.parametrize("threshold", [0.5, 0.6, 0.7, 0.8, 0.9])
def test_choose_bands_meets_both_targets(threshold):
    for num_perm, low, max_fp, max_fn in [(128, threshold - 0.3, 0.01, 0.01), (64, threshold - 0.2, 0.05, 0.02),
                                          (256, threshold - 0.15, 0.01, 0.01), (32, threshold / 2, 0.001, 0.05)]:
        expected = oracle_banding(threshold, num_perm, max_fn, low, max_fp)
        if expected is None:
            with pytest.raises(ParameterError, match=f"num_perm={num_perm}"):
                choose_bands(threshold, num_perm, max_fn, low, max_fp)
            continue
        banding = choose_bands(threshold, num_perm, max_fn, low, max_fp)
        assert (banding.bands, banding.rows) == expected
        assert 1 - s_curve(threshold, *expected) <= max_fn + 1e-12
        assert s_curve(low, *expected) <= max_fp + 1e-12
        assert f"P({low})" in banding.rule


def test_impossible_targets_name_the_num_perm_that_would_do():
    with pytest.raises(ParameterError) as info:
        choose_bands(0.8, 128, 0.01, low=0.5, max_false_positive=0.05)
    message = str(info.value)
    better = int(re.search(r"num_perm=(\d+) is the smallest", message).group(1))
    assert better > 128
    choose_bands(0.8, better, 0.01, low=0.5, max_false_positive=0.05)  # it does
    with pytest.raises(ParameterError):
        choose_bands(0.8, better - 1, 0.01, low=0.5, max_false_positive=0.05)  # and is the smallest
    with pytest.raises(ParameterError, match="loosen the targets"):
        choose_bands(0.8, 64, 0.0001, low=0.79, max_false_positive=0.0001)
    with pytest.raises(ParameterError, match="low must be"):
        choose_bands(0.8, 64, low=0.9, max_false_positive=0.1)


def test_steepest_similarity():
    for bands, rows in [(20, 5), (16, 6), (9, 13), (50, 2)]:
        grid = np.linspace(0.0005, 0.9995, 200_000)
        slope = np.gradient(s_curve(grid, bands, rows), grid)
        assert steepest_similarity(bands, rows) == pytest.approx(grid[np.argmax(slope)], abs=1e-3)
    assert steepest_similarity(10, 1) == 0.0


@pytest.mark.parametrize("threshold, num_perm, low, max_fp", [(0.8, 128, None, None), (0.8, 512, 0.5, 0.05),
                                                               (0.6, 300, 0.3, 0.15)])
def test_chosen_banding_meets_its_targets_in_monte_carlo(jaccard_pairs, threshold, num_perm, low, max_fp):
    """Real signatures of planted pairs at exactly the threshold (and at low): the share that
    become candidates is within the binomial bound of P(s), and so meets the targets."""
    banding = choose_bands(threshold, num_perm, 0.01, low, max_fp)
    for similarity in [threshold] + ([low] if low is not None else []):
        batch, jaccard = jaccard_pairs(PAIRS, similarity, union=100, seed=int(similarity * 100) + num_perm)
        assert jaccard == pytest.approx(similarity)
        signatures = minhash_signatures(batch, draw_permutations(banding.bands * banding.rows, seed=num_perm))
        first, _ = candidate_pairs(band_keys(signatures, banding), np.arange(2 * PAIRS, dtype=np.int64), window=4)
        rate = first.shape[0] / PAIRS
        p = s_curve(jaccard, banding.bands, banding.rows)
        bound = 5 * math.sqrt(p * (1 - p) / PAIRS) + 1e-9
        assert abs(rate - p) <= bound, (similarity, rate, p)
        if similarity == threshold:
            assert 1 - rate <= 0.01 + bound
        else:
            assert rate <= max_fp + bound


def test_pair_codes_hold_every_pair_up_to_their_limit_and_refuse_more():
    """Pairs travel as codes a * span + b in 64 bits: the largest pair at the limit of
    documents decodes to itself; one document more is refused with a message, not wrapped."""
    from gpudedup.errors import ParameterError
    from gpudedup.core.lsh import MOST_CODED_DOCUMENTS, pair_code_span

    span = pair_code_span(MOST_CODED_DOCUMENTS)
    a, b = np.uint64(MOST_CODED_DOCUMENTS - 2), np.uint64(MOST_CODED_DOCUMENTS - 1)
    code = a * span + b
    assert (int(code // span), int(code % span)) == (int(a), int(b))
    assert int(a) * int(span) + int(b) < 2**64
    assert pair_code_span(0) == 1
    with pytest.raises(ParameterError, match="split the corpus"):
        pair_code_span(MOST_CODED_DOCUMENTS + 1)


@pytest.mark.parametrize("threshold, num_perm, max_fn, low, max_fp", [
    (0.8, 128, 1e-17, None, None),
    (0.8, 128, 1e-30, None, None),
    (0.8, 430, 1e-300, None, None),
    (0.8, 429, 1e-300, None, None),
    (0.95, 512, 0.01, 0.2, 1e-40),
    (0.8, 256, 0.01, 0.1, 1e-25),
], ids=["fn-1e-17", "fn-1e-30", "fn-1e-300", "fn-1e-300-K429", "fp-1e-40", "fp-1e-25"])
def test_choose_bands_meets_tiny_targets_exactly(threshold, num_perm, max_fn, low, max_fp):
    """Targets below float's 1e-16 resolution of 1 - P: the rule's answer is the exhaustive
    search's in 60-digit arithmetic, or none where that search finds none (and the smallest
    K named is the first that has one)."""
    expected = precise_banding(threshold, num_perm, max_fn, low, max_fp)
    if expected is None:
        with pytest.raises(ParameterError) as info:
            choose_bands(threshold, num_perm, max_fn, low, max_fp)
        named = re.search(r"num_perm=(\d+) is the smallest", str(info.value))
        if named is not None:
            assert precise_banding(threshold, int(named.group(1)), max_fn, low, max_fp) is not None
            assert precise_banding(threshold, int(named.group(1)) - 1, max_fn, low, max_fp) is None
        return
    assert choose_bands(threshold, num_perm, max_fn, low, max_fp)[:2] == expected


def test_last_over_parts_keeps_what_one_part_of_them_all_keeps():
    """The last ``count`` entries of each group over parts in order (an index's segments): the
    entries one part holding them all, in part then position order, keeps (a Python oracle)."""
    rng = np.random.default_rng(5)
    for count in (1, 2, 3):
        parts = []
        for _ in range(4):
            group = np.sort(rng.integers(0, 5, rng.integers(0, 12)))
            parts.append((group, np.arange(group.shape[0], dtype=np.int64) * 3))
        every = sorted((int(g), number, int(p)) for number, (gs, ps) in enumerate(parts) for g, p in zip(gs, ps))
        expected = set()
        for value in {g for g, _, _ in every}:
            expected |= set([entry for entry in every if entry[0] == value][-count:])
        kept = last_over_parts(parts, count)
        assert {(int(g), number, int(p)) for number, (gs, ps) in enumerate(kept) for g, p in zip(gs, ps)} == expected
        for group, _ in parts:  # one part alone: the last ``count`` of each run
            runs = [int(g) for g in group]
            assert last_of_runs(group, count).tolist() == [runs[i + 1:].count(g) < count for i, g in enumerate(runs)]
