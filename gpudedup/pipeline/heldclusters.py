"""The clusters of a run held in this process (HeldClusters), with the interface of those a
cluster's run keeps in parts of its work directory (clusterparts.ClusterParts): what reads a
run's clusters (the report's counts, what report.html shows, the pairs inside the largest
clusters) asks either the same questions and never which of the two it holds."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Union

import numpy as np
import pyarrow as pa

from ..core.cluster import Clusters, clusters_by_size, largest_first, listed_members
from ..ids import IdSource
from .removedrows import RemovedDocs, held_removed
from .tables import NamedRows, clusters_parts

if TYPE_CHECKING:
    from .clusterparts import ClusterParts
    from .protocols import Executor


@dataclass
class HeldClusters:
    """The clusters (cluster.Clusters: host arrays over the documents in clusters) of a run in
    one process. shown takes the executor that ClusterParts' reads with, and needs none."""

    clusters: Clusters
    in_parts = False  # (ClusterParts: True)

    @property
    def count(self) -> int:
        return self.clusters.count

    @property
    def in_clusters(self) -> int:
        return self.clusters.in_clusters

    def in_clusters_from(self, first: int) -> int:
        """The documents in clusters of rows ``first`` and after (ClusterParts')."""
        return self.clusters.in_clusters - int(np.searchsorted(self.clusters.docs, first))

    @property
    def removed_count(self) -> int:
        return self.clusters.removed_count

    def read(self) -> Clusters:
        return self.clusters

    def by_size(self) -> tuple[np.ndarray, np.ndarray]:
        """Every cluster size that occurs, ascending, and how many clusters have it (int64 (m,)
        each: cluster.clusters_by_size)."""
        return clusters_by_size(self.clusters.cluster)

    @cached_property
    def sizes(self) -> np.ndarray:
        """int64 (count,): each cluster's size, by its number (largest_numbers and shown ask)."""
        return np.bincount(self.clusters.cluster, minlength=self.clusters.count).astype(np.int64)

    def largest_numbers(self, count: int) -> np.ndarray:
        """int64 (k,): the ``count`` largest clusters, largest first (the smaller number first
        among equals)."""
        return largest_first(np.arange(self.sizes.shape[0]), self.sizes, count).astype(np.int64)

    def shown(self, numbers: np.ndarray, listed: int,
              executor: Optional[Executor] = None) -> tuple[np.ndarray, Clusters]:
        """Of the clusters ``numbers`` (int64 (k,)): their sizes (int64 (k,)) and the documents a
        report lists (cluster.listed_members)."""
        return self.sizes[numbers], listed_members(self.clusters, numbers, listed)

    def names(self, source: IdSource, id_type: Optional[pa.DataType] = None) -> NamedRows:
        """The ids of the documents in clusters, taken from ``source`` (id_type: ClusterParts')."""
        return NamedRows.of(source, self.clusters.docs)

    def names_now(self, source: IdSource) -> Optional[NamedRows]:
        """names(source), for a result to hold from when it is made: the clusters are held here,
        and the ids' source (a run's work directory) may be gone when the result writes."""
        return self.names(source)

    def table_in_parts(self, named: Callable[[], NamedRows], id_type: pa.DataType) -> Iterator[pa.Table]:
        """The clusters table in parts (tables.clusters_parts), its ids from ``named()``."""
        return clusters_parts(named(), self.clusters)

    def removed_of(self, ids_of: Optional[Callable[[np.ndarray], pa.Array]], id_type: pa.DataType, indexed_rows: int,
                   pairs: Optional[tuple[np.ndarray, np.ndarray, np.ndarray]] = None) -> RemovedDocs:
        """What gives the removed documents of a range with their kept documents
        (removedrows.held_removed). ids_of: the ids of rows (None: no kept_id); id_type: the
        parts' (ClusterParts.removed_of), not used here; pairs: the verified pairs (a, b,
        jaccard) of indexed documents (a below indexed_rows), for the kept documents that are
        indexed ones (None: not asked for)."""
        return held_removed(self.clusters, ids_of, indexed_rows, pairs)


# A run's clusters where they lie: held, or a cluster's parts.
Clustered = Union[HeldClusters, "ClusterParts"]
