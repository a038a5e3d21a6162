"""cluster.find_clusters against the union-find oracle of tests/oracles.py."""

import numpy as np
import pytest

from gpudedup.core.cluster import clusters_by_size, find_clusters, merged_by_size
from oracles import oracle_clusters


def as_lists(clusters):
    assert clusters.docs.dtype == np.int64 and clusters.cluster.dtype == np.int64
    assert clusters.keep.dtype == bool
    assert clusters.docs.shape == clusters.cluster.shape == clusters.keep.shape
    return clusters.docs.tolist(), clusters.cluster.tolist(), clusters.keep.tolist()


def random_graph(rng, n_docs, n_edges):
    a = rng.integers(0, n_docs, size=n_edges)
    b = rng.integers(0, n_docs, size=n_edges)
    keep = a != b
    first, second = np.minimum(a, b)[keep], np.maximum(a, b)[keep]
    return first.astype(np.int64), second.astype(np.int64)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("policy", ["first", "longest"])
def test_random_graphs_match_union_find(seed, policy):
    rng = np.random.default_rng(seed)
    n_docs = int(rng.integers(2, 300))
    n_edges = int(rng.integers(1, n_docs))  # sparse: many components, many singletons
    first, second = random_graph(rng, n_docs, n_edges)
    if first.size == 0:
        first, second = np.array([0]), np.array([1])
    lengths = rng.integers(0, 6, size=n_docs).astype(np.int64)  # many ties
    got = as_lists(find_clusters(n_docs, first, second, lengths, policy))
    assert got == oracle_clusters(n_docs, zip(first.tolist(), second.tolist()), lengths.tolist(), policy)


def test_cluster_numbering_follows_first_document():
    # Components {7, 2}, {0, 9}, {3, 5, 4}: first documents 0, 2, 3 -> numbers 0, 1, 2.
    first = np.array([2, 4, 0, 3], dtype=np.int64)
    second = np.array([7, 5, 9, 4], dtype=np.int64)
    clusters = find_clusters(10, first, second, np.zeros(10, dtype=np.int64))
    assert clusters.docs.tolist() == [0, 2, 3, 4, 5, 7, 9]
    assert clusters.cluster.tolist() == [0, 1, 2, 2, 2, 1, 0]
    assert clusters.count == 3
    assert clusters.docs[clusters.keep].tolist() == [0, 2, 3]


def test_keep_first_keeps_the_lowest_index():
    first = np.array([5, 1, 3], dtype=np.int64)
    second = np.array([6, 5, 6], dtype=np.int64)
    lengths = np.array([0, 1, 0, 100, 0, 50, 7], dtype=np.int64)
    clusters = find_clusters(7, first, second, lengths, "first")
    assert clusters.docs.tolist() == [1, 3, 5, 6]
    assert clusters.keep.tolist() == [True, False, False, False]


def test_keep_longest_keeps_the_longest_and_the_first_of_equals():
    first = np.array([0, 1, 4, 5, 8], dtype=np.int64)
    second = np.array([1, 2, 5, 6, 9], dtype=np.int64)
    lengths = np.array([3, 9, 4, 0, 7, 2, 7, 0, 5, 5], dtype=np.int64)
    clusters = find_clusters(10, first, second, lengths, "longest")
    kept = clusters.docs[clusters.keep].tolist()
    assert kept == [1, 4, 8]  # 9 is longest; 7 == 7 -> doc 4 first; 5 == 5 -> doc 8 first
    assert int(clusters.keep.sum()) == clusters.count == 3


def test_no_pairs_gives_no_clusters():
    for policy in ["first", "longest"]:
        clusters = find_clusters(5, np.zeros(0, np.int64), np.zeros(0, np.int64),
                                 np.ones(5, np.int64), policy)
        assert clusters.docs.shape == (0,) and clusters.cluster.shape == (0,)
        assert clusters.keep.shape == (0,) and clusters.count == 0


def test_duplicate_and_reversed_edges():
    # The same edge many times (beyond an int8 count) and given as (b, a) still joins.
    first = np.array([0] * 256 + [4], dtype=np.int64)
    second = np.array([1] * 256 + [2], dtype=np.int64)
    clusters = find_clusters(5, first, second, np.ones(5, np.int64))
    assert as_lists(clusters) == ([0, 1, 2, 4], [0, 0, 1, 1], [True, False, True, False])


def test_chain_joins_into_one_cluster():
    n = 2000
    first = np.arange(n - 1, dtype=np.int64)
    clusters = find_clusters(n, first, first + 1, np.arange(n, dtype=np.int64), "longest")
    assert clusters.count == 1 and clusters.docs.tolist() == list(range(n))
    assert clusters.docs[clusters.keep].tolist() == [n - 1]


def test_deterministic_and_independent_of_edge_order():
    rng = np.random.default_rng(99)
    first, second = random_graph(rng, 500, 400)
    lengths = rng.integers(0, 4, size=500).astype(np.int64)
    for policy in ["first", "longest"]:
        reference = as_lists(find_clusters(500, first, second, lengths, policy))
        assert as_lists(find_clusters(500, first, second, lengths, policy)) == reference
        order = rng.permutation(first.shape[0])
        assert as_lists(find_clusters(500, first[order], second[order], lengths, policy)) == reference


def test_unknown_policy_raises():
    with pytest.raises(ValueError):
        find_clusters(3, np.array([0]), np.array([1]), np.ones(3, np.int64), "shortest")


@pytest.mark.parametrize("seed", range(6))
def test_both_graphs_of_component_roots_agree_and_self_pairs_join_nothing(seed):
    """component_roots over the documents as numbered (n_docs within DIRECT_GRAPH_FACTOR of the
    pairs) and over the pairs' documents renumbered give the same (docs, root), the union-find
    oracle's; a pair of a document with itself makes no cluster (as before roots existed)."""
    from gpudedup.core.cluster import DIRECT_GRAPH_FACTOR, component_roots

    rng = np.random.default_rng(seed)
    n_docs = int(rng.integers(20, 400))
    a = rng.integers(0, n_docs, n_docs // 2)
    b = np.where(rng.random(a.shape[0]) < 0.2, a, rng.integers(0, n_docs, a.shape[0]))  # a fifth self-pairs
    first, second = np.minimum(a, b).astype(np.int64), np.maximum(a, b).astype(np.int64)
    assert n_docs <= DIRECT_GRAPH_FACTOR * int((first != second).sum())  # the direct graph is used
    direct = component_roots(first, second, n_docs)
    renumbered = component_roots(first, second)
    assert all(np.array_equal(x, y) for x, y in zip(direct, renumbered))
    lengths = np.ones(n_docs, np.int64)
    expected = oracle_clusters(n_docs, [(x, y) for x, y in zip(first.tolist(), second.tolist()) if x != y], lengths)
    assert as_lists(find_clusters(n_docs, first, second, lengths)) == expected


@pytest.mark.parametrize("policy", ["first", "longest"])
def test_sparse_document_numbers_give_the_same_clusters(policy):
    """Documents numbered far apart (a cluster's rows spread over a large corpus: numbering
    by search rather than by a table over the numbers) give the clusters of the same graph
    numbered densely."""
    from gpudedup.core.cluster import clusters_of_roots, component_roots

    rng = np.random.default_rng(4)
    first, second = random_graph(rng, 300, 200)
    lengths = rng.integers(0, 4, 300).astype(np.int64)
    dense = find_clusters(300, first, second, lengths, policy)
    spread = 10_007  # a monotone renumbering keeps every order
    docs, root = component_roots(first * spread, second * spread)
    sparse = clusters_of_roots(docs, root, np.repeat(lengths, spread), policy)
    assert np.array_equal(sparse.docs, dense.docs * spread)
    assert np.array_equal(sparse.cluster, dense.cluster) and np.array_equal(sparse.keep, dense.keep)


def test_lengths_are_read_only_by_longest_and_keep_their_type():
    """Found by review: lengths were once forced to int64 up front, which refused None under
    "first" (which never reads them) and cut float lengths under "longest"."""
    assert find_clusters(3, [0], [1], None, "first").keep.tolist() == [True, False]
    assert find_clusters(3, [0], [1], [1.2, 1.7], "longest").keep.tolist() == [False, True]


@pytest.mark.parametrize("seed", range(4))
def test_listed_members_against_a_loop_and_over_cut_ranges(seed):
    """cluster.listed_members (what report.html lists of a cluster: its first kept document
    and its first documents) against a loop over each cluster's documents; the listings of
    consecutive ranges of rows, joined and listed again, give the listing of them all (how a
    cluster's parts are listed)."""
    from gpudedup.core.cluster import Clusters, listed_members

    rng = np.random.default_rng(seed)
    for _ in range(60):
        n = int(rng.integers(0, 80))
        docs = np.sort(rng.choice(300, n, replace=False)).astype(np.int64)
        clusters = Clusters(docs, rng.integers(0, 7, n).astype(np.int64), rng.random(n) < 0.25)
        numbers = rng.permutation(7)[:3].astype(np.int64)
        listed = int(rng.integers(0, 6))
        expected = set()
        for number in numbers.tolist():
            mine = clusters.docs[clusters.cluster == number]
            kept = clusters.docs[(clusters.cluster == number) & clusters.keep]
            expected |= set(mine[:listed].tolist()) | set(kept[:1].tolist())
        got = listed_members(clusters, numbers, listed)
        assert got.docs.tolist() == sorted(expected)
        at = np.searchsorted(clusters.docs, got.docs)
        assert np.array_equal(got.cluster, clusters.cluster[at]) and np.array_equal(got.keep, clusters.keep[at])
        cut = int(rng.integers(0, 300))
        low = clusters.docs < cut
        pieces = [listed_members(Clusters(*(column[side] for column in clusters)), numbers, listed)
                  for side in (low, ~low)]
        joined = Clusters(*(np.concatenate(column) for column in zip(*pieces)))
        assert listed_members(joined, numbers, listed).docs.tolist() == got.docs.tolist()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clusters_by_size_counts_as_a_counter_does_whole_and_in_ranges(seed):
    """The sizes of a run's clusters, counted at once and over ranges of cluster numbers then
    merged (as a cluster's tasks count them), against collections.Counter."""
    from collections import Counter

    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 9, size=200)
    cluster = rng.permutation(np.repeat(np.arange(sizes.shape[0]), sizes))
    expected = sorted(Counter(Counter(cluster.tolist()).values()).items())
    assert list(zip(*[a.tolist() for a in clusters_by_size(cluster)])) == expected
    cuts = np.sort(rng.choice(np.arange(1, 200), size=5, replace=False))
    ranges = [cluster[(cluster >= low) & (cluster < high)] for low, high in zip([0, *cuts], [*cuts, 200])]
    counted = [clusters_by_size(part) for part in ranges]
    merged = merged_by_size(np.concatenate([c[0] for c in counted]), np.concatenate([c[1] for c in counted]))
    assert list(zip(*[a.tolist() for a in merged])) == expected
    assert [a.tolist() for a in clusters_by_size(np.zeros(0, np.int64))] == [[], []]


def scipy_smallest(nodes: int, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """The oracle: SciPy's connected components, each node's smallest fellow member."""
    import scipy.sparse
    from scipy.sparse.csgraph import connected_components

    graph = scipy.sparse.coo_matrix((np.ones(first.shape[0], np.int8), (first, second)), shape=(nodes, nodes))
    count, label = connected_components(graph, directed=False)
    smallest = np.full(count, nodes, np.int64)
    np.minimum.at(smallest, label, np.arange(nodes, dtype=np.int64))
    return smallest[label]


def bit_reversed(bits: int) -> np.ndarray:
    """0 .. 2^bits - 1 in bit-reversed order: a path through them joins no two neighbours by
    their order, the most rounds of hooking the smaller root."""
    numbers = np.arange(1 << bits)
    return sum(((numbers >> i) & 1) << (bits - 1 - i) for i in range(bits))


def hard_graphs(rng) -> dict:
    """Graphs whose numbering works against joining by the smaller root: paths numbered in
    bit-reversed, zigzag and random order, a binary tree with its root numbered largest, a
    caterpillar, a grid, a dense random graph, a star whose centre is numbered last; edges
    listed both ways, repeated and as self-loops too."""
    path = bit_reversed(12)
    zigzag = np.empty(4001, np.int64)
    zigzag[0::2], zigzag[1::2] = np.arange(2001), np.arange(4000, 2000, -1)
    shuffled = rng.permutation(3000)
    tree = np.arange(1, 4095)
    spine, leaves = shuffled[:1500], shuffled[1500:]
    grid = rng.permutation(2500).reshape(50, 50)
    dense = rng.integers(0, 300, (3000, 2))
    star = np.arange(999)
    graphs = {
        "bit-reversed path": (4096, path[:-1], path[1:]),
        "descending path": (3000, np.arange(2999, 0, -1), np.arange(2998, -1, -1)),  # (one chain of hooks)
        "descending paths joined at their tops": (3000, np.r_[np.arange(1, 1500), np.arange(1501, 3000), 1499],
                                                   np.r_[np.arange(0, 1499), np.arange(1500, 2999), 2999]),
        "zigzag path": (4001, zigzag[:-1], zigzag[1:]),
        "random path": (3000, shuffled[:-1], shuffled[1:]),
        "binary tree, root largest": (4095, 4094 - tree, 4094 - (tree - 1) // 2),
        "caterpillar": (3000, np.concatenate([spine[:-1], spine]), np.concatenate([spine[1:], leaves])),
        "grid": (2500, np.concatenate([grid[:, :-1].ravel(), grid[:-1].ravel()]),
                 np.concatenate([grid[:, 1:].ravel(), grid[1:].ravel()])),
        "dense": (300, dense[:, 0], dense[:, 1]),
        "star, centre last": (1000, np.full(999, 999), star),
    }
    a, b = rng.integers(0, 500, 400), rng.integers(0, 500, 400)
    graphs["both ways, repeated, self-loops"] = (500, np.concatenate([a, b, a, a]), np.concatenate([b, a, b, a]))
    return {name: (nodes, np.asarray(x, np.int64), np.asarray(y, np.int64)) for name, (nodes, x, y) in graphs.items()}


@pytest.mark.parametrize("seed", range(3))
def test_smallest_connected_is_scipys_components_on_hard_graphs(seed):
    """cluster.smallest_connected against SciPy's connected components, on graphs numbered
    against its rounds and on sparse random ones with isolated nodes; its edges untouched."""
    from gpudedup.core.cluster import smallest_connected

    rng = np.random.default_rng(seed)
    graphs = hard_graphs(rng)
    for size in (1, 2, 50, 2000):
        graphs[f"random {size}"] = (size, rng.integers(0, size, size // 2), rng.integers(0, size, size // 2))
    for name, (nodes, first, second) in graphs.items():
        kept = first.copy(), second.copy()
        assert np.array_equal(smallest_connected(nodes, first, second), scipy_smallest(nodes, first, second)), name
        assert np.array_equal(first, kept[0]) and np.array_equal(second, kept[1]), name
    assert np.array_equal(smallest_connected(4, np.zeros(0, np.int64), np.zeros(0, np.int64)), np.arange(4))
