"""Scoring MinHash LSH settings against exact Jaccard: the grid search of ``gpudedup evaluate``.

For every setting of a grid (permutation budget K, bands x rows or the rule that chooses them,
shingle kind and size, threshold) the real job (``engine.memory.dedup_corpus``) runs on a sample
corpus, and its LSH candidate pairs and verified pairs are compared with the exact set of
pairs whose Jaccard similarity reaches the threshold (the ground truth):

    true pairs      T: every pair with exact Jaccard >= threshold (``allpairs``, no estimate)
    candidates      C: every pair LSH produced (before the signature filter)
    verified        V: the pairs the run reported (exact Jaccard >= threshold)

    candidate precision |C & T| / |C|    candidate recall |C & T| / |T|
    verified precision  |V & T| / |V|    verified recall  |V & T| / |T|    F1 of the two
    cluster recall: the share of T whose two documents end in one cluster

Verification is exact, so verified precision is 1.0 by construction; it is reported anyway
(a value below 1 would be a bug). Recall is also given per similarity bin (true pairs binned
by their exact Jaccard from the threshold to 1), beside the share the S-curve predicts,
for a recall-vs-similarity plot.

The ground truth is computed once per (shingle, ngram), at the lowest threshold of the grid,
by the prefix-filtering join of ``allpairs.exact_similar_pairs`` (exact; scales to tens of
thousands of documents), and filtered for each higher threshold (``TruthCache``). Pair sets
are compared as sorted int64 codes ``a * n + b`` with numpy, never as Python sets.

Typical use (what the CLI does)::

    corpus = select_documents(read_corpus(paths, "text", None), limit=20_000)
    settings, notes = expand_grid(num_perm=[64, 128], bands=[None, 8, 16], rows=[4, 8],
                                  shingle=["word"], ngram=[3, 5], threshold=[0.7, 0.8])
    evaluation = evaluate(corpus, settings, backend="cpu", notes=notes)
    print(format_table(evaluation, criterion="f1"))
    write_results(evaluation, "eval/", criterion="f1")   # evaluation.json, evaluation.csv
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence, Union

import numpy as np
import pyarrow as pa

from .core.allpairs import SimilarPairs, exact_similar_pairs
from .core.content import bad_token_rows, check_content, content_bytes, is_token_type
from .core.copies import implied_pairs
from .core.lsh import collision_probability
from .core.shingling import ShingleBatch, ShingleKind, ShingleSpec, UnicodeForm, unique_per_row, utf8_shingle_hashes
from .engine.memory import dedup_corpus
from .engine.signatures import text_batches
from .io.corpus import Corpus
from .io.rules import row_locator
from .io.source import SourceFile
from . import plots
from .backends import get_backend
from .errors import InputError, ParameterError
from .params import DEFAULT_BUCKET_WINDOW, DEFAULT_NGRAM, DEFAULT_NUM_PERM, DEFAULT_SEED, DEFAULT_THRESHOLD, DedupParams
from .stages import Progress
from .threads import map_parallel
from .version import __version__

DEFAULT_BIN_WIDTH = 0.05
# Text per batch when shingling the corpus for the ground truth (numpy, host).
TRUTH_BATCH_BYTES = 4 << 20
# Documents of the untimed warm-up run before the first measured setting (kernel compilation,
# lookup tables, first-touch allocations would otherwise land in the first setting's time).
WARMUP_DOCUMENTS = 256

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


# --- settings and grids ------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """One point of the grid.

    num_perm: the permutation budget K. bands, rows: LSH banding, both given or both None; None
    means chosen from the threshold (lsh.choose_bands, at most ``max_false_negative`` of the
    pairs at the threshold missed: 1% when None, the pipeline's rule). shingle ("word", "char"
    or "token") and ngram: the shingles; unicode, strip_punctuation, strip_symbols: their text
    normalisation (DedupParams). threshold: verified pairs have exact Jaccard >= it.
    """

    num_perm: int = DEFAULT_NUM_PERM
    bands: Optional[int] = None
    rows: Optional[int] = None
    shingle: ShingleKind = "word"
    ngram: int = DEFAULT_NGRAM
    threshold: float = DEFAULT_THRESHOLD
    max_false_negative: Optional[float] = None
    unicode: Optional[UnicodeForm] = None
    strip_punctuation: bool = False
    strip_symbols: bool = False

    def params(self, **extra) -> DedupParams:
        """The DedupParams of this setting (``extra``: seed, bucket_window, batch_bytes, ...)."""
        targets: dict[str, Any] = {} if self.max_false_negative is None else {"max_fn": self.max_false_negative}
        return DedupParams(threshold=self.threshold, shingle=self.shingle, ngram=self.ngram,
                           unicode=self.unicode, strip_punctuation=self.strip_punctuation,
                           strip_symbols=self.strip_symbols, num_perm=self.num_perm, bands=self.bands,
                           rows=self.rows, **targets, **extra)

    def spec(self) -> ShingleSpec:
        """What the shingles are: settings of one spec share their ground truth."""
        return ShingleSpec(self.shingle, self.ngram, self.unicode, self.strip_punctuation, self.strip_symbols)

    @property
    def banding_label(self) -> str:
        if self.bands is not None:
            return f"{self.bands}x{self.rows}"
        return "auto" if self.max_false_negative is None else f"auto(fn<={self.max_false_negative:g})"

    @property
    def label(self) -> str:
        return (f"{spec_label(self.spec())} t={self.threshold:g} K={self.num_perm} "
                f"b x r={self.banding_label}")

    def as_dict(self) -> dict:
        return asdict(self)


def spec_label(spec: ShingleSpec) -> str:
    """'word5', 'char5+nfkc-punct-sym', 'token3': a shingle spec in a table cell."""
    label = f"{spec.kind}{spec.n}" + (f"+{spec.unicode}" if spec.unicode else "")
    return label + ("-punct" if spec.strip_punctuation else "") + ("-sym" if spec.strip_symbols else "")


def expand_grid(
    num_perm: Sequence[int] = (DEFAULT_NUM_PERM,),
    bands: Optional[Sequence[Optional[int]]] = None,
    rows: Optional[Sequence[Optional[int]]] = None,
    shingle: Sequence[ShingleKind] = ("word",),
    ngram: Sequence[int] = (DEFAULT_NGRAM,),
    threshold: Sequence[float] = (DEFAULT_THRESHOLD,),
    max_false_negative: Optional[Sequence[Optional[float]]] = None,
    unicode: Sequence[Optional[UnicodeForm]] = (None,),
    strip_punctuation: Sequence[bool] = (False,),
    strip_symbols: Sequence[bool] = (False,),
) -> tuple[list[Setting], list[str]]:
    """Every combination of the lists, as Settings, and notes on the combinations skipped.

    Banding, for each num_perm:
      - neither ``bands`` nor ``rows``: chosen from the threshold (one setting per target in
        ``max_false_negative``; None there, or no list, is the pipeline's 1% rule);
      - ``bands`` only: rows = num_perm // bands (the seed's "num_bands" grid);
      - ``rows`` only: bands = num_perm // rows;
      - both: every (bands, rows) pair.
      A None in ``bands`` or ``rows`` adds the chosen banding ("auto") to the explicit ones.
    Combinations that cannot run are skipped with a note: bands * rows > num_perm, a derived
    bands or rows of 0, and targets no banding within num_perm meets. Values that are wrong on
    their own (a threshold of 2, an unknown shingle kind, num_perm 0) raise ParameterError.
    The normalisation lists (unicode, strip_punctuation, strip_symbols) apply to text
    shingles; token shingles take ids as given and get one setting each.
    Settings come out in a stable order, shingles outermost (the ground truth is computed per
    shingle spec), duplicates removed.
    """
    settings: list[Setting] = []
    notes: list[str] = []
    targets = list(max_false_negative) if max_false_negative else [None]
    for target in targets:
        if target is not None and not 0 < target < 1:
            raise ParameterError(f"max_false_negative= must be in (0, 1); got {target!r}")
    for kind, n, forms in _shingles(shingle, ngram, unicode, strip_punctuation, strip_symbols):
        for t in threshold:
            for k in num_perm:
                # Checks each value on its own (and its name in the message).
                DedupParams(threshold=t, shingle=kind, ngram=n, num_perm=k, **forms)
                for b, r, why in _bandings(k, bands, rows):
                    if why:
                        notes.append(f"skipped shingle={kind} ngram={n} threshold={t:g} num_perm={k}: {why}")
                        continue
                    if b is not None:
                        settings.append(Setting(k, b, r, kind, n, t, **forms))
                        continue
                    for target in targets:
                        setting = Setting(k, None, None, kind, n, t, target, **forms)
                        try:
                            setting.params().banding()  # targets no b x r <= K meets
                        except ParameterError as error:
                            notes.append(f"skipped {setting.label}: {error}")
                            continue
                        settings.append(setting)
    return list(dict.fromkeys(settings)), list(dict.fromkeys(notes))


def _shingles(shingle, ngram, unicode, strip_punctuation, strip_symbols):
    """(kind, n, normalisation keywords) of every shingle spec of the grid."""
    for kind in shingle:
        for n in ngram:
            if kind == "token":
                yield kind, n, {}
                continue
            for form in unicode:
                for punctuation in strip_punctuation:
                    for symbols in strip_symbols:
                        yield kind, n, {"unicode": form, "strip_punctuation": punctuation,
                                        "strip_symbols": symbols}


def _bandings(num_perm: int, bands, rows):
    """(bands, rows, why-skipped) for one num_perm; (None, None, "") is the chosen banding."""
    for name, values in (("bands", bands), ("rows", rows)):
        for value in values or ():
            if value is not None and not (isinstance(value, (int, np.integer)) and value >= 1):
                raise ParameterError(f"{name}= must be integers >= 1 (or None: chosen); got {value!r}")
    if not bands and not rows:
        yield None, None, ""
        return
    if bands and rows:
        pairs = [(b, r) for b in bands for r in rows]
    elif bands:
        pairs = [(b, None if b is None else num_perm // b) for b in bands]
    else:
        pairs = [(None if r is None else num_perm // r, r) for r in rows]
    for b, r in pairs:
        if b is None or r is None:  # "auto" in either list
            yield None, None, ""
            continue
        b, r = int(b), int(r)
        if b == 0 or r == 0:
            what = "bands" if b == 0 else "rows"
            yield b, r, f"{what} = num_perm // {'rows' if b == 0 else 'bands'} is 0"
        elif b * r > num_perm:
            yield b, r, f"bands * rows = {b} * {r} = {b * r} > num_perm"
        else:
            yield b, r, ""


def parse_list(text: str, kind: Callable[[str], Any] = int, allow_auto: bool = False) -> list:
    """A comma-separated CLI value as a list: "64,128" -> [64, 128]; with ``allow_auto``,
    "auto" becomes None ("8,16,auto" -> [8, 16, None]). Raises ParameterError on a bad item."""
    values: list = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if allow_auto and item.lower() == "auto":
            values.append(None)
            continue
        try:
            values.append(kind(item))
        except ValueError:
            raise ParameterError(f"cannot read {item!r} in {text!r} as {getattr(kind, '__name__', kind)}") from None
    if not values:
        raise ParameterError(f"an empty list: {text!r}")
    return values


def unicode_form(text: str) -> Optional[str]:
    """A --unicode list item: "none" -> None, "nfc", "nfkc" as they are (DedupParams checks)."""
    return None if text.lower() == "none" else text.lower()


def yes_no(text: str) -> bool:
    """A --strip-punctuation / --strip-symbols list item: yes/no, true/false, 1/0."""
    value = {"yes": True, "true": True, "1": True, "no": False, "false": False, "0": False}.get(text.lower())
    if value is None:
        raise ValueError(text)
    return value


# --- the sample -------------------------------------------------------------------------------


def select_documents(corpus: Corpus, limit: Optional[int] = None, sample: Optional[int] = None,
                     seed: int = 0) -> Corpus:
    """The documents to evaluate on: the first ``limit`` rows, then ``sample`` of those drawn
    at random (numpy default_rng(seed), without replacement, kept in input order). Either may
    be None (all). Returns the corpus itself when nothing is dropped."""
    rows = corpus.num_rows
    for name, value in (("limit", limit), ("sample", sample)):
        if value is not None and not (isinstance(value, (int, np.integer)) and value >= 1):
            raise ParameterError(f"{name}= must be an integer >= 1; got {value!r}")
    chosen = np.arange(min(rows, limit) if limit is not None else rows, dtype=np.int64)
    described = [f"first {chosen.shape[0]} of {rows}"] if chosen.shape[0] < rows else []
    if sample is not None and sample < chosen.shape[0]:
        picked = np.random.default_rng(seed).choice(chosen.shape[0], size=sample, replace=False)
        chosen = chosen[np.sort(picked)]
        described.append(f"random {sample} (seed {seed})")
    if chosen.shape[0] == rows:
        return corpus
    take = pa.array(chosen)
    label = f"<{', '.join(described)} rows of {', '.join(f.path for f in corpus.files) or 'the input'}>"
    return Corpus(corpus.table.take(take), corpus.text_field, corpus.ids.take(take),
                  [SourceFile(label, "sample", int(chosen.shape[0]))], list(corpus.skipped),
                  list(corpus.inputs))


def content_corpus(corpus: Corpus, shingle: str, token_field: Optional[str]) -> Corpus:
    """The corpus whose content column ``shingle`` shingles read: for token shingles the
    column token_field of the same rows (when the corpus reads another), else the corpus."""
    if shingle != "token" or token_field is None or token_field == corpus.text_field:
        return corpus
    if token_field not in corpus.table.column_names:
        raise InputError(f"no field {token_field!r} for token shingles (fields: "
                         f"{', '.join(corpus.table.column_names)}); name it with token_field=")
    # The readers checked only the column read as content (the text): the ids get the same
    # checks here, or a negative or null id would be hashed as some other 32-bit unit.
    column = corpus.table[token_field]
    check_content(column.type, "token", token_field)
    if is_token_type(column.type):
        rows, reasons = bad_token_rows(column)
        if len(rows):
            raise InputError(f"{row_locator(corpus.files)(int(rows[0]))}: field {token_field!r} {reasons[0]}")
    return Corpus(corpus.table, token_field, corpus.ids, corpus.files, corpus.skipped, corpus.inputs)


# --- ground truth -----------------------------------------------------------------------------


def corpus_shingle_sets(corpus: Corpus, spec: ShingleSpec, batch_bytes: int = TRUTH_BATCH_BYTES,
                        workers: Optional[int] = None) -> ShingleBatch:
    """Every document's set of shingle hashes (sorted, no repeats), host numpy: the input of
    the exact join. The numpy reference shingling, batch by batch on ``workers`` threads."""
    data, offsets = corpus.units()
    workers = workers or min(8, os.cpu_count() or 1)

    def one(rows):
        start, stop = rows
        first = offsets[start]
        batch = utf8_shingle_hashes(data[first:offsets[stop]], offsets[start:stop + 1] - first, spec)
        return unique_per_row(batch)

    batches = text_batches(offsets, batch_bytes, 1 << 20, data.dtype.itemsize)
    parts = list(map_parallel(one, list(batches), workers))
    if not parts:
        return ShingleBatch(np.zeros(1, np.int64), np.zeros(0, np.uint64))
    counts = np.concatenate([np.diff(p.offsets) for p in parts])
    set_offsets = np.zeros(counts.shape[0] + 1, np.int64)
    np.cumsum(counts, out=set_offsets[1:])
    return ShingleBatch(set_offsets, np.concatenate([p.hashes for p in parts]))


def exact_ground_truth(corpus: Corpus, spec: ShingleSpec, threshold: float) -> SimilarPairs:
    """Every document pair (row indices, a < b, sorted) whose exact Jaccard similarity of
    shingle sets is >= threshold, with that Jaccard (allpairs.exact_similar_pairs)."""
    sets = corpus_shingle_sets(corpus, spec)
    return exact_similar_pairs(sets.offsets, sets.hashes, threshold)


@dataclass
class GroundTruth:
    """The exact pairs of one (shingle, ngram) down to ``threshold``.

    doc_a, doc_b: int64 (m,), a < b, sorted; jaccard: float64 (m,); codes: int64 (m,),
    doc_a * n_docs + doc_b, ascending. seconds: time to compute (shingling + join).
    """

    spec: ShingleSpec
    threshold: float
    n_docs: int
    doc_a: np.ndarray
    doc_b: np.ndarray
    jaccard: np.ndarray
    codes: np.ndarray
    seconds: float

    def at(self, threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(doc_a, doc_b, jaccard, codes) of the pairs with Jaccard >= threshold (>= self's).

        The float comparison is the one the pipeline's verification makes (intersection /
        union as float64 against the threshold), so a pair counts as true exactly when a
        perfect run would verify it."""
        if threshold < self.threshold:
            raise ValueError(f"ground truth down to {self.threshold} cannot answer {threshold}")
        keep = self.jaccard >= threshold
        return self.doc_a[keep], self.doc_b[keep], self.jaccard[keep], self.codes[keep]

    def summary(self) -> dict:
        return {"shingle": self.spec.kind, "ngram": self.spec.n, "unicode": self.spec.unicode,
                "strip_punctuation": self.spec.strip_punctuation, "strip_symbols": self.spec.strip_symbols,
                "min_threshold": self.threshold,
                "documents": self.n_docs, "pairs": int(self.codes.shape[0]),
                "seconds": round(self.seconds, 4),
                "method": "allpairs.exact_similar_pairs (prefix filtering, exact)"}


class TruthCache:
    """Ground truth per shingle spec for one corpus, computed at most once per lowest
    threshold asked for (``prepare`` with the grid's lowest threshold avoids recomputing).
    token_field: the column of token ids that token shingles read (content_corpus)."""

    def __init__(self, corpus: Corpus, token_field: Optional[str] = None):
        self.corpus, self.token_field = corpus, token_field
        self._truths: dict[ShingleSpec, GroundTruth] = {}

    def prepare(self, settings: Iterable[Setting]) -> None:
        lowest: dict[ShingleSpec, float] = {}
        for s in settings:
            lowest[s.spec()] = min(lowest.get(s.spec(), s.threshold), s.threshold)
        for spec, threshold in lowest.items():
            self.get(spec, threshold)

    def get(self, spec: ShingleSpec, threshold: float) -> GroundTruth:
        known = self._truths.get(spec)
        if known is not None and known.threshold <= threshold:
            return known
        started = time.perf_counter()
        pairs = exact_ground_truth(content_corpus(self.corpus, spec.kind, self.token_field), spec, threshold)
        n = self.corpus.num_rows
        truth = GroundTruth(spec, threshold, n, pairs.doc_a, pairs.doc_b, pairs.jaccard,
                            pair_codes(pairs.doc_a, pairs.doc_b, n), time.perf_counter() - started)
        self._truths[spec] = truth
        return truth

    def summaries(self) -> list[dict]:
        return [t.summary() for t in self._truths.values()]


# --- pair arithmetic --------------------------------------------------------------------------


def pair_codes(first: np.ndarray, second: np.ndarray, n_docs: int) -> np.ndarray:
    """int64 (p,) codes min * n_docs + max of document pairs, sorted ascending, distinct."""
    first = np.asarray(first, dtype=np.int64)
    second = np.asarray(second, dtype=np.int64)
    codes = np.minimum(first, second) * np.int64(n_docs) + np.maximum(first, second)
    return np.unique(codes)


def found_in(codes: np.ndarray, sorted_codes: np.ndarray) -> np.ndarray:
    """bool (m,): which of ``codes`` occur in ``sorted_codes`` (ascending int64)."""
    if sorted_codes.shape[0] == 0:
        return np.zeros(codes.shape[0], dtype=bool)
    position = np.minimum(np.searchsorted(sorted_codes, codes), sorted_codes.shape[0] - 1)
    return sorted_codes[position] == codes


def _ratio(numerator: int, denominator: int) -> Optional[float]:
    return float(numerator) / denominator if denominator else None


def _f1(precision: Optional[float], recall: Optional[float]) -> Optional[float]:
    if precision is None or recall is None:
        return None
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


def bin_edges(threshold: float, width: float = DEFAULT_BIN_WIDTH) -> np.ndarray:
    """float64 edges threshold, threshold + width, ..., 1.0 (the last bin may be narrower and
    includes 1.0); a threshold of 1 gives the one bin [1, 1 + width] (it holds J = 1 alone)."""
    if not 0 < width <= 1:
        raise ParameterError(f"bin_width= must be in (0, 1]; got {width!r}")
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
    """Compare a run's candidates and verified pairs (engine.outcome.Outcome) with the truth."""
    _, _, true_jaccard, true_codes = truth.at(setting.threshold)
    # Identical copies are listed as a star around their group's first document; the truth
    # lists every pair of the group and every pair of each copy (copies.implied_pairs).
    copies = outcome.copies
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


# --- the grid ---------------------------------------------------------------------------------


@dataclass
class Evaluation:
    """Everything ``evaluate`` measured: one SettingResult per setting (in grid order), the
    ground truths' summaries, notes (skipped combinations), the corpus and the backend."""

    results: list[SettingResult]
    ground_truth: list[dict]
    notes: list[str]
    corpus: dict
    backend: str
    run: dict = field(default_factory=dict)

    def best(self, criterion: str = "f1") -> Optional[SettingResult]:
        return best_result(self.results, criterion)


def evaluate(
    corpus: Corpus,
    settings: Sequence[Setting],
    *,
    backend="auto",
    seed: int = DEFAULT_SEED,
    bucket_window: int = DEFAULT_BUCKET_WINDOW,
    batch_bytes: Optional[int] = None,
    bin_width: float = DEFAULT_BIN_WIDTH,
    notes: Sequence[str] = (),
    truth_cache: Optional[TruthCache] = None,
    token_field: Optional[str] = None,
    warmup: bool = True,
    on_result: Optional[Callable[[int, int, SettingResult], None]] = None,
) -> Evaluation:
    """Run the pipeline once per setting on ``corpus`` and score it against exact Jaccard.

    backend: "auto" | "cpu" | "gpu" or a backend object (backends.get_backend). seed,
    bucket_window, batch_bytes: passed to every run (DedupParams). notes: carried into the
    output (expand_grid's skipped combinations). truth_cache: reuse ground truth computed
    before on the same corpus. token_field: the column token shingles read (content_corpus;
    None: the corpus's own content column). warmup: one untimed run on the first WARMUP_DOCUMENTS documents
    first (so that kernel compilation and first-use costs are not charged to one setting).
    on_result(i, total, result): called after each setting (progress for the CLI).
    """
    settings = list(settings)
    chosen = get_backend(backend)
    extra = {"seed": seed, "bucket_window": bucket_window, "batch_bytes": batch_bytes}
    for s in settings:
        s.params(**extra)  # every parameter error before any work
    cache = truth_cache or TruthCache(corpus, token_field)
    started = time.perf_counter()
    cache.prepare(settings)
    truth_seconds = time.perf_counter() - started
    if warmup and settings and corpus.num_rows:
        dedup_corpus(select_documents(content_corpus(corpus, settings[0].shingle, token_field),
                                      limit=WARMUP_DOCUMENTS), settings[0].params(**extra),
                  chosen, Progress())
    n_docs = corpus.num_rows
    results = []
    for i, s in enumerate(settings):
        outcome = dedup_corpus(content_corpus(corpus, s.shingle, token_field), s.params(**extra), chosen,
                               Progress(), keep_candidates=True)
        result = score_outcome(s, outcome, cache.get(s.spec(), s.threshold), n_docs, bin_width)
        del outcome
        results.append(result)
        if on_result is not None:
            on_result(i, len(settings), result)
    data, offsets = corpus.units()
    return Evaluation(
        results=results,
        ground_truth=cache.summaries(),
        notes=list(notes),
        corpus={"documents": n_docs, "text_bytes": int(content_bytes((data, offsets)).sum()),
                "files": [f.path for f in corpus.files]},
        backend=chosen.description,
        run={"seed": seed, "bucket_window": bucket_window, "batch_bytes": batch_bytes,
             "bin_width": bin_width, "ground_truth_seconds": round(truth_seconds, 4),
             "total_seconds": round(time.perf_counter() - started, 4)},
    )


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


# --- output -----------------------------------------------------------------------------------


def _index_of(items: Sequence[SettingResult], result: SettingResult) -> int:
    return next(i for i, r in enumerate(items) if r is result)


def _results_of(results) -> list[SettingResult]:
    return list(results.results) if isinstance(results, Evaluation) else list(results)


def evaluation_dict(results, criterion: str = "f1") -> dict:
    """The JSON document of an Evaluation (or a plain list of SettingResults)."""
    items = _results_of(results)
    best = best_result(items, criterion)
    data: dict[str, Any] = {"gpudedup_version": __version__}
    if isinstance(results, Evaluation):
        data.update(corpus=results.corpus, backend=results.backend, run=results.run,
                    ground_truth=results.ground_truth, notes=results.notes)
    data["criterion"] = {"name": criterion, "field": criterion_field(criterion)[0]}
    data["best"] = None if best is None else {
        "index": _index_of(items, best), "label": best.setting.label,
        "setting": best.setting.as_dict(), "value": best.value(criterion)}
    data["results"] = [dict(r.as_dict(), index=i, best=r is best) for i, r in enumerate(items)]
    return data


CSV_FIELDS = ["index", "best", "label", "shingle", "ngram", "unicode", "strip_punctuation", "strip_symbols",
              "threshold", "num_perm", "banding",
              "max_false_negative", "bands", "rows", "documents", "true_pairs", "candidate_pairs",
              "checked_pairs", "verified_pairs", "candidate_true_pairs", "verified_true_pairs",
              "candidate_precision", "candidate_recall", "candidate_f1", "verified_precision",
              "verified_recall", "verified_f1", "cluster_recall", "candidates_per_document",
              "seconds", "peak_rss_mb"]


def csv_text(results, criterion: str = "f1") -> str:
    """One CSV row per setting: CSV_FIELDS, then seconds_<stage>, peak_rss_mb_<stage> and
    busy_seconds_<part> for every stage any run reported. Undefined values are empty."""
    items = _results_of(results)
    best = best_result(items, criterion)
    stages = list(dict.fromkeys(k for r in items for k in r.stage_seconds))
    busy = list(dict.fromkeys(k for r in items for k in r.busy_seconds))
    columns = (CSV_FIELDS + [f"seconds_{s}" for s in stages] + [f"peak_rss_mb_{s}" for s in stages]
               + [f"busy_seconds_{p}" for p in busy])
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, columns, lineterminator="\n")
    writer.writeheader()
    for i, r in enumerate(items):
        s = r.setting
        row = {name: getattr(r, name) for name in CSV_FIELDS if hasattr(r, name)}
        row.update(index=i, best=r is best, label=s.label, shingle=s.shingle, ngram=s.ngram,
                   unicode=s.unicode or "", strip_punctuation=s.strip_punctuation, strip_symbols=s.strip_symbols,
                   threshold=s.threshold, num_perm=s.num_perm, banding=s.banding_label,
                   max_false_negative=s.max_false_negative)
        row.update({f"seconds_{k}": v for k, v in r.stage_seconds.items()})
        row.update({f"peak_rss_mb_{k}": v for k, v in r.stage_peak_rss_mb.items()})
        row.update({f"busy_seconds_{k}": v for k, v in r.busy_seconds.items()})
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buffer.getvalue()


def recall_figure(result: Optional[SettingResult]) -> Optional[bytes]:
    """PNG of recall against exact similarity for one setting (candidates, verified, and the
    S-curve's prediction), or None without matplotlib or a result."""

    if result is None or result.recall_by_similarity is None or not plots.matplotlib_available():
        return None
    bins = result.recall_by_similarity
    nan = float("nan")
    series = {"candidates (LSH)": [nan if v is None else v for v in bins.candidate_recall],
              "verified (exact)": [nan if v is None else v for v in bins.verified_recall]}
    setting = result.setting
    return plots.recall_by_similarity_figure(
        bins.edges, series, pair_counts=bins.true_pairs, threshold=setting.threshold,
        bands=result.bands, rows=result.rows, title=f"Recall by similarity: {setting.label}")


def write_results(results, out_dir: Union[str, os.PathLike], criterion: str = "f1") -> tuple[Path, Path]:
    """Write ``evaluation.json`` (everything: corpus, ground truth, notes, every setting with
    its recall bins, the best setting) and ``evaluation.csv`` (one row per setting) into
    ``out_dir`` (created if missing). Atomic: both are written to temporary files in out_dir
    and renamed over the old ones only when both are complete; on an error neither file is
    touched and no temporary file is left. Returns (json path, csv path)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    contents = {
        "evaluation.json": (json.dumps(evaluation_dict(results, criterion), indent=2, allow_nan=False) + "\n").encode(),
        "evaluation.csv": csv_text(results, criterion).encode(),
    }
    figure = recall_figure(best_result(_results_of(results), criterion))
    if figure is not None:
        contents["recall_by_similarity.png"] = figure
    temporary: dict[str, str] = {}
    try:
        for name, data in contents.items():
            handle, path = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=out)
            temporary[name] = path
            with os.fdopen(handle, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
        for name, path in temporary.items():
            os.replace(path, out / name)
    finally:
        for path in temporary.values():
            if os.path.exists(path):
                os.unlink(path)
    return out / "evaluation.json", out / "evaluation.csv"


def _number(value, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_table(results, criterion: str = "f1") -> str:
    """A plain-text table, one line per setting, the best for ``criterion`` marked with '*'
    and named on the last line."""
    items = _results_of(results)
    best = best_result(items, criterion)
    header = ["", "#", "shingle", "t", "K", "b x r", "true", "cand/doc", "cand P", "cand R",
              "ver P", "ver R", "F1", "clus R", "seconds", "peak MB"]
    rows = []
    for i, r in enumerate(items):
        s = r.setting
        banding = f"{r.bands}x{r.rows}" + ("" if s.bands is not None else " (auto)")
        rows.append(["*" if r is best else "", str(i), spec_label(s.spec()), f"{s.threshold:g}",
                     str(s.num_perm), banding, str(r.true_pairs), f"{r.candidates_per_document:.2f}",
                     _number(r.candidate_precision), _number(r.candidate_recall),
                     _number(r.verified_precision), _number(r.verified_recall), _number(r.verified_f1),
                     _number(r.cluster_recall), f"{r.seconds:.3f}", f"{r.peak_rss_mb:.0f}"])
    widths = [max(len(x) for x in column) for column in zip(header, *rows)]
    left = {2, 5}
    lines = ["  ".join(x.ljust(w) if j in left else x.rjust(w) for j, (x, w) in enumerate(zip(line, widths)))
             for line in [header] + rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if best is not None:
        name = criterion_field(criterion)[0]
        lines.append(f"best for {criterion} ({name} = {_number(best.value(criterion))}, "
                     f"{best.seconds:.3f} s): #{_index_of(items, best)} {best.setting.label}"
                     + ("" if best.setting.bands is not None else f" -> {best.bands}x{best.rows}"))
    else:
        lines.append("no settings were evaluated")
    return "\n".join(lines)
