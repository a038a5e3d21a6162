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
host; the pipeline bands the keys on this side again (lsh.candidate_pairs with ``xp``). For exact
verification, ``shingle_sets`` sorts and de-duplicates each document's hashes on this side and
brings back only the sets.

Streams (with a DeviceRuntime; none for host runs with numpy): each batch scope borrows a
non-blocking stream of its own (a lane), so that two batches on two host threads overlap on
the device. The hand-offs between a scope's stream and the rest of the program are explicit:
- entering, the lane's stream waits for an event recorded on the caller's stream (what was
  queued before the scope, e.g. text that cuDF left on the device, is ordered before the batch);
- leaving, the host waits for the lane's stream (every array the scope made is complete before
  any other stream, on any thread, can use it: the consumer may be the legacy default stream,
  a per-thread default stream or a stream of the caller's, so a wait on the host is the one
  hand-off that is right for all of them; the device-to-host copy of the signatures waited for
  the same work anyway);
- host-to-device copies go through the lane's pinned staging buffer, asynchronously on the
  lane's stream; an event recorded after them is waited for before the buffer is written again;
- device arrays the scope's kernels read from a cache of the backend (the permutations) are held
  by the lane until the hand-off, so that the cache can drop them at any time.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from typing import Any, Optional, Protocol

import numpy as np

from ..core.hashing import EMPTY_SIGNATURE_VALUE, Permutations
from ..core.lsh import Banding
from ..core.normalize import NormalizationTables, tables_on
from ..core.ragged import offsets_from_counts, ragged_arange
from ..core.shingling import ShingleBatch, ShingleSpec, shingle_spans, shingle_units
from .cuda_kernels import grid_stride_blocks, minhash_chunk, minhash_tunables, minhash_work_items, tunable
from .kernel_tunables import MINHASH_ITEM_SHINGLES

# A GPU batch is large enough to fill the device many times over (a 64 MiB batch of word
# 5-grams is about 13 M shingles) and small enough that two batches in flight stay within a
# few GB of device memory (see docs/gpu.md, "GPU memory is bounded by the batch size").
DEFAULT_GPU_BATCH_BYTES = 64 << 20

# Distinct permutation families whose device copies are kept (an evaluation grid uses a few).
PERMUTATION_CACHE_SIZE = 8

# Arrays in a staging buffer start at multiples of this many bytes (any dtype's alignment, and
# whole cache lines for the copy engine).
STAGING_ALIGNMENT = 256


class DeviceRuntime(Protocol):
    """The parts of the CUDA runtime that batch scopes use beyond the array module:
    cupy_backend.CupyRuntime on a GPU, tests/kernel_host/host_backend.HostRuntime on the host.

    A stream is a context manager that makes it current on the calling thread, with
    ``record() -> event``, ``wait_event(event)`` and ``synchronize()``; an event has
    ``synchronize()`` (CuPy's cupy.cuda.Stream and Event). Device arrays made by ``xp.empty``
    take a host-to-device copy by ``array.set(host, stream=stream)`` (asynchronous from pinned
    memory).
    """

    def new_stream(self) -> Any:
        """A new non-blocking stream."""

    def current_stream(self) -> Any:
        """The calling thread's current stream."""

    def pinned_buffer(self, nbytes: int) -> np.ndarray:
        """uint8 (nbytes,), a host view over page-locked memory (the view keeps it alive)."""


class _Lane:
    """A stream lent to one batch scope at a time, with what belongs to it: its pinned staging
    buffer (host uint8, grown as needed, reused across scopes), the event recorded after the
    last copy out of that buffer (None: none pending), and the device arrays its scope's
    kernels read that the backend's caches may drop meanwhile (held until the hand-off)."""

    __slots__ = ("stream", "staging", "staged", "held")

    def __init__(self, stream) -> None:
        self.stream = stream
        self.staging: Optional[np.ndarray] = None
        self.staged = None
        self.held: list = []


class KernelBackend:
    name = "gpu"
    # Two batches in flight, on two host threads with a stream each: one batch's host work
    # and copies overlap the other's kernels.
    parallel_batches = 2
    default_batch_bytes = DEFAULT_GPU_BATCH_BYTES

    def __init__(self, xp, kernels, description: str, tables: NormalizationTables | None = None,
                 runtime: Optional[DeviceRuntime] = None):
        """xp: the array module (cupy on a GPU); kernels: a loader with
        ``get(file_name, kernel_name, defines) -> kernel(grid, block, args)``; tables: the
        normalisation tables on xp's side (None: the host's, copied there); runtime: streams,
        events and pinned memory for the batch scopes (None: no streams, for host runs)."""
        self.xp = xp
        self.kernels = kernels
        self.description = description
        # None: the host tables, on xp's side (a copy for a device; numpy: themselves)
        self.tables = tables if tables is not None else tables_on(xp)
        self.runtime = runtime
        # Lanes (streams) are lent to batch scopes and returned, so a backend owns as many
        # streams as batches were ever in flight at once (two), however many runs and threads
        # use it: CuPy's memory pool keeps freed blocks per stream, and streams of finished
        # threads would hold theirs for good.
        self._idle_lanes: list[_Lane] = []
        self._local = threading.local()  # .lane: the calling thread's scope's lane
        # Least recently used last out; an entry leaving it is freed only once the scopes that
        # read it have handed off (they hold it: permutation_arrays).
        self._permutations: OrderedDict[tuple, tuple] = OrderedDict()
        self._lock = threading.Lock()

    def __dask_tokenize__(self):
        """What Dask names a task by where this backend is an argument (a run with a work
        directory on Dask's local scheduler hands tasks the backend itself): its kind and
        description, on which its results alone depend; its locks and streams cannot be."""
        return type(self).__name__, self.description

    # --- the Backend interface ------------------------------------------------------------

    @contextlib.contextmanager
    def batch_scope(self):
        """A context for one batch's work on a stream of its own (current inside), so that two
        batches in flight on two threads overlap on the device. See the module docstring for
        the hand-offs at entry and exit: when the context ends, the batch's work is complete
        and its arrays can be used on any stream."""
        if self.runtime is None:
            yield
            return
        with self._lock:
            lane = self._idle_lanes.pop() if self._idle_lanes else _Lane(self.runtime.new_stream())
        outer = getattr(self._local, "lane", None)
        try:
            # Entry: the batch's stream waits for what the caller queued before the scope.
            lane.stream.wait_event(self.runtime.current_stream().record())
            self._local.lane = lane
            with lane.stream:
                try:
                    yield
                finally:
                    # Exit: the hand-off (also after an error: the staging buffer and the held
                    # arrays must be idle before the lane is lent again).
                    lane.stream.synchronize()
        finally:
            self._local.lane = outer
            lane.held.clear()
            lane.staged = None  # the stream's synchronize covered the last copy
            with self._lock:
                self._idle_lanes.append(lane)

    def to_device(self, *arrays) -> tuple:
        """The arrays on this side: device arrays as they are; host numpy arrays copied.

        Inside a batch scope with a runtime, the host arrays go through the lane's pinned
        staging buffer: one host copy into page-locked memory (numpy views over the buffer,
        each array at a multiple of STAGING_ALIGNMENT bytes), then asynchronous copies on the
        lane's stream, so that a batch's copy overlaps the other batch's kernels and the driver
        makes no staging copy of its own. The buffer is written only after the event recorded
        after its previous copies has passed. Elsewhere: xp.asarray.
        """
        xp = self.xp
        lane = getattr(self._local, "lane", None)
        host = [isinstance(a, np.ndarray) and a.size > 0 for a in arrays]
        if lane is None or self.runtime is None or not any(host):
            return tuple(xp.asarray(a) for a in arrays)
        starts, total = [], 0
        for array, staged in zip(arrays, host):
            starts.append(total)
            if staged:
                total += -(-array.nbytes // STAGING_ALIGNMENT) * STAGING_ALIGNMENT
        if lane.staged is not None:
            lane.staged.synchronize()  # the buffer's previous copies have finished reading it
            lane.staged = None
        if lane.staging is None or lane.staging.shape[0] < total:
            # Grown with a quarter of headroom, in whole MiB: batches are about the same size.
            size = -(-(total + total // 4) // (1 << 20)) * (1 << 20)
            lane.staging = None  # (the old buffer is idle: its copies were waited for above)
            lane.staging = self.runtime.pinned_buffer(size)
        out = []
        for array, staged, start in zip(arrays, host, starts):
            if not staged:
                out.append(xp.asarray(array))
                continue
            view = lane.staging[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
            np.copyto(view, array)
            device = xp.empty(array.shape, dtype=array.dtype)
            device.set(view, stream=lane.stream)
            out.append(device)
        lane.staged = lane.stream.record()
        return tuple(out)

    def shingle_hashes(self, data, offsets, spec: ShingleSpec) -> ShingleBatch:
        """data uint8 (B,) (or token ids uint32), offsets int64 (n + 1,) from 0, host or this
        side; returns the ShingleBatch on this side (hashes in text order with repeats, like
        numpy's). Host inputs are copied once (to_device: pinned, asynchronous in a scope)."""
        xp = self.xp
        if isinstance(offsets, np.ndarray):
            offsets = offsets.astype(np.int64, copy=False)
        data, offsets = self.to_device(data, offsets)
        offsets = xp.asarray(offsets, dtype=xp.int64)
        units, offsets = shingle_units(data, offsets, spec, xp, self.tables)
        starts, ends, shingle_offsets = shingle_spans(units, offsets, spec, xp)
        return ShingleBatch(shingle_offsets, self.span_hashes(units, starts, ends))

    def shingle_sets(self, data, offsets, spec: ShingleSpec) -> ShingleBatch:
        """Each document's set of shingle hashes, sorted ascending without repeats, as a HOST
        ShingleBatch (offsets int64 (n + 1,), hashes uint64): the input of exact verification.
        data and offsets as for shingle_hashes. The sort and de-duplication run on this side
        (sorted_unique_rows), so only the distinct hashes cross to the host."""
        sets = sorted_unique_rows(self.shingle_hashes(data, offsets, spec), self.xp)
        return ShingleBatch(self.to_host(sets.offsets), self.to_host(sets.hashes))

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

        The hashes stay ragged (CSR), so no padding is computed at all. Each block computes
        one work item (cuda_kernels.minhash_work_items): a whole document, or a range of
        MINHASH_ITEM_SHINGLES shingles of a longer one, whose minima the kernel combines into
        the row with atomicMin; so no document runs on one block for long. Items are issued
        longest first, so that the device does not idle while the last few finish.
        """
        xp = self.xp
        num_perm = permutations.count
        offsets = xp.ascontiguousarray(shingles.offsets, dtype=xp.int64)
        # Every row starts empty: documents without shingles keep it, and the items of a long
        # document combine their minima into it.
        signatures = xp.full((shingles.n_docs, num_perm), EMPTY_SIGNATURE_VALUE, dtype=xp.uint32)
        item_docs, item_starts = minhash_work_items(offsets, MINHASH_ITEM_SHINGLES, xp)
        if item_docs.shape[0] == 0:
            return signatures
        a, b = self.permutation_arrays(permutations)
        defines = minhash_tunables(num_perm)
        block = tunable(defines, "BLOCK_SIZE", "minhash.cu")
        kernel = self.kernels.get("minhash.cu", "minhash_signatures_u64", defines)
        kernel((item_docs.shape[0], -(-num_perm // minhash_chunk(defines))), (block,),
               (xp.ascontiguousarray(shingles.hashes, dtype=xp.uint64), offsets, item_docs, item_starts,
                np.int64(MINHASH_ITEM_SHINGLES), a, b, np.int32(num_perm), signatures))
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
        if self.runtime is not None:
            self.runtime.current_stream().synchronize()

    def release_memory(self) -> None:
        """Give the memory pool's cached free blocks back to the device (between runs)."""
        get_pool = getattr(self.xp, "get_default_memory_pool", None)
        if get_pool is not None and getattr(self.xp, "cuda", None) is not None:
            get_pool().free_all_blocks()

    # --- helpers ----------------------------------------------------------------------------

    def permutation_arrays(self, permutations: Permutations):
        """(a, b) uint32 (K,) on this side, copied once per distinct permutation family.

        The PERMUTATION_CACHE_SIZE most recently used families are kept. A kernel on another
        stream may still read a family the cache drops: the calling scope's lane holds the
        arrays until its hand-off, so their memory is freed (and reused by CuPy's pool) only
        after every scope that read them has finished on the device.
        """
        key = (permutations.a.tobytes(), permutations.b.tobytes())
        with self._lock:
            cached = self._permutations.get(key)
            if cached is None:
                a = self.xp.asarray(np.ascontiguousarray(permutations.a, dtype=np.uint32))
                b = self.xp.asarray(np.ascontiguousarray(permutations.b, dtype=np.uint32))
                self.synchronize()  # other threads' streams will read them
                cached = self._permutations[key] = (a, b)
                while len(self._permutations) > PERMUTATION_CACHE_SIZE:
                    self._permutations.popitem(last=False)
            else:
                self._permutations.move_to_end(key)
        lane = getattr(self._local, "lane", None)
        if lane is not None and not any(held is cached for held in lane.held):
            lane.held.append(cached)
        return cached


def sorted_unique_rows(batch: ShingleBatch, xp) -> ShingleBatch:
    """Each row's hashes sorted ascending without repeats, on xp's side (segmented: the hashes
    are sorted, then stably by row, so rows stay in order and each row's hashes come out sorted;
    a hash is kept where it differs from its predecessor or starts a row). batch: offsets int64
    (n + 1,), hashes uint64 (S,); returns offsets int64 (n + 1,) and hashes uint64 (U,).
    shingling.unique_per_row is the host reference."""
    row, _ = ragged_arange(batch.counts(), xp)
    by_hash = xp.argsort(batch.hashes, kind="stable")
    order = by_hash[xp.argsort(row[by_hash], kind="stable")]
    hashes = batch.hashes[order]  # row[order] == row: the stable sort by row keeps the rows in place
    first = xp.ones(hashes.shape[0], dtype=xp.bool_)
    first[1:] = (hashes[1:] != hashes[:-1]) | (row[1:] != row[:-1])
    offsets = offsets_from_counts(first.astype(xp.int64), xp)[batch.offsets]
    return ShingleBatch(offsets, hashes[first])
