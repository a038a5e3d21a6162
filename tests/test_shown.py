"""What a run shows of its results (pipeline/shown.py), computed by the run itself: against the
same figures recounted from the pairs and clusters tables, in memory and with a work directory;
report.html and the terminal summary render it (tests/test_dask.py: the same on a cluster, and
after the cluster has gone)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import gpudedup
from gpudedup.pipeline.shown import (LARGEST_SHOWN, MEMBERS_LISTED, NEAR_SHOWN, SAMPLED_SHOWN, Shown, lowest_pairs,
                                  sampled_numbers)
from gpudedup.pipeline.shown import verified_histogram

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
                 "example_jaccard", "size_values", "size_clusters", "near_a", "near_b", "near_jaccard"):
        assert np.array_equal(getattr(first, name), getattr(second, name), equal_nan=True), name
    for name in ("numbers", "sizes", "inside", "low", "high"):
        assert np.array_equal(getattr(first.sampled, name), getattr(second.sampled, name)), f"sampled.{name}"
    for name in ("docs", "cluster", "keep"):
        assert np.array_equal(getattr(first.members, name), getattr(second.members, name)), name


@pytest.mark.parametrize("staged", [False, True])
def test_the_shown_figures_are_those_of_the_pairs_and_clusters_tables(corpus, tmp_path, staged):
    threshold = 0.7
    options = {"work_dir": tmp_path / "work"} if staged else {}
    result = gpudedup.dedup(corpus, backend="cpu", threshold=threshold, **options)
    shown = result._outcome.shown
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

    listed = result._ids_of(shown.members.docs).to_pylist()
    for c in largest:
        mine = [i for i, n in zip(listed, shown.members.cluster.tolist()) if n == c]
        assert all(cluster_of[i] == c for i in mine)
        assert any(i in kept for i in mine) and len(mine) <= min(size[c], MEMBERS_LISTED + 1)
    assert [k for k in shown.members.keep.tolist()] == [i in kept for i in listed]

    verified = {(a, b): j for a, b, j in zip(pairs["id_a"], pairs["id_b"], pairs["jaccard"])}
    for a, b, j in zip(shown.example_a, shown.example_b, shown.example_jaccard):
        id_a, id_b = result._ids_of(np.array([a, b])).to_pylist()
        assert cluster_of[id_a] == cluster_of[id_b] and (id_a in kept or id_b in kept)
        expected = verified.get((id_a, id_b), verified.get((id_b, id_a)))
        assert (np.isnan(j) and expected is None) or j == expected

    # The clusters by size: every size that occurs, and how many clusters have it.
    by_size = Counter(size.values())
    assert shown.size_values.tolist() == sorted(by_size)
    assert shown.size_clusters.tolist() == [by_size[s] for s in sorted(by_size)]
    # The pairs just above the threshold: the verified pairs of the lowest Jaccard.
    near = sorted(pairs["jaccard"])[:NEAR_SHOWN]
    assert shown.near_jaccard.tolist() == near
    for a, b, j in zip(shown.near_a, shown.near_b, shown.near_jaccard):
        id_a, id_b = result._ids_of(np.array([a, b])).to_pylist()
        assert a < b and verified.get((id_a, id_b), verified.get((id_b, id_a))) == j
    # The sampled clusters: others than the largest, with their figures from the tables.
    sampled = shown.sampled
    assert sampled.numbers.tolist() == sorted(set(sampled.numbers.tolist()))
    assert len(sampled.numbers) == min(SAMPLED_SHOWN, len(size) - len(largest))
    assert not set(sampled.numbers.tolist()) & set(largest)
    assert sampled.numbers.tolist() == sampled_numbers(len(size), np.array(largest), 42).tolist()
    assert sampled.sizes.tolist() == [size[c] for c in sampled.numbers.tolist()]
    for c, inside, low, high in zip(sampled.numbers.tolist(), sampled.inside, sampled.low, sampled.high):
        mine = [j for a, j in zip(pairs["id_a"], pairs["jaccard"]) if cluster_of[a] == c]
        assert (inside, low, high) == (len(mine), min(mine), max(mine))
        listed = [i for i, n in zip(result._ids_of(shown.members.docs).to_pylist(), shown.members.cluster.tolist())
                  if n == c]
        assert listed and all(cluster_of[i] == c for i in listed) and any(i in kept for i in listed)


def test_the_sampled_clusters_are_drawn_by_the_seed_among_the_others():
    largest = np.array([7, 3], np.int64)
    drawn = sampled_numbers(1000, largest, 5)
    assert np.array_equal(drawn, sampled_numbers(1000, largest, 5))  # reproducible
    assert drawn.shape == (SAMPLED_SHOWN,) and np.all(np.diff(drawn) > 0)
    assert not np.isin(drawn, largest).any() and drawn.min() >= 0 and drawn.max() < 1000
    assert not np.array_equal(drawn, sampled_numbers(1000, largest, 6))  # another seed, another sample
    # Fewer clusters than asked for: every other one.
    assert sampled_numbers(4, largest, 5).tolist() == [0, 1, 2]
    assert sampled_numbers(2, np.array([0, 1], np.int64), 5).tolist() == []
    # Millions of clusters: drawn without a permutation of them all.
    assert sampled_numbers(10**12, largest, 1).shape == (SAMPLED_SHOWN,)


def test_a_run_without_pairs_shows_nothing(tmp_path):
    result = gpudedup.dedup(["one two three four five six", "seven eight nine ten eleven twelve"], backend="cpu")
    shown = result._outcome.shown
    assert shown.numbers.shape == (0,) and int(shown.jaccard_counts.sum()) == 0


def test_a_result_shows_its_counts_and_largest_clusters_in_a_notebook(corpus):
    """DedupResult._repr_html_ (display.py): the report's counts as cards, and per largest
    cluster its number, size, kept id and removed ids, against the clusters table."""
    from html.parser import HTMLParser

    result = gpudedup.dedup(corpus, backend="cpu", threshold=0.7)

    class Cells(HTMLParser):
        def __init__(self):
            super().__init__()
            self.cards, self.rows, self.tag, self.table = [], [], None, None
            self.cell: list[str] | None = None  # (a cell's text, its ids inside <bdi> too)

        def handle_starttag(self, tag, attrs):
            self.tag = tag
            if tag == "table":
                self.table = dict(attrs).get("class")
            if tag == "tr" and self.table == "gpudedup-clusters":  # (the largest clusters' table)
                self.rows.append([])
            if tag == "td" and self.table == "gpudedup-clusters":
                self.cell = []

        def handle_endtag(self, tag):
            self.tag = None
            if tag == "td" and self.cell is not None:
                self.rows[-1].append("".join(self.cell))
                self.cell = None

        def handle_data(self, data):
            if self.tag == "b" and self.cell is None:
                self.cards.append(data)
            elif self.cell is not None:
                self.cell.append(data)

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


def test_the_lowest_pairs_of_parts_are_the_lowest_of_them_all():
    """lowest_pairs over parts of the pairs (as a cluster's tasks read them), then over what
    they gave, against a sort of every pair: ties (many equal Jaccards) by row."""
    rng = np.random.default_rng(3)
    first = rng.integers(0, 500, 2000)
    second = first + rng.integers(1, 100, 2000)
    jaccard = np.round(0.8 + 0.2 * rng.random(2000), 2)
    expected = sorted(zip(jaccard.tolist(), first.tolist(), second.tolist()))[:NEAR_SHOWN]
    for cuts in ([], [1, 700, 701, 1999]):
        bounds = [0, *cuts, 2000]
        parts = [lowest_pairs(first[a:b], second[a:b], jaccard[a:b], NEAR_SHOWN) for a, b in zip(bounds, bounds[1:])]
        a, b, j = lowest_pairs(*(np.concatenate(column) for column in zip(*parts)), NEAR_SHOWN)
        assert list(zip(j.tolist(), a.tolist(), b.tolist())) == expected
