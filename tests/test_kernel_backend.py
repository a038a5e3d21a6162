"""The GPU backend's code, run on the host: KernelBackend with the CUDA kernels compiled by g++
(tests/kernel_host) and numpy arrays -- both as numpy itself and as ``cupy_like`` (numpy behind
CuPy's API, so that the branches written for CuPy run) -- compared with exact equality with the
numpy backend: shingle hashes, signatures, band keys, verification's shingle sets (sorted and
de-duplicated on the backend's side), and whole runs (pairs, clusters, kept rows).

On a GPU, tests/test_gpu.py runs the same comparisons with CuPy and the real kernels.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import tracemalloc
from importlib import resources

import numpy as np
import pytest

import gpudedup
from gpudedup.backends.cuda_kernels import (KERNEL_DEFAULTS, KERNEL_FILES, compile_options,
                                            grid_stride_blocks, kernel_directory, kernel_source,
                                            minhash_tunables)
from gpudedup.backends.kernel_backend import KernelBackend, sorted_unique_rows
from gpudedup.backends.kernel_tunables import KERNEL_TUNABLES, MINHASH_LAUNCH_CHOICES
from gpudedup.backends.numpy_backend import NumpyBackend
from gpudedup.core.hashing import EMPTY_SIGNATURE_VALUE, draw_permutations
from gpudedup.io.python_inputs import strings_corpus
from gpudedup.core.lsh import Banding, candidate_pairs
from gpudedup.core.normalize import text_buffers
from gpudedup.params import DedupParams
from gpudedup.pipeline.memory import dedup_corpus
from gpudedup.core.shingling import ShingleBatch, ShingleSpec, hashes_to_columns, unique_per_row
from gpudedup.core.verify import document_sets, pair_jaccard, rows_are_sets, set_columns

from cupy_like import cupy_like
from kernel_host.host_kernels import REVERSE, SHUFFLED, HostKernels

SIDES = [pytest.param(np, id="numpy"), pytest.param(cupy_like, id="cupy_like")]


def kernel_backend(xp, schedule=0) -> KernelBackend:
    return KernelBackend(xp, HostKernels(schedule), description="kernels on the host shim")


def sample_texts(count=None) -> list[str]:
    path = resources.files("gpudedup").joinpath("data/bible_sample.jsonl.gz")
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        texts = [json.loads(line)["text"] for line in lines]
    return texts[:count]


EDGE_TEXTS = [
    "", "   ", "a", "ab", "one two", "one two three four five six", "\u00c9T\u00c9  \u00e9t\u00e9\t\u00c9t\u00e9",
    "\u0130stanbul \u03a3\u039f\u03a6\u0399\u0391 \U0001f600\U0001f600 \u4e2d\u6587\u5b57\u7b26", "x" * 5000,
    " ".join(["word"] * 3000), "\u2028\u3000lead and trail\u00a0\u0085", "tab\tsep\nnew line\r\nend",
]


def random_texts(rng, count: int) -> list[str]:
    alphabet = list("abcde ABC  \t\n") + ["\u00e9", "\u00c9", "\u03a3", "\u4e2d", "\U0001f600", "\u3000", "\u0130"]
    lengths = rng.integers(0, 200, size=count)
    return ["".join(rng.choice(alphabet, size=length)) for length in lengths]


@pytest.mark.parametrize("xp", SIDES)
@pytest.mark.parametrize("spec", [ShingleSpec("word", 1), ShingleSpec("word", 5), ShingleSpec("char", 1),
                                  ShingleSpec("char", 5), ShingleSpec("char", 9)], ids=str)
def test_shingle_hashes_equal_numpy(xp, spec):
    texts = EDGE_TEXTS + random_texts(np.random.default_rng(7), 300) + sample_texts(40)
    data, offsets = text_buffers(texts)
    backend = kernel_backend(xp)
    ours = backend.shingle_hashes(data, offsets, spec)
    reference = NumpyBackend().shingle_hashes(data, offsets, spec)
    np.testing.assert_array_equal(backend.to_host(ours.offsets), reference.offsets)
    np.testing.assert_array_equal(backend.to_host(ours.hashes), reference.hashes)
    assert ours.hashes.dtype == np.uint64 and ours.offsets.dtype == np.int64


@pytest.mark.parametrize("xp", SIDES)
def test_shingle_hashes_of_empty_and_blank_batches(xp):
    backend = kernel_backend(xp)
    for texts in ([], [""], ["", " \t "], [None, ""]):
        batch = backend.shingle_hashes(*text_buffers(texts), ShingleSpec("word", 3))
        assert batch.n_docs == len(texts) and batch.hashes.shape == (0,)


@pytest.mark.parametrize("xp", SIDES)
@pytest.mark.parametrize("num_perm", [1, 63, 64, 117, 128, 129, 200, 256, 300])
def test_signatures_and_band_keys_equal_numpy(xp, num_perm):
    texts = EDGE_TEXTS + sample_texts(30)
    data, offsets = text_buffers(texts)
    spec = ShingleSpec("word", 3)
    permutations = draw_permutations(num_perm, seed=num_perm)
    backend, reference = kernel_backend(xp), NumpyBackend()
    shingles = backend.shingle_hashes(data, offsets, spec)
    signatures = backend.signatures(shingles, permutations)
    expected = reference.signatures(reference.shingle_hashes(data, offsets, spec), permutations)
    np.testing.assert_array_equal(backend.to_host(signatures), expected)
    assert np.all(backend.to_host(signatures)[[0, 1]] == EMPTY_SIGNATURE_VALUE)  # "" and "   " have no shingles
    for rows in sorted({1, num_perm // 3 or 1, num_perm}):
        banding = Banding(num_perm // rows, rows, "test")
        np.testing.assert_array_equal(backend.to_host(backend.band_keys(signatures, banding)),
                                      reference.band_keys(expected, banding))


@pytest.mark.parametrize("schedule", [REVERSE, SHUFFLED])
def test_any_thread_order_gives_the_same_signatures(schedule):
    data, offsets = text_buffers(sample_texts(20))
    permutations = draw_permutations(128, seed=1)
    results = []
    for backend in (kernel_backend(np, schedule), NumpyBackend()):
        results.append(backend.signatures(backend.shingle_hashes(data, offsets, ShingleSpec("char", 4)), permutations))
    np.testing.assert_array_equal(*results)


def test_signatures_launch_once_with_the_chosen_tunables():
    backend = kernel_backend(np)
    shingles = backend.shingle_hashes(*text_buffers(sample_texts(5)), ShingleSpec("word", 5))
    for num_perm in (64, 128, 256):
        backend.kernels.launches.clear()
        backend.signatures(shingles, draw_permutations(num_perm, seed=0))
        assert backend.kernels.launches == [("minhash_signatures_u64", minhash_tunables(num_perm))]


def test_minhash_launch_choices():
    assert all(choice in KERNEL_TUNABLES["minhash.cu"] for choice in MINHASH_LAUNCH_CHOICES)
    assert minhash_tunables(128) == {}  # the default num_perm: 64 threads x 2, nothing wasted
    assert minhash_tunables(64) == {"BLOCK_SIZE": 32, "PERMS_PER_THREAD": 2, "TILE": 1024}
    assert minhash_tunables(256) == {"BLOCK_SIZE": 64, "PERMS_PER_THREAD": 4, "TILE": 1024}  # one chunk, not two
    # 20 wasted, not 84; then the fewest chunks: 2 of 160, not 5 of 64 or 10 of 32
    assert minhash_tunables(300) == {"BLOCK_SIZE": 32, "PERMS_PER_THREAD": 5, "TILE": 1024}


def test_kernel_defaults_are_the_sources_defaults():
    for file_name in KERNEL_FILES:
        source = (kernel_directory() / file_name).read_text()
        found = {name: int(value) for name, value in re.findall(r"#ifndef (\w+)\n#define \1 (\d+)", source)}
        assert found == KERNEL_DEFAULTS[file_name], file_name


def test_compiled_sources_change_with_the_header():
    # CuPy's disk cache keys binaries by source and options, not by included headers.
    header = (kernel_directory() / "hash_common.cuh").read_bytes()
    for file_name in KERNEL_FILES:
        source = kernel_source(file_name)
        assert hashlib.sha256(header).hexdigest() in source.splitlines()[0]
        assert source.endswith((kernel_directory() / file_name).read_text())
    assert compile_options({"TILE": 7, "BLOCK_SIZE": 32}) == (f"-I{kernel_directory()}", "-DBLOCK_SIZE=32", "-DTILE=7")
    with pytest.raises(ValueError, match="no kernel file"):
        kernel_source("nope.cu")


def test_grid_stride_blocks():
    assert grid_stride_blocks(0, 256) == 1
    assert grid_stride_blocks(257, 256) == 2
    assert grid_stride_blocks(10**12, 256) == 1 << 16


def test_candidate_pairs_on_the_device_side_equal_numpy():
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 40, size=(3000, 6)).astype(np.uint64)  # many collisions
    docs = np.sort(rng.choice(10**6, size=3000, replace=False)).astype(np.int64)
    for window in (1, 5, 10**6):
        expected = candidate_pairs(keys, docs, window, np)
        found = candidate_pairs(cupy_like.asarray(keys), cupy_like.asarray(docs), window, cupy_like)
        np.testing.assert_array_equal(cupy_like.asnumpy(found[0]), expected[0])
        np.testing.assert_array_equal(cupy_like.asnumpy(found[1]), expected[1])


@pytest.mark.parametrize("xp", SIDES)
@pytest.mark.parametrize("shingle, ngram, threshold", [("word", 5, 0.8), ("char", 5, 0.7), ("word", 2, 0.5)])
def test_whole_runs_equal_numpy(xp, shingle, ngram, threshold):
    texts = sample_texts(500)
    texts += [text.replace("the", "teh", 2) for text in texts[:60]]  # near duplicates
    corpus = strings_corpus(texts)
    params = DedupParams(threshold=threshold, shingle=shingle, ngram=ngram, batch_bytes=200_000)
    ours = dedup_corpus(corpus, params, kernel_backend(xp))
    reference = dedup_corpus(corpus, params, NumpyBackend())
    assert reference.pair_a.shape[0] > 50  # the comparison has something to compare
    for name in ("pair_a", "pair_b", "jaccard", "keep"):
        np.testing.assert_array_equal(getattr(ours, name), getattr(reference, name))
    np.testing.assert_array_equal(ours.clusters.docs, reference.clusters.docs)
    np.testing.assert_array_equal(ours.clusters.cluster, reference.clusters.cluster)
    assert ours.report["results"] == reference.report["results"]


def test_batch_size_does_not_change_results():
    texts = sample_texts(300) + [text[:-7] for text in sample_texts(80)]
    corpus = strings_corpus(texts)
    runs = [dedup_corpus(corpus, DedupParams(batch_bytes=size, batch_rows=rows), kernel_backend(cupy_like))
            for size, rows in ((1, 10**6), (50_000, 7), (10**9, 10**6))]
    for run in runs[1:]:
        np.testing.assert_array_equal(run.pair_a, runs[0].pair_a)
        np.testing.assert_array_equal(run.pair_b, runs[0].pair_b)
        np.testing.assert_array_equal(run.keep, runs[0].keep)


# Peak memory of one batch on the backend's side, per byte of UTF-8 text and per document, as
# measured here (numpy arrays are traced by tracemalloc): docs/gpu.md's "GPU memory" bound. The
# batch's text itself (1 byte per byte, copied to the device) is included.
BYTES_PER_TEXT_BYTE = 32
BYTES_PER_DOCUMENT = 40  # offsets, counts, doc ids; plus the signature row of 4 * K bytes


@pytest.mark.parametrize("spec", [ShingleSpec("word", 5), ShingleSpec("char", 5), ShingleSpec("char", 1)], ids=str)
def test_batch_memory_is_bounded_by_the_batch(spec):
    backend = kernel_backend(np)
    permutations = draw_permutations(128, seed=0)
    banding = Banding(9, 13, "test")
    texts = sample_texts(120) + EDGE_TEXTS
    data, offsets = text_buffers(texts)
    backend.band_keys(backend.signatures(backend.shingle_hashes(data, offsets, spec), permutations), banding)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        device_data, device_offsets = data.copy(), offsets.copy()  # the host-to-device copy
        shingles = backend.shingle_hashes(device_data, device_offsets, spec)
        keys = backend.band_keys(backend.signatures(shingles, permutations), banding)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    del shingles, keys
    bound = BYTES_PER_TEXT_BYTE * data.shape[0] + (BYTES_PER_DOCUMENT + 4 * 128) * len(texts)
    assert peak <= bound, (peak / data.shape[0], bound)


def test_dedup_api_reports_the_backend(monkeypatch):
    # What a user sees: the report names the backend that ran.
    result = gpudedup.dedup(["a b c d e f", "a b c d e f", "x y z"], backend="cpu")
    assert result.report["backend"].startswith("numpy")
    assert result.report["parameters"]["batch_bytes"] == NumpyBackend.default_batch_bytes


def test_host_kernels_refuse_scalars_of_the_wrong_width():
    # CuPy passes a scalar by its own type: a Python int for an `int` parameter would garble
    # the arguments on a GPU, so the host loader refuses what the GPU would misread.
    kernel = HostKernels().get("band_keys.cu", "band_keys_u32", {})
    signatures, keys = np.zeros((1, 4), np.uint32), np.zeros((1, 1), np.uint64)
    with pytest.raises(TypeError, match="needs int32, got int"):
        kernel((1,), (32,), (signatures, np.int64(1), 4, np.int32(1), np.int32(4), keys))
    with pytest.raises(TypeError, match="needs int64, got int32"):
        kernel((1,), (32,), (signatures, np.int32(1), np.int32(4), np.int32(1), np.int32(4), keys))
    kernel((1,), (32,), (signatures, np.int64(1), np.int32(4), np.int32(1), np.int32(4), keys))


# --- exact verification's sets: backend.shingle_sets --------------------------------------------


def python_sets(batch) -> list[list[int]]:
    """The oracle: each row's hashes as a sorted Python set."""
    hashes, offsets = batch.hashes.tolist(), batch.offsets.tolist()
    return [sorted(set(hashes[offsets[d] : offsets[d + 1]])) for d in range(len(offsets) - 1)]


def rows_of(batch) -> list[list[int]]:
    hashes, offsets = batch.hashes.tolist(), batch.offsets.tolist()
    return [hashes[offsets[d] : offsets[d + 1]] for d in range(len(offsets) - 1)]


@pytest.mark.parametrize("xp", SIDES)
@pytest.mark.parametrize("spec", [ShingleSpec("word", 1), ShingleSpec("word", 5), ShingleSpec("char", 5)], ids=str)
def test_shingle_sets_equal_numpy_and_python_sets(xp, spec):
    texts = EDGE_TEXTS + random_texts(np.random.default_rng(11), 200) + sample_texts(60)
    texts += ["to be or not to be " * 50, "aaaa aaaa aaaa aaaa aaaa aaaa"]  # many repeated shingles
    data, offsets = text_buffers(texts)
    ours = kernel_backend(xp).shingle_sets(data, offsets, spec)
    reference = NumpyBackend().shingle_sets(data, offsets, spec)
    assert isinstance(ours.hashes, np.ndarray) and isinstance(ours.offsets, np.ndarray)  # on the host
    assert ours.hashes.dtype == np.uint64 and ours.offsets.dtype == np.int64
    np.testing.assert_array_equal(ours.offsets, reference.offsets)
    np.testing.assert_array_equal(ours.hashes, reference.hashes)
    assert rows_of(ours) == python_sets(NumpyBackend().shingle_hashes(data, offsets, spec))


@pytest.mark.parametrize("xp", SIDES)
def test_sorted_unique_rows_against_python_sets(xp, batch_from_rows):
    rng = np.random.default_rng(4)
    rows = [[], [], rng.integers(0, 5, 40, dtype=np.uint64), [], [2**64 - 1, 0, 2**64 - 1, 0],
            rng.integers(0, 2**64, 300, dtype=np.uint64), rng.integers(0, 3, 1, dtype=np.uint64), []]
    batch = batch_from_rows(rows)
    sets = sorted_unique_rows(ShingleBatch(xp.asarray(batch.offsets), xp.asarray(batch.hashes)), xp)
    found = ShingleBatch(KernelBackend.to_host(None, sets.offsets), KernelBackend.to_host(None, sets.hashes))
    assert rows_of(found) == python_sets(batch)
    empty = sorted_unique_rows(ShingleBatch(xp.asarray(np.zeros(4, np.int64)), xp.asarray(np.zeros(0, np.uint64))), xp)
    assert KernelBackend.to_host(None, empty.offsets).tolist() == [0, 0, 0, 0]


def test_set_columns_takes_sets_as_they_are_and_sorts_the_rest(batch_from_rows):
    rows = [[5, 3, 5, 1], [], [2**63, 7], [9]]
    batch = batch_from_rows(rows)
    assert not rows_are_sets(batch)
    canonical = unique_per_row(batch)
    assert rows_are_sets(canonical) and rows_of(canonical) == python_sets(batch)
    for given in (batch, canonical):
        columns, counts = set_columns(given)
        assert counts.tolist() == [3, 0, 2, 1]
        np.testing.assert_array_equal(columns, hashes_to_columns(canonical.hashes))
    # A row may start below the previous row's end; a repeat or a fall inside a row is no set.
    assert rows_are_sets(batch_from_rows([[1, 9], [2, 3], [], [0]]))
    assert not rows_are_sets(batch_from_rows([[1, 9], [2, 2]]))
    assert not rows_are_sets(batch_from_rows([[1, 9], [3, 2]]))


@pytest.mark.parametrize("xp", SIDES)
@pytest.mark.parametrize("spec", [ShingleSpec("word", 5), ShingleSpec("char", 5)], ids=str)
def test_verification_of_the_sample_corpus_is_unchanged(xp, spec):
    """On the shipped sample: the sparse sets made from the backend's shingle_sets (the GPU
    backend sorting on its side) are exactly those made from shingle_hashes (set_rows sorting
    on the host), and so are the Jaccard values of pairs of similar documents."""
    texts = sample_texts()
    texts += [text.replace("the", "teh", 2) for text in texts[:80]]
    lengths = np.array([len(text) for text in texts], dtype=np.int64)
    docs = np.arange(len(texts), dtype=np.int64)
    backend = kernel_backend(xp)

    def by_sets(subset):
        return backend.shingle_sets(*text_buffers([texts[d] for d in subset]), spec)

    def by_hashes(subset):
        batch = NumpyBackend().shingle_hashes(*text_buffers([texts[d] for d in subset]), spec)
        assert not rows_are_sets(batch) or batch.hashes.shape[0] < 2  # the host sorts these
        return batch

    ours = document_sets(by_sets, docs, lengths, batch_cost=50_000)
    before = document_sets(by_hashes, docs, lengths, batch_cost=50_000)
    np.testing.assert_array_equal(ours.indptr, before.indptr)
    np.testing.assert_array_equal(ours.indices, before.indices)
    count = len(texts) - 80
    first = np.concatenate([np.arange(80), np.arange(0, count - 1)]).astype(np.int64)
    second = np.concatenate([np.arange(count, len(texts)), np.arange(1, count)]).astype(np.int64)
    keep = (np.diff(ours.indptr)[first] > 0) & (np.diff(ours.indptr)[second] > 0)
    jaccard = pair_jaccard(ours, first[keep], second[keep])
    np.testing.assert_array_equal(jaccard, pair_jaccard(before, first[keep], second[keep]))
    assert (jaccard > 0.5).sum() >= 60  # the near copies are there to compare
