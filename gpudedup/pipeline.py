"""The deduplication job on a Corpus: batches -> signatures -> band keys -> candidates ->
exact verification -> clusters. Writes nothing; api.py and cli.py decide where results go."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import __version__
from .backends import Backend
from .cluster import Clusters, find_clusters
from .hashing import draw_permutations
from .io.reader import Corpus
from .lsh import Banding, band_keys, candidate_pairs
from .params import DedupParams
from .shingling import ShingleBatch, ShingleSpec
from .stages import Progress, StageLog
from .verify import pair_jaccard

# Verification shingles the documents of a chunk of pairs again; a chunk holds at most this
# many code points summed over its pairs' two texts (about 50 bytes of work memory each).
VERIFY_CHUNK_CODEPOINTS = 16 << 20


@dataclass
class DedupOutcome:
    """The results of a run, as host arrays over the corpus rows (0 .. n-1).

    pair_a, pair_b: int64 (p,), a < b: verified pairs; jaccard: float64 (p,), >= threshold.
    clusters: documents in clusters of two or more (cluster.Clusters).
    keep: bool (n,): False exactly for the removed duplicates.
    report: the run's report (see README, "Output formats").
    """

    pair_a: np.ndarray
    pair_b: np.ndarray
    jaccard: np.ndarray
    clusters: Clusters
    keep: np.ndarray
    report: dict


def text_batches(texts: pa.ChunkedArray, max_bytes: int, max_rows: int) -> Iterator[tuple[int, int]]:
    """(start, stop) row ranges of consecutive batches holding at most max_rows rows and, unless
    a single document is larger, about max_bytes bytes of UTF-8 text."""
    sizes = pc.fill_null(pc.binary_length(texts), 0).to_numpy().astype(np.int64)
    ends = np.cumsum(sizes)
    start = 0
    while start < sizes.shape[0]:
        base = ends[start - 1] if start else 0
        stop = int(np.searchsorted(ends, base + max_bytes, side="right"))
        stop = min(max(stop, start + 1), start + max_rows)
        yield start, stop
        start = stop


def run_dedup(corpus: Corpus, params: DedupParams, backend: Backend,
              progress: Progress | None = None) -> DedupOutcome:
    progress = progress or Progress()
    log = StageLog()
    spec = ShingleSpec(params.shingle, params.ngram)
    banding = params.banding()
    permutations = draw_permutations(banding.bands * banding.rows, params.seed)
    texts = corpus.texts
    n_docs = corpus.num_rows

    keys, active = signature_pass(texts, spec, banding, permutations, params, backend, log, progress)

    progress.start("Finding candidate pairs", banding.bands)
    with log.stage("candidates"):
        xp = backend.xp
        first, second = candidate_pairs(xp.asarray(keys), xp.asarray(active), params.bucket_window, xp)
        first, second = backend.to_host(first), backend.to_host(second)
    progress.advance(banding.bands)

    lengths = pc.fill_null(pc.utf8_length(texts), 0).to_numpy().astype(np.int64)
    progress.start("Verifying pairs (exact)", first.shape[0])
    with log.stage("verify"):
        def sets_of(docs: np.ndarray) -> ShingleBatch:
            batch = backend.shingle_hashes(texts.take(pa.array(docs)), spec)
            return ShingleBatch(backend.to_host(batch.offsets), backend.to_host(batch.hashes))

        jaccard = pair_jaccard(sets_of, first, second, lengths[first] + lengths[second],
                               VERIFY_CHUNK_CODEPOINTS, on_chunk=progress.advance)
        verified = jaccard >= params.threshold
        pair_a, pair_b, jaccard = first[verified], second[verified], jaccard[verified]

    progress.start("Clustering", 1)
    with log.stage("cluster"):
        clusters = find_clusters(n_docs, pair_a, pair_b, lengths, params.keep)
        keep = np.ones(n_docs, dtype=bool)
        keep[clusters.docs[~clusters.keep]] = False
    progress.advance(1)
    progress.stop()

    report = build_report(corpus, params, banding, backend, log, n_docs - active.shape[0],
                          candidates=first.shape[0], verified=pair_a.shape[0], clusters=clusters)
    return DedupOutcome(pair_a, pair_b, jaccard, clusters, keep, report)


def signature_pass(texts, spec, banding, permutations, params, backend, log, progress):
    """Band keys of every non-empty document, batch by batch.

    Returns (keys uint64 (m, bands), active int64 (m,)): band keys and the row indices of the m
    documents that have at least one shingle (empty documents are never candidates), host.
    """
    batches = list(text_batches(texts, params.batch_bytes, params.batch_rows))
    progress.start("Shingling + MinHash", len(texts))
    all_keys, all_active = [], []
    for start, stop in batches:
        with log.stage("shingle"):
            shingles = backend.shingle_hashes(texts.slice(start, stop - start).combine_chunks(), spec)
        with log.stage("signatures"):
            signatures = backend.signatures(shingles, permutations)
        with log.stage("band_keys"):
            nonempty = backend.xp.flatnonzero(backend.xp.diff(shingles.offsets) > 0)
            keys = band_keys(signatures[nonempty], banding, backend.xp)
            all_keys.append(backend.to_host(keys))
            all_active.append(backend.to_host(nonempty) + start)
        progress.advance(stop - start)
    if not batches:
        return np.zeros((0, banding.bands), np.uint64), np.zeros(0, np.int64)
    return np.concatenate(all_keys), np.concatenate(all_active)


def build_report(corpus, params, banding: Banding, backend, log: StageLog, empty: int,
                 candidates: int, verified: int, clusters: Clusters) -> dict:
    texts = corpus.texts
    removed = int((~clusters.keep).sum())
    return {
        "gpudedup_version": __version__,
        "backend": backend.description,
        "input": {
            "documents": corpus.num_rows,
            "files": [{"path": f.path, "format": f.format, "documents": f.rows} for f in corpus.files],
            "skipped_files": corpus.skipped,
            "text_bytes": int(pc.sum(pc.binary_length(texts)).as_py() or 0),
            "null_texts": int(texts.null_count),
            "empty_documents": int(empty),
        },
        "parameters": {
            **{k: v for k, v in params.as_dict().items() if k not in ("bands", "rows")},
            "bands": banding.bands,
            "rows": banding.rows,
            "banding_rule": banding.rule,
            "permutations_computed": banding.bands * banding.rows,
        },
        "results": {
            "candidate_pairs": int(candidates),
            "verified_pairs": int(verified),
            "clusters": clusters.count,
            "documents_in_clusters": int(clusters.docs.shape[0]),
            "removed_documents": removed,
            "kept_documents": corpus.num_rows - removed,
        },
        "stages": log.as_dict(),
        "total_seconds": round(log.total_seconds, 3),
        "peak_rss_mb": log.peak_rss_mb,
    }
