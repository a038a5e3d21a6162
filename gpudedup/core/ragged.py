"""Helpers for ragged (CSR) arrays, written once against the array module ``xp``.

A ragged array is a flat ``values`` array plus ``offsets`` (int64, shape (n + 1,)): row i is
``values[offsets[i]:offsets[i+1]]``. ``xp`` is numpy or cupy; the functions run wherever their
inputs live and never move data between host and device.
"""

from __future__ import annotations

import numpy as np


def offsets_from_counts(counts, xp=np):
    """int64 (n + 1,) offsets for rows of the given lengths (counts: integer (n,))."""
    offsets = xp.zeros(counts.shape[0] + 1, dtype=xp.int64)
    xp.cumsum(counts, out=offsets[1:])
    return offsets


def ragged_arange(counts, xp=np):
    """Row index and position within the row for every element of rows of length ``counts``.

    counts: integer (n,). Returns (row int64 (total,), within int64 (total,)); for counts
    [2, 0, 3] that is row [0, 0, 2, 2, 2] and within [0, 1, 0, 1, 2].
    """
    counts = counts.astype(xp.int64)
    offsets = offsets_from_counts(counts, xp)
    if xp is np:
        row = np.repeat(np.arange(counts.shape[0], dtype=np.int64), counts)
    else:
        # cupy.repeat takes only host repeat counts; a binary search of every element's
        # position in the offsets is the device-side equivalent.
        positions = xp.arange(int(offsets[-1]), dtype=xp.int64)
        row = xp.searchsorted(offsets[1:], positions, side="right").astype(xp.int64)
    within = xp.arange(row.shape[0], dtype=xp.int64) - offsets[:-1][row]
    return row, within


def weighted_ranges(weights: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Split items [0, n) into consecutive (start, stop) ranges whose weights add up to at most
    ``budget``; an item heavier than the budget gets a range of its own.

    weights: integer (n,), >= 0 (host). Used to size batches by bytes and chunks by elements.
    """
    cumulative = offsets_from_counts(np.asarray(weights, dtype=np.int64))
    ranges, start = [], 0
    while start < weights.shape[0]:
        stop = int(np.searchsorted(cumulative, cumulative[start] + budget, side="right")) - 1
        stop = max(stop, start + 1)
        ranges.append((start, stop))
        start = stop
    return ranges


def ragged_take(offsets: np.ndarray, values: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``rows`` (int64 (k,), host, ascending runs are cheapest) of a ragged array (row r
    is values[offsets[r] : offsets[r + 1]]; offsets int (n + 1,), values any dtype, host,
    possibly memory-mapped): (counts int64 (k,), their values one after the other).

    One slice is copied per run of consecutive rows (a kept row set, a compaction's rows),
    rather than an index per element: several times faster than a gather where runs are long.
    """
    rows = np.asarray(rows, dtype=np.int64)
    counts = (offsets[rows + 1] - offsets[rows]).astype(np.int64)
    if rows.shape[0] == 0:
        return counts, values[:0].copy()
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    begins = offsets[rows[np.concatenate([[0], breaks])]]
    ends = offsets[rows[np.concatenate([breaks - 1, [rows.shape[0] - 1]])] + 1]
    return counts, np.concatenate([values[a:b] for a, b in zip(begins.tolist(), ends.tolist())])


def last_of_runs(runs: np.ndarray, count: int) -> np.ndarray:
    """bool (n,): which entries of ``runs`` (int64 (n,), ascending: equal values consecutive)
    are among the last ``count`` of their run."""
    ends = np.searchsorted(runs, runs, side="right")
    return np.arange(runs.shape[0]) >= ends - count


def last_over_parts(parts: list[tuple[np.ndarray, np.ndarray]], count: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``parts`` (each (group int64 (k,), position int64 (k,)), in order) cut to the last
    ``count`` entries of each group over all of them, ordered by part and then position, as
    one part holding them all in that order would give them; each part's kept entries in its
    own order."""
    part = np.concatenate([np.full(group.shape[0], number, np.int64) for number, (group, _) in enumerate(parts)])
    group = np.concatenate([group for group, _ in parts])
    position = np.concatenate([position for _, position in parts])
    order = np.lexsort((position, part, group))
    kept = np.zeros(group.shape[0], bool)
    kept[order] = last_of_runs(group[order], count)
    cuts = np.cumsum([group.shape[0] for group, _ in parts])[:-1]
    return [(g[mine], p[mine]) for (g, p), mine in zip(parts, np.split(kept, cuts))]
