"""The shards of a run over files (io/pieces.py: each input file, or a piece of a large one)
read one at a time (ShardReader), and the signature task that reads, signs and spills a
shard into the work directory (sign_shard)."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Optional

import numpy as np
import pyarrow as pa

from ..backends import get_backend
from ..core.content import check_content, content_bytes, gathered_type, unit_lengths
from ..core.copies import band_key_row_hash
from ..core.hashing import draw_permutations
from ..errors import InputError
from ..io import storage
from ..io.corpus import Corpus
from ..io.formats import format_of
from ..io.inputs import InputFiles, display_path
from ..io.pieces import PieceGone, Shard
from ..io.read import build_corpus, read_one_file
from ..io.source import SourceFile, file_record
from ..io.stamps import FileStamp, read_stamp, unchanged_while
from ..io.storage import Location
from ..memory import release_unused_memory
from ..params import DedupParams
from ..stages import Progress, StageLog
from .shards import BackendOrName, by_shard
from .signatures import signature_pass
from .workdir import WorkAt, WorkDir


class PieceDoesNotStand(Exception):
    """A piece of a file that, read alone, does not give what reading the whole file gives for
    its lines (io/pieces.py): the file is to be read whole."""


class ShardReader:
    """Reads the shards (input files, or pieces of large ones: io/pieces.py) for the stages,
    here or on a Dask worker.

    files: absolute paths; shown: each file as the client displays it (ids ``<path>:<row>``,
    messages), decided once on the client so that a worker's working directory never changes
    an id; shards: what each shard reads (set by plan; until then, every file whole)."""

    def __init__(self, files: list[Location], text_field: str, id_field: Optional[str], on_error: str):
        self.shown = [display_path(path) for path in files]
        self.files = [storage.location_of(path).absolute() for path in files]
        self.text_field, self.id_field, self.on_error = text_field, id_field, on_error
        self.shards = [Shard(index) for index in range(len(files))]

    @property
    def count(self) -> int:
        return len(self.shards)

    def file_of(self, index: int) -> int:
        """The input file shard ``index`` reads (an index into files)."""
        return self.shards[index].file

    def read(self, index: int, again: bool = False) -> tuple[Corpus, list[dict], Optional[pa.Table]]:
        """Shard ``index`` as (corpus, skipped records, its own columns as an empty table).
        Under on_error "skip" a file that cannot be read is an empty corpus, one record
        naming it, and no columns (None); otherwise its InputError is raised. again: a read
        after the shard was signed (its kept rows, its texts), where a failure (the file
        changed, a network timeout) is the InputError itself, under either on_error."""
        shard = self.shards[index]
        path, shown = self.files[shard.file], self.shown[shard.file]
        if shard.absorbed:
            return self._nothing(), [], None
        try:
            source = SourceFile(shown, format_of(path), location=storage.full_name(path), piece=shard.piece)
            part = read_one_file(path, source, self.text_field, self.id_field, False, self.on_error)
        except InputError as error:
            if again:
                raise
            if shard.piece is not None:  # the whole file's read says what is wrong, and where first
                raise PieceDoesNotStand(index) from None
            if self.on_error != "skip":
                raise
            return self._nothing(), [file_record(error, shown)], None
        if shard.piece is not None and source.format == "jsonl" and (part.records or source.line_by_line):
            raise PieceDoesNotStand(index)  # (io/pieces.py: read alone, its lines were judged alone)
        if shard.piece is not None and not part.table.num_rows:
            # A piece without records (blank lines, rows left out) has no columns of its own.
            return self._nothing(), part.records, None
        corpus = build_corpus([part], self.text_field, self.id_field, InputFiles(), [str(path)])
        # part.table keeps the file's own columns, before the corpus casts the text column.
        return corpus, part.records, part.table.slice(0, 0)

    def stamp(self, index: int) -> Optional[FileStamp]:
        """What shard ``index`` is about to read, as the write checks it (io/stamps.py), with
        the digest of its bytes whatever the format: its kept rows are read again; None for a
        shard that reads nothing (absorbed) or a file that cannot be looked at."""
        shard = self.shards[index]
        path = self.files[shard.file]
        try:
            return None if shard.absorbed else read_stamp(path, format_of(path), shard.piece, read_again=True)
        except PieceGone:
            raise InputError(f"{self.shown[shard.file]}: changed since the run cut it into pieces (the row groups "
                             "planned cannot be found in it); run again with an empty work directory") from None

    def unchanged(self, index: int, stamp: Optional[FileStamp], consequence: str):
        """A block that reads shard ``index`` again: its file is refused if it is not as
        ``stamp`` says, before the block and after it (io/stamps.py: unchanged_while)."""
        shard = self.shards[index]
        return unchanged_while(self.files[shard.file], self.shown[shard.file], stamp, shard.piece, consequence)

    def _nothing(self) -> Corpus:
        """The empty corpus of a shard that holds no document."""
        return build_corpus([], self.text_field, self.id_field, InputFiles(), [])

    def corpus(self, index: int) -> Corpus:
        """Shard ``index``'s corpus, read again after it was signed (read's again)."""
        return self.read(index, again=True)[0]

    def texts_of_rows(self, shard_rows: np.ndarray, rows: np.ndarray, stamps: Optional[list] = None,
                      consequence: str = "") -> pa.Array:
        """The content of corpus rows ``rows`` (int64 (k,), ascending), as one array in that
        order (content.gathered_type: large_string, or large_list<int64> of token ids), reading
        each shard that holds some of them once; shard_rows: int64 (s + 1,) the first corpus
        row of each shard. stamps: each shard's as the run read it, where its file is to be
        refused if it changed since (unchanged; consequence: what the error says beside it)."""
        parts = []
        for index, mine in by_shard(shard_rows, rows):
            with self.unchanged(index, stamps[index], consequence) if stamps is not None else nullcontext():
                parts.append(texts_at(self.corpus(index), rows[mine] - shard_rows[index]))
            release_unused_memory()  # (a shard's read leaves several times its size free in Arrow's pool)
        return pa.concat_arrays(parts) if parts else pa.array([], pa.large_string())


def texts_at(corpus: Corpus, local: np.ndarray) -> pa.Array:
    """The content of a shard's rows ``local`` (int64, places among its rows as read), in that
    order, as content.gathered_type (one type for every shard's)."""
    texts = corpus.text_array()
    return texts.take(pa.array(local)).cast(gathered_type(texts.type))


def sign_shard(work_at: WorkAt, reader: ShardReader, index: int, params: DedupParams, backend: BackendOrName,
               log: Optional[StageLog] = None, progress: Optional[Progress] = None) -> None:
    """Task: read shard ``index``, sign it in batches and store what the later stages need;
    log and progress: this process's, or None on a worker."""

    backend, log, progress = get_backend(backend), log or StageLog(), progress or Progress()
    spec, banding = params.shingle_spec(), params.banding()
    permutations = draw_permutations(banding.bands * banding.rows, params.seed)
    path, shown = reader.files[reader.file_of(index)], reader.shown[reader.file_of(index)]
    with log.stage("read"):
        stamp = reader.stamp(index)  # (before the read: a change while it reads is one the write refuses)
        try:
            corpus, records, raw = reader.read(index)
            if corpus.num_rows:  # (a file left out, or one without records, has no content type of its own)
                check_content(corpus.texts.type, params.shingle, reader.text_field, shown)
        except (PieceDoesNotStand, InputError):
            if reader.shards[index].piece is None:
                raise
            # A piece's type is its own lines' (all-null token ids read as text): only its info,
            # for WorkDirStore.sign to read the file whole, which then decides.
            WorkDir.attach(work_at).write_shard(index, {}, {"path": shown, "stands": False})
            return
    keys, active, signatures = signature_pass(corpus.units(), spec, banding, permutations, params,
                                              backend, log, progress)
    keys = backend.to_host(keys)
    lengths = unit_lengths(corpus.texts)
    source = corpus.files[0] if corpus.files else None
    row_numbers = (source.row_numbers if source is not None and source.row_numbers is not None
                   else np.arange(1, corpus.num_rows + 1, dtype=np.int64))
    data, offsets = corpus.units()
    # Per row: its line (JSONL) or row number, for FILE:LINE; its UTF-8 bytes and whether its
    # text is null, for the report of the documents the input rules keep.
    arrays = {"keys": keys.T, "signatures": signatures, "row_hash": band_key_row_hash(keys),
              "active": active, "lengths": lengths, "row_numbers": np.asarray(row_numbers, np.int64),
              "text_bytes": content_bytes((data, offsets)),
              "null": corpus.texts.is_null().to_numpy(zero_copy_only=False)}
    info = {"path": shown, "format": format_of(path), "left_out": raw is None,
            "rows": corpus.num_rows, "active": int(active.shape[0]),
            "records": records, "integer_ids": pa.types.is_integer(corpus.ids.type),
            "stamp": None if stamp is None else stamp.as_list()}
    with log.stage("spill"):
        WorkDir.attach(work_at).write_shard(index, arrays, info, {"ids": pa.table({"id": corpus.ids})},
                                            None if raw is None else raw.schema)
    del corpus, keys, signatures
    release_unused_memory()
