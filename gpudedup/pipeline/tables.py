"""The pairs and clusters tables of a run held in one process, made a part at a time from its
row-level outcome and the ids of the documents in clusters (NamedRows): the one place where
rows become ids in those tables (docs/output-formats.md, "pairs" and "clusters")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa

from ..core.cluster import Clusters, kept_documents
from ..ids import IdSource, order_ranks
from ..io.layout import table_parts


@dataclass
class NamedRows:
    """The ids of some rows, held once for the tables that name them (pairs and clusters name
    only the documents in clusters).

    rows: int64 (k,) ascending, host; ids: their ids (pyarrow Array, string ids wide); rank:
    int64 (k,), each one's place in the ids' ascending order (ids are unique).
    """

    rows: np.ndarray
    ids: pa.Array
    rank: np.ndarray

    @classmethod
    def of(cls, source: IdSource, rows: np.ndarray) -> "NamedRows":
        ids = source.take(rows)  # (one take: a staged run reads each of its shards once)
        return cls(rows, ids, order_ranks(ids))

    def positions(self, rows: np.ndarray) -> np.ndarray:
        """int64: the places in ``self.rows`` of ``rows`` (each one of them)."""
        return np.searchsorted(self.rows, rows)


def pairs_parts(named: NamedRows, pair_a: np.ndarray, pair_b: np.ndarray, jaccard: np.ndarray) -> Iterator[pa.Table]:
    """(id_a, id_b, jaccard) with id_a < id_b, sorted by (id_a, id_b), for the pairs of rows
    (pair_a[i], pair_b[i]) (int64 (p,), host, rows of ``named``) of Jaccard jaccard[i]
    (float64 (p,)), in parts of layout.part_rows() rows: each part's ids are taken when it is
    made, so that the ids of every pair are never held at once. Sorted by the ids' ranks,
    which order the pairs as their ids do."""
    a, b = named.positions(pair_a), named.positions(pair_b)
    swap = named.rank[a] > named.rank[b]
    first, second = np.where(swap, b, a), np.where(swap, a, b)
    del a, b, swap
    order = np.lexsort((named.rank[second], named.rank[first]))
    for start, length in table_parts(order.shape[0]):
        part = order[start:start + length]
        yield pairs_table(named.ids, first[part], second[part], jaccard[part])


def pairs_table(ids: pa.Array, first: np.ndarray, second: np.ndarray, jaccard: np.ndarray) -> pa.Table:
    """A part of ``pairs``: the pairs of the ids at positions first[i], second[i] (int64 (r,),
    into ``ids``, NamedRows.ids) of Jaccard jaccard[i] (float64 (r,))."""
    return pa.table({"id_a": ids.take(pa.array(first)), "id_b": ids.take(pa.array(second)),
                     "jaccard": pa.array(jaccard, pa.float64())})


def clusters_parts(named: NamedRows, clusters: Clusters) -> Iterator[pa.Table]:
    """(id, cluster, keep, kept_id) for every document in a cluster (named.rows are exactly
    them), in input order, in parts of layout.part_rows() rows: kept_id names the document its
    cluster kept (itself for a kept one; where a cluster keeps several, indexed documents in a
    run against an index, the first of them)."""
    c = clusters
    kept_at = named.positions(kept_documents(c))
    for start, length in table_parts(c.docs.shape[0]):
        stop = start + length
        yield pa.table({"id": named.ids.slice(start, length), "cluster": pa.array(c.cluster[start:stop], pa.int64()),
                        "keep": pa.array(c.keep[start:stop], pa.bool_()),
                        "kept_id": named.ids.take(pa.array(kept_at[start:stop]))})


def whole_table(parts: Iterable[pa.Table]) -> pa.Table:
    """The parts of a table as one (its chunks the parts')."""
    return pa.concat_tables(list(parts))
