"""The pairs and clusters tables (result.py: pairs_parts, clusters_parts), built a part at a time
from the run's rows and the ids of its clustered documents, against Python's own sorting of
the ids: pairs by (id_a, id_b) with id_a < id_b, clusters in row order with the id of each
cluster's kept document; the same whole or cut into parts of any size."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from gpudedup.core.cluster import find_clusters
from gpudedup.ids import id_source
from gpudedup.pipeline.tables import NamedRows, clusters_parts, pairs_parts, whole_table


def random_ids(rng: random.Random, n: int, kind: str) -> pa.Array:
    """n distinct ids whose order has nothing to do with the rows': integers (negative too), or
    strings of ASCII and multi-byte characters (UTF-8 byte order is code point order)."""
    if kind == "int":
        return pa.array(rng.sample(range(-10 * n, 10 * n), n), pa.int64())
    alphabet = "ab zé€𝄞Z0"
    ids: set[str] = set()
    while len(ids) < n:
        ids.add("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6))))
    return pa.array(rng.sample(sorted(ids), n), pa.large_string())


def random_run(seed: int, kind: str):
    """Ids of n rows, verified pairs (a < b rows) among some of them, and their clusters."""
    rng = random.Random(seed)
    n = rng.randint(2, 60)
    ids = random_ids(rng, n, kind)
    pairs = sorted({tuple(sorted(rng.sample(range(n), 2))) for _ in range(rng.randint(0, 3 * n))})
    a = np.array([p[0] for p in pairs], np.int64)
    b = np.array([p[1] for p in pairs], np.int64)
    jaccard = np.array([rng.random() for _ in pairs], np.float64)
    lengths = np.array([rng.randint(0, 5) for _ in range(n)], np.int64)
    clusters = find_clusters(n, a, b, lengths, rng.choice(["first", "longest"]))
    return ids, a, b, jaccard, clusters


@pytest.mark.parametrize("kind", ["int", "string"])
@pytest.mark.parametrize("part_rows", [1, 3, 1000])
def test_tables_match_python_sorting_whole_or_in_parts(kind, part_rows, monkeypatch):
    monkeypatch.setenv("GPUDEDUP_PART_ROWS", str(part_rows))
    for seed in range(40):
        ids, a, b, jaccard, clusters = random_run(seed, kind)
        named = NamedRows.of(id_source(ids), clusters.docs)
        py = ids.to_pylist()
        expected_pairs = sorted((min(py[x], py[y]), max(py[x], py[y]), j)
                                for x, y, j in zip(a.tolist(), b.tolist(), jaccard.tolist()))
        parts = list(pairs_parts(named, a, b, jaccard))
        assert all(part.num_rows == part_rows for part in parts[:-1]) and len(parts) >= 1
        got = whole_table(parts).to_pylist()
        assert [(r["id_a"], r["id_b"], r["jaccard"]) for r in got] == expected_pairs, seed

        kept_of = {}
        for doc, cluster, keep in zip(clusters.docs.tolist(), clusters.cluster.tolist(), clusters.keep.tolist()):
            if keep:
                kept_of.setdefault(cluster, doc)  # the first kept document of the cluster
        expected_clusters = [(py[doc], cluster, keep, py[doc] if keep else py[kept_of[cluster]])
                             for doc, cluster, keep in zip(clusters.docs.tolist(), clusters.cluster.tolist(),
                                                           clusters.keep.tolist())]
        parts = list(clusters_parts(named, clusters))
        assert all(part.num_rows == part_rows for part in parts[:-1]) and len(parts) >= 1
        got = whole_table(parts).to_pylist()
        assert [(r["id"], r["cluster"], r["keep"], r["kept_id"]) for r in got] == expected_clusters, seed
