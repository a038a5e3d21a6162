"""Pairs kept as parts of a work directory (pipeline/pairparts.py), against Python's own sorting
and sums of the pairs written: numbering parts of two kinds one after the other, reading them
back whole and by part, and the stage results a work directory keeps of them for --resume."""

from __future__ import annotations

from typing import Optional

import numpy as np
import pytest

from gpudedup.core.verify import BELOW_THRESHOLD
from gpudedup.pipeline.pairparts import (COPIES, VERIFIED, CheckedParts, LikelyParts, PairParts, VerifiedParts,
                                         write_part)


def pairs_in_parts(work: str, first: np.ndarray, second: np.ndarray, sizes: list[int],
                   jaccard: Optional[np.ndarray] = None, kind: str = VERIFIED) -> PairParts:
    """The pairs (first, second: int64; jaccard: float64, ones where not given) written as parts
    0, 1, ... of ``kind`` in the work directory at ``work``, of ``sizes`` pairs one after the
    other (an empty part where a size is 0)."""
    jaccard = np.ones(first.shape[0]) if jaccard is None else jaccard
    bounds = np.cumsum([0] + sizes)
    assert bounds[-1] == first.shape[0]
    for number, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:])):
        write_part(work, kind, number, {"first": first[start:stop], "second": second[start:stop],
                                        "jaccard": jaccard[start:stop]})
    return PairParts.of(work, kind, np.array(sizes, np.int64))


def written(work: str, kind: str, parts: list[list[tuple[int, int, float]]]) -> PairParts:
    """The pairs (first, second, jaccard) of each part written as part 0, 1, ... of ``kind``."""
    pairs = [pair for part in parts for pair in part]
    first, second, jaccard = (np.array(values) for values in zip(*pairs)) if pairs else (np.zeros(0),) * 3
    return pairs_in_parts(work, first.astype(np.int64), second.astype(np.int64), [len(part) for part in parts],
                          jaccard.astype(np.float64), kind)


def random_parts(rng, sizes: list[int]) -> list[list[tuple[int, int, float]]]:
    """Parts of distinct pairs a < b in random order, ``sizes`` of them."""
    chosen = rng.choice(200 * 200, sum(sizes), replace=False)
    pairs = [(int(code // 200), int(code % 200) + 200, float(rng.random())) for code in chosen]
    bounds = np.cumsum([0] + sizes)
    return [pairs[start:stop] for start, stop in zip(bounds[:-1], bounds[1:])]


def test_parts_of_two_kinds_are_numbered_one_kind_after_the_other(tmp_path):
    rng = np.random.default_rng(1)
    work = str(tmp_path / "work")
    verified, copies = random_parts(rng, [2, 0, 3]), random_parts(rng, [1, 2])
    parts = written(work, VERIFIED, verified).joined(written(work, COPIES, copies))
    assert (parts.count, parts.total, parts.holding) == (5, 8, [0, 2, 3, 4])
    assert parts.unit(2) == (VERIFIED, "pairs/verified/00002")
    assert parts.unit(4) == (COPIES, "pairs/copies/00001")
    with pytest.raises(IndexError, match="part 5 is past the parts' end"):
        parts.unit(5)
    read = parts.read_part(4)
    assert list(zip(read["first"].tolist(), read["second"].tolist(), read["jaccard"].tolist())) == copies[1]


@pytest.mark.parametrize("sizes", [[40, 0, 25, 7], [0, 0], []])
def test_every_pair_is_read_back_ascending(tmp_path, sizes):
    """read_parts (PairParts.read): every pair of every part, ascending by (first, second),
    with empty arrays of the parts' columns where they hold none."""
    rng = np.random.default_rng(len(sizes))
    parts = random_parts(rng, sizes)
    read = written(str(tmp_path / "work"), VERIFIED, parts).read()
    assert read["first"].dtype == read["second"].dtype == np.int64 and read["jaccard"].dtype == np.float64
    assert list(zip(read["first"].tolist(), read["second"].tolist(), read["jaccard"].tolist())) == \
        sorted(pair for part in parts for pair in part)


@pytest.mark.parametrize("sizes", [[5, 0, 9], [0]])
def test_a_function_over_the_verified_parts_sees_every_pair_once(tmp_path, sizes):
    """VerifiedParts.map runs the function a part at a time (once over no pair where no part
    holds any), and once over every pair once they are read here."""
    rng = np.random.default_rng(7)
    parts = random_parts(rng, sizes)
    verified = VerifiedParts(written(str(tmp_path / "work"), VERIFIED, parts))

    def counted(first, second, jaccard, scale):
        return first.shape[0], scale * float(jaccard.sum())

    by_part = verified.map(None, counted, 2.0)
    assert len(by_part) == max(1, sum(size > 0 for size in sizes))
    expected = (sum(sizes), 2.0 * sum(j for part in parts for _, _, j in part))
    assert sum(count for count, _ in by_part) == expected[0]
    assert sum(total for _, total in by_part) == pytest.approx(expected[1])
    assert verified.count == expected[0]
    assert verified.arrays[0].shape == (expected[0],)  # (read here from now on)
    (count, total), = verified.map(None, counted, 2.0)
    assert (count, total) == (expected[0], pytest.approx(expected[1]))


def test_the_checked_pairs_give_the_verified_parts_then_the_copies(tmp_path):
    rng = np.random.default_rng(3)
    work = str(tmp_path / "work")
    verified, copies = random_parts(rng, [4, 0, 6]), random_parts(rng, [3])
    written(work, VERIFIED, verified)
    written(work, COPIES, copies)
    checked = CheckedParts(work, candidates=30, checked=25, rejected=15, part_sizes=np.array([4, 0, 6], np.int64),
                           copy_sizes=np.array([3], np.int64))
    pairs = checked.verified(0.8)
    assert pairs.count == 13 and pairs.parts.kinds == ((VERIFIED, 3), (COPIES, 1))
    first, second, jaccard = pairs.arrays
    assert list(zip(first.tolist(), second.tolist(), jaccard.tolist())) == \
        sorted(pair for part in verified + copies for pair in part)
    every = checked.every_jaccard(jaccard)
    assert every.shape == (13 + 15,) and (every[13:] == BELOW_THRESHOLD).all()


def test_a_stage_kept_for_resume_gives_the_same_form_back(tmp_path):
    """What a work directory keeps of the candidate and verification stages (as_arrays, counts
    alone) makes the same forms again (of_arrays), as a resumed run reads them."""
    work = str(tmp_path / "work")
    checked = CheckedParts(work, 30, 25, 15, np.array([4, 0, 6], np.int64), np.array([3], np.int64))
    again = CheckedParts.of_arrays(work, checked.as_arrays())
    assert (again.candidates, again.checked, again.rejected) == (30, 25, 15)
    assert again.part_sizes.tolist() == [4, 0, 6] and again.copy_sizes.tolist() == [3]
    likely = LikelyParts(work, candidates=12, parts=3)
    assert LikelyParts.of_arrays(work, likely.as_arrays()) == likely
    first, second = likely.every_candidate(None)
    assert first.shape == second.shape == (0,) and first.dtype == np.int64
