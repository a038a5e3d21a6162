"""The kernel backend: the stages from UTF-8 texts to band keys on one array side, with the
CUDA kernels of kernels/ doing the hashing work.

On a GPU (cupy_backend.py) the array module ``xp`` is CuPy and the kernels are cupy.RawKernels.
The class does not import CuPy itself: it takes ``xp`` and a kernel loader, so the tests run the
very same code with ``xp`` = numpy and the kernels compiled for the host
(tests/kernel_host/host_kernels.py), and compare every result with the numpy backend.

Per batch, on the backend's side:
    UTF-8 bytes uint8 (B,) + byte offsets int64 (n + 1,)        one host-to-device copy
      -> decode_utf8 / normalize_codepoints / shingle_spans     xp array operations
      -> span_hashes_u32 kernel                                 uint64 (S,) shingle hashes
      -> minhash_signatures_u64 kernel, one launch              uint32 (n, K)
      -> band_keys_u32 kernel                                   uint64 (n, bands)
Only keys, signatures (for the signature filter) and the rows that have shingles go back to the
host; the pipeline bands the keys on this side again (lsh.candidate_pairs with ``xp``).
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np

from ..hashing import EMPTY_SIGNATURE_VALUE, Permutations
from ..lsh import Banding
from ..normalize import NormalizationTables, tables_on
from ..shingling import ShingleBatch, ShingleSpec, shingle_spans, shingle_units
from .cuda_kernels import grid_stride_blocks, minhash_tunables, tunable

# A GPU batch is large enough to fill the device many times over (a 64 MiB batch of word
# 5-grams is about 13 M shingles) and small enough that two batches in flight stay within a
# few GB of device memory (see docs/gpu.md, "GPU memory is bounded by the batch size").
DEFAULT_GPU_BATCH_BYTES = 64 << 20


class KernelBackend:
    name = "gpu"
    # Two batches in flight, on two host threads with a stream each: one batch's host work
    # and copies overlap the other's kernels.
    parallel_batches = 2
    default_batch_bytes = DEFAULT_GPU_BATCH_BYTES

    def __init__(self, xp, kernels, description: str, tables: NormalizationTables | None = None,
                 stream_factory=None):
        """xp: the array module (cupy on a GPU); kernels: a loader with
        ``get(file_name, kernel_name, defines) -> kernel(grid, block, args)``; tables: the
        normalisation tables on xp's side (None: the host's, copied there); stream_factory:
        makes a stream for batches (None: no streams, for host runs)."""
        self.xp = xp
        self.kernels = kernels
        self.description = description
        # None: the host tables, on xp's side (a copy for a device; numpy: themselves)
        self.tables = tables if tables is not None else tables_on(xp)
        self._stream_factory = stream_factory
        # Streams are lent to batch scopes and returned, so a backend owns as many streams as
        # batches were ever in flight at once (two), however many runs and threads use it:
        # CuPy's memory pool keeps freed blocks per stream, and streams of finished threads
        # would hold theirs for good.
        self._idle_streams: list = []
        self._permutations: dict[tuple, tuple] = {}
        self._lock = threading.Lock()

    # --- the Backend interface ------------------------------------------------------------

    @contextlib.contextmanager
    def batch_scope(self):
        """A context for one batch's work on a stream of its own, so that two batches in flight
        on two threads overlap on the device. The stream is current inside the context."""
        if self._stream_factory is None:
            yield
            return
        with self._lock:
            stream = self._idle_streams.pop() if self._idle_streams else self._stream_factory()
        try:
            with stream:
                yield
        finally:
            with self._lock:
                self._idle_streams.append(stream)

    def shingle_hashes(self, data, offsets, spec: ShingleSpec) -> ShingleBatch:
        """data uint8 (B,), offsets int64 (n + 1,) from 0, host or this side; returns the
        ShingleBatch on this side (hashes in text order with repeats, like numpy's)."""
        xp = self.xp
        data, offsets = xp.asarray(data), xp.asarray(offsets, dtype=xp.int64)
        units, offsets = shingle_units(data, offsets, spec, xp, self.tables)
        starts, ends, shingle_offsets = shingle_spans(units, offsets, spec, xp)
        return ShingleBatch(shingle_offsets, self.span_hashes(units, starts, ends))

    def span_hashes(self, codepoints, starts, ends):
        """poly_hash64 of every span [starts[i], ends[i]) of codepoints (uint32 (M,); int64
        (S,) each; this side): uint64 (S,), by the span_hashes_u32 kernel."""
        xp = self.xp
        count = starts.shape[0]
        hashes = xp.empty(count, dtype=xp.uint64)
        if count:
            defines = {}
            block = tunable(defines, "BLOCK_SIZE", "shingle_hash.cu")
            kernel = self.kernels.get("shingle_hash.cu", "span_hashes_u32", defines)
            kernel((grid_stride_blocks(count, block),), (block,),
                   (xp.ascontiguousarray(codepoints, dtype=xp.uint32),
                    xp.ascontiguousarray(starts, dtype=xp.int64), xp.ascontiguousarray(ends, dtype=xp.int64),
                    np.int64(count), hashes))
        return hashes

    def signatures(self, shingles: ShingleBatch, permutations: Permutations):
        """uint32 (n_docs, K) on this side, one minhash_signatures_u64 launch for the batch.

        The hashes stay ragged (CSR), so no padding is computed at all; each block computes
        one document. Blocks are issued longest document first, so that a long document does
        not start last and leave the device idle while it finishes.
        """
        xp = self.xp
        num_perm = permutations.count
        offsets = xp.ascontiguousarray(shingles.offsets, dtype=xp.int64)
        signatures = xp.full((shingles.n_docs, num_perm), EMPTY_SIGNATURE_VALUE, dtype=xp.uint32)
        counts = offsets[1:] - offsets[:-1]
        nonempty = int(xp.count_nonzero(counts))
        if nonempty == 0:
            return signatures
        # Empty documents sort last and are left out: their rows keep the empty value.
        doc_ids = xp.ascontiguousarray(xp.argsort(-counts)[:nonempty], dtype=xp.int64)
        a, b = self.permutation_arrays(permutations)
        defines = minhash_tunables(num_perm)
        block = tunable(defines, "BLOCK_SIZE", "minhash.cu")
        chunk = block * tunable(defines, "PERMS_PER_THREAD", "minhash.cu")
        kernel = self.kernels.get("minhash.cu", "minhash_signatures_u64", defines)
        kernel((nonempty, -(-num_perm // chunk)), (block,),
               (xp.ascontiguousarray(shingles.hashes, dtype=xp.uint64), offsets, doc_ids, a, b,
                np.int32(num_perm), signatures))
        return signatures

    def band_keys(self, signatures, banding: Banding):
        """uint64 (n, bands) on this side, by the band_keys_u32 kernel (lsh.band_keys is the
        reference)."""
        xp = self.xp
        n, num_perm = signatures.shape
        if num_perm < banding.bands * banding.rows:
            raise ValueError(f"band_keys needs {banding.bands} * {banding.rows} signature columns, "
                             f"the signatures have {num_perm}")
        keys = xp.empty((n, banding.bands), dtype=xp.uint64)
        if n:
            defines: dict[str, int] = {}
            block = tunable(defines, "BLOCK_SIZE", "band_keys.cu")
            kernel = self.kernels.get("band_keys.cu", "band_keys_u32", defines)
            kernel((grid_stride_blocks(n * banding.bands, block),), (block,),
                   (xp.ascontiguousarray(signatures, dtype=xp.uint32), np.int64(n), np.int32(num_perm),
                    np.int32(banding.bands), np.int32(banding.rows), keys))
        return keys

    def to_host(self, array) -> np.ndarray:
        get = getattr(array, "get", None)  # cupy.ndarray.get: a device-to-host copy
        return get() if get is not None else np.asarray(array)

    def synchronize(self) -> None:
        """Wait for the work queued on the current stream (timings, and before arrays made
        here are read on another stream: non-blocking streams do not wait for each other)."""
        cuda = getattr(self.xp, "cuda", None)
        if cuda is not None:
            cuda.get_current_stream().synchronize()

    def release_memory(self) -> None:
        """Give the memory pool's cached free blocks back to the device (between runs)."""
        get_pool = getattr(self.xp, "get_default_memory_pool", None)
        if get_pool is not None and getattr(self.xp, "cuda", None) is not None:
            get_pool().free_all_blocks()

    # --- helpers ----------------------------------------------------------------------------

    def permutation_arrays(self, permutations: Permutations):
        """(a, b) uint32 (K,) on this side, copied once per distinct permutation family (a
        handful are kept: an evaluation grid uses a few)."""
        key = (permutations.a.tobytes(), permutations.b.tobytes())
        with self._lock:
            cached = self._permutations.get(key)
            if cached is None:
                if len(self._permutations) >= 8:
                    self._permutations.clear()
                a = self.xp.asarray(np.ascontiguousarray(permutations.a, dtype=np.uint32))
                b = self.xp.asarray(np.ascontiguousarray(permutations.b, dtype=np.uint32))
                self.synchronize()  # other threads' streams will read them
                cached = self._permutations[key] = (a, b)
        return cached
