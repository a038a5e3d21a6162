"""The pairs of a run on a cluster, kept as parts in its work directory, written and read by
the workers' tasks so that the client holds none of them (docs/scale.md).

WORK/pairs/<kind>/NNNNN/part.parquet holds part NNNNN of a stage's pairs (each kind's folder a
Parquet dataset), with the columns:

- ``likely``: the candidate pairs that pass the signature filter, a part per partition of the
  candidate shuffle's second round (dask.likely_part): first, second, int64 (q,) rows,
  first < second, ascending by (first, second). Parts are disjoint (that shuffle put every
  copy of a pair in one partition), so their union is the single process's pairs.
- ``verified``: of each likely part, the pairs whose exact Jaccard reaches the threshold
  (check_part): first, second as above, jaccard float64.

Verification reads each pair's two shingle sets from a spill (shards.spilled_jaccard), the
client gathering none of the pairs' documents: every likely
part's documents are shuffled on their shard (part_documents), a task per shuffled partition
spills the sets of its shards' documents (spill_part_documents: every shard read once, by one
task), then a task per likely part checks its pairs from the spill (check_part).

A stage's parts are numbered 0 .. count-1 and are trusted only once the stage (WORK/stages/,
saved by the client after the last task) names their count: a part an interrupted run left is
written again (write_part), and parts beyond the count are never read.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Iterable, Optional

import numpy as np
import pyarrow as pa

from ..core.ragged import weighted_ranges
from ..core.verify import BELOW_THRESHOLD
from .protocols import Executor, LocalExecutor
from .shards import DocumentsAt, spill_shard_sets, spilled_jaccard, unspilled
from .workdir import MANIFEST, WorkAt, WorkDir, arrays_of
from .workfolders import DamagedWorkDirError

LIKELY = "likely"
VERIFIED = "verified"
GROUPS = "groups"  # the same-signature groups of the identical copies (copyparts.py)
COPIES = "copies"  # the identical copies found among them (copyparts.py)
# The spill of the likely pairs' documents (WORK/sets/<SPILL>/NNNNN): one set of documents per
# run, since the candidates stage that names them is one (its parts are deterministic).
SPILL = "pairs-parts"
PAIR_COLUMNS = ("first", "second")


@dataclass
class PairParts:
    """Pairs kept as parts in the work directory at ``work_at`` (WorkDir.attach: its location,
    for tasks): ``kinds``, (kind, count) of each kind's parts 0 .. count-1, numbered here one
    kind after the other (a cluster's verified pairs: the verified parts, then the identical
    copies' parts, pipeline/copyparts.py); sizes: int64 (count,), the pairs in each part (the
    counts its tasks returned)."""

    work_at: WorkAt
    kinds: tuple[tuple[str, int], ...]
    sizes: np.ndarray

    @classmethod
    def of(cls, work_at: WorkAt, kind: str, sizes: np.ndarray) -> "PairParts":
        """Parts 0 .. len(sizes)-1 of one kind, of ``sizes`` pairs."""
        return cls(work_at, ((kind, int(sizes.shape[0])),), sizes)

    @property
    def count(self) -> int:
        """How many parts."""
        return sum(count for _, count in self.kinds)

    @property
    def total(self) -> int:
        """How many pairs, in all the parts."""
        return int(self.sizes.sum())

    @property
    def holding(self) -> list[int]:
        """The numbers of the parts that hold pairs, ascending."""
        return np.flatnonzero(self.sizes).tolist()

    def joined(self, more: "PairParts") -> "PairParts":
        """These parts, then ``more``'s (of the same work directory), numbered on."""
        return PairParts(self.work_at, self.kinds + more.kinds, np.concatenate([self.sizes, more.sizes]))

    def unit(self, number: int) -> tuple[str, str]:
        """(kind, unit) of part ``number``."""
        left = number
        for kind, count in self.kinds:
            if left < count:
                return kind, part_unit(kind, left)
            left -= count
        raise IndexError(f"part {number} is past the parts' end ({self.count} parts)")

    def read_part(self, number: int, names: Optional[list[str]] = None) -> dict[str, np.ndarray]:
        """Part ``number``'s arrays ``names``; None: first, second, and jaccard but of likely pairs."""
        kind, unit = self.unit(number)
        return arrays_of(WorkDir.attach(self.work_at).read_part(unit, names or columns_of(kind)))

    def read(self) -> dict[str, np.ndarray]:
        """read_parts of these parts, in this process."""
        return read_parts(WorkDir.attach(self.work_at), self)


@dataclass
class VerifiedParts:
    """The verified pairs of a run on Dask: in the parts of its work directory (``parts``: the
    verified parts, then the identical copies'; their sizes known), where tasks read them;
    answers what pairs.VerifiedPairs answers, and ``arrays`` reads every pair into this
    process when first asked for."""

    parts: PairParts

    @property
    def count(self) -> int:
        """How many pairs, in all the parts."""
        return self.parts.total

    def map(self, executor: Optional[Executor], function: Callable[..., Any], *arguments) -> list:
        """``function(first, second, jaccard, *arguments)`` over the pairs a part at a time
        (each part read where it lies: on_pairs), by ``executor``'s tasks where it runs tasks
        elsewhere, else here (executor None: after the run, its cluster gone); once over every
        pair where they were read here (arrays). The caller combines the results."""
        if "arrays" in self.__dict__:
            return [function(*self.arrays, *arguments)]
        executor = executor or LocalExecutor()
        return executor.map(on_pairs, self.tasks(executor, function, *arguments), "reading the pairs")

    def tasks(self, executor: Executor, function: Callable[..., Any], *arguments: Any) -> list[tuple]:
        """The arguments of on_pairs, ``function`` over each part that holds pairs (one task over
        no pair where none does), with what every task reads (the parts' description,
        ``arguments``) shared through executor.share."""
        shared = executor.share(*arguments)
        holding = self.parts.holding
        if not holding:
            return [(function, None, -1, *shared)]
        stored, = executor.share(self.parts)
        return [(function, stored, number, *shared) for number in holding]

    @cached_property
    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(first, second, jaccard) of every pair, ascending, host (read_parts: ascending)."""
        stored = self.parts.read()
        return stored["first"], stored["second"], stored["jaccard"]


@dataclass
class LikelyParts:
    """The candidate stage's result on Dask (pairs.LikelyPairs in this process): the likely
    pairs in ``parts`` parts of the work directory at ``work_at`` (0: no document had band
    keys); candidates: how many distinct candidate pairs LSH found."""

    work_at: str
    candidates: int
    parts: int

    def every_candidate(self, copies: Any) -> tuple[np.ndarray, np.ndarray]:
        """No pair (two empty int64 arrays): a run on Dask keeps no candidate pair beside the
        likely ones (keep_every is refused there)."""
        empty = np.zeros(0, np.int64)
        return empty, empty

    def as_arrays(self) -> dict[str, np.ndarray]:
        """The arrays a work directory keeps of the stage (WorkDirStore.cached)."""
        return {"candidates": np.array([self.candidates], np.int64), "parts": np.array([self.parts], np.int64)}

    @classmethod
    def of_arrays(cls, work_at: str, arrays: dict[str, np.ndarray]) -> "LikelyParts":
        return cls(work_at, int(arrays["candidates"][0]), int(arrays["parts"][0]))


@dataclass
class CheckedParts:
    """The verification stage's result on Dask (pairs.CheckedPairs in this process): of the
    likely pairs, those that reach the threshold in a verified part per likely part of the work
    directory at ``work_at`` (pipeline/pairparts.py), and the identical copies in their parts
    (pipeline/copyparts.py); no pair held.

    candidates: how many distinct candidate pairs LSH found; checked: how many were checked
        exactly; rejected: how many of those fell short of the threshold.
    part_sizes: int64 (parts,), the verified pairs in each verified part.
    copy_sizes: int64 (c,), the identical copies in each of their parts.
    """

    work_at: str
    candidates: int
    checked: int
    rejected: int
    part_sizes: np.ndarray
    copy_sizes: np.ndarray

    def verified(self, threshold: float) -> VerifiedParts:
        """The pairs that reach the threshold: the verified parts, then the copies' (threshold:
        the parts hold only those already)."""
        parts = PairParts.of(self.work_at, VERIFIED, self.part_sizes)
        return VerifiedParts(parts.joined(PairParts.of(self.work_at, COPIES, self.copy_sizes)))

    def every_jaccard(self, verified_jaccard: np.ndarray) -> np.ndarray:
        """float64 (c,): the Jaccard of every pair checked (Outcome.checked_jaccard), given the
        verified ones' (``verified_jaccard``, those of ``verified``): the rejected pairs'
        BELOW_THRESHOLD after them, in another order than a run in this process gives."""
        return np.concatenate([verified_jaccard, np.full(self.rejected, BELOW_THRESHOLD, np.float64)])

    def as_arrays(self) -> dict[str, np.ndarray]:
        """The arrays a work directory keeps of the stage (WorkDirStore.cached)."""
        return {"part_sizes": self.part_sizes, "copy_sizes": self.copy_sizes,
                "counts": np.array([self.candidates, self.checked, self.rejected], np.int64)}

    @classmethod
    def of_arrays(cls, work_at: str, arrays: dict[str, np.ndarray]) -> "CheckedParts":
        candidates, checked, rejected = (int(count) for count in arrays["counts"])
        return cls(work_at, candidates, checked, rejected, arrays["part_sizes"], arrays["copy_sizes"])


def part_unit(kind: str, number: int) -> str:
    return f"{kind_folder(kind)}/{number:05d}"


def kind_folder(kind: str) -> str:
    """The folder of the ``kind`` pairs' parts: a Parquet dataset."""
    return f"pairs/{kind}"


def keep_parts(work_at: WorkAt, kind: str, numbers: Iterable[int]) -> None:
    """The ``kind`` pairs' parts ``numbers`` written, remove any other (WorkDir.keep_parts)."""
    WorkDir.attach(work_at).keep_parts(kind_folder(kind), numbers)


def columns_of(kind: str) -> list[str]:
    """The arrays a part of ``kind`` pairs holds for its readers."""
    return list(PAIR_COLUMNS) + ([] if kind in (LIKELY, GROUPS) else ["jaccard"])


def write_part(work_at: WorkAt, kind: str, number: int, arrays: dict[str, np.ndarray]) -> None:
    """Store part ``number`` of the ``kind`` pairs; one an interrupted run left is replaced."""
    WorkDir.attach(work_at).write_part(part_unit(kind, number), pa.table(arrays))


def read_part(work_at: WorkAt, kind: str, number: int) -> dict[str, np.ndarray]:
    """Part ``number`` of the ``kind`` pairs, every array it holds."""
    return arrays_of(WorkDir.attach(work_at).read_part(part_unit(kind, number)))


def read_parts(work: WorkDir, parts: PairParts) -> dict[str, np.ndarray]:
    """Every one of ``parts`` as one set of arrays, ascending by (first, second): for a process
    that holds every pair anyway (a notebook asking for the pairs, a result outliving its work
    directory)."""
    columns = columns_of(parts.kinds[0][0]) if parts.kinds else list(PAIR_COLUMNS)
    assert all(columns_of(kind) == columns for kind, _ in parts.kinds), "the parts hold the same columns"
    try:
        read = [arrays_of(table) for table in work.read_parts([parts.unit(number)[1] for number in parts.holding],
                                                              columns)]
    except DamagedWorkDirError:
        if work.folder.read_small(MANIFEST) is None:  # (not damaged: gone, after the run)
            raise work.gone("its pairs") from None
        raise
    if not read:
        return {name: np.zeros(0, np.float64 if name == "jaccard" else np.int64) for name in columns}
    joined = {name: np.concatenate([part[name] for part in read]) for name in columns}
    order = np.lexsort((joined["second"], joined["first"]))
    return {name: values[order] for name, values in joined.items()}


# --- tasks (module-level, so that workers import them rather than unpickle code) --------------


def part_documents(at: DocumentsAt, kind: str, number: int):
    """The documents of part ``number`` of the ``kind`` pairs, distinct, as (shard, row) rows of
    a pandas DataFrame: row, the document's spilled row; shard, the shard holding it."""
    import pandas as pd

    pairs = read_part(at.work, kind, number)
    spilled = at.rows.spilled(np.unique(np.concatenate([pairs["first"], pairs["second"]])))
    return pd.DataFrame({"shard": np.searchsorted(at.shard_rows, spilled, side="right") - 1, "row": spilled})


def spill_part_documents(documents, spill: str, at: DocumentsAt, reader: Any, params: Any, backend: str):
    """The shingle sets of one partition of part_documents' rows shuffled on the shard, which
    holds every row of its shards: a shard's rows spilled under WORK/sets/<spill>/ as
    disk.spill_shard_sets does (the shard read once), unless an interrupted run did. Returns
    how many shards it spilled (a pandas DataFrame, for Dask)."""
    import pandas as pd

    todo = unspilled(at.work, spill, at.shard_rows, np.unique(documents["row"].to_numpy(np.int64)))
    for index, local in todo:
        spill_shard_sets(at.work, spill, reader, index, local, params, backend)
    return pd.DataFrame({"shards": [len(todo)]})


def check_part(at: DocumentsAt, number: int, threshold: float, chunk_bytes: int, threads: int) -> tuple[int, int]:
    """Task: the exact Jaccard of likely part ``number``'s pairs, from the spill of
    spill_part_documents, a chunk at a time (chunks of about ``chunk_bytes`` of text) on
    ``threads`` threads; the pairs that reach ``threshold`` stored as verified part
    ``number``. Returns (pairs checked, pairs below the threshold)."""

    work = at.work
    pairs = read_part(work, LIKELY, number)
    first, second = at.rows.spilled(pairs["first"]), at.rows.spilled(pairs["second"])
    jaccard = np.full(first.shape[0], BELOW_THRESHOLD, np.float64)
    for start, stop in weighted_ranges(at.lengths(pairs["first"]) + at.lengths(pairs["second"]), chunk_bytes):
        jaccard[start:stop] = spilled_jaccard(work, SPILL, at.shard_rows, first[start:stop], second[start:stop],
                                              threshold, threads)
    verified = jaccard >= threshold
    write_part(work, VERIFIED, number, {"first": pairs["first"][verified], "second": pairs["second"][verified],
                                        "jaccard": jaccard[verified]})
    return int(first.shape[0]), int((~verified).sum())


def pair_frame(first: np.ndarray, second: np.ndarray, jaccard: np.ndarray):
    """Verified pairs (first, second: int64 rows; jaccard float64) as a pandas DataFrame of a,
    b, jaccard: a task over a part through on_pairs, for the pairs table's sort."""
    import pandas as pd

    return pd.DataFrame({"a": first, "b": second, "jaccard": jaccard})


def on_pairs(function: Any, stored: Optional[PairParts], number: int, *arguments):
    """Task: ``function(first, second, jaccard, *arguments)`` of stored part ``number``'s
    verified pairs, or of no pair where ``stored`` is None (VerifiedParts.tasks)."""
    if stored is None:
        empty = np.zeros(0, np.int64)
        return function(empty, empty, np.zeros(0, np.float64), *arguments)
    part = stored.read_part(number)
    return function(part["first"], part["second"], part["jaccard"], *arguments)
