"""Clusters: connected components of the verified pairs, and the one document kept in each."""

from __future__ import annotations

from typing import Literal, NamedTuple

import numpy as np
import scipy.sparse
from scipy.sparse.csgraph import connected_components

KeepPolicy = Literal["first", "longest"]


class Clusters(NamedTuple):
    """Host arrays over the documents that are in a cluster of two or more.

    docs: int64 (m,), ascending document indices.
    cluster: int64 (m,), cluster number; clusters are numbered 0, 1, ... in the order of their
        first document.
    keep: bool (m,), True for the kept documents: one per cluster, except that a run against a
        persistent index keeps every indexed document of a cluster (engine.job.pinned_keep).
    """

    docs: np.ndarray
    cluster: np.ndarray
    keep: np.ndarray

    @property
    def count(self) -> int:  # type: ignore[override]  # the number of clusters, not tuple.count
        return int(self.cluster.max()) + 1 if self.cluster.size else 0


def find_clusters(n_docs: int, first, second, lengths, policy: KeepPolicy = "first") -> Clusters:
    """Connected components of the graph whose edges are the verified pairs.

    first, second: int64 (p,) document indices of the verified pairs. lengths: int64 (n_docs,)
    text lengths, used by ``policy="longest"`` (keep the longest text, the first of equals);
    ``"first"`` keeps the first document in input order. Deterministic, never random.
    """
    if first.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Clusters(empty, empty, np.zeros(0, dtype=bool))
    graph = scipy.sparse.coo_matrix(
        (np.ones(first.shape[0], dtype=np.int8), (first, second)), shape=(n_docs, n_docs)
    )
    _, component = connected_components(graph, directed=False)
    size = np.bincount(component)
    docs = np.flatnonzero(size[component] > 1)
    component = component[docs]
    # Number clusters by their first document: docs ascend, so a component's first appearance
    # in `docs` is its first document.
    _, first_seen, dense = np.unique(component, return_index=True, return_inverse=True)
    renumber = np.empty(first_seen.shape[0], dtype=np.int64)
    renumber[np.argsort(first_seen)] = np.arange(first_seen.shape[0])
    cluster = renumber[dense]
    if policy == "first":
        chosen = np.zeros(docs.shape[0], dtype=bool)
        chosen[np.sort(first_seen)] = True
    elif policy == "longest":
        # Within each cluster: longest first, then input order; the head of each group is kept.
        order = np.lexsort((docs, -lengths[docs], cluster))
        heads = np.ones(order.shape[0], dtype=bool)
        heads[1:] = cluster[order][1:] != cluster[order][:-1]
        chosen = np.zeros(docs.shape[0], dtype=bool)
        chosen[order[heads]] = True
    else:
        raise ValueError(f"keep policy must be 'first' or 'longest', got {policy!r}")
    return Clusters(docs, cluster, chosen)
