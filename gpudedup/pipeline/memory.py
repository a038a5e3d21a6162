"""Store: a corpus read at once, its arrays in memory (host, or device for the band keys on the
GPU backend). Nothing is kept between runs; ``dedup_corpus`` runs the job over it."""

from __future__ import annotations

import itertools
from typing import Any, Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..backends import Backend
from ..threads import HOST_THREADS
from ..core.copies import band_key_row_hash
from ..io.corpus import Corpus
from ..io.pointers import corpus_pointers
from ..core.hashing import Permutations
from ..core.lsh import Banding, to_side
from ..memory import MemoryBudget, release_unused_memory
from ..core.content import check_content, content_bytes, unit_buffers, unit_lengths
from ..params import DedupParams
from .report import InputFile, InputSummary
from ..core.shingling import ShingleBatch, ShingleSpec
from ..stages import Progress, StageLog
from ..core.verify import (SET_ELEMENT_BYTES, SetArrays, SetsBuilder, document_sets, pair_jaccard_at_least,
                           rows_jaccard_at_least, rows_of)
from .job import run_job
from .local import HeldStages
from .outcome import Outcome
from .protocols import Executor
from ..threads import map_parallel
from .signatures import batch_bytes, batches_in_flight_bytes, signature_pass, signature_pass_need


# The most bytes of shingle sets a run in memory keeps from its signature pass (at
# SET_ELEMENT_BYTES a shingle, counted as the pass makes them): up to it, the copies and the
# verification read them in place instead of cutting the documents of pairs into shingles
# again, which costs more than the rest of the job (on a small input, on the numpy reference
# route) and holds the sets of the documents of pairs besides (scripts/bench_sizes.py shows the
# runs). Past it the pass lets them go and makes hashes only: the sets would be a large part of
# the run's memory. On the benchmark corpus's text the sets take about 1.6 bytes per byte of
# text for word 5-grams and 5 for char 5-grams: kept up to about 160 MB and 50 MB of text.
KEPT_SETS_BYTES = 256 << 20


def dedup_corpus(corpus: Corpus, params: DedupParams, backend: Backend, progress: Optional[Progress] = None,
                 log: Optional[StageLog] = None, keep_candidates: bool = False) -> Outcome:
    """Deduplicate a corpus held in memory (rows are the corpus rows); see job.run_job."""
    return run_job(MemoryStore(corpus, params, backend, KEPT_SETS_BYTES), params, backend, progress=progress,
                   log=log, keep_candidates=keep_candidates)


class MemoryStore:
    """The arrays of one corpus in memory (see protocols.Store for the contract).

    kept_sets_bytes: keep the documents' shingle sets from the signature pass (on the host;
    host backends only) where they take at most this many bytes (at SET_ELEMENT_BYTES a
    shingle), or (None) whatever they take; so that the copies, verification and an index's
    commit read them rather than shingle again. An index add keeps them all (its commit stores
    them anyway). Where none are kept, the sets of the documents in pairs are made again when
    they are checked (verify.py's docstring).
    """

    def __init__(self, corpus: Corpus, params: DedupParams, backend: Backend, kept_sets_bytes: Optional[int] = 0):
        self.corpus, self.params, self.backend = corpus, params, backend
        self.documents = corpus.num_rows
        self.budget = MemoryBudget(params.max_memory)
        if corpus.num_rows:
            check_content(corpus.texts.type, params.shingle, corpus.text_field,
                          corpus.files[0].path if corpus.files else None)
        self.lengths = unit_lengths(corpus.texts)
        self.copy_batch_cost = batch_bytes(params, backend)
        self.spec = params.shingle_spec()
        self.work_dir: Optional[str] = None  # nothing is kept between runs
        self.pinned = 0  # no documents kept before (protocols.Store)
        # (One document has no pair: none would read its set.)
        self.keep_sets = backend.xp is np and self.documents > 1 and kept_sets_bytes != 0
        self.kept_sets_bytes = kept_sets_bytes
        self.kept_sets: Optional[SetsBuilder] = None  # every row's set, where kept (``sets`` gives them)
        self.kept_set_arrays: Optional[SetArrays] = None

    def sign(self, spec: ShingleSpec, banding: Banding, permutations: Permutations, executor: Executor,
             log: StageLog, progress: Progress) -> None:
        backend = self.backend
        # Text that cuDF read is on the device already; otherwise batches are cut from the host.
        corpus = self.corpus
        texts = corpus.device_text if corpus.device_text is not None and backend.name == "gpu" else corpus.units()
        self.budget.check("the signature pass",
                          lambda: signature_pass_need(self.documents, int(texts[0].nbytes), banding, self.params,
                                                      backend)
                          + (self.kept_sets_need() if self.keep_sets else 0),
                          "lower batch_bytes=, or deduplicate the input in parts")
        sets = SetsBuilder(self.lengths, self.kept_sets_bytes) if self.keep_sets else None
        self.keys, self.active, self.signatures = signature_pass(texts, spec, banding, permutations, self.params,
                                                                 backend, log, progress, sets)
        self.kept_sets = sets if sets is not None and sets.kept else None
        # Hashed here, on the keys' side: an index run takes the keys before the copies stage.
        self.row_hash = backend.to_host(band_key_row_hash(self.keys, backend.xp))
        release_unused_memory()

    @property
    def sets(self) -> Optional[SetArrays]:
        """Every row's shingle set (verify.set_arrays), where the signature pass kept them, else
        None; put together when first asked for."""
        if self.kept_sets is not None:
            self.kept_set_arrays, self.kept_sets = self.kept_sets.arrays(), None
        return self.kept_set_arrays

    def active_positions(self, rows: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.active, rows)

    def signature_rows(self, rows: np.ndarray) -> np.ndarray:
        """uint32 (k, K), host: the signatures of ``rows`` (int64, each with shingles)."""
        return self.signatures[self.active_positions(rows)]

    def row_hashes(self) -> np.ndarray:
        return self.row_hash

    def band_keys(self, in_lsh: np.ndarray):
        keys, self.keys = self.keys, None  # the candidate stage is the last to read them
        if in_lsh.all():
            return keys  # no copy at all without identical copies
        return keys[to_side(in_lsh, self.backend.xp)]

    def drop_signatures(self) -> None:
        self.signatures = None
        release_unused_memory()

    def source_pointers(self, docs: np.ndarray):
        """Where rows ``docs`` (int64 (k,)) were read from (index/sources.py; an index that
        verifies from source files commits these)."""

        return corpus_pointers(self.corpus, docs)

    def set_reader(self, name: str, docs: np.ndarray, executor: Executor) -> Callable[[np.ndarray], Any]:
        """The sets of parts of ``docs``: taken from the kept sets (keep_sets), or each part
        shingled again when asked (document_sets)."""
        return lambda part: self.document_sets(part, Progress())

    def exact_jaccard(self, name: str, first: np.ndarray, second: np.ndarray, threshold: float,
                      executor: Executor, progress: Progress) -> np.ndarray:
        """Exact Jaccard of the row pairs (first[i], second[i]) that reach ``threshold``, else
        BELOW_THRESHOLD: float64 (p,), host (verify.pair_jaccard_at_least).

        The documents of the pairs are shingled once more by the backend (unless the store keeps
        their sets), batch by batch, into one sparse matrix of sets (verify.document_sets); only
        their hashes come to the host.
        """
        if self.sets is not None:  # kept (counted by the signature pass): merged where they are
            progress.start("Verifying pairs (exact)", first.shape[0], "pairs")
            jaccard = pair_jaccard_at_least(self.sets, first, second, threshold, HOST_THREADS)
            progress.advance(first.shape[0])
            return jaccard
        if name == "pairs":
            self.budget.check("exact verification", lambda: self.verification_need(first, second),
                              "raise threshold= or lower bucket_window= (fewer candidate pairs), "
                              "or lower batch_bytes=")

        def sets_of(docs: np.ndarray) -> SetArrays:
            progress.start("Verifying pairs (exact)", docs.shape[0])
            return self.document_sets(docs, progress)

        return rows_jaccard_at_least(sets_of, first, second, threshold, HOST_THREADS)

    def set_rows(self, docs: np.ndarray, progress: Progress, executor: Optional[Executor] = None,
                 name: str = "documents") -> tuple[Any, np.ndarray]:
        """The shingle sets of rows ``docs`` (int64, ascending) to read in place: (sets,
        positions), row docs[i]'s set being row positions[i] of sets (a set matrix): the kept
        sets themselves where the store keeps them, else document_sets(docs)."""
        if self.sets is not None:
            return self.sets, docs
        return self.document_sets(docs, progress, executor, name), np.arange(docs.shape[0])

    @property
    def ids(self) -> pa.Array:
        return self.corpus.ids

    @property
    def sets_held(self) -> bool:
        """Whether document_sets takes the documents' sets from memory (keep_sets) rather than
        shingling them again."""
        return self.sets is not None

    def document_sets(self, docs: np.ndarray, progress: Progress, executor: Optional[Executor] = None,
                      name: str = "documents"):
        """The shingle sets of rows ``docs`` (int64, ascending) as one binary CSR matrix (see
        verify.document_sets): rows of the kept sets (keep_sets), or shingled again by the
        backend a batch at a time (here: executor and name are for stores that spill)."""
        if self.sets is not None:
            progress.advance(docs.shape[0])
            return rows_of(self.sets, docs)
        texts, backend = self.corpus.text_array(), self.backend
        calls = itertools.count()

        def shingles_of(subset: np.ndarray) -> ShingleBatch:
            # Arrow's take copies whole strings (memcpy per document); a numpy gather would index
            # every byte and is 30x slower here.
            with backend.batch_scope():
                batch = backend.shingle_sets(*unit_buffers(texts.take(pa.array(subset))), self.spec)
            if next(calls) % 4 == 0:  # these batches are small; a release costs a millisecond or two
                release_unused_memory()
            progress.advance(subset.shape[0])
            return batch

        # Quarter-size batches here: the sets of all candidate documents are alive besides the
        # batches in flight, and this is where a run peaks in memory.
        return document_sets(shingles_of, docs, self.lengths[docs], max(batch_bytes(self.params, backend) // 4, 1),
                             lambda function, items: map_parallel(function, items, backend.parallel_batches))

    def verification_need(self, first: np.ndarray, second: np.ndarray) -> int:
        """Estimated host bytes exact verification adds: the shingle sets of every document of the
        pairs to check (shingles_at_most, SET_ELEMENT_BYTES each in the sparse matrix), plus the
        batches shingled at a time."""
        docs = np.unique(np.concatenate([first, second]))
        in_flight = batches_in_flight_bytes(self.backend, batch_bytes(self.params, self.backend) // 4)
        return SET_ELEMENT_BYTES * self.shingles_at_most(docs) + 24 * first.shape[0] + in_flight

    def kept_sets_need(self) -> int:
        """Bytes the kept sets may take: a bound on the sets of every row (shingles_at_most, at
        SET_ELEMENT_BYTES a shingle), or kept_sets_bytes where that is less."""
        bound = SET_ELEMENT_BYTES * self.shingles_at_most(np.arange(self.documents))
        return bound if self.kept_sets_bytes is None else min(bound, self.kept_sets_bytes)

    def shingles_at_most(self, docs: np.ndarray) -> int:
        """A bound on the shingles of rows ``docs`` (int64): one per code point (char n-grams,
        token n-grams) or per token (word n-grams); each takes SET_ELEMENT_BYTES in a set matrix."""
        if self.spec.kind != "word":
            return int(self.lengths[docs].sum())
        # Tokens are at most the runs of white space plus one (counted without splitting).
        runs = pc.count_substring_regex(self.corpus.text_array().take(pa.array(docs)), r"\s+")
        return int(pc.sum(runs).as_py() or 0) + docs.shape[0]

    def stages(self, executor: Executor) -> HeldStages:
        return HeldStages(executor)  # (a corpus in memory is never on a cluster)

    def input_schemas(self) -> list[tuple[str, pa.Schema]]:
        return self.corpus.input_schemas()

    def input_summary(self, empty_documents: int) -> InputSummary:
        corpus = self.corpus
        return InputSummary(
            documents=corpus.num_rows,
            files=tuple(InputFile.of(f.path, f.format, f.rows) for f in corpus.files),
            skipped_files=corpus.skipped,
            skipped_records=len(corpus.skipped_records),  # on_error="skip": see errors.jsonl
            notes=corpus.notes,  # paths passed over for a reason (a link loop, a pipe, ...)
            text_bytes=int(content_bytes(corpus.units()).sum()),
            null_texts=int(corpus.texts.null_count),
            empty_documents=int(empty_documents),
        )
