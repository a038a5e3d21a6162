"""What reading the input will take in memory, estimated from the files before any is read.

--max-memory must stop a run before it is killed, and reading is where a run over a large
input first grows: every file's table stays in memory (the Corpus), while one file is parsed
its raw bytes and the parser's buffers are alive beside the tables read before it, and the
tables are then combined into one text buffer. Measured, the resident set peaks at about 2.7
times the text read (tests/test_memory_budget.py), so the estimate is KEPT_FACTOR times the
files' text, plus the largest transient of one file, plus a constant for the readers' own
buffers. The figures come from the files' own metadata, cheaply:

- JSONL and .txt: the file's size (the text, with its JSON quoting, held once as Arrow
  strings), and the same again while the file is parsed;
- .gz: the uncompressed size from the gzip trailer (ISIZE, the size modulo 2**32 of the last
  member; a trailer claiming less than the compressed size, or more than deflate's largest
  ratio of 1032:1 allows, is not believed, and the file counts at 4x its size),
  plus the compressed bytes while it is read;
- Parquet: the uncompressed size of its row groups from the footer, and the same again while
  the columns are decoded.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pyarrow.parquet as pq

# Bytes per byte of a JSONL or text file while it is parsed, beyond its table.
PARSE_OVERHEAD = 1.0
# Peak resident bytes per byte of text read: the tables, their combination and the text
# buffer cut from it are alive together for a moment.
KEPT_FACTOR = 3
READER_BYTES = 96 << 20  # measured: about 60 MB for a first read of 10 MB


def gzip_uncompressed_size(path: Path, compressed: int) -> int:
    """The uncompressed size a gzip file's trailer gives, or 4x the compressed size when the
    trailer cannot be right (over 4 GiB uncompressed, concatenated members, a truncated file)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(compressed - 4, 0))
            trailer = handle.read(4)
    except OSError:
        return 4 * compressed
    size = struct.unpack("<I", trailer)[0] if len(trailer) == 4 else 0
    return size if compressed <= size <= 1032 * compressed else 4 * compressed


def parquet_uncompressed_size(path: Path, on_disk: int) -> int:
    """The uncompressed size of a Parquet file's row groups (footer), or 4x its size on disk
    when the footer cannot be read (reading will then name the problem)."""
    try:
        metadata = pq.ParquetFile(path).metadata
    except Exception:  # noqa: BLE001 -- any unreadable footer: the reader reports it properly
        return 4 * on_disk
    return sum(metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups))


def file_read_bytes(path: Path, format: str) -> tuple[int, int]:
    """(bytes the file's table keeps, bytes alive only while it is read) for one input file."""
    try:
        on_disk = os.stat(path).st_size
    except OSError:
        return 0, 0  # reading will name the problem
    if format == "parquet":
        size = parquet_uncompressed_size(path, on_disk)
        return size, size
    if path.name.endswith(".gz"):
        size = gzip_uncompressed_size(path, on_disk)
        return size, int(PARSE_OVERHEAD * size) + on_disk
    return on_disk, int(PARSE_OVERHEAD * on_disk)


def read_bytes_estimate(files: list[tuple[Path, str]]) -> int:
    """Estimated peak bytes of reading ``files`` ((path, format) pairs) into one corpus."""
    sizes = [file_read_bytes(path, format) for path, format in files]
    return (KEPT_FACTOR * sum(kept for kept, _ in sizes) + max((during for _, during in sizes), default=0)
            + READER_BYTES)
