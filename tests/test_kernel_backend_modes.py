"""The GPU backend's code on the host in every mode of the public API, byte for byte against numpy.

``backend="gpu"`` is the kernel backend with the kernels compiled for the host, ``cupy_like``
device arrays and stand-in streams (kernel_host/host_backend.py, set through
gpudedup.backends.set_gpu_stand_in): a run in memory, a staged run (``work_dir``), a Dask run
whose worker processes make the same backend (a preload), an ``evaluate`` grid, and the text
already on the device as cuDF leaves it. Each writes the same pairs, clusters and kept rows as
the numpy backend; the stream pool of the batch scopes lends each batch a stream of its own and
keeps no more streams than batches were in flight.

The stand-in streams hold the backend to CUDA's ordering rules (cupy_like.Stream), so the
stream tests below prove on the host that each batch scope hands its work off before its arrays
are used elsewhere, that host-to-device copies go through a reused pinned staging buffer that
is never rewritten before its copy completed, and that the permutation cache frees nothing a
scope still reads.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest

import gpudedup
from gpudedup.io.python_inputs import strings_corpus
from gpudedup.backends import get_backend
from gpudedup.backends.numpy_backend import NumpyBackend
from gpudedup.pipeline.memory import dedup_corpus
from gpudedup.evaluate import Setting, evaluate
from gpudedup.core.normalize import text_buffers
from gpudedup.params import DedupParams
from gpudedup.core.shingling import ShingleSpec

from cupy_like import cupy_like
from kernel_host import host_backend
from kernel_host.host_backend import StandInStream, gpu_stand_in, host_gpu_backend
from kernel_host.host_kernels import GXX
from backend_runs import assert_same_outputs as assert_same_as_numpy, index_add_outputs, mode_records
from test_streaming import sample_records, write_shards

pytestmark = pytest.mark.skipif(GXX is None, reason="g++ is not installed: the host kernels are built with g++")



@pytest.fixture(autouse=True)
def stand_in():
    with gpu_stand_in():
        yield


@pytest.fixture(scope="module")
def records() -> list[dict]:
    return mode_records()


@pytest.fixture(scope="module")
def shards(records, tmp_path_factory) -> Path:
    return write_shards(tmp_path_factory.mktemp("modes") / "in", records, 3)


def assert_same_outputs(ours: gpudedup.DedupResult, reference: gpudedup.DedupResult, root: Path) -> None:
    assert_same_as_numpy(ours, reference, root, "kernel backend on the host")


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


def test_index_adds(shards, tmp_path):
    index_add_outputs(shards, tmp_path, "kernel backend on the host")


def test_dask_run(shards, tmp_path, monkeypatch):
    distributed = pytest.importorskip("distributed", reason="Dask is not installed (pip install 'gpudedup[dask]')")
    # The workers are processes of their own: the preload sets the stand-in in each, and
    # PYTHONPATH lets them import the tests' modules (cupy_like, kernel_host).
    tests = str(Path(__file__).resolve().parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")])))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
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
    assert len(backend._idle_lanes) == made  # every stream came back to the pool
    assert sum(lane.stream.scopes for lane in backend._idle_lanes) >= 3 * 10  # many batches each run


# --- stream ordering, staging copies and the permutation cache (cupy_like's stream rules) --------


def scopes_of(log: list, stream_name: str) -> list[list[tuple[int, str, str]]]:
    """The stream's batch scopes in a recorded log: per scope, its (position, operation,
    detail) entries from "enter" to "exit"."""
    scopes, current = [], None
    for position, (name, operation, detail) in enumerate(log):
        if name != stream_name:
            continue
        if operation == "enter":
            current = []
        if current is not None:
            current.append((position, operation, detail))
        if operation == "exit":
            scopes.append(current)
            current = None
    return scopes


def assert_handed_off_before_exit(scope: list[tuple[int, str, str]]) -> int:
    """A scope's last launch is followed by a host wait for its stream before the scope exits;
    returns the position of its exit."""
    operations = [operation for _, operation, _ in scope]
    assert operations[0] == "enter" and operations[-1] == "exit"
    last_launch = max(i for i, operation in enumerate(operations) if operation == "launch")
    assert "synchronize" in operations[last_launch:], operations
    return scope[-1][0]


def test_batch_scopes_hand_off_before_their_arrays_are_used_elsewhere(records):
    """Two threads run batches in scopes of their own, and nothing in a scope copies to the host
    (the keys stay on the device); the main thread then concatenates the keys on its own
    stream. Every scope's stream first waits for the caller's stream, then queues its copies
    and kernels with no host wait between them, and is waited for by the host before the
    scope ends: before the main thread uses its arrays."""
    from cupy_like import get_current_stream, recording

    from gpudedup.pipeline.signatures import text_batches
    from gpudedup.threads import map_parallel
    from gpudedup.core.hashing import draw_permutations
    from gpudedup.core.lsh import Banding

    backend = host_gpu_backend()
    data, offsets = text_buffers([r["text"] for r in records])
    spec, permutations, banding = ShingleSpec("word", 5), draw_permutations(64, seed=1), Banding(8, 8, "test")
    batches = list(text_batches(offsets, 40_000, 10**6))
    assert len(batches) > 4

    def one_batch(rows):
        start, stop = rows
        with backend.batch_scope():
            first, last = offsets[start], offsets[stop]
            shingles = backend.shingle_hashes(data[first:last], offsets[start : stop + 1] - first, spec)
            return backend.band_keys(backend.signatures(shingles, permutations), banding)

    with recording() as log:
        keys = list(map_parallel(one_batch, batches, backend.parallel_batches))
        get_current_stream().log_operation("consume", "concatenate")
        keys = cupy_like.concatenate(keys)
    reference = NumpyBackend()
    expected = reference.band_keys(reference.signatures(reference.shingle_hashes(data, offsets, spec), permutations),
                                   banding)
    np.testing.assert_array_equal(keys.get(), expected)

    consumed = next(i for i, (_, operation, _) in enumerate(log) if operation == "consume")
    streams = {name for name, operation, _ in log if operation == "enter"}
    assert 1 <= len(streams) <= backend.parallel_batches
    scopes = [scope for name in streams for scope in scopes_of(log, name)]
    assert len(scopes) == len(batches)
    for scope in scopes:
        assert assert_handed_off_before_exit(scope) < consumed
        operations = [operation for _, operation, _ in scope]
        # The entry hand-off: the scope's stream waited for the caller's (null) stream first.
        entry = scope[0][0] - 1
        assert log[entry][1] == "wait" and log[entry][2].startswith("null") and log[entry][0] == log[scope[0][0]][0]
        # The copy is asynchronous and the host does not wait for it before the kernels.
        first_launch = operations.index("launch")
        assert "async copy" in operations[:first_launch]
        assert not {"synchronize", "event synchronize"} & set(operations[:first_launch])


def test_a_scope_that_leaves_work_unwaited_is_refused():
    # The stand-in stream's own check, which every stand-in run above passes through.
    stream = StandInStream()
    with pytest.raises(RuntimeError, match="neither the host nor another stream waited"):
        with stream:
            stream.log_operation("launch", "some_kernel")
    with stream:  # a hand-off, and the scope may end
        stream.log_operation("launch", "some_kernel")
        stream.synchronize()


def staged_batches(count: int):
    """``count`` different batches of about the same size (host UTF-8 buffers)."""
    texts = [r["text"] for r in sample_records()[: 40 * count]]
    return [text_buffers(texts[40 * i : 40 * (i + 1)]) for i in range(count)]


def test_host_to_device_copies_go_through_one_reused_pinned_buffer():
    """Many batches in one scope (as the benchmark runs them): each batch's bytes arrive (its
    hashes are numpy's), every copy is asynchronous from pinned memory with no asarray copy of
    the text, and the lane's staging buffer is allocated once and reused: the wait for the
    previous copies' event comes before each rewrite (else cupy_like's stream would raise)."""
    from cupy_like import PinnedMemory, recording

    backend, reference = host_gpu_backend(), NumpyBackend()
    spec = ShingleSpec("char", 5)
    batches = staged_batches(6)
    allocations = PinnedMemory.allocations
    with recording() as log, backend.batch_scope():
        for data, offsets in batches:
            ours = backend.shingle_hashes(data, offsets, spec)
            expected = reference.shingle_hashes(data, offsets, spec)
            np.testing.assert_array_equal(ours.hashes.get(), expected.hashes)
            np.testing.assert_array_equal(ours.offsets.get(), expected.offsets)
    assert PinnedMemory.allocations - allocations == 1
    copies = [detail for _, operation, detail in log if "copy" in operation]
    text_copies = [f"{data.nbytes} bytes pinned" for data, _ in batches]
    assert [c for c in copies if c in text_copies] == text_copies
    assert not any(operation == "asarray copy" and detail in {f"{d.nbytes} bytes" for d, _ in batches}
                   for _, operation, detail in log)
    assert sum(operation == "event synchronize" for _, operation, _ in log) == len(batches) - 1


def test_a_staging_buffer_rewritten_before_its_copy_completed_is_caught(monkeypatch):
    # Without the wait for the previous copies' event, the next batch overwrites the pinned
    # buffer while (on a GPU) its copy may still be reading it: the stand-in catches that at
    # the scope's hand-off.
    from cupy_like import Event

    monkeypatch.setattr(Event, "synchronize", lambda self: None)
    backend = host_gpu_backend()
    with pytest.raises(RuntimeError, match="changed before the host waited"):
        with backend.batch_scope():
            for data, offsets in staged_batches(2):
                backend.shingle_hashes(data, offsets, ShingleSpec("word", 5))


def test_text_on_the_device_is_not_copied():
    from cupy_like import recording

    backend = host_gpu_backend()
    data, offsets = staged_batches(1)[0]
    device_data = cupy_like.asarray(data)
    with recording() as log, backend.batch_scope():
        backend.shingle_hashes(device_data, offsets, ShingleSpec("word", 5))
    copied = [detail for _, operation, detail in log if "copy" in operation]
    assert copied == [f"{offsets.nbytes} bytes pinned"]  # the offsets alone (they stay on the host)


def test_the_permutation_cache_frees_nothing_a_scope_still_reads():
    """A scope on another thread reads a permutation family; meanwhile the cache drops it
    (more than PERMUTATION_CACHE_SIZE newer families). Its arrays live until that scope's
    hand-off, and are freed after it. The cache keeps the most recently used families."""
    import gc
    import threading
    import weakref

    from cupy_like import device_buffer

    from gpudedup.backends.kernel_backend import PERMUTATION_CACHE_SIZE
    from gpudedup.core.hashing import draw_permutations

    backend = host_gpu_backend()
    families = [draw_permutations(16, seed=seed) for seed in range(PERMUTATION_CACHE_SIZE + 3)]
    reading, evicted, done = threading.Event(), threading.Event(), threading.Event()
    watched: list = []

    def reader():
        with backend.batch_scope():
            a, b = backend.permutation_arrays(families[0])
            watched.extend(weakref.ref(device_buffer(array)) for array in (a, b))
            del a, b
            reading.set()
            evicted.wait(10)
        done.set()

    thread = threading.Thread(target=reader)
    thread.start()
    assert reading.wait(10)
    with backend.batch_scope():
        for family in families[1:]:
            backend.permutation_arrays(family)
    key = (families[0].a.tobytes(), families[0].b.tobytes())
    assert key not in backend._permutations and len(backend._permutations) == PERMUTATION_CACHE_SIZE
    gc.collect()
    assert all(ref() is not None for ref in watched)  # the reading scope holds them
    evicted.set()
    assert done.wait(10)
    thread.join()
    gc.collect()
    assert all(ref() is None for ref in watched)  # freed after its hand-off

    # Least recently used out: touching the oldest kept family keeps it past one more insertion.
    oldest = next(iter(backend._permutations))
    touched = next(f for f in families if (f.a.tobytes(), f.b.tobytes()) == oldest)
    backend.permutation_arrays(touched)
    backend.permutation_arrays(draw_permutations(16, seed=99))
    assert oldest in backend._permutations and len(backend._permutations) == PERMUTATION_CACHE_SIZE
