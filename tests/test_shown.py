"""What a run shows of its results (engine/shown.py), computed by the run itself: against the
same figures recounted from the pairs and clusters tables, in memory and with a work directory;
report.html and the terminal summary render it (tests/test_dask.py: the same on a cluster, and
after the cluster has gone)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import gpudedup
from gpudedup.engine.shown import LARGEST_SHOWN, MEMBERS_LISTED, Shown
from gpudedup.plots import verified_histogram

from test_streaming import sample_records, write_shards


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    records = sample_records()
    for i in (10, 700, 1400):  # identical copies across shards
        records[i]["text"] = records[3]["text"]
    return write_shards(tmp_path_factory.mktemp("shown") / "in", records, 4)


def assert_same_shown(first: Shown, second: Shown) -> None:
    """Two runs' Shown, array for array."""
    for name in ("jaccard_counts", "numbers", "sizes", "inside", "low", "high", "example_a", "example_b",
                 "example_jaccard"):
        assert np.array_equal(getattr(first, name), getattr(second, name), equal_nan=True), name
    for name in ("docs", "cluster", "keep"):
        assert np.array_equal(getattr(first.members, name), getattr(second.members, name)), name


@pytest.mark.parametrize("staged", [False, True])
def test_the_shown_figures_are_those_of_the_pairs_and_clusters_tables(corpus, tmp_path, staged):
    threshold = 0.7
    options = {"work_dir": tmp_path / "work"} if staged else {}
    result = gpudedup.dedup(corpus, backend="cpu", threshold=threshold, **options)
    shown = result.outcome.shown
    clusters = result.clusters.to_pydict()
    pairs = result.pairs.to_pydict()
    assert len(pairs["id_a"]) > 0

    assert np.array_equal(shown.jaccard_counts, verified_histogram(np.array(pairs["jaccard"]), threshold))
    size = Counter(clusters["cluster"])
    largest = sorted(size, key=lambda c: (-size[c], c))[:LARGEST_SHOWN]
    assert shown.numbers.tolist() == largest and shown.sizes.tolist() == [size[c] for c in largest]

    cluster_of = dict(zip(clusters["id"], clusters["cluster"]))
    kept = {i for i, k in zip(clusters["id"], clusters["keep"]) if k}
    for c, inside, low, high in zip(largest, shown.inside, shown.low, shown.high):
        mine = [j for a, j in zip(pairs["id_a"], pairs["jaccard"]) if cluster_of[a] == c]
        assert (inside, low, high) == (len(mine), min(mine), max(mine))

    listed = result.ids_of(shown.members.docs).to_pylist()
    for c in largest:
        mine = [i for i, n in zip(listed, shown.members.cluster.tolist()) if n == c]
        assert all(cluster_of[i] == c for i in mine)
        assert any(i in kept for i in mine) and len(mine) <= min(size[c], MEMBERS_LISTED + 1)
    assert [k for k in shown.members.keep.tolist()] == [i in kept for i in listed]

    verified = {(a, b): j for a, b, j in zip(pairs["id_a"], pairs["id_b"], pairs["jaccard"])}
    for a, b, j in zip(shown.example_a, shown.example_b, shown.example_jaccard):
        id_a, id_b = result.ids_of(np.array([a, b])).to_pylist()
        assert cluster_of[id_a] == cluster_of[id_b] and (id_a in kept or id_b in kept)
        expected = verified.get((id_a, id_b), verified.get((id_b, id_a)))
        assert (np.isnan(j) and expected is None) or j == expected


def test_a_run_without_pairs_shows_nothing(tmp_path):
    result = gpudedup.dedup(["one two three four five six", "seven eight nine ten eleven twelve"], backend="cpu")
    shown = result.outcome.shown
    assert shown.numbers.shape == (0,) and int(shown.jaccard_counts.sum()) == 0


def test_a_result_shows_its_counts_and_largest_clusters_in_a_notebook(corpus):
    """DedupResult._repr_html_ (display.py): the report's counts as cards, and per largest
    cluster its number, size, kept id and removed ids, against the clusters table."""
    from html.parser import HTMLParser

    result = gpudedup.dedup(corpus, backend="cpu", threshold=0.7)

    class Cells(HTMLParser):
        def __init__(self):
            super().__init__()
            self.cards, self.rows, self.tag = [], [], None

        def handle_starttag(self, tag, attrs):
            self.tag = tag
            if tag == "tr":
                self.rows.append([])

        def handle_endtag(self, tag):
            self.tag = None

        def handle_data(self, data):
            if self.tag == "b":
                self.cards.append(data)
            elif self.tag == "td":
                self.rows[-1].append(data)

    cells = Cells()
    cells.feed(result._repr_html_())
    r = result.report["results"]
    assert cells.cards == [f"{n:,}" for n in (result.report["input"]["documents"], r["kept_documents"],
                                              r["removed_documents"], r["clusters"], r["verified_pairs"])]
    clusters = result.clusters.to_pydict()
    members: dict[int, list] = {}
    for doc_id, cluster, keep in zip(clusters["id"], clusters["cluster"], clusters["keep"]):
        members.setdefault(cluster, []).append((doc_id, keep))
    body = [row for row in cells.rows if row]
    assert len(body) == min(LARGEST_SHOWN, len(members))
    for number, size, kept, removed in body:
        mine = members[int(number.replace(",", ""))]
        assert int(size.replace(",", "")) == len(mine)
        assert kept == ", ".join(str(i) for i, k in mine if k)
        listed = removed.split(" and ")[0].split(", ")
        assert listed == [str(i) for i, k in mine if not k][:len(listed)]
    assert "<script" not in result._repr_html_() and "DedupResult(" in repr(result)
