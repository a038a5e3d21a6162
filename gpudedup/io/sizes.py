"""What reading the input will take in memory, estimated from the files before any is read.

--max-memory must stop a run before it is killed, and reading is where a run over a large
input first grows: every file's table stays in memory (the Corpus), while one file is parsed
its raw bytes and the parser's buffers are alive beside the tables read before it, and the
tables are then combined into one text buffer. Measured when the factors were chosen, the
resident set peaked at about 2.7 times the text read; tests/test_memory_budget.py checks that
the estimate covers what real reads allocate. So the estimate is KEPT_FACTOR times the
files' text, plus the largest transient of one file, plus a constant for the readers' own
buffers. The figures come from the files themselves, without reading their texts into memory:

- JSONL and .txt: the file's size (the text, with its JSON quoting, held once as Arrow
  strings), and the same again while the file is parsed;
- .gz: the uncompressed size, counted by decompressing the file once without keeping anything
  (the trailer's ISIZE covers only the last member), plus the compressed bytes while it is
  read;
- Parquet: the decoded size of its columns (the footer's uncompressed sizes, and for
  dictionary-encoded string columns the lengths of the values the indices point to), and the
  same again while the columns are decoded.
"""

from __future__ import annotations

import zlib

import pyarrow.compute as pc

from . import storage
from .storage import Location

# Bytes per byte of a JSONL or text file while it is parsed, beyond its table.
PARSE_OVERHEAD = 1.0
# Peak resident bytes per byte of text read: the tables, their combination and the text
# buffer cut from it are alive together for a moment.
KEPT_FACTOR = 3
READER_BYTES = 96 << 20  # measured: about 60 MB for a first read of 10 MB


def gzip_uncompressed_size(path: Location, compressed: int) -> int:
    """The bytes a gzip file decompresses to, counted by decompressing it (nothing is kept):
    the trailer's ISIZE is only the last member's size modulo 2**32, and files of several
    members (cat, bgzip, pigz --independent) are common. A file that cannot be decompressed
    counts at 4x its size (reading will name the problem)."""
    total = 0
    try:
        with storage.open_stream(path) as handle:
            decompressor = zlib.decompressobj(wbits=31)
            while chunk := handle.read(1 << 20):
                while chunk:
                    total += len(decompressor.decompress(chunk, 1 << 24))
                    chunk = decompressor.unconsumed_tail
                    if decompressor.eof:  # the next member starts in what is left
                        chunk = decompressor.unused_data + chunk
                        decompressor = zlib.decompressobj(wbits=31)
                        if not chunk.strip(b"\0"):
                            break
    except (OSError, zlib.error):
        return max(total, 4 * compressed)
    return total


def parquet_uncompressed_size(path: Location, on_disk: int) -> int:
    """What a Parquet file's columns take decoded. The footer gives each column chunk's
    uncompressed size, but for a dictionary-encoded string column that is the dictionary
    plus indices, far less than the strings Arrow will hold (many copies of one text); such
    columns are decoded a batch of rows at a time and their lengths summed. A file whose
    footer cannot be read counts at 4x its size."""
    try:
        metadata = storage.parquet_metadata(path)
        size, dictionary_columns = 0, set()
        for group in range(metadata.num_row_groups):
            for column in range(metadata.num_columns):
                chunk = metadata.row_group(group).column(column)
                if chunk.physical_type == "BYTE_ARRAY" and any("DICTIONARY" in e for e in chunk.encodings):
                    dictionary_columns.add(chunk.path_in_schema)
                else:
                    size += chunk.total_uncompressed_size
        top_level = sorted(c for c in dictionary_columns if "." not in c)
        if len(top_level) < len(dictionary_columns):  # nested strings: the footer is all we have
            return 4 * on_disk + size
        if top_level:
            # Decoded 256 rows at a time with a small read buffer: the strings of one batch
            # are alive at once (measured: +72 MB and 0.06 s for a shard of 64 MB of text;
            # reading them as dictionaries instead built one over the whole column, +385 MB).
            parquet = storage.parquet_file(path, pre_buffer=False, buffer_size=1 << 20)
            for batch in parquet.iter_batches(batch_size=256, columns=top_level):
                for part in batch.columns:
                    size += int(pc.sum(pc.binary_length(part)).as_py() or 0) + 8 * len(part)
    except Exception:  # noqa: BLE001 -- any unreadable file: the reader reports it properly
        return 4 * on_disk
    return size


def file_read_bytes(path: Location, format: str) -> tuple[int, int]:
    """(bytes the file's table keeps, bytes alive only while it is read) for one input file."""
    try:
        on_disk = storage.file_size(path)
    except OSError:
        return 0, 0  # reading will name the problem
    if format == "parquet":
        size = parquet_uncompressed_size(path, on_disk)
        return size, size
    if path.name.endswith(".gz"):
        size = gzip_uncompressed_size(path, on_disk)
        return size, int(PARSE_OVERHEAD * size) + on_disk
    return on_disk, int(PARSE_OVERHEAD * on_disk)


def piece_share(path: Location, format: str, piece) -> float:
    """The share of a file's bytes that a piece of it (io/pieces.Piece) reads: of the file's
    size (JSONL byte ranges) or of its row groups' decoded size (Parquet)."""
    try:
        if format == "parquet":
            metadata = storage.parquet_metadata(path)
            sizes = [metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups)]
            return sum(sizes[piece.start:piece.stop]) / max(sum(sizes), 1)
        return (piece.stop - piece.start) / max(storage.file_size(path), 1)
    except (OSError, ValueError):
        return 1.0  # reading will name the problem


def shard_read_estimate(path: Location, format: str, piece, file_bytes: tuple[int, int]) -> int:
    """read_bytes_estimate of one file read whole (piece None) or of one piece of it;
    file_bytes: the file's file_read_bytes (computed once for all its pieces)."""
    kept, during = file_bytes
    if piece is not None:
        share = piece_share(path, format, piece)
        kept, during = int(kept * share), int(during * share)
    return reading_estimate([(kept, during)])


def read_bytes_estimate(files: list[tuple[Location, str]]) -> int:
    """Estimated peak bytes of reading ``files`` ((path, format) pairs) into one corpus."""
    return reading_estimate([file_read_bytes(path, format) for path, format in files])


def reading_estimate(sizes: list[tuple[int, int]]) -> int:
    """Estimated peak bytes of reading files of file_read_bytes ``sizes`` into one corpus."""
    return (KEPT_FACTOR * sum(kept for kept, _ in sizes) + max((during for _, during in sizes), default=0)
            + READER_BYTES)
