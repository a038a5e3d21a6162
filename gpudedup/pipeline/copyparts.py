"""The identical copies of a run on a cluster (copies.py), grouped, checked and kept as parts of
its work directory by the workers' tasks, so that the client holds a count per part rather
than a pair per copy (docs/scale.md).

1. Every shard's row hashes become (hash, row) rows (dask.row_hash_rows), shuffled on the
   hash: every document of a hash lies in one partition, whose task groups them as
   copies.same_signature_rows does (their signature rows read from the shards) and stores
   the groups' pairs (first, member) as part NNNNN of WORK/pairs/groups/ (group_part).
2. The groups' documents are shuffled on their shard, and a task per partition spills their
   shingle sets (pairparts.part_documents, spill_part_documents: each shard read once).
3. A task per groups part checks its groups exactly as one process does
   (copies.confirmed_copies, the sets read from that spill) and stores the confirmed copies
   as part NNNNN of WORK/pairs/copies/ (check_groups): first, second (the member), jaccard as
   pairparts' verified parts.

A group lies whole in one part and is checked there as one process checks it, so the parts'
union is the single process's copies. The verified pairs are verification's parts, then these
(pairparts.PairParts.joined). The candidates stage leaves the copies out of LSH by their
rows, which reach each shard's task by the range of shards it lies in (range_rows).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.copies import Copies, confirmed_copies, same_signature_rows
from .daskops import frame_of, range_starts
from .pairparts import COPIES, GROUPS, PairParts, read_part, write_part
from .shards import DocumentSignatures, DocumentsAt, SpilledLengths, spilled_sets
from .workdir import WorkAt


# The spill of the groups' documents (WORK/sets/<SPILL>/NNNNN): one set of documents per run,
# as the groups are (the shuffle on the hash puts each group in one part whatever the cut).
SPILL = "copies-parts"


def group_part(rows, number: int, at: DocumentsAt, width: int) -> int:
    """Task: the same-signature groups of one partition of (hash uint64, row int64) rows
    shuffled on the hash (row: a document's, every one with shingles), stored as groups part
    ``number``: first, second int64 rows (copies.same_signature_rows over the rows in order,
    their signature rows of ``width`` columns read from the shards' signatures.npy). A
    partition without groups stores nothing (its count, 0, says so to every reader). Returns
    the pairs stored."""

    rows = rows.sort_values("row", kind="stable")
    documents = rows["row"].to_numpy(np.int64)
    signatures = DocumentSignatures(at, width, documents.shape[0], documents)
    first, member = same_signature_rows(signatures, rows["hash"].to_numpy(np.uint64))
    if first.shape[0] == 0:
        return 0
    write_part(at.work, GROUPS, number, {"first": documents[first], "second": documents[member]})
    return int(first.shape[0])


def check_groups(at: DocumentsAt, number: int, documents: int, batch_cost: int) -> int:
    """Task: the identical copies among groups part ``number`` (copies.confirmed_copies, up
    to ``batch_cost`` code points of documents at a time; the lengths of the ``documents``
    read where ``at`` reads the rest), their sets read from the spill of the groups'
    documents, stored as copies part ``number``. Returns how many."""

    groups = read_part(at.work, GROUPS, number)
    # (every set a round asks for is in the spill of the groups' documents)
    copies = confirmed_copies(groups["first"], groups["second"], SpilledLengths(at, documents), batch_cost,
                              lambda docs: lambda part: spilled_sets(at.work, SPILL, at.shard_rows,
                                                                     at.rows.spilled(part)))
    write_part(at.work, COPIES, number, {"first": copies.first, "second": copies.member,
                                         "jaccard": copies.jaccard})
    return int(copies.first.shape[0])


def copy_rows(work_at: WorkAt, number: int, document_starts: np.ndarray):
    """Task: the rows of copies part ``number``'s members as a pandas DataFrame of (shard,
    row), int64; document_starts: DocumentsAt.document_starts."""
    import pandas as pd

    member = read_part(work_at, COPIES, number)["second"]
    return pd.DataFrame({"shard": np.searchsorted(document_starts, member, side="right") - 1, "row": member})


def sorted_rows(frame) -> np.ndarray:
    """Task: the rows (int64 ascending) of a partition of copy_rows' rows."""
    return np.sort(frame["row"].to_numpy(np.int64))


@dataclass
class CopyParts:
    """The identical-copies stage's result on Dask: the copies in parts of the work directory
    (``parts``: PairParts of kind "copies", their sizes known), where tasks read them; none held."""

    parts: PairParts

    @property
    def count(self) -> int:
        """How many copies, in all the parts."""
        return self.parts.total

    @property
    def part_sizes(self) -> np.ndarray:
        """int64 (parts,): the copies in each part."""
        return self.parts.sizes

    def read(self) -> Copies:
        """The copies, read from their parts into this process."""
        stored = self.parts.read()
        return Copies(stored["first"], stored["second"], stored["jaccard"])

    def as_arrays(self) -> dict[str, np.ndarray]:
        """The arrays a work directory keeps of the stage (WorkDirStore.cached): the parts' sizes."""
        return {"sizes": self.part_sizes}

    @classmethod
    def of_arrays(cls, work_at: WorkAt, arrays: dict[str, np.ndarray]) -> "CopyParts":
        """The parts of as_arrays' sizes, in the work directory at ``work_at``."""
        sizes = arrays["sizes"]
        return cls(PairParts.of(work_at, COPIES, sizes))


def range_rows(copies: PairParts, shards: int, ranges: int, document_starts: Any) -> tuple[np.ndarray, list]:
    """The rows of the copies' members in the parts ``copies`` (sizes known) cut by ranges of
    shards (document_starts: DocumentsAt.document_starts, or a future of it that every task
    reads): (shard_starts, int64 (r + 1,), the first shard of each of about ``ranges`` ranges
    of about equal shard counts, daskops.range_starts; and per range a Dask delayed int64
    array, ascending, of the rows of its shards' copies): Dask's set_index moves them, with the
    ranges as divisions."""
    import dask
    import dask.dataframe as dd

    shard_starts = range_starts(shards, ranges)
    assert copies.kinds == ((COPIES, copies.count),), "the copies' own parts"
    frames = [dask.delayed(copy_rows)(copies.work_at, number, document_starts)
              for number in copies.holding]
    by_shard = dd.from_delayed(frames, meta=frame_of({"shard": "int64", "row": "int64"}), verify_meta=False)
    moved = by_shard.set_index("shard", divisions=shard_starts.tolist())
    return shard_starts, [dask.delayed(sorted_rows)(part) for part in moved.to_delayed()]
