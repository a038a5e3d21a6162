"""Writing a run's results into an output directory, atomically.

Everything is written into a fresh temporary directory beside the target and renamed into
place at the end, so an interrupted or failed run leaves either the previous complete output
or none, never a half-written directory that looks complete.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator, Optional

import numpy as np

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import OutputError

OUTPUT_FORMATS = ("parquet", "jsonl")


def check_output_dir(path: str | os.PathLike, overwrite: bool,
                     inputs: Iterable[str | os.PathLike] = ()) -> Path:
    """Refuse an output location that exists as a file, or as a non-empty directory unless
    ``overwrite``, or that is, holds or lies inside one of the ``inputs`` (replacing it would
    delete input, and outputs inside an input directory would be read as input next time).
    Called before any work, so a refused run costs nothing."""
    out = Path(path)
    resolved = out.resolve()
    for given in inputs:
        source = Path(given).resolve()
        if source == resolved or resolved in source.parents or (source.is_dir() and source in resolved.parents):
            raise OutputError(f"{out}: the output directory must not be, hold or lie inside the input "
                              f"{given}; choose another --output")
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise OutputError(f"{out}: output directory exists and is not empty; use --overwrite to replace it")
    parent = out.absolute().parent
    if not parent.is_dir():
        raise OutputError(f"{out}: parent directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"{out}: cannot write in {parent} (permission denied)")
    return out


@contextmanager
def atomic_output_dir(path: str | os.PathLike, overwrite: bool,
                      inputs: Iterable[str | os.PathLike] = ()) -> Iterator[Path]:
    """Yield a temporary directory to fill; on success it replaces ``path`` in one rename."""
    out = check_output_dir(path, overwrite, inputs)
    parent = out.absolute().parent
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=parent))
    try:
        # mkdtemp makes 0700 directories; outputs should follow the user's umask like any file.
        umask = os.umask(0)
        os.umask(umask)
        staging.chmod(0o777 & ~umask)
        yield staging
        replace_dir(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def replace_dir(staging: Path, out: Path) -> None:
    """Put ``staging`` where ``out`` is. An existing ``out`` is moved aside first and removed
    after, so at every moment ``out`` is either the old complete output, absent, or the new."""
    if not out.exists():
        staging.rename(out)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.absolute().parent))
    old.rmdir()
    out.rename(old)
    staging.rename(out)
    shutil.rmtree(old, ignore_errors=True)


ROWS_PER_WRITE = 16384


def kept_batches(table: pa.Table, keep: np.ndarray) -> Iterator[pa.RecordBatch]:
    """The rows of ``table`` where ``keep`` (bool (n,)) is True, in order, a slice at a time,
    so that the kept rows are never all copied at once."""
    for start in range(0, table.num_rows, ROWS_PER_WRITE):
        piece = table.slice(start, ROWS_PER_WRITE).filter(pa.array(keep[start : start + ROWS_PER_WRITE]))
        yield from piece.to_batches()


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
    batches = kept_batches(table, keep) if keep is not None else table.to_batches(ROWS_PER_WRITE)
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for batch in batches:
            handle.writelines(
                json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in batch.to_pylist()
            )


def write_json(data: dict, path: Path) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
