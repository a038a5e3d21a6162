"""The deduplication job: the stage sequence, written once.

    signatures -> identical copies -> candidates -> verification -> clusters -> report

Between runs vary where the arrays live (the store), who runs the per-shard tasks (the
executor) and how the steps over the whole corpus are done (the stages): the small interfaces
of pipeline/protocols.py, whose docstring names each one's implementations.

Every stage works on row numbers 0 .. n-1 of the documents; ids are attached where results
leave the pipeline (results/result.py). Reading (io/) and writing (results/, io/commit.py) are outside.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

import numpy as np
import pyarrow as pa

from ..backends import Backend
from ..core.hashing import draw_permutations
from ..core.lsh import Banding
from ..params import DedupParams
from .report import Balance, InputSummary, Report, Results
from ..stages import Progress, StageLog
from ..version import __version__
from .signatures import batch_bytes

from .outcome import Outcome
from .pairs import Verified
from .protocols import Executor, LocalExecutor, Stages, Store
from .shown import Shown, shown_of
from .sourcecounts import check_group_field

if TYPE_CHECKING:
    from .heldclusters import Clustered
    from .pairs import Copied


def run_job(store: Store, params: DedupParams, backend: Backend, executor: Optional[Executor] = None,
            progress: Optional[Progress] = None, log: Optional[StageLog] = None,
            keep_candidates: bool = False, group_field: Optional[str] = None,
            check_columns: Optional[Callable[[list[tuple[str, pa.Schema]]], None]] = None) -> Outcome:
    """Deduplicate the documents of ``store``: the stage sequence of the module docstring.

    log may already hold stages (reading) to report with these; keep_candidates: return every
    candidate pair on the outcome (evaluate.py); group_field: the column the report counts by,
    refused once the inputs are read where an input lacks it (sourcecounts.check_group_field);
    check_columns: what else the inputs' columns must pass, checked then too (the columns a
    write asked for adds: removedrows.check_removed_beside).
    """
    executor = executor or LocalExecutor()
    stages = store.stages(executor)
    progress = progress or Progress()
    log = log or StageLog()
    spec = params.shingle_spec()
    banding = params.banding()
    permutations = draw_permutations(banding.bands * banding.rows, params.seed)

    store.sign(spec, banding, permutations, executor, log, progress)
    # (a work directory's columns are known once its shards are read)
    check_group_field(store.input_schemas(), group_field)
    if check_columns is not None:
        check_columns(store.input_schemas())
    active = store.active

    # Each stage's result in its runner's form (a work directory keeps it for --resume: Stages.kept).
    with log.stage("copies"):
        copies = stages.kept(store, "copies", lambda: stages.copies(store, progress))

    progress.start("Finding candidate pairs", banding.bands, "bands")
    with log.stage("candidates"):  # the candidate pairs, and the signature filter of them
        # Confirmed copies stay out of the buckets: their group's first document stands for them.
        likely = stages.kept(store, "candidates", lambda: stages.likely_pairs(
            store, copies, params.bucket_window, params.threshold, backend, keep_candidates))
        store.drop_signatures()  # the largest thing left from the signature pass
    progress.advance(banding.bands)

    with log.stage("verify"):
        checked = stages.kept(store, "pairs", lambda: stages.checked_pairs(
            store, likely, copies, params.threshold, progress))
        verified = checked.verified(params.threshold)
        none = np.zeros(0, np.int64)
        candidate_a, candidate_b = likely.every_candidate(copies) if keep_candidates else (none, none)

    clusters, shown = cluster_verified(store, verified, params, log, progress, stages)
    backend.release_memory()  # the next run (an evaluation grid, a notebook) starts lean
    report = build_report(store.input_summary(store.documents - active.shape[0]), params, banding, backend, log,
                          candidates=checked.candidates, checked=checked.checked, verified=verified.count,
                          clusters=clusters, copies=copies, work_dir=store.work_dir, pinned=store.pinned)
    return Outcome(verified, clusters, store.documents, report, checked, candidate_a, candidate_b, copies, shown)


def cluster_verified(store: Store, verified: Verified, params: DedupParams, log: StageLog, progress: Progress,
                     stages: Stages) -> tuple["Clustered", Shown]:
    """The clusters of the verified pairs, with the documents each keeps (Stages.clusters):
    rows below store.pinned are kept, and so is nothing else of a cluster that holds one; and
    what the run shows of them (shown.shown_of), counted while the stages' cluster is up."""
    progress.start("Clustering", 1, "stage")
    with log.stage("cluster"):
        clusters = stages.clusters(store, verified, params.keep)
        shown = shown_of(verified, clusters, stages, params.threshold, params.seed)
    progress.advance(1)
    progress.stop()
    return clusters, shown


def build_report(summary: InputSummary, params: DedupParams, banding: Banding, backend: Backend, log: StageLog,
                 candidates: int, checked: int, verified: int, clusters: "Clustered",
                 copies: "Copied", work_dir: Optional[str], pinned: int = 0) -> Report:
    """The run's report (report.Report), the one place it is built; pinned: the leading rows
    that are an index's documents (Store.pinned), which its counts leave out."""
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
                        documents_in_clusters=clusters.in_clusters_from(pinned), removed_documents=removed,
                        kept_documents=documents - removed),
        balance=Balance.of(documents, summary.skipped_records, summary.empty_documents, removed),
        stages=log.as_dict(),
        total_seconds=round(log.total_seconds, 3),
        peak_rss_mb=log.peak_rss_mb,
        staged=work_dir is not None,
        work_dir=work_dir,
    )
