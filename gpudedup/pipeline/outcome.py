"""The results of a run as the pipeline hands them to results/result.py (Outcome)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..core.cluster import Clusters
from .report import Report
from .heldclusters import Clustered, HeldClusters
from .kept import Kept
from .pairs import Checked, Copied, IdenticalCopies, Verified, VerifiedPairs
from .shown import Shown


@dataclass
class Outcome:
    """The results of a run, as host arrays over the document rows (0 .. n-1).

    pairs: the verified pairs (pairs.VerifiedPairs; pairparts.VerifiedParts on Dask), whose
        arrays ``pair_a``, ``pair_b`` (int64 (p,), a < b) and ``jaccard`` (float64 (p,), >=
        threshold) are read when first asked for where a cluster's run left them in its work
        directory.
    clustered: the clusters (documents in clusters of two or more): held (HeldClusters), or
        (a cluster's run) in parts of its work directory (pipeline/clusterparts.ClusterParts);
        either gives the counts (``count``, ``in_clusters``, ``removed_count``) and what a
        report shows of them, and ``clusters`` is them held (read from the parts when first
        asked for).
    documents: n, the documents' count (``keep`` is made of it and the clusters when asked for).
    report: the run's report (report.Report; docs/output-formats.md).
    checked: the verification stage's result (pairs.CheckedPairs; pairparts.CheckedParts on
        Dask), whose ``checked_jaccard`` is every pair verification checked (those the
        signature filter passed, and the identical copies), verified or not, for the report's
        histogram: its exact Jaccard where that reaches the threshold, else
        verify.BELOW_THRESHOLD.
    candidate_a, candidate_b: int64 (q,), a < b: every candidate pair (before the signature
        filter), for evaluation against exact ground truth; empty unless the run was asked to
        keep them (they can be many, and most runs do not need them).
    copies: the documents taken out of LSH as identical copies (pairs.IdenticalCopies; a run
        on Dask leaves them in parts of its work directory, copyparts.CopyParts, which ``read``
        reads); each is also
        the pair (first, member) of pair_a, pair_b with Jaccard 1.0.
    shown: what report.html and the terminal show of the run (pipeline/shown.py), computed by
        the run.

    An outcome holds no executor: what reads a cluster's parts after the run (writing the
    outputs, a notebook's questions) is given the executor to read them with, or reads them in
    this process.
    """

    pairs: "Verified"
    clustered: Clustered
    documents: int
    report: Report
    checked: Checked
    candidate_a: np.ndarray
    candidate_b: np.ndarray
    copies: Copied
    shown: Shown

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
        """float64 (c,): the checked pairs' every_jaccard (made when first asked for)."""
        return self.checked.every_jaccard(self.jaccard)

    @cached_property
    def clusters(self) -> Clusters:
        """The clusters, held (read from the work directory's parts when first asked for)."""
        return self.clustered.read()

    def read_now(self) -> None:
        """Hold the pairs, the clusters and the identical copies here from now on (a
        cluster's run: its work directory is about to go)."""
        self.pairs = VerifiedPairs(*self.pairs.arrays)
        self.clustered = HeldClusters(self.clusters)
        self.copies = IdenticalCopies(self.copies.read())

    @property
    def removed(self) -> np.ndarray:
        """int64 ascending, host: the rows removed as duplicates (the clusters' documents not
        kept)."""
        return self.clusters.docs[~self.clusters.keep]

    @cached_property
    def keep(self) -> np.ndarray:
        """bool (n,), host: False exactly for the removed duplicates (made when first asked for)."""
        return Kept.leaving_out(self.removed).mask(0, self.documents)
