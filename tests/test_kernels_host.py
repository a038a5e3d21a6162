"""The CUDA kernels in kernels/, run on the host and compared bit for bit with the numpy backend.

The .cu files are compiled unchanged as C++ by g++ on top of tests/kernel_host/cuda_host_shim.h
(which runs every block's threads as fibers with a real __syncthreads barrier) and called via
ctypes through tests/kernel_host/launch.cpp (DESIGN.md, "Testing without a GPU", point 2). No
GPU and no CUDA toolkit are needed, only g++; the tests skip when g++ is missing.

Libraries are cached per (sources, tunables, compiler) hash under the temp directory, so only
the first run compiles.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from gpudedup.backends.cuda_kernels import minhash_tunables, minhash_wasted_slots, minhash_work_items
from gpudedup.backends.kernel_backend import KernelBackend
from gpudedup.backends.kernel_tunables import KERNEL_TUNABLES, MINHASH_ITEM_SHINGLES, MINHASH_LAUNCH_CHOICES

from gpudedup.core import hashing
from gpudedup.core.hashing import EMPTY_SIGNATURE_VALUE, Permutations, draw_permutations, poly_hash64_scalar
from gpudedup.core.lsh import Banding, band_keys, choose_bands
from gpudedup.core.minhash import minhash_signatures
from gpudedup.core.normalize import encode_codepoints, normalize_codepoints
from gpudedup.core.shingling import ShingleBatch, ShingleSpec, shingle_hashes, shingle_spans, span_hashes
from kernel_host.host_kernels import (BAD_LAUNCH, CXXFLAGS, DEFAULTS, DIVERGENT_BARRIER, FORWARD, OK, REVERSE,
                                      SCHEDULES, SHUFFLED, HostKernels, build_library, ceil_div, host_library,
                                      load_library)

REPO = Path(__file__).resolve().parents[1]
KERNELS = REPO / "kernels"
HOST = Path(__file__).resolve().parent / "kernel_host"


# --- launching the kernels like a GPU wrapper would -------------------------------------------


def host_minhash(library, batch: ShingleBatch, permutations: Permutations, doc_ids=None, schedule=FORWARD, out=None,
                 item_shingles=None, shuffle=None):
    """minhash_signatures_u64 over the documents ``doc_ids`` (default: every document), cut into
    work items of at most ``item_shingles`` shingles by cuda_kernels.minhash_work_items
    (default: one item per document); with ``shuffle`` (a numpy Generator) the items go in a
    random order. Returns uint32 (n, K): ``out`` (default: a garbage fill that the kernel must
    overwrite), whose rows of documents cut into several items are set to the empty value
    first, as the kernel's contract asks."""
    num_perm = permutations.count
    block = library.tunable_block_size()
    per_block = block * library.tunable_perms_per_thread()
    offsets = np.ascontiguousarray(batch.offsets, np.int64)
    counts = np.diff(offsets)
    if out is None:
        out = np.full((batch.n_docs, num_perm), 0xA5A5A5A5, dtype=np.uint32)  # must be overwritten
    if doc_ids is None:
        doc_ids = np.arange(batch.n_docs, dtype=np.int64)
    doc_ids = np.asarray(doc_ids, dtype=np.int64)
    if item_shingles is None:
        item_shingles = max(1, int(counts.max(initial=0)))
    item_docs, item_starts = minhash_work_items(offsets, item_shingles, np)
    named = np.isin(item_docs, doc_ids)
    item_docs, item_starts = item_docs[named], item_starts[named]
    # Items only cover documents with shingles; an empty one is an item of its own here, to
    # check that the kernel stores the empty value for it.
    empty = doc_ids[counts[doc_ids] == 0]
    item_docs = np.concatenate([item_docs, empty])
    item_starts = np.concatenate([item_starts, offsets[empty]])
    if shuffle is not None:
        order = shuffle.permutation(item_docs.size)
        item_docs, item_starts = item_docs[order], item_starts[order]
    out[doc_ids[counts[doc_ids] > item_shingles]] = EMPTY_SIGNATURE_VALUE
    if item_docs.size:
        status = library.launch_minhash_signatures_u64(
            item_docs.size, ceil_div(num_perm, per_block), block, schedule,
            np.ascontiguousarray(batch.hashes, np.uint64), offsets, np.ascontiguousarray(item_docs),
            np.ascontiguousarray(item_starts), item_shingles,
            np.ascontiguousarray(permutations.a, np.uint32), np.ascontiguousarray(permutations.b, np.uint32),
            num_perm, out,
        )
        assert status == OK
    return out


def host_band_keys(library, signatures: np.ndarray, bands: int, rows: int, grid=None, schedule=FORWARD):
    n, num_perm = signatures.shape
    keys = np.full((n, bands), 0xA5A5A5A5A5A5A5A5, dtype=np.uint64)
    block = library.tunable_block_size()
    if grid is None:
        grid = ceil_div(n * bands, block)
    if n * bands:
        status = library.launch_band_keys_u32(
            grid, block, schedule, np.ascontiguousarray(signatures), n, num_perm, bands, rows, keys
        )
        assert status == OK
    return keys


def host_span_hashes(library, codepoints, starts, ends, grid=None, schedule=FORWARD):
    hashes = np.full(starts.shape[0], 0xA5A5A5A5A5A5A5A5, dtype=np.uint64)
    block = library.tunable_block_size()
    if grid is None:
        grid = ceil_div(starts.shape[0], block)
    if starts.shape[0]:
        status = library.launch_span_hashes_u32(
            grid, block, schedule, np.ascontiguousarray(codepoints, np.uint32),
            np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(ends, np.int64), starts.shape[0], hashes,
        )
        assert status == OK
    return hashes


# --- inputs -----------------------------------------------------------------------------------


def batch_of_lengths(lengths, rng, distinct=None) -> ShingleBatch:
    """Random uint64 shingle hashes for documents of the given lengths. With ``distinct``, the
    hashes are drawn from that many values, so documents repeat shingles."""
    lengths = np.asarray(lengths, dtype=np.int64)
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if distinct is None:
        hashes = rng.integers(0, 2**64, size=int(offsets[-1]), dtype=np.uint64, endpoint=False)
    else:
        pool = rng.integers(0, 2**64, size=distinct, dtype=np.uint64)
        hashes = pool[rng.integers(0, distinct, size=int(offsets[-1]))]
    return ShingleBatch(offsets, hashes)


def edge_lengths(tunables: dict) -> list[int]:
    """Document lengths around every boundary of a launch configuration."""
    block = tunables.get("BLOCK_SIZE", DEFAULTS["BLOCK_SIZE"])
    tile = tunables.get("TILE", DEFAULTS["TILE"])
    lengths = [0, 1, 2, 0, 0, 1]
    for edge in (block, tile, 2 * tile, 3 * tile):
        lengths += [edge - 1, edge, edge + 1]
    return [length for length in lengths if length >= 0] + [2 * block + 3, 3 * tile + 5, 0]


def extreme_permutations(num_perm: int, rng) -> Permutations:
    """Parameters at the edges of uint32 (even a, a = 0, b near 2**32), where wrapping shows.
    The kernels must reproduce the affine map for any a, not only the odd ones drawn."""
    a = rng.integers(0, 2**32, size=num_perm, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, size=num_perm, dtype=np.uint64).astype(np.uint32)
    specials = np.array([0, 1, 2, 0xFFFFFFFF, 0xFFFFFFFE, 0x80000000], dtype=np.uint32)
    a[: min(num_perm, specials.size)] = specials[: min(num_perm, specials.size)]
    b[::2] = 0xFFFFFFFF - b[::2] % 7
    return Permutations(a=a, b=b)


# --- the hash constants -----------------------------------------------------------------------


def test_hash_common_constants_equal_hashing_py():
    text = (KERNELS / "hash_common.cuh").read_text()
    constants = {name: int(value, 16) for name, value in re.findall(r"GD_(\w+) = (0x[0-9A-Fa-f]+)", text)}
    assert constants == {
        "POLY_BASE": hashing.POLY_BASE,
        "POLY_OFFSET": hashing.POLY_OFFSET,
        "FMIX_C1": hashing.FMIX_C1,
        "FMIX_C2": hashing.FMIX_C2,
        "EMPTY_SIGNATURE_VALUE": hashing.EMPTY_SIGNATURE_VALUE,
    }


def test_kernel_sources_include_only_hash_common():
    # NVRTC has no system headers; the kernels must stand alone (plus hash_common.cuh).
    for path in KERNELS.glob("*.cu*"):
        includes = re.findall(r'^\s*#\s*include\s*(\S+)', path.read_text(), flags=re.M)
        assert set(includes) <= {'"hash_common.cuh"'}, (path.name, includes)


# --- the shim itself ----------------------------------------------------------------------------


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_shim_barrier_orders_shared_memory(schedule):
    library = host_library()
    block, grid = 64, 5
    values = np.arange(block * grid, dtype=np.int32)
    out = np.zeros_like(values)
    assert library.launch_reverse_block_i32(grid, block, schedule, values, out, 1) == OK
    np.testing.assert_array_equal(out, values.reshape(grid, block)[:, ::-1].ravel())


def test_shim_exposes_a_missing_barrier():
    # Without the barrier, a thread reads slots other threads have not written yet: the shim
    # must not make the race pass.
    library = host_library()
    block, grid = 64, 5
    values = np.arange(1, block * grid + 1, dtype=np.int32)
    expected = values.reshape(grid, block)[:, ::-1].ravel()
    for schedule in (FORWARD, REVERSE):
        out = np.zeros_like(values)
        assert library.launch_reverse_block_i32(grid, block, schedule, values, out, 0) == OK
        assert not np.array_equal(out, expected)


def test_shim_reports_divergent_barrier_and_bad_launches():
    library = host_library()
    out = np.zeros(32, dtype=np.int32)
    assert library.launch_divergent_barrier_i32(32, out) == DIVERGENT_BARRIER
    assert library.launch_reverse_block_i32(1, 0, FORWARD, out, out, 1) == BAD_LAUNCH
    big = np.zeros(2048, dtype=np.int32)
    assert library.launch_reverse_block_i32(1, 2048, FORWARD, big, big, 1) == BAD_LAUNCH


def test_shim_thread_coordinates():
    library = host_library()
    grid, block = (3, 2, 2), (4, 3, 2)
    out = np.zeros((*grid[::-1], *block[::-1], 6), dtype=np.uint32)
    assert library.launch_thread_coordinates_u32(*grid, *block, out.reshape(-1)) == OK
    bz, by, bx, tz, ty, tx = np.indices(out.shape[:-1])
    np.testing.assert_array_equal(out, np.stack([bx, by, bz, tx, ty, tz], axis=-1))


def check_shared_memory_fill(library) -> None:
    """A GPU gives a block's shared memory whatever was there: a kernel reading words it did not
    write must see the shim's pattern (one byte repeated, another per block), never zeros or
    the previous block's writes (0x600DF00D), which could pass for right values."""
    grid, block = 4, 64
    out = np.zeros((grid, block), dtype=np.uint32)
    assert library.launch_uninitialised_shared_u32(grid, block, out.reshape(-1)) == OK
    patterns = out[:, 0] & 0xFF
    np.testing.assert_array_equal(out, (patterns * 0x01010101)[:, None] * np.ones(block, np.uint32))
    assert np.all(patterns != 0) and len(set(patterns.tolist())) == grid
    assert not np.any(out == 0x600DF00D)


def on_new_thread(function: Callable[[], None]) -> None:
    """Run ``function`` on a thread of its own and re-raise what it raised (an assertion too)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            function()
        except BaseException as error:  # noqa: BLE001 -- re-raised on the calling thread
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


def test_shim_fills_shared_memory_between_blocks():
    check_shared_memory_fill(host_library())


def test_shim_fills_shared_memory_in_a_second_library_on_every_thread(tmp_path):
    # Regression: the fill was skipped in a library loaded after another one (test_copies.py's
    # libraries before this file's): the shim's built-ins were process-wide unique symbols, so
    # the second library ran on the first one's gridDim, looked for its shared memory by that
    # address, found the first library's and filled that. And a launch that could not find its
    # shared memory ran unfilled. Here a library that no other test loads (a cache of its own)
    # comes after host_library(), and its kernels run first on another thread, as the kernel
    # backend's batch threads run them; then the fill must hold on the main thread and on a
    # thread that never launched before, in both libraries.
    first = host_library()
    check_shared_memory_fill(first)
    second = load_library(build_library(CXXFLAGS, tmp_path))
    on_new_thread(lambda: check_shared_memory_fill(second))
    check_shared_memory_fill(second)
    check_shared_memory_fill(first)

    def both_on_a_fresh_thread() -> None:
        check_shared_memory_fill(second)
        check_shared_memory_fill(first)

    on_new_thread(both_on_a_fresh_thread)
    # The kernels too run on the second library's own built-ins from any thread.
    rng = np.random.default_rng(3)
    batch, permutations = batch_of_lengths([0, 1, 70, 300], rng), draw_permutations(130, seed=3)
    on_new_thread(lambda: np.testing.assert_array_equal(host_minhash(second, batch, permutations),
                                                        minhash_signatures(batch, permutations)))


# --- minhash.cu ---------------------------------------------------------------------------------


def tunables_id(tunables: dict) -> str:
    """A test id that ``-k`` can select by: block64-perms2-tile1024."""
    values = {**DEFAULTS, **tunables}
    return f"block{values['BLOCK_SIZE']}-perms{values['PERMS_PER_THREAD']}-tile{values['TILE']}"


@pytest.mark.parametrize("tunables", KERNEL_TUNABLES["minhash.cu"], ids=tunables_id)
@pytest.mark.parametrize("num_perm", [1, 5, 128, 203])
def test_minhash_matches_numpy(tunables, num_perm):
    library = host_library(**tunables)
    assert library.tunable_block_size() == tunables.get("BLOCK_SIZE", DEFAULTS["BLOCK_SIZE"])
    assert library.tunable_perms_per_thread() == tunables.get("PERMS_PER_THREAD", DEFAULTS["PERMS_PER_THREAD"])
    assert library.tunable_tile() == tunables.get("TILE", DEFAULTS["TILE"])
    rng = np.random.default_rng(num_perm)
    # Work items of three tiles, the last one partial (half a tile for the largest tiles, whose
    # documents would be slow under the sanitizers); the two long documents span several items,
    # one of them ending on an item boundary.
    tile = tunables.get("TILE", DEFAULTS["TILE"])
    item_shingles = 2 * tile + 3 if tile <= 2048 else tile // 2 + 3
    lengths = edge_lengths(tunables) + list(rng.integers(0, 300, size=40)) + [4 * item_shingles + 7, 3 * item_shingles]
    rng.shuffle(lengths)
    batch = batch_of_lengths(lengths, rng)
    permutations = draw_permutations(num_perm, seed=num_perm)
    expected = minhash_signatures(batch, permutations)
    np.testing.assert_array_equal(host_minhash(library, batch, permutations), expected)  # one block per document
    # Cut into items: the documents longer than an item, and a few others (the rest would run
    # as before, one item each, and only slow the sanitized runs down).
    counts = np.diff(batch.offsets)
    cut = np.union1d(np.flatnonzero(counts > item_shingles), np.flatnonzero(counts <= item_shingles)[:6])
    signatures = host_minhash(library, batch, permutations, doc_ids=cut, item_shingles=item_shingles, shuffle=rng)
    np.testing.assert_array_equal(signatures[cut], expected[cut])
    assert np.all(expected[np.diff(batch.offsets) == 0] == 0xFFFFFFFF)  # the oracle's empty rows


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_minhash_any_schedule_and_extreme_parameters(schedule):
    tunables = {"BLOCK_SIZE": 64, "PERMS_PER_THREAD": 3, "TILE": 100}
    library = host_library(**tunables)
    rng = np.random.default_rng(7 + schedule)
    batch = batch_of_lengths(edge_lengths(tunables) + [1000], rng, distinct=500)  # repeats
    permutations = extreme_permutations(450, rng)  # 3 permutation chunks, the last one partial
    expected = minhash_signatures(batch, permutations)
    np.testing.assert_array_equal(host_minhash(library, batch, permutations, schedule=schedule), expected)
    for item_shingles in (1, 7, 150):  # one shingle per block; items within a tile; two tiles
        np.testing.assert_array_equal(host_minhash(library, batch, permutations, schedule=schedule,
                                                   item_shingles=item_shingles, shuffle=rng), expected)


def test_minhash_work_items_cover_each_document_once():
    # Oracle: the items of each document, cut in plain Python.
    rng = np.random.default_rng(5)
    lengths = [0, 1, 9, 10, 11, 0, 30, 31, 2, 100, 0] + list(rng.integers(0, 40, size=50))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    for item_shingles in (1, 3, 10, 1000):
        expected = {(d, start) for d in range(len(lengths))
                    for start in range(int(offsets[d]), int(offsets[d + 1]), item_shingles)}
        item_docs, item_starts = minhash_work_items(offsets, item_shingles, np)
        assert item_docs.dtype == item_starts.dtype == np.int64
        assert sorted(zip(item_docs.tolist(), item_starts.tolist())) == sorted(expected)
        sizes = np.minimum(offsets[item_docs + 1] - item_starts, item_shingles)
        assert np.all(np.diff(sizes) <= 0)  # longest first
    empty = minhash_work_items(np.zeros(1, np.int64), 4, np)
    assert empty[0].shape == empty[1].shape == (0,)
    with pytest.raises(ValueError, match="item_shingles"):
        minhash_work_items(offsets, 0, np)


@pytest.mark.parametrize("array_module", ["numpy", "cupy_like"])
def test_kernel_backend_splits_long_documents(array_module):
    # KernelBackend.signatures with documents around and far beyond MINHASH_ITEM_SHINGLES, on
    # the host kernels, with numpy and with the strict CuPy stand-in.
    if array_module == "numpy":
        xp = np
    else:
        from cupy_like import cupy_like as xp
    span = MINHASH_ITEM_SHINGLES
    rng = np.random.default_rng(17)
    batch = batch_of_lengths([0, 1, span - 1, span, span + 1, 12, 0, 5 * span + 3, 3 * span], rng, distinct=20000)
    for num_perm in (96, 128, 203):
        permutations = draw_permutations(num_perm, seed=num_perm)
        backend = KernelBackend(xp, HostKernels(SHUFFLED), description="host")
        shingles = ShingleBatch(xp.asarray(batch.offsets), xp.asarray(batch.hashes))
        signatures = backend.to_host(backend.signatures(shingles, permutations))
        np.testing.assert_array_equal(signatures, minhash_signatures(batch, permutations))
        assert backend.kernels.launches == [("minhash_signatures_u64", minhash_tunables(num_perm))]


# --- the launch choices -------------------------------------------------------------------------


def test_minhash_launch_choices_waste_least_for_the_default_bandings():
    # The permutations a job computes are choose_bands's bands * rows; with DedupParams'
    # defaults (max_fn 0.01) and num_perm 128 or 256 at thresholds 0.5 ... 0.95, the chosen
    # launch covers them in one chunk and wastes fewer than 32 slots: none when b * r is a
    # multiple of 32 (a warp), and never more than the least that any warp-sized chunk wastes.
    assert all(choice in KERNEL_TUNABLES["minhash.cu"] for choice in MINHASH_LAUNCH_CHOICES)
    computed = set()
    for num_perm in (128, 256):
        for step in range(10):
            banding = choose_bands(round(0.5 + 0.05 * step, 2), num_perm, 0.01)
            k = banding.bands * banding.rows
            computed.add(k)
            chosen = minhash_tunables(k)
            assert minhash_wasted_slots(chosen, k) == -k % 32, (k, chosen)
            assert ceil_div(k, chosen.get("BLOCK_SIZE", 64) * chosen.get("PERMS_PER_THREAD", 2)) == 1
            assert chosen.get("PERMS_PER_THREAD", 2) <= 8
    assert choose_bands(0.8, 128, 0.01).bands * choose_bands(0.8, 128, 0.01).rows == 96  # the default job
    assert {96, 128, 192} <= computed and minhash_wasted_slots(minhash_tunables(96), 96) == 0
    # Beyond one chunk, still the least waste, then the fewest chunks.
    for k in range(1, 1025):
        chosen = minhash_tunables(k)
        assert minhash_wasted_slots(chosen, k) == min(minhash_wasted_slots(c, k) for c in MINHASH_LAUNCH_CHOICES)
    assert minhash_tunables(128) == {}  # the default num_perm keeps the default tunables


def test_minhash_low_bits_only():
    # Hashes that differ only above bit 32 give the same signature entries; hashes whose low
    # 32 bits are at the extremes exercise the wrap of the affine map.
    library = host_library()
    low = np.array([0, 1, 0xFFFFFFFF, 0x80000000, 12345], dtype=np.uint64)
    high = (np.arange(1, 6, dtype=np.uint64) << np.uint64(32)) | low
    batch = ShingleBatch(np.array([0, 5, 10, 11], dtype=np.int64), np.concatenate([low, high, low[2:3]]))
    permutations = draw_permutations(130, seed=3)
    signatures = host_minhash(library, batch, permutations)
    np.testing.assert_array_equal(signatures, minhash_signatures(batch, permutations))
    np.testing.assert_array_equal(signatures[0], signatures[1])


def test_minhash_length_buckets_launched_separately():
    # A GPU wrapper may sort documents by length and launch each bucket with its own tunables;
    # the rows a launch does not name must stay untouched.
    rng = np.random.default_rng(11)
    lengths = rng.integers(0, 40, size=60)
    lengths[rng.choice(60, size=6, replace=False)] = rng.integers(2000, 5000, size=6)
    batch = batch_of_lengths(lengths, rng)
    permutations = draw_permutations(96, seed=5)
    long_docs = np.flatnonzero(lengths >= 2000)
    short_docs = rng.permutation(np.flatnonzero(lengths < 2000))
    out = np.full((batch.n_docs, 96), 0xA5A5A5A5, dtype=np.uint32)
    small = host_library(BLOCK_SIZE=32, PERMS_PER_THREAD=1, TILE=32)
    host_minhash(small, batch, permutations, short_docs[:10], out=out)
    untouched = np.setdiff1d(np.arange(batch.n_docs), short_docs[:10])
    assert np.all(out[untouched] == 0xA5A5A5A5)
    host_minhash(small, batch, permutations, short_docs[10:], out=out)
    host_minhash(host_library(BLOCK_SIZE=32, PERMS_PER_THREAD=4, TILE=7), batch, permutations, long_docs, out=out,
                 item_shingles=300)
    np.testing.assert_array_equal(out, minhash_signatures(batch, permutations))


def test_minhash_only_empty_documents_and_one_shingle():
    library = host_library(BLOCK_SIZE=32, PERMS_PER_THREAD=1, TILE=32)
    permutations = draw_permutations(40, seed=1)
    empty = ShingleBatch(np.zeros(4, dtype=np.int64), np.zeros(0, dtype=np.uint64))
    np.testing.assert_array_equal(host_minhash(library, empty, permutations), np.full((3, 40), 0xFFFFFFFF, np.uint32))
    one = ShingleBatch(np.array([0, 1], dtype=np.int64), np.array([0xDEADBEEFCAFEF00D], dtype=np.uint64))
    expected = (permutations.a.astype(np.uint64) * 0xCAFEF00D + permutations.b) % 2**32
    np.testing.assert_array_equal(host_minhash(library, one, permutations)[0], expected.astype(np.uint32))
    np.testing.assert_array_equal(minhash_signatures(one, permutations)[0], expected.astype(np.uint32))


def test_minhash_real_texts():
    texts = [
        "The quick brown fox jumps over the lazy dog. " * 30,
        "The quick brown fox jumps over the lazy cat. " * 30,
        "",
        None,
        "short",
        "Ünïcödé TEXT, with\tODD   white\u3000space and 😀 emoji " * 5,
    ]
    batch = shingle_hashes(texts, ShingleSpec("word", 3))
    permutations = draw_permutations(256, seed=42)
    np.testing.assert_array_equal(host_minhash(host_library(), batch, permutations),
                                  minhash_signatures(batch, permutations))


# --- band_keys.cu -------------------------------------------------------------------------------


BAND_SHAPES = [  # (n_docs, num_perm, bands, rows)
    (50, 128, 16, 8),
    (37, 200, 9, 22),  # columns past bands * rows are ignored
    (10, 5, 1, 5),
    (1, 1, 1, 1),
    (64, 130, 13, 10),
    (3, 256, 256, 1),
]


@pytest.mark.parametrize("tunables", KERNEL_TUNABLES["band_keys.cu"], ids=repr)
@pytest.mark.parametrize("shape", BAND_SHAPES, ids=str)
def test_band_keys_match_numpy(tunables, shape):
    library = host_library(**tunables)
    n, num_perm, bands, rows = shape
    rng = np.random.default_rng(n * num_perm)
    signatures = rng.integers(0, 2**32, size=(n, num_perm), dtype=np.uint64).astype(np.uint32)
    signatures[::4] = 0xFFFFFFFF  # empty-document rows hash too
    expected = band_keys(signatures, Banding(bands, rows, "test"))
    np.testing.assert_array_equal(host_band_keys(library, signatures, bands, rows), expected)


@pytest.mark.parametrize("grid", [1, 3])
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_band_keys_grid_stride(grid, schedule):
    # Fewer threads than keys: the grid-stride loop must cover every (document, band).
    library = host_library(BLOCK_SIZE=32)
    rng = np.random.default_rng(grid)
    signatures = rng.integers(0, 2**32, size=(41, 128), dtype=np.uint64).astype(np.uint32)
    expected = band_keys(signatures, Banding(20, 6, "test"))
    np.testing.assert_array_equal(host_band_keys(library, signatures, 20, 6, grid=grid, schedule=schedule), expected)


def test_band_keys_scalar_oracle_and_minhash_chain():
    library = host_library()
    texts = ["alpha beta gamma delta epsilon " * 4, "alpha beta gamma delta zeta " * 4, "x"]
    batch = shingle_hashes(texts, ShingleSpec("word", 2))
    permutations = draw_permutations(64, seed=9)
    signatures = host_minhash(library, batch, permutations)
    keys = host_band_keys(library, signatures, 8, 8)
    np.testing.assert_array_equal(keys, band_keys(minhash_signatures(batch, permutations), Banding(8, 8, "t")))
    for d in range(len(texts)):
        for j in range(8):
            assert int(keys[d, j]) == poly_hash64_scalar(int(v) for v in signatures[d, j * 8 : (j + 1) * 8])


# --- shingle_hash.cu ----------------------------------------------------------------------------


TEXTS = [
    "The quick brown fox jumps over the lazy dog",
    "  Leading and trailing   white space\t\n ",
    "",
    None,
    "a",
    "two words",
    "Ünïcödé TEXT — ĲSSEL, ΣΊΣΥΦΟΣ, Straße; 日本語のテキスト 😀😀 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "lorem ipsum dolor sit amet " * 40,
]


@pytest.mark.parametrize("tunables", KERNEL_TUNABLES["shingle_hash.cu"], ids=repr)
@pytest.mark.parametrize("spec", [ShingleSpec("word", 1), ShingleSpec("word", 5), ShingleSpec("char", 1),
                                  ShingleSpec("char", 4), ShingleSpec("char", 9)], ids=repr)
def test_span_hashes_match_numpy_on_texts(tunables, spec):
    library = host_library(**tunables)
    codepoints, offsets = normalize_codepoints(*encode_codepoints(TEXTS))
    starts, ends, _ = shingle_spans(codepoints, offsets, spec)
    hashes = host_span_hashes(library, codepoints, starts, ends)
    np.testing.assert_array_equal(hashes, span_hashes(codepoints, starts, ends))
    np.testing.assert_array_equal(hashes, shingle_hashes(TEXTS, spec).hashes)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_span_hashes_random_units_and_long_spans(schedule):
    # Any uint32 unit (not only code points), spans of length 1 to 3000, overlapping, in any
    # order, and a grid smaller than the span count.
    library = host_library(BLOCK_SIZE=32)
    rng = np.random.default_rng(schedule)
    codepoints = rng.integers(0, 2**32, size=5000, dtype=np.uint64).astype(np.uint32)
    codepoints[:10] = [0, 0, 0, 0xFFFFFFFF, 0xFFFFFFFF, 1, 0, 0x10FFFF, 0x20, 0]
    lengths = np.concatenate([[1, 1, 2, 3, 3000, 4999, 5000], rng.integers(1, 60, size=400)])
    starts = np.array([rng.integers(0, 5001 - length) for length in lengths], dtype=np.int64)
    starts[:4] = [0, 1, 0, 0]
    starts[5:7] = [1, 0]
    ends = starts + lengths
    hashes = host_span_hashes(library, codepoints, starts, ends, grid=5, schedule=schedule)
    np.testing.assert_array_equal(hashes, span_hashes(codepoints, starts, ends))
    for i in (0, 1, 2, 3, 4, 10):
        assert int(hashes[i]) == poly_hash64_scalar(int(c) for c in codepoints[starts[i] : ends[i]])
    # Leading zero units count (the non-zero offset): [0], [0, 0] and [0, 0, 0] all differ.
    assert len({int(hashes[0]), int(hashes[2]), int(hashes[3])}) == 3
