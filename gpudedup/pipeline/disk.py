"""Store: the job over input files one at a time, every stage kept in a work directory
(--work-dir), so that the corpus is never in memory as a whole and ``--resume`` redoes only what
an interrupted run had not finished. The same stages as every run (job.py); what this store
keeps (workdir.py for the layout):

0. **plan**: which shards there are (io/pieces.py): each input file, or the pieces of a large
   one (byte ranges at line ends, runs of row groups), kept in WORK/plan.npy. A file whose
   pieces, once signed, do not each stand for their part of it is read whole instead.
1. **signatures**, per shard: read it, shingle, MinHash and band keys in batches
   (signatures.signature_pass), and keep per document only its band keys (band-major, so one
   band of a shard is one contiguous read), its signature row and a 64-bit hash of it, and its
   text length, as memory-mappable .npy files; the ids go to a small Parquet file. A task per
   shard (the executor's). Right after, the ids and columns of all shards are checked as one
   input by the input rules (io/rules.py), as the in-memory run checks its files.
2. **copies** (identical copies), 3. **candidates** (the signature filter reads the
   candidates' rows from the spilled signatures) and 4. **pairs** run as Dask's shuffles and
   tasks over the shards (pipeline/dask.py), each kept as parts (WORK/pairs/) and marked done
   in WORK/stages/. Exact Jaccard (of the copies and of the pairs) reads each shard holding
   documents of pairs once, spills those documents' shingle sets to WORK/sets/ (a task per
   shard), and checks each part's pairs a chunk at a time from there.
5. clusters, then the outputs (ShardedTable), which re-read each shard once more to write its
   kept rows.

Peak memory is a batch and one shard's table in a signature task, a partition of a shuffle or
one chunk of pairs' shingle sets in a stage's task, and in the client a few numbers per shard
or part rather than per document (docs/scale.md): not the corpus. The results are those of
the in-memory store on the same files read at once (tests/test_streaming.py).
"""

from __future__ import annotations

from typing import Callable, Optional, cast

import numpy as np
import pyarrow as pa

from ..backends import Backend
from ..core.hashing import Permutations
from ..core.lsh import Banding
from ..core.shingling import ShingleSpec
from ..errors import InputError
from ..io import storage
from ..io.credentials import os_reason
from ..io.formats import format_of
from ..io.inputs import InputFiles, display_path, documents_read
from ..io.pieces import DEFAULT_SHARD_BYTES, Piece, Shard, count_newlines, plan_shards
from ..io.pointers import SourcePointers
from ..io.sizes import file_read_bytes, reading_estimate, shard_read_bytes
from ..io.stamps import FileStamp
from ..memory import MemoryBudget, size_words
from ..params import DedupParams
from .report import InputFile, InputSummary
from ..stages import Progress, StageLog
from ..version import __version__
from .dask import DaskStages
from .daskops import DaskExecutor
from .shardedrows import ShardedTable
from .protocols import Executor, LocalExecutor
from .shardids import IdsAt, ShardIds, shard_documents
from .shardreader import ShardReader, sign_shard
from .shards import (
    ActiveDocuments,
    BackendOrName,
    DocumentsAt,
    DocumentSignatures,
    Shards,
    SpilledKeys,
    SpilledLengths,
    by_shard,
    spill_sets,
    spilled_sets,
)
from .signatures import batch_bytes, batches_in_flight_bytes
from .manifest import FORMAT_KEY
from .workdir import WorkDir

# The layout of the spilled shards (workdir.py); a work directory of another layout is refused
# as another run's (2: per-row line numbers, text bytes and null flags for the input rules;
# 3: row_hash is copies.band_key_row_hash of the band keys, no longer a hash of the signatures;
# 4: a shard may be a piece of a file, as WORK/plan.npy says; 5: a stage is a folder of .npy
# files, WORK/stages/<name>/, as every unit of workdir.py is; 6: the candidates stage keeps the
# pairs that pass the signature filter, and their count, not every candidate pair; 7: on a
# cluster, those pairs and the verified ones lie in parts, WORK/pairs/, pipeline/pairparts.py;
# 8: on a cluster, so do the identical copies, pipeline/copyparts.py; 9: a shard's info holds the
# stamp of what it read, io/stamps.py, which the write checks the file against; 10: a
# cluster's parts are Parquet files, part.parquet, and a unit on object storage is complete
# with _complete.json; 12: every run's stages are WORK/stages/<name>/, in the one form its
# runner keeps; 13: a run against an index reads the indexed documents it matched as the lead
# shard, WORK/indexed/, and keeps its stages in parts as every other run here does; 14: what a
# run writes before it is complete is named .gpudedup-tmp-*, workfolders.TEMPORARY_PREFIX; 15:
# a shard's columns are an Arrow IPC file of no rows, columns.arrow, workdir.write_shard; 16: a
# stage keeps its parts' counts alone, DaskStages.kept, without empty arrays of pairs).
WORK_DIR_FORMAT = 16

def fingerprint(found: InputFiles, params: DedupParams, text_field: str, id_field: Optional[str],
                on_error: str) -> dict:
    """What a work directory's results depend on: the input files as they are now (path, size,
    modification time), the parameters that decide results, and the version."""
    inputs = []
    for path in found.files:
        try:
            inputs.append([display_path(path), *storage.size_and_time(path)])
        except OSError as error:  # gone since the scan, or its store unreachable: not the work directory's fault
            raise InputError(f"{display_path(path)}: cannot read ({os_reason(error)})") from None
    # The shard size decides how the files are cut, so which shard a spilled directory holds.
    return {"gpudedup_version": __version__, FORMAT_KEY: WORK_DIR_FORMAT,
            "parameters": params.result_parameters(), "shard_bytes": shard_bytes(params),
            "text_field": text_field, "id_field": id_field, "on_error": on_error, "inputs": inputs}


def shard_bytes(params: DedupParams) -> int:
    """The size input files are cut at (io/pieces.py)."""
    return params.shard_bytes or DEFAULT_SHARD_BYTES


WHOLE, ABSORBED = -1, -2  # a plan's start for a file read whole, and for a piece read by its file's first shard


def encode_plan(shards: list[Shard]) -> np.ndarray:
    """The shards as int64 (s, 4): file, then start, stop and lines or rows before (io/pieces.Piece),
    or WHOLE / ABSORBED and -1s."""
    rows = [[shard.file, shard.piece.start, shard.piece.stop, shard.piece.before] if shard.piece is not None
            else [shard.file, ABSORBED if shard.absorbed else WHOLE, -1, -1] for shard in shards]
    return np.asarray(rows, dtype=np.int64).reshape(-1, 4)


class WorkDirStore:
    """The arrays of a run over files, spilled to a work directory (see protocols.Store and the
    module docstring). ``found``: the scanned inputs (io.inputs.scan_inputs)."""

    sets_held = False  # (document_sets spills the sets from the shards: MemoryStore.sets_held)

    def __init__(self, work: WorkDir, found: InputFiles, params: DedupParams, backend: Backend, text_field: str,
                 id_field: Optional[str], on_error: str):
        self.work, self.found, self.params, self.backend = work, found, params, backend
        self.text_field, self.id_field = text_field, id_field
        self.reader = ShardReader(found.files, text_field, id_field, on_error)
        self.spec = params.shingle_spec()
        # The copies stage reads its groups' spilled sets back a chunk at a time, as exact_by_spill.
        self.copy_batch_cost = 8 * batch_bytes(params, backend)
        self.work_dir: Optional[str] = work.shown
        self.parts_at = work.location  # (where tasks keep the stages' parts: DaskStages.kept)
        self.pinned = 0  # no documents kept before (protocols.Store)

    def task_backend(self, executor: Executor) -> BackendOrName:
        return self.backend if executor.in_process else self.backend.name

    def sign(self, spec: ShingleSpec, banding: Banding, permutations: Permutations, executor: Executor,
             log: StageLog, progress: Progress) -> None:
        # Stage times: "read", "signature_pass" and "spill" add up over the shards here; on a
        # cluster the workers' time is one "signature_pass" as the client waits for it.
        self.reader.shards = self.plan_shards(executor)
        try:
            self.sign_pending(executor, log, progress)
        except InputError:
            # A cut file before the one that failed may hold the first error, which only its
            # whole read can raise: read those whole first (in input order), then fail.
            self.read_whole_where_needed(executor, log, progress)
            raise
        self.read_whole_where_needed(executor, log, progress)
        self.bands = banding.bands
        self.shards = shards = Shards.of(self.work, self.reader.count)
        # (A work directory's runs are on Dask: api.on_dask.)
        self.combination = shard_documents(shards, self.text_field, self.id_field, self.reader.on_error,
                                           cast(DaskExecutor, executor))
        # The shards none of whose rows is a document: files that could not be read, and files
        # the input rules left out whole (on_error "skip").
        self.files_left_out = {index for index in range(shards.count) if shards.work.shard_info(index)["left_out"]}
        self.files_left_out |= self.combination.left_out
        # The documents are the spilled rows (all shards' rows as read) that the input rules
        # keep, in order: the stages speak of their rows (DocumentsAt).
        self.rows = self.combination.rows
        self.documents = self.rows.count(0, int(shards.rows[-1]))
        # Inputs that gave no document stop the run (under either on_error) here, after reading.
        documents_read(self.found, self.documents, self.reader.shown, self.skipped_records())
        at = self.documents_at(in_tasks=False)
        # The documents with shingles (counted without a read where the input rules kept every
        # row); their rows stay in the shards.
        m = sum(int(at.live(index).sum()) for index in range(shards.count))
        self.active = ActiveDocuments(at, m)
        self.lengths = SpilledLengths(at, self.documents)
        self.signatures = DocumentSignatures(at, banding.bands * banding.rows, self.documents)

    def sign_pending(self, executor: Executor, log: StageLog, progress: Progress) -> None:
        """Sign every shard not signed yet: here, one at a time within --max-memory, or as tasks."""
        pending = [index for index, done in enumerate(self.work.shards_done(range(self.reader.count))) if not done]
        root = self.work.for_tasks(executor.in_process)
        if not executor.in_process:
            with log.stage("signature_pass"):
                if not pending:
                    return
                reader, params = executor.share(self.reader, self.params)  # (what every shard's task reads)
                executor.map(sign_shard, [(root, reader, index, params, self.backend.name)
                                          for index in pending], "the signatures")
            return
        budget = MemoryBudget(self.params.max_memory)
        file_bytes: dict[int, tuple[int, int]] = {}  # (the estimate of a file, once for its pieces)
        for index in pending:
            shard = self.reader.shards[index]
            path = self.reader.files[shard.file]
            if budget.limit is not None:
                # A shard is read whole: the budget must hold it and the batches in flight,
                # which its text (bounded by what its table keeps) may not fill.
                if shard.file not in file_bytes:
                    file_bytes[shard.file] = file_read_bytes(path, format_of(path))
                reading = shard_read_bytes(path, format_of(path), shard.piece, file_bytes[shard.file])
                in_flight = batches_in_flight_bytes(self.backend, batch_bytes(self.params, self.backend), reading[0])
                budget.check(f"reading {display_path(path)}", reading_estimate([reading]) + in_flight,
                             f"lower batch_bytes= (the batches in flight take {size_words(in_flight)} of it) or "
                             "shard_bytes= (large plain JSONL and Parquet files are cut at it), cut the input into "
                             "smaller files, or raise max_memory=")
            sign_shard(root, self.reader, index, self.params, self.backend, log, progress)

    def read_whole_where_needed(self, executor: Executor, log: StageLog, progress: Progress) -> None:
        """Read whole (read_whole, then sign) the cut files that files_to_read_whole names."""
        whole = self.files_to_read_whole()
        if whole:
            self.read_whole(whole)
            self.sign_pending(executor, log, progress)

    def files_to_read_whole(self) -> list[int]:
        """The cut files whose pieces do not each stand for their part of the file (io/pieces.py):
        one that does not (PieceDoesNotStand); or, once all are signed, none with records, or
        JSONL pieces with records whose columns differ (each inferred alone). Pieces not signed
        yet (a run stopped by an error) count only through those signed."""
        pieces_of: dict[int, list[int]] = {}
        for index, shard in enumerate(self.reader.shards):
            if shard.piece is not None:
                pieces_of.setdefault(shard.file, []).append(index)
        whole = []
        for file, indices in pieces_of.items():
            signed = [index for index, done in zip(indices, self.work.shards_done(indices), strict=True) if done]
            infos = [self.work.shard_info(index) for index in signed]
            if not all(info.get("stands", True) for info in infos):
                whole.append(file)
                continue
            if len(signed) < len(indices):
                continue
            with_rows = [index for index, info in zip(signed, infos) if info.get("rows")]
            schemas = [self.work.shard_schema(index) for index in with_rows]
            if not with_rows or any(not schema.equals(schemas[0]) for schema in schemas[1:]):
                whole.append(file)
        return whole

    def read_whole(self, files: list[int]) -> None:
        """Plan ``files`` to be read whole: each one's first shard reads it, its other pieces
        nothing (absorbed). Their spills go first, then the new plan is stored, so that a run
        killed in between plans and finds them again."""
        shards, first = self.reader.shards, set()
        for index, shard in enumerate(shards):
            if shard.file in files:
                self.work.remove(self.work.shard_unit(index))
                shards[index] = Shard(shard.file, None, absorbed=shard.file in first)
                first.add(shard.file)
        self.work.save_plan(encode_plan(shards))

    @property
    def ids(self) -> pa.Array:
        """Every document's id, read from the shards now (what a run against an index needs)."""
        return self.id_source.all()

    @property
    def id_source(self) -> ShardIds:
        """The documents' ids as the results take them, read when asked (ids.IdSource)."""
        return ShardIds(self.shards, self.rows, self.combination, self.documents)

    def plan_shards(self, executor: Executor) -> list[Shard]:
        """The shards of the run (io/pieces.py: large files cut at --shard-bytes), planned once
        and kept in the work directory, so that a resumed run reads the same ones (the
        newlines before each JSONL piece are counted by the executor's tasks)."""
        stored = self.work.load_plan()
        if stored is None:
            planned = plan_shards(self.reader.files, shard_bytes(self.params),
                                  lambda tasks: executor.map(count_newlines, tasks, "cutting large files"))
            stored = encode_plan(planned)
            self.work.save_plan(stored)
        return [Shard(int(file), Piece(int(start), int(stop), int(before)) if start >= 0 else None,
                      absorbed=start == ABSORBED)
                for file, start, stop, before in stored]

    def probe_keys(self) -> SpilledKeys:
        """The band keys of the run's documents with shingles, a band at a time (the probe of
        a run against an index, index/staged.py)."""
        return SpilledKeys(self.documents_at(in_tasks=False), self.bands)

    def documents_at(self, in_tasks: bool = True) -> DocumentsAt:
        """Where the run's documents are in its shards (DocumentsAt): for its tasks, or for this
        process (through the run's WorkDir, which shares what it has read)."""
        return DocumentsAt.of(self.work.task_location if in_tasks else self.work, self.shards, self.rows)

    def signature_rows(self, rows: np.ndarray) -> np.ndarray:
        """uint32 (k, K), host: the signatures of ``rows`` (int64, each with shingles)."""
        return self.signatures[rows]

    def drop_signatures(self) -> None:
        pass  # memory maps: nothing is held

    def source_pointers(self, docs: np.ndarray):
        """Where rows ``docs`` (int64 (k,)) were read from (index/sources.py): each shard's file
        and the line or row its spilled row numbers give."""

        spilled = self.rows.spilled(docs)
        file = np.empty(docs.shape[0], dtype=np.int64)
        numbers = np.empty(docs.shape[0], dtype=np.int64)
        for index, mine in by_shard(self.shards.rows, spilled):
            file[mine] = self.reader.file_of(index)
            local = spilled[mine] - self.shards.rows[index]
            numbers[mine] = np.asarray(self.work.shard_array(index, "row_numbers"))[local]
        files = tuple((str(path), format_of(path)) for path in self.reader.files)
        read_as: list[list] = [[] for _ in files]
        for index in range(self.shards.count):
            read_as[self.reader.file_of(index)].append((self.reader.shards[index].piece, self.shard_stamp(index)))
        return SourcePointers(files, file, numbers, self.text_field, tuple(tuple(reads) for reads in read_as))

    def shard_stamp(self, index: int) -> Optional[FileStamp]:
        """What shard ``index`` read of its file, as its sign stored it (io/stamps.py)."""
        return FileStamp.of_list(self.work.shard_info(index)["stamp"])

    def cached(self, stage: str, compute: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        stored = self.work.load_stage(stage)
        if stored is None:
            stored = compute()
            self.work.save_stage(stage, stored)
        return stored

    def document_sets(self, docs: np.ndarray, progress: Progress, executor: Optional[Executor] = None,
                      name: str = "documents"):
        """The shingle sets of rows ``docs`` (int64, ascending) as one binary CSR matrix (see
        verify.document_sets): spilled under WORK/sets/<name>-<digest>/ shard by shard
        (spill_sets: each shard read once, a spill per set of rows), then read back."""
        executor = executor or LocalExecutor()
        spilled = self.rows.spilled(docs)
        spill = spill_sets(self.work, name, self.reader, self.shards.rows, self.params, self.task_backend(executor),
                           spilled, executor)
        progress.advance(int(docs.shape[0]))
        return spilled_sets(self.work, spill, self.shards.rows, spilled)

    def stages(self, executor: Executor) -> DaskStages:
        return DaskStages(cast(DaskExecutor, executor))  # (its tasks read the shards)

    def ids_at(self) -> IdsAt:
        """The documents' ids as a task reads them (IdsAt)."""
        return IdsAt(self.documents_at(), self.combination.id_type)

    def input_schemas(self) -> list[tuple[str, pa.Schema]]:
        """Each input file's columns, its shards' unified (once signed), but those left out."""
        schemas: dict[int, list[pa.Schema]] = {}
        for index in range(self.shards.count):
            if index not in self.files_left_out:
                schemas.setdefault(self.reader.file_of(index), []).append(self.work.shard_schema(index))
        return [(self.reader.shown[file], pa.unify_schemas(found, promote_options="permissive"))
                for file, found in schemas.items()]

    def input_summary(self, empty_documents: int) -> InputSummary:
        shards = self.shards
        documents: dict[int, int] = {}  # input file -> its documents, over the shards read
        for index in range(shards.count):
            if index not in self.files_left_out:
                file = self.reader.file_of(index)
                documents[file] = documents.get(file, 0) + self.rows.count(int(shards.rows[index]),
                                                                           int(shards.rows[index + 1]))
        files = [InputFile.of(self.reader.shown[file], format_of(self.reader.files[file]), count)
                 for file, count in documents.items()]
        return InputSummary(
            documents=self.documents,
            files=tuple(files),
            skipped_files=self.found.skipped,
            skipped_records=len(self.skipped_records()),
            notes=self.found.notes,
            text_bytes=self.live_sum("text_bytes"),
            null_texts=self.live_sum("null"),
            empty_documents=int(empty_documents),
        )

    def live_sum(self, name: str) -> int:
        """The sum of a spilled per-row array over the run's documents, a shard at a time."""
        shards = self.shards
        return sum(int(np.asarray(shards.work.shard_array(index, name))[
            self.rows.mask(int(shards.rows[index]), int(shards.rows[index + 1]))].sum())
            for index in range(shards.count))

    def skipped_records(self) -> list[dict]:
        """The records and files --on-error skip left out: the scan's, then those the input
        rules decided (each shard's own, a file left out whole, a repeated id)."""
        return list(self.found.records) + self.combination.records

    def table(self) -> "ShardedTable":
        """The input rows of the run's documents (DedupResult.table)."""
        stamps = [self.shard_stamp(index) for index in range(self.shards.count)]
        return ShardedTable(self.shards, self.reader, self.rows, self.combination.schema, self.files_left_out, stamps)
