"""The verified pairs read against the clusters' parts (pipeline/clusterparts.py), by the tasks
of a run on a cluster: each pair named by its documents' ranks and ids for the pairs table
(named_end: the pairs set on one document, then the other, each partition reading the part of
its rows), and the pairs inside the largest clusters counted for report.html
(pairs_inside_part, a task per range), so that the client holds neither the pairs nor the
members of those clusters.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pyarrow as pa

from ..core.cluster import Clusters, pairs_inside_of
from .clusterparts import ClusterParts, part_members
from .workdir import WorkDir


def named_end(pairs, end: str, clustered: ClusterParts, partition_info: Optional[dict] = None):
    """A partition of pairs set on their document ``end`` ("a" or "b": a range of rows, every
    one a document in clusters) with that document's rank and id (rank_<end>, id_<end>) from
    the range's part, the document itself left out: the pairs table's lookup."""
    assert partition_info is not None, "Dask names the partition"
    rows = pairs.index.to_numpy(np.int64)
    named = pairs.reset_index(drop=True)
    number = partition_info["number"]
    work = WorkDir.attach(clustered.work_at)
    part = clustered.read_table(number, ["docs", "rank", "id"], work)
    at = np.searchsorted(part["docs"].to_numpy(), rows)
    return named.assign(**{f"rank_{end}": part["rank"].to_numpy()[at],
                           f"id_{end}": part["id"].take(pa.array(at)).to_pandas()})


def in_id_order(pairs):
    """Named pairs (rank_a, id_a, rank_b, id_b, jaccard) with the first id the smaller: a
    pandas DataFrame of rank_a, rank_b, id_a, id_b, jaccard (the pairs table's order)."""
    import pandas as pd

    swap = pairs["rank_a"].to_numpy(np.int64) > pairs["rank_b"].to_numpy(np.int64)
    columns = {}
    for first, second in (("rank_a", "rank_b"), ("id_a", "id_b")):
        a, b = pairs[first].to_numpy(), pairs[second].to_numpy()
        columns[first], columns[second] = np.where(swap, b, a), np.where(swap, a, b)
    return pd.DataFrame({name: columns[name] for name in ("rank_a", "rank_b", "id_a", "id_b")}
                        | {"jaccard": pairs["jaccard"].to_numpy(np.float64)})


def pairs_inside_part(pairs, number: int, clustered: ClusterParts, numbers: np.ndarray, asked_a: np.ndarray,
                      asked_b: np.ndarray):
    """Task: cluster.pairs_inside of the clusters ``numbers`` (int64 (k,)) over a partition of
    verified pairs (a pandas DataFrame of b, jaccard) set on their first document by the
    clusters' ranges (partition ``number``: range ``number``, its part read for the clusters
    of those documents)."""
    first = pairs.index.to_numpy(np.int64)
    second, jaccard = pairs["b"].to_numpy(np.int64), pairs["jaccard"].to_numpy(np.float64)
    members = part_members(clustered, number, numbers) if first.shape[0] else Clusters.joined([])
    return pairs_inside_of(first, second, jaccard, members, numbers, asked_a, asked_b)

