"""The input rows of a run as its result writes them (the kept rows, the removed rows, the
counts by file), one class per runner with the same methods: an in-memory run's table
(HeldRows), and a staged run's shards, each input file read again and its rows written by a
task per file (ShardedTable, write_file_rows), the removed rows taken from the clusters or,
on a cluster, from their parts (DroppedRows)."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np
import pyarrow as pa

from ..core.shingling import ShingleSpec
from ..io import storage
from ..io.fields import field_column, field_type, without_views
from ..io.layout import (KEPT_DIR, FileRows, as_input, not_one_table, rows_by_file, write_kept_file, write_kept_files,
                         write_kept_pieces)
from ..io.source import SourceFile
from ..io.stamps import FileStamp, check_unchanged
from ..io.staging import tasks_folder
from ..io.storage import Location, location_of
from ..io.write import (ROWS_PER_WRITE, kept_batches, parquet_writer, write_jsonl, write_jsonl_batches, write_parquet,
                        write_to)
from ..memory import release_unused_memory
from .kept import Kept
from .protocols import Executor, LocalExecutor
from .removedrows import (REMOVED_DIR, RemovedOf, in_memory_removed, removed_schema, shard_removed, write_file_removed,
                          write_tables)
from .shards import Shards, by_shard
from .shardreader import ShardReader, texts_at
from .sourcecounts import Tally, file_tally, memory_tallies
from .workdir import MANIFEST


# What a write refused for an input file that changed says beside the change, where the run's
# work directory is still there: a resume would take the stages of the file as it was (a
# change of its bytes alone does not stop a resume).
CHANGED_INPUT = "nothing was written: run again with an empty work directory"

NO_ROWS = np.zeros(0, np.int64)


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


@dataclass
class HeldRows:
    """The input rows of an in-memory run, as its result writes them (ShardedTable's methods):
    ``table``, every row a document, in the order of the files of ``sources`` it was read
    from (io.source.SourceFile, none for data given in Python), ``file_documents`` rows each;
    ``text_field`` its content column; ``schema``: for a table given in Python, its columns,
    in whose types its rows are written back (as its kept rows are given back: layout.as_input),
    else None. Everything is written by this process (an executor given is not used)."""

    table: pa.Table
    text_field: str
    sources: list[SourceFile]
    file_documents: list[int]
    schema: Optional[pa.Schema] = None

    @property
    def documents(self) -> int:
        return self.table.num_rows

    def file_paths(self) -> list[Location]:
        """ShardedTable.file_paths: the files read, in order."""
        return [location_of(source.location) for source in self.sources if source.location is not None]

    def check_unchanged(self) -> None:
        """ShardedTable.check_unchanged: each file as the run's read of it, by size and time."""
        for source in self.sources:
            if source.location is not None:
                check_unchanged(location_of(source.location), source.path, source.stamp, check_bytes=False)

    def write_files(self, staging: Path, out: Location, names: list[str], format: str, removed: RemovedOf,
                    executor: Optional[Executor] = None, texts_of: np.ndarray = NO_ROWS) -> None:
        """ShardedTable.write_files: each file's kept rows into staging/deduplicated/<its name>."""
        (staging / KEPT_DIR).mkdir()
        kept = Kept.leaving_out(removed.of(0, self.documents).docs).mask(0, self.documents)
        write_kept_files(staging / KEPT_DIR, names, rows_by_file(self.table, self.sources, kept), format)

    def check_one_table(self) -> None:
        """Refuse one file of every input file's rows where the files combined round some
        values of one of them (io/read.concat_tables), as layout.as_input refuses a staged
        run's rows cast to the types combined."""
        for source in self.sources:
            for name, kind in source.rounded:
                raise not_one_table(name, kind)

    def write_kept(self, path: Path, format: str, removed: np.ndarray, texts_of: np.ndarray = NO_ROWS) -> None:
        """ShardedTable.write_kept: the kept rows (removed: int64 ascending) into one file."""
        keep = Kept.leaving_out(removed).mask(0, self.documents)
        self.check_one_table()
        if self.schema is None:
            (write_parquet if format == "parquet" else write_jsonl)(self.table, path, keep=keep)
            return
        kept = (pa.Table.from_batches([batch]) for batch in kept_batches(self.table, keep))
        write_tables((as_input(table, self.schema) for table in kept), path, format, self.schema)

    def write_removed(self, path: Path, format: str, removed_of: RemovedOf, spec: ShingleSpec) -> None:
        """ShardedTable.write_removed: the removed rows into one file, a file's at a time (the
        row groups a staged run writes where each file is one shard)."""
        self.check_one_table()
        schema = self.schema or self.table.schema
        write_tables(self._removed_by_file(removed_of, spec, schema), path, format, removed_schema(schema, removed_of))

    def write_removed_files(self, staging: Path, out: Location, names: list[str], format: str,
                            removed_of: RemovedOf, spec: ShingleSpec, executor: Optional[Executor] = None) -> None:
        """ShardedTable.write_removed_files: each file's removed rows into staging/removed/<its name>."""
        for name, table in zip(names, self._removed_by_file(removed_of, spec), strict=True):
            write_tables([table], staging / REMOVED_DIR / name, format)

    def _removed_by_file(self, removed_of: RemovedOf, spec: ShingleSpec,
                         schema: Optional[pa.Schema] = None) -> Iterator[pa.Table]:
        """The removed rows of each file of ``sources`` in turn (of the whole table, for data
        given in Python), with the columns of ``schema``, or each file's own."""
        texts, start = field_column(self.table, self.text_field), 0
        sources: list[Optional[SourceFile]] = list(self.sources) or [None]  # (None: data given in Python)
        for source in sources:
            rows = self.documents if source is None else source.rows
            if schema is None and source is not None:  # (written back in its own types)
                source.check_not_rounded()
            yield in_memory_removed(self.table, texts, start, start + rows, removed_of, spec,
                                    schema or (source.schema if source is not None else None) or self.table.schema)
            start += rows

    def tally_files(self, removed_of: RemovedOf, size_name: str, field: Optional[str],
                    executor: Optional[Executor] = None) -> list[Tally]:
        """ShardedTable.tally_files, counted over the table."""
        return memory_tallies(self.table, field_column(self.table, self.text_field), self.file_documents,
                              removed_of.of(0, self.documents), size_name == "lengths", field)


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
