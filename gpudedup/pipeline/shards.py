"""A work directory's shards as the stages read them: the spill files of every shard
(WORK/shards/NNNNN/, written by the signature task), gathered by document row without holding
anything per document (DocumentsAt, the one place a document's row becomes a shard's row;
DocumentSignatures, ActiveDocuments, SpilledLengths, SpilledKeys), and the shingle sets of
chosen rows spilled shard by shard (spill_shard_sets) and checked a chunk at a time from there
(spilled_sets, spilled_jaccard).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

import numpy as np
import pyarrow as pa

from ..backends import Backend, get_backend
from ..core.content import unit_buffers, unit_lengths
from ..core.ragged import offsets_from_counts, weighted_ranges
from ..core.verify import rows_jaccard_at_least, set_arrays, set_columns
from ..memory import release_unused_memory
from ..params import DedupParams
from .kept import Kept
from .signatures import batch_bytes
from .workdir import WorkAt, WorkDir


if TYPE_CHECKING:
    from .protocols import Executor
    from .shardreader import ShardReader

# A task gets the backend itself in this process, or its name on a worker that makes its own.
BackendOrName = Union[Backend, str]


def by_shard(starts: np.ndarray, positions: np.ndarray):
    """(shard, indices into positions) for every shard holding some of ``positions`` (int64,
    spilled rows, or places in another sequence spilled shard by shard); starts: int64 (s + 1,)
    the first of each shard. One sort for all shards, so the cost does not grow with shards x
    positions."""
    shard = np.searchsorted(starts, positions, side="right") - 1
    order = np.argsort(shard, kind="stable")
    bounds = np.flatnonzero(np.diff(shard[order])) + 1
    for indices in np.split(order, bounds) if order.shape[0] else []:
        yield int(shard[indices[0]]), indices


@dataclass
class Shards:
    """The finished shards of a work directory, as one corpus of rows 0 .. n-1 (host).

    rows: int64 (s + 1,) first spilled row of each shard; active_starts: int64 (s + 1,) how
    many spilled rows with shingles (``active``) come before each shard.
    """

    work: WorkDir
    count: int
    rows: np.ndarray
    active_starts: np.ndarray

    @classmethod
    def of(cls, work: WorkDir, count: int) -> "Shards":
        work.fetch_shards(range(count), ["info.json"])
        infos = [work.shard_info(i) for i in range(count)]
        rows = np.cumsum([0] + [info["rows"] for info in infos]).astype(np.int64)
        active = np.cumsum([0] + [info["active"] for info in infos]).astype(np.int64)
        return cls(work, count, rows, active)


@dataclass
class DocumentsAt:
    """Where a task finds the run's documents in the shards of the work directory at
    ``work_at`` (WorkDir.attach): shard_rows, int64 (s + 1,), the first spilled row of each
    shard, and active_starts, int64 (s + 1,), how many spilled rows with shingles come before
    each (Shards'); rows, the documents among the spilled rows (ShardDocuments.rows).

    The stages speak of document rows only; here they become a shard and its rows: a
    document's spilled row is rows.spilled of its row, and its place in the shard's
    per-active-row arrays (signatures, band keys, row hashes) that of its spilled row in the
    shard's ``active`` (the same, where every row of the shard has shingles)."""

    work_at: WorkAt
    shard_rows: np.ndarray
    active_starts: np.ndarray
    rows: Kept

    @classmethod
    def of(cls, work_at: WorkAt, shards: Shards, rows: Kept) -> "DocumentsAt":
        return cls(work_at, shards.rows, shards.active_starts, rows)

    @cached_property
    def work(self) -> WorkDir:
        """The work directory, attached once for every task that reads through this object (a
        worker's copy of it, or this process's): a remote one's unit markers are read once."""
        return WorkDir.attach(self.work_at)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("work", None)  # (a worker attaches its own)
        return state

    @property
    def shards(self) -> int:
        return self.shard_rows.shape[0] - 1

    def active_count(self, index: int) -> int:
        """How many of shard ``index``'s rows have shingles."""
        return int(self.active_starts[index + 1] - self.active_starts[index])

    def every_row_active(self, index: int) -> bool:
        """Whether every row of shard ``index`` has shingles (its ``active`` is then 0 .. n-1)."""
        return self.active_count(index) == int(self.shard_rows[index + 1] - self.shard_rows[index])

    def active_rows(self, index: int) -> np.ndarray:
        """int64 ascending: shard ``index``'s rows with shingles, within the shard (its
        ``active``, read only where some row has none)."""
        if self.every_row_active(index):
            return np.arange(self.active_count(index), dtype=np.int64)
        return np.asarray(self.work.shard_array(index, "active"))

    def live(self, index: int, active: Optional[np.ndarray] = None) -> np.ndarray:
        """bool (a,): which of shard ``index``'s a rows with shingles (``active``: its
        active_rows, where read already) are documents; nothing is read where the input rules
        kept every row."""
        if self.rows.every:
            return np.ones(self.active_count(index), dtype=bool)
        start, stop = int(self.shard_rows[index]), int(self.shard_rows[index + 1])
        return self.rows.mask(start, stop)[self.active_rows(index) if active is None else active]

    def active(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """(documents int64 ascending, live bool (a,)) of shard ``index``: the rows of the
        documents among its a active rows, and which of those rows they are (the input rules
        may have left some out)."""
        active = self.active_rows(index)
        live = self.live(index, active)
        return self.rows.kept_at(int(self.shard_rows[index]) + active[live]), live

    def active_places(self, index: int, local: np.ndarray) -> np.ndarray:
        """int64: the places among shard ``index``'s rows with shingles of its rows ``local``
        (int64, any order, each with shingles: RuntimeError for one without)."""
        if self.every_row_active(index):
            return local
        active, count = self.active_rows(index), self.active_count(index)
        # Searched for in ascending order, the rows are found several times faster.
        order = np.argsort(local, kind="stable")
        places = np.empty(local.shape[0], np.int64)
        places[order] = np.minimum(np.searchsorted(active, local[order]), max(count - 1, 0))
        if count == 0 or not np.array_equal(active[places], local):
            raise RuntimeError(f"{self.work.shown}: a row with no shingles was asked for as "
                               "one with shingles")
        return places

    def lengths(self, rows: np.ndarray) -> np.ndarray:
        """int64, shaped as ``rows`` (int64 document rows): each document's text length in code
        points, from its shard's spilled ``lengths``."""
        work = self.work
        return gathered_per_shard(self.shard_rows, self.rows.spilled(rows), np.int64,
                                  lambda index, local: np.asarray(work.shard_array(index, "lengths"))[local])

    def document_starts(self) -> np.ndarray:
        """int64 (s + 1,): the first document row of each shard, then the documents' count."""
        return np.array([self.rows.count(0, int(first)) for first in self.shard_rows], np.int64)


def gathered_per_shard(starts: np.ndarray, places: np.ndarray, dtype,
                       gather: Callable[[int, np.ndarray], np.ndarray], row: tuple[int, ...] = ()) -> np.ndarray:
    """``gather(index, local)`` for the items at ``places`` (int64, any shape and order) of a
    sequence spilled shard by shard (starts: int64 (s + 1,), the first place of each shard),
    each shard asked once for its items (local: int64, their places within it), put back in
    the order of places: an array of ``dtype`` shaped as places, then ``row`` (the shape of
    one item: (K,) for a signature row)."""
    flat = places.reshape(-1)
    out = np.empty((flat.shape[0], *row), dtype=dtype)
    for index, mine in by_shard(starts, flat):
        out[mine] = gather(index, flat[mine] - starts[index])
    return out.reshape(places.shape + row)


class DocumentSignatures:
    """The signature rows of documents with shingles, gathered from the shards' memory-mapped
    signatures.npy: ``signatures[items]`` gives uint32 (len(items), K), host, for the document
    rows ``items``, or where ``documents`` is given (int64 document rows) for documents[items].

    Each shard's map is opened for one gather and closed after it: the pages a map has touched
    count in the process's resident set while it stays open, so maps kept open over every
    shard made the process that gathers (a Dask worker filtering candidate pairs) hold in the
    end about every signature of the corpus (4 bytes per permutation and document)."""

    def __init__(self, at: DocumentsAt, width: int, count: int, documents: Optional[np.ndarray] = None):
        self.at, self.documents = at, documents
        self.shape = (count, width)

    def __getitem__(self, items) -> np.ndarray:
        rows = np.asarray(items, dtype=np.int64)
        spilled = self.at.rows.spilled(rows if self.documents is None else self.documents[rows])
        work = self.at.work

        def gather(index: int, local: np.ndarray) -> np.ndarray:
            # The map lives only inside one shard's gather: unmapped after it (nothing else
            # refers to it), its pages out of the resident set.
            return work.shard_array(index, "signatures")[self.at.active_places(index, local)]

        return gathered_per_shard(self.at.shard_rows, spilled, np.uint32, gather, (self.shape[1],))


def as_items(items, count: int) -> np.ndarray:
    """Indices into ``count`` items as int64, for the gathers below: integers (none negative:
    the gathers do not count from the end), or a bool mask over all of them (the indices where
    it is True). Anything else (a slice, a mask of another length) raises IndexError."""
    items = np.asarray(items)
    if items.dtype == np.bool_:
        if items.shape != (count,):
            raise IndexError(f"a bool mask over {count} items has shape {items.shape}")
        return np.flatnonzero(items)
    if items.dtype.kind not in "iu":
        raise IndexError(f"indices must be integers or a bool mask, not {items.dtype}")
    items = items.astype(np.int64, copy=False)
    if items.size and (items.min() < 0 or items.max() >= count):
        raise IndexError(f"an index is outside 0 .. {count - 1}")
    return items


class SpilledColumn:
    """What ActiveDocuments and SpilledLengths share: a length, and the whole column when numpy
    asks for it (np.asarray: a persistent index's run, which holds every document anyway)."""

    shape: tuple[int]

    def __getitem__(self, items) -> np.ndarray:
        raise NotImplementedError

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        return self[np.arange(self.shape[0])].astype(dtype or np.int64, copy=False)


class ActiveDocuments(SpilledColumn):
    """The rows of the run's documents with shingles (protocols.Store.active), read from the
    shards when asked, not held: ``active[positions]`` gives their rows (int64, host) for
    positions into them (int64, or a bool mask over them), reading every shard's (what a run
    against an index commits asks for: all of them); m: how many. So the client of a cluster
    holds nothing per document for them (docs/scale.md)."""

    def __init__(self, at: DocumentsAt, m: int):
        self.at = at
        self.shape = (m,)

    def __getitem__(self, positions) -> np.ndarray:
        positions = as_items(positions, self.shape[0])
        every = [np.zeros(0, np.int64)] + [self.at.active(index)[0] for index in range(self.at.shards)]
        return np.concatenate(every)[positions]


class SpilledLengths(SpilledColumn):
    """The documents' text lengths (protocols.Store.lengths) gathered from the shards' spilled
    ``lengths`` when asked, not held: ``lengths[rows]`` gives int64 code points per row (rows:
    int64 of any shape, or a bool mask); n: how many documents."""

    def __init__(self, at: DocumentsAt, n: int):
        self.at = at
        self.shape = (n,)

    def __getitem__(self, rows) -> np.ndarray:
        return self.at.lengths(as_items(rows, self.shape[0]))



class SpilledKeys:
    """Band keys of the documents with shingles for a persistent index's probe
    (IndexReader.probe), one band at a time from the shards' band-major keys.npy, in the order
    of their rows (the shards' rows with shingles are all documents unless the input rules left
    some out: then each shard's are read)."""

    def __init__(self, at: DocumentsAt, bands: int):
        self.at = at
        self.live = [at.live(index) for index in range(at.shards)]
        self.shape = (int(sum(int(live.sum()) for live in self.live)), bands)

    def __getitem__(self, index) -> np.ndarray:
        _, band = index  # keys[:, band]
        work = self.at.work
        parts = [np.asarray(work.shard_array(i, "keys")[band])[live] for i, live in enumerate(self.live)]
        return np.concatenate(parts) if parts else np.zeros(0, np.uint64)


def spill_shard_sets(work_at: WorkAt, name: str, reader: Any, index: int, local_rows: np.ndarray,
                     params: DedupParams, backend: BackendOrName) -> None:
    """Task: the shingle sets of rows ``local_rows`` (int64, ascending, of shard ``index``) into
    WORK/sets/<name>/NNNNN/: columns.npy int64 (sorted, distinct per row; see
    verify.document_sets) and offsets.npy int64 (k + 1,). The shard is read once and shingled a
    batch at a time; only the hashes stay, on disk. reader: the run's ShardReader; a run
    against an index gives its own (index/staged.py's LeadReader), which maps the stages'
    shards to the input's and gives the sets of the lead's documents, which have no text
    here (WorkDir.lead)."""

    work = WorkDir.attach(work_at)
    spec = params.shingle_spec()
    if work.lead and index == 0:
        lead_counts, lead_columns = reader.lead_sets(work, local_rows, spec)
        work.write_dir(f"sets/{name}/{index:05d}", {"columns": lead_columns, "rows": local_rows,
                                                     "offsets": offsets_from_counts(lead_counts)})
        return
    backend = get_backend(backend)
    texts = reader.corpus(index).text_array().take(pa.array(local_rows))
    lengths = unit_lengths(texts)
    columns, counts = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for start, stop in weighted_ranges(lengths, batch_bytes(params, backend)):
        with backend.batch_scope():
            batch = backend.shingle_sets(*unit_buffers(texts.slice(start, stop - start)), spec)
        part, count = set_columns(batch)
        columns.append(part)
        counts.append(count)
    work.write_dir(f"sets/{name}/{index:05d}", {"columns": np.concatenate(columns),
                                                "offsets": offsets_from_counts(np.concatenate(counts)),
                                                "rows": local_rows})
    release_unused_memory()


def spilled_sets(work_at: WorkAt, name: str, shard_rows: np.ndarray, rows: np.ndarray):
    """The spilled sets of corpus rows ``rows`` (int64 (k,), ascending, all spilled) as one
    SetArrays, row i for rows[i] (the form of verify.document_sets)."""
    work = WorkDir.attach(work_at)
    parts, counts = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for index, mine in by_shard(shard_rows, rows):  # rows ascending: the groups come in order
        unit = f"sets/{name}/{index:05d}"
        stored_rows = work.array(unit, "rows.npy")
        offsets = work.array(unit, "offsets.npy")
        stored = work.array(unit, "columns.npy", mmap=True)
        wanted = rows[mine] - shard_rows[index]
        position = np.minimum(np.searchsorted(stored_rows, wanted), max(stored_rows.shape[0] - 1, 0))
        if stored_rows.shape[0] == 0 or not np.array_equal(stored_rows[position], wanted):
            raise RuntimeError(f"{work.shown}/{unit}: the spilled sets lack rows asked for (a spill is for one "
                               "set of rows)")
        starts, stops = offsets[position], offsets[position + 1]
        counts.append(stops - starts)
        parts.extend(np.asarray(stored[a:b]) for a, b in zip(starts, stops))
    return set_arrays(np.concatenate(parts), np.concatenate(counts))


def spilled_jaccard(work_at: WorkAt, name: str, shard_rows: np.ndarray, first: np.ndarray,
                    second: np.ndarray, threshold: float, threads: int) -> np.ndarray:
    """Task: exact Jaccard (float64 (p,)) of the row pairs (first[i], second[i]) whose
    documents' sets were spilled under ``name``, where it reaches ``threshold``; else
    BELOW_THRESHOLD (verify.pair_jaccard_at_least, on ``threads`` threads)."""
    return rows_jaccard_at_least(lambda docs: spilled_sets(work_at, name, shard_rows, docs), first, second,
                                 threshold, threads)


def spill_sets(work: WorkDir, name: str, reader: ShardReader, shard_rows: np.ndarray, params: DedupParams,
               backend: BackendOrName, docs: np.ndarray, executor: Executor) -> str:
    """The shingle sets of spilled rows ``docs`` (int64, ascending) under WORK/sets/<spill>/, one
    task per shard that holds some of them (spill_shard_sets); returns <spill>: ``name`` and a
    digest of ``docs``, so that every set of rows has its own spill (a stage may ask for sets
    several times, as identical_copies' rounds do) and a shard already spilled for the same rows
    (an earlier, interrupted run's) is not spilled again."""
    name = f"{name}-{hashlib.sha256(np.ascontiguousarray(docs, dtype=np.int64).tobytes()).hexdigest()[:16]}"
    todo = unspilled(work, name, shard_rows, docs)
    if not todo:
        return name
    root = work.for_tasks(executor.in_process)
    reader, params = executor.share(reader, params)  # (what every shard's task reads)
    executor.map(spill_shard_sets, [(root, name, reader, index, local, params, backend) for index, local in todo],
                 "the shingle sets")
    return name


def unspilled(work: WorkDir, name: str, shard_rows: np.ndarray, rows: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(shard index, int64 rows within the shard) of each shard that holds some of the spilled
    rows ``rows`` (int64, ascending) and whose sets under WORK/sets/<name>/ are not spilled yet
    (an interrupted run's finished shards are not spilled again)."""
    holding = list(by_shard(shard_rows, rows))
    done = work.done_of([f"sets/{name}/{index:05d}" for index, _ in holding])
    return [(index, rows[mine] - shard_rows[index]) for (index, mine), finished in zip(holding, done, strict=True)
            if not finished]
