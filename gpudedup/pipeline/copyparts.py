"""The identical copies of a run on a cluster (copies.py), grouped, checked and kept as parts of
its work directory by the workers' tasks, so that the client holds a count per part rather
than a pair per copy (docs/scale.md).

1. Every shard's row hashes become (hash, spilled) rows (dask.row_hash_rows), shuffled on the
   hash: every document of a hash lies in one partition, whose task groups them as
   copies.same_signature_rows does (their signature rows read from the shards) and stores
   the groups' pairs (first, member) as part NNNNN of WORK/pairs/groups/ (group_part).
2. The groups' documents are shuffled on their shard, and a task per partition spills their
   shingle sets (pairparts.part_documents, spill_part_documents: each shard read once).
3. A task per groups part checks its groups exactly as one process does
   (copies.confirmed_copies, the sets read from that spill) and stores the confirmed copies
   as part NNNNN of WORK/pairs/copies/ (check_groups): first, second (the member), jaccard as
   pairparts' verified parts, and place, int64, the member's place among the spilled active
   rows of all shards.

A group lies whole in one part and is checked there as one process checks it, so the parts'
union is the single process's copies. The verified pairs are verification's parts, then these
(pairparts.PairParts.joined). The candidates stage leaves the copies out of LSH by their
places, which reach each shard's task by the range of shards it lies in (range_places).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.copies import confirmed_copies, same_signature_rows
from .daskops import frame_of, range_divisions, range_starts
from .kept import Kept
from .pairparts import COPIES, GROUPS, PairParts, read_part, write_part
from .shards import LengthsAt, Shards, SpilledSignatures, rows_at_places, spilled_sets
from .workdir import WorkAt


# The spill of the groups' documents (WORK/sets/<SPILL>/NNNNN): one set of documents per run,
# as the groups are (the shuffle on the hash puts each group in one part whatever the cut).
SPILL = "copies-parts"


def group_part(rows, number: int, work_at: WorkAt, active_starts: np.ndarray, shard_rows: np.ndarray,
               documents: Kept, width: int) -> int:
    """Task: the same-signature groups of one partition of (hash uint64, spilled int64) rows
    shuffled on the hash (spilled: the place among the spilled active rows of all shards;
    every row a document of the run's), stored as groups part ``number``: first, second int64
    rows (copies.same_signature_rows over the rows in document order, their signature rows
    read from the shards' signatures.npy); shard_rows, active_starts: disk.Shards'; documents:
    disk.ShardDocuments.rows. A partition without groups stores nothing (its count, 0, says
    so to every reader). Returns the pairs stored."""

    rows = rows.sort_values("spilled", kind="stable")  # places ascend with the documents' rows
    spilled = rows["spilled"].to_numpy(np.int64)
    signatures = SpilledSignatures(Shards.at(work_at, active_starts), width, Kept(spilled), spilled.shape[0])
    first, member = same_signature_rows(signatures, rows["hash"].to_numpy(np.uint64))
    if first.shape[0] == 0:
        return 0
    shards = Shards.at(work_at, active_starts, shard_rows)
    write_part(work_at, GROUPS, number, {"first": rows_at_places(shards, documents, spilled[first]),
                                         "second": rows_at_places(shards, documents, spilled[member]),
                                         "place": spilled[member]})
    return int(first.shape[0])


def check_groups(work_at: WorkAt, number: int, shard_rows: np.ndarray, documents: Kept, lengths: LengthsAt,
               batch_cost: int) -> int:
    """Task: the identical copies among groups part ``number`` (copies.confirmed_copies, up
    to ``batch_cost`` code points of documents at a time; lengths: the documents' lengths),
    their sets read from the spill of the groups' documents, stored as copies part ``number``.
    Returns how many."""

    groups = read_part(work_at, GROUPS, number)

    def set_reader(docs: np.ndarray):
        return lambda part: spilled_sets(work_at, SPILL, shard_rows, documents.spilled(part))

    copies = confirmed_copies(groups["first"], groups["second"], lengths.open(), batch_cost, set_reader)
    # Each document is in one group: a member's place is found by its row.
    by_member = np.argsort(groups["second"])
    place = groups["place"][by_member[np.searchsorted(groups["second"], copies.member, sorter=by_member)]]
    write_part(work_at, COPIES, number, {"first": copies.first, "second": copies.member,
                                         "jaccard": copies.jaccard, "place": place})
    return int(copies.first.shape[0])


def copy_places(work_at: WorkAt, number: int, active_starts: np.ndarray):
    """Task: the places of copies part ``number``'s members (among the spilled active rows of
    all shards) as a pandas DataFrame of (shard, place), int64; active_starts:
    disk.Shards.active_starts."""
    import pandas as pd

    place = read_part(work_at, COPIES, number)["place"]
    return pd.DataFrame({"shard": np.searchsorted(active_starts, place, side="right") - 1, "place": place})


def sorted_places(frame) -> np.ndarray:
    """Task: the places (int64 ascending) of a partition of copy_places' rows."""
    return np.sort(frame["place"].to_numpy(np.int64))


def range_places(copies: PairParts, shards: int, ranges: int, active_starts: Any) -> tuple[np.ndarray, list]:
    """The places of the copies in the parts ``copies`` (sizes known) cut by ranges of shards
    (active_starts: disk.Shards.active_starts, or a future of it that every task reads):
    (shard_starts, int64 (r + 1,), the first shard of each of about ``ranges`` ranges of about
    equal shard counts, daskops.range_starts; and per range a Dask delayed int64 array,
    ascending, of the places of its shards' copies): Dask's set_index moves them, with the
    ranges as divisions."""
    import dask
    import dask.dataframe as dd


    shard_starts = range_starts(shards, ranges)
    assert copies.sizes is not None, "the copies' sizes are known"
    assert copies.kinds == ((COPIES, copies.count),), "the copies' own parts"
    frames = [dask.delayed(copy_places)(copies.work_at, number, active_starts)
              for number in np.flatnonzero(copies.sizes).tolist()]
    by_shard = dd.from_delayed(frames, meta=frame_of({"shard": "int64", "place": "int64"}), verify_meta=False)
    moved = by_shard.set_index("shard", divisions=range_divisions(shard_starts))
    return shard_starts, [dask.delayed(sorted_places)(part) for part in moved.to_delayed()]
