"""The sample ``gpudedup evaluate`` scores on, and its exact ground truth: every pair of
documents whose exact Jaccard similarity reaches the threshold, computed once per shingle spec
at the lowest threshold of the grid by the prefix-filtering join of
``allpairs.exact_similar_pairs`` and filtered for each higher threshold (``TruthCache``).
Pair sets are sorted int64 codes ``a * n + b`` compared with numpy, never Python sets."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Iterable, Optional

import numpy as np
import pyarrow as pa

from ..core.allpairs import SimilarPairs, exact_similar_pairs
from ..core.content import bad_token_rows, check_content, is_token_type
from ..core.shingling import ShingleBatch, ShingleSpec, unique_per_row, utf8_shingle_hashes
from ..pipeline.signatures import text_batches
from ..errors import InputError, ParameterError
from ..io.corpus import Corpus
from ..io.rules import row_locator
from ..io.source import SourceFile
from ..threads import map_parallel
from .grid import Setting

# Text per batch when shingling the corpus for the ground truth (numpy, host).
TRUTH_BATCH_BYTES = 4 << 20


# --- the sample -------------------------------------------------------------------------------


def first_rows(rows: int, limit: Optional[int]) -> int:
    """How many of ``rows`` documents ``limit`` keeps (None: all): those a sample is drawn from."""
    return rows if limit is None else min(rows, limit)


def select_documents(corpus: Corpus, limit: Optional[int] = None, sample: Optional[int] = None,
                     seed: int = 0) -> Corpus:
    """The documents to evaluate on: the first ``limit`` rows, then ``sample`` of those drawn
    at random (numpy default_rng(seed), without replacement, kept in input order). Either may
    be None (all). Returns the corpus itself when nothing is dropped."""
    rows = corpus.num_rows
    for name, value in (("limit", limit), ("sample", sample)):
        if value is not None and (isinstance(value, bool) or not (isinstance(value, (int, np.integer)) and value >= 1)):
            raise ParameterError(f"{name}= must be an integer >= 1; got {value!r}")
    if isinstance(seed, bool) or not (isinstance(seed, (int, np.integer)) and seed >= 0):  # (numpy's seeds)
        raise ParameterError(f"sample_seed= must be an integer >= 0; got {seed!r}")
    chosen = np.arange(first_rows(rows, limit), dtype=np.int64)
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
    # (the files read: the column is the files' combined, which none of them has, or of a type of one)
    files = [f.path for f in corpus.files]
    more = len(files) - 1
    where = None if not files else files[0] + (f" (and {more:,} more file{'s' * (more > 1)})" if more else "")
    if token_field not in corpus.table.column_names:
        raise InputError(f"{where + ': ' if where else ''}no field {token_field!r} for token shingles (fields: "
                         f"{', '.join(corpus.table.column_names)}); name it with token_field=")
    # The readers checked only the column read as content (the text): the ids get the same
    # checks here, or a negative or null id would be hashed as some other 32-bit unit.
    column = corpus.table[token_field]
    check_content(column.type, "token", token_field, where)
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
