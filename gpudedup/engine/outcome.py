"""The results of a run as the engine hands them to result.py (Outcome)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Optional, Union

import numpy as np

from ..core.cluster import Clusters, largest_first, listed_members
from ..core.copies import Copies
from ..report import Report
from .kept import Kept


from .clusterparts import LARGEST_KNOWN, ClusterParts
from .local import LocalExecutor
from .pairs import CheckedPairs, VerifiedPairs

if TYPE_CHECKING:
    from .clusterparts import ClusterParts
    from .protocols import Executor


@dataclass
class Outcome:
    """The results of a run, as host arrays over the document rows (0 .. n-1).

    pairs: the verified pairs (VerifiedPairs), whose arrays ``pair_a``, ``pair_b`` (int64
        (p,), a < b) and ``jaccard`` (float64 (p,), >= threshold) are read when first asked for
        where a cluster's run left them in its work directory.
    clustered: the clusters (documents in clusters of two or more): held as cluster.Clusters,
        or (a cluster's run) in parts of its work directory (engine/clusterparts.ClusterParts);
        either gives the counts (``count``, ``in_clusters``, ``removed_count``), and
        ``clusters`` is them held (read from the parts when first asked for).
    documents: n, the documents' count (``keep`` is made of it and the clusters when asked for).
    report: the run's report (report.Report; docs/output-formats.md).
    checked: the verification stage's result (CheckedPairs), whose ``checked_jaccard`` is
        every pair verification checked (those the signature filter passed, and the identical
        copies), verified or not, for the report's histogram: its exact Jaccard where that
        reaches the threshold, else verify.BELOW_THRESHOLD.
    candidate_a, candidate_b: int64 (q,), a < b: every candidate pair (before the signature
        filter), for evaluation against exact ground truth; empty unless the run was asked to
        keep them (they can be many, and most runs do not need them).
    copies: the documents taken out of LSH as identical copies (copies.py; a cluster's run
        leaves them in parts of its work directory: Copies.held reads them); each is also the
        pair (first, member) of pair_a, pair_b with Jaccard 1.0.
    executor: the run's, whose tasks read what a cluster's run left in parts (while it is
        connected).
    """

    pairs: "VerifiedPairs"
    clustered: Union[Clusters, "ClusterParts"]
    documents: int
    report: Report
    checked: "CheckedPairs"
    candidate_a: np.ndarray
    candidate_b: np.ndarray
    copies: Copies
    executor: Optional["Executor"] = None

    @property
    def pair_a(self) -> np.ndarray:
        return self.pairs.arrays[0]

    @property
    def pair_b(self) -> np.ndarray:
        return self.pairs.arrays[1]

    @property
    def jaccard(self) -> np.ndarray:
        return self.pairs.arrays[2]

    @cached_property
    def checked_jaccard(self) -> np.ndarray:
        """float64 (c,): CheckedPairs.every_jaccard (made when first asked for)."""
        return self.checked.every_jaccard(self.jaccard)

    @cached_property
    def clusters(self) -> Clusters:
        """The clusters, held (read from the work directory's parts when first asked for)."""
        return self.clustered if isinstance(self.clustered, Clusters) else self.clustered.read()

    def read_now(self) -> None:
        """Hold the pairs, the clusters and the identical copies here from now on (a
        cluster's run: its work directory is about to go)."""
        self.pairs.read_now()
        self.clustered = self.clusters
        self.copies = self.copies.held()

    def largest_clusters(self, count: int, listed: int) -> tuple[np.ndarray, np.ndarray, Clusters]:
        """The ``count`` largest clusters (at most clusterparts.LARGEST_KNOWN) as report.html
        shows them: their numbers, int64 (k,), largest first (the smaller number first among
        equals); their sizes, int64 (k,); and the documents it lists of them
        (cluster.listed_members: each one's first kept and first ``listed`` documents), held;
        read from the parts where they lie, by tasks, so that the client gets those alone."""
        assert count <= LARGEST_KNOWN, "a cluster's run learns of LARGEST_KNOWN clusters"
        if isinstance(self.clustered, ClusterParts):
            numbers = self.clustered.largest[:count]
            return (numbers, *self.clustered.shown(numbers, listed, self.executor))
        c = self.clusters
        sizes = np.bincount(c.cluster)
        numbers = largest_first(np.arange(sizes.shape[0]), sizes, count)
        return numbers, sizes[numbers].astype(np.int64), listed_members(c, numbers, listed)

    def pairs_inside(self, numbers: np.ndarray, asked_a: np.ndarray, asked_b: np.ndarray) -> list:
        """cluster.pairs_inside of the clusters ``numbers`` (int64 (k,); a few) over the
        verified pairs, a result per place the pairs lie (the caller sums them, takes their
        least and greatest): by the run's executor while it is connected (Executor.pairs_inside),
        else here."""
        connected = self.executor is not None and self.executor.connected()
        executor = self.executor if connected and self.executor is not None else LocalExecutor()
        return executor.pairs_inside(self.pairs, self.clustered, numbers, asked_a, asked_b)

    @property
    def removed(self) -> np.ndarray:
        """int64 ascending, host: the rows removed as duplicates (the clusters' documents not
        kept)."""
        return self.clusters.docs[~self.clusters.keep]

    @cached_property
    def keep(self) -> np.ndarray:
        """bool (n,), host: False exactly for the removed duplicates (made when first asked for)."""
        return Kept.leaving_out(self.removed).mask(0, self.documents)
