"""What each stage hands the next in a run in this process (the identical copies, the
candidates that pass the signature filter, the pairs checked exactly, the verified pairs), as
host arrays. A run on Dask leaves each in parts of its work directory, where tasks read them
(copyparts.CopyParts; pairparts.LikelyParts, CheckedParts, VerifiedParts): a class of each
form with the same methods, and a name for either (Copied, Likely, Checked, Verified).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

import numpy as np

from ..core.copies import Copies, are_copies

if TYPE_CHECKING:
    from .copyparts import CopyParts
    from .pairparts import CheckedParts, LikelyParts, VerifiedParts
    from .protocols import Executor


@dataclass
class IdenticalCopies:
    """The identical-copies stage's result in this process: the copies held (``held``:
    core.copies.Copies). A run on Dask leaves its copies in parts (copyparts.CopyParts)."""

    held: Copies

    @property
    def count(self) -> int:
        """How many copies."""
        return self.held.count

    def read(self) -> Copies:
        """The copies (CopyParts.read reads them from their parts)."""
        return self.held


# The identical copies where they lie: held (a run in this process), or Dask's parts.
Copied = Union[IdenticalCopies, "CopyParts"]


@dataclass
class LikelyPairs:
    """The candidate stage's result in this process: the LSH candidate pairs that pass the
    signature filter (a run on Dask leaves them in parts: pairparts.LikelyParts).

    first, second: int64 (q,) rows, host, first < second, ascending by (first, second).
    candidates: how many distinct candidate pairs LSH found (the filter's drops among them).
    every_first, every_second: int64 (c,) rows, host: every candidate pair, ascending; empty
        unless asked for (Stages.likely_pairs' keep_every).
    """

    first: np.ndarray
    second: np.ndarray
    candidates: int
    every_first: np.ndarray
    every_second: np.ndarray

    def every_candidate(self, copies: Copied) -> tuple[np.ndarray, np.ndarray]:
        """(a, b) int64 (c,), host, ascending: every candidate pair kept (keep_every), the
        identical ``copies`` joined to them (they were never in LSH's buckets)."""
        held = copies.read()
        a, b, _ = merge_pairs((self.every_first, self.every_second, self.every_first),
                              (held.first, held.member, held.first))
        return a, b


# The candidates where they lie: held (a run in this process), or Dask's parts.
Likely = Union[LikelyPairs, "LikelyParts"]


@dataclass
class VerifiedPairs:
    """The verified pairs of a run in this process: first, second int64 (p,) rows, first <
    second, ascending by (first, second); jaccard float64 (p,), each at least the threshold;
    host. A run on Dask leaves them in parts of its work directory (pairparts.VerifiedParts),
    which answer what these answer."""

    first: np.ndarray
    second: np.ndarray
    jaccard: np.ndarray

    @property
    def count(self) -> int:
        """How many pairs."""
        return int(self.first.shape[0])

    @property
    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(first, second, jaccard) of every pair, ascending, host."""
        return self.first, self.second, self.jaccard

    def map(self, executor: Optional["Executor"], function: Callable[..., Any], *arguments) -> list:
        """``function(first, second, jaccard, *arguments)`` once over every pair, in a list
        (VerifiedParts.map: a part at a time; the caller combines the results, a sum or a
        minimum, which must not depend on how the pairs are cut). executor: not used."""
        return [function(*self.arrays, *arguments)]


# The verified pairs where they lie: held (a run in this process), or Dask's parts.
Verified = Union[VerifiedPairs, "VerifiedParts"]


@dataclass
class CheckedPairs:
    """The verification stage's result in this process (a run on Dask leaves the pairs in
    parts: pairparts.CheckedParts).

    first, second: int64 (c,) rows, host, first < second, ascending by (first, second); jaccard:
        float64 (c,), each one's exact Jaccard where it reaches the threshold, else
        verify.BELOW_THRESHOLD: every pair checked exactly, the identical copies (Jaccard 1.0)
        merged in.
    candidates: how many distinct candidate pairs LSH found; checked: how many of them were
        checked exactly (those the signature filter passed).
    """

    first: np.ndarray
    second: np.ndarray
    jaccard: np.ndarray
    candidates: int
    checked: int

    def verified(self, threshold: float) -> VerifiedPairs:
        """The pairs that reach ``threshold``."""
        verified = self.jaccard >= threshold
        return VerifiedPairs(self.first[verified], self.second[verified], self.jaccard[verified])

    def every_jaccard(self, verified_jaccard: np.ndarray) -> np.ndarray:
        """float64 (c,): the Jaccard of every pair checked (Outcome.checked_jaccard), given the
        verified ones' (not needed here: every pair's is held)."""
        return self.jaccard


# The checked pairs where they lie: held (a run in this process), or Dask's parts.
Checked = Union[CheckedPairs, "CheckedParts"]


def with_first_below(pairs: Verified, bound: int,
                     executor: Optional["Executor"]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first, second, jaccard) of the ``pairs`` whose first row is below ``bound``, and of the
    identical copies of their second documents (pairs of Jaccard 1.0 around them, which a
    copy's pairs go through: copies.first_copies), in no particular order, host: a run
    against an index asks for those of its indexed documents (its leading rows), read a part
    at a time (map) rather than every pair at once."""
    found = pairs.map(executor, first_below, bound)
    seconds = np.unique(np.concatenate([part[1] for part in found]))
    found += pairs.map(executor, copies_of, seconds, bound)
    first, second, jaccard = (np.concatenate([part[i] for part in found]) for i in range(3))
    return first, second, jaccard


def first_below(first: np.ndarray, second: np.ndarray, jaccard: np.ndarray,
                bound: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Task (with_first_below): the pairs given whose first row is below ``bound``."""
    chosen = first < bound
    return first[chosen], second[chosen], jaccard[chosen]


def copies_of(first: np.ndarray, second: np.ndarray, jaccard: np.ndarray, firsts: np.ndarray,
              bound: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Task (with_first_below): the identical copies (pairs of Jaccard 1.0) among
    the pairs given whose first row is one of ``firsts`` (int64, ascending) and at or past
    ``bound`` (those below it are first_below's)."""
    chosen = are_copies(jaccard) & (first >= bound) & np.isin(first, firsts)
    return first[chosen], second[chosen], jaccard[chosen]


def checked_in_memory(likely: LikelyPairs, copies: Copies,
                      exact: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> CheckedPairs:
    """The verification stage in this process: the exact check of the pairs the signature
    filter passed (exact: Store.exact_jaccard, the Jaccard where it reaches the threshold, else
    BELOW_THRESHOLD), the copies merged in (CheckedPairs). likely and copies: held."""
    first, second = likely.first, likely.second
    jaccard = exact(first, second)
    # The copies join the pairs LSH found (they were never in its buckets), in (a, b) order.
    merged_first, merged_second, jaccard = merge_pairs((first, second, jaccard),
                                                       (copies.first, copies.member, copies.jaccard))
    return CheckedPairs(merged_first, merged_second, jaccard, likely.candidates, first.shape[0])


def merge_pairs(pairs, more) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two disjoint sets of pairs (a int64 (p,), b int64 (p,), value (p,)) as one, ascending
    by (a, b)."""
    a, b, value = (np.concatenate([x, y]) for x, y in zip(pairs, more))
    order = np.lexsort((b, a))
    return a[order], b[order], value[order]
