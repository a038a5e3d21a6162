"""Scoring one setting against its ground truth, and choosing among settings.

For a setting at threshold t, against the true pairs T (exact Jaccard >= t, truth.py):

    candidates      C: every pair LSH produced (before the signature filter)
    verified        V: the pairs the run reported (exact Jaccard >= threshold)

    candidate precision |C & T| / |C|    candidate recall |C & T| / |T|
    verified precision  |V & T| / |V|    verified recall  |V & T| / |T|    F1 of the two
    cluster recall: the share of T whose two documents end in one cluster

Verification is exact, so verified precision is 1.0 by construction; it is reported anyway
(a value below 1 would be a bug). Recall is also given per similarity bin (true pairs binned
by their exact Jaccard from the threshold to 1), beside the share the S-curve predicts.

Settings are compared only with the settings scored against the same ground truth (the same
shingle spec and threshold): a recall against one truth says nothing against another, so
``recommendations`` names one setting per truth, by ``best_result``'s rule.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Optional, Sequence

import numpy as np

from ..core.copies import implied_pairs
from ..core.lsh import collision_probability, similarity_text
from ..core.shingling import ShingleSpec
from ..errors import ParameterError
from ..params import is_number
from .grid import Setting, spec_label
from .truth import GroundTruth, found_in, pair_codes

DEFAULT_BIN_WIDTH = 0.05

# criterion -> (SettingResult field, True when larger is better). "precision" means candidate
# precision: verified precision is 1.0 by construction, so it cannot tell settings apart.
CRITERIA = {
    "f1": ("verified_f1", True),
    "recall": ("verified_recall", True),
    "precision": ("candidate_precision", True),
    "time": ("seconds", False),
    "memory": ("peak_rss_mb", False),
    "candidate_recall": ("candidate_recall", True),
    "candidate_f1": ("candidate_f1", True),
    "cluster_recall": ("cluster_recall", True),
}
# Metric values closer than this count as a tie (broken by time).
TIE_TOLERANCE = 1e-9


def _ratio(numerator: int, denominator: int) -> Optional[float]:
    return float(numerator) / denominator if denominator else None


def _f1(precision: Optional[float], recall: Optional[float]) -> Optional[float]:
    if precision is None or recall is None:
        return None
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


# The narrowest recall bin: a thousand over the whole range of similarities. (Edges are kept to
# ten digits, and every bin is a row of evaluation.json: narrower ones are noise and size.)
MIN_BIN_WIDTH = 0.001


def check_bin_width(width: float) -> None:
    """ParameterError unless ``width`` is a bin width from MIN_BIN_WIDTH to 1."""
    if not is_number(width) or not MIN_BIN_WIDTH <= width <= 1:
        raise ParameterError(f"bin_width= must be from {MIN_BIN_WIDTH} to 1; got {width!r}")


def bin_edges(threshold: float, width: float = DEFAULT_BIN_WIDTH) -> np.ndarray:
    """float64 edges threshold, threshold + width, ..., 1.0 (the last bin may be narrower and
    includes 1.0); a threshold of 1 gives the one bin [1, 1 + width] (it holds J = 1 alone)."""
    check_bin_width(width)
    count = max(1, math.ceil((1.0 - threshold) / width - 1e-9))
    edges = [round(threshold + i * width, 10) for i in range(count)] + [1.0]
    return np.array(edges if threshold < 1 else [1.0, 1.0 + width])


@dataclass
class RecallBins:
    """Recall by exact similarity: true pairs binned on ``edges`` (bin i is
    [edges[i], edges[i+1]), the last one closed). Per bin: how many true pairs, how many LSH
    made candidates and the run verified, those shares (None for an empty bin), and the share
    of candidates the S-curve predicts (mean of 1 - (1 - J^r)^b over the bin's pairs)."""

    edges: list
    true_pairs: list
    candidate_found: list
    verified_found: list
    candidate_recall: list
    verified_recall: list
    expected_candidate_recall: list

    @classmethod
    def of(cls, jaccard, in_candidates, in_verified, threshold, bands, rows, width) -> "RecallBins":
        edges = bin_edges(threshold, width)
        nbins = edges.shape[0] - 1
        which = np.clip(np.searchsorted(edges, jaccard, side="right") - 1, 0, nbins - 1)
        true = np.bincount(which, minlength=nbins)
        cand = np.bincount(which, weights=in_candidates, minlength=nbins).astype(np.int64)
        ver = np.bincount(which, weights=in_verified, minlength=nbins).astype(np.int64)
        expected = np.bincount(which, weights=collision_probability(jaccard, bands, rows), minlength=nbins)
        return cls(edges=edges.tolist(), true_pairs=true.tolist(), candidate_found=cand.tolist(),
                   verified_found=ver.tolist(),
                   candidate_recall=[_ratio(c, t) for c, t in zip(cand, true)],
                   verified_recall=[_ratio(v, t) for v, t in zip(ver, true)],
                   expected_candidate_recall=[float(e) / t if t else None for e, t in zip(expected, true)])


# --- one setting ------------------------------------------------------------------------------


@dataclass
class SettingResult:
    """The scores of one setting (module docstring). Ratios are None where undefined (no true
    pairs, no candidates). seconds: the pipeline's stage time (signature pass, candidates,
    verification, clustering; the corpus is already in memory); stage_seconds /
    stage_peak_rss_mb per stage, busy_seconds of the parallel parts; peak_rss_mb the largest
    stage peak (process resident high-water mark while the stage ran)."""

    setting: Setting
    bands: int
    rows: int
    banding_rule: str
    documents: int
    true_pairs: int
    candidate_pairs: int
    checked_pairs: int
    verified_pairs: int
    candidate_true_pairs: int
    verified_true_pairs: int
    clustered_true_pairs: int
    candidate_precision: Optional[float]
    candidate_recall: Optional[float]
    candidate_f1: Optional[float]
    verified_precision: Optional[float]
    verified_recall: Optional[float]
    verified_f1: Optional[float]
    cluster_recall: Optional[float]
    candidates_per_document: float
    seconds: float
    peak_rss_mb: float
    stage_seconds: dict = field(default_factory=dict)
    stage_peak_rss_mb: dict = field(default_factory=dict)
    busy_seconds: dict = field(default_factory=dict)
    recall_by_similarity: Optional[RecallBins] = None

    @property
    def f1(self) -> Optional[float]:
        return self.verified_f1

    def value(self, criterion: str) -> Optional[float]:
        return getattr(self, criterion_field(criterion)[0])

    def as_dict(self) -> dict:
        data = asdict(self)
        data["setting"] = self.setting.as_dict()
        data["label"] = self.setting.label
        return data


def score_outcome(setting: Setting, outcome, truth: GroundTruth, n_docs: int,
                  bin_width: float = DEFAULT_BIN_WIDTH) -> SettingResult:
    """Compare a run's candidates and verified pairs (pipeline.outcome.Outcome) with the truth."""
    _, _, true_jaccard, true_codes = truth.at(setting.threshold)
    # Identical copies are listed as a star around their group's first document; the truth
    # lists every pair of the group and every pair of each copy (copies.implied_pairs).
    copies = outcome.copies.read()
    candidates = pair_codes(*implied_pairs(outcome.candidate_a, outcome.candidate_b, copies.first,
                                           copies.member, n_docs)[:2], n_docs)
    verified = pair_codes(*implied_pairs(outcome.pair_a, outcome.pair_b, copies.first, copies.member, n_docs)[:2],
                          n_docs)
    in_candidates = found_in(true_codes, candidates)
    in_verified = found_in(true_codes, verified)
    # Cluster recall: both documents of a true pair in one cluster.
    label = np.full(n_docs, -1, dtype=np.int64)
    label[outcome.clusters.docs] = outcome.clusters.cluster
    a, b = true_codes // max(n_docs, 1), true_codes % max(n_docs, 1)
    clustered = int(((label[a] == label[b]) & (label[a] >= 0)).sum()) if n_docs else 0

    report = outcome.report
    parameters = report["parameters"]
    n_true, n_cand, n_ver = true_codes.shape[0], candidates.shape[0], verified.shape[0]
    cand_true, ver_true = int(in_candidates.sum()), int(in_verified.sum())
    cand_p, cand_r = _ratio(cand_true, n_cand), _ratio(cand_true, n_true)
    ver_p, ver_r = _ratio(ver_true, n_ver), _ratio(ver_true, n_true)
    stages = report["stages"]
    return SettingResult(
        setting=setting,
        bands=int(parameters["bands"]),
        rows=int(parameters["rows"]),
        banding_rule=parameters["banding_rule"],
        documents=n_docs,
        true_pairs=n_true,
        candidate_pairs=n_cand,
        checked_pairs=int(report["results"]["exactly_checked_pairs"]),
        verified_pairs=n_ver,
        candidate_true_pairs=cand_true,
        verified_true_pairs=ver_true,
        clustered_true_pairs=clustered,
        candidate_precision=cand_p,
        candidate_recall=cand_r,
        candidate_f1=_f1(cand_p, cand_r),
        verified_precision=ver_p,
        verified_recall=ver_r,
        verified_f1=_f1(ver_p, ver_r),
        cluster_recall=_ratio(clustered, n_true),
        candidates_per_document=n_cand / n_docs if n_docs else 0.0,
        seconds=float(report["total_seconds"]),
        peak_rss_mb=float(report["peak_rss_mb"]),
        stage_seconds={k: v["seconds"] for k, v in stages.items() if "seconds" in v},
        stage_peak_rss_mb={k: v["peak_rss_mb"] for k, v in stages.items() if "peak_rss_mb" in v},
        busy_seconds={k: v["busy_seconds"] for k, v in stages.items() if "busy_seconds" in v},
        recall_by_similarity=RecallBins.of(true_jaccard, in_candidates, in_verified, setting.threshold,
                                           int(parameters["bands"]), int(parameters["rows"]), bin_width),
    )


# --- choosing ---------------------------------------------------------------------------------


def criterion_field(criterion: str) -> tuple[str, bool]:
    """(SettingResult field, larger is better) of a criterion name (CRITERIA)."""
    try:
        return CRITERIA[criterion]
    except KeyError:
        raise ParameterError(f"criterion= must be one of {', '.join(CRITERIA)}; got {criterion!r}") from None


def best_result(results: Sequence[SettingResult], criterion: str = "f1") -> Optional[SettingResult]:
    """The best result for ``criterion`` (CRITERIA): the largest value (smallest for time and
    memory), values within TIE_TOLERANCE tied and ties broken by the shorter time, then by grid
    order. Undefined values (None) rank last. None for no results."""
    name, larger = criterion_field(criterion)
    if not results:
        return None

    def rank(indexed):
        index, result = indexed
        value = getattr(result, name)
        if value is None:
            return (1, 0.0, result.seconds, index)
        scaled = round(value / TIE_TOLERANCE) if name not in ("seconds", "peak_rss_mb") else value
        return (0, -scaled if larger else scaled, result.seconds, index)

    return min(enumerate(results), key=rank)[1]


@dataclass(frozen=True)
class Recommendation:
    """The setting recommended for one ground truth: the settings of ``indices`` (grid
    positions) share the shingle spec ``spec`` and the threshold ``threshold``, so they are
    scored against the same true pairs; ``result`` (grid position ``index``) is their best for
    ``criterion`` (best_result)."""

    spec: ShingleSpec
    threshold: float
    criterion: str
    index: int
    result: SettingResult
    indices: tuple[int, ...]

    @property
    def label(self) -> str:
        """'word5 t=0.8': the ground truth this recommendation is for."""
        return f"{spec_label(self.spec)} t={similarity_text(self.threshold)}"

    @property
    def value(self) -> Optional[float]:
        """The recommended setting's value of the criterion."""
        return self.result.value(self.criterion)


def recommendations(results: Sequence[SettingResult], criterion: str = "f1") -> list[Recommendation]:
    """One Recommendation per ground truth (shingle spec and threshold) of ``results``, in the
    order the truths first appear: the best_result of the settings scored against it. Empty for
    no results; raises ParameterError for an unknown criterion."""
    criterion_field(criterion)
    groups: dict[tuple[ShingleSpec, float], list[int]] = {}
    for i, result in enumerate(results):
        groups.setdefault((result.setting.spec(), result.setting.threshold), []).append(i)
    chosen = []
    for (spec, threshold), indices in groups.items():
        best = best_result([results[i] for i in indices], criterion)
        index = next(i for i in indices if results[i] is best)
        chosen.append(Recommendation(spec, threshold, criterion, index, results[index], tuple(indices)))
    return chosen
