"""Clusters: connected components of the verified pairs, and the one document kept in each."""

from __future__ import annotations

from typing import Literal, NamedTuple, Optional

import numpy as np

KeepPolicy = Literal["first", "longest"]
# component_roots makes its graph over the documents as numbered (no renumbering sort) where
# they are at most this many times the pairs; over the pairs' documents alone otherwise.
DIRECT_GRAPH_FACTOR = 8


class Clusters(NamedTuple):
    """Host arrays over the documents that are in a cluster of two or more.

    docs: int64 (m,), ascending document indices.
    cluster: int64 (m,), cluster number; clusters are numbered 0, 1, ... in the order of their
        first document.
    keep: bool (m,), True for the kept documents: one per cluster, except that a run against a
        persistent index keeps every indexed document of a cluster (clusters_of_roots).
    """

    docs: np.ndarray
    cluster: np.ndarray
    keep: np.ndarray

    @property
    def count(self) -> int:  # type: ignore[override]  # the number of clusters, not tuple.count
        return int(self.cluster.max()) + 1 if self.cluster.size else 0

    @property
    def in_clusters(self) -> int:
        """The documents in clusters."""
        return int(self.docs.shape[0])

    @property
    def removed_count(self) -> int:
        """The documents removed (in a cluster, not kept)."""
        return int((~self.keep).sum())

    def members(self, numbers: np.ndarray) -> "Clusters":
        """The documents of the clusters ``numbers`` (int64), ascending."""
        mine = np.isin(self.cluster, numbers)
        return Clusters(self.docs[mine], self.cluster[mine], self.keep[mine])

    @classmethod
    def joined(cls, parts: list["Clusters"]) -> "Clusters":
        """Several parts' documents as one Clusters, in order (none: no document)."""
        if not parts:
            empty = np.zeros(0, np.int64)
            return cls(empty, empty, np.zeros(0, bool))
        return cls(*(np.concatenate(column) for column in zip(*parts)))


def find_clusters(n_docs: int, first, second, lengths, policy: KeepPolicy = "first", pinned: int = 0) -> Clusters:
    """Connected components of the graph whose edges are the verified pairs.

    first, second: int64 (p,) document indices of the verified pairs. lengths: int64 (n_docs,)
    text lengths, used by ``policy="longest"`` (keep the longest text, the first of equals);
    ``"first"`` keeps the first document in input order. Deterministic, never random. pinned:
    rows below it are never removed (clusters_of_roots).
    """
    first, second = np.asarray(first, np.int64), np.asarray(second, np.int64)
    if isinstance(lengths, (list, tuple)):  # (an array, or None under "first", goes as it is)
        lengths = np.asarray(lengths)
    if first.size and (min(first.min(), second.min()) < 0 or max(first.max(), second.max()) >= n_docs):
        raise ValueError(f"pairs name documents outside 0 .. {n_docs - 1}")
    docs, root = component_roots(first, second, n_docs)
    return clusters_of_roots(docs, root, lengths, policy, pinned)


def component_roots(first: np.ndarray, second: np.ndarray,
                    n_docs: Optional[int] = None) -> tuple[np.ndarray, np.ndarray]:
    """The connected components of the pairs' graph, as (docs, root): int64 (m,), host; docs
    ascending, every document of some pair; root, the smallest document of its component (the
    form pipeline/components.py computes on a cluster too). A pair of a document with itself
    joins nothing. n_docs (the documents' count, when known): where it is at most
    DIRECT_GRAPH_FACTOR times the pairs, the graph is made over the documents as they are
    numbered; otherwise (or unknown) over the pairs' documents alone, renumbered by a sort."""
    distinct = first != second
    if not distinct.all():
        first, second = first[distinct], second[distinct]
    if first.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    first, second = first.astype(np.int64, copy=False), second.astype(np.int64, copy=False)
    if n_docs is not None and n_docs <= DIRECT_GRAPH_FACTOR * first.shape[0]:
        root = smallest_connected(int(n_docs), first, second)
        in_pair = np.zeros(int(n_docs), dtype=bool)
        in_pair[first] = True
        in_pair[second] = True
        docs = np.flatnonzero(in_pair)
        return docs, root[docs]
    docs, ends = np.unique(np.concatenate([first, second]), return_inverse=True)
    return docs, docs[smallest_connected(docs.shape[0], ends[:first.shape[0]], ends[first.shape[0]:])]


def smallest_connected(nodes: int, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """int64 (nodes,), host: for every node 0 .. nodes-1, the smallest node connected to it by
    the edges (first[i], second[i]) (int64 (e,) nodes, in any order; a node of no edge is its
    own). The edges are not modified.

    Trees over the nodes, each node pointing at a smaller one or at itself (its tree's root,
    the smallest node of the tree), joined in rounds: every edge between two trees hooks the
    larger root under the smaller (the smallest such for each root), and the roots that moved
    are made to point at their new root at once (pointer jumping); the edges go on as edges
    between the roots they joined, and those inside one tree drop out. Every round leaves
    fewer roots, so it ends; on a path of a million nodes numbered at random it takes about as
    many rounds as halvings of the path (20 for 2^20 nodes, in bit-reversed order). Numpy
    throughout: no import of SciPy's graph module, whose start (SciPy's linear algebra)
    costs a short run more than its components do.
    """
    parent = np.arange(nodes, dtype=np.int64)
    # Only the nodes the edges name ever move: the rounds and the last jumps walk them alone
    # (a graph over a corpus's rows has many rows in no pair).
    named = np.zeros(nodes, dtype=bool)
    named[first] = True
    named[second] = True
    roots = np.flatnonzero(named)
    named_nodes = roots if roots.shape[0] < nodes else slice(None)  # (every node: no gathers)
    low, high = first, second
    while True:
        low, high = parent[low], parent[high]  # (roots: every node an edge names is one, or points at one)
        apart = low != high
        if not apart.any():
            break
        low, high = low[apart], high[apart]
        low, high = np.minimum(low, high), np.maximum(low, high)
        np.minimum.at(parent, high, low)
        still = parent[roots] == roots
        moved, roots = roots[~still], roots[still]
        while True:  # the moved roots point at roots: a root is at most a round's hooks away
            above = parent[parent[moved]]
            if np.array_equal(above, parent[moved]):
                break
            parent[moved] = above
    while True:  # every other named node too (at most one step per round below its root)
        above = parent[parent[named_nodes]]
        if np.array_equal(above, parent[named_nodes]):
            return parent
        parent[named_nodes] = above


def clusters_of_roots(docs: np.ndarray, root: np.ndarray, lengths, policy: KeepPolicy = "first",
                      pinned: int = 0) -> Clusters:
    """The clusters and the keep decision of components given as (docs, root) (int64 (m,),
    host, docs ascending, root the smallest document of each one's component;
    component_roots). Clusters are numbered in the order of their first document, so by root.
    ``policy`` chooses the kept document (find_clusters), ``"longest"`` by ``lengths[docs]``
    (lengths: int64 (n,) host, or what gathers like it: protocols.Store.lengths); rows below
    ``pinned`` are documents kept before (a persistent index's): never removed, and a cluster
    holding one keeps those and removes the rest (its root, its smallest row, is then one of
    them)."""
    # A root is a document of its own component, so among docs; numbered in order (docs ascend).
    is_root = docs == root
    roots = docs[is_root]
    if docs.size and docs[-1] < DIRECT_GRAPH_FACTOR * docs.shape[0]:  # a table by document: no search
        number = np.empty(int(docs[-1]) + 1, dtype=np.int64)
        number[roots] = np.arange(roots.shape[0], dtype=np.int64)
        cluster = number[root]
    else:
        cluster = np.searchsorted(roots, root).astype(np.int64)
    if policy == "first":
        chosen = is_root
    elif policy == "longest":
        # Within each cluster: longest first, then input order; the head of each group is kept.
        order = np.lexsort((docs, -np.asarray(lengths[docs]), cluster))
        heads = np.ones(order.shape[0], dtype=bool)
        heads[1:] = cluster[order][1:] != cluster[order][:-1]
        chosen = np.zeros(docs.shape[0], dtype=bool)
        chosen[order[heads]] = True
    else:
        raise ValueError(f"keep policy must be 'first' or 'longest', got {policy!r}")
    if pinned:
        chosen = np.where(root < pinned, docs < pinned, chosen)
    return Clusters(docs, cluster, chosen)


def kept_documents(clusters: Clusters) -> np.ndarray:
    """int64 (m,): for each document of ``clusters`` (numbered 0 .. count-1), the document its
    cluster keeps (itself where it is kept; where a cluster keeps several, indexed documents
    in a run against an index, the first of them)."""
    kept_doc = np.zeros(clusters.count, dtype=np.int64)
    # Reversed, so that the first kept document of a cluster is the one written last.
    kept_doc[clusters.cluster[clusters.keep][::-1]] = clusters.docs[clusters.keep][::-1]
    return np.where(clusters.keep, clusters.docs, kept_doc[clusters.cluster])


def largest_first(numbers: np.ndarray, sizes: np.ndarray, count: int) -> np.ndarray:
    """int64: the places in ``numbers`` (cluster numbers, distinct) of the ``count`` largest
    clusters by ``sizes``, largest first, the smaller number first among equals (the order
    report.html shows them in)."""
    return np.lexsort((numbers, -sizes))[:count]


def clusters_by_size(cluster: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every cluster size that occurs among the documents' cluster numbers ``cluster`` (int64
    (n,), host; each cluster's documents all among them), ascending, and how many clusters
    have it: int64 (m,) each. (Clusters are numbered densely, and a group of them over a
    range of numbers: counted over that range.)"""
    if cluster.shape[0] == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    sizes = np.bincount(cluster - cluster.min())
    values, clusters = np.unique(sizes[sizes > 0], return_counts=True)
    return values.astype(np.int64), clusters.astype(np.int64)


def merged_by_size(values: np.ndarray, clusters: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """clusters_by_size's counts of several groups of whole clusters, concatenated (``values``,
    ``clusters``: int64 (m,) each, a size may repeat), summed by size."""
    merged, place = np.unique(values, return_inverse=True)
    totals = np.bincount(place, weights=clusters, minlength=merged.shape[0])
    return merged.astype(np.int64), totals.astype(np.int64)


def listed_members(clusters: Clusters, numbers: np.ndarray, listed: int) -> Clusters:
    """Of the clusters ``numbers`` (int64), the documents a report lists: each one's first kept
    document and its first ``listed`` documents (the lowest rows), ascending. Applied to the
    listings of consecutive ranges of rows, joined, it gives the listing of them all."""
    mine = np.isin(clusters.cluster, numbers)
    docs, cluster, keep = clusters.docs[mine], clusters.cluster[mine], clusters.keep[mine]
    by_cluster = np.lexsort((docs, cluster))  # each cluster's documents together, by row
    sorted_cluster = cluster[by_cluster]
    starts = np.flatnonzero(np.concatenate([[True], sorted_cluster[1:] != sorted_cluster[:-1]])) \
        if sorted_cluster.size else np.zeros(0, np.int64)
    place = np.arange(sorted_cluster.shape[0]) - np.repeat(starts, np.diff(np.append(starts, sorted_cluster.shape[0])))
    take = place < listed
    # The first kept document of each cluster: where the running count of kept ones turns 1.
    kept_sorted = keep[by_cluster]
    kept_before = np.cumsum(kept_sorted) - np.repeat(np.cumsum(kept_sorted)[starts] - kept_sorted[starts],
                                                     np.diff(np.append(starts, sorted_cluster.shape[0])))
    take |= kept_sorted & (kept_before == 1)
    chosen = np.sort(by_cluster[take])
    return Clusters(docs[chosen], cluster[chosen], keep[chosen])


def pairs_inside(first: np.ndarray, second: np.ndarray, jaccard: np.ndarray, docs: np.ndarray, which: np.ndarray,
                 count: int, asked_a: np.ndarray, asked_b: np.ndarray):
    """What some verified pairs (first, second int64 (p,), first < second, ascending by
    (first, second); jaccard float64 (p,)) say of ``count`` clusters: per cluster 0 .. count-1,
    the pairs inside it (int64), their least and greatest Jaccard (float64; inf and -inf where
    none), where docs (int64 ascending) are the clusters' documents and which (int64) each
    one's cluster among them (a pair is inside its first document's cluster: pairs never
    cross clusters); and the Jaccard of each asked pair (asked_a[i], asked_b[i]) found among
    them (float64, nan where not). Summed, least and greatest over parts of the pairs, the
    figures of them all (report.html's largest clusters)."""
    inside = np.zeros(count, np.int64)
    low, high = np.full(count, np.inf), np.full(count, -np.inf)
    if docs.shape[0] and first.shape[0]:
        at = np.minimum(np.searchsorted(docs, first), docs.shape[0] - 1)
        mine = docs[at] == first
        shown_cluster, values = which[at[mine]], jaccard[mine]
        inside = np.bincount(shown_cluster, minlength=count).astype(np.int64)
        np.minimum.at(low, shown_cluster, values)
        np.maximum.at(high, shown_cluster, values)
    found = np.full(asked_a.shape[0], np.nan)
    for i, (a, b) in enumerate(zip(asked_a.tolist(), asked_b.tolist())):  # (a few)
        start, stop = np.searchsorted(first, a, side="left"), np.searchsorted(first, a, side="right")
        at = start + int(np.searchsorted(second[start:stop], b))
        if at < stop and second[at] == b:
            found[i] = jaccard[at]
    return inside, low, high, found


def pairs_inside_of(first: np.ndarray, second: np.ndarray, jaccard: np.ndarray, members: Clusters,
                    numbers: np.ndarray, asked_a: np.ndarray, asked_b: np.ndarray):
    """pairs_inside of pairs in any order, given the clusters' members (Clusters:
    those of ``numbers`` among them, ascending)."""
    order = np.lexsort((second, first))
    by_number = np.argsort(numbers)
    which = by_number[np.searchsorted(numbers, members.cluster, sorter=by_number)]
    return pairs_inside(first[order], second[order], jaccard[order], members.docs, which, numbers.shape[0],
                        asked_a, asked_b)
