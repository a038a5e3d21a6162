"""Where a run's document ids come from when its results name documents (result.py): an Arrow
array held in memory (``ArrayIds``), or a staged run's shards, read when asked
(pipeline/disk.py's ``ShardIds``), so that a run on a cluster never holds every id."""

from __future__ import annotations

from typing import Optional, Protocol, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


class IdSource(Protocol):
    """The id of every document row 0 .. n-1 (int64 or string ids, no nulls)."""

    type: pa.DataType

    def __len__(self) -> int: ...

    def take(self, rows: np.ndarray) -> pa.Array:
        """The ids of rows ``rows`` (int64 (k,), any order, repeats allowed), in that order;
        string ids as large_string (wide)."""

    def all(self) -> pa.Array:
        """Every id, in row order."""


class ArrayIds:
    """Ids held as one Arrow array."""

    def __init__(self, ids: pa.Array):
        self.ids, self.type = ids, ids.type
        self._wide: Optional[pa.Array] = None

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, rows: np.ndarray) -> pa.Array:
        if self._wide is None:  # (once: the widening copies every offset)
            self._wide = wide(self.ids)
        return self._wide.take(pa.array(rows, pa.int64()))

    def all(self) -> pa.Array:
        return self.ids


def wide(ids: pa.Array) -> pa.Array:
    """String ids as large_string, so that gathering them for pairs and clusters (an id per
    pair member) cannot overflow 32-bit offsets; integer ids as they are."""
    return ids.cast(pa.large_string()) if pa.types.is_string(ids.type) else ids


def id_source(ids: Union[pa.Array, IdSource]) -> IdSource:
    """``ids`` as an IdSource (an Arrow array wrapped)."""
    return ArrayIds(ids) if isinstance(ids, (pa.Array, pa.ChunkedArray)) else ids


def order_ranks(ids: pa.Array) -> np.ndarray:
    """int64 (k,): each id's place in the ids' ascending order (ids unique; Arrow's order,
    which Dask's sort_values keeps too: numbers, or strings by code point)."""

    rank = np.empty(len(ids), dtype=np.int64)
    rank[pc.sort_indices(ids).to_numpy()] = np.arange(len(ids), dtype=np.int64)
    return rank
