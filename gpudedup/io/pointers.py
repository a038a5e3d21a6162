"""Where documents were read from: a file and the record's line or row in it (SourcePointers),
for an index that verifies matches from the source files (index/sources.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np

from ..errors import ParameterError
from . import storage
from .formats import FORMAT_OF_SUFFIX

if TYPE_CHECKING:
    from .pieces import Piece
    from .stamps import FileStamp

# What the run read of one file, as its stamps check it: (the part read, or None for the whole
# file; its stamp, io/stamps.py, or None where it read nothing), one per read.
ReadAs = tuple[tuple[Optional["Piece"], Optional["FileStamp"]], ...]


@dataclass(frozen=True)
class SourcePointers:
    """Where documents came from (host arrays, k documents).

    files: (absolute path, format) of each file pointed into; file: int64 (k,) index into
    files; row_number: int64 (k,) the record's line (JSONL) or row (Parquet), from 1; field:
    the column the documents' content was read from; read_as: for each of ``files``, what the
    run read of it (ReadAs), which the file must still be when the index records it.
    """

    files: tuple[tuple[str, str], ...]
    file: np.ndarray
    row_number: np.ndarray
    field: str
    read_as: tuple[ReadAs, ...]


def corpus_pointers(corpus, docs: np.ndarray) -> SourcePointers:
    """The source pointers of corpus rows ``docs`` (int64 (k,)) of an in-memory Corpus; a
    ParameterError when its rows were passed in as data rather than read from files."""
    first_rows = np.cumsum([0] + [source.rows for source in corpus.files]).astype(np.int64)
    if int(first_rows[-1]) != corpus.num_rows:  # a list or table passed in has no SourceFile
        raise ParameterError(NOT_FROM_FILES)
    file = np.searchsorted(first_rows, docs, side="right") - 1
    numbers = np.empty(docs.shape[0], dtype=np.int64)
    files = []
    for position, source in enumerate(corpus.files):
        if source.format not in FORMAT_OF_SUFFIX.values():  # (a file's, which the reader reads again)
            raise ParameterError(NOT_FROM_FILES)
        files.append((storage.key_of(source.path), source.format))
        mine = file == position
        local = docs[mine] - first_rows[position]
        numbers[mine] = local + 1 if source.row_numbers is None else np.asarray(source.row_numbers)[local]
    return SourcePointers(tuple(files), file.astype(np.int64), numbers, corpus.text_field,
                          tuple(((source.piece, source.stamp),) for source in corpus.files))


NOT_FROM_FILES = ("this index verifies matches from the source files (made with verification 'source'): "
                  "documents added to it must be read from files (JSONL, Parquet, Arrow or text), not passed in "
                  "as data or read from other formats")
