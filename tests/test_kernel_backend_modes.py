"""The GPU backend's code on the host in every mode of the public API, byte for byte against numpy.

``backend="gpu"`` is the kernel backend with the kernels compiled for the host, ``cupy_like``
device arrays and stand-in streams (kernel_host/host_backend.py, set through
gpudedup.backends.set_gpu_stand_in): a run in memory, a staged run (``work_dir``), a Dask run
whose worker processes make the same backend (a preload), an ``evaluate`` grid, and the text
already on the device as cuDF leaves it. Each writes the same pairs, clusters and kept rows as
the numpy backend; the stream pool of the batch scopes lends each batch a stream of its own and
keeps no more streams than batches were in flight.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest

import gpudedup
from gpudedup.api import strings_corpus
from gpudedup.backends import get_backend
from gpudedup.backends.numpy_backend import NumpyBackend
from gpudedup.engine.memory import dedup_corpus
from gpudedup.evaluate import Setting, evaluate
from gpudedup.normalize import text_buffers
from gpudedup.params import DedupParams

from cupy_like import cupy_like
from kernel_host import host_backend
from kernel_host.host_backend import StandInStream, gpu_stand_in, host_gpu_backend
from kernel_host.host_kernels import GXX
from test_streaming import sample_records, write_shards

pytestmark = pytest.mark.skipif(GXX is None, reason="g++ is not installed: the host kernels are built with g++")

OUTPUTS = ("pairs.parquet", "clusters.parquet", "deduplicated.parquet")


@pytest.fixture(autouse=True)
def stand_in():
    with gpu_stand_in():
        yield


@pytest.fixture(scope="module")
def records() -> list[dict]:
    records = sample_records()[:360]
    records += [{**r, "id": f"{r['id']}-near", "text": r["text"].replace("the", "teh", 1)} for r in records[:40]]
    records[100]["text"] = records[7]["text"]  # an identical copy
    return records


@pytest.fixture(scope="module")
def shards(records, tmp_path_factory) -> Path:
    return write_shards(tmp_path_factory.mktemp("modes") / "in", records, 3)


def assert_same_outputs(ours: gpudedup.DedupResult, reference: gpudedup.DedupResult, root: Path) -> None:
    """The written pairs, clusters and kept rows are the same bytes; and something was found."""
    assert ours.report["backend"].startswith("kernel backend on the host")
    assert reference.report["backend"].startswith("numpy")
    assert reference.pairs.num_rows > 20
    ours.write(root / "ours")
    reference.write(root / "reference")
    for name in OUTPUTS:
        assert (root / "ours" / name).read_bytes() == (root / "reference" / name).read_bytes(), name
    assert ours.report["results"] == reference.report["results"]


def test_the_stand_in_is_what_gpu_names():
    backend = get_backend("gpu")
    assert backend.xp is cupy_like and backend.description.startswith("kernel backend on the host")
    assert get_backend("cpu").xp is np


def test_in_memory_run(records, tmp_path):
    texts = [r["text"] for r in records]
    assert_same_outputs(gpudedup.dedup(texts, backend="gpu", threshold=0.7, batch_bytes=60_000),
                        gpudedup.dedup(texts, backend="cpu", threshold=0.7), tmp_path)


def test_staged_run(shards, tmp_path):
    ours = gpudedup.dedup(shards, backend="gpu", threshold=0.7, id_field="id", work_dir=tmp_path / "work",
                          batch_bytes=60_000)
    assert_same_outputs(ours, gpudedup.dedup(shards, backend="cpu", threshold=0.7, id_field="id"), tmp_path)
    assert len(list((tmp_path / "work" / "shards").iterdir())) == 3


def test_dask_run(shards, tmp_path, monkeypatch):
    distributed = pytest.importorskip("distributed", reason="Dask is not installed (pip install 'gpudedup[dask]')")
    # The workers are processes of their own: the preload sets the stand-in in each, and
    # PYTHONPATH lets them import the tests' modules (cupy_like, kernel_host).
    tests = str(Path(__file__).resolve().parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")])))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  preload=[host_backend.__file__]) as cluster, distributed.Client(cluster) as client:
        descriptions = client.run(lambda: get_backend("gpu").description)
        assert len(descriptions) == 2
        assert all(d.startswith("kernel backend on the host") for d in descriptions.values())
        ours = gpudedup.dedup(shards, backend="gpu", threshold=0.7, id_field="id", client=client,
                              work_dir=tmp_path / "work", batch_bytes=60_000)
    assert ours.report["dask"]["workers"] == 2
    assert_same_outputs(ours, gpudedup.dedup(shards, backend="cpu", threshold=0.7, id_field="id"), tmp_path)


def test_evaluate_grid(records):
    corpus = strings_corpus([r["text"] for r in records])
    settings = [Setting(64, 8, 8, "word", 5, 0.7), Setting(128, None, None, "char", 5, 0.8),
                Setting(96, 32, 3, "word", 3, 0.5)]
    ours = evaluate(corpus, settings, backend="gpu", batch_bytes=80_000, warmup=False)
    reference = evaluate(corpus, settings, backend="cpu", warmup=False)
    timings = ("seconds", "peak_rss_mb", "stage_seconds", "stage_peak_rss_mb", "busy_seconds")

    def scores(result):
        return {k: v for k, v in dataclasses.asdict(result).items() if k not in timings}

    assert [scores(r) for r in ours.results] == [scores(r) for r in reference.results]
    assert sum(r.verified_pairs for r in reference.results) > 20


def test_text_already_on_the_device(records):
    """cuDF leaves the text's bytes on the device and its offsets on the host
    (io/cudf_reader.concat_device_utf8); the batches are cut from the device bytes."""
    texts = [r["text"] for r in records]
    corpus = strings_corpus(texts)
    data, offsets = text_buffers(texts)
    corpus.device_text = (cupy_like.asarray(data), offsets)
    params = DedupParams(threshold=0.7, batch_bytes=50_000)
    ours = dedup_corpus(corpus, params, host_gpu_backend())
    reference = dedup_corpus(strings_corpus(texts), params, NumpyBackend())
    assert reference.pair_a.shape[0] > 20
    for name in ("pair_a", "pair_b", "jaccard", "keep"):
        np.testing.assert_array_equal(getattr(ours, name), getattr(reference, name))
    np.testing.assert_array_equal(ours.clusters.cluster, reference.clusters.cluster)
    assert ours.report["results"] == reference.report["results"]


def test_the_stream_pool_lends_each_batch_its_own_stream(records):
    """Many batches on parallel_batches threads, over three runs on one backend: every batch
    ran in a scope holding a stream no other scope held at once (StandInStream refuses that),
    and the backend made no more streams than batches in flight at once."""
    backend = host_gpu_backend()
    corpus = strings_corpus([r["text"] for r in records])
    params = DedupParams(threshold=0.7, batch_bytes=8_000)
    reference = dedup_corpus(corpus, params, NumpyBackend())
    created = StandInStream.created
    for _ in range(3):
        outcome = dedup_corpus(corpus, params, backend)
        np.testing.assert_array_equal(outcome.keep, reference.keep)
        np.testing.assert_array_equal(outcome.pair_a, reference.pair_a)
    made = StandInStream.created - created
    assert 1 <= made <= backend.parallel_batches
    assert len(backend._idle_streams) == made  # every stream came back to the pool
    assert sum(stream.scopes for stream in backend._idle_streams) >= 3 * 10  # many batches each run
