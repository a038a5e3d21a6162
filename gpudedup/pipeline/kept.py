"""Which items of a sequence a run keeps, held as the few that are not (or the few that are)
rather than as a mask over every item: the input rules' rows of a staged run, the identical
copies left out of LSH, the documents removed as duplicates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np


@dataclass
class Kept:
    """Which items of a spilled sequence (rows, or active rows, of all shards) a run keeps, in
    order: ``spilled(i)`` gives the places among the spilled items of kept items ``i`` (int64).

    Held as one of two int64 ascending lists of places: ``left_out``, the items not kept (the
    input rules leave out few rows, if any, so a staged run's client holds nothing per
    document), or ``positions``, the items kept (a task's few rows, copyparts.group_part).
    Both None: every item is kept, the common case, and nothing per item is held.
    """

    positions: Optional[np.ndarray] = None
    left_out: Optional[np.ndarray] = None

    @classmethod
    def of_mask(cls, mask: np.ndarray) -> "Kept":
        """The items where ``mask`` (bool over the spilled items) is True."""
        return cls.leaving_out(np.flatnonzero(~mask))

    @classmethod
    def leaving_out(cls, left_out: np.ndarray) -> "Kept":
        """Every item but those at ``left_out`` (int64 ascending places)."""
        return cls(left_out=left_out.astype(np.int64, copy=False) if left_out.shape[0] else None)

    @property
    def every(self) -> bool:
        """Whether every spilled item is kept."""
        return self.positions is None and self.left_out is None

    def spilled(self, kept: np.ndarray) -> np.ndarray:
        if self.positions is not None:
            return self.positions[kept]
        if self.left_out is None:
            return kept
        # The j-th item left out comes after left_out[j] - j kept items: a kept item moves on by
        # as many items left out as come at or before its own count.
        return kept + np.searchsorted(self.left_out - np.arange(self.left_out.shape[0]), kept, side="right")

    def kept_at(self, places: np.ndarray) -> np.ndarray:
        """int64: the kept items at spilled ``places`` (int64 or uint64, each a kept one's):
        the inverse of spilled."""
        places = places.astype(np.int64, copy=False)
        if self.positions is not None:
            return np.searchsorted(self.positions, places)
        return places if self.left_out is None else places - np.searchsorted(self.left_out, places)

    def count(self, start: int, stop: int) -> int:
        """How many of the spilled items start .. stop-1 are kept."""
        if self.positions is not None:
            return int(np.searchsorted(self.positions, stop) - np.searchsorted(self.positions, start))
        if self.left_out is None:
            return stop - start
        return stop - start - int(np.searchsorted(self.left_out, stop) - np.searchsorted(self.left_out, start))

    def mask(self, start: int, stop: int) -> np.ndarray:
        """bool (stop - start,): which of the spilled items start .. stop-1 are kept."""
        if self.positions is not None:
            mask = np.zeros(stop - start, dtype=bool)
            mask[self.positions[np.searchsorted(self.positions, start):np.searchsorted(self.positions, stop)]
                 - start] = True
            return mask
        mask = np.ones(stop - start, dtype=bool)
        if self.left_out is not None:
            mask[self.left_out[np.searchsorted(self.left_out, start):np.searchsorted(self.left_out, stop)]
                 - start] = False
        return mask
