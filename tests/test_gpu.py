"""The GPU backend on a real GPU, compared with exact equality with the numpy backend.

Marked ``gpu``: skipped (by conftest.py) only where no CUDA device and CuPy are present. The
same comparisons run on the host in tests/test_kernel_backend.py, with the kernels compiled by
g++; here CuPy, NVRTC and the device run them.
"""

from __future__ import annotations

import numpy as np
import pytest

import gpudedup
from gpudedup.io.python_inputs import strings_corpus
from gpudedup.backends import get_backend
from gpudedup.backends.numpy_backend import NumpyBackend
from gpudedup.core.hashing import draw_permutations
from gpudedup.core.lsh import Banding, candidate_pairs
from gpudedup.core.normalize import text_buffers
from gpudedup.params import DedupParams
from gpudedup.pipeline.memory import dedup_corpus
from gpudedup.core.shingling import ShingleSpec
from test_streaming import write_shards

from backend_runs import THRESHOLD, assert_same_outputs, index_add_outputs, mode_records
from test_kernel_backend import (BYTES_PER_DOCUMENT, BYTES_PER_TEXT_BYTE, EDGE_TEXTS, random_texts,
                                 sample_texts)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu():
    return get_backend("gpu")


TEXT_SPECS = [ShingleSpec("word", 1), ShingleSpec("word", 5), ShingleSpec("char", 1), ShingleSpec("char", 5),
              ShingleSpec("char", 9), ShingleSpec("word", 5, "nfkc", True, True), ShingleSpec("char", 5, "nfc")]


@pytest.mark.parametrize("spec", TEXT_SPECS, ids=str)
def test_shingle_hashes_and_sets_equal_numpy(gpu, spec):
    texts = EDGE_TEXTS + random_texts(np.random.default_rng(7), 300) + sample_texts(200)
    data, offsets = text_buffers(texts)
    reference = NumpyBackend()
    for method in ("shingle_hashes", "shingle_sets"):
        ours = getattr(gpu, method)(data, offsets, spec)
        expected = getattr(reference, method)(data, offsets, spec)
        np.testing.assert_array_equal(gpu.to_host(ours.offsets), expected.offsets)
        np.testing.assert_array_equal(gpu.to_host(ours.hashes), expected.hashes)


def test_token_shingles_equal_numpy(gpu):
    rng = np.random.default_rng(11)
    lists = [rng.integers(0, 2**32, size=int(n), dtype=np.uint64).astype(np.uint32) for n in rng.integers(0, 400, 300)]
    ids = np.concatenate(lists)
    offsets = np.concatenate([[0], np.cumsum([len(x) for x in lists])]).astype(np.int64)
    reference = NumpyBackend()
    for spec in (ShingleSpec("token", 1), ShingleSpec("token", 5)):
        for method in ("shingle_hashes", "shingle_sets"):
            ours = getattr(gpu, method)(ids, offsets, spec)
            expected = getattr(reference, method)(ids, offsets, spec)
            np.testing.assert_array_equal(gpu.to_host(ours.offsets), expected.offsets)
            np.testing.assert_array_equal(gpu.to_host(ours.hashes), expected.hashes)


@pytest.mark.parametrize("num_perm", [1, 63, 64, 117, 128, 129, 256, 300])
def test_signatures_and_band_keys_equal_numpy(gpu, num_perm):
    data, offsets = text_buffers(EDGE_TEXTS + sample_texts(300))
    spec, permutations = ShingleSpec("word", 3), draw_permutations(num_perm, seed=num_perm)
    reference = NumpyBackend()
    signatures = gpu.signatures(gpu.shingle_hashes(data, offsets, spec), permutations)
    expected = reference.signatures(reference.shingle_hashes(data, offsets, spec), permutations)
    np.testing.assert_array_equal(gpu.to_host(signatures), expected)
    for rows in sorted({1, num_perm // 3 or 1, num_perm}):
        banding = Banding(num_perm // rows, rows, "test")
        np.testing.assert_array_equal(gpu.to_host(gpu.band_keys(signatures, banding)),
                                      reference.band_keys(expected, banding))


def test_candidate_pairs_on_the_device_equal_numpy(gpu):
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 40, size=(30000, 6)).astype(np.uint64)
    docs = np.sort(rng.choice(10**7, size=30000, replace=False)).astype(np.int64)
    for window in (1, 5, 10**6):
        expected = candidate_pairs(keys, docs, window, np)
        found = candidate_pairs(keys, docs, window, gpu.xp)
        np.testing.assert_array_equal(gpu.to_host(found[0]), expected[0])
        np.testing.assert_array_equal(gpu.to_host(found[1]), expected[1])


@pytest.mark.parametrize("shingle, ngram, threshold", [("word", 5, 0.8), ("char", 5, 0.7), ("word", 2, 0.5)])
def test_whole_runs_equal_numpy(gpu, shingle, ngram, threshold):
    texts = sample_texts()
    texts += [text.replace("the", "teh", 2) for text in texts[:300]]
    corpus = strings_corpus(texts)
    for batch_bytes in (None, 300_000):  # one batch; many batches on two streams
        params = DedupParams(threshold=threshold, shingle=shingle, ngram=ngram, batch_bytes=batch_bytes)
        ours = dedup_corpus(corpus, params, gpu)
        reference = dedup_corpus(corpus, params, NumpyBackend())
        assert reference.pair_a.shape[0] > 100
        for name in ("pair_a", "pair_b", "jaccard", "keep"):
            np.testing.assert_array_equal(getattr(ours, name), getattr(reference, name))
        np.testing.assert_array_equal(ours.clusters.cluster, reference.clusters.cluster)
        assert ours.report["results"] == reference.report["results"]


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return write_shards(tmp_path_factory.mktemp("files") / "in", mode_records(), 3)


def test_a_run_with_a_work_directory_equals_numpy(gpu, shards, tmp_path):
    """Over files with a work directory: Dask's local scheduler, each shard signed on the
    device in this process, its spills read back by the stages."""
    ours = gpudedup.dedup(shards, backend="gpu", threshold=THRESHOLD, id_field="id", work_dir=tmp_path / "work",
                          batch_bytes=60_000)
    reference = gpudedup.dedup(shards, backend="cpu", threshold=THRESHOLD, id_field="id")
    assert_same_outputs(ours, reference, tmp_path, "cupy")


def test_index_adds_equal_numpy(gpu, shards, tmp_path):
    index_add_outputs(shards, tmp_path, "cupy")


def test_auto_picks_the_gpu_and_the_report_says_so():
    result = gpudedup.dedup(["a b c d e f", "a b c d e f", "x y z"], backend="auto")
    assert result.report["backend"].startswith("cupy")
    assert result.keep.tolist() == [True, False, True]


def test_batch_memory_on_the_device_is_bounded_by_the_batch(gpu):
    """The device memory a batch holds live at once, against the bound measured on the host
    (test_kernel_backend.test_batch_memory_is_bounded_by_the_batch). Live bytes are counted by a
    CuPy memory hook over every allocation and free of the pool; the pool's own footprint is
    larger, since it keeps freed blocks of sizes a later request may not fit (docs/gpu.md)."""
    import cupy

    class LivePeak(cupy.cuda.MemoryHook):
        name = "live_peak"

        def __init__(self):
            self.sizes: dict[int, int] = {}
            self.now = self.peak = 0

        def malloc_postprocess(self, **allocation):
            self.sizes[allocation["mem_ptr"]] = allocation["mem_size"]
            self.now += allocation["mem_size"]
            self.peak = max(self.peak, self.now)

        def free_postprocess(self, **allocation):
            self.now -= self.sizes.pop(allocation["mem_ptr"], 0)

    spec, permutations, banding = ShingleSpec("char", 5), draw_permutations(128, seed=0), Banding(9, 13, "test")
    data, offsets = text_buffers(sample_texts(600))

    def one_batch():
        with gpu.batch_scope():
            keys = gpu.band_keys(gpu.signatures(gpu.shingle_hashes(data, offsets, spec), permutations), banding)
            gpu.synchronize()
        return keys

    one_batch()  # tables and permutations are made once and stay
    hook = LivePeak()
    with hook:
        keys = one_batch()
    del keys
    bound = BYTES_PER_TEXT_BYTE * data.shape[0] + (BYTES_PER_DOCUMENT + 4 * 128) * (offsets.shape[0] - 1)
    print(f"device live peak {hook.peak / data.shape[0]:.1f} bytes per text byte")
    assert 0 < hook.peak <= bound
