"""Reading Arrow IPC files (.arrow) with pyarrow's IPC readers (host): the random-access file
format (it starts with ``ARROW1``: pyarrow.ipc.new_file, Feather v2) and the streaming format,
which Hugging Face ``datasets`` writes (``save_to_disk``'s data-NNNNN-of-NNNNN.arrow, its cache
files). pyarrow.ipc.open_file is tried first, pyarrow.ipc.open_stream where the file is not in
the file format. A local file is memory-mapped (pyarrow.memory_map), so its columns are read
without a copy, as ``datasets`` reads them; a file at a URL is read through its file system.

A record's row number is its row in the file (from 1): ids ``<path>:<row>``, messages
``FILE row N``, as for Parquet; the checks of the rows are Parquet's (parquet.checked_rows).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import pyarrow as pa

from . import storage
from .fields import repeated_names, too_deep
from .parquet import checked_rows
from .source import SourceFile, file_error, listed
from .credentials import first_line
from .storage import Location

FILE_MAGIC = b"ARROW1"  # the start of an IPC file (a stream starts with a message)
UNREADABLE = "not a readable Arrow IPC file or stream"


def read_arrow(path: Location, source: SourceFile, text_field: str, id_field: Optional[str],
               on_error: str = "stop") -> tuple[pa.Table, np.ndarray, list[dict]]:
    """(table, row numbers, skipped records) of an Arrow IPC file or stream. The columns are
    the file's own (its schema, metadata included, is the kept rows'); a text field of binary
    or dictionary type is read as strings; rows with a null id or a text that is not valid
    UTF-8 are per-record problems, everything else is about the whole file."""
    try:
        table = read_ipc(path)
        repeated = repeated_names(table.schema.names)
        if repeated:  # (no output could hold both)
            raise file_error(source.path, f"columns share a name ({listed(repeated, 5)}); each column of an "
                                          "Arrow file needs a name of its own")
        if deep := too_deep(table.schema):
            raise file_error(source.path, deep)
        source.schema = table.schema
    except PermissionError:
        raise
    except (pa.ArrowException, OSError) as error:
        raise file_error(source.path, f"{UNREADABLE} ({first_line(error)})") from None
    return checked_rows(table, source, text_field, id_field, on_error, UNREADABLE)


def read_ipc(path: Location) -> pa.Table:
    """The whole table of an Arrow IPC file or stream: memory-mapped where the file is local
    (the table's buffers point into the map, which stays open while they are alive)."""
    with open_ipc(path) as handle:
        return ipc_reader(handle).read_all()


def ipc_batches(path: Location) -> Iterator[pa.RecordBatch]:
    """The record batches of an Arrow IPC file or stream one at a time (memory-mapped where
    the file is local: a batch is no copy; at a URL each batch is read)."""
    with open_ipc(path) as handle:
        reader = ipc_reader(handle)
        if isinstance(reader, pa.ipc.RecordBatchFileReader):
            for index in range(reader.num_record_batches):
                yield reader.get_batch(index)
        else:
            yield from reader


def open_ipc(path: Location) -> pa.NativeFile:
    """An IPC file opened for reading: a local one memory-mapped, one at a URL through its
    file system."""
    return pa.memory_map(str(path)) if isinstance(path, Path) else storage.open_random(path)


def ipc_reader(handle: pa.NativeFile):
    """pyarrow's reader of the IPC data in ``handle``: the file format's
    (pyarrow.ipc.open_file), else the stream format's (pyarrow.ipc.open_stream); an IPC file
    whose footer is broken is that error, not read as a stream."""
    try:
        return pa.ipc.open_file(handle)
    except pa.ArrowInvalid:
        handle.seek(0)
        if handle.read(len(FILE_MAGIC)) == FILE_MAGIC:
            raise
    handle.seek(0)
    return pa.ipc.open_stream(handle)
