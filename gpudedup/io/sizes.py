"""What reading the input will take in memory, estimated from the files before any is read.

--max-memory must stop a run before it is killed, and reading is where a run over a large
input first grows: every file's table stays in memory (the Corpus), while one file is parsed
its raw bytes and the parser's buffers are alive beside the tables read before it, and the
tables are then combined into one text buffer. Measured when the factors were chosen, the
resident set peaked at about 2.7 times the text read; tests/test_memory_budget.py checks that
the estimate covers what real reads allocate. So the estimate is KEPT_FACTOR times what the
files' tables keep, plus the largest transient of one file, plus a constant for the readers'
own buffers. What a table keeps is its text, per record RECORD_BYTES (its line number, its
offsets) and, without an id field, its id ``<path>:<line>`` twice (the ids and the id checks'
table of them): what a file of many tiny records is mostly made of; and CELL_BYTES per null
cell of its columns. The figures come from the files themselves, without keeping their texts
in memory:

- JSONL: the file's size (the text, with its JSON quoting, held once as Arrow strings), and the
  same again while the file is parsed; its records, and the null cells of the columns Arrow's
  JSON reader makes of them (JsonlColumns: a column per distinct field, as long as the rows,
  so a file whose every line has a field of its own holds lines x lines cells), counted by
  reading it once;
- .gz: the same of the uncompressed bytes, counted by decompressing the file once without
  keeping anything (the trailer's ISIZE covers only the last member), plus the compressed
  bytes while it is read; .zst likewise (a zstd frame need not record its size), decompressed
  by pyarrow's codec;
- .txt: the file's size, twice, and one record;
- Arrow IPC: the decoded size of its record batches (their buffers: a local file memory-mapped
  costs no copy to measure) and their rows, and its size on disk while it is read;
- Parquet: the decoded size of its columns (the footer's uncompressed sizes, at least a
  fixed-width value or an offset per row, null or not, and for dictionary-encoded string
  columns the lengths of the values the indices point to), and the same again while the
  columns are decoded; its rows, from the footer.
"""

from __future__ import annotations

import zlib
from collections import Counter
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import storage
from .arrow import ipc_batches
from .formats import compression_of
from .jsonl_lines import outside_strings
from .storage import Location

# Bytes per byte of a JSONL or text file while it is parsed, beyond its table.
PARSE_OVERHEAD = 1.0
# Peak resident bytes per byte of text read: the tables, their combination and the text
# buffer cut from it are alive together for a moment.
KEPT_FACTOR = 3
READER_BYTES = 96 << 20  # measured: about 60 MB for a first read of 10 MB
# Bytes a table keeps per record beyond its text and its id (times KEPT_FACTOR at the peak).
# Measured on lines of {"text":"a b"} (15 bytes a line) read without an id field, each record
# allocates about 130 bytes and 4.3 times its id <path>:<line> at the peak (the line shapes
# and numbers, the offsets, the ids built and the id checks' table of them): 217 bytes for a
# path of 12 characters, 485 for one of 75. 92 bytes a record stay after the read.
RECORD_BYTES = 64
ID_COPIES = 2  # a path id is kept twice (times KEPT_FACTOR): the ids and the id checks' table
# Bytes of a null cell: an 8-byte value or an offset and its validity bit. Arrow's JSON reader
# holds about 16 per cell at its peak (a 5,000 x 5,000 table of 200 MB, read at a peak 400 MB
# above the start), which KEPT_FACTOR covers.
CELL_BYTES = 8
SCAN_BYTES = 1 << 20  # a JSONL file's bytes looked at a time by JsonlColumns (its arrays: about 25 MB)
COLON = 0x3A
MAX_NAMES = 1 << 20  # distinct fields JsonlColumns tells apart (past it the estimate is huge anyway)
# Bytes a decoded value of each fixed-width Parquet type takes at least, null or not (a
# BYTE_ARRAY: its offset).
PARQUET_VALUE_BYTES = {"BOOLEAN": 1, "INT32": 4, "FLOAT": 4, "INT64": 8, "DOUBLE": 8, "INT96": 8,
                       "BYTE_ARRAY": 4}


class JsonlColumns:
    """What Arrow's JSON reader makes of a JSONL text beyond its bytes, counted from the lines
    fed in order (feed, then finish): its records, and the null cells of its columns.

    The reader makes a column of every distinct field, as long as the rows of the object that
    holds it: a top-level field's and a nested object's (a struct) as long as the records, a
    field of the objects in a list as long as those objects. A row that lacks the field holds
    a null there. So the cells of the fields of objects at one depth of brackets are about
    max(records, objects at that depth) x their distinct names; those that are not values of
    the text (the fields' occurrences) are null. Fields, objects and depths are found outside
    JSON strings (an escaped quote does not end one), vectorised over SCAN_BYTES at a time.
    """

    def __init__(self) -> None:
        self.records = 0
        self.values = 0  # fields' occurrences: the cells that are not null
        self.objects: Counter = Counter()  # depth -> objects opened there
        self.names: set[tuple[int, bytes]] = set()  # (depth, field name)
        self.pending: list[bytes] = []  # the line being read, in pieces

    def feed(self, chunk: bytes) -> None:
        last = chunk.rfind(b"\n")
        if last < 0:
            self.pending.append(chunk)
            return
        first = chunk.find(b"\n")
        self.count(b"".join(self.pending) + chunk[:first + 1])
        if last > first:
            self.count(memoryview(chunk)[first + 1:last + 1])
        self.pending = [chunk[last + 1:]] if last + 1 < len(chunk) else []

    def finish(self) -> None:
        rest = b"".join(self.pending)
        self.pending = []
        if rest:
            self.count(rest + b"\n")

    def null_cells(self) -> int:
        """The cells of the columns Arrow makes of the lines fed that hold null."""
        names = Counter(depth for depth, _ in self.names)
        cells = sum(max(self.records, self.objects[depth]) * count for depth, count in names.items())
        return max(cells - self.values, 0)

    def count(self, data) -> None:
        """Count whole lines: ``data`` (bytes or a memoryview) ends with a newline."""
        buf = np.frombuffer(data, np.uint8)
        ends = np.flatnonzero(buf == 10)
        self.records += int(np.count_nonzero(np.diff(ends, prepend=-1) > 1))
        outside = outside_strings(buf, ends)
        level, step = outside.levels(buf)
        if not level.size:
            return
        first = np.flatnonzero(np.diff(outside.line, prepend=-1))  # each line's first byte outside
        level -= np.repeat(level[first] - step[first], np.diff(np.append(first, level.size)))
        byte = buf[outside.at]
        depths, opened = np.unique(level[byte == 0x7B], return_counts=True)
        self.objects.update(dict(zip(depths.tolist(), opened.tolist())))
        # A field: the string closed by the quote before a colon outside strings.
        named = np.flatnonzero(byte == COLON)
        after = outside.after[named]
        named = named[after - 1 >= outside.first_quote[outside.line[named]]]
        self.values += int(named.size)
        if not named.size or len(self.names) >= MAX_NAMES:
            return
        closing = outside.after[named]
        spans = np.empty(2 * named.size, np.int64)  # [start, stop) of each name, with the gaps between
        spans[0::2], spans[1::2] = outside.quotes[closing - 1] + 1, outside.quotes[closing]
        pieces = pa.Array.from_buffers(pa.large_binary(), spans.size - 1, [None, pa.py_buffer(spans),
                                                                             pa.py_buffer(data)])
        names = pieces.take(pa.array(np.arange(0, spans.size, 2)))
        distinct = pa.table({"depth": pa.array(level[named]), "name": names})
        distinct = distinct.group_by(["depth", "name"]).aggregate([])
        self.names.update(zip(distinct["depth"].to_pylist(), distinct["name"].to_pylist()))


def gzip_uncompressed_size(path: Location, compressed: int, columns: Optional[JsonlColumns] = None) -> int:
    """The bytes a gzip file decompresses to, counted by decompressing it (nothing is kept):
    the trailer's ISIZE is only the last member's size modulo 2**32, and files of several
    members (cat, bgzip, pigz --independent) are common. A file that cannot be decompressed
    counts at 4x its size (reading will name the problem). columns: fed the bytes."""
    total = 0
    try:
        with storage.open_stream(path) as handle:
            decompressor = zlib.decompressobj(wbits=31)
            while chunk := handle.read(1 << 20):
                while chunk:
                    out = decompressor.decompress(chunk, SCAN_BYTES)
                    total += len(out)
                    if columns is not None:
                        columns.feed(out)
                    chunk = decompressor.unconsumed_tail
                    if decompressor.eof:  # the next member starts in what is left
                        chunk = decompressor.unused_data + chunk
                        decompressor = zlib.decompressobj(wbits=31)
                        if not chunk.strip(b"\0"):
                            break
    except (OSError, zlib.error):
        return max(total, 4 * compressed)
    finally:
        if columns is not None:
            columns.finish()
    return total


def stream_uncompressed_size(path: Location, compression: str, compressed: int, columns: JsonlColumns) -> int:
    """The bytes a file compressed with ``compression`` (a pyarrow codec: "zstd") decompresses
    to, counted by decompressing it through pyarrow (nothing is kept); a file that cannot be
    decompressed counts at 4x its size (reading will name the problem). columns: fed the bytes."""
    total = 0
    try:
        with storage.open_stream(path, compression) as handle:
            while chunk := handle.read(SCAN_BYTES):
                total += len(chunk)
                columns.feed(chunk)
    except (OSError, pa.ArrowException):
        return max(total, 4 * compressed)
    finally:
        columns.finish()
    return total


def arrow_decoded_size(path: Location, on_disk: int) -> tuple[int, int]:
    """(bytes, rows) of an Arrow IPC file's or stream's record batches as pyarrow holds them,
    read a batch at a time (io/arrow.py; memory-mapped where local: nothing is copied); a file
    that cannot be read counts at 4x its size and no row (reading will name the problem)."""
    size = rows = 0
    try:
        for batch in ipc_batches(path):
            size += batch.nbytes
            rows += batch.num_rows
    except (OSError, pa.ArrowException):
        return 4 * on_disk, 0
    return size, rows


def jsonl_columns(path: Location) -> JsonlColumns:
    """JsonlColumns of a plain JSONL file, read once (nothing is kept)."""
    columns = JsonlColumns()
    try:
        with storage.open_stream(path) as handle:
            while chunk := handle.read(SCAN_BYTES):
                columns.feed(chunk)
    except OSError:
        pass  # reading will name the problem; what was counted still counts
    columns.finish()
    return columns


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
                else:  # (a column of nulls is small on disk, not decoded)
                    size += max(chunk.total_uncompressed_size,
                                PARQUET_VALUE_BYTES.get(chunk.physical_type, 0) * chunk.num_values)
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


def file_read_bytes(path: Location, format: str, path_ids: bool = True) -> tuple[int, int]:
    """(bytes the file's table keeps, bytes alive only while it is read) for one input file;
    path_ids: its ids are ``<path>:<line>`` (no id field; True counts them where unsure)."""
    try:
        on_disk = storage.file_size(path)
    except OSError:
        return 0, 0  # reading will name the problem
    # A record's own bytes: the id a record without an id field gets (its path, a colon and up
    # to 12 digits) is as long as the path as given, or shorter.
    record = RECORD_BYTES + (ID_COPIES * (len(str(path).encode()) + 13) if path_ids else 0)
    if format == "parquet":
        size = parquet_uncompressed_size(path, on_disk)
        return size + record * parquet_rows(path), size
    if format == "arrow":
        size, rows = arrow_decoded_size(path, on_disk)
        return size + record * rows, int(PARSE_OVERHEAD * on_disk)
    if format != "jsonl":  # .txt: one record
        return on_disk + record, int(PARSE_OVERHEAD * on_disk)
    compression = compression_of(path)
    if compression is not None:
        columns = JsonlColumns()
        if compression == "gzip":
            size = gzip_uncompressed_size(path, on_disk, columns)
        else:
            size = stream_uncompressed_size(path, compression, on_disk, columns)
        during = int(PARSE_OVERHEAD * size) + on_disk
    else:
        columns = jsonl_columns(path)
        size, during = on_disk, int(PARSE_OVERHEAD * on_disk)
    return size + record * columns.records + CELL_BYTES * columns.null_cells(), during


def parquet_rows(path: Location) -> int:
    """A Parquet file's rows, from its footer (0 when it cannot be read: reading will say)."""
    try:
        return storage.parquet_metadata(path).num_rows
    except Exception:  # noqa: BLE001 -- any unreadable file: the reader reports it properly
        return 0


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


def shard_read_bytes(path: Location, format: str, piece, file_bytes: tuple[int, int]) -> tuple[int, int]:
    """file_read_bytes of one file read whole (piece None) or of one piece of it: (bytes its
    table keeps, which bound its text, bytes alive only while it is read); file_bytes: the
    file's file_read_bytes (computed once for all its pieces)."""
    kept, during = file_bytes
    if piece is not None:
        share = piece_share(path, format, piece)
        kept, during = int(kept * share), int(during * share)
    return kept, during


def read_bytes_estimate(files: list[tuple[Location, str]], path_ids: bool = True) -> int:
    """Estimated peak bytes of reading ``files`` ((path, format) pairs) into one corpus;
    path_ids: the ids are ``<path>:<line>`` (file_read_bytes)."""
    return reading_estimate([file_read_bytes(path, format, path_ids) for path, format in files])


def reading_estimate(sizes: list[tuple[int, int]]) -> int:
    """Estimated peak bytes of reading files of file_read_bytes ``sizes`` into one corpus."""
    return (KEPT_FACTOR * sum(kept for kept, _ in sizes) + max((during for _, during in sizes), default=0)
            + READER_BYTES)
