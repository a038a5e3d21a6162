"""The clusters of a run on a cluster, found, named and kept by the workers' tasks, so that the
client holds a few numbers per part rather than the documents in clusters (docs/scale.md).

The rows 0 .. n-1 are cut into ``ranges`` ranges of about equal length (range_starts). The
components' labels (pipeline/components.py: a document and its root, the smallest document of
its component) are moved by Dask's ``set_index`` with these ranges as divisions, so that
partition r holds exactly the rows of range r:

1. on the document: a task reads the ids of its range's documents from the shards (each shard
   read once; disk.IdsAt);
2. on the root: every component lies whole in the partition of its root, so a task decides
   its clusters as one process would (cluster.clusters_of_roots over the partition's labels:
   the kept document, by ``keep``, with the documents' lengths read from the shards where it
   is "longest"), with the kept document's id. Clusters are numbered in the order of their
   roots; the partitions ascend by root, so a partition's numbers start after the roots of
   the partitions before it (a count per partition, added up by the client);
3. a sort by id (Dask's sort_values) gives each document its place in the ids' order (ids are
   unique), by which the pairs table is sorted;
4. on the document again: partition r holds the clustered documents of range r, stored as
   WORK/clusters/NNNNN/part.parquet (part r; the folder is a Parquet dataset) in row order,
   with the columns docs, int64 ascending (the document's row); cluster, int64; keep, bool;
   kept_doc, int64, the document its cluster keeps (the first of them where a cluster keeps
   several); rank, int64, the place of its id; id and kept_id, its id and its kept
   document's (string ids wide).

The client gets, per part, its documents and its removed documents, and the largest clusters
(report.html shows them). Every part carries its run's token (its metadata's RUN_KEY), which
every reader checks: a result that reads its clusters after a later run of the same work
directory wrote them again (a --resume with other workers cuts other ranges) stops with an error rather than
read another run's parts. From the parts, tasks write the clusters table (clusters_table) and the
kept rows (removedrows.PartsRemoved: a shard's task reads the parts of its rows alone), and
name the pairs of the pairs table and count those inside the largest clusters
(pipeline/clusterpairs.py). The clusters are never a stage that --resume
trusts: every run makes them again from the verified pairs and writes every part (parts beyond its ranges, another
run's, are never read).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

import numpy as np
import pyarrow as pa

from ..core.cluster import (Clusters, KeepPolicy, clusters_by_size, clusters_of_roots, kept_documents, largest_first,
                            listed_members, merged_by_size)
from ..errors import OutputError
from ..ids import IdSource, wide
from ..io.layout import table_slices
from ..io.write import write_parquet, write_to
from .tables import NamedRows
from ..threads import map_parallel
from .daskops import cluster_failures, frame_of, range_starts, share
from .protocols import LocalExecutor
from .removedrows import PartsRemoved
from .workdir import WorkAt, WorkDir, arrays_of
from .workfolders import DamagedWorkDirError

if TYPE_CHECKING:
    from .protocols import Executor

CLUSTER_COLUMNS = ("docs", "cluster", "keep")  # (cluster.Clusters')
DECIDED_COLUMNS = {"doc": "int64", "cluster": "int64", "keep": "bool", "kept_doc": "int64"}
# The largest clusters the client learns of (report.html shows the first of them).
LARGEST_KNOWN = 20
# The parts' folder in the work directory: a Parquet dataset.
FOLDER = "clusters"
# The key of a part's metadata that names the run that wrote it (ClusterParts.checked).
RUN_KEY = b"gpudedup.run"


def part_unit(number: int) -> str:
    return f"{FOLDER}/{number:05d}"


@dataclass
class ClusterParts:
    """Clusters kept as parts of the work directory at ``work_at`` (the module docstring).

    starts: int64 (r + 1,), the first row of each part's range (range_starts); sizes: int64
    (r,), the documents in clusters of each part; removed: int64 (r,), those of them removed;
    count: the clusters; largest: int64 (k,), the numbers of the LARGEST_KNOWN largest
    clusters, largest first (the smaller number first among equals); size_values,
    size_clusters: int64 (m,) each, every cluster size that occurs, ascending, and how many
    clusters have it (core.cluster.clusters_by_size); all host. token: the run's, in every
    part (read_part checks it).
    """

    work_at: WorkAt
    starts: np.ndarray
    sizes: np.ndarray
    removed: np.ndarray
    count: int
    largest: np.ndarray
    size_values: np.ndarray
    size_clusters: np.ndarray
    token: int
    in_parts = True  # (HeldClusters: False)

    def read_table(self, number: int, names: list[str], work: Optional[WorkDir] = None) -> pa.Table:
        """The columns ``names`` of part ``number`` (WorkDir.read_part; work: the work
        directory, where attached already), checked to be this run's."""
        work = work or WorkDir.attach(self.work_at)
        try:
            return self.checked(work.read_part(part_unit(number), names))
        except DamagedWorkDirError:
            if work.done(part_unit(number)):
                raise
            if not work.folder.unit_children(FOLDER):  # (no part at all: the folder went)
                raise work.gone("its clusters") from None
            raise self.made_again() from None  # (a later run of fewer ranges removed it)

    def read_part(self, number: int, names: list[str], work: Optional[WorkDir] = None) -> dict[str, np.ndarray]:
        """read_table's columns of numbers as arrays."""
        return arrays_of(self.read_table(number, names, work))

    def read_tables(self, numbers: list[int], names: list[str], work: WorkDir) -> list[pa.Table]:
        """read_table of each part of ``numbers``, side by side on object storage."""
        return list(map_parallel(lambda number: self.read_table(number, names, work), numbers,
                                 work.request_threads))

    def checked(self, part: pa.Table) -> pa.Table:
        """``part`` (a part's table), if it is this run's (its RUN_KEY metadata)."""
        if int((part.schema.metadata or {}).get(RUN_KEY, b"0")) != self.token:
            raise self.made_again()
        return part

    def made_again(self) -> OutputError:
        return OutputError(f"{WorkDir.attach(self.work_at).shown}: its clusters were made again by a later run in "
                           "that work directory; this result can no longer read them: use that run's result")

    @property
    def in_clusters(self) -> int:
        return int(self.sizes.sum())

    def in_clusters_from(self, first: int) -> int:
        """The documents in clusters of rows ``first`` and after (a run against an index: its
        new documents): the parts whose range starts below ``first`` read for their rows."""
        below = 0
        for number in np.flatnonzero(self.sizes[:int(np.searchsorted(self.starts, first))]).tolist():
            below += int((self.read_part(number, ["docs"])["docs"] < first).sum())
        return self.in_clusters - below

    def by_size(self) -> tuple[np.ndarray, np.ndarray]:
        """Every cluster size that occurs, ascending, and how many clusters have it (counted
        where the clusters were decided)."""
        return self.size_values, self.size_clusters

    def largest_numbers(self, count: int) -> np.ndarray:
        """int64 (k,): the ``count`` largest clusters (at most LARGEST_KNOWN), largest first
        (the smaller number first among equals)."""
        assert count <= LARGEST_KNOWN, "a cluster's run learns of LARGEST_KNOWN clusters"
        return np.asarray(self.largest[:count], np.int64)

    @property
    def removed_count(self) -> int:
        return int(self.removed.sum())

    def read(self) -> Clusters:
        """Every part as one Clusters, in this process (parts ascend by row)."""
        work = WorkDir.attach(self.work_at)
        parts = self.read_tables(np.flatnonzero(self.sizes).tolist(), list(CLUSTER_COLUMNS), work)
        return Clusters.joined([Clusters(*(part[name].to_numpy() for name in CLUSTER_COLUMNS)) for part in parts])

    def parts_removing(self, start: int, stop: int) -> list[int]:
        """The numbers of the parts that hold some of rows start .. stop-1 and remove documents."""
        first = int(np.searchsorted(self.starts, start, side="right")) - 1
        last = int(np.searchsorted(self.starts, stop, side="left"))
        return [number for number in range(max(first, 0), min(last, self.sizes.shape[0])) if self.removed[number]]

    def table_pieces(self, part_rows: Optional[int] = None) -> list[list[tuple[int, int, int]]]:
        """The clusters table's parts (layout.table_parts of the documents in clusters, in
        row order; part_rows: its default, where None), each as the slices (part, start, stop)
        of the parts that hold its rows (table_slices)."""
        return table_slices(self.sizes, part_rows)

    @property
    def divisions(self) -> list[int]:
        """Dask's divisions of a collection set on a row so that partition r holds the rows of
        range r (the last inclusive: n, which no row reaches)."""
        return self.starts.tolist()

    def names(self, source: IdSource, id_type: pa.DataType) -> NamedRows:
        """The ids of every document in clusters (with their ranks), read from the parts here
        (id_type: the ids' wide type, for parts of none; not from ``source``)."""
        work = WorkDir.attach(self.work_at)
        numbers = np.flatnonzero(self.sizes).tolist()
        parts = self.read_tables(numbers, ["docs", "rank", "id"], work)
        if not parts:
            return NamedRows(np.zeros(0, np.int64), pa.array([], id_type), np.zeros(0, np.int64))
        return NamedRows(np.concatenate([part["docs"].to_numpy() for part in parts]),
                         pa.chunked_array([part["id"] for part in parts]).combine_chunks(),
                         np.concatenate([part["rank"].to_numpy() for part in parts]))

    def names_now(self, source: IdSource) -> Optional[NamedRows]:
        """None: the parts hold the ids, read where they lie when asked (names;
        HeldClusters.names_now)."""
        return None

    def removed_of(self, ids_of: Optional[Callable[[np.ndarray], pa.Array]], id_type: pa.DataType,
                   indexed_rows: int,
                   pairs: Optional[tuple[np.ndarray, np.ndarray, np.ndarray]] = None) -> PartsRemoved:
        """What gives the removed documents of a range with their kept documents: read from the
        parts, which hold the ids of type id_type (ids_of: None, no kept_id; the rest as
        HeldClusters.removed_of)."""
        return PartsRemoved(self, id_type, ids_of is not None, indexed_rows, pairs)

    def table_in_parts(self, named: Callable[[], NamedRows], id_type: pa.DataType) -> Iterator[pa.Table]:
        """The clusters table in parts, each made from the parts that hold its rows (which
        hold their ids: ``named`` is not asked)."""
        return (clusters_table(self, pieces, id_type) for pieces in self.table_pieces())

    def shown(self, numbers: np.ndarray, listed: int,
              executor: Optional[Executor] = None) -> tuple[np.ndarray, Clusters]:
        """Of the clusters ``numbers`` (int64; a few, for report.html): their sizes (int64) and
        the documents a report lists (cluster.listed_members), held; a task per part that holds
        any clustered document, on ``executor`` where it is a cluster's, else here:
        the client gets a few documents per cluster and part, not every member."""
        holding = np.flatnonzero(self.sizes).tolist()
        executor = executor or LocalExecutor()
        parts, asked = executor.share(self, numbers)
        found = executor.map(part_shown, [(parts, number, asked, listed) for number in holding],
                             "reading the clusters") if holding else []
        sizes = np.sum([size for size, _ in found], axis=0) if found else np.zeros(numbers.shape[0], np.int64)
        joined = Clusters.joined([part for _, part in found])
        return np.asarray(sizes, np.int64), listed_members(joined, numbers, listed)


def dask_clusters(client, labels, n_docs: int, ranges: int, work_at: WorkAt, lengths: Any, ids: Any,
                  policy: KeepPolicy, pinned: int = 0) -> ClusterParts:
    """The clusters of the components ``labels`` (components.dask_component_labels, or None:
    no pair) decided and stored by tasks on ``client``'s workers in ``ranges`` parts (at most
    one per document: range_starts; the module docstring); lengths: what gives the documents'
    lengths in a task (shards.SpilledLengths), read where ``policy`` is "longest"; ids: what gives
    their ids (disk.IdsAt). Returns the parts' ClusterParts."""
    import dask
    import dask.dataframe as dd

    starts = range_starts(n_docs, ranges)
    token = int(np.random.default_rng().integers(1, 2**62))  # (the run's: ClusterParts.checked)
    work = WorkDir.attach(work_at)
    if labels is None:  # (no part is read where none holds a document: nothing to write)
        work.keep_parts(FOLDER, [])
        none = np.zeros(starts.shape[0] - 1, np.int64)
        nothing = np.zeros(0, np.int64)
        return ClusterParts(work_at, starts, none, none, 0, nothing, nothing, nothing, token)
    divisions = starts.tolist()  # (partition r: the rows of range r)
    id_type = wide(pa.array([], ids.type)).type
    id_dtype = "int64" if pa.types.is_integer(id_type) else "str"
    with cluster_failures("the clusters"):
        ids_sent, lengths_sent = share(client, ids, lengths)
        # 1. The documents' ids; 2. whole components, their numbers after the roots before.
        named = labels.set_index("a", divisions=divisions).map_partitions(
            named_labels, ids_sent, meta=frame_of({"doc": "int64", "root": "int64", "id": id_dtype}))
        by_root = named.set_index("root", divisions=divisions).persist()
        roots = by_root.map_partitions(root_count, meta=("roots", "int64")).compute().to_numpy(np.int64)
        offsets = np.concatenate([[0], np.cumsum(roots)[:-1]]).astype(np.int64)
        decided = by_root.map_partitions(decide_clusters, share(client, offsets)[0],
                                         lengths_sent, policy, pinned,
                                         meta=frame_of({**DECIDED_COLUMNS, "id": id_dtype, "kept_id": id_dtype})
                                         ).persist()
        del by_root  # (released on the workers once decided)
        # (Each partition holds its clusters whole: their largest and their sizes are its own.)
        largest, by_size = dask.compute(
            decided.map_partitions(largest_clusters, LARGEST_KNOWN,
                                   meta=frame_of({"cluster": "int64", "size": "int64"})),
            decided.map_partitions(sizes_of_clusters, meta=frame_of({"size": "int64", "clusters": "int64"})))
        # 3. Each document's place in the ids' order, after the documents of the partitions before.
        ranks = decided[["doc", "id"]].sort_values("id").persist()[["doc"]].assign(rank=1)
        ranks["rank"] = ranks["rank"].cumsum() - 1  # (each one's place in the ids' order)
        # 4. The parts: both collections set on the document have the same partitions.
        written = dd.map_partitions(write_cluster_part, decided.set_index("doc", divisions=divisions),
                                    ranks.set_index("doc", divisions=divisions), work_at, id_type, token,
                                    meta=frame_of({"docs": "int64", "removed": "int64"}),
                                    align_dataframes=False).compute()
    work.keep_parts(FOLDER, range(starts.shape[0] - 1))
    numbers = largest["cluster"].to_numpy(np.int64)
    top = largest_first(numbers, largest["size"].to_numpy(np.int64), LARGEST_KNOWN)
    size_values, size_clusters = merged_by_size(by_size["size"].to_numpy(np.int64),
                                                by_size["clusters"].to_numpy(np.int64))
    return ClusterParts(work_at, starts, written["docs"].to_numpy(np.int64), written["removed"].to_numpy(np.int64),
                        int(roots.sum()), numbers[top], size_values, size_clusters, token)


# --- tasks (module-level, so that workers import them rather than unpickle code) --------------


def named_labels(by_doc, ids: Any):
    """A partition of labels set on their document (a range of rows) with each document's id
    (ids: disk.IdsAt; the range's shards read once): a pandas DataFrame of doc, root, id."""
    import pandas as pd

    docs, root = by_doc.index.to_numpy(np.int64), by_doc["b"].to_numpy(np.int64)
    return pd.DataFrame({"doc": docs, "root": root, "id": ids.take(docs).to_pandas()})


def root_count(by_root):
    """How many roots (components) a partition of labels set on their root holds."""
    import pandas as pd

    roots = by_root.index.to_numpy(np.int64)
    return pd.Series([int(np.unique(roots).shape[0])], dtype="int64")


def decide_clusters(by_root, offsets: np.ndarray, lengths: Any, policy: KeepPolicy, pinned: int,
                    partition_info: Optional[dict] = None):
    """A partition of labels set on their root (whole components) as its clusters: a pandas
    DataFrame of DECIDED_COLUMNS, id and kept_id, one row per document
    (cluster.clusters_of_roots; numbers after the ``offsets[partition]`` roots of the
    partitions before)."""
    import pandas as pd

    assert partition_info is not None, "Dask names the partition"
    docs, root = by_root["doc"].to_numpy(np.int64), by_root.index.to_numpy(np.int64)
    order = np.argsort(docs, kind="stable")
    docs, root, ids = docs[order], root[order], by_root["id"].iloc[order].reset_index(drop=True)
    clusters = clusters_of_roots(docs, root, lengths if policy == "longest" else None, policy, pinned)
    kept_doc = kept_documents(clusters)
    kept_id = ids.iloc[np.searchsorted(docs, kept_doc)].reset_index(drop=True)
    return pd.DataFrame({"doc": docs, "cluster": clusters.cluster + offsets[partition_info["number"]],
                         "keep": clusters.keep, "kept_doc": kept_doc, "id": ids, "kept_id": kept_id})


def largest_clusters(decided, count: int):
    """The ``count`` largest clusters of a partition of decide_clusters' rows (clusters lie
    whole in one): a pandas DataFrame of (cluster, size)."""
    import pandas as pd

    number = decided["cluster"].to_numpy(np.int64)
    clusters, sizes = np.unique(number, return_counts=True)
    top = largest_first(clusters, sizes, count)
    return pd.DataFrame({"cluster": clusters[top], "size": sizes[top].astype(np.int64)})


def sizes_of_clusters(decided):
    """Task: core.cluster.clusters_by_size of a partition of decide_clusters' rows (clusters lie
    whole in one): a pandas DataFrame of (size, clusters)."""
    import pandas as pd

    values, clusters = clusters_by_size(decided["cluster"].to_numpy(np.int64))
    return pd.DataFrame({"size": values, "clusters": clusters})


def part_shown(clustered: ClusterParts, number: int, numbers: np.ndarray, listed: int) -> tuple[np.ndarray, Clusters]:
    """Task: of part ``number``, the documents it holds of each cluster of ``numbers`` (int64
    (k,)) and its listing of them (cluster.listed_members)."""
    part = part_members(clustered, number, numbers)
    order = np.argsort(numbers)
    sizes = np.bincount(order[np.searchsorted(numbers, part.cluster, sorter=order)], minlength=numbers.shape[0])
    return sizes.astype(np.int64), listed_members(part, numbers, listed)


def part_members(clustered: ClusterParts, number: int, numbers: np.ndarray) -> Clusters:
    """The documents of part ``number`` in the clusters ``numbers`` (int64)."""
    part = clustered.read_part(number, list(CLUSTER_COLUMNS))
    return Clusters(*(part[name] for name in CLUSTER_COLUMNS)).members(numbers)


def clusters_table(clustered: ClusterParts, pieces: list[tuple[int, int, int]], id_type: pa.DataType) -> pa.Table:
    """A part of the clusters table (id, cluster, keep, kept_id: tables.clusters_parts') from
    the slices (part, start, stop) of the parts that hold its rows (ClusterParts.table_pieces);
    id_type: the ids' (wide) type, for a part of none."""
    work = WorkDir.attach(clustered.work_at)
    slices = []
    for number, start, stop in pieces:
        slices.append(clustered.read_table(number, ["id", "cluster", "keep", "kept_id"], work)
                      .slice(start, stop - start).replace_schema_metadata(None))
    if not slices:
        empty = pa.array([], id_type)
        return pa.table({"id": empty, "cluster": pa.array([], pa.int64()), "keep": pa.array([], pa.bool_()),
                         "kept_id": empty})
    return pa.concat_tables(slices).combine_chunks()


def write_clusters_table_part(clustered: ClusterParts, pieces: list, id_type: pa.DataType, path: str) -> None:
    """Task: a part of clusters/ (clusters_table of ``pieces``) written to
    ``path`` (a path or URL)."""
    write_to(path, lambda local: write_parquet(clusters_table(clustered, pieces, id_type), local))


def write_cluster_part(by_doc, ranks, work_at: WorkAt, id_type: pa.DataType, token: int,
                       partition_info: Optional[dict] = None):
    """Store a partition of decide_clusters' rows set on the document (the clustered documents
    of one range) with their ranks (each one's place in the ids' order, set on the document: the same documents)
    as its part, in row order; returns its documents and removed documents."""
    import pandas as pd

    assert partition_info is not None, "Dask names the partition"
    docs = by_doc.index.to_numpy(np.int64)
    order = np.argsort(docs, kind="stable")  # (set_index sorts; kept in order whatever it does)
    rank_order = np.argsort(ranks.index.to_numpy(np.int64), kind="stable")
    assert np.array_equal(ranks.index.to_numpy(np.int64)[rank_order], docs[order]), "a rank for every document"
    keep = by_doc["keep"].to_numpy(bool)[order]
    columns = {"docs": docs[order], "cluster": by_doc["cluster"].to_numpy(np.int64)[order], "keep": keep,
               "kept_doc": by_doc["kept_doc"].to_numpy(np.int64)[order],
               "rank": ranks["rank"].to_numpy(np.int64)[rank_order]}
    named = {name: pa.Array.from_pandas(by_doc[name].iloc[order], type=id_type) for name in ("id", "kept_id")}
    table = pa.table({**columns, **named}).replace_schema_metadata({RUN_KEY: str(token)})
    WorkDir.attach(work_at).write_part(part_unit(partition_info["number"]), table)
    return pd.DataFrame({"docs": [int(docs.shape[0])], "removed": [int((~keep).sum())]})
