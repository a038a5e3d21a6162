"""Which items of a sequence a run keeps, held as the few that are not rather than as a mask
over every item: the input rules' rows of a staged run, the identical copies left out of LSH,
the documents removed as duplicates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np


@dataclass
class Kept:
    """Which items of a spilled sequence (the rows of all shards) a run keeps, in order:
    ``spilled(i)`` gives the places among the spilled items of kept items ``i`` (int64).

    Held as the items not kept, ``left_out`` (int64 ascending places: the input rules leave out
    few rows, if any, so a staged run's client holds nothing per document); None: every item
    is kept, the common case, and nothing per item is held.
    """

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
        return self.left_out is None

    def spilled(self, kept: np.ndarray) -> np.ndarray:
        if self.left_out is None:
            return kept
        # The j-th item left out comes after left_out[j] - j kept items: a kept item moves on by
        # as many items left out as come at or before its own count.
        return kept + np.searchsorted(self.left_out - np.arange(self.left_out.shape[0]), kept, side="right")

    def kept_at(self, places: np.ndarray) -> np.ndarray:
        """int64: the kept items at spilled ``places`` (int64 or uint64, each a kept one's):
        the inverse of spilled."""
        places = places.astype(np.int64, copy=False)
        return places if self.left_out is None else places - np.searchsorted(self.left_out, places)

    def count(self, start: int, stop: int) -> int:
        """How many of the spilled items start .. stop-1 are kept."""
        if self.left_out is None:
            return stop - start
        return stop - start - int(np.searchsorted(self.left_out, stop) - np.searchsorted(self.left_out, start))

    def mask(self, start: int, stop: int) -> np.ndarray:
        """bool (stop - start,): which of the spilled items start .. stop-1 are kept."""
        mask = np.ones(stop - start, dtype=bool)
        if self.left_out is not None:
            mask[self.left_out[np.searchsorted(self.left_out, start):np.searchsorted(self.left_out, stop)]
                 - start] = False
        return mask
