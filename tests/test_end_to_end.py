"""The whole job on the shipped sample corpus, checked against independent oracles
(tests/oracles.py): the sample read by the suite's own reader (conservation.py), the truth from
the canonical shingles as Python strings and every pair's exact Jaccard, and the clusters
rebuilt by union-find from the pairs the run reports."""

from importlib import resources
from pathlib import Path

import numpy as np
import pytest

import gpudedup
from gpudedup.params import DEFAULT_THRESHOLD
from conservation import read_file_records
from oracles import oracle_clusters, shingle_set, similar_pairs_matrix

NGRAM = 5  # the default n of DESIGN.md's canonical shingling


@pytest.fixture(scope="module")
def sample_path():
    with resources.as_file(resources.files("gpudedup").joinpath("data/bible_sample.jsonl.gz")) as path:
        yield Path(path)


@pytest.fixture(scope="module")
def sample_records(sample_path):
    """The sample's records, read with json and gzip by the conservation checker's reader."""
    return read_file_records(sample_path, str(sample_path), "text", "id")


@pytest.mark.parametrize("shingle", ["word", "char"])
def test_default_settings_find_99_percent_of_pairs_above_threshold(sample_path, sample_records, shingle):
    result = gpudedup.dedup(sample_path, id_field="id", shingle=shingle, backend="cpu")
    ids = [record.id for record in sample_records]
    row_of = {doc_id: row for row, doc_id in enumerate(ids)}
    assert len(row_of) == len(ids), "the sample's ids are unique"
    sets = [shingle_set(record.text, shingle, NGRAM) for record in sample_records]
    truth = similar_pairs_matrix(sets, DEFAULT_THRESHOLD)
    assert len(truth) > 100, "the sample should hold many near-duplicate pairs"

    # Cluster recall: a true pair counts as found when both documents end up in one cluster.
    # 0.99 is the specification (the default max_false_negative of 1%), not a measurement.
    cluster_of = dict(zip(result.clusters["id"].to_pylist(), result.clusters["cluster"].to_pylist()))
    found = sum(
        cluster_of.get(ids[a]) is not None and cluster_of.get(ids[a]) == cluster_of.get(ids[b]) for a, b in truth
    )
    assert found / len(truth) >= 0.99

    # Precision: every reported pair, and every pair the copies stand for, is a true pair with
    # its exact Jaccard.
    for table in (result.pairs, result.all_pairs()):
        pairs = table.to_pydict()
        for id_a, id_b, jaccard in zip(pairs["id_a"], pairs["id_b"], pairs["jaccard"]):
            assert id_a < id_b
            a, b = sorted((row_of[id_a], row_of[id_b]))
            assert truth.get((a, b)) == jaccard, (id_a, id_b, jaccard)

    # The clusters are the connected components of the reported pairs, numbered by their first
    # document, each keeping its first document (the default policy) -- union-find in Python.
    pairs = result.pairs.to_pydict()
    edges = [(row_of[a], row_of[b]) for a, b in zip(pairs["id_a"], pairs["id_b"])]
    docs, cluster, keep = oracle_clusters(len(ids), edges, [0] * len(ids), "first")
    kept_of = {c: ids[d] for d, c, k in zip(docs, cluster, keep) if k}
    expected = {ids[d]: (c, k, kept_of[c]) for d, c, k in zip(docs, cluster, keep)}
    clusters = result.clusters.to_pydict()
    got = {i: (c, k, kept) for i, c, k, kept in
           zip(clusters["id"], clusters["cluster"], clusters["keep"], clusters["kept_id"])}
    assert len(clusters["id"]) == len(got) == len(expected)
    assert got == expected
    expected_keep = np.ones(len(ids), dtype=bool)
    expected_keep[[d for d, k in zip(docs, keep) if not k]] = False
    np.testing.assert_array_equal(result.keep, expected_keep)
    assert result.report["results"]["removed_documents"] == int((~expected_keep).sum())
    assert result.report["results"]["clusters"] == len(kept_of)
    assert len(result.deduplicated) == int(expected_keep.sum())
