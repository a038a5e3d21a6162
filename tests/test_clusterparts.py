"""The clusters decided and kept by a cluster's tasks (pipeline/clusterparts.py) against the
single process's decision (cluster.clusters_of_roots over the union-find oracle's roots of
tests/oracles.py): the same documents, numbers and kept documents, whatever the number of
ranges the rows are cut into, for both keep policies and a persistent index's pinned rows."""

from __future__ import annotations

import shutil
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from gpudedup.core.cluster import clusters_of_roots, kept_documents, listed_members
from gpudedup.pipeline.clusterparts import ClusterParts, clusters_table, dask_clusters, range_starts
from gpudedup.ids import ArrayIds
from gpudedup.pipeline.tables import NamedRows, clusters_parts, whole_table
from gpudedup.pipeline.components import dask_component_labels
from gpudedup.pipeline.heldclusters import HeldClusters
from gpudedup.pipeline.removedrows import PartsRemoved
from test_components import cut_into_parts, oracle_roots, random_pairs


def removed_rows(parts: ClusterParts, start: int, stop: int) -> np.ndarray:
    """The removed documents among rows start .. stop-1, as a shard's task reads them from the
    parts (a reader of its own)."""
    return PartsRemoved(parts, pa.null(), with_ids=False).of(start, stop).docs

# Dask is in the dev extra: in CI a skip here fails the run (conftest.py).
distributed = pytest.importorskip("distributed", reason="Dask is not installed (pip install 'gpudedup[dask]')")


@dataclass
class HeldIds:
    """The documents' ids as a task takes them (disk.IdsAt's form): "doc-<row>" strings, whose
    order is not the rows' ("doc-10" before "doc-9"), or integers in an order unrelated to
    the rows."""

    strings: bool

    @property
    def type(self) -> pa.DataType:
        return pa.string() if self.strings else pa.int64()

    def take(self, rows: np.ndarray) -> pa.Array:
        if self.strings:
            return pa.array([f"doc-{row}" for row in rows.tolist()], pa.large_string())
        return pa.array((rows * 7919) % 1009 - 500, pa.int64())


def oracle(first: np.ndarray, second: np.ndarray, lengths: np.ndarray, policy: str, pinned: int):
    docs, root = oracle_roots(first, second)
    return clusters_of_roots(np.array(docs, np.int64), np.array(root, np.int64), lengths, policy, pinned)


def stored(client, tmp_path, first, second, n_docs, ranges, lengths, policy, pinned=0, pairs_per_part=10_000,
           ids=None):
    ids = ids or HeldIds(True)
    work = str(tmp_path / "work")
    labels = dask_component_labels(client, cut_into_parts(work, first, second, pairs_per_part), pairs_per_part, n_docs)
    return dask_clusters(client, labels, n_docs, ranges, work, lengths, ids, policy, pinned)


# Components in one task, or over the rounds of several parts (60 pairs each); string or integer ids.
@pytest.mark.parametrize("policy, ranges, pairs_per_part, strings",
                         [("first", 1, 10_000, True), ("longest", 3, 60, False), ("first", 16, 60, True),
                          ("longest", 16, 10_000, False)])
def test_the_parts_hold_the_single_process_clusters(client, tmp_path, policy, ranges, pairs_per_part, strings):
    rng = np.random.default_rng(ranges)
    n_docs = 600
    first, second = random_pairs(rng, n_docs, 350)
    lengths = rng.integers(0, 6, n_docs).astype(np.int64)  # (ties: the first of equals is kept)
    expected = oracle(first, second, lengths, policy, 0)
    ids = HeldIds(strings)
    parts = stored(client, tmp_path, first, second, n_docs, ranges, lengths, policy, 0, pairs_per_part, ids)
    got = parts.read()
    assert all(np.array_equal(a, b) for a, b in zip(got, expected))
    assert (parts.count, parts.in_clusters, parts.removed_count) == \
        (expected.count, expected.in_clusters, expected.removed_count)
    assert parts.starts.tolist() == range_starts(n_docs, ranges).tolist()
    assert parts.sizes.shape[0] == ranges
    # The parts' folder is a Parquet dataset, as a user reads it: every clustered document's row,
    # the document its cluster keeps, its id, its kept document's, and its place in the ids' order.
    named = pq.read_table(tmp_path / "work" / "clusters").sort_by("docs")
    assert np.array_equal(named["docs"].to_numpy(), expected.docs)
    kept_doc = named["kept_doc"].to_numpy()
    assert np.array_equal(kept_doc, kept_documents(expected))
    doc_ids = ids.take(expected.docs)
    assert named["id"].combine_chunks().equals(doc_ids)
    assert named["kept_id"].combine_chunks().equals(ids.take(kept_doc))
    assert np.array_equal(named["rank"].to_numpy(), np.argsort(pc.sort_indices(doc_ids).to_numpy()))
    # The clusters table, in parts of 7 rows cut across the parts: one process's.
    tables = [clusters_table(parts, pieces, doc_ids.type) for pieces in parts.table_pieces(7)]
    assert [table.num_rows for table in tables[:-1]] == [7] * (len(tables) - 1) and tables[-1].num_rows <= 7
    named_rows = NamedRows.of(ArrayIds(ids.take(np.arange(n_docs))), expected.docs)
    assert pa.concat_tables(tables).equals(whole_table(clusters_parts(named_rows, expected)))
    sizes = np.bincount(expected.cluster)
    assert parts.largest.tolist() == np.lexsort((np.arange(sizes.shape[0]), -sizes))[:20].tolist()
    removed = expected.docs[~expected.keep]
    # One reader for every range: later asks take the parts earlier ones read.
    shared = PartsRemoved(parts, pa.null(), with_ids=False)
    for start, stop in ((0, n_docs), (0, 1), (37, 290), (290, 291), (599, 600), (250, 250)):
        within = removed[(removed >= start) & (removed < stop)].tolist()
        assert removed_rows(parts, start, stop).tolist() == within
        assert shared.of(start, stop).docs.tolist() == within
    assert sorted(shared.read) == np.flatnonzero(parts.removed).tolist()
    shown = parts.largest[:3]
    members = parts.read().members(shown)
    mine = np.isin(expected.cluster, shown)
    assert all(np.array_equal(a, b[mine]) for a, b in zip(members, expected))
    # What report.html lists of them (a few documents each, by tasks over the parts), and their
    # sizes: one process's listing, the sizes counted in the oracle's clusters.
    for listed in (0, 2, 50):
        sizes, listing = parts.shown(shown, listed)
        assert sizes.tolist() == sizes_of(expected, shown)
        assert all(np.array_equal(a, b) for a, b in zip(listing, listed_members(expected, shown, listed)))


@pytest.mark.parametrize("policy, ranges", [("first", 1), ("longest", 5)])
def test_held_clusters_answer_what_the_parts_answer(client, tmp_path, policy, ranges):
    """One process's clusters (HeldClusters) and a cluster's parts (ClusterParts) of the same
    pairs give the same answers to what the report and report.html ask: the counts, the
    clusters by size, the largest clusters, the members of some and a listing of them; both
    hold the union-find oracle's clusters."""
    rng = np.random.default_rng(ranges)
    n_docs = 500
    first, second = random_pairs(rng, n_docs, 300)
    lengths = rng.integers(0, 6, n_docs).astype(np.int64)
    held = HeldClusters(oracle(first, second, lengths, policy, 0))
    parts = stored(client, tmp_path, first, second, n_docs, ranges, lengths, policy)
    assert all(np.array_equal(a, b) for a, b in zip(held.read(), parts.read()))
    assert (held.count, held.in_clusters, held.removed_count) == (parts.count, parts.in_clusters,
                                                                   parts.removed_count)
    for first_row in (0, 1, 37, 250, n_docs):  # (a run against an index counts the rows from its first new one)
        expected = int((held.read().docs >= first_row).sum())
        assert held.in_clusters_from(first_row) == parts.in_clusters_from(first_row) == expected
    assert all(np.array_equal(a, b) for a, b in zip(held.by_size(), parts.by_size()))
    for count in (1, 5, 20):
        assert held.largest_numbers(count).tolist() == parts.largest_numbers(count).tolist()
    for numbers in (held.largest_numbers(5), np.array([0, 3, held.count - 1], np.int64), np.zeros(0, np.int64)):
        assert all(np.array_equal(a, b) for a, b in zip(held.read().members(numbers), parts.read().members(numbers)))
        for listed in (1, 12):
            (held_sizes, held_listing), (part_sizes, part_listing) = (held.shown(numbers, listed),
                                                                      parts.shown(numbers, listed))
            assert held_sizes.tolist() == part_sizes.tolist() == sizes_of(held.read(), numbers)
            assert all(np.array_equal(a, b) for a, b in zip(held_listing, part_listing))


def test_pinned_rows_are_kept_as_in_one_process(client, tmp_path):
    """A persistent index's rows (below pinned) are never removed; a cluster holding one keeps
    those alone (its root is one of them)."""
    rng = np.random.default_rng(5)
    first, second = random_pairs(rng, 300, 200)
    lengths = rng.integers(0, 6, 300).astype(np.int64)
    for policy in ("first", "longest"):
        expected = oracle(first, second, lengths, policy, 40)
        got = stored(client, tmp_path, first, second, 300, 4, lengths, policy, pinned=40).read()
        assert all(np.array_equal(a, b) for a, b in zip(got, expected))
        assert got.keep[got.docs < 40].all()


def test_no_pair_and_more_ranges_than_documents(client, tmp_path):
    """No pair: no part is written or read. A range per document at most, none empty."""
    parts = dask_clusters(client, None, 50, 4, str(tmp_path / "work"), np.ones(50, np.int64),
                          HeldIds(True), "first")
    assert isinstance(parts, ClusterParts) and (parts.count, parts.in_clusters) == (0, 0)
    assert parts.read().docs.shape[0] == 0 and removed_rows(parts, 0, 50).shape[0] == 0
    assert not (tmp_path / "work" / "clusters").exists()
    (table,) = [clusters_table(parts, pieces, pa.large_string()) for pieces in parts.table_pieces()]
    assert table.num_rows == 0 and table.schema.field("id").type == pa.large_string()
    assert range_starts(3, 8).tolist() == [0, 1, 2, 3]
    first, second = np.array([0, 1], np.int64), np.array([2, 2], np.int64)
    got = stored(client, tmp_path, first, second, 3, 8, np.ones(3, np.int64), "first").read()
    assert (got.docs.tolist(), got.cluster.tolist(), got.keep.tolist()) == ([0, 1, 2], [0, 0, 0], [True, False, False])


def test_parts_made_again_by_a_later_run_are_refused(client, tmp_path):
    """A result that reads its clusters after a later run of the same work directory made them
    again (a --resume with other workers cuts other ranges) stops with an error rather than
    read the other run's parts; the later run reads its own."""
    from gpudedup.errors import OutputError

    rng = np.random.default_rng(3)
    first, second = random_pairs(rng, 200, 120)
    lengths = np.ones(200, np.int64)
    earlier = stored(client, tmp_path, first, second, 200, 5, lengths, "first")
    later = stored(client, tmp_path, first, second, 200, 3, lengths, "first")
    assert later.read().docs.shape[0] == earlier.in_clusters
    for read in (earlier.read, lambda: removed_rows(earlier, 0, 200),
                 lambda: earlier.names(ArrayIds(pa.array([], pa.large_string())), pa.large_string())):
        with pytest.raises(OutputError, match="made again by a later run"):
            read()


def test_parts_whose_work_directory_is_gone_say_so(client, tmp_path):
    """A result that reads its clusters after its work directory was removed names the folder
    and what to do, rather than blame a later run."""
    from gpudedup.errors import OutputError

    rng = np.random.default_rng(4)
    first, second = random_pairs(rng, 200, 120)
    parts = stored(client, tmp_path, first, second, 200, 3, np.ones(200, np.int64), "first")
    shutil.rmtree(tmp_path / "work")
    with pytest.raises(OutputError, match="the work directory is gone.*write the result before removing it") as gone:
        parts.read()
    assert str(tmp_path / "work") in str(gone.value)


def sizes_of(clusters, numbers) -> list[int]:
    return [int((clusters.cluster == number).sum()) for number in numbers.tolist()]
