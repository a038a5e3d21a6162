"""The grid run of ``gpudedup evaluate``: the real job (``pipeline.memory.dedup_corpus``) once
per setting on the sample, each run scored against the exact ground truth of its shingle spec
and threshold, and the Evaluation that holds the scores and recommends a setting per truth."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from ..backends import get_backend
from ..compiled import start_before, text_work
from ..core.content import units_bytes
from ..pipeline.memory import dedup_corpus
from ..pipeline.report import skipped_entry
from ..io.corpus import Corpus
from ..io.fields import TEXT_FIELD, check_fields_read
from ..params import DEFAULT_BUCKET_WINDOW, DEFAULT_SEED
from ..stages import Progress
from .grid import Setting
from .scoring import (DEFAULT_BIN_WIDTH, Recommendation, SettingResult, check_bin_width, criterion_field,
                      recommendations, score_outcome)
from .truth import TruthCache, content_corpus, select_documents
from .view import evaluation_html, evaluation_text

# Documents of the untimed warm-up run before the first measured setting (kernel compilation,
# lookup tables, first-touch allocations would otherwise land in the first setting's time).
WARMUP_DOCUMENTS = 256
WARMUP_COPIES = 16  # of them again as they are: identical copies, a cluster at any threshold


def warmup_corpus(content: Corpus) -> Corpus:
    """The warm-up's documents: the first WARMUP_DOCUMENTS of ``content`` (its content column
    only), each followed by a near copy (a text without its last word; token ids as they are)
    and the first WARMUP_COPIES again as they are, so that every stage a timed setting runs
    runs once before it: the candidates and their exact check (near copies that reach the
    threshold), the identical copies, the clusters (which import SciPy's at their first), which
    the identical copies form at any threshold."""
    first = select_documents(content, limit=WARMUP_DOCUMENTS).texts.combine_chunks()
    near = first
    if pa.types.is_string(first.type) or pa.types.is_large_string(first.type):
        near = pc.replace_substring_regex(first, r"\s+\S+\s*$", "", max_replacements=1)
    texts = pa.concat_arrays([first, near, first.slice(0, WARMUP_COPIES)])
    return Corpus(pa.table({"content": texts}), "content", pa.array(range(len(texts)), pa.int64()))


@dataclass(repr=False)
class Evaluation:
    """Everything ``evaluate`` measured: one SettingResult per setting (in grid order), the
    ground truths' summaries, notes (skipped combinations), the corpus and the backend.
    criterion: what the recommendations, the display and the output files rank by (CRITERIA)."""

    results: list[SettingResult]
    ground_truth: list[dict]
    notes: list[str]
    corpus: dict
    backend: str
    run: dict = field(default_factory=dict)
    criterion: str = "f1"

    def recommended(self, criterion: Optional[str] = None) -> list[Recommendation]:
        """The setting recommended for each ground truth (shingle spec and threshold): the best
        for ``criterion`` (None: self.criterion) among the settings scored against it."""
        return recommendations(self.results, criterion or self.criterion)

    def __repr__(self) -> str:
        return evaluation_text(self)

    def _repr_html_(self) -> str:
        return evaluation_html(self)


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
    criterion: str = "f1",
    on_result: Optional[Callable[[int, int, SettingResult], None]] = None,
    skipped_files: Sequence[str] = (),
) -> Evaluation:
    """Run the pipeline once per setting on ``corpus`` and score it against exact Jaccard.

    backend: "auto" | "cpu" | "gpu" or a backend object (backends.get_backend). seed,
    bucket_window, batch_bytes: passed to every run (DedupParams). notes: carried into the
    output (expand_grid's skipped combinations). truth_cache: reuse ground truth computed
    before on the same corpus. token_field: the column token shingles read (content_corpus;
    None: the corpus's own content column). warmup: one untimed run on the first WARMUP_DOCUMENTS documents
    first (so that kernel compilation and first-use costs are not charged to one setting).
    criterion: what the Evaluation recommends by (CRITERIA; Evaluation.recommended).
    on_result(done, total, result): called after each setting, done from 1 (progress for the CLI).
    skipped_files: the entries inside the input folders that were not read (io.inputs.InputFiles.skipped),
    listed in the corpus section as report.json lists them.
    """
    settings = list(settings)
    chosen = get_backend(backend)
    extra = {"seed": seed, "bucket_window": bucket_window, "batch_bytes": batch_bytes}
    # Every parameter error before any work; each threshold as the run takes it (a numpy float
    # by its shortest text), which the ground truth is cut at too.
    settings = [dataclasses.replace(s, threshold=s.params(**extra).threshold) for s in settings]
    criterion_field(criterion)
    check_bin_width(bin_width)
    if token_field is not None:  # (named, some setting must read it)
        check_fields_read([s.shingle for s in settings], TEXT_FIELD, token_field)
    cache = truth_cache or TruthCache(corpus, token_field)
    started = time.perf_counter()
    cache.prepare(settings)
    truth_seconds = time.perf_counter() - started
    kinds = dict.fromkeys(s.shingle for s in settings)  # (each kind of shingles once, in grid order)
    contents = {shingle: content_corpus(corpus, shingle, token_field) for shingle in kinds}
    # (each kind of shingles has kernels of its own: a warm-up run each)
    warmups = {shingle: warmup_corpus(content) for shingle, content in contents.items()} \
        if warmup and corpus.num_rows else {}
    # One route for the warm-up and the whole grid (compiled.py), so that no setting is timed
    # on another route than the rest or carries the kernels' start: where their signature
    # passes would start the kernels part way, they start before the warm-up.
    text_bytes = {shingle: units_bytes(content.units()) for shingle, content in contents.items()}
    start_before(sum(text_work(text_bytes[s.shingle], s.shingle) for s in settings)
                 + sum(text_work(units_bytes(warm.units()), shingle) for shingle, warm in warmups.items()))
    for shingle, warm in warmups.items():
        first = next(s for s in settings if s.shingle == shingle)
        dedup_corpus(warm, first.params(**extra), chosen, Progress())
    n_docs = corpus.num_rows
    results = []
    for i, s in enumerate(settings):
        outcome = dedup_corpus(contents[s.shingle], s.params(**extra), chosen,
                               Progress(), keep_candidates=True)
        result = score_outcome(s, outcome, cache.get(s.spec(), s.threshold), n_docs, bin_width)
        del outcome
        results.append(result)
        if on_result is not None:
            on_result(i + 1, len(settings), result)
    return Evaluation(
        results=results,
        ground_truth=cache.summaries(),
        notes=list(notes),
        corpus={"documents": n_docs, "text_bytes": units_bytes(corpus.units()),
                "files": [f.path for f in corpus.files], "skipped_files": [str(entry) for entry in skipped_files],
                "skipped_file_reasons": [skipped_entry(entry) for entry in skipped_files]},
        backend=chosen.description,
        run={"seed": seed, "bucket_window": bucket_window, "batch_bytes": batch_bytes,
             "bin_width": bin_width, "ground_truth_seconds": round(truth_seconds, 4),
             "total_seconds": round(time.perf_counter() - started, 4)},
        criterion=criterion,
    )
