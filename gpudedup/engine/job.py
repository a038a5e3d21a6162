"""The deduplication job: the stage sequence, written once.

    signatures -> identical copies -> candidates -> verification -> clusters -> report

Two things vary between runs, and each behind one small interface:

- the **store** (``Store``): where the run's arrays live between stages and how a stage's
  finished result is kept: in memory (engine/memory.py, host or device arrays of a corpus read
  at once) or in a work directory (engine/disk.py, memory-mapped spill files of one input file
  at a time, stages kept for --resume);
- the **executor** (``Executor``): who runs the per-shard and per-partition tasks: this
  process (``LocalExecutor``) or a Dask cluster (engine/dask.py).

Every stage works on row numbers 0 .. n-1 of the documents; ids are attached where results
leave the engine (result.py). Reading (io/) and writing (result.py, io/writer.py) are outside.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol, Sequence, Union

import numpy as np

from ..backends import Backend, host_threads
from ..core.cluster import Clusters, KeepPolicy, clusters_of_roots, component_roots, largest_first, listed_members
from ..core.copies import Copies, identical_copies, same_signature_rows
from ..core.hashing import Permutations, draw_permutations
from ..core.lsh import Banding, candidate_pairs
from ..params import DedupParams
from ..report import Balance, InputSummary, Report, Results
from ..core.shingling import ShingleSpec
from ..stages import Progress, StageLog
from ..core.verify import BELOW_THRESHOLD, plausible
from ..version import __version__
from ..threads import map_parallel
from .kept import Kept
from .pairparts import COPIES, LIKELY, VERIFIED
from .signatures import batch_bytes

if TYPE_CHECKING:
    from .clusterparts import ClusterParts
    from .pairparts import PairParts


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
        from .clusterparts import LARGEST_KNOWN, ClusterParts

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


class Store(Protocol):
    """Where a run's arrays live between stages (engine/memory.py, engine/disk.py).

    After ``sign``: ``documents`` rows; ``active``, the m rows with at least one shingle (the
    only ones that can pair), ascending; ``lengths``, code points per row (n); ``signatures``,
    ``signatures[positions]`` -> uint32 (k, K) host for positions into ``active``. ``active``
    and ``lengths`` are int64 host arrays, or (a work directory's) objects that gather like
    them, ``active[positions]``, ``lengths[rows]`` and ``.shape``, holding nothing per
    document: the stages index them and never take them whole.

    ``pinned``: the leading rows 0 .. pinned-1 are documents kept before (a persistent index's,
    index/store.py): they are never removed, a cluster holding one removes its other rows, and
    pairs of two of them are not sought (0 for every other store).
    """

    documents: int
    pinned: int
    active: Any  # int64 (m,), or what gathers like it (above)
    lengths: Any  # int64 (n,), or what gathers like it
    signatures: Any
    copy_batch_cost: int  # how much text copies.identical_copies checks per call
    work_dir: Optional[str]  # where the stages are kept (named in the report); None: nowhere

    def sign(self, spec: ShingleSpec, banding: Banding, permutations: Permutations, executor: "Executor",
             log: StageLog, progress: Progress) -> None:
        """The signature stage: signatures and band keys of every document not yet signed."""

    def active_positions(self, rows: np.ndarray) -> np.ndarray:
        """int64: the positions in ``active`` of ``rows`` (int64, each an active row)."""

    def row_hashes(self) -> Optional[np.ndarray]:
        """uint64 (m,) host: copies.band_key_row_hash of the active documents' band keys, made
        when they were signed (None: copies.same_signature_rows hashes the signature rows)."""

    def band_keys(self, in_lsh: np.ndarray) -> Any:
        """The band keys of the active documents where in_lsh (bool (m,)): ``keys[:, band]``
        gives uint64 (m',) on the backend's side. The store may drop its own reference."""

    def drop_signatures(self) -> None:
        """The signature filter is done: the signatures are not read again."""

    def exact_jaccard(self, name: str, first: np.ndarray, second: np.ndarray, threshold: float,
                      executor: "Executor", progress: Progress) -> np.ndarray:
        """float64 (p,), host: the exact Jaccard of the row pairs (first[i], second[i]) that reach
        ``threshold``, verify.BELOW_THRESHOLD for the others (verify.pair_jaccard_at_least);
        name: the stage asking ("pairs"), for what the store keeps of the work."""

    def set_reader(self, name: str, docs: np.ndarray, executor: "Executor") -> Callable[[np.ndarray], Any]:
        """For a stage that reads the shingle sets of rows ``docs`` (int64, ascending) a part at
        a time: a function of a part (int64, ascending, rows of docs) giving their sets as one
        binary CSR matrix, host (verify.document_sets). The store shingles each part when asked
        (in memory), or every document of docs once, now (a work directory spills them); name:
        the stage asking ("copies"), for what the store keeps of the work."""

    def cached(self, stage: str, compute: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """The arrays of a finished stage: computed now, or as an earlier run kept them."""

    def pair_parts(self, kind: str, count: int, sizes: Optional[np.ndarray] = None) -> "PairParts":
        """The pairs a cluster's tasks kept in ``count`` parts of the work directory
        (engine/pairparts.PairParts; kind "likely" or "verified"; sizes: int64 (count,), the
        pairs in each, where known). Only a work directory's store has any."""

    def input_summary(self, empty_documents: int) -> InputSummary:
        """The report's "input" section."""

    def array_executor(self, executor: "Executor") -> "Executor":
        """Who runs the steps over the whole corpus's arrays (the identical-copies grouping,
        the candidate pairs, the signature filter): ``executor`` where its tasks can read the
        store's arrays (a work directory's shards), else this process (LocalExecutor)."""


class Executor(Protocol):
    """Who runs the per-shard and per-partition tasks of a store's stages. in_process: tasks
    run in this process (they may get its backend, log and progress rather than names)."""

    in_process: bool

    def map(self, task: Callable[..., Any], arguments: Sequence[tuple], stage: str) -> list:
        """[task(*a) for a in arguments], each on its own; stage names the work for errors."""

    def connected(self) -> bool:
        """Whether tasks can still be run (a cluster's client may be closed after its run)."""

    def likely_pairs(self, store: Store, copies: Copies, window: int, threshold: float, backend: Backend,
                     keep_every: bool = False) -> "LikelyPairs":
        """The LSH candidate pairs (lsh.candidate_pairs) of the active documents but the
        members of the identical ``copies`` (their group's first document stands for them)
        that pass the signature filter (verify.plausible), leaving out the pairs of two pinned
        rows (Store.pinned); keep_every: keep every candidate pair too (evaluation)."""

    def copies(self, store: Store, executor: "Executor", progress: Progress) -> Copies:
        """The identical copies among the active documents (copies.py): their groups by
        copies.same_signature_rows of the signatures (store.row_hashes proposing them), each
        checked exactly (copies.identical_copies); held, or (a cluster's) kept in parts of the
        store's work directory (engine/copyparts.py). executor: the run's, whose tasks spill
        the shingle sets a store reads from its work directory (Store.set_reader)."""

    def checked_pairs(self, store: Store, likely: "LikelyPairs", copies: Copies, threshold: float,
                      exact: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> "CheckedPairs":
        """The verification stage: the exact Jaccard of the ``likely`` pairs (exact(first,
        second): Store.exact_jaccard's), the identical copies joined to them (checked_in_memory);
        on a cluster, likely pairs kept in parts are checked by tasks into parts."""

    def colliding_rows(self, task: Callable[..., Any], arguments: Sequence[tuple], stage: str) -> np.ndarray:
        """The rows whose hash another row shares (int64, ascending), of the rows that the
        tasks ``task(*a)`` give as pandas DataFrames (hash uint64, row int64, rows distinct):
        all of them in this process; on a cluster, a shuffle on the hash, so that no process
        holds a hash per row."""

    def clusters(self, store: Store, verified: "VerifiedPairs", policy: KeepPolicy) -> Union[Clusters, "ClusterParts"]:
        """The clusters of the ``verified`` pairs (where they lie: held, or a cluster's parts)
        and the documents each keeps by ``policy`` (cluster.clusters_of_roots, with
        store.lengths and store.pinned): held, or (a cluster's) kept in parts of the store's
        work directory (engine/clusterparts.py), of which the client holds counts."""


    def pairs_inside(self, pairs: "VerifiedPairs", clustered: Union[Clusters, "ClusterParts"], numbers: np.ndarray,
                     asked_a: np.ndarray, asked_b: np.ndarray) -> list:
        """Outcome.pairs_inside: cluster.pairs_inside of the clusters ``numbers`` over the
        ``pairs``, a result per place they lie; on a cluster, with the clusters in parts, the
        pairs are set on their first document by the clusters' ranges so that no process holds
        every member of those clusters."""


class LocalExecutor:
    """Runs every task in this process, in order."""

    in_process = True

    def map(self, task: Callable[..., Any], arguments: Sequence[tuple], stage: str) -> list:
        return [task(*a) for a in arguments]

    def connected(self) -> bool:
        return True

    def likely_pairs(self, store: Store, copies: Copies, window: int, threshold: float, backend: Backend,
                     keep_every: bool = False) -> "LikelyPairs":
        out_of_lsh = held_out_of_lsh(store, copies)
        in_lsh = Kept.leaving_out(out_of_lsh).mask(0, store.active.shape[0])
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

    def copies(self, store: Store, executor: "Executor", progress: Progress) -> Copies:
        return identical_copies(same_signature_rows(store.signatures, store.row_hashes()), store.active, store.lengths,
                                store.copy_batch_cost, lambda docs: store.set_reader("copies", docs, executor),
                                progress)

    def checked_pairs(self, store: Store, likely: "LikelyPairs", copies: Copies, threshold: float,
                      exact: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> "CheckedPairs":
        return checked_in_memory(store, likely, copies, exact)

    def colliding_rows(self, task: Callable[..., Any], arguments: Sequence[tuple], stage: str) -> np.ndarray:
        frames = [task(*a) for a in arguments]
        if not frames:
            return np.zeros(0, np.int64)
        return rows_sharing_hash(np.concatenate([f["hash"].to_numpy(np.uint64) for f in frames]),
                                 np.concatenate([f["row"].to_numpy(np.int64) for f in frames]))

    def pairs_inside(self, pairs: "VerifiedPairs", clustered: Union[Clusters, "ClusterParts"], numbers: np.ndarray,
                     asked_a: np.ndarray, asked_b: np.ndarray) -> list:
        from .clusterparts import pairs_inside_of

        members = clustered if isinstance(clustered, Clusters) else clustered.members(numbers)
        mine = np.isin(members.cluster, numbers)
        members = Clusters(members.docs[mine], members.cluster[mine], members.keep[mine])
        return pairs.map(pairs_inside_of, members, numbers, asked_a, asked_b)

    def clusters(self, store: Store, verified: "VerifiedPairs", policy: KeepPolicy) -> Union[Clusters, "ClusterParts"]:
        first, second, _ = verified.arrays
        docs, root = component_roots(first, second, store.documents)
        return clusters_of_roots(docs, root, store.lengths, policy, store.pinned)


@dataclass
class LikelyPairs:
    """The candidate stage's result: the LSH candidate pairs that pass the signature filter.

    first, second: int64 (q,) rows, host, first < second, ascending by (first, second).
    candidates: how many distinct candidate pairs LSH found (the filter's drops among them).
    every_first, every_second: int64 (c,) rows, host: every candidate pair, ascending; empty
        unless asked for (Executor.likely_pairs' keep_every).
    parts: 0, or (a cluster's run) first and second are empty and the pairs lie in as many
        parts of the work directory (engine/pairparts.py), where tasks read them.
    """

    first: np.ndarray
    second: np.ndarray
    candidates: int
    every_first: np.ndarray
    every_second: np.ndarray
    parts: int = 0

    def as_arrays(self) -> dict[str, np.ndarray]:
        """The arrays a store keeps of the stage (Store.cached)."""
        return {"first": self.first, "second": self.second, "candidates": np.array([self.candidates], np.int64),
                "every_first": self.every_first, "every_second": self.every_second,
                "parts": np.array([self.parts], np.int64)}

    @classmethod
    def of_arrays(cls, arrays: dict[str, np.ndarray]) -> "LikelyPairs":
        return cls(arrays["first"], arrays["second"], int(arrays["candidates"][0]), arrays["every_first"],
                   arrays["every_second"], int(arrays["parts"][0]))

    def in_memory(self, store: Store) -> "LikelyPairs":
        """These pairs with first and second here (read from their parts, if they are in any)."""
        if not self.parts:
            return self
        pairs = store.pair_parts(LIKELY, self.parts).read()
        return LikelyPairs(pairs["first"], pairs["second"], self.candidates, self.every_first, self.every_second)


@dataclass
class CheckedPairs:
    """The verification stage's result.

    first, second: int64 (c,) rows, host, first < second, ascending by (first, second); jaccard:
        float64 (c,), each one's exact Jaccard where it reaches the threshold, else
        verify.BELOW_THRESHOLD: every pair checked exactly, the identical copies (Jaccard 1.0)
        merged in. Where parts > 0 (a cluster's run), only the copies held (Copies): the pairs
        LSH found that reach the threshold lie in as many parts of the work directory
        (engine/pairparts.py), and ``rejected`` counts those that did not.
    candidates: how many distinct candidate pairs LSH found; checked: how many of them were
        checked exactly (those the signature filter passed).
    part_sizes: int64 (parts,), the verified pairs in each part (none: not in parts).
    copy_sizes: int64 (c,), the identical copies in each of their parts where they lie in
        parts too (engine/copyparts.py; none: held, or none).
    """

    first: np.ndarray
    second: np.ndarray
    jaccard: np.ndarray
    candidates: int
    checked: int
    rejected: int = 0
    part_sizes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    copy_sizes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def parts(self) -> int:
        return int(self.part_sizes.shape[0])

    def as_arrays(self) -> dict[str, np.ndarray]:
        return {"first": self.first, "second": self.second, "jaccard": self.jaccard, "part_sizes": self.part_sizes,
                "copy_sizes": self.copy_sizes,
                "counts": np.array([self.candidates, self.checked, self.rejected], np.int64)}

    @classmethod
    def of_arrays(cls, arrays: dict[str, np.ndarray]) -> "CheckedPairs":
        candidates, checked, rejected = (int(count) for count in arrays["counts"])
        return cls(arrays["first"], arrays["second"], arrays["jaccard"], candidates, checked, rejected,
                   arrays["part_sizes"], arrays["copy_sizes"])

    def verified(self, store: Store, threshold: float, executor: "Executor") -> "VerifiedPairs":
        """The pairs that reach ``threshold`` (those in parts left where they are, for the
        run's ``executor`` to read: verification's parts, then the copies' parts)."""
        if not self.parts:
            verified = self.jaccard >= threshold
            return VerifiedPairs(self.first[verified], self.second[verified], self.jaccard[verified])
        parts = store.pair_parts(VERIFIED, self.parts, self.part_sizes)
        if self.copy_sizes.shape[0]:
            parts = parts.joined(store.pair_parts(COPIES, self.copy_sizes.shape[0], self.copy_sizes))
        return VerifiedPairs(self.first, self.second, self.jaccard, parts, executor)

    def every_jaccard(self, verified_jaccard: np.ndarray) -> np.ndarray:
        """float64 (c,): the Jaccard of every pair checked (Outcome.checked_jaccard) given the
        verified ones' (verified's); in a run of parts, in another order than in one process."""
        if not self.parts:
            return self.jaccard
        return np.concatenate([verified_jaccard, np.full(self.rejected, BELOW_THRESHOLD, np.float64)])


def rows_sharing_hash(hashes: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """int64 ascending: the rows (int64 (k,), distinct) whose hash (uint64 (k,)) another row
    has too (Executor.colliding_rows)."""
    order = np.argsort(hashes, kind="stable")
    sorted_hashes = hashes[order]
    same = sorted_hashes[1:] == sorted_hashes[:-1]
    shared = np.zeros(hashes.shape[0], dtype=bool)
    shared[1:] |= same
    shared[:-1] |= same
    return np.sort(rows[order[shared]])


def run_job(store: Store, params: DedupParams, backend: Backend, executor: Optional[Executor] = None,
            progress: Optional[Progress] = None, log: Optional[StageLog] = None,
            keep_candidates: bool = False) -> Outcome:
    """Deduplicate the documents of ``store``: the stage sequence of the module docstring.

    log may already hold stages (reading) to report with these; keep_candidates: return every
    candidate pair on the outcome (evaluate.py).
    """
    executor = executor or LocalExecutor()
    progress = progress or Progress()
    log = log or StageLog()
    spec = params.shingle_spec()
    banding = params.banding()
    permutations = draw_permutations(banding.bands * banding.rows, params.seed)

    store.sign(spec, banding, permutations, executor, log, progress)
    active = store.active

    def exact(name: str, shown: Progress) -> Callable[..., np.ndarray]:
        return lambda first, second: store.exact_jaccard(name, first, second, params.threshold, executor, shown)

    over_arrays = store.array_executor(executor)
    with log.stage("copies"):
        copies = copies_of_arrays(store, store.cached("copies", lambda: copies_arrays(
            over_arrays.copies(store, executor, progress))))
        if over_arrays.in_process:  # (copies a cluster's run kept in parts, resumed in one process)
            copies = copies.held()

    progress.start("Finding candidate pairs", banding.bands)
    with log.stage("candidates"):  # the candidate pairs, and the signature filter of them
        # Confirmed copies stay out of the buckets: their group's first document stands for them.
        likely = LikelyPairs.of_arrays(store.cached("candidates", lambda: over_arrays.likely_pairs(
            store, copies, params.bucket_window, params.threshold, backend, keep_candidates).as_arrays()))
        store.drop_signatures()  # the largest thing left from the signature pass
    progress.advance(banding.bands)

    with log.stage("verify"):
        checked = CheckedPairs.of_arrays(store.cached("pairs", lambda: over_arrays.checked_pairs(
            store, likely, copies, params.threshold, exact("pairs", progress)).as_arrays()))
        candidate_a, candidate_b = likely.every_first, likely.every_second
        verified = checked.verified(store, params.threshold, executor)
        if keep_candidates:
            # The copies join the candidates LSH found (they were never in its buckets).
            candidate_a, candidate_b, _ = merge_pairs((candidate_a, candidate_b, candidate_a),
                                                      (copies.first, copies.member, copies.first))

    clusters = cluster_verified(store, verified, params, log, progress, over_arrays)
    backend.release_memory()  # the next run (an evaluation grid, a notebook) starts lean
    report = build_report(store.input_summary(store.documents - active.shape[0]), params, banding, backend, log,
                          candidates=checked.candidates, checked=checked.checked, verified=verified.count,
                          clusters=clusters, copies=copies, work_dir=store.work_dir)
    return Outcome(verified, clusters, store.documents, report, checked, candidate_a, candidate_b, copies, executor)


def copies_arrays(copies: Copies) -> dict[str, np.ndarray]:
    """The arrays a store keeps of the copies stage (Store.cached): the copies held, or the
    sizes of their parts (sizes: none where held)."""
    return {"first": copies.first, "member": copies.member, "jaccard": copies.jaccard, "sizes": copies.part_sizes}


def held_out_of_lsh(store: Store, copies: Copies) -> np.ndarray:
    """int64 ascending: the positions in store.active of the members of the copies held here
    (their group's first document stands for them in LSH); none for copies kept in parts,
    whose places a cluster's tasks read (copyparts.range_places)."""
    if copies.parts is not None:
        return np.zeros(0, np.int64)
    return np.unique(store.active_positions(copies.member))


def copies_of_arrays(store: Store, arrays: dict[str, np.ndarray]) -> Copies:
    """The copies of copies_arrays' arrays, those in parts found in the store's work directory."""
    sizes = arrays["sizes"]
    parts = store.pair_parts(COPIES, sizes.shape[0], sizes) if sizes.shape[0] else None
    return Copies(arrays["first"], arrays["member"], arrays["jaccard"], parts)


@dataclass
class VerifiedPairs:
    """The verified pairs of a run: first, second int64 (p,) rows, first < second, ascending
    by (first, second); jaccard float64 (p,), each at least the threshold; host. In a cluster's
    run (``parts``) these are only the identical copies, and the pairs LSH found lie in the
    parts of the work directory (engine/pairparts.py), where tasks read them; ``arrays`` reads
    them into this process when first asked for."""

    first: np.ndarray
    second: np.ndarray
    jaccard: np.ndarray
    parts: Optional["PairParts"] = None
    executor: Optional["Executor"] = None  # the run's: its tasks read the parts (while connected)

    @property
    def count(self) -> int:
        """How many pairs, here and in the parts."""
        stored = 0 if self.parts is None or self.parts.sizes is None else int(self.parts.sizes.sum())
        return int(self.first.shape[0]) + stored

    def map(self, function: Callable[..., Any], *arguments) -> list:
        """``function(first, second, jaccard, *arguments)`` over the pairs, a part at a time:
        by the run's tasks where the pairs lie in parts and its cluster is still up (each part
        read where it lies: pairparts.on_pairs), else here, once over every pair. The caller
        combines the results (a sum, a minimum), which must not depend on how the pairs are cut."""
        executor = self.executor
        if self.parts is None or executor is None or executor.in_process or not executor.connected():
            return [function(*self.arrays, *arguments)]
        from .pairparts import on_pairs

        return executor.map(on_pairs, [(function, *source, *arguments) for source in pair_sources(self)],
                            "reading the pairs")

    def read_now(self) -> None:
        """Hold every pair here from now on, read from the parts (their work directory is
        about to go)."""
        self.first, self.second, self.jaccard = self.arrays
        self.parts = None

    @cached_property
    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(first, second, jaccard) of every pair, ascending, host."""
        if self.parts is None:
            return self.first, self.second, self.jaccard
        stored = self.parts.read()
        return merge_pairs((stored["first"], stored["second"], stored["jaccard"]),
                           (self.first, self.second, self.jaccard))


def pair_sources(pairs: VerifiedPairs) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, Optional["PairParts"], int]]:
    """The arguments of pairparts.on_pairs (after its function) for each place the pairs lie:
    those held, and each stored part that holds any."""
    empty, stored = np.zeros(0, np.int64), pairs.parts
    sizes = stored.sizes if stored is not None and stored.sizes is not None else np.zeros(0, np.int64)
    return [(pairs.first, pairs.second, pairs.jaccard, None, -1)] + [
        (empty, empty, np.zeros(0, np.float64), stored, number) for number in np.flatnonzero(sizes).tolist()]


def checked_in_memory(store: Store, likely: LikelyPairs, copies: Copies,
                      exact: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> CheckedPairs:
    """The verification stage in this process: the exact check of the pairs the signature
    filter passed (exact: Store.exact_jaccard, the Jaccard where it reaches the threshold, else
    BELOW_THRESHOLD), the copies merged in (CheckedPairs)."""
    likely, copies = likely.in_memory(store), copies.held()
    first, second = likely.first, likely.second
    jaccard = exact(first, second)
    # The copies join the pairs LSH found (they were never in its buckets), in (a, b) order.
    merged_first, merged_second, jaccard = merge_pairs((first, second, jaccard),
                                                       (copies.first, copies.member, copies.jaccard))
    return CheckedPairs(merged_first, merged_second, jaccard, likely.candidates, first.shape[0])


def cluster_verified(store: Store, verified: VerifiedPairs, params: DedupParams, log: StageLog, progress: Progress,
                     executor: "Executor") -> Union[Clusters, "ClusterParts"]:
    """The clusters of the verified pairs, with the documents each keeps (Executor.clusters):
    rows below store.pinned are kept, and so is nothing else of a cluster that holds one."""
    progress.start("Clustering", 1)
    with log.stage("cluster"):
        clusters = executor.clusters(store, verified, params.keep)
    progress.advance(1)
    progress.stop()
    return clusters


def merge_pairs(pairs, more) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two disjoint sets of pairs (a int64 (p,), b int64 (p,), value (p,)) as one, ascending
    by (a, b)."""
    a, b, value = (np.concatenate([x, y]) for x, y in zip(pairs, more))
    order = np.lexsort((b, a))
    return a[order], b[order], value[order]


def build_report(summary: InputSummary, params: DedupParams, banding: Banding, backend: Backend, log: StageLog,
                 candidates: int, checked: int, verified: int, clusters: Union[Clusters, "ClusterParts"],
                 copies: Copies, work_dir: Optional[str]) -> Report:
    """The run's report (report.Report), the one place it is built."""
    removed = clusters.removed_count
    documents = summary.documents
    identical = copies.count
    return Report(
        gpudedup_version=__version__,
        backend=backend.description,
        input=summary,
        parameters={
            **{k: v for k, v in params.as_dict().items() if k not in ("bands", "rows")},
            "batch_bytes": batch_bytes(params, backend),
            "bands": banding.bands,
            "rows": banding.rows,
            "banding_rule": banding.rule,
            "permutations_computed": banding.bands * banding.rows,
        },
        results=Results(candidate_pairs=int(candidates) + identical, exactly_checked_pairs=int(checked) + identical,
                        identical_copies=identical, verified_pairs=int(verified), clusters=clusters.count,
                        documents_in_clusters=clusters.in_clusters, removed_documents=removed,
                        kept_documents=documents - removed),
        balance=Balance.of(documents, summary.skipped_records, summary.empty_documents, removed),
        stages=log.as_dict(),
        total_seconds=round(log.total_seconds, 3),
        peak_rss_mb=log.peak_rss_mb,
        staged=work_dir is not None,
        work_dir=work_dir,
    )
