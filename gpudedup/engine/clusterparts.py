"""The clusters of a run on a cluster, found and kept by the workers' tasks so that the client
holds a few numbers per part rather than the documents in clusters (docs/scale.md).

The rows 0 .. n-1 are cut into ``ranges`` ranges of about equal length (range_starts). The
components' labels (engine/components.py: a document and its root, the smallest document of
its component) are moved twice, each time by Dask's ``set_index`` with these ranges as
divisions, so that partition r holds exactly the rows of range r:

1. on the root: every component lies whole in the partition of its root, so a task decides
   its clusters as one process would (cluster.clusters_of_roots over the partition's labels:
   the kept document, by ``keep``, with the documents' lengths read from the shards where it
   is "longest"). Clusters are numbered in the order of their roots; the partitions ascend by
   root, so a partition's numbers start after the roots of the partitions before it (a count
   per partition, added up by the client);
2. on the document: partition r holds the clustered documents of range r, stored as
   WORK/clusters/NNNNN/ (part r) in row order: docs, int64 ascending; cluster, int64; keep,
   bool; kept_doc, int64, the document its cluster keeps (the first of them where a cluster
   keeps several).

The client gets, per part, its documents and its removed documents, and the largest clusters
(report.html shows them). The clusters are never a stage that --resume trusts: every run makes
them again from the verified pairs and writes every part, and a part that holds no document by
the run's counts is never read (so neither is one that another run left). A task that writes
the kept rows of a shard reads the parts of its rows alone (ClusterParts.removed_rows).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from ..cluster import Clusters, KeepPolicy, clusters_of_roots, kept_documents
from .workdir import WorkAt, WorkDir

if TYPE_CHECKING:
    from .job import Executor

CLUSTER_COLUMNS = ("docs", "cluster", "keep", "kept_doc")
DECIDED_COLUMNS = {"doc": "int64", "cluster": "int64", "keep": "bool", "kept_doc": "int64"}
# The largest clusters the client learns of (report.html shows the first of them).
LARGEST_KNOWN = 20


def range_starts(n_docs: int, ranges: int) -> np.ndarray:
    """int64 (r + 1,): the first row of each of ``ranges`` ranges of about equal length over
    rows 0 .. n_docs-1, then n_docs (ranges is at most n_docs, so none is empty)."""
    ranges = max(min(ranges, n_docs), 1)
    return (np.arange(ranges + 1, dtype=np.int64) * n_docs) // ranges


def part_unit(number: int) -> str:
    return f"clusters/{number:05d}"


@dataclass
class ClusterParts:
    """Clusters kept as parts of the work directory at ``work_at`` (the module docstring).

    starts: int64 (r + 1,), the first row of each part's range (range_starts); sizes: int64
    (r,), the documents in clusters of each part; removed: int64 (r,), those of them removed;
    count: the clusters; largest: int64 (k,), the numbers of the LARGEST_KNOWN largest
    clusters, largest first (the smaller number first among equals); all host.
    """

    work_at: WorkAt
    starts: np.ndarray
    sizes: np.ndarray
    removed: np.ndarray
    count: int
    largest: np.ndarray

    @property
    def in_clusters(self) -> int:
        return int(self.sizes.sum())

    @property
    def removed_count(self) -> int:
        return int(self.removed.sum())

    def read(self) -> Clusters:
        """Every part as one Clusters, in this process (parts ascend by row)."""
        work = WorkDir.attach(self.work_at)
        numbers = np.flatnonzero(self.sizes).tolist()
        work.fetch([part_unit(number) for number in numbers], [f"{name}.npy" for name in CLUSTER_COLUMNS])
        parts = [work.load_dir(part_unit(number)) for number in numbers]
        if not parts:
            empty = np.zeros(0, np.int64)
            return Clusters(empty, empty, np.zeros(0, bool))
        return Clusters(*(np.concatenate([part[name] for part in parts]) for name in ("docs", "cluster", "keep")))

    def removed_rows(self, start: int, stop: int) -> np.ndarray:
        """int64 ascending: the removed documents among rows start .. stop-1, read from the
        parts of those rows (in a task, or here)."""
        first = int(np.searchsorted(self.starts, start, side="right")) - 1
        last = int(np.searchsorted(self.starts, stop, side="left"))
        work, found = WorkDir.attach(self.work_at), [np.zeros(0, np.int64)]
        for number in range(max(first, 0), min(last, self.sizes.shape[0])):
            if self.removed[number]:
                part = work.load_dir(part_unit(number))
                docs = part["docs"][~part["keep"]]
                found.append(docs[(docs >= start) & (docs < stop)])
        return np.concatenate(found)

    def members(self, numbers: np.ndarray, executor: Optional[Executor] = None) -> Clusters:
        """The documents of the clusters ``numbers`` (int64; a few, for report.html), ascending:
        a task per part that holds any clustered document, on ``executor`` where it is a
        connected cluster's, else here."""
        arguments = [(self.work_at, number, numbers) for number in np.flatnonzero(self.sizes).tolist()]
        if executor is None or executor.in_process or not executor.connected():
            found = [part_members(*a) for a in arguments]
        else:
            found = executor.map(part_members, arguments, "reading the clusters") if arguments else []
        if not found:
            empty = np.zeros(0, np.int64)
            return Clusters(empty, empty, np.zeros(0, bool))
        return Clusters(*(np.concatenate(column) for column in zip(*found)))


def dask_clusters(client, labels, n_docs: int, ranges: int, work_at: WorkAt, lengths: Any, policy: KeepPolicy,
                  pinned: int = 0) -> ClusterParts:
    """The clusters of the components ``labels`` (components.dask_component_labels, or None:
    no pair) decided and stored by tasks on ``client``'s workers in ``ranges`` parts (the
    module docstring); lengths: what gives the documents' lengths in a task (disk.LengthsAt),
    read where ``policy`` is "longest". Returns the parts' ClusterParts."""
    from .dask import cluster_failure, frame_of, scatter_once

    starts = range_starts(n_docs, ranges)
    if labels is None:  # (no part is read where none holds a document: nothing to write)
        none = np.zeros(starts.shape[0] - 1, np.int64)
        return ClusterParts(work_at, starts, none, none, 0, np.zeros(0, np.int64))
    # Partition r holds the rows starts[r] .. starts[r + 1]-1 (the last division is inclusive).
    divisions = starts[:-1].tolist() + [n_docs]
    try:
        by_root = labels.set_index("b", divisions=divisions).persist()
        roots = by_root.map_partitions(root_count, meta=("roots", "int64")).compute().to_numpy(np.int64)
        offsets = np.concatenate([[0], np.cumsum(roots)[:-1]]).astype(np.int64)
        shared = scatter_once(client, [offsets, lengths], broadcast=True)
        decided = by_root.map_partitions(decide_clusters, *shared, policy, pinned,
                                         meta=frame_of(DECIDED_COLUMNS)).persist()
        largest = decided.map_partitions(largest_clusters, LARGEST_KNOWN,
                                         meta=frame_of({"cluster": "int64", "size": "int64"})).compute()
        written = decided.set_index("doc", divisions=divisions).map_partitions(
            write_cluster_part, work_at, meta=frame_of({"docs": "int64", "removed": "int64"})).compute()
    except Exception as error:  # noqa: BLE001 -- as in dask.computed
        raise cluster_failure("the clusters", error) from None
    top = np.lexsort((largest["cluster"].to_numpy(np.int64), -largest["size"].to_numpy(np.int64)))[:LARGEST_KNOWN]
    return ClusterParts(work_at, starts, written["docs"].to_numpy(np.int64), written["removed"].to_numpy(np.int64),
                        int(roots.sum()), largest["cluster"].to_numpy(np.int64)[top])


# --- tasks (module-level, so that workers import them rather than unpickle code) --------------


def root_count(by_root):
    """How many roots (components) a partition of labels set on their root holds."""
    import pandas as pd

    roots = by_root.index.to_numpy(np.int64)
    return pd.Series([int(np.unique(roots).shape[0])], dtype="int64")


def decide_clusters(by_root, offsets: np.ndarray, lengths: Any, policy: KeepPolicy, pinned: int,
                    partition_info: Optional[dict] = None):
    """A partition of labels set on their root (whole components) as its clusters: a pandas
    DataFrame of DECIDED_COLUMNS, one row per document (cluster.clusters_of_roots; numbers
    after the ``offsets[partition]`` roots of the partitions before)."""
    import pandas as pd

    assert partition_info is not None, "Dask names the partition"
    docs, root = by_root["a"].to_numpy(np.int64), by_root.index.to_numpy(np.int64)
    order = np.argsort(docs, kind="stable")
    docs, root = docs[order], root[order]
    clusters = clusters_of_roots(docs, root, lengths.open() if policy == "longest" else None,
                                 policy, pinned)
    return pd.DataFrame({"doc": docs, "cluster": clusters.cluster + offsets[partition_info["number"]],
                         "keep": clusters.keep, "kept_doc": kept_documents(clusters)})


def largest_clusters(decided, count: int):
    """The ``count`` largest clusters of a partition of decide_clusters' rows (clusters lie
    whole in one): a pandas DataFrame of (cluster, size)."""
    import pandas as pd

    number = decided["cluster"].to_numpy(np.int64)
    clusters, sizes = np.unique(number, return_counts=True)
    top = np.lexsort((clusters, -sizes))[:count]
    return pd.DataFrame({"cluster": clusters[top], "size": sizes[top].astype(np.int64)})


def part_members(work_at: WorkAt, number: int, numbers: np.ndarray) -> Clusters:
    """The documents of part ``number`` in the clusters ``numbers`` (int64)."""
    part = WorkDir.attach(work_at).load_dir(part_unit(number))
    mine = np.isin(part["cluster"], numbers)
    return Clusters(part["docs"][mine], part["cluster"][mine], part["keep"][mine])


def write_cluster_part(by_doc, work_at: WorkAt, partition_info: Optional[dict] = None):
    """Store a partition of decide_clusters' rows set on the document (the clustered documents
    of one range, ascending) as its part; returns its documents and removed documents."""
    import pandas as pd

    assert partition_info is not None, "Dask names the partition"
    docs = by_doc.index.to_numpy(np.int64)
    order = np.argsort(docs, kind="stable")  # (set_index sorts; kept in order whatever it does)
    keep = by_doc["keep"].to_numpy(bool)[order]
    relative = part_unit(partition_info["number"])
    work = WorkDir.attach(work_at)
    if work.done(relative):
        work.remove(relative)
    work.write_dir(relative, {"docs": docs[order], "cluster": by_doc["cluster"].to_numpy(np.int64)[order],
                              "keep": keep, "kept_doc": by_doc["kept_doc"].to_numpy(np.int64)[order]})
    return pd.DataFrame({"docs": [int(docs.shape[0])], "removed": [int((~keep).sum())]})
