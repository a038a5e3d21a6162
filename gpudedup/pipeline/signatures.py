"""The signature stage's batch work, shared by every store: text cut into batches, each batch
shingled, signed (MinHash) and band-keyed by the backend, batches run on threads; and the
memory it needs, for --max-memory."""

from __future__ import annotations

from typing import Iterator, Optional

import numpy as np

from ..compiled import expect_text, text_work
from ..backends import Backend
from ..core.hashing import Permutations
from ..core.lsh import Banding
from ..params import DedupParams
from ..core.ragged import weighted_ranges
from ..core.content import units_bytes
from ..core.shingling import ShingleSpec
from ..stages import Progress, StageLog
from ..threads import map_parallel
from ..core.verify import SetsBuilder, set_columns

def text_batches(offsets: np.ndarray, max_bytes: int, max_rows: int, unit_bytes: int = 1) -> Iterator[tuple[int, int]]:
    """(start, stop) row ranges of consecutive batches holding at most max_rows rows and, unless
    a single document is larger, about max_bytes bytes of content; offsets: int64 (n + 1,)
    offsets of the documents in units of ``unit_bytes`` bytes (1: UTF-8 text; 4: token ids)."""
    for start, stop in weighted_ranges(np.diff(offsets), max(max_bytes // unit_bytes, 1)):
        for row in range(start, stop, max_rows):
            yield row, min(row + max_rows, stop)


def signature_pass(texts: tuple[np.ndarray, np.ndarray], spec: ShingleSpec, banding: Banding,
                   permutations: Permutations, params: DedupParams, backend: Backend, log: StageLog,
                   progress: Progress, sets: Optional[SetsBuilder] = None):
    """Band keys and signatures of every non-empty document, batch by batch.

    texts: (data, offsets): the content of every document (content.unit_buffers): UTF-8 bytes
    uint8 (host, or device where cuDF left them) or token ids uint32 (host), and int64 (n + 1,)
    offsets into it; permutations: hashing.draw_permutations.

    Returns (keys uint64 (m, bands) on the backend's side, active int64 (m,) and signatures
    uint32 (m, bands * rows) on the host): the m documents that have at least one shingle (empty documents are never
    candidates), their row indices, band keys and signatures (kept for the signature filter of
    verification, 4 bytes per permutation per document).

    sets: where given (a host backend only), each document is cut into its set of shingles
    (backend.shingle_sets) rather than its hashes with repeats, and the sets of every document
    are appended there in row order, for stores that keep them (pipeline.memory.MemoryStore's
    keep_sets), until the builder lets them go (its limit): the batches after that make
    hashes only. The signatures are the same either way: a minimum over a set of hashes does
    not depend on repeats or order.
    """
    data, offsets = texts
    # A pass over enough text starts the compiled kernels now, not after its first batches.
    expect_text(text_work(units_bytes(texts), spec.kind))
    progress.start("Shingling + MinHash", offsets.shape[0] - 1)

    def one_batch(rows: tuple[int, int]):
        start, stop = rows
        making_sets = sets is not None and sets.kept
        with backend.batch_scope():
            # The stage timers see launches, not the device work they queue: on a GPU the
            # device time lands in band_keys, whose to_host waits for everything before it.
            with log.timed("shingle"):
                first, last = offsets[start], offsets[stop]
                shingle = backend.shingle_sets if making_sets else backend.shingle_hashes
                shingles = shingle(data[first:last], offsets[start : stop + 1] - first, spec)
                kept = set_columns(shingles) if making_sets else None
            with log.timed("signatures"):
                signatures = backend.signatures(shingles, permutations)
            with log.timed("band_keys"):
                nonempty = backend.xp.flatnonzero(shingles.offsets[1:] > shingles.offsets[:-1])
                signatures = signatures[nonempty]
                keys = backend.band_keys(signatures, banding)
                # The keys stay on the backend's side for the candidate stage; the signatures
                # go to the host, where verification's signature filter reads them. (That copy
                # waits for this stream's work, keys included, before another stream reads them.)
                result = (keys, backend.to_host(nonempty) + start, backend.to_host(signatures), kept)
        # No release_unused_memory here: the next batch reuses what this one freed, and the
        # stores release once the pass is done. Releasing after every batch left the peaks as
        # they were (bench.jsonl, word and char 5-grams, in memory; 616,623 verses staged) and
        # cost 5-10 % of the whole run in page faults and malloc_trim's walks of the heap.
        del shingles
        progress.advance(stop - start)
        return result

    xp, width = backend.xp, banding.bands * banding.rows
    # The signatures (the largest result) go straight into one array with a row for every
    # document, filled as batches finish, then shrunk in place (realloc) to the non-empty
    # ones: no concatenation at the end that would hold them twice, and the copies overlap
    # the batches still running. Pages are committed only as rows are written.
    signatures = np.empty((offsets.shape[0] - 1, width), np.uint32)
    keys, active, used = [], [], 0
    with log.stage("signature_pass"):
        batches = list(text_batches(offsets, batch_bytes(params, backend), params.batch_rows, data.dtype.itemsize))
        for batch_keys, batch_active, batch_signatures, batch_sets in map_parallel(one_batch, batches,
                                                                                    backend.parallel_batches):
            if sets is not None and batch_sets is not None:
                sets.append(*batch_sets)
            signatures[used : used + batch_signatures.shape[0]] = batch_signatures
            used += batch_signatures.shape[0]
            keys.append(batch_keys)
            active.append(batch_active)
    signatures.resize((used, width), refcheck=False)
    if not keys:
        return xp.zeros((0, banding.bands), xp.uint64), np.zeros(0, np.int64), signatures
    return xp.concatenate(keys), np.concatenate(active), signatures


# Host bytes per byte of a batch's text in flight while the numpy backend shingles and signs
# it: about 50 are alive (arrays), and the resident set rose by about 90 per byte of the
# batches in flight on the benchmark corpus (allocator slack between batches). The kernel
# backend keeps on the host the batch's bytes, its results, and a page-locked staging buffer per
# stream that the copies to the device go through (the batch's size and a quarter more).
HOST_BYTES_PER_BATCH_BYTE = {"cpu": 100, "gpu": 4}


def signature_pass_need(n_docs: int, text_bytes: int, banding: Banding, params: DedupParams,
                        backend: Backend) -> int:
    """Estimated host bytes the signature pass over ``text_bytes`` of text adds: batches in
    flight (no more than that text fills), and per document its signature row (4 bytes per
    permutation), band keys (8 per band) and row index."""
    per_document = 4 * banding.bands * banding.rows + 8 * banding.bands + 8
    return n_docs * per_document + batches_in_flight_bytes(backend, batch_bytes(params, backend), text_bytes)


def batches_in_flight_bytes(backend: Backend, bytes_per_batch: int, text_bytes: Optional[int] = None) -> int:
    """Host bytes of the batches in flight at once, each of ``bytes_per_batch`` text; of no
    more text than ``text_bytes`` where given (a small shard fills fewer batches, or one in part)."""
    in_flight = backend.parallel_batches * bytes_per_batch
    return HOST_BYTES_PER_BATCH_BYTE[backend.name] * (in_flight if text_bytes is None else min(in_flight, text_bytes))


def batch_bytes(params: DedupParams, backend: Backend) -> int:
    """Text bytes per batch: the parameter, or the backend's default."""
    return params.batch_bytes or backend.default_batch_bytes
