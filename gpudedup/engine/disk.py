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
2. **copies** (identical copies), 3. **candidates** (band by band, the keys of that band from
   every shard, 8 bytes per document) and 4. **pairs** (the signature filter reads the
   candidates' rows from the spilled signatures) are kept in WORK/stages/.
   Exact Jaccard (of the copies and of the pairs) reads each shard holding documents of pairs
   once, spills those documents' shingle sets to WORK/sets/ (a task per shard), and checks the
   pairs a chunk at a time from there (a task per chunk): exact_by_spill.
5. clusters, then the outputs (ShardedTable), which re-read each shard once more to write its
   kept rows.

Peak memory is a batch and one shard's table, the per-document arrays (about 24 bytes per
document plus 16 while a band is bucketed), the candidate pairs, and one chunk of pairs'
shingle sets: not the corpus. The results are those of the in-memory store on the same files
read at once (tests/test_streaming.py).
"""

from __future__ import annotations

import hashlib
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Union, cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..backends import Backend, get_backend
from ..core.content import check_content, content_bytes, gathered_type, unit_lengths
from ..core.copies import band_key_row_hash
from ..core.hashing import Permutations, draw_permutations
from ..core.lsh import Banding
from ..core.ragged import weighted_ranges
from ..core.shingling import ShingleSpec
from ..errors import InputError
from ..ids import wide
from ..io import storage
from ..io.corpus import Corpus
from ..io.formats import format_of
from ..io.inputs import InputFiles, display_path, documents_read
from ..io.layout import FileRows, as_input, write_kept_file, write_kept_pieces
from ..io.pointers import SourcePointers
from ..io.pieces import DEFAULT_SHARD_BYTES, Piece, Shard, count_newlines, plan_shards
from ..io.read import build_corpus, read_one_file
from ..io.rules import PartSummary, id_groups, plan_combination
from ..io.sizes import file_read_bytes, shard_read_estimate
from ..io.source import SourceFile, file_record
from ..io.stamps import FileStamp, check_unchanged, read_stamp, unchanged_while
from ..io.storage import Location
from ..io.writer import ROWS_PER_WRITE, write_jsonl_batches, write_to
from ..memory import MemoryBudget, release_unused_memory
from ..params import DedupParams
from ..report import InputFile, InputSummary
from ..stages import Progress, StageLog
from ..threads import HOST_THREADS
from ..version import __version__
from .clusterparts import ClusterParts
from .kept import Kept
from .local import LocalExecutor
from .pairparts import PairParts
from .protocols import Executor
from .shards import (BackendOrName, LengthsAt, Shards, SpilledActive, SpilledKeys, SpilledLengths, SpilledSignatures,
                     by_shard, spill_shard_sets, spilled_jaccard, spilled_sets)
from .signatures import batch_bytes, batches_in_flight_bytes, signature_pass
from .workdir import MANIFEST, WorkAt, WorkDir

if TYPE_CHECKING:
    from .pairparts import PairParts


# The layout of the spilled shards (workdir.py); a work directory of another layout is refused
# as another run's (2: per-row line numbers, text bytes and null flags for the input rules;
# 3: row_hash is copies.band_key_row_hash of the band keys, no longer a hash of the signatures;
# 4: a shard may be a piece of a file, as WORK/plan.npy says; 5: a stage is a folder of .npy
# files, WORK/stages/<name>/, as every unit of workdir.py is; 6: the candidates stage keeps the
# pairs that pass the signature filter, and their count, not every candidate pair; 7: on a
# cluster, those pairs and the verified ones lie in parts, WORK/pairs/, engine/pairparts.py;
# 8: on a cluster, so do the identical copies, engine/copyparts.py; 9: a shard's info holds the
# stamp of what it read, io/stamps.py, which the write checks the file against).
WORK_DIR_FORMAT = 9

# What a write refused for an input file that changed says beside the change, where the run's
# work directory is still there: a resume would take the stages of the file as it was (a
# change of its bytes alone does not stop a resume).
CHANGED_INPUT = "nothing was written: run again with an empty work directory"


def fingerprint(found: InputFiles, params: DedupParams, text_field: str, id_field: Optional[str],
                on_error: str) -> dict:
    """What a work directory's results depend on: the input files as they are now (path, size,
    modification time), the parameters that decide results, and the version."""
    inputs = []
    for path in found.files:
        inputs.append([display_path(path), *storage.size_and_time(path)])
    # The shard size decides how the files are cut, so which shard a spilled directory holds.
    return {"gpudedup_version": __version__, "work_dir_format": WORK_DIR_FORMAT,
            "parameters": params.result_parameters(), "shard_bytes": shard_bytes(params),
            "text_field": text_field, "id_field": id_field, "on_error": on_error, "inputs": inputs}


def shard_bytes(params: DedupParams) -> int:
    """The size input files are cut at (io/pieces.py)."""
    return params.shard_bytes or DEFAULT_SHARD_BYTES


@dataclass
class ShardDocuments:
    """The documents of a staged run among the rows its shards spilled, as the input rules
    (io/rules.plan_combination) decide them for the shards read one at a time, exactly as
    for the files of an in-memory run read at once.

    rows: the run's documents among the spilled rows of all shards (Shards.rows; held as the
    rows left out); id_type: their ids' type (int64 or string); all_ids(): every one of their
    ids, in order, read from the shards (none is held); schema: the columns of the files they come from,
    unified; records: every record or file left out under on_error="skip" (in no particular
    order; rules.sorted_records orders them); left_out: the shards left out whole by the
    rules (their columns or kind of id do not combine with the shards before them).
    """

    rows: Kept
    id_type: pa.DataType
    all_ids: Callable[[], pa.Array]
    schema: pa.Schema
    records: list[dict]
    left_out: set[int]


def shard_documents(shards: Shards, text_field: str, id_field: Optional[str], on_error: str,
                    executor: Executor) -> ShardDocuments:
    """The input rules over every shard's spilled columns, line numbers and ids (see
    ShardDocuments); under on_error="stop" their InputError, naming the files and lines. The
    ids are not read here: only the rows whose ids' hashes collide come back, from the
    executor's tasks (repeated_shard_ids)."""
    infos = [shards.work.shard_info(index) for index in range(shards.count)]  # (fetched by Shards.of)
    read = [index for index in range(shards.count) if not infos[index]["left_out"]]  # a file that could be read
    shards.work.fetch_shards(read, ["columns.parquet", "row_numbers.npy"])
    parts = [PartSummary(infos[index]["path"], infos[index]["format"],
                         pa.int64() if infos[index]["integer_ids"] else pa.string(), infos[index]["rows"],
                         shards.work.shard_schema(index),
                         row_numbers=np.asarray(shards.work.shard_array(index, "row_numbers")))
             for index in read]
    plan = plan_combination(parts, text_field, id_field, on_error,
                            repeated=lambda kept, id_type: repeated_shard_ids(
                                shards.work, [read[part] for part in kept], [parts[part].rows for part in kept],
                                id_type, executor))
    left_out = {read[part] for part in plan.left_out}
    # The rows the rules leave out, a shard at a time (only those are held).
    rows_left_out = [np.zeros(0, np.int64)]
    for part, index in enumerate(read):
        start, stop = int(shards.rows[index]), int(shards.rows[index + 1])
        mask = np.zeros(stop - start, dtype=bool) if index in left_out else plan.keep_mask(part, stop - start)
        if mask is not None:
            rows_left_out.append(start + np.flatnonzero(~mask))
    # A file left out whole is one record: the records its reader made for it are dropped.
    records = [record for index in range(shards.count) if index not in left_out
               for record in infos[index]["records"]] + plan.records
    work = shards.work
    return ShardDocuments(Kept.leaving_out(np.concatenate(rows_left_out)), plan.id_type,
                          lambda: plan.ids(parts, lambda part: shard_ids(work, read[part], plan.id_type)),
                          plan.schema, records, left_out)


def shard_ids(work: WorkAt, index: int, id_type: pa.DataType) -> pa.Array:
    """The ids of every row shard ``index`` spilled, in order, cast to ``id_type``."""
    ids = WorkDir.attach(work).shard_table(index, "ids.parquet")["id"].combine_chunks()
    return ids.cast(id_type)


def id_hash_rows(work: WorkAt, index: int, start: int, id_type: str):
    """Task: a pandas DataFrame (hash uint64, row int64) with a 64-bit hash of each id of
    shard ``index`` (cast to the type named ``id_type``; pandas' hash_array, the same in every
    process) and its row among the rows of the shards checked together (start: the shard's
    first)."""
    import pandas as pd

    ids = shard_ids(work, index, pa.type_for_alias(id_type))
    hashes = pd.util.hash_array(ids.to_numpy(zero_copy_only=False))
    return pd.DataFrame({"hash": hashes, "row": np.arange(start, start + len(ids), dtype=np.int64)})


def repeated_shard_ids(work: WorkDir, indices: list[int], rows: list[int], id_type: pa.DataType,
                       executor: Executor) -> list:
    """rules.RepeatedIds over the ids of shards ``indices`` (in order; rows: how many each
    has): the executor finds the rows whose ids' hashes collide (a task per shard hashes its
    ids; on a cluster, a shuffle on the hash), and only those rows' ids are read here and
    grouped exactly (rules.id_groups), so that no hash collision counts as a repeat."""
    starts = np.cumsum([0] + rows).astype(np.int64)
    work_at = work.for_tasks(executor.in_process)
    colliding = executor.colliding_rows(id_hash_rows, [(work_at, index, int(start), str(id_type))
                                                       for index, start in zip(indices, starts)], "the id check")
    if colliding.shape[0] == 0:
        return []
    ids = gathered_ids(work, starts, lambda part: indices[part], colliding, id_type)
    return [(identifier, colliding[members]) for identifier, members in id_groups(ids)]


def gathered_ids(work: WorkAt, starts: np.ndarray, shard_of: Callable[[int], int], rows: np.ndarray,
                 id_type: pa.DataType) -> pa.Array:
    """The ids of ``rows`` (int64 (k,), any order) of shards read one after another, in that
    order, string ids wide (ids.wide): starts: int64, the first row of each part; shard_of:
    the shard a part is. Each shard holding some of the rows is read once."""
    parts, order = [], []
    for part, mine in by_shard(starts, rows):
        local = rows[mine] - starts[part]
        parts.append(wide(shard_ids(work, shard_of(part), id_type).take(pa.array(local))))
        order.append(mine)
    if not parts:
        return wide(pa.array([], id_type))
    place = np.empty(rows.shape[0], dtype=np.int64)
    place[np.concatenate(order)] = np.arange(rows.shape[0])
    return pa.concat_arrays(parts).take(pa.array(place))


class ShardIds:
    """The run's document ids (ids.IdSource) read from the shards' ids.parquet when asked,
    not held: ``take`` reads only the shards holding the rows asked for."""

    def __init__(self, shards: Shards, rows: "Kept", documents: ShardDocuments, count: int):
        self.shards, self.rows, self.documents = shards, rows, documents
        self.type, self.count = documents.id_type, count

    def __len__(self) -> int:
        return self.count

    def take(self, rows: np.ndarray) -> pa.Array:
        return IdsAt(self.shards.work, self.shards.rows, self.rows, self.type).take(rows)

    def all(self) -> pa.Array:
        return self.documents.all_ids()


@dataclass
class IdsAt:
    """What gives a task the ids of document rows (ShardIds.take's), from the work directory
    at ``work_at``: its Shards.rows, the run's documents among the spilled rows
    (ShardDocuments.rows) and their ids' type."""

    work_at: WorkAt
    shard_rows: np.ndarray
    rows: Kept
    type: pa.DataType

    def take(self, rows: np.ndarray) -> pa.Array:
        """The ids of ``rows`` (int64, any order), in that order, string ids wide (ids.wide):
        each shard holding some of them read once."""
        spilled = self.rows.spilled(np.asarray(rows, dtype=np.int64))
        return gathered_ids(self.work_at, self.shard_rows, lambda index: index, spilled, self.type)


class PieceDoesNotStand(Exception):
    """A piece of a file that, read alone, does not give what reading the whole file gives for
    its lines (io/pieces.py): the file is to be read whole."""


class ShardReader:
    """Reads the shards (input files, or pieces of large ones: io/pieces.py) for the stages,
    here or on a Dask worker.

    files: absolute paths; shown: each file as the client displays it (ids ``<path>:<row>``,
    messages), decided once on the client so that a worker's working directory never changes
    an id; shards: what each shard reads (set by plan; until then, every file whole)."""

    def __init__(self, files: list[Location], text_field: str, id_field: Optional[str], on_error: str):
        self.shown = [display_path(path) for path in files]
        self.files = [storage.location_of(path).absolute() for path in files]
        self.text_field, self.id_field, self.on_error = text_field, id_field, on_error
        self.shards = [Shard(index) for index in range(len(files))]

    @property
    def count(self) -> int:
        return len(self.shards)

    def file_of(self, index: int) -> int:
        """The input file shard ``index`` reads (an index into files)."""
        return self.shards[index].file

    def read(self, index: int) -> tuple[Corpus, list[dict], Optional[pa.Table]]:
        """Shard ``index`` as (corpus, skipped records, its own columns as an empty table).
        Under on_error "skip" a file that cannot be read is an empty corpus, one record
        naming it, and no columns (None); otherwise its InputError is raised."""
        shard = self.shards[index]
        path, shown = self.files[shard.file], self.shown[shard.file]
        if shard.absorbed:
            return self._nothing(), [], None
        try:
            source = SourceFile(shown, format_of(path), location=storage.full_name(path), piece=shard.piece)
            part = read_one_file(path, source, self.text_field, self.id_field, False, self.on_error)
        except InputError as error:
            if shard.piece is not None:  # the whole file's read says what is wrong, and where first
                raise PieceDoesNotStand(index) from None
            if self.on_error != "skip":
                raise
            return self._nothing(), [file_record(error, shown)], None
        if shard.piece is not None and source.format == "jsonl" and (part.records or source.line_by_line):
            raise PieceDoesNotStand(index)  # (io/pieces.py: read alone, its lines were judged alone)
        if shard.piece is not None and not part.table.num_rows:
            # A piece without records (blank lines, rows left out) has no columns of its own.
            return self._nothing(), part.records, None
        corpus = build_corpus([part], self.text_field, self.id_field, InputFiles(), [str(path)])
        # part.table keeps the file's own columns, before the corpus casts the text column.
        return corpus, part.records, part.table.slice(0, 0)

    def stamp(self, index: int) -> Optional[FileStamp]:
        """What shard ``index`` is about to read, as the write checks it (io/stamps.py); None
        for a shard that reads nothing (absorbed) or a file that cannot be looked at."""
        shard = self.shards[index]
        path = self.files[shard.file]
        return None if shard.absorbed else read_stamp(path, format_of(path), shard.piece)

    def unchanged(self, index: int, stamp: Optional[FileStamp], consequence: str):
        """A block that reads shard ``index`` again: its file is refused if it is not as
        ``stamp`` says, before the block and after it (io/stamps.py: unchanged_while)."""
        shard = self.shards[index]
        return unchanged_while(self.files[shard.file], self.shown[shard.file], stamp, shard.piece, consequence)

    def _nothing(self) -> Corpus:
        """The empty corpus of a shard that holds no document."""
        return build_corpus([], self.text_field, self.id_field, InputFiles(), [])

    def corpus(self, index: int) -> Corpus:
        return self.read(index)[0]

    def texts(self, shards: Shards, rows: np.ndarray) -> pa.Array:
        return self.texts_of_rows(shards.rows, rows)

    def texts_of_rows(self, shard_rows: np.ndarray, rows: np.ndarray) -> pa.Array:
        """The content of corpus rows ``rows`` (int64 (k,), ascending), as one array in that
        order (content.gathered_type: large_string, or large_list<int64> of token ids), reading
        each shard that holds some of them once; shard_rows: int64 (s + 1,) the first corpus
        row of each shard."""
        parts = []
        for index, mine in by_shard(shard_rows, rows):
            local = rows[mine] - shard_rows[index]
            texts = self.corpus(index).text_array()
            parts.append(texts.take(pa.array(local)).cast(gathered_type(texts.type)))
        return pa.concat_arrays(parts) if parts else pa.array([], pa.large_string())


# --- shingle sets spilled for exact verification -----------------------------------------------


def spill_sets(work: WorkDir, name: str, reader: ShardReader, shard_rows: np.ndarray, params: DedupParams,
               backend: BackendOrName, docs: np.ndarray, executor: Executor) -> str:
    """The shingle sets of spilled rows ``docs`` (int64, ascending) under WORK/sets/<spill>/, one
    task per shard that holds some of them (spill_shard_sets); returns <spill>: ``name`` and a
    digest of ``docs``, so that every set of rows has its own spill (a stage may ask for sets
    several times, as identical_copies' rounds do) and a shard already spilled for the same rows
    (an earlier, interrupted run's) is not spilled again."""
    name = f"{name}-{hashlib.sha256(np.ascontiguousarray(docs, dtype=np.int64).tobytes()).hexdigest()[:16]}"
    holding = list(by_shard(shard_rows, docs))
    done = work.done_of([f"sets/{name}/{index:05d}" for index, _ in holding])
    todo = [(index, docs[mine] - shard_rows[index]) for (index, mine), finished in zip(holding, done, strict=True)
            if not finished]
    if not todo:
        return name
    root = work.for_tasks(executor.in_process)
    reader, params = executor.share(reader, params)  # (what every shard's task reads)
    executor.map(spill_shard_sets, [(root, name, reader, index, local, params, backend) for index, local in todo],
                 "the shingle sets")
    return name


def exact_by_spill(work: WorkDir, name: str, reader: ShardReader, shard_rows: np.ndarray, params: DedupParams,
                   backend: BackendOrName, first: np.ndarray, second: np.ndarray, weights: np.ndarray,
                   threshold: float, executor: Executor) -> np.ndarray:
    """Exact Jaccard (float64 (p,)) of the pairs (first[i], second[i]) of spilled rows that
    reach ``threshold``, BELOW_THRESHOLD for the others (verify.pair_jaccard_at_least): the
    sets of their documents are spilled shard by shard (each shard read once), then the pairs
    are checked a chunk at a time from the spill, so memory holds one shard and one chunk of
    sets; weights: int64 (p,) the code points of each pair's two texts, to cut the chunks."""
    name = spill_sets(work, name, reader, shard_rows, params, backend, np.unique(np.concatenate([first, second])),
                      executor)
    chunks = weighted_ranges(weights, 8 * batch_bytes(params, get_backend(backend)))
    root = work.for_tasks(executor.in_process)
    # In this process a task has every core; a cluster runs tasks side by side on its workers.
    threads = HOST_THREADS if executor.in_process else 1
    shard_rows, = executor.share(shard_rows)  # (every chunk's task reads the offsets)
    parts = executor.map(spilled_jaccard, [(root, name, shard_rows, first[a:b], second[a:b], threshold, threads)
                                           for a, b in chunks],
                         "exact verification")
    return np.concatenate(parts) if parts else np.zeros(0, np.float64)


def sign_shard(work_at: WorkAt, reader: ShardReader, index: int, params: DedupParams, backend: BackendOrName,
               log: Optional[StageLog] = None, progress: Optional[Progress] = None) -> None:
    """Task: read shard ``index``, sign it in batches and store what the later stages need;
    log and progress: this process's, or None on a worker."""

    backend, log, progress = get_backend(backend), log or StageLog(), progress or Progress()
    spec, banding = params.shingle_spec(), params.banding()
    permutations = draw_permutations(banding.bands * banding.rows, params.seed)
    path, shown = reader.files[reader.file_of(index)], reader.shown[reader.file_of(index)]
    with log.stage("read"):
        stamp = reader.stamp(index)  # (before the read: a change while it reads is one the write refuses)
        try:
            corpus, records, raw = reader.read(index)
            if corpus.num_rows:  # (a file left out, or one without records, has no content type of its own)
                check_content(corpus.texts.type, params.shingle, reader.text_field, shown)
        except (PieceDoesNotStand, InputError):
            if reader.shards[index].piece is None:
                raise
            # A piece's type is its own lines' (all-null token ids read as text): only its info,
            # for WorkDirStore.sign to read the file whole, which then decides.
            WorkDir.attach(work_at).write_shard(index, {}, {"path": shown, "stands": False})
            return
    keys, active, signatures = signature_pass(corpus.units(), spec, banding, permutations, params,
                                              backend, log, progress)
    keys = backend.to_host(keys)
    lengths = unit_lengths(corpus.texts)
    source = corpus.files[0] if corpus.files else None
    row_numbers = (source.row_numbers if source is not None and source.row_numbers is not None
                   else np.arange(1, corpus.num_rows + 1, dtype=np.int64))
    data, offsets = corpus.units()
    # Per row: its line (JSONL) or row number, for FILE:LINE; its UTF-8 bytes and whether its
    # text is null, for the report of the documents the input rules keep.
    arrays = {"keys": keys.T, "signatures": signatures, "row_hash": band_key_row_hash(keys),
              "active": active, "lengths": lengths, "row_numbers": np.asarray(row_numbers, np.int64),
              "text_bytes": content_bytes((data, offsets)),
              "null": corpus.texts.is_null().to_numpy(zero_copy_only=False)}
    info = {"path": shown, "format": format_of(path), "left_out": raw is None,
            "rows": corpus.num_rows, "active": int(active.shape[0]),
            "records": records, "integer_ids": pa.types.is_integer(corpus.ids.type),
            "stamp": None if stamp is None else stamp.as_list()}
    with log.stage("spill"):
        tables = {"ids": pa.table({"id": corpus.ids})}
        if raw is not None:
            tables["columns"] = raw
        WorkDir.attach(work_at).write_shard(index, arrays, info, tables)
    del corpus, keys, signatures
    release_unused_memory()


class ShardedTable:
    """The input rows of a staged run, read again shard by shard when they are needed: the
    ``table`` of its DedupResult. ``write_kept`` writes the kept rows; ``[text_field].take``
    gives a few texts (report.html)."""

    def __init__(self, shards: Shards, reader: ShardReader, rows: Kept, schema: pa.Schema, left_out: set[int],
                 stamps: list[Optional[FileStamp]], executor: Optional[Executor] = None):
        self.shards, self.reader, self.rows, self._schema = shards, reader, rows, schema
        self.left_out = left_out
        # Each shard's stamp as it was read (io/stamps.py), held here: a run without a work
        # directory writes after its temporary one is gone.
        self.stamps = stamps
        self.executor = executor  # the run's, for write_files

    def __getitem__(self, name: str):
        if name != self.reader.text_field:
            raise KeyError(name)
        outer = self

        class Texts:
            def take(self, rows) -> pa.Array:
                rows = np.asarray(rows.to_numpy() if hasattr(rows, "to_numpy") else rows, dtype=np.int64)
                order = np.argsort(rows, kind="stable")
                texts = outer.reader.texts(outer.shards, outer.rows.spilled(rows[order]))
                return texts.take(pa.array(np.argsort(order)))

        return Texts()

    def schema(self) -> pa.Schema:
        """The columns of the files the documents come from, unified (the input rules')."""
        return self._schema

    def kept_table(self, keep: np.ndarray) -> pa.Table:
        """The kept rows as one table (DedupResult.deduplicated): as large as what is kept."""
        schema = self.schema()
        return pa.Table.from_batches(list(self._kept_batches(Kept.of_mask(keep), schema,
                                                             "the kept rows cannot be read from it again: run again")),
                                     schema=schema)

    def _kept_batches(self, kept: Kept, schema: pa.Schema, consequence: str):
        """The kept rows, a shard at a time, each shard's file checked against its stamp
        (consequence: what its error says beside the change)."""
        for index in self._shards_read():
            with self.reader.unchanged(index, self.stamps[index], consequence):
                table = self.reader.corpus(index).table.filter(pa.array(self._shard_keep(index, kept)))
                yield from as_input(table, schema).to_batches(ROWS_PER_WRITE)

    def check_unchanged(self) -> None:
        """Refuse (InputError) an input file whose size or modification time is no longer
        that of the run's read of it (each file once, each of its stamps' times)."""
        seen, consequence = set(), self.unwritten()
        for index, stamp in enumerate(self.stamps):
            file = self.reader.file_of(index)
            if stamp is not None and (file, stamp.size, stamp.mtime_ns) not in seen:
                seen.add((file, stamp.size, stamp.mtime_ns))
                check_unchanged(self.reader.files[file], self.reader.shown[file], stamp, check_bytes=False,
                                consequence=consequence)

    def unwritten(self) -> str:
        """What the error of a write refused for a changed input says beside the change: to
        run again, in an empty work directory where the run's is still there (a temporary
        one, a Dask run's without --work-dir, is gone by the time it writes)."""
        left = self.shards.work.folder.read_small(MANIFEST) is not None
        return CHANGED_INPUT if left else "nothing was written: run again"

    def _shard_keep(self, index: int, kept: Kept) -> np.ndarray:
        """bool over shard ``index``'s rows as read: the rows that are documents ``kept`` keeps
        (kept: a Kept over the documents), made for this shard alone."""
        return shard_keep(self.shards.rows, self.rows, index, kept.mask)

    def _shards_read(self) -> list[int]:
        """The shards whose rows the run read as input (all but those left out whole: their
        columns are not the run's and none of their rows is a document)."""
        return [index for index in range(self.shards.count) if index not in self.left_out]

    def _files_read(self) -> list[tuple[int, list[int]]]:
        """(input file, its shards read, in order) for every file with shards the run read."""
        shards_of: dict[int, list[int]] = {}
        for index in self._shards_read():
            shards_of.setdefault(self.reader.file_of(index), []).append(index)
        return list(shards_of.items())

    def file_paths(self) -> list[Location]:
        """The input files the run read (absolute; empty files too), in order: one output file
        each."""
        return [self.reader.files[file] for file, _ in self._files_read()]

    def write_files(self, folder: Location, names: list[str], format: str,
                    removed: Union[np.ndarray, ClusterParts]) -> None:
        """Each of file_paths' kept rows into folder/<its name> (layout.output_names; removed:
        int64 ascending, the documents removed, or the parts of a cluster's run that hold
        them): one task per file, on the run's Dask workers while its client is still
        connected (each worker reads the file's shards and writes its file; folder must be on a
        file system they share, or on object storage), else in this process. A task gets the
        rows of its shards not to write, not a mask over them, or (parts) finds them from the
        parts of its shards' documents (DroppedRows, one object that every task shares: sent to
        each worker once)."""
        files = [(indices, storage.child_name(folder, name))
                 for (_, indices), name in zip(self._files_read(), names, strict=True)]
        checks = [([self.stamps[i] for i in indices], self.unwritten()) for indices, _ in files]
        tasks: list[tuple]
        executor = self.executor if self.executor is not None and self.executor.connected() else LocalExecutor()
        if isinstance(removed, ClusterParts):
            reader, finder = executor.share(self.reader, DroppedRows(self.shards.rows, self.rows, removed))
            tasks = [(reader, indices, None, path, format, finder, *check)
                     for (indices, path), check in zip(files, checks)]
        else:
            kept = Kept.leaving_out(removed)
            reader, = executor.share(self.reader)
            tasks = [(reader, indices, [np.flatnonzero(~self._shard_keep(index, kept)) for index in indices],
                      path, format, None, *check) for (indices, path), check in zip(files, checks)]
        executor.map(write_file_rows, tasks, "writing the kept rows")

    def write_kept(self, path: Path, format: str, removed: np.ndarray) -> None:
        """The kept rows (removed: int64 ascending, the documents removed), shard by shard, into
        one file."""
        # Every shard's rows get the unified columns, as the in-memory run's one table has them.
        schema, kept, consequence = self.schema(), Kept.leaving_out(removed), self.unwritten()
        if format == "parquet":
            with pq.ParquetWriter(path, schema) as writer:
                for batch in self._kept_batches(kept, schema, consequence):
                    writer.write_batch(batch)
        else:
            write_jsonl_batches(self._kept_batches(kept, schema, consequence), path)


def shard_keep(shard_rows: np.ndarray, rows: Kept, index: int,
               kept_mask: Callable[[int, int], np.ndarray]) -> np.ndarray:
    """bool over shard ``index``'s rows as read (shard_rows: Shards.rows): the rows that are
    documents (rows: ShardDocuments.rows) kept, where kept_mask(start, stop) gives which of
    the documents start .. stop-1 are kept (bool (stop - start,))."""
    start, stop = int(shard_rows[index]), int(shard_rows[index + 1])
    keep = rows.mask(start, stop)
    first = rows.count(0, start)  # the shard's first document
    keep[keep] = kept_mask(first, first + int(keep.sum()))
    return keep


@dataclass
class DroppedRows:
    """What finds, in a write_file_rows task, the rows as read of a shard that it does not
    write: those that are not documents (rows: ShardDocuments.rows; shard_rows: Shards.rows),
    and the documents that the parts of a cluster's run remove (ClusterParts, read for the
    shard's documents alone)."""

    shard_rows: np.ndarray
    rows: Kept
    removed: ClusterParts

    def of(self, index: int) -> np.ndarray:
        def kept_mask(start: int, stop: int) -> np.ndarray:
            return Kept.leaving_out(self.removed.removed_rows(start, stop)).mask(start, stop)

        return np.flatnonzero(~shard_keep(self.shard_rows, self.rows, index, kept_mask))


def write_file_rows(reader: ShardReader, indices: list[int], dropped: Optional[list[np.ndarray]], path: str,
                    format: str, finder: Optional[DroppedRows], stamps: list[Optional[FileStamp]],
                    consequence: str) -> None:
    """Task: one input file's kept rows into ``path``, from its shards ``indices`` (the file
    whole, or its pieces with records, in order; dropped: int64, each one's rows as read that
    are not written, or None where ``finder`` finds them), as layout.write_kept_file and
    write_kept_pieces write them. The file is refused (InputError, saying ``consequence``
    beside the change) where it is not as each shard's stamp (``stamps``, in the order of
    indices) says, before and after it is read again: the rows and lines written are those
    the run read."""

    def rows(number: int) -> FileRows:
        index = indices[number]
        corpus = reader.corpus(index)
        assert corpus.files, "a file that could not be read is left out"
        drop = dropped[number] if dropped is not None else cast(DroppedRows, finder).of(index)
        return FileRows(corpus.files[0], corpus.table, Kept.leaving_out(drop).mask(0, corpus.table.num_rows))

    def write(local: Path) -> None:
        with ExitStack() as checks:
            for index, stamp in zip(indices, stamps, strict=True):
                checks.enter_context(reader.unchanged(index, stamp, consequence))
            if len(indices) == 1 and reader.shards[indices[0]].piece is None:
                write_kept_file(rows(0), local, format)
            else:
                write_kept_pieces((rows(number) for number in range(len(indices))), local, format)

    write_to(path, write)


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

    def __init__(self, work: WorkDir, found: InputFiles, params: DedupParams, backend: Backend, text_field: str,
                 id_field: Optional[str], on_error: str):
        self.work, self.found, self.params, self.backend = work, found, params, backend
        self.text_field, self.id_field = text_field, id_field
        self.reader = ShardReader(found.files, text_field, id_field, on_error)
        self.spec = params.shingle_spec()
        # The copies stage reads its groups' spilled sets back a chunk at a time, as exact_by_spill.
        self.copy_batch_cost = 8 * batch_bytes(params, backend)
        self.work_dir: Optional[str] = work.shown
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
        self.combination = shard_documents(shards, self.text_field, self.id_field, self.reader.on_error, executor)
        # The shards none of whose rows is a document: files that could not be read, and files
        # the input rules left out whole (on_error "skip").
        self.files_left_out = {index for index in range(shards.count) if shards.work.shard_info(index)["left_out"]}
        self.files_left_out |= self.combination.left_out
        # The documents are the spilled rows (all shards' rows as read) that the input rules
        # keep, in order; so are the active documents among the spilled active rows.
        self.rows = self.combination.rows
        self.documents = self.rows.count(0, int(shards.rows[-1]))
        # Inputs that gave no document stop the run (under either on_error) here, after reading.
        documents_read(self.found, self.documents, self.reader.shown, self.skipped_records())
        # Which spilled active rows are documents (each Kept holds nothing where the input
        # rules left no row out); the active rows and lengths stay in the shards until asked.
        active_left_out = [np.zeros(0, np.int64)]
        if not self.rows.every:
            for index in range(shards.count):
                active = np.asarray(shards.work.shard_array(index, "active"))
                live = self.rows.mask(int(shards.rows[index]), int(shards.rows[index + 1]))[active]
                active_left_out.append(int(shards.active_starts[index]) + np.flatnonzero(~live))
        self.active_rows = Kept.leaving_out(np.concatenate(active_left_out))
        m = self.active_rows.count(0, int(shards.active_starts[-1]))
        self.active = SpilledActive(shards, self.rows, self.active_rows, m, self.documents)
        self.lengths = SpilledLengths(shards, self.rows, self.documents)
        self.signatures = SpilledSignatures(shards, banding.bands * banding.rows, self.active_rows, m)

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

            def need(shard=shard, path=path) -> int:
                if shard.file not in file_bytes:
                    file_bytes[shard.file] = file_read_bytes(path, format_of(path))
                return (shard_read_estimate(path, format_of(path), shard.piece, file_bytes[shard.file])
                        + batches_in_flight_bytes(self.backend, batch_bytes(self.params, self.backend)))

            # A shard is read whole: the budget must hold it and the batches in flight.
            budget.check(f"reading {display_path(path)}", need,
                         "lower shard_bytes= (large plain JSONL and Parquet files are cut at it), cut "
                         "the input into smaller files, or raise max_memory=")
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
                self.work.remove_shard(index)
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

    def row_hashes(self) -> np.ndarray:
        return self.active_rows.taken(self.shards.concat("row_hash"))

    def spilled_keep(self, in_lsh: np.ndarray) -> np.ndarray:
        """bool over the spilled active rows of every shard: the run's active documents where
        in_lsh (bool (m,))."""
        return self.active_rows.spread(in_lsh, int(self.shards.active_starts[-1]), False)

    def band_keys(self, in_lsh: np.ndarray) -> "SpilledKeys":
        return SpilledKeys(self.shards, self.bands, self.spilled_keep(in_lsh))

    def active_rows_at(self, places: np.ndarray) -> np.ndarray:
        """int64 (k,): the rows of the active documents at ``places`` (int64 or uint64 (k,))
        among the spilled active rows of every shard (Kept.spilled's places; each one the run
        keeps)."""
        return self.active.at_places(places)

    def active_positions(self, rows: np.ndarray) -> np.ndarray:
        return self.active.positions_of(rows)

    def row_hash_parts(self) -> list[tuple[int, Optional[np.ndarray]]]:
        """Per shard (index, positions int64) over its spilled active rows: the run's position
        of each among the active documents (-1 where the input rules left it out), for a task
        that reads the shard's row hashes (dask.row_hash_rows). positions None: the place
        itself, as every place is where the input rules left no row out (the common case: then
        nothing per document is made here and sent)."""
        starts = self.shards.active_starts
        if self.active_rows.every:
            return [(index, None) for index in range(self.shards.count)]
        positions = self.active_rows.spread(np.arange(self.active.shape[0]), int(starts[-1]), -1)
        return [(index, positions[starts[index]:starts[index + 1]]) for index in range(self.shards.count)]

    def band_key_parts(self, out_of_lsh: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """Per shard (index, int64 places within its spilled active rows) of the rows that take
        no part in LSH: the active documents at positions ``out_of_lsh`` (int64 ascending), and
        the active rows the input rules left out; for a task that reads the shard's keys
        (dask.band_key_rows). Made a shard at a time: nothing per document is held."""
        starts, spilled = self.shards.active_starts, self.active_rows.spilled(out_of_lsh)
        parts = []
        for index in range(self.shards.count):
            start, stop = int(starts[index]), int(starts[index + 1])
            keep = self.active_rows.mask(start, stop)
            keep[spilled[np.searchsorted(spilled, start):np.searchsorted(spilled, stop)] - start] = False
            parts.append((index, np.flatnonzero(~keep)))
        return parts

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
        return SourcePointers(files, file, numbers, self.text_field)

    def cached(self, stage: str, compute: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        stored = self.work.load_stage(stage)
        if stored is None:
            stored = compute()
            self.work.save_stage(stage, stored)
        return stored

    def pair_parts(self, kind: str, count: int, sizes: Optional[np.ndarray] = None) -> "PairParts":

        return PairParts.of(self.work.location, kind, count, sizes)

    def exact_jaccard(self, name: str, first: np.ndarray, second: np.ndarray, threshold: float,
                      executor: Executor, progress: Progress) -> np.ndarray:
        return exact_by_spill(self.work, name, self.reader, self.shards.rows, self.params, self.task_backend(executor),
                              self.rows.spilled(first), self.rows.spilled(second),
                              self.lengths[first] + self.lengths[second], threshold, executor)

    def set_reader(self, name: str, docs: np.ndarray, executor: Executor) -> Callable[[np.ndarray], Any]:
        """The sets of parts of rows ``docs`` (int64, ascending): all of them spilled now under
        WORK/sets/<name>-<digest>/ shard by shard (spill_sets: each shard read once), each part
        read back from the spill when asked."""
        spill = spill_sets(self.work, name, self.reader, self.shards.rows, self.params, self.task_backend(executor),
                           self.rows.spilled(docs), executor)
        root, shard_rows = self.work, self.shards.rows  # (read here, in this process)
        return lambda part: spilled_sets(root, spill, shard_rows, self.rows.spilled(part))

    def document_sets(self, docs: np.ndarray, progress: Progress, executor: Optional[Executor] = None,
                      name: str = "documents"):
        """The shingle sets of rows ``docs`` (int64, ascending) as one binary CSR matrix (see
        verify.document_sets): spilled under WORK/sets/<name>/ shard by shard, then read back.
        A name is for one set of rows (spill_sets)."""
        sets_of = self.set_reader(name, docs, executor or LocalExecutor())
        progress.advance(int(docs.shape[0]))
        return sets_of(docs)

    def set_rows(self, docs: np.ndarray, progress: Progress, executor: Optional[Executor] = None,
                 name: str = "documents") -> tuple[Any, np.ndarray]:
        """(document_sets(docs), positions 0 .. len(docs)-1): the form MemoryStore.set_rows
        gives, for a store that keeps no sets in memory."""
        return self.document_sets(docs, progress, executor, name), np.arange(docs.shape[0])

    def array_executor(self, executor: Executor) -> Executor:
        return executor  # (its tasks read the shards)

    def lengths_at(self) -> LengthsAt:
        """``lengths`` as a task opens it (LengthsAt)."""
        return LengthsAt(self.work.location, self.shards.rows, self.shards.active_starts, self.rows, self.documents)

    def ids_at(self) -> IdsAt:
        """The documents' ids as a task reads them (IdsAt)."""
        return IdsAt(self.work.location, self.shards.rows, self.rows, self.combination.id_type)

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

    def table(self, executor: Optional[Executor] = None) -> "ShardedTable":
        """The input rows of the run's documents (DedupResult.table); executor: the run's,
        which writes the kept rows' files too while it is connected."""
        stamps = [FileStamp.of_list(self.work.shard_info(index)["stamp"]) for index in range(self.shards.count)]
        return ShardedTable(self.shards, self.reader, self.rows, self.combination.schema, self.files_left_out, stamps,
                            executor)
