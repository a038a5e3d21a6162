"""The input rows of a staged run as its result writes them (keptrows.HeldRows' methods): its
shards, each input file read again and its rows written by a task per file (ShardedTable,
write_file_rows), the removed rows taken from the clusters or, on a cluster, from their parts
(DroppedRows); the counts by file a task per input file (file_tally)."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pyarrow as pa

from ..core.shingling import ShingleSpec
from ..io import storage
from ..io.fields import field_type, without_views
from ..io.layout import KEPT_DIR, FileRows, as_input, write_kept_file, write_kept_pieces
from ..io.stamps import FileStamp, check_unchanged
from ..io.staging import tasks_folder
from ..io.storage import Location
from ..io.write import ROWS_PER_WRITE, parquet_writer, write_jsonl_batches, write_to
from ..memory import release_unused_memory
from .kept import Kept
from .keptrows import NO_ROWS
from .protocols import Executor, LocalExecutor
from .removedrows import REMOVED_DIR, RemovedOf, removed_schema, shard_removed, write_file_removed, write_tables
from .shards import Shards, by_shard
from .shardreader import ShardReader, texts_at
from .sourcecounts import Tally, group_values, masked, tally
from .workdir import MANIFEST, WorkDir


# What a write refused for an input file that changed says beside the change, where the run's
# work directory is still there: a resume would take the stages of the file as it was (a
# change of its bytes alone does not stop a resume).
CHANGED_INPUT = "nothing was written: run again with an empty work directory"


class ShardedTable:
    """The input rows of a staged run, read again shard by shard when they are needed: the
    ``table`` of its DedupResult. ``write_kept`` writes the kept rows; ``[text_field].take``
    gives a few texts (report.html)."""

    def __init__(self, shards: Shards, reader: ShardReader, rows: Kept, schema: pa.Schema, left_out: set[int],
                 stamps: list[Optional[FileStamp]]):
        self.shards, self.reader, self.rows, self._schema = shards, reader, rows, schema
        self.left_out = left_out
        # Each shard's stamp as it was read (io/stamps.py), held here: a run without a work
        # directory writes after its temporary one is gone.
        self.stamps = stamps
        # Rows (int64 ascending) and their texts that the kept rows' write took as it read
        # their shards (write_files' texts_of), so that report.html reads no shard again.
        self.texts_taken: tuple[np.ndarray, pa.Array] = (NO_ROWS, pa.array([], pa.large_string()))

    def __getitem__(self, name: str):
        if name != self.reader.text_field:
            raise KeyError(name)
        outer = self

        class Texts:
            def take(self, rows) -> pa.Array:
                rows = np.asarray(rows.to_numpy() if hasattr(rows, "to_numpy") else rows, dtype=np.int64)
                taken_rows, taken = outer.texts_taken
                at = np.searchsorted(taken_rows, rows)
                if (at < taken_rows.shape[0]).all() and np.array_equal(taken_rows[at], rows):
                    return taken.take(pa.array(at))
                order = np.argsort(rows, kind="stable")
                texts = outer.reader.texts_of_rows(outer.shards.rows, outer.rows.spilled(rows[order]), outer.stamps,
                                                   "the texts cannot be read from it again: run again")
                return texts.take(pa.array(np.argsort(order)))

        return Texts()

    @property
    def schema(self) -> pa.Schema:
        """The columns of the files the documents come from, unified (the input rules'), as
        a Table's ``schema``."""
        return self._schema

    def kept_table(self, keep: np.ndarray) -> pa.Table:
        """The kept rows as one table (DedupResult.deduplicated): as large as what is kept."""
        schema = self.schema
        return pa.Table.from_batches(list(self._kept_batches(Kept.of_mask(keep), schema,
                                                             "the kept rows cannot be read from it again: run again")),
                                     schema=schema)

    def _kept_batches(self, kept: Kept, schema: pa.Schema, consequence: str, texts_of: np.ndarray = NO_ROWS):
        """The kept rows, a shard at a time, each shard's file checked against its stamp
        (consequence: what its error says beside the change); the texts of documents
        ``texts_of`` (int64 ascending) taken on the way (texts_taken)."""
        wanted, taken = self._wanted(texts_of), []
        for index in self._shards_read():
            with self.reader.unchanged(index, self.stamps[index], consequence):
                corpus = self.reader.corpus(index)
                if index in wanted:
                    taken.append(texts_at(corpus, wanted[index]))
                table = corpus.table.filter(pa.array(shard_keep(self.shards.rows, self.rows, index, kept.mask)))
                yield from as_input(table, schema).to_batches(ROWS_PER_WRITE)
        if taken:
            self.texts_taken = (texts_of, pa.concat_arrays(taken))

    def _wanted(self, documents: np.ndarray) -> dict[int, np.ndarray]:
        """{shard: int64 places among its rows as read} of ``documents`` (int64 ascending), for
        the shards that hold some of them."""
        spilled = self.rows.spilled(documents)
        return {index: spilled[mine] - self.shards.rows[index] for index, mine in by_shard(self.shards.rows, spilled)}

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

    def write_files(self, staging: Path, out: Location, names: list[str], format: str, removed: RemovedOf,
                    executor: Optional[Executor] = None, texts_of: np.ndarray = NO_ROWS) -> None:
        """Each of file_paths' kept rows into deduplicated/<its name> of the output ``out``
        staged in ``staging`` (layout.output_names; removed: what gives the documents removed,
        removedrows.removed_of): one task per file, on ``executor``'s workers where given (each
        worker reads the file's shards and writes its file; the output must be on a file system
        they share, or on object storage: staging.tasks_folder), else in this process. A task
        finds the rows of its shards not to write (DroppedRows, one object that every task
        shares: sent to each worker once). texts_of: int64 ascending, documents whose texts the
        tasks take as they read their shards (report.html's: texts_taken)."""
        folder = tasks_folder(staging, out, KEPT_DIR)
        files = [(indices, storage.child_name(folder, name))
                 for (_, indices), name in zip(self._files_read(), names, strict=True)]
        wanted = self._wanted(texts_of)
        executor = executor or LocalExecutor()
        reader, finder = executor.share(self.reader, DroppedRows(self.shards.rows, self.rows, removed))
        consequence = self.unwritten()
        taken = executor.map(write_file_rows, [(reader, indices, path, format, finder,
                                                [self.stamps[i] for i in indices], consequence,
                                                [wanted.get(i, NO_ROWS) for i in indices])
                                               for indices, path in files], "writing the kept rows")
        # The files' shards ascend, and so do the rows of texts_of in them.
        parts = [texts for file_texts in taken for texts in file_texts]
        if parts:
            self.texts_taken = (texts_of, pa.concat_arrays(parts))

    def write_removed_files(self, staging: Path, out: Location, names: list[str], format: str,
                            removed_of: RemovedOf, spec: ShingleSpec, executor: Optional[Executor] = None) -> None:
        """Each of file_paths' removed rows into removed/<its name> of the output (removedrows.py;
        removed_of gives the removed documents of a range, spec the run's shingling): one task
        per file, on ``executor`` as write_files runs them."""
        folder = tasks_folder(staging, out, REMOVED_DIR)
        files = [(indices, storage.child_name(folder, name))
                 for (_, indices), name in zip(self._files_read(), names, strict=True)]
        executor = executor or LocalExecutor()
        reader, rows, finder = executor.share(self.reader, self.rows, removed_of)
        consequence = self.unwritten()
        executor.map(write_file_removed, [(reader, self.shards.rows, rows, indices, path, format, finder, spec,
                                           [self.stamps[i] for i in indices], consequence)
                                          for indices, path in files], "writing the removed rows")

    def tally_files(self, removed_of: RemovedOf, size_name: str, field: Optional[str],
                    executor: Optional[Executor] = None) -> list[Tally]:
        """Each of file_paths' counts (sourcecounts.file_tally; removed_of: the removed
        documents with their kept ones; size_name: the spilled sizes counted; field: the group
        column, or None): one task per file, on ``executor`` as write_files runs them."""
        executor = executor or LocalExecutor()
        # (as the rows read hold it: io.corpus.Corpus holds no view type)
        value_type = without_views(field_type(self.schema, field)) if field is not None else None
        reader, rows, finder = executor.share(self.reader, self.rows, removed_of)
        consequence = self.unwritten()
        work_at = self.shards.work.for_tasks(executor.in_process)
        return executor.map(file_tally, [(reader, work_at, self.shards.rows, rows, indices, finder, size_name, field,
                                          value_type, [self.stamps[i] for i in indices], consequence)
                                         for _, indices in self._files_read()], "counting by file")

    def write_removed(self, path: Path, format: str, removed_of: RemovedOf, spec: ShingleSpec) -> None:
        """The removed rows, shard by shard, into one file, with the unified columns (as
        write_kept)."""
        consequence, schema = self.unwritten(), self.schema

        def tables():
            for index in self._shards_read():
                with self.reader.unchanged(index, self.stamps[index], consequence):
                    yield shard_removed(self.reader, self.shards.rows, self.rows, index, removed_of, spec, schema)

        write_tables(tables(), path, format, removed_schema(schema, removed_of))

    def write_kept(self, path: Path, format: str, removed: np.ndarray, texts_of: np.ndarray = NO_ROWS) -> None:
        """The kept rows (removed: int64 ascending, the documents removed), shard by shard, into
        one file; texts_of: as write_files takes it."""
        # Every shard's rows get the unified columns, as the in-memory run's one table has them.
        schema, kept, consequence = self.schema, Kept.leaving_out(removed), self.unwritten()
        batches = self._kept_batches(kept, schema, consequence, texts_of)
        if format == "parquet":
            with parquet_writer(path, schema) as writer:
                for batch in batches:
                    writer.write_batch(batch)
        else:
            write_jsonl_batches(batches, path)


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
    and the documents removed (removedrows.removed_of: held, or read from the parts of a
    cluster's run for the shard's documents alone)."""

    shard_rows: np.ndarray
    rows: Kept
    removed: RemovedOf

    def of(self, index: int) -> np.ndarray:
        return np.flatnonzero(~shard_keep(self.shard_rows, self.rows, index, self.kept_mask))

    def kept_mask(self, start: int, stop: int) -> np.ndarray:
        """bool (stop - start,): False at the removed documents among rows start .. stop-1."""
        return Kept.leaving_out(self.removed.of(start, stop).docs).mask(start, stop)


def write_file_rows(reader: ShardReader, indices: list[int], path: str, format: str, finder: DroppedRows,
                    stamps: list[Optional[FileStamp]], consequence: str, wanted: list[np.ndarray]) -> list[pa.Array]:
    """Task: one input file's kept rows into ``path``, from its shards ``indices`` (the file
    whole, or its pieces with records, in order; finder: which of each one's rows as read are
    not written), as layout.write_kept_file and write_kept_pieces write them. The file is
    refused (InputError, saying ``consequence`` beside the change) where it is not as each
    shard's stamp (``stamps``, in the order of indices) says, before and after it is read
    again: the rows and lines written are those the run read. Returns the texts of each
    shard's ``wanted`` rows (int64, ascending places among its rows as read; shardreader.texts_at),
    those of the shards that have any, in order."""
    taken: list[pa.Array] = []

    def rows(number: int) -> FileRows:
        index = indices[number]
        corpus = reader.corpus(index)
        assert corpus.files, "a file that could not be read is left out"
        if wanted[number].shape[0]:
            taken.append(texts_at(corpus, wanted[number]))
        return FileRows(corpus.files[0], corpus.table,
                        Kept.leaving_out(finder.of(index)).mask(0, corpus.table.num_rows))

    def write(local: Path) -> None:
        with ExitStack() as checks:
            for index, stamp in zip(indices, stamps, strict=True):
                checks.enter_context(reader.unchanged(index, stamp, consequence))
            if len(indices) == 1 and reader.shards[indices[0]].piece is None:
                write_kept_file(rows(0), local, format)
            else:
                write_kept_pieces((rows(number) for number in range(len(indices))), local, format)

    write_to(path, write)
    release_unused_memory()  # (the file's read leaves several times its size free in Arrow's pool)
    return taken


def file_tally(reader, work_at, shard_rows: np.ndarray, rows: Kept, indices: list[int], removed_of: RemovedOf,
               size_name: str, field: Optional[str], value_type: Optional[pa.DataType],
               stamps: list, consequence: str) -> Tally:
    """Task: the Tally of one input file, from its shards ``indices`` (reader: the run's
    shardreader.ShardReader; shard_rows: Shards.rows; rows: which rows are documents,
    ShardDocuments.rows; size_name: the spilled per-row sizes, "text_bytes" or "lengths").
    With a group column, each shard is read again, refused as the kept rows' write refuses a
    file that is no longer as its stamp says, and the kept documents' values are read from the
    shards that hold them."""
    work = WorkDir.attach(work_at)
    file_of_shard = np.array([shard.file for shard in reader.shards], np.int64)
    columns: dict[int, pa.Array] = {}  # shard -> its group column over its rows as read

    def column(index: int) -> pa.Array:
        if index not in columns:
            assert field is not None and value_type is not None
            columns[index] = group_values(reader.corpus(index).table, field, value_type)
        return columns[index]

    tallies = []
    for index, stamp in zip(indices, stamps, strict=True):
        start, stop = int(shard_rows[index]), int(shard_rows[index + 1])
        documents = rows.mask(start, stop)
        first = rows.count(0, start)
        sizes = np.asarray(work.shard_array(index, size_name), np.int64)[documents]
        removed = removed_of.of(first, first + sizes.shape[0])
        here = removed.kept >= 0
        kept_rows = rows.spilled(np.maximum(removed.kept, 0))  # (rows as read of the kept documents)
        kept_shard = np.searchsorted(shard_rows, kept_rows, side="right") - 1
        same = here & (file_of_shard[kept_shard] == file_of_shard[index]) if kept_rows.shape[0] else here
        if field is None:
            tallies.append(tally(sizes, removed.docs - first, same))
            continue
        with reader.unchanged(index, stamp, consequence):
            values = column(index).filter(pa.array(documents))
        kept_groups = rows_values(column, shard_rows, kept_rows, value_type)
        tallies.append(tally(sizes, removed.docs - first, same, values, masked(kept_groups, ~here), ~here))
    return Tally.joined(tallies)


def rows_values(column: Callable[[int], pa.Array], shard_rows: np.ndarray, spilled: np.ndarray,
                value_type: pa.DataType) -> pa.Array:
    """The group values (of ``value_type``) of the rows as read ``spilled`` (int64, any order),
    each shard that holds some of them read once (column(index): its values)."""
    if not spilled.shape[0]:
        return pa.array([], value_type)
    parts, order = [], []
    for index, mine in by_shard(shard_rows, spilled):
        parts.append(column(index).take(pa.array(spilled[mine] - shard_rows[index], pa.int64())))
        order.append(mine)
    taken = pa.concat_arrays(parts)
    return taken.take(pa.array(np.argsort(np.concatenate(order)), pa.int64()))
