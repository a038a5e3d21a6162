"""Determinism: the same input and parameters give byte-identical result files across runs,
batch sizes and backends (the GPU backend's code runs here on the host; tests/test_gpu.py
compares the real GPU's results with exact equality).

report.json and report.html are not compared byte for byte: they record timings and memory.
Everything else they hold is compared through the result tables and the report's results.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

import gpudedup
from gpudedup.api import corpus_result
from gpudedup.io.python_inputs import to_corpus
from gpudedup.params import DedupParams
from gpudedup.pipeline.memory import dedup_corpus
from output_support import result_bytes

@pytest.fixture(scope="module")
def sample() -> Path:
    with resources.as_file(resources.files("gpudedup").joinpath("data/bible_sample.jsonl.gz")) as path:
        yield Path(path)


def written(result, where: Path, format: str = "parquet") -> dict[str, bytes]:
    result.write(where, format=format)
    return result_bytes(where)


@pytest.mark.parametrize("shingle", ["word", "char"])
def test_same_run_twice_gives_identical_files(sample, tmp_path, shingle):
    first = written(gpudedup.dedup(sample, id_field="id", shingle=shingle, backend="cpu"), tmp_path / "a")
    second = written(gpudedup.dedup(sample, id_field="id", shingle=shingle, backend="cpu"), tmp_path / "b")
    assert first == second


def test_jsonl_output_is_deterministic(sample, tmp_path):
    runs = [written(gpudedup.dedup(sample, id_field="id", backend="cpu"), tmp_path / name, "jsonl") for name in "ab"]
    assert runs[0] == runs[1]


def test_batch_sizes_give_identical_files(sample, tmp_path):
    runs = []
    for batch_bytes, batch_rows in ((None, 1 << 20), (4096, 1 << 20), (100_000, 7), (1 << 30, 1 << 20)):
        result = gpudedup.dedup(sample, id_field="id", backend="cpu", batch_bytes=batch_bytes, batch_rows=batch_rows)
        runs.append(written(result, tmp_path / f"run-{batch_bytes}-{batch_rows}"))
    assert all(run == runs[0] for run in runs[1:])


def test_backends_give_identical_files(sample, tmp_path):
    # Imported here: the kernel backend's host run needs CuPy's API (cupy_like), the tests
    # above need nothing but numpy and must run where CuPy is not installed.
    from cupy_like import cupy_like
    from test_kernel_backend import kernel_backend

    corpus, restore = to_corpus(Path(sample), "text", "id")
    params = DedupParams(batch_bytes=300_000)
    files = []
    for name, backend in (("numpy", gpudedup.backends.get_backend("cpu")), ("kernels", kernel_backend(cupy_like))):
        result = corpus_result(corpus, dedup_corpus(corpus, params, backend), restore, "id")
        files.append(written(result, tmp_path / name))
    assert files[0] == files[1]
