"""The interfaces a run's stages go through (pipeline/job.py runs them):

- the **store** (``Store``): where the run's arrays live between stages and how a stage's
  finished result is kept: in memory (pipeline/memory.py, host or device arrays of a corpus read
  at once) or in a work directory (pipeline/disk.py, memory-mapped spill files of one input file
  at a time, stages kept for --resume);
- the **executor** (``Executor``): who runs the per-shard tasks: this process
  (``LocalExecutor``, here) or Dask, a cluster or its local scheduler (pipeline/daskops.py);
- the **stages** (``Stages``): how the steps over the whole corpus are done, one way per
  runner: over held arrays in this process (pipeline/local.py's HeldStages) or as Dask's shuffles
  and tasks over the work directory (pipeline/dask.py's DaskStages).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol, Sequence, TypeVar

import numpy as np
import pyarrow as pa

from ..backends import Backend
from ..core.cluster import KeepPolicy
from ..core.hashing import Permutations
from ..core.lsh import Banding
from .report import InputSummary
from ..core.shingling import ShingleSpec
from ..stages import Progress, StageLog
from ..threads import HOST_THREADS



if TYPE_CHECKING:
    from .heldclusters import Clustered
    from .pairs import Checked, Copied, Likely, Verified

Result = TypeVar("Result")  # a stage's result, in the form of the runner that made it (Stages.kept)


class Store(Protocol):
    """Where a run's arrays live between stages (pipeline/memory.py, pipeline/disk.py), as the
    stage sequence (pipeline/job.py) reads it.

    After ``sign``: ``documents`` rows; ``active``, the m rows with at least one shingle (the
    only ones that can pair), ascending: an int64 host array, or (a work directory's) an object
    that gathers like it, ``active[positions]`` and ``.shape``, holding nothing per document.

    ``pinned``: the leading rows 0 .. pinned-1 are documents kept before (a persistent index's,
    index/store.py and index/staged.py): they are never removed, a cluster holding one removes
    its other rows, and pairs of two of them are not sought (0 for every other store).
    """

    documents: int
    pinned: int
    active: Any  # int64 (m,), or what gathers like it (above)
    work_dir: Optional[str]  # where the stages are kept (named in the report); None: nowhere

    def sign(self, spec: ShingleSpec, banding: Banding, permutations: Permutations, executor: "Executor",
             log: StageLog, progress: Progress) -> None:
        """The signature stage: signatures and band keys of every document not yet signed."""

    def drop_signatures(self) -> None:
        """The signature filter is done: the signatures are not read again."""

    def input_schemas(self) -> list[tuple[str, pa.Schema]]:
        """(path as shown, columns) of each input (once signed, for a work directory's)."""

    def input_summary(self, empty_documents: int) -> InputSummary:
        """The report's "input" section."""

    def stages(self, executor: "Executor") -> "Stages":
        """How the steps over the whole corpus run: over held arrays in this process
        (HeldStages: a store in memory), or as ``executor``'s Dask tasks over a work
        directory's shards (DaskStages, which reads them itself)."""


class HeldStore(Store, Protocol):
    """A store whose arrays the stages take whole, in this process (pipeline/local.py's
    HeldStages): a corpus in memory (pipeline/memory.py), with a persistent index's documents
    or without (index/store.py).

    ``lengths``: int64 (n,) code points per row; ``signatures``: ``signatures[positions]`` ->
    uint32 (k, K) host for positions into ``active``.
    """

    lengths: Any
    signatures: Any
    copy_batch_cost: int  # how much text copies.identical_copies checks per call

    def active_positions(self, rows: np.ndarray) -> np.ndarray:
        """int64: the positions in ``active`` of ``rows`` (int64, each an active row)."""

    def row_hashes(self) -> Optional[np.ndarray]:
        """uint64 (m,) host: copies.band_key_row_hash of the active documents' band keys, made
        when they were signed (None: copies.same_signature_rows hashes the signature rows)."""

    def band_keys(self, in_lsh: np.ndarray) -> Any:
        """The band keys of the active documents where in_lsh (bool (m,)): ``keys[:, band]``
        gives uint64 (m',) on the backend's side. The store may drop its own reference."""

    def exact_jaccard(self, name: str, first: np.ndarray, second: np.ndarray, threshold: float,
                      executor: "Executor", progress: Progress) -> np.ndarray:
        """float64 (p,), host: the exact Jaccard of the row pairs (first[i], second[i]) that reach
        ``threshold``, verify.BELOW_THRESHOLD for the others (verify.pair_jaccard_at_least);
        name: the stage asking ("pairs"), for what the store keeps of the work."""

    def set_reader(self, name: str, docs: np.ndarray, executor: "Executor") -> Callable[[np.ndarray], Any]:
        """For a stage that reads the shingle sets of rows ``docs`` (int64, ascending) a part at
        a time: a function of a part (int64, ascending, rows of docs) giving their sets as one
        binary CSR matrix, host (verify.document_sets), each part shingled when asked; name:
        the stage asking ("copies")."""


class Executor(Protocol):
    """Who runs a store's per-shard tasks. in_process: tasks run in this process (they may get
    its backend, log and progress rather than names); task_threads: the threads one task may
    use (every core in this process, where tasks run one after another; one on a cluster's
    workers, which run theirs side by side)."""

    in_process: bool
    task_threads: int

    def map(self, task: Callable[..., Any], arguments: Sequence[tuple], stage: str) -> list:
        """[task(*a) for a in arguments], each on its own; stage names the work for errors. On a
        cluster each task's numpy arrays travel apart from its message; what every task reads
        is given through ``share``."""

    def share(self, *values: Any) -> tuple:
        """``values`` as a stage's tasks take what they all read: sent to every worker once
        (a cluster's futures of them), rather than inside every task; here, the values."""


class LocalExecutor:
    """Runs every task in this process, in order (Executor): an in-memory run's, and what
    reads a run's parts after the run, its cluster gone."""

    in_process = True
    task_threads = HOST_THREADS

    def map(self, task: Callable[..., Any], arguments: Sequence[tuple], stage: str) -> list:
        return [task(*a) for a in arguments]

    def share(self, *values: Any) -> tuple:
        return values


class Stages(Protocol):
    """The steps over the whole corpus, as one runner does them (the module docstring).
    executor: whose tasks run them. Each step takes the store that gave the stages
    (Store.stages), which reads as they need it: a HeldStore for HeldStages, a work directory's
    store for DaskStages."""

    @property
    def executor(self) -> Executor:
        """Who runs the stages' tasks."""

    def likely_pairs(self, store: Any, copies: Any, window: int, threshold: float, backend: Backend,
                     keep_every: bool = False) -> "Likely":
        """The LSH candidate pairs (lsh.candidate_pairs) of the active documents but the
        members of the identical ``copies`` (their group's first document stands for them)
        that pass the signature filter (verify.plausible), leaving out the pairs of two pinned
        rows (Store.pinned); keep_every: keep every candidate pair too (evaluation)."""

    def kept(self, store: Any, stage: str, compute: Callable[[], Result]) -> Result:
        """The result of ``stage`` ("copies", "candidates", "pairs"): compute() in this
        process; on Dask, its parts' form made of the arrays the store's work directory keeps of
        it (WorkDirStore.cached: computed unless an earlier run kept them, for --resume)."""

    def copies(self, store: Any, progress: Progress) -> "Copied":
        """The identical copies among the active documents (copies.py): their groups by
        copies.same_signature_rows of the signatures (store.row_hashes proposing them), each
        checked exactly (copies.identical_copies); held, or (Dask's) kept in parts of the
        store's work directory (pipeline/copyparts.py)."""

    def checked_pairs(self, store: Any, likely: Any, copies: Any, threshold: float,
                      progress: Progress) -> "Checked":
        """The verification stage: the exact Jaccard of the ``likely`` pairs where it reaches
        ``threshold`` and the identical copies joined to them: in this process
        (HeldStore.exact_jaccard, checked_in_memory), or on Dask, likely pairs kept in parts
        checked by tasks into parts."""

    def clusters(self, store: Any, verified: "Verified", policy: KeepPolicy) -> "Clustered":
        """The clusters of the ``verified`` pairs (where they lie: held, or Dask's parts) and
        the documents each keeps by ``policy`` (cluster.clusters_of_roots, with store.lengths
        and store.pinned): held, or (Dask's) kept in parts of the store's work directory
        (pipeline/clusterparts.py), of which the client holds counts."""

    def pairs_inside(self, pairs: "Verified", clustered: "Clustered", numbers: np.ndarray,
                     asked_a: np.ndarray, asked_b: np.ndarray) -> list:
        """Outcome.pairs_inside: cluster.pairs_inside of the clusters ``numbers`` over the
        ``pairs``, a result per place they lie; on Dask, with the clusters in parts, the pairs
        are set on their first document by the clusters' ranges so that no process holds
        every member of those clusters."""
