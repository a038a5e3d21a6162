"""Smoke test of scripts/bench_gpu.py on the host: its measuring function runs the GPU backend's
code (the CUDA kernels compiled by g++, tests/kernel_host) against the plain array reference
(numpy, and numpy seen through CuPy's API), finds identical outputs and positive timings; it
refuses a speed-up when outputs differ; the references get the same shingles as ours.

The GPU-only parts (CUDA events, device properties, datasketch's gpu_mode, cuDF) need a GPU and
are not exercised here.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from gpudedup.backends.kernel_backend import KernelBackend
from gpudedup.hashing import draw_permutations, poly_hash64_scalar
from gpudedup.minhash import minhash_signatures
from gpudedup.normalize import text_buffers
from gpudedup.shingling import ShingleSpec, utf8_shingle_hashes

from cupy_like import cupy_like
from kernel_host.host_kernels import HostKernels
from test_kernel_backend import EDGE_TEXTS, sample_texts

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_gpu.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def host_backend() -> KernelBackend:
    return KernelBackend(np, HostKernels(), description="kernels on the host shim")


def texts() -> list[str]:
    return sample_texts(50) + EDGE_TEXTS


@pytest.mark.parametrize("xp", [pytest.param(np, id="numpy"), pytest.param(cupy_like, id="cupy_like")])
@pytest.mark.parametrize("spec", [ShingleSpec("word", 5), ShingleSpec("char", 5)], ids=str)
def test_measure_on_the_host(bench, xp, spec):
    # A small batch size gives several batches, and a small chunk several permutation chunks
    # and document groups in the plain reference.
    result = bench.measure(texts(), spec, 64, host_backend(), xp, bench.HostClock(), repeats=2,
                           batch_bytes=40_000, temporary_bytes=1 << 16)
    assert result["all_equal"], result["equal"]
    assert set(result["equal"]) >= {"shingle_hashes", "signatures", "band_keys"}
    assert result["batches"] > 1 and result["documents"] == len(texts())
    assert result["text_bytes"] == int(text_buffers(texts())[1][-1])
    assert result["shingles"] > 0 and result["updates"] == result["shingles"] * 64
    for side in ("ours", "plain"):
        for stage in ("shingle_hashes", "signatures", "band_keys", "strings_to_signatures"):
            assert result[side][stage] > 0, (side, stage)
            assert len(result[side + "_samples"][stage]) == 2
    assert result["ours"]["signature_kernel"] > 0

    results = {"stages": result, "labels": {"xp": "numpy"}}
    ratios = bench.ratios(results)
    assert ratios["strings_to_signatures_speedup"] > 0 and ratios["signature_kernel_updates_per_s"] > 0
    report = bench.format_report({**results, "ratios": ratios, "environment": {}, "corpus": "sample",
                                  "labels": {"xp": "numpy", "ours": "host", "clock": "host"}})
    assert "strings -> signatures" in report and "DIFFERENT" not in report


def test_no_speedup_when_outputs_differ(bench, monkeypatch):
    original = bench.plain_signatures

    def off_by_one(*args, **kwargs):
        signatures = original(*args, **kwargs)
        signatures[0, 0] += np.uint32(1)
        return signatures

    monkeypatch.setattr(bench, "plain_signatures", off_by_one)
    result = bench.measure(sample_texts(20), ShingleSpec("word", 5), 32, host_backend(), np, bench.HostClock(),
                           repeats=1)
    assert not result["all_equal"] and not result["equal"]["signatures"]
    results = {"stages": result, "labels": {"xp": "numpy"}}
    ratios = bench.ratios(results)
    assert ratios["strings_to_signatures_speedup"] is None and "refused" in ratios
    report = bench.format_report({**results, "ratios": ratios, "environment": {}, "corpus": "sample",
                                  "labels": {"xp": "numpy", "ours": "host", "clock": "host"}})
    assert "REFUSED" in report and "DIFFERENT" in report


def test_plain_signatures_equal_numpy_backend(bench, batch_from_rows):
    rng = np.random.default_rng(5)
    rows = [[], rng.integers(0, 2**64, 1, dtype=np.uint64), [], rng.integers(0, 2**64, 300, dtype=np.uint64),
            rng.integers(0, 2**64, 7, dtype=np.uint64), []]
    shingles, permutations = batch_from_rows(rows), draw_permutations(37, seed=3)
    expected = minhash_signatures(shingles, permutations)
    for temporary_bytes in (4, 1 << 10, 1 << 20):  # one permutation at a time, up to all at once
        np.testing.assert_array_equal(bench.plain_signatures(shingles, permutations, np, temporary_bytes), expected)


@pytest.mark.parametrize("spec", [ShingleSpec("word", 5), ShingleSpec("char", 5), ShingleSpec("word", 1)], ids=str)
def test_reference_shingle_strings_are_ours(bench, spec):
    # datasketch and cuDF are handed normalised texts and shingle strings: hashed with our
    # family they must give exactly our shingle hashes, in order (the same shingles).
    docs = sample_texts(6) + EDGE_TEXTS
    ours = utf8_shingle_hashes(*text_buffers(docs), spec)
    for d, text in enumerate(bench.normalized_strings(docs)):
        strings = bench.shingle_strings(text, spec)
        hashes = [poly_hash64_scalar(ord(c) for c in s) for s in strings]
        assert hashes == ours.hashes[ours.offsets[d] : ours.offsets[d + 1]].tolist(), d


def test_int32_limit(bench):
    limit, basis = bench.int32_update_limit(10, 1_000_000, (8, 0))
    assert limit == 10 * 1e9 * bench.INT32_OPS_PER_SM_CLOCK / bench.OPS_PER_UPDATE and "assumed" in basis
    assert bench.int32_update_limit(10, 1_000_000, (12, 0))[0] is None  # outside the assumed table
    assert bench.int32_update_limit(10, 1_000_000, (12, 0), ops_per_sm_clock=128)[0] == 10 * 1e9 * 128 / 2


def test_sample_rows(bench):
    assert bench.sample_rows(10, 0).tolist() == list(range(10))
    rows = bench.sample_rows(1000, 7)
    assert rows[0] == 0 and rows[-1] == 999 and len(rows) == 7
