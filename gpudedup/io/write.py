"""Writing files: a table as Parquet or JSON lines (all its rows, or the kept ones, a slice at
a time), a dict as JSON, and a task's file wherever its target is (a path, or a URL on object
storage, written locally and uploaded once).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .storage import location_of, upload

# The formats the kept rows are written in (format=, --format).
OUTPUT_FORMATS = ("parquet", "jsonl")
# The rows a write takes at a time.
ROWS_PER_WRITE = 16384


def kept_batches(table: pa.Table, keep: np.ndarray) -> Iterator[pa.RecordBatch]:
    """The rows of ``table`` where ``keep`` (bool (n,)) is True, in order, a slice at a time,
    so that the kept rows are never all copied at once."""
    for start in range(0, table.num_rows, ROWS_PER_WRITE):
        piece = table.slice(start, ROWS_PER_WRITE).filter(pa.array(keep[start : start + ROWS_PER_WRITE]))
        yield from piece.to_batches()


def write_to(target: str, write: Callable[[Path], None]) -> None:
    """``write(path)`` into ``target`` (a path, or a URL on object storage, as storage.location_of
    takes it): a task's file of an output on the workers (the kept rows of an input file, a
    part of pairs/), written where the target is, or into a temporary file and uploaded once."""
    located = location_of(target)
    if isinstance(located, Path):
        write(located)
        return
    with tempfile.TemporaryDirectory(prefix="gpudedup-part-") as folder:
        write(Path(folder) / located.name)
        upload(Path(folder) / located.name, located)


def write_parquet(table: pa.Table, path: Path, keep: Optional[np.ndarray] = None) -> None:
    """Write ``table`` (only the rows where ``keep`` is True, when given) as Parquet."""
    if keep is None:
        pq.write_table(table, path)
        return
    with pq.ParquetWriter(path, table.schema) as writer:
        for batch in kept_batches(table, keep):
            writer.write_batch(batch)


def write_jsonl(table: pa.Table, path: Path, keep: Optional[np.ndarray] = None) -> None:
    """One JSON object per row (only the rows where ``keep`` is True, when given), columns in
    table order, UTF-8; values JSON cannot hold (dates, bytes) are written as strings."""
    write_jsonl_batches(kept_batches(table, keep) if keep is not None else table.to_batches(ROWS_PER_WRITE), path)


def write_jsonl_batches(batches, path: Path) -> None:
    """Record batches as JSON lines into one file (see write_jsonl)."""
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for batch in batches:
            handle.writelines(
                json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in batch.to_pylist()
            )


def write_json(data: dict, path: Path) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
