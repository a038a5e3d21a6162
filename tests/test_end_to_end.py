"""The whole job on the shipped sample corpus, checked against exact all-pairs Jaccard."""

from importlib import resources
from pathlib import Path

import pytest

import gpudedup
from gpudedup.allpairs import exact_similar_pairs
from gpudedup.io.read import read_corpus
from gpudedup.params import DEFAULT_THRESHOLD
from gpudedup.shingling import ShingleSpec, shingle_sets


@pytest.fixture(scope="module")
def sample_path():
    with resources.as_file(resources.files("gpudedup").joinpath("data/bible_sample.jsonl.gz")) as path:
        yield Path(path)


@pytest.mark.parametrize("shingle", ["word", "char"])
def test_default_settings_find_99_percent_of_pairs_above_threshold(sample_path, shingle):
    result = gpudedup.dedup(sample_path, id_field="id", shingle=shingle, backend="cpu")
    corpus = read_corpus([sample_path], "text", "id")
    sets = shingle_sets(corpus.texts.to_pylist(), ShingleSpec(shingle, 5))
    truth = exact_similar_pairs(sets.offsets, sets.hashes, DEFAULT_THRESHOLD)
    assert truth.doc_a.size > 100, "the sample should hold many near-duplicate pairs"

    # Cluster recall: a true pair counts as found when both documents end up in one cluster.
    ids = corpus.ids.to_pylist()
    cluster_of = dict(zip(result.clusters["id"].to_pylist(), result.clusters["cluster"].to_pylist()))
    found = sum(
        cluster_of.get(ids[a]) is not None and cluster_of.get(ids[a]) == cluster_of.get(ids[b])
        for a, b in zip(truth.doc_a, truth.doc_b)
    )
    assert found / truth.doc_a.size >= 0.99

    # Precision: every reported pair is a true pair with its exact Jaccard.
    exact = {(ids[a], ids[b]): j for a, b, j in zip(truth.doc_a, truth.doc_b, truth.jaccard)}
    exact.update({(b, a): j for (a, b), j in list(exact.items())})
    pairs = result.pairs.to_pydict()
    assert min(pairs["jaccard"]) >= DEFAULT_THRESHOLD
    for id_a, id_b, jaccard in zip(pairs["id_a"], pairs["id_b"], pairs["jaccard"]):
        assert id_a < id_b
        assert exact[(id_a, id_b)] == pytest.approx(jaccard, abs=1e-12)

    # Every removed document has a kept document in its cluster.
    kept_clusters = {c for c, k in zip(result.clusters["cluster"].to_pylist(), result.clusters["keep"].to_pylist()) if k}
    assert set(result.clusters["cluster"].to_pylist()) == kept_clusters
    assert int((~result.keep).sum()) == result.report["results"]["removed_documents"]
    assert len(result.deduplicated) == int(result.keep.sum())
