"""The pairs each stage hands the next (the candidates that pass the signature filter, the
pairs checked exactly, the verified pairs), held as host arrays, or (a cluster's run) left in
parts of the work directory (pipeline/pairparts.py: VerifiedParts) where tasks read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

import numpy as np

from ..core.copies import Copies, are_copies
from ..core.verify import BELOW_THRESHOLD

if TYPE_CHECKING:
    from .copyparts import CopyParts
    from .pairparts import PairParts, VerifiedParts
    from .protocols import Executor, Store


@dataclass
class LikelyPairs:
    """The candidate stage's result: the LSH candidate pairs that pass the signature filter.

    first, second: int64 (q,) rows, host, first < second, ascending by (first, second).
    candidates: how many distinct candidate pairs LSH found (the filter's drops among them).
    every_first, every_second: int64 (c,) rows, host: every candidate pair, ascending; empty
        unless asked for (Stages.likely_pairs' keep_every).
    parts: 0, or (a cluster's run) first and second are empty and the pairs lie in as many
        parts of the work directory (pipeline/pairparts.py), where tasks read them.
    """

    first: np.ndarray
    second: np.ndarray
    candidates: int
    every_first: np.ndarray
    every_second: np.ndarray
    parts: int = 0

    def as_arrays(self) -> dict[str, np.ndarray]:
        """The arrays a store keeps of the stage (Store.cached)."""
        return {"first": self.first, "second": self.second, "candidates": np.array([self.candidates], np.int64),
                "every_first": self.every_first, "every_second": self.every_second,
                "parts": np.array([self.parts], np.int64)}

    @classmethod
    def of_arrays(cls, arrays: dict[str, np.ndarray]) -> "LikelyPairs":
        return cls(arrays["first"], arrays["second"], int(arrays["candidates"][0]), arrays["every_first"],
                   arrays["every_second"], int(arrays["parts"][0]))


@dataclass
class CheckedPairs:
    """The verification stage's result.

    first, second: int64 (c,) rows, host, first < second, ascending by (first, second); jaccard:
        float64 (c,), each one's exact Jaccard where it reaches the threshold, else
        verify.BELOW_THRESHOLD: every pair checked exactly, the identical copies (Jaccard 1.0)
        merged in. Where parts > 0 (a cluster's run), none: the pairs LSH found that reach the
        threshold lie in as many parts of the work directory (pipeline/pairparts.py), and
        ``rejected`` counts those that did not.
    candidates: how many distinct candidate pairs LSH found; checked: how many of them were
        checked exactly (those the signature filter passed).
    part_sizes: int64 (parts,), the verified pairs in each part (none: not in parts).
    copy_sizes: int64 (c,), the identical copies in each of their parts where they lie in
        parts too (pipeline/copyparts.py; none: held, or none found).
    """

    first: np.ndarray
    second: np.ndarray
    jaccard: np.ndarray
    candidates: int
    checked: int
    rejected: int = 0
    part_sizes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    copy_sizes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def parts(self) -> int:
        return int(self.part_sizes.shape[0])

    def as_arrays(self) -> dict[str, np.ndarray]:
        return {"first": self.first, "second": self.second, "jaccard": self.jaccard, "part_sizes": self.part_sizes,
                "copy_sizes": self.copy_sizes,
                "counts": np.array([self.candidates, self.checked, self.rejected], np.int64)}

    @classmethod
    def of_arrays(cls, arrays: dict[str, np.ndarray]) -> "CheckedPairs":
        candidates, checked, rejected = (int(count) for count in arrays["counts"])
        return cls(arrays["first"], arrays["second"], arrays["jaccard"], candidates, checked, rejected,
                   arrays["part_sizes"], arrays["copy_sizes"])

    def verified(self, store: Store, threshold: float) -> Verified:
        """The pairs that reach ``threshold``: held in a run in this process; in a run on Dask
        the parts where they lie (verification's parts, then the copies' parts; none where no
        document had band keys)."""
        if store.parts_at is None:
            verified = self.jaccard >= threshold
            return VerifiedPairs(self.first[verified], self.second[verified], self.jaccard[verified])
        assert self.first.shape[0] == 0, "a run on Dask holds no pair"
        # (start-up: a run in memory loads no work directory's parts)
        from .pairparts import COPIES, VERIFIED, VerifiedParts

        parts = stored_parts(store, VERIFIED, self.parts, self.part_sizes)
        if self.copy_sizes.shape[0]:
            parts = parts.joined(stored_parts(store, COPIES, self.copy_sizes.shape[0], self.copy_sizes))
        return VerifiedParts(parts)

    def every_jaccard(self, verified_jaccard: np.ndarray) -> np.ndarray:
        """float64 (c,): the Jaccard of every pair checked (Outcome.checked_jaccard) given the
        verified ones' (verified's); in a run of parts, in another order than in one process."""
        if not self.parts:
            return self.jaccard
        return np.concatenate([verified_jaccard, np.full(self.rejected, BELOW_THRESHOLD, np.float64)])


def stored_parts(store: Store, kind: str, count: int, sizes: Optional[np.ndarray] = None) -> PairParts:
    """The ``kind`` pairs a cluster's tasks kept in ``count`` parts of the store's work
    directory (sizes: int64 (count,), the pairs in each, where known)."""
    assert store.parts_at is not None, "only a work directory's runs keep pairs in parts"
    from .pairparts import PairParts  # (start-up: a run in memory loads no work directory's parts)

    return PairParts.of(store.parts_at, kind, count, sizes)


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

    def as_arrays(self) -> dict[str, np.ndarray]:
        """The arrays a store keeps of the stage (Store.cached; sizes: none, CopyParts')."""
        held = self.held
        return {"first": held.first, "member": held.member, "jaccard": held.jaccard, "sizes": np.zeros(0, np.int64)}

    @classmethod
    def of_arrays(cls, arrays: dict[str, np.ndarray]) -> "IdenticalCopies":
        """The copies of as_arrays' arrays."""
        return cls(Copies(arrays["first"], arrays["member"], arrays["jaccard"]))


# The identical copies where they lie: held (a run in this process), or Dask's parts.
Copied = Union[IdenticalCopies, "CopyParts"]


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
