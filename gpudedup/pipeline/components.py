"""Connected components of the verified pairs on a Dask cluster, in the form
cluster.component_roots gives them in one process: every document of a pair with the smallest
document of its component (its root).

The pairs lie in parts of a work directory (pipeline/pairparts.py), which the tasks read,
grouped by their sizes into parts of at most ``pairs_per_part`` pairs. A task per group finds
its own components (cluster.component_roots): where there is one group, they are the answer.
Otherwise each group hands on a star per component, an edge from each of its documents to its
root, and the stars of the groups are joined by the alternating large-star and small-star steps
of Kiveris et al., "Connected Components in MapReduce and Beyond" (SoCC 2014), each a shuffle
of the edges on a node so that a task sees every neighbour of its nodes:

- large star: each node u links its larger neighbours to m(u), the smallest of u and its
  neighbours;
- small star: each node u links itself and its smaller neighbours to the smallest of them.

Neither step changes the components; together they reach, in O(log^2 n) rounds, a forest of
stars each centred on its component's smallest node. That state is recognised locally, in the
shuffle the next large star makes anyway: every node either has only larger neighbours (a
centre) or exactly one neighbour, a smaller one (a leaf). The client holds a count per round
and, at the end, a Dask DataFrame of the (document, root) of the documents in components, left
on the workers for the keep decision (pipeline/clusterparts.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Optional

import numpy as np

from ..core.cluster import component_roots
from ..errors import ParameterError
from .daskops import cluster_failures, frame_of, share
from .pairparts import PAIR_COLUMNS

if TYPE_CHECKING:
    from .pairparts import PairParts

# Pairs per part: a part's components take about 125 bytes per pair on its worker, so about
# 1 GB here. Up to this many pairs one task finds the components, nearly as fast as the client
# would; past it every round costs two shuffles, many times slower (scripts/bench_components.py;
# the figures are in docs/performance.md, "Connected components on a cluster"). Dask's setting
# PAIRS_PER_PART_SETTING changes it, for workers of more or less memory (pairs_per_part).
PAIRS_PER_PART = 8_000_000
PAIRS_PER_PART_SETTING = "gpudedup.pairs-per-part"
EDGE_COLUMNS = {"a": "int64", "b": "int64"}  # an edge a - b
NODE_COLUMNS = {"u": "int64", "v": "int64"}  # a neighbour v of node u
# The alternating steps converge in O(log^2 n) rounds; a run that has not is a bug, not data.
MOST_ROUNDS = 200


def pairs_per_part() -> int:
    """The most pairs a part of the components takes (PAIRS_PER_PART), or what Dask's
    configuration sets as PAIRS_PER_PART_SETTING (``dask.config.set``, a Dask YAML file, or the
    client's environment: DASK_GPUDEDUP__PAIRS_PER_PART)."""
    import dask

    value = dask.config.get(PAIRS_PER_PART_SETTING, PAIRS_PER_PART)
    if type(value) is not int or value < 1:
        raise ParameterError(f"Dask's setting {PAIRS_PER_PART_SETTING} must be an integer >= 1; got {value!r}")
    return value


def dask_component_labels(client, pairs: PairParts, pairs_per_part: int, n_docs: Optional[int] = None):
    """The connected components of the ``pairs`` (a work directory's parts, read by the tasks),
    found by tasks on the workers of ``client`` (a distributed.Client, the default client of
    the collections computed here; None: Dask's local scheduler): a Dask DataFrame of
    edge_frame rows (a: document, b: its root), one for every document of a pair, left on the
    workers (its rounds computed, the labels themselves not); None when there is no pair.
    n_docs: the documents' count, where known (component_roots' hint)."""
    import dask
    import dask.dataframe as dd

    groups = part_groups(pairs.sizes, pairs_per_part)
    if not groups:
        return None
    with cluster_failures("the connected components"):
        stored, = share(client, pairs)  # (every group's task reads it)
        if len(groups) == 1:  # one group's components are the whole graph's: no round joins them
            return dd.from_delayed([dask.delayed(part_labels)(stored, groups[0], n_docs)], meta=edge_frame(),
                                   verify_meta=False)
        parts = [dask.delayed(part_stars)(stored, numbers) for numbers in groups]
        edges = dd.from_delayed(parts, meta=edge_frame(), verify_meta=False)
        for _ in range(MOST_ROUNDS):
            grouped = by_node(edges, len(parts)).persist()
            if int(grouped.map_partitions(star_violations, meta=("bad", "int64")).sum().compute()) == 0:
                return grouped.map_partitions(star_labels, meta=edge_frame())
            edges = grouped.map_partitions(large_star, meta=edge_frame())
            edges = by_node(edges, len(parts)).map_partitions(small_star, meta=edge_frame())
    raise RuntimeError(f"the connected components did not converge in {MOST_ROUNDS} rounds")


def part_groups(sizes: np.ndarray, pairs_per_part: int) -> list[list[int]]:
    """The numbers of the parts of ``sizes`` pairs (int64 (parts,), host) that hold pairs, in
    groups of consecutive parts of at most ``pairs_per_part`` pairs together (a part larger than
    that is a group of its own)."""
    groups: list[list[int]] = []
    pairs = 0
    for number, size in enumerate(sizes.tolist()):
        if size == 0:
            continue
        if not groups or pairs + size > pairs_per_part:
            groups.append([])
            pairs = 0
        groups[-1].append(number)
        pairs += size
    return groups


def by_node(edges, partitions: int):
    """The edges (a, b) as (u, v) rows in both directions, shuffled on u: every neighbour v of
    a node u in u's partition; each partition's rows distinct and sorted by (u, v)."""

    rows = edges.map_partitions(both_ways, meta=frame_of(NODE_COLUMNS)).shuffle(on="u", npartitions=partitions)
    return rows.map_partitions(distinct_sorted, meta=frame_of(NODE_COLUMNS))


# --- tasks (module-level, so that workers import them rather than unpickle code) --------------


def edge_frame(a: Optional[np.ndarray] = None, b: Optional[np.ndarray] = None):
    """A pandas DataFrame of edges (a, b), int64 (without arrays, the empty one: Dask's meta)."""

    if a is None or b is None:
        return frame_of(EDGE_COLUMNS)
    import pandas as pd

    return pd.DataFrame({"a": a, "b": b})


def group_edges(pairs: PairParts, numbers: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The pairs (first, second: int64) of the parts ``numbers`` of ``pairs`` (part_groups)."""

    read = [pairs.read_part(number, list(PAIR_COLUMNS)) for number in numbers]
    return np.concatenate([part["first"] for part in read]), np.concatenate([part["second"] for part in read])


def part_labels(pairs: PairParts, numbers: list[int], n_docs: Optional[int] = None):
    """One group's components (cluster.component_roots of its pairs, group_edges; n_docs: its
    hint) as an edge_frame: (document, root) for each document of a pair."""

    return edge_frame(*component_roots(*group_edges(pairs, numbers), n_docs))


def part_stars(pairs: PairParts, numbers: list[int]):
    """One group's components as stars: part_labels' edges but the roots' own."""

    labels = part_labels(pairs, numbers)
    return labels[labels["a"] != labels["b"]]


def both_ways(edges):
    import pandas as pd

    a, b = edges["a"].to_numpy(np.int64), edges["b"].to_numpy(np.int64)
    return pd.DataFrame({"u": np.concatenate([a, b]), "v": np.concatenate([b, a])})


def distinct_sorted(rows):
    """A shuffled partition's (u, v) rows, distinct and sorted by (u, v)."""
    import pandas as pd

    u, v = rows["u"].to_numpy(np.int64), rows["v"].to_numpy(np.int64)
    order = np.lexsort((v, u))
    u, v = u[order], v[order]
    distinct = np.ones(u.shape[0], dtype=bool)
    distinct[1:] = (u[1:] != u[:-1]) | (v[1:] != v[:-1])
    return pd.DataFrame({"u": u[distinct], "v": v[distinct]})


class Neighbourhoods(NamedTuple):
    """A partition of by_node's rows (distinct, sorted by (u, v)), grouped by node.

    u, v: int64 (r,), the rows. node: int64 (g,), ascending, the node of each group of rows
    with one u; first: int64 (g,), each group's first row (its smallest neighbour); degree:
    int64 (g,), its rows (the node's neighbours); smallest: int64 (g,), the smallest of the node and its neighbours;
    group: int64 (r,), each row's group.
    """

    u: np.ndarray
    v: np.ndarray
    node: np.ndarray
    first: np.ndarray
    degree: np.ndarray
    smallest: np.ndarray
    group: np.ndarray

    @classmethod
    def of(cls, rows) -> "Neighbourhoods":
        u, v = rows["u"].to_numpy(np.int64), rows["v"].to_numpy(np.int64)
        first = np.flatnonzero(np.concatenate([[True], u[1:] != u[:-1]])) if u.size else np.zeros(0, np.int64)
        node = u[first]
        degree = np.diff(np.append(first, u.shape[0]))
        return cls(u, v, node, first, degree, np.minimum(node, v[first]), np.repeat(np.arange(node.shape[0]), degree))


def large_star(rows):
    """Each node's larger neighbours linked to the smallest of the node and its neighbours."""
    near = Neighbourhoods.of(rows)
    larger = near.v > near.u
    return edge_frame(near.v[larger], near.smallest[near.group][larger])


def small_star(rows):
    """Each node and its smaller neighbours linked to the smallest of them."""
    near = Neighbourhoods.of(rows)
    smallest = near.smallest[near.group]
    smaller = (near.v < near.u) & (near.v != smallest)
    moved = near.node != near.smallest  # the node itself, where a neighbour is smaller
    return edge_frame(np.concatenate([near.v[smaller], near.node[moved]]),
                      np.concatenate([smallest[smaller], near.smallest[moved]]))


def star_violations(rows):
    """How many of the partition's nodes are neither a centre (only larger neighbours) nor a
    leaf (exactly one neighbour, a smaller one): 0 everywhere once the edges are stars
    centred on their components' smallest nodes."""
    import pandas as pd

    near = Neighbourhoods.of(rows)
    centre = near.v[near.first] > near.node
    leaf = (near.degree == 1) & (near.v[near.first] < near.node)
    return pd.Series([int((~(centre | leaf)).sum())], dtype="int64")


def star_labels(rows):
    """(node, root) of every node of a partition of stars: a centre its own root, a leaf its
    one neighbour."""
    near = Neighbourhoods.of(rows)
    return edge_frame(near.node, near.smallest)
