"""The ids of a work directory's shards: each shard's documents as the input rules left them
(shard_documents), the ids checked for repeats across shards without one process holding
them all (repeated_shard_ids), and gathered by row for the results (ShardIds, IdsAt)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import pyarrow as pa

from ..ids import wide
from ..io.rules import PartSummary, id_groups, plan_combination
from .kept import Kept
from .daskops import DaskExecutor, arrays_sent, computed, frame_of, shuffled
from .shards import DocumentsAt, Shards, by_shard
from .workdir import WorkAt, WorkDir


@dataclass
class ShardDocuments:
    """The documents of a staged run among the rows its shards spilled, as the input rules
    (io/rules.plan_combination) decide them for the shards read one at a time, exactly as
    for the files of an in-memory run read at once.

    rows: the run's documents among the spilled rows of all shards (Shards.rows; held as the
    rows left out); id_type: their ids' type (int64 or string); all_ids(): every one of their
    ids, in order, read from the shards (none is held); schema: the columns of the files they come from,
    unified; records: every record or file left out under on_error="skip" (in no particular
    order; rules.sorted_records orders them); left_out: the shards left out whole by the
    rules (their columns or kind of id do not combine with the shards before them).
    """

    rows: Kept
    id_type: pa.DataType
    all_ids: Callable[[], pa.Array]
    schema: pa.Schema
    records: list[dict]
    left_out: set[int]


def shard_documents(shards: Shards, text_field: str, id_field: Optional[str], on_error: str,
                    executor: DaskExecutor) -> ShardDocuments:
    """The input rules over every shard's spilled columns, line numbers and ids (see
    ShardDocuments); under on_error="stop" their InputError, naming the files and lines. The
    ids are not read here: only the rows whose ids' hashes collide come back, from the
    executor's tasks (repeated_shard_ids)."""
    infos = [shards.work.shard_info(index) for index in range(shards.count)]  # (fetched by Shards.of)
    read = [index for index in range(shards.count) if not infos[index]["left_out"]]  # a file that could be read
    shards.work.fetch_shards(read, ["columns.arrow", "row_numbers.npy"])
    parts = [PartSummary(infos[index]["path"], infos[index]["format"],
                         pa.int64() if infos[index]["integer_ids"] else pa.string(), infos[index]["rows"],
                         shards.work.shard_schema(index),
                         row_numbers=np.asarray(shards.work.shard_array(index, "row_numbers")))
             for index in read]
    plan = plan_combination(parts, text_field, id_field, on_error,
                            repeated=lambda kept, id_type: repeated_shard_ids(
                                shards.work, [read[part] for part in kept], [parts[part].rows for part in kept],
                                id_type, executor))
    left_out = {read[part] for part in plan.left_out}
    # The rows the rules leave out, a shard at a time (only those are held).
    rows_left_out = [np.zeros(0, np.int64)]
    for part, index in enumerate(read):
        start, stop = int(shards.rows[index]), int(shards.rows[index + 1])
        mask = np.zeros(stop - start, dtype=bool) if index in left_out else plan.keep_mask(part, stop - start)
        if mask is not None:
            rows_left_out.append(start + np.flatnonzero(~mask))
    # A file left out whole is one record: the records its reader made for it are dropped.
    records = [record for index in range(shards.count) if index not in left_out
               for record in infos[index]["records"]] + plan.records
    work = shards.work
    return ShardDocuments(Kept.leaving_out(np.concatenate(rows_left_out)), plan.id_type,
                          lambda: plan.ids(parts, lambda part: shard_ids(work, read[part], plan.id_type)),
                          plan.schema, records, left_out)


def shard_ids(work: WorkAt, index: int, id_type: pa.DataType) -> pa.Array:
    """The ids of every row shard ``index`` spilled, in order, cast to ``id_type``."""
    ids = WorkDir.attach(work).shard_table(index, "ids.parquet")["id"].combine_chunks()
    return ids.cast(id_type)


def id_hash_rows(work: WorkAt, index: int, start: int, id_type: str):
    """Task: a pandas DataFrame (hash uint64, row int64) with a 64-bit hash of each id of
    shard ``index`` (cast to the type named ``id_type``; pandas' hash_array, the same in every
    process) and its row among the rows of the shards checked together (start: the shard's
    first)."""
    import pandas as pd

    ids = shard_ids(work, index, pa.type_for_alias(id_type))
    hashes = pd.util.hash_array(ids.to_numpy(zero_copy_only=False))
    return pd.DataFrame({"hash": hashes, "row": np.arange(start, start + len(ids), dtype=np.int64)})


def repeated_shard_ids(work: WorkDir, indices: list[int], rows: list[int], id_type: pa.DataType,
                       executor: DaskExecutor) -> list:
    """rules.RepeatedIds over the ids of shards ``indices`` (in order; rows: how many each
    has): the rows whose ids' hashes collide are found by the executor's tasks (a task per
    shard hashes its ids, a shuffle on the hash: colliding_rows), and only those rows' ids are read here and
    grouped exactly (rules.id_groups), so that no hash collision counts as a repeat."""
    starts = np.cumsum([0] + rows).astype(np.int64)
    work_at = work.for_tasks(executor.in_process)
    colliding = colliding_rows(executor, [(work_at, index, int(start), str(id_type))
                                          for index, start in zip(indices, starts)])
    if colliding.shape[0] == 0:
        return []
    ids = gathered_ids(work, starts, lambda part: indices[part], colliding, id_type)
    return [(identifier, colliding[members]) for identifier, members in id_groups(ids)]


def colliding_rows(executor: DaskExecutor, arguments: list[tuple]) -> np.ndarray:
    """The rows whose id hash another row shares (int64, ascending), of the (hash, row) frames
    of the tasks id_hash_rows(*a): the frames shuffled on the hash, so that equal hashes share
    a partition; each partition gives back its rows whose hash repeats, and only those reach
    the client (no process holds a hash per row)."""
    import dask

    parts = [dask.delayed(id_hash_rows)(*a) for a in arrays_sent(executor.client, arguments)]
    if not parts:
        return np.zeros(0, np.int64)
    shared, = computed([shuffled(executor, parts, {"hash": "uint64", "row": "int64"}, ["hash"]).map_partitions(
        hash_sharing_rows, meta=frame_of({"row": "int64"}))], "the id check")
    return np.sort(shared["row"].to_numpy(np.int64))


def hash_sharing_rows(rows):
    """Task: the rows (a DataFrame of "row") of one shuffled partition of (hash, row) rows
    whose hash another row of it has."""
    return rows.loc[rows["hash"].duplicated(keep=False), ["row"]]


def gathered_ids(work: WorkAt, starts: np.ndarray, shard_of: Callable[[int], int], rows: np.ndarray,
                 id_type: pa.DataType) -> pa.Array:
    """The ids of ``rows`` (int64 (k,), any order) of shards read one after another, in that
    order, string ids wide (ids.wide): starts: int64, the first row of each part; shard_of:
    the shard a part is. Each shard holding some of the rows is read once."""
    parts, order = [], []
    for part, mine in by_shard(starts, rows):
        local = rows[mine] - starts[part]
        parts.append(wide(shard_ids(work, shard_of(part), id_type).take(pa.array(local))))
        order.append(mine)
    if not parts:
        return wide(pa.array([], id_type))
    place = np.empty(rows.shape[0], dtype=np.int64)
    place[np.concatenate(order)] = np.arange(rows.shape[0])
    return pa.concat_arrays(parts).take(pa.array(place))


class ShardIds:
    """The run's document ids (ids.IdSource) read from the shards' ids.parquet when asked,
    not held: ``take`` reads only the shards holding the rows asked for."""

    def __init__(self, shards: Shards, rows: "Kept", documents: ShardDocuments, count: int):
        self.shards, self.rows, self.documents = shards, rows, documents
        self.type, self.count = documents.id_type, count

    def __len__(self) -> int:
        return self.count

    def take(self, rows: np.ndarray) -> pa.Array:
        self.shards.work.check_holds_this_run("its ids")
        return IdsAt(DocumentsAt.of(self.shards.work, self.shards, self.rows), self.type).take(rows)

    def all(self) -> pa.Array:
        self.shards.work.check_holds_this_run("its ids")
        return self.documents.all_ids()


@dataclass
class IdsAt:
    """What gives a task the ids of document rows (ShardIds.take's): where the documents are
    (shards.DocumentsAt) and their ids' type."""

    at: DocumentsAt
    type: pa.DataType

    def take(self, rows: np.ndarray) -> pa.Array:
        """The ids of ``rows`` (int64, any order), in that order, string ids wide (ids.wide):
        each shard holding some of them read once."""
        spilled = self.at.rows.spilled(np.asarray(rows, dtype=np.int64))
        return gathered_ids(self.at.work, self.at.shard_rows, lambda index: index, spilled, self.type)
