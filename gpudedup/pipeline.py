"""The deduplication job on a Corpus: batches -> signatures -> band keys -> candidates ->
exact verification -> clusters. Writes nothing; api.py and cli.py decide where results go."""

from __future__ import annotations

import itertools
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import __version__
from .backends import Backend
from .cluster import Clusters, find_clusters
from .copies import Copies, identical_copies
from .hashing import draw_permutations
from .io.reader import Corpus
from .lsh import Banding, candidate_pairs, to_side
from .memory import MemoryBudget, release_unused_memory
from .normalize import utf8_buffers
from .ragged import weighted_ranges
from .params import DedupParams
from .shingling import ShingleBatch, ShingleSpec
from .stages import Progress, StageLog
from .verify import document_sets, pair_jaccard, plausible


@dataclass
class DedupOutcome:
    """The results of a run, as host arrays over the corpus rows (0 .. n-1).

    pair_a, pair_b: int64 (p,), a < b: verified pairs; jaccard: float64 (p,), >= threshold.
    clusters: documents in clusters of two or more (cluster.Clusters).
    keep: bool (n,): False exactly for the removed duplicates.
    report: the run's report (see README, "Output formats").
    candidate_a, candidate_b: int64 (q,), a < b: every candidate pair LSH produced (before the
        signature filter), for evaluation against exact ground truth; empty unless run_dedup
        was asked to keep them (they can be many, and most runs do not need them).
    checked_jaccard: float64 (c,): the exact Jaccard of every candidate pair that verification
        computed (those the signature filter passed), verified or not: what the candidates
        looked like, for the report's histogram.
    copies: the documents taken out of LSH as identical copies (copies.py); each is also the
        pair (first, member) of pair_a, pair_b with Jaccard 1.0.
    """

    pair_a: np.ndarray
    pair_b: np.ndarray
    jaccard: np.ndarray
    clusters: Clusters
    keep: np.ndarray
    report: dict
    checked_jaccard: np.ndarray
    candidate_a: np.ndarray
    candidate_b: np.ndarray
    copies: Copies


def text_batches(offsets: np.ndarray, max_bytes: int, max_rows: int) -> Iterator[tuple[int, int]]:
    """(start, stop) row ranges of consecutive batches holding at most max_rows rows and, unless
    a single document is larger, about max_bytes bytes of UTF-8 text; offsets: int64 (n + 1,)
    byte offsets of the texts."""
    for start, stop in weighted_ranges(np.diff(offsets), max_bytes):
        for row in range(start, stop, max_rows):
            yield row, min(row + max_rows, stop)


def run_dedup(corpus: Corpus, params: DedupParams, backend: Backend,
              progress: Progress | None = None, log: StageLog | None = None,
              keep_candidates: bool = False) -> DedupOutcome:
    """Deduplicate ``corpus``; ``log`` may already hold stages (reading) to report with these.
    keep_candidates: return every LSH candidate pair on the outcome (evaluate.py)."""
    progress = progress or Progress()
    log = log or StageLog()
    spec = ShingleSpec(params.shingle, params.ngram)
    banding = params.banding()
    permutations = draw_permutations(banding.bands * banding.rows, params.seed)
    # Text that cuDF read is on the device already; otherwise batches are cut from the host.
    texts = corpus.device_text if corpus.device_text is not None and backend.name == "gpu" else corpus.utf8()
    n_docs = corpus.num_rows
    budget = MemoryBudget(params.max_memory)
    budget.check("the signature pass", signature_pass_need(n_docs, banding, params, backend),
                 "lower --batch-bytes, or deduplicate the input in parts")

    keys, active, signatures = signature_pass(texts, spec, banding, permutations, params,
                                              backend, log, progress)
    release_unused_memory()
    lengths = pc.fill_null(pc.utf8_length(corpus.texts), 0).to_numpy().astype(np.int64)

    def checked_jaccard_of(first, second, progress=Progress()):
        return exact_jaccard(corpus.text_array(), spec, first, second, lengths, params, backend, progress)

    with log.stage("copies"):
        copies = identical_copies(signatures, active, lengths, batch_bytes(params, backend),
                                  checked_jaccard_of, progress)
        in_lsh = ~np.isin(active, copies.member, assume_unique=True)

    progress.start("Finding candidate pairs", banding.bands)
    with log.stage("candidates"):
        xp = backend.xp
        # Confirmed copies stay out of the buckets: their group's first document stands for them.
        # (Rebinding keys frees the full array; without copies no copy is made at all.)
        lsh_docs = active
        if copies.member.shape[0]:
            keys, lsh_docs = keys[to_side(in_lsh, xp)], active[in_lsh]
        first, second = candidate_pairs(keys, lsh_docs, params.bucket_window, xp)
        first, second = backend.to_host(first), backend.to_host(second)
        del keys
    progress.advance(banding.bands)

    with log.stage("verify"):
        candidates = first.shape[0]
        empty = np.zeros(0, np.int64)
        candidate_a, candidate_b = (first, second) if keep_candidates else (empty, empty)
        likely = plausible(signatures, np.searchsorted(active, first), np.searchsorted(active, second),
                           params.threshold)
        first, second = first[likely], second[likely]
        del signatures, likely  # the largest things left from the signature pass
        release_unused_memory()
        budget.check("exact verification",
                     lambda: verification_need(corpus.text_array(), first, second, lengths, spec, params, backend),
                     "raise --threshold or lower --bucket-window (fewer candidate pairs), or lower --batch-bytes")
        jaccard = checked_jaccard_of(first, second, progress)
        checked = first.shape[0]
        # The copies join the pairs LSH found (they were never in its buckets), in (a, b) order.
        first, second, jaccard = merge_pairs((first, second, jaccard), (copies.first, copies.member, copies.jaccard))
        if keep_candidates:
            candidate_a, candidate_b, _ = merge_pairs((candidate_a, candidate_b, candidate_a),
                                                      (copies.first, copies.member, copies.first))
        checked_jaccard = jaccard

    pair_a, pair_b, jaccard, clusters, keep = cluster_verified(n_docs, first, second, checked_jaccard, lengths,
                                                               params, log, progress)

    backend.release_memory()  # the next run (an evaluation grid, a notebook) starts lean
    report = build_report(input_summary(corpus, n_docs - active.shape[0]), params, banding, backend, log,
                          candidates=candidates, checked=checked,
                          verified=pair_a.shape[0], clusters=clusters, copies=copies)
    return DedupOutcome(pair_a, pair_b, jaccard, clusters, keep, report, checked_jaccard,
                        candidate_a, candidate_b, copies)


def cluster_verified(n_docs: int, first: np.ndarray, second: np.ndarray, checked_jaccard: np.ndarray,
                     lengths: np.ndarray, params: DedupParams, log: StageLog, progress: Progress):
    """The checked pairs (int64 (p,) rows, float64 (p,) exact Jaccard) that reach the threshold,
    their clusters, and keep: bool (n,), False exactly for the removed duplicates."""
    verified = checked_jaccard >= params.threshold
    pair_a, pair_b, jaccard = first[verified], second[verified], checked_jaccard[verified]
    progress.start("Clustering", 1)
    with log.stage("cluster"):
        clusters = find_clusters(n_docs, pair_a, pair_b, lengths, params.keep)
        keep = np.ones(n_docs, dtype=bool)
        keep[clusters.docs[~clusters.keep]] = False
    progress.advance(1)
    progress.stop()
    return pair_a, pair_b, jaccard, clusters, keep


def merge_pairs(pairs, more) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two disjoint sets of pairs (a int64 (p,), b int64 (p,), value (p,)) as one, ascending
    by (a, b)."""
    a, b, value = (np.concatenate([x, y]) for x, y in zip(pairs, more))
    order = np.lexsort((b, a))
    return a[order], b[order], value[order]


def exact_jaccard(texts, spec, first, second, lengths, params, backend, progress) -> np.ndarray:
    """Exact Jaccard of the pairs (first[i], second[i]) of row indices: float64 (p,), host.

    texts: the corpus texts, one pyarrow string array (Corpus.text_array).
    The documents of the pairs are shingled once more by the backend, batch by batch, into
    one sparse matrix of sets (verify.document_sets); only their hashes come to the host.
    """
    docs = np.unique(np.concatenate([first, second]))
    progress.start("Verifying pairs (exact)", docs.shape[0])

    calls = itertools.count()

    def shingles_of(subset: np.ndarray) -> ShingleBatch:
        # Arrow's take copies whole strings (memcpy per document); a numpy gather would index
        # every byte and is 30x slower here.
        with backend.batch_scope():
            batch = backend.shingle_hashes(*utf8_buffers(texts.take(pa.array(subset))), spec)
            batch = ShingleBatch(backend.to_host(batch.offsets), backend.to_host(batch.hashes))
        if next(calls) % 4 == 0:  # these batches are small; a release costs a millisecond or two
            release_unused_memory()
        progress.advance(subset.shape[0])
        return batch

    # Quarter-size batches here: the sets of all candidate documents are alive besides the
    # batches in flight, and this is where a run peaks in memory.
    sets = document_sets(shingles_of, docs, lengths[docs], max(batch_bytes(params, backend) // 4, 1),
                         lambda function, items: map_parallel(function, items, backend.parallel_batches))
    return pair_jaccard(sets, np.searchsorted(docs, first), np.searchsorted(docs, second))


def signature_pass(texts, spec, banding, permutations, params, backend, log, progress):
    """Band keys and signatures of every non-empty document, batch by batch.

    Returns (keys uint64 (m, bands) on the backend's side, active int64 (m,) and signatures
    uint32 (m, bands * rows) on the host): the m documents that have at least one shingle (empty documents are never
    candidates), their row indices, band keys and signatures (kept for the signature filter of
    verification, 4 bytes per permutation per document).
    """
    data, offsets = texts
    progress.start("Shingling + MinHash", offsets.shape[0] - 1)

    def one_batch(rows: tuple[int, int]):
        start, stop = rows
        with backend.batch_scope():
            # The stage timers see launches, not the device work they queue: on a GPU the
            # device time lands in band_keys, whose to_host waits for everything before it.
            with log.timed("shingle"):
                first, last = offsets[start], offsets[stop]
                shingles = backend.shingle_hashes(data[first:last], offsets[start : stop + 1] - first, spec)
            with log.timed("signatures"):
                signatures = backend.signatures(shingles, permutations)
            with log.timed("band_keys"):
                nonempty = backend.xp.flatnonzero(shingles.offsets[1:] > shingles.offsets[:-1])
                signatures = signatures[nonempty]
                keys = backend.band_keys(signatures, banding)
                # The keys stay on the backend's side for the candidate stage; the signatures
                # go to the host, where verification's signature filter reads them. (That copy
                # waits for this stream's work, keys included, before another stream reads them.)
                result = (keys, backend.to_host(nonempty) + start, backend.to_host(signatures))
        del shingles
        release_unused_memory()  # this thread's freed batch memory, before the next batch
        progress.advance(stop - start)
        return result

    with log.stage("signature_pass"):
        batches = list(text_batches(offsets, batch_bytes(params, backend), params.batch_rows))
        results = list(map_parallel(one_batch, batches, backend.parallel_batches))
    xp = backend.xp
    if not results:
        width = banding.bands * banding.rows
        return (xp.zeros((0, banding.bands), xp.uint64), np.zeros(0, np.int64),
                np.zeros((0, width), np.uint32))
    keys, active, signatures = zip(*results)
    return xp.concatenate(keys), np.concatenate(active), np.concatenate(signatures)


# Host bytes per byte of a batch's text in flight while the numpy backend shingles and signs
# it: about 50 are alive (arrays), and the resident set rose by about 90 per byte of the
# batches in flight on the benchmark corpus (allocator slack between batches). The kernel
# backend keeps only the batch's bytes and its results on the host.
HOST_BYTES_PER_BATCH_BYTE = {"cpu": 100, "gpu": 2}


def signature_pass_need(n_docs: int, banding: Banding, params: DedupParams, backend) -> int:
    """Estimated host bytes the signature pass adds: batches in flight, and per document its
    signature row (4 bytes per permutation), band keys (8 per band) and row index."""
    per_document = 4 * banding.bands * banding.rows + 8 * banding.bands + 8
    return n_docs * per_document + batches_in_flight_bytes(backend, batch_bytes(params, backend))


def batches_in_flight_bytes(backend, bytes_per_batch: int) -> int:
    """Host bytes of the batches in flight at once, each of ``bytes_per_batch`` text."""
    return backend.parallel_batches * HOST_BYTES_PER_BATCH_BYTE[backend.name] * bytes_per_batch


def verification_need(texts: pa.Array, first: np.ndarray, second: np.ndarray, lengths: np.ndarray,
                      spec: ShingleSpec, params: DedupParams, backend) -> int:
    """Estimated host bytes exact verification adds: the shingle sets of every document of the
    pairs to check -- at most one shingle per code point (char n-grams) or per token (word
    n-grams), 9 bytes each in the sparse matrix -- plus the batches shingled at a time."""
    docs = np.unique(np.concatenate([first, second]))
    if spec.kind == "char":
        shingles = int(lengths[docs].sum())
    else:
        # Tokens are at most the runs of white space plus one (counted without splitting).
        runs = pc.count_substring_regex(texts.take(pa.array(docs)), r"\s+")
        shingles = int(pc.sum(runs).as_py() or 0) + docs.shape[0]
    in_flight = batches_in_flight_bytes(backend, batch_bytes(params, backend) // 4)  # quarter-size batches
    return 9 * shingles + 24 * first.shape[0] + in_flight


def batch_bytes(params: DedupParams, backend) -> int:
    """Text bytes per batch: the parameter, or the backend's default."""
    return params.batch_bytes or backend.default_batch_bytes


def map_parallel(function, items, workers: int):
    """``map(function, items)`` in order, lazily, on ``workers`` threads when there are more.

    The numpy stages spend their time in numpy calls that release the GIL, so threads use
    all cores without copying batches between processes.
    """
    if workers <= 1 or len(items) <= 1:
        yield from map(function, items)
        return
    # At most ``workers`` batches are in flight, so that results (and their memory) do not
    # pile up when the consumer is slower than the workers.
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending = deque()
        for item in items:
            if len(pending) == workers:
                yield pending.popleft().result()
            pending.append(pool.submit(function, item))
        while pending:
            yield pending.popleft().result()


def balance(documents: int, skipped: int, empty: int, removed: int) -> dict:
    """Where every input record went: the four outcomes add up to the records read.

    documents: records that became documents; skipped: records left out by --on-error skip
    (listed in errors.jsonl); empty: documents without shingles (kept, never compared);
    removed: duplicates removed (each named with its cluster's kept document in
    clusters.parquet). Kept with text = documents - empty - removed.
    """
    kept_with_text = documents - empty - removed
    records = documents + skipped
    outcomes = {"kept": kept_with_text, "kept_empty": empty, "removed_duplicates": removed, "skipped": skipped}
    return {"input_records": records, **outcomes, "balanced": sum(outcomes.values()) == records and kept_with_text >= 0}


def input_summary(corpus: Corpus, empty: int) -> dict:
    """The report's "input" section for a corpus read at once; empty: documents without shingles."""
    return {
        "documents": corpus.num_rows,
        "files": [{"path": f.path, "format": f.format, "documents": f.rows} for f in corpus.files],
        "skipped_files": corpus.skipped,
        "skipped_records": len(corpus.skipped_records),  # on_error="skip": see errors.jsonl
        "notes": corpus.notes,  # paths passed over for a reason (a link loop, a pipe, ...)
        "text_bytes": int(corpus.utf8()[1][-1]),  # the last byte offset
        "null_texts": int(corpus.texts.null_count),
        "empty_documents": int(empty),
    }


def build_report(summary: dict, params, banding: Banding, backend, log: StageLog,
                 candidates: int, checked: int, verified: int, clusters: Clusters, copies: Copies) -> dict:
    """report.json; summary: its "input" section (input_summary, or the staged run's)."""
    removed = int((~clusters.keep).sum())
    documents = summary["documents"]
    return {
        "gpudedup_version": __version__,
        "backend": backend.description,
        "input": summary,
        "parameters": {
            **{k: v for k, v in params.as_dict().items() if k not in ("bands", "rows")},
            "batch_bytes": batch_bytes(params, backend),
            "bands": banding.bands,
            "rows": banding.rows,
            "banding_rule": banding.rule,
            "permutations_computed": banding.bands * banding.rows,
        },
        "results": {
            # Pairs of documents with identical signatures are candidates checked exactly
            # beside those from the buckets (copies.py).
            "candidate_pairs": int(candidates) + int(copies.first.shape[0]),
            "exactly_checked_pairs": int(checked) + int(copies.first.shape[0]),
            "identical_copies": int(copies.first.shape[0]),
            "verified_pairs": int(verified),
            "clusters": clusters.count,
            "documents_in_clusters": int(clusters.docs.shape[0]),
            "removed_documents": removed,
            "kept_documents": documents - removed,
        },
        "balance": balance(documents, summary["skipped_records"], summary["empty_documents"], removed),
        "stages": log.as_dict(),
        "total_seconds": round(log.total_seconds, 3),
        "peak_rss_mb": log.peak_rss_mb,
    }
