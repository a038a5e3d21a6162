"""What a run shows of its results, computed as its last stage (shown_of): the histogram of the
verified pairs' Jaccard, and the largest clusters with a few members each, how many verified
pairs lie inside each, and the Jaccard of each example member to its cluster's kept document.

report.html and the terminal summary render these arrays and nothing else: they are computed
where the pairs and clusters lie (on a cluster, by its tasks while it is up), so that a result
written or drawn after its cluster has gone gives the same files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

import numpy as np

from ..core.cluster import Clusters, largest_first, listed_members
from ..plots import verified_histogram
from .clusterparts import LARGEST_KNOWN, ClusterParts
from .pairs import VerifiedPairs
from .protocols import Executor

LARGEST_SHOWN = 5  # clusters, largest first
EXAMPLES_PER_CLUSTER = 3  # the kept document and up to two removed ones
MEMBERS_LISTED = 12  # ids named per cluster: its first kept document and the first others


@dataclass
class Shown:
    """What report.html and the terminal show of a run (host arrays).

    jaccard_counts: int64 (bins,), plots.verified_histogram of every verified pair's Jaccard.
    numbers: int64 (k,), the largest clusters (at most LARGEST_SHOWN), largest first, the
        smaller number first among equals; sizes: int64 (k,), their documents.
    members: the documents listed of them (cluster.listed_members: each one's first kept and
        first MEMBERS_LISTED documents), ascending by row.
    inside: int64 (k,), the verified pairs inside each; low, high: float64 (k,), their least
        and greatest Jaccard (inf and -inf where none).
    example_a, example_b: int64 (e,) rows, a < b: each shown cluster's kept document with each
        of its examples (examples_of); example_jaccard: float64 (e,), their Jaccard where they
        are a verified pair, else NaN.
    """

    jaccard_counts: np.ndarray
    numbers: np.ndarray
    sizes: np.ndarray
    members: Clusters
    inside: np.ndarray
    low: np.ndarray
    high: np.ndarray
    example_a: np.ndarray
    example_b: np.ndarray
    example_jaccard: np.ndarray

    def example_jaccards(self) -> dict[tuple[int, int], float]:
        """{(a, b): Jaccard} of the example pairs that are verified pairs."""
        return {(a, b): j for a, b, j in zip(self.example_a.tolist(), self.example_b.tolist(),
                                              self.example_jaccard.tolist()) if not math.isnan(j)}


def examples_of(members: np.ndarray, kept: np.ndarray) -> tuple[int, list[int]]:
    """A shown cluster's kept document and its examples: places in ``members`` (int64, its
    listed documents' places among the shown clusters' listed documents), the kept one first;
    kept: bool, Shown.members.keep."""
    keep_position = int(np.flatnonzero(kept[members])[0]) if kept[members].any() else 0
    others = [n for n in range(len(members)) if n != keep_position]
    return keep_position, others[: EXAMPLES_PER_CLUSTER - 1]


def example_pairs(members: np.ndarray, kept: np.ndarray, rows: np.ndarray) -> list[tuple[int, int]]:
    """The (row, row) pairs, smaller row first, of a shown cluster's kept document with each
    example (examples_of); rows: int64, Shown.members.docs."""
    keep_position, examples = examples_of(members, kept)
    kept_row = int(rows[members[keep_position]])
    return [(min(kept_row, int(rows[members[n]])), max(kept_row, int(rows[members[n]]))) for n in examples]


def pairs_histogram(first: np.ndarray, second: np.ndarray, jaccard: np.ndarray, threshold: float) -> np.ndarray:
    """Task (VerifiedPairs.map): plots.verified_histogram of some verified pairs' Jaccard."""
    return verified_histogram(jaccard, threshold)


def shown_of(pairs: VerifiedPairs, clustered: Union[Clusters, ClusterParts], executor: Executor,
             threshold: float) -> Shown:
    """The Shown of a run's verified ``pairs`` and ``clustered`` clusters, counted where they
    lie by the run's ``executor`` (on a cluster, by its tasks: the client gets a few numbers
    per part, not the pairs or the members)."""
    counts = np.sum(pairs.map(pairs_histogram, threshold), axis=0).astype(np.int64)
    empty = np.zeros(0, np.int64)
    if clustered.in_clusters == 0:
        none = Clusters(empty, empty, np.zeros(0, bool))
        return Shown(counts, empty, empty, none, empty, np.zeros(0), np.zeros(0), empty, empty, np.zeros(0))
    numbers, sizes, members = largest_clusters(clustered, executor, LARGEST_SHOWN, MEMBERS_LISTED)
    asked = [pair for number in numbers.tolist()
             for pair in example_pairs(np.flatnonzero(members.cluster == number), members.keep, members.docs)]
    asked_a = np.array([a for a, _ in asked], np.int64)
    asked_b = np.array([b for _, b in asked], np.int64)
    found = executor.pairs_inside(pairs, clustered, numbers, asked_a, asked_b)
    inside = np.sum([part[0] for part in found], axis=0).astype(np.int64)
    low = np.min([part[1] for part in found], axis=0).astype(np.float64)
    high = np.max([part[2] for part in found], axis=0).astype(np.float64)
    jaccard = np.fmax.reduce(np.stack([part[3] for part in found]), axis=0).astype(np.float64)
    return Shown(counts, numbers, sizes, members, inside, low, high, asked_a, asked_b, jaccard)


def largest_clusters(clustered: Union[Clusters, ClusterParts], executor: Executor, count: int,
                     listed: int) -> tuple[np.ndarray, np.ndarray, Clusters]:
    """The ``count`` largest clusters (at most clusterparts.LARGEST_KNOWN): their numbers,
    int64 (k,), largest first (the smaller number first among equals); their sizes, int64
    (k,); and the documents listed of them (cluster.listed_members: each one's first kept and
    first ``listed`` documents), held; read from the parts where they lie, by tasks."""
    assert count <= LARGEST_KNOWN, "a cluster's run learns of LARGEST_KNOWN clusters"
    if isinstance(clustered, ClusterParts):
        numbers = clustered.largest[:count]
        sizes, members = clustered.shown(numbers, listed, executor)
        return np.asarray(numbers, np.int64), sizes, members
    sizes = np.bincount(clustered.cluster)
    numbers = largest_first(np.arange(sizes.shape[0]), sizes, count)
    return numbers.astype(np.int64), sizes[numbers].astype(np.int64), listed_members(clustered, numbers, listed)
