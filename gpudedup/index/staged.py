"""A run against a persistent index through a work directory: the stages every work
directory's run takes (pipeline/dask.py's DaskStages, on a cluster's workers or Dask's local
scheduler), over shards that start with the indexed documents the probe matched.

The matched documents become one more shard, the lead (WorkDir.lead: WORK/indexed/), written
once the new documents are signed and the index probed with their band keys: their stored
band keys, signatures, lengths, ids and shingle sets (or, for an index that verifies from its
source files, where each is read from), every one of them active. The stages
read the work directory through WorkDir.with_lead, where shard 0 is the lead and shard i the
input's shard i - 1, so rows 0 .. k-1 are the matched documents and k .. the new ones, as in a
run in memory (index/store.py); the input side (reading, the input rules, the results' rows)
reads the input's shards alone. The lead's sets stand in for its texts where a stage reads
sets (shards.spill_shard_sets, through LeadReader), and pairs of two lead rows are left out
(dask.likely_part's pinned).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, cast

import numpy as np
import pyarrow as pa

from ..backends import Backend
from ..core.copies import band_key_row_hash
from ..core.hashing import Permutations
from ..core.lsh import Banding, band_keys
from ..core.verify import stacked_sets
from ..pipeline.dask import DaskStages
from ..pipeline.daskops import DaskExecutor
from ..pipeline.disk import WorkDirStore
from ..pipeline.kept import Kept
from ..pipeline.protocols import Executor
from ..pipeline.shards import ActiveDocuments, DocumentsAt, DocumentSignatures, Shards
from ..pipeline.shardids import IdsAt
from ..pipeline.shardreader import ShardReader
from ..pipeline.workdir import LEAD_UNIT, WorkDir
from ..io.corpus import Corpus
from ..core.shingling import ShingleSpec
from ..pipeline.report import InputSummary
from ..stages import Progress, StageLog
from .reader import IndexReader, Matched
from .sources import rows_sets
from .store import joined_ids, probe_index, refuse_indexed_ids


class StagedIndexStore:
    """The matched indexed documents as the lead shard of a work directory's run, then the new
    documents of ``inner`` (see the module): protocols.Store for DaskStages."""

    def __init__(self, inner: WorkDirStore, index: IndexReader, backend: Backend, window: int):
        self.inner, self.index, self.backend, self.window = inner, index, backend, window
        self.work = inner.work.with_lead()
        self.params, self.reader = inner.params, LeadReader(inner.reader)  # (what the stages' tasks read)
        self.copy_batch_cost = inner.copy_batch_cost
        self.work_dir: Optional[str] = inner.work_dir
        self.parts_at = inner.parts_at
        self.pinned = 0
        self.matched: Optional[Matched] = None

    def sign(self, spec: ShingleSpec, banding: Banding, permutations: Permutations, executor: Executor,
             log: StageLog, progress: Progress) -> None:
        inner = self.inner
        # A work directory's store reads each shard and signs it in one pass, so its ids are
        # checked as soon as they are read, before the index is probed.
        inner.sign(spec, banding, permutations, executor, log, progress)
        refuse_indexed_ids(self.index, inner.ids)
        matched = self.matched = probe_index(self.index, inner.probe_keys(), self.window, self.backend, log)
        k = self.pinned = matched.count
        if not self.work.done(LEAD_UNIT):  # (a resumed run's is the same: its fingerprint holds the generation)
            self.write_lead(matched, banding)
        self.bands = inner.bands
        self.documents = k + inner.documents
        # The lead shard, then the input's; the lead's rows are all documents, all active.
        self.shards = Shards(self.work, inner.shards.count + 1, np.concatenate([[0], inner.shards.rows + k]),
                             np.concatenate([[0], inner.shards.active_starts + k]))
        self.rows = shifted(inner.rows, k)
        here = self.documents_at(in_tasks=False)
        self.active = ActiveDocuments(here, k + inner.active.shape[0])
        self.signatures = DocumentSignatures(here, inner.signatures.shape[1], self.documents)

    def write_lead(self, matched: Matched, banding: Banding) -> None:
        """The lead unit (the module docstring): the matched documents' stored band keys (as a
        shard keeps them, band-major), signatures, lengths, ids (the run's id type), and their
        sets: stored ones, or where an index verifies from its source files, where each one
        is read from (LeadReader.lead_sets reads only those a stage asks for, as a run in
        memory does)."""
        k = matched.count
        keys = band_keys(matched.signatures, banding)  # (k, bands)
        arrays = {"keys": np.ascontiguousarray(keys.T), "signatures": matched.signatures,
                  "row_hash": band_key_row_hash(keys), "active": np.arange(k, dtype=np.int64),
                  "lengths": matched.lengths}
        info: dict[str, Any] = {"rows": k, "active": k}
        if self.index.manifest.verification == "source":
            info["sources"], arrays["source_file"], arrays["source_row"] = self.index.source_pointers(
                matched.segment, matched.row)
        else:
            sets = stacked_sets(self.index.set_parts(matched.segment, matched.row))
            arrays["set_offsets"] = sets.indptr.astype(np.int64, copy=False)
            arrays["set_columns"] = sets.indices.astype(np.int64, copy=False)
        ids = pa.table({"id": matched.ids.cast(self.id_type)})
        self.work.write_dir(LEAD_UNIT, arrays, {"ids": ids}, info)

    @property
    def id_type(self) -> pa.DataType:
        """The type of every row's id: the matched documents' and the new ones' (joined_ids)."""
        return self.ids.type

    @property
    def ids(self) -> pa.Array:
        """The id of every row: the matched indexed documents', then the new ones'."""
        assert self.matched is not None
        return joined_ids(self.matched.ids, self.inner.ids)

    def task_backend(self, executor: Executor) -> Any:
        return self.inner.task_backend(executor)

    def documents_at(self, in_tasks: bool = True) -> DocumentsAt:
        """WorkDirStore.documents_at: the lead's rows, then the input's."""
        return DocumentsAt.of(self.work.task_location if in_tasks else self.work, self.shards, self.rows)

    def ids_at(self) -> IdsAt:
        return IdsAt(self.documents_at(), self.id_type)

    def drop_signatures(self) -> None:
        pass  # memory maps: nothing is held

    def cached(self, stage: str, compute: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        return self.inner.cached(stage, compute)

    def stages(self, executor: Executor) -> DaskStages:
        return DaskStages(cast(DaskExecutor, executor))  # (a work directory's runs are on Dask)

    def input_schemas(self) -> list[tuple[str, pa.Schema]]:
        return self.inner.input_schemas()

    def input_summary(self, empty_documents: int) -> InputSummary:
        return self.inner.input_summary(empty_documents)


def shifted(kept: Kept, k: int) -> Kept:
    """``kept`` (over the input's spilled items) over the lead's k items and then those: the
    lead's are all kept."""
    return kept if kept.left_out is None else Kept(left_out=kept.left_out + k)


@dataclass
class LeadReader:
    """What the stages' tasks of a run against an index read the shards' texts by
    (shards.spill_shard_sets): the input's ShardReader, ``inner``, for shard i >= 1 (the
    input's shard i - 1), and for the lead, which has no text, its documents' sets."""

    inner: ShardReader

    def corpus(self, index: int) -> Corpus:
        return self.inner.corpus(index - 1)

    @staticmethod
    def lead_sets(work: WorkDir, rows: np.ndarray, spec: ShingleSpec) -> tuple[np.ndarray, np.ndarray]:
        """(counts int64 (k,), columns int64): the shingle sets of the lead's ``rows`` (int64,
        ascending), as verify.set_columns gives them: stored in the lead, or read from the
        source files each one is indexed from (sources.source_sets, which checks each file)."""
        return rows_sets(lambda name: work.shard_array(0, name), work.shard_info(0).get("sources"), rows, spec)
