"""What a run shows of its results, computed as its last stage (shown_of): the histogram of the
verified pairs' Jaccard, the clusters by size, the verified pairs just above the threshold, and
the largest clusters and a random sample of the others (drawn with the run's seed, so that a
report is reproducible) with a few members each, how many verified pairs lie inside each, and
the Jaccard of each example member to its cluster's kept document.

report.html and the terminal summary render these arrays and nothing else: they are computed
where the pairs and clusters lie (on a cluster, by its tasks while it is up), so that a result
written or drawn after its cluster has gone gives the same files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..core.cluster import Clusters
from ..core.copies import are_copies, first_copies
from .heldclusters import Clustered
from .pairs import Verified
from .protocols import Stages

LARGEST_SHOWN = 5  # clusters, largest first
SAMPLED_SHOWN = 5  # clusters drawn at random from the others
NEAR_SHOWN = 5  # verified pairs, the lowest Jaccard first
EXAMPLES_PER_CLUSTER = 3  # the kept document and up to two removed ones
MEMBERS_LISTED = 12  # ids named per cluster: its first kept document and the first others


@dataclass
class Sampled:
    """A random sample of a run's clusters (host arrays): numbers, int64 (s,), ascending;
    sizes, inside, low, high as Shown's of the largest clusters."""

    numbers: np.ndarray
    sizes: np.ndarray
    inside: np.ndarray
    low: np.ndarray
    high: np.ndarray

    @classmethod
    def none(cls) -> "Sampled":
        empty = np.zeros(0, np.int64)
        return cls(empty, empty, empty, np.zeros(0), np.zeros(0))


@dataclass
class Shown:
    """What report.html and the terminal show of a run (host arrays).

    jaccard_counts: int64 (bins,), verified_histogram of every verified pair's Jaccard.
    numbers: int64 (k,), the largest clusters (at most LARGEST_SHOWN), largest first, the
        smaller number first among equals; sizes: int64 (k,), their documents.
    members: the documents listed of the shown clusters, the largest and the sampled ones
        (cluster.listed_members: each one's first kept and first MEMBERS_LISTED documents),
        ascending by row.
    inside: int64 (k,), the verified pairs inside each; low, high: float64 (k,), their least
        and greatest Jaccard (inf and -inf where none).
    example_a, example_b: int64 (e,) rows, a < b: each shown cluster's kept document with each
        of its examples (examples_of); example_jaccard: float64 (e,), their Jaccard where they
        are a verified pair, else NaN.
    sampled: up to SAMPLED_SHOWN clusters other than the largest, drawn with the run's seed
        (sampled_numbers).
    size_values, size_clusters: int64 (m,), every cluster size that occurs, ascending, and how
        many clusters have it (the clusters by size).
    near_a, near_b: int64 (q,) rows, a < b, near_jaccard: float64 (q,): the NEAR_SHOWN verified
        pairs of the lowest Jaccard (those just above the threshold), the lowest first, by
        (jaccard, a, b).
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
    sampled: Sampled
    size_values: np.ndarray
    size_clusters: np.ndarray
    near_a: np.ndarray
    near_b: np.ndarray
    near_jaccard: np.ndarray

    def example_rows(self, cluster: int) -> tuple[np.ndarray, int, np.ndarray]:
        """Of shown cluster ``cluster``: its members' places in ``members`` (int64 ascending),
        the kept one's place among them, and the rows whose texts its block shows (int64: the
        kept document, then its examples: examples_of)."""
        members = np.flatnonzero(self.members.cluster == cluster)
        keep_position, examples = examples_of(members, self.members.keep)
        return members, keep_position, self.members.docs[members[[keep_position] + examples]]

    def rows_shown(self) -> np.ndarray:
        """int64, ascending: every row whose text report.html shows (each shown cluster's
        example_rows, and the pairs near the threshold)."""
        clusters = np.concatenate([self.numbers, self.sampled.numbers]).tolist()
        return np.unique(np.concatenate([self.near_a, self.near_b, np.zeros(0, np.int64)]
                                        + [self.example_rows(cluster)[2] for cluster in clusters]))

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


def copy_firsts(first: np.ndarray, second: np.ndarray, jaccard: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Task (the verified pairs' map): int64, for each of ``rows``, the first document of its
    group of identical copies where these pairs list it as a copy (a pair of Jaccard 1.0,
    which only identical sets have), else -1 (copies.first_copies). A row's first copy is
    listed in one part only; the largest over the parts is it (or -1)."""
    copy = are_copies(jaccard)
    return first_copies(first[copy], second[copy], rows, none=-1)


def histogram_and_lowest(first: np.ndarray, second: np.ndarray, jaccard: np.ndarray, threshold: float,
                         count: int) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Task (the verified pairs' map): verified_histogram of some verified pairs' Jaccard, and
    their lowest_pairs, from one read of them."""
    return verified_histogram(jaccard, threshold), lowest_pairs(first, second, jaccard, count)


def lowest_pairs(first: np.ndarray, second: np.ndarray, jaccard: np.ndarray,
                 count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``count`` pairs of the lowest Jaccard, the lowest first (ties by first, then second
    row). Of the lowest of each part, the lowest are those of them all."""
    mine = np.arange(jaccard.shape[0])
    if jaccard.shape[0] > count:  # (those at most the count-th lowest Jaccard, ties too: no sort of them all)
        mine = np.flatnonzero(jaccard <= np.partition(jaccard, count - 1)[count - 1])
    order = mine[np.lexsort((second[mine], first[mine], jaccard[mine]))[:count]]
    return (np.asarray(first[order], np.int64), np.asarray(second[order], np.int64),
            np.asarray(jaccard[order], np.float64))


def sampled_numbers(count: int, shown: np.ndarray, seed: int, sampled: int = SAMPLED_SHOWN) -> np.ndarray:
    """int64, ascending: up to ``sampled`` of the clusters 0 .. count-1 other than ``shown``,
    drawn at random by ``seed`` (the run's: the same clusters in every run of the same
    parameters, whichever way it ran)."""
    drawn = np.random.default_rng(seed).choice(count, size=min(count, sampled + shown.shape[0]), replace=False)
    return np.sort(drawn[~np.isin(drawn, shown)][:sampled]).astype(np.int64)


def shown_of(pairs: Verified, clustered: Clustered, stages: Stages,
             threshold: float, seed: int) -> Shown:
    """The Shown of a run's verified ``pairs`` and ``clustered`` clusters, counted where they
    lie by the run's ``stages`` (on a cluster, by its tasks: the client gets a few numbers
    per part, not the pairs or the members); seed: the run's, which draws the sampled
    clusters."""
    executor = stages.executor
    found = pairs.map(executor, histogram_and_lowest, threshold, NEAR_SHOWN)
    counts = np.sum([part[0] for part in found], axis=0).astype(np.int64)
    empty = np.zeros(0, np.int64)
    if clustered.in_clusters == 0:
        return Shown(counts, empty, empty, Clusters.joined([]), empty, np.zeros(0), np.zeros(0), empty, empty,
                     np.zeros(0), Sampled.none(), empty, empty, empty, empty, np.zeros(0))
    lowest = [part[1] for part in found]
    near_a, near_b, near_jaccard = lowest_pairs(np.concatenate([part[0] for part in lowest]),
                                                np.concatenate([part[1] for part in lowest]),
                                                np.concatenate([part[2] for part in lowest]), NEAR_SHOWN)
    size_values, size_clusters = clustered.by_size()
    largest = clustered.largest_numbers(LARGEST_SHOWN)
    sampled = sampled_numbers(clustered.count, largest, seed)
    numbers = np.concatenate([largest, sampled])
    sizes, members = clustered.shown(numbers, MEMBERS_LISTED, executor)
    asked = [pair for number in numbers.tolist()
             for pair in example_pairs(np.flatnonzero(members.cluster == number), members.keep, members.docs)]
    asked_a = np.array([a for a, _ in asked], np.int64)
    asked_b = np.array([b for _, b in asked], np.int64)
    # A copy pairs as its group's first document does (the pairs list the copies as a star
    # around it): an example pair is looked up as the pair of their first copies, and is one
    # of Jaccard 1 where the two are copies of one document (inspection's rule, all_pairs').
    rows = np.concatenate([asked_a, asked_b])
    listed = np.max([np.full(rows.shape[0], -1, np.int64)] + pairs.map(executor, copy_firsts, rows), axis=0)
    firsts = np.where(listed >= 0, listed, rows)
    first_a, first_b = firsts[:asked_a.shape[0]], firsts[asked_a.shape[0]:]
    found = stages.pairs_inside(pairs, clustered, numbers, np.minimum(first_a, first_b), np.maximum(first_a, first_b))
    inside = np.sum([part[0] for part in found], axis=0).astype(np.int64)
    low = np.min([part[1] for part in found], axis=0).astype(np.float64)
    high = np.max([part[2] for part in found], axis=0).astype(np.float64)
    jaccard = np.fmax.reduce(np.stack([part[3] for part in found]), axis=0).astype(np.float64)
    jaccard[first_a == first_b] = 1.0
    k = largest.shape[0]
    return Shown(counts, largest, sizes[:k], members, inside[:k], low[:k], high[:k], asked_a, asked_b, jaccard,
                 Sampled(sampled, sizes[k:], inside[k:], low[k:], high[k:]), size_values, size_clusters,
                 near_a, near_b, near_jaccard)


def verified_edges(threshold: float, bin_width: float = 0.02) -> np.ndarray:
    """Histogram bin edges of the verified pairs: from ``threshold`` to 1, about ``bin_width``
    wide; [1, 1 + bin_width] for threshold 1 (one bin holding J = 1)."""
    if threshold >= 1.0:
        return np.array([1.0, 1.0 + bin_width])
    return np.linspace(threshold, 1.0, max(1, int(round((1.0 - threshold) / bin_width))) + 1)


# A Jaccard on an edge of verified_edges (21/25 = 0.84, where linspace gives 0.8400000000000001)
# is a fraction that the floats of the value and the edge may each miss in their last digits;
# a value within this share of a bin below an edge is taken as on it: two Jaccards of sets of
# under a billion shingles each that differ lie further apart than this.
EDGE_TOLERANCE = 1e-9


def verified_histogram(jaccard: np.ndarray, threshold: float, bin_width: float = 0.02) -> np.ndarray:
    """int64: how many of the values ``jaccard`` (float (c,)) fall in each bin of
    verified_edges(threshold, bin_width) (a value on an edge in the bin that starts there, the
    last bin closed, values below the threshold in none): a sum over parts of the pairs is the
    histogram of them all."""
    jaccard = np.asarray(jaccard, dtype=np.float64)
    values = np.clip(jaccard[jaccard >= threshold], 0.0, 1.0)
    bins = verified_edges(threshold, bin_width).shape[0] - 1
    width = 1.0 - threshold if threshold < 1.0 else 1.0
    places = np.floor((values - min(threshold, 1.0)) / width * bins + EDGE_TOLERANCE).astype(np.int64)
    return np.bincount(np.clip(places, 0, bins - 1), minlength=bins).astype(np.int64)
