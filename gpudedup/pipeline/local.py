"""The stages of a run in this process, over the whole corpus's held arrays (protocols.Stages):
an in-memory run's, and a run against an index (index/store.py). Its tasks run here, in order
(protocols.LocalExecutor)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from ..backends import Backend, host_threads
from ..core.cluster import KeepPolicy, clusters_of_roots, component_roots, pairs_inside_of
from ..core.copies import identical_copies, same_signature_rows
from ..core.lsh import candidate_pairs
from ..stages import Progress
from ..core.verify import plausible
from ..threads import map_parallel
from .heldclusters import Clustered, HeldClusters
from .kept import Kept
from .pairs import CheckedPairs, IdenticalCopies, LikelyPairs, Verified, checked_in_memory

if TYPE_CHECKING:
    from .protocols import Executor, HeldStore, Result


class HeldStages:
    """The stages over held arrays, in this process (protocols.Stages): the store's arrays
    gathered whole (the candidate pairs, the identical copies, the components), each result
    held. executor: the run's (this process's)."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor

    def likely_pairs(self, store: HeldStore, copies: IdenticalCopies, window: int, threshold: float, backend: Backend,
                     keep_every: bool = False) -> "LikelyPairs":
        # The copies' group's first document stands for them in LSH.
        in_lsh = Kept.leaving_out(np.unique(store.active_positions(copies.held.member))).mask(0, store.active.shape[0])
        # On the host the bands' sorts run on the backend's threads; a device sorts one at a time.
        threads = host_threads(backend)
        first, second = candidate_pairs(store.band_keys(in_lsh), store.active[in_lsh], window, backend.xp,
                                        lambda band_codes, bands: map_parallel(band_codes, list(bands), threads))
        first, second = backend.to_host(first), backend.to_host(second)
        if store.pinned:  # two documents kept before were checked when the second one came
            fresh = second >= store.pinned
            first, second = first[fresh], second[fresh]
        likely = plausible(store.signatures, store.active_positions(first), store.active_positions(second),
                           threshold)
        empty = np.zeros(0, np.int64)
        return LikelyPairs(first[likely], second[likely], first.shape[0],
                           first if keep_every else empty, second if keep_every else empty)

    def copies(self, store: HeldStore, progress: Progress) -> IdenticalCopies:
        return IdenticalCopies(identical_copies(
            same_signature_rows(store.signatures, store.row_hashes()), store.active, store.lengths,
            store.copy_batch_cost, lambda docs: store.set_reader("copies", docs, self.executor), progress))

    def kept(self, store: HeldStore, stage: str, compute: Callable[[], Result]) -> Result:
        return compute()  # (a run in this process keeps no stage)

    def checked_pairs(self, store: HeldStore, likely: "LikelyPairs", copies: IdenticalCopies, threshold: float,
                      progress: Progress) -> "CheckedPairs":
        return checked_in_memory(likely, copies.held, lambda first, second: store.exact_jaccard(
            "pairs", first, second, threshold, self.executor, progress))

    def pairs_inside(self, pairs: Verified, clustered: Clustered, numbers: np.ndarray,
                     asked_a: np.ndarray, asked_b: np.ndarray) -> list:
        held = clustered.read()  # (this runner's clusters are held: HeldClusters)
        return pairs.map(self.executor, pairs_inside_of, held.members(numbers), numbers, asked_a, asked_b)

    def clusters(self, store: HeldStore, verified: Verified, policy: KeepPolicy) -> Clustered:
        first, second, _ = verified.arrays
        docs, root = component_roots(first, second, store.documents)
        return HeldClusters(clusters_of_roots(docs, root, store.lengths, policy, store.pinned))
