"""Store: new documents in memory together with the indexed documents they may be
near-duplicates of, so that the pipeline's one stage sequence (pipeline/job.py) deduplicates new
data against everything kept before (a run through a work directory: index/staged.py).

Rows: 0 .. k-1 are the indexed documents the probe matched (IndexReader.probe: those sharing a
band key with a new document), in index order; k .. k+n-1 are the new documents of the inner
store (pipeline/memory.py), in input order. The first k rows are ``pinned``:
never removed, never paired with each other. The job over these rows is the batch job over
(every indexed document, then the new data) restricted to what can involve a new document, so
its cost grows with the new data and its matches, not with the size of the index.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np
import pyarrow as pa

from ..backends import Backend, host_threads
from ..threads import HOST_THREADS
from ..core.copies import band_key_row_hash
from ..pipeline.local import HeldStages
from ..pipeline.protocols import Executor
from ..errors import InputError
from ..core.hashing import Permutations
from ..core.lsh import Banding, band_keys, to_side
from ..pipeline.report import InputSummary
from ..core.shingling import ShingleSpec
from ..stages import Progress, StageLog
from ..core.verify import SetArrays, SetRows, csr_parts, stacked_sets
from .reader import IndexReader, Matched, check_id_type


class IndexStore:
    """The matched indexed documents, then the new documents of ``inner`` (see the module)."""

    def __init__(self, inner: Any, reader: IndexReader, backend: Backend, window: int):
        self.inner, self.reader, self.backend, self.window = inner, reader, backend, window
        self.copy_batch_cost = inner.copy_batch_cost
        self.work_dir: Optional[str] = inner.work_dir
        self.pinned = 0
        self.matched: Optional[Matched] = None
        self.signatures: Any = None

    def sign(self, spec: ShingleSpec, banding: Banding, permutations: Permutations, executor: Executor,
             log: StageLog, progress: Progress) -> None:
        inner = self.inner
        # The new documents' ids against the index's, before any other work.
        refuse_indexed_ids(self.reader, inner.ids)
        inner.sign(spec, banding, permutations, executor, log, progress)
        # The new documents' keys, all of them, once (the store hands its keys over).
        self.new_keys = inner.band_keys(np.ones(inner.active.shape[0], dtype=bool))
        matched = self.matched = probe_index(self.reader, self.new_keys, self.window, self.backend, log)
        k = self.pinned = matched.count
        self.documents = k + inner.documents
        self.active = np.concatenate([np.arange(k, dtype=np.int64), np.asarray(inner.active) + k])
        self.lengths = np.concatenate([matched.lengths, np.asarray(inner.lengths)])
        self.signatures = np.concatenate([matched.signatures, inner.signatures])
        # The indexed documents' band keys are those of their stored signatures.
        self.old_keys = band_keys(matched.signatures, banding)

    @property
    def ids(self) -> pa.Array:
        """The id of every row: the matched indexed documents', then the new ones'."""
        assert self.matched is not None
        return joined_ids(self.matched.ids, self.inner.ids)

    def active_positions(self, rows: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.active, rows)

    def row_hashes(self) -> np.ndarray:
        # The inner store's are of its band keys (made when it signed): so are these.
        return np.concatenate([band_key_row_hash(self.old_keys), self.inner.row_hashes()])

    def band_keys(self, in_lsh: np.ndarray) -> "JoinedKeys":
        k = self.pinned
        keys = JoinedKeys(self.old_keys, in_lsh[:k], self.new_keys, in_lsh[k:], self.backend.xp)
        self.new_keys = None  # the candidate stage is the last to read them
        return keys

    def drop_signatures(self) -> None:
        # The inner store keeps its own: index add commits the kept documents' signatures.
        self.signatures = None

    def set_reader(self, name: str, docs: np.ndarray, executor: Executor) -> Callable[[np.ndarray], Any]:
        """The sets of parts of rows ``docs`` (int64, ascending): the indexed rows' stored sets,
        the new rows' from the inner store's reader."""
        k = self.pinned
        new_sets = self.inner.set_reader(name, docs[docs >= k] - k, executor)
        return lambda part: self.joined_sets(part, new_sets(part[part >= k] - k))

    def joined_sets(self, docs: np.ndarray, new_sets: SetRows) -> SetArrays:
        """The sets of rows ``docs`` (int64, ascending): the stored sets of the indexed rows
        among them, then ``new_sets``, those of the new rows (in order)."""
        assert self.matched is not None
        old = docs[docs < self.pinned]
        return stacked_sets(self.reader.set_parts(self.matched.segment[old], self.matched.row[old])
                            + [csr_parts(new_sets)])

    def exact_jaccard(self, name: str, first: np.ndarray, second: np.ndarray, threshold: float,
                      executor: Executor, progress: Progress) -> np.ndarray:
        """Pairs of two new documents go to the inner store as they are; a pair with an indexed
        document (first < pinned <= second: pairs of two are never sought) is checked against
        its stored set where it lies (IndexReader.pair_jaccard_at_least), the new document's set
        coming from the inner store."""
        k = self.pinned
        jaccard = np.empty(first.shape[0], dtype=np.float64)
        new = first >= k
        jaccard[new] = self.inner.exact_jaccard(name, first[new] - k, second[new] - k, threshold, executor, progress)
        if (~new).any():
            assert self.matched is not None
            old, fresh = first[~new], second[~new] - k
            if (fresh < 0).any():  # (run_job drops them: they were checked when the later one came)
                raise AssertionError("a pair of two indexed documents reached verification")
            docs = np.unique(fresh)
            new_sets, positions = self.inner.set_rows(docs, Progress(), executor, f"{name}-index")
            jaccard[~new] = self.reader.pair_jaccard_at_least(self.matched.segment[old], self.matched.row[old],
                                                              new_sets, positions[np.searchsorted(docs, fresh)],
                                                              threshold, HOST_THREADS)
        return jaccard

    def stages(self, executor: Executor) -> HeldStages:
        return HeldStages(executor)  # (over the held arrays of a run in memory)

    def input_schemas(self) -> list[tuple[str, pa.Schema]]:
        return self.inner.input_schemas()

    def input_summary(self, empty_documents: int) -> InputSummary:
        return self.inner.input_summary(empty_documents)


def probe_index(reader: IndexReader, keys: Any, window: int, backend: Backend, log: StageLog) -> Matched:
    """The indexed documents that share a band key with the new documents (IndexReader.probe
    of their band ``keys``: uint64 (m, bands), or what gives ``keys[:, band]``), gathered."""
    with log.stage("index_probe"):
        segment, row = reader.probe(keys, window, host_threads(backend))
        return reader.gather(segment, row)


def joined_ids(indexed: pa.Array, new: pa.Array) -> pa.Array:
    """The ids of a run's rows: the matched ``indexed`` documents', then the ``new`` ones', of
    one type (int64 where both are integers, else large_string: 0 and "0" are refused apart,
    refuse_indexed_ids)."""
    both_int = pa.types.is_integer(new.type) and (len(indexed) == 0 or pa.types.is_integer(indexed.type))
    target = pa.int64() if both_int else pa.large_string()
    return pa.concat_arrays([indexed.cast(target), new.cast(target)])


def refuse_indexed_ids(reader: IndexReader, ids: pa.Array) -> None:
    """InputError when the new documents' ``ids`` are of the other kind than the index's
    (integers against strings: cast to one type for the results, 0 and "0" would be one id), or
    one of them is the id of a live indexed document: pairs and clusters name documents by id,
    so one id for an indexed and a new document would make them ambiguous (and an add could not
    commit it)."""
    check_id_type(reader.manifest, ids)
    taken = reader.first_indexed(ids)
    if taken is not None:
        raise InputError(f"id {taken!r} of the new data is already in the index {reader.root}: ids must be unique "
                         "across the index (remove the indexed document first, or name an id field whose ids the "
                         "index does not hold with id_field=)")


class JoinedKeys:
    """Band keys for lsh.candidate_pairs: the indexed documents' (uint64 (k, bands), host)
    where old_mask, then the inner store's keys object (``keys[:, band]``, on the host or the
    backend's side) where new_mask; ``keys[:, band]`` is on xp's side."""

    def __init__(self, old: np.ndarray, old_mask: np.ndarray, new: Any, new_mask: np.ndarray, xp):
        self.old, self.old_mask, self.new, self.new_mask, self.xp = old, old_mask, new, new_mask, xp
        self.shape = (int(old_mask.sum() + new_mask.sum()), old.shape[1])

    def __getitem__(self, index) -> Any:
        _, band = index  # keys[:, band]
        xp = self.xp
        new = to_side(self.new[:, band], xp)
        if not self.new_mask.all():
            new = new[to_side(self.new_mask, xp)]
        return xp.concatenate([to_side(np.ascontiguousarray(self.old[self.old_mask, band]), xp), new])
