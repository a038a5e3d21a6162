"""The input rows of a run as its result writes them (the kept rows, the removed rows, the
counts by file), one class per runner with the same methods: an in-memory run's table
(HeldRows, here), and a staged run's shards (shardedrows.ShardedTable)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import pyarrow as pa

from ..core.shingling import ShingleSpec
from ..io.fields import field_column
from ..io.layout import KEPT_DIR, as_input, not_one_table, rows_by_file, write_kept_files
from ..io.source import SourceFile
from ..io.stamps import check_unchanged
from ..io.storage import Location, location_of
from ..io.write import kept_batches, write_jsonl, write_parquet
from .kept import Kept
from .protocols import Executor
from .removedrows import REMOVED_DIR, RemovedOf, in_memory_removed, removed_schema, write_tables
from .sourcecounts import Tally, memory_tallies


NO_ROWS = np.zeros(0, np.int64)


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
