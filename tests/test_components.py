"""Connected components on a Dask cluster (pipeline/components.py) against the union-find oracle
of tests/oracles.py, with parts small enough that the large-star / small-star rounds run (a few
parts: every round is a shuffle): long paths in shuffled order (the slowest to converge),
random sparse graphs, stars, and one part."""

from __future__ import annotations

import numpy as np
import pytest

from gpudedup.core.cluster import clusters_of_roots, component_roots
from gpudedup.pipeline.components import dask_component_labels, part_groups
from gpudedup.pipeline.pairparts import PairParts
from oracles import oracle_clusters
from test_pairparts import pairs_in_parts

# Dask is in the dev extra: in CI a skip here fails the run (conftest.py).
distributed = pytest.importorskip("distributed", reason="Dask is not installed (pip install 'gpudedup[dask]')")


def cut_into_parts(work: str, first: np.ndarray, second: np.ndarray, pairs_per_part: int) -> PairParts:
    """pairs_in_parts of parts of ``pairs_per_part`` pairs, the last of fewer."""
    count = first.shape[0]
    return pairs_in_parts(work, first, second, [min(pairs_per_part, count - start)
                                                for start in range(0, count, pairs_per_part)])


def dask_component_roots(client, pairs: PairParts, pairs_per_part: int, n_docs=None) -> tuple[np.ndarray, np.ndarray]:
    """dask_component_labels' (document, root) brought here as component_roots gives them:
    (docs, root) int64, docs ascending."""
    labels = dask_component_labels(client, pairs, pairs_per_part, n_docs)
    if labels is None:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    computed = labels.compute()
    docs, root = computed["a"].to_numpy(np.int64), computed["b"].to_numpy(np.int64)
    order = np.argsort(docs, kind="stable")
    return docs[order], root[order]


def oracle_roots(first: np.ndarray, second: np.ndarray) -> tuple[list[int], list[int]]:
    """(docs, root) by union-find: every document of a pair and its component's smallest."""
    n_docs = int(max(first.max(), second.max())) + 1
    docs, cluster, _ = oracle_clusters(n_docs, zip(first.tolist(), second.tolist()), [0] * n_docs)
    smallest: dict[int, int] = {}
    for doc, number in zip(docs, cluster):
        smallest.setdefault(number, doc)  # docs ascend
    return docs, [smallest[number] for number in cluster]


def shuffled_path(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    """A path through n documents in random order, its edges in random order."""
    nodes = rng.permutation(n).astype(np.int64)
    a, b = nodes[:-1], nodes[1:]
    order = rng.permutation(n - 1)
    return np.minimum(a, b)[order], np.maximum(a, b)[order]


def random_pairs(rng, n_docs: int, n_pairs: int) -> tuple[np.ndarray, np.ndarray]:
    a, b = rng.integers(0, n_docs, n_pairs), rng.integers(0, n_docs, n_pairs)
    distinct = a != b
    return np.minimum(a, b)[distinct].astype(np.int64), np.maximum(a, b)[distinct].astype(np.int64)


def assert_oracle(client, work, first, second, pairs_per_part):
    docs, root = dask_component_roots(client, cut_into_parts(str(work), first, second, pairs_per_part), pairs_per_part)
    assert docs.dtype == root.dtype == np.int64
    assert (docs.tolist(), root.tolist()) == oracle_roots(first, second)
    local_docs, local_root = component_roots(first, second)  # the single process's route
    assert np.array_equal(docs, local_docs) and np.array_equal(root, local_root)


@pytest.mark.parametrize("seed", range(2))
def test_long_shuffled_paths(client, tmp_path, seed):
    rng = np.random.default_rng(seed)
    first, second = shuffled_path(rng, 300)
    assert_oracle(client, tmp_path, first, second, pairs_per_part=80)


@pytest.mark.parametrize("seed", range(4))
def test_random_sparse_graphs(client, tmp_path, seed):
    rng = np.random.default_rng(100 + seed)
    n_docs = int(rng.integers(50, 2000))
    first, second = random_pairs(rng, n_docs, int(rng.integers(n_docs // 3, n_docs)))
    assert_oracle(client, tmp_path, first, second, pairs_per_part=first.shape[0] // int(rng.integers(2, 5)) + 1)


def test_stars_and_several_paths_in_one_graph(client, tmp_path):
    rng = np.random.default_rng(7)
    star = (np.zeros(40, np.int64) + 500, np.arange(501, 541, dtype=np.int64))
    paths = [shuffled_path(rng, 50) for _ in range(3)]
    first = np.concatenate([star[0]] + [a + 1000 * (i + 1) for i, (a, _) in enumerate(paths)])
    second = np.concatenate([star[1]] + [b + 1000 * (i + 1) for i, (_, b) in enumerate(paths)])
    order = rng.permutation(first.shape[0])
    assert_oracle(client, tmp_path, first[order], second[order], pairs_per_part=60)


def test_self_pairs_join_nothing_on_either_route(client, tmp_path):
    """A pair of a document with itself makes no cluster, in one part and over rounds."""
    rng = np.random.default_rng(5)
    first, second = random_pairs(rng, 300, 200)
    loops = rng.integers(0, 400, 30).astype(np.int64)
    first, second = np.concatenate([first, loops]), np.concatenate([second, loops])
    order = rng.permutation(first.shape[0])
    first, second = first[order], second[order]
    distinct = first != second
    expected = oracle_roots(first[distinct], second[distinct])
    for per_part in (10_000, 60):
        parts = cut_into_parts(str(tmp_path / str(per_part)), first, second, per_part)
        docs, root = dask_component_roots(client, parts, per_part)
        assert (docs.tolist(), root.tolist()) == expected


def test_one_part_and_no_pairs(client, tmp_path):
    rng = np.random.default_rng(3)
    first, second = random_pairs(rng, 500, 300)
    assert_oracle(client, tmp_path, first, second, pairs_per_part=10_000)
    none = np.zeros(0, np.int64)
    docs, root = dask_component_roots(client, pairs_in_parts(str(tmp_path / "none"), none, none, [0]), 5)
    assert docs.shape == root.shape == (0,)


def test_the_parts_are_grouped_by_their_sizes_and_read_by_the_tasks(client, tmp_path):
    """A cluster's verified pairs lie in parts of the work directory (pipeline/pairparts.py):
    the tasks read them there, grouped by their sizes into groups of at most pairs_per_part,
    and the components are the oracle's of all the pairs, in one task and over rounds. Empty
    parts are left out."""
    rng = np.random.default_rng(11)
    first, second = random_pairs(rng, 900, 700)
    sizes = [50, 70, 0, 180, 1, 179, first.shape[0] - 480]
    stored = pairs_in_parts(str(tmp_path / "work"), first, second, sizes)
    assert part_groups(stored.sizes, 200) == [[0, 1], [3, 4], [5], [6]]  # 120; 181; 179; over 200 alone
    expected = oracle_roots(first, second)
    for per_part in (10_000, 200):
        docs, root = dask_component_roots(client, stored, per_part)
        assert (docs.tolist(), root.tolist()) == expected


@pytest.mark.parametrize("policy", ["first", "longest"])
def test_keep_decision_from_roots_matches_the_oracle(policy):
    """clusters_of_roots, the decision both routes share, against union-find's clusters."""
    rng = np.random.default_rng(11)
    first, second = random_pairs(rng, 400, 250)
    lengths = rng.integers(0, 5, 400).astype(np.int64)
    clusters = clusters_of_roots(*component_roots(first, second), lengths, policy)
    expected = oracle_clusters(400, zip(first.tolist(), second.tolist()), lengths.tolist(), policy)
    assert (clusters.docs.tolist(), clusters.cluster.tolist(), clusters.keep.tolist()) == expected


def test_the_pairs_one_task_takes_are_dask_s_setting():
    """components.pairs_per_part: PAIRS_PER_PART, or Dask's setting gpudedup.pairs-per-part
    (set in code, or DASK_GPUDEDUP__PAIRS_PER_PART in the environment, as Dask reads it); a
    setting that is no positive integer is refused naming it."""
    import dask

    from gpudedup.pipeline.components import PAIRS_PER_PART, pairs_per_part
    from gpudedup.errors import ParameterError

    assert pairs_per_part() == PAIRS_PER_PART
    with dask.config.set({"gpudedup.pairs-per-part": 40}):
        assert pairs_per_part() == 40
    with dask.config.set(dask.config.collect_env({"DASK_GPUDEDUP__PAIRS_PER_PART": "25"})):
        assert pairs_per_part() == 25
    for wrong in (0, -3, "many", 2.5, True):
        with dask.config.set({"gpudedup.pairs-per-part": wrong}), pytest.raises(ParameterError) as raised:
            pairs_per_part()
        assert "gpudedup.pairs-per-part" in str(raised.value) and repr(wrong) in str(raised.value)
