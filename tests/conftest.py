"""Shared fixtures: a watchdog for every test, ShingleBatches built directly, and synthetic set
pairs of known Jaccard."""

import signal
import threading

import numpy as np
import pytest

from gpudedup.shingling import ShingleBatch


@pytest.fixture(autouse=True)
def watchdog(request):
    """Fail a test that runs over 30 s (they take well under that) instead of hanging the suite.
    GPU tests get 300 s: on a fresh machine CuPy compiles its own kernels on first use."""
    limit = 300 if request.node.get_closest_marker("gpu") else 30
    if not hasattr(signal, "SIGALRM") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum, frame):
        raise TimeoutError(f"test ran over {limit} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(limit)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)



def _batch_from_rows(rows):
    """A ShingleBatch whose document d holds the uint64 hashes rows[d] (in that order)."""
    counts = np.array([len(row) for row in rows], dtype=np.int64)
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    parts = [np.asarray(row, dtype=np.uint64) for row in rows]
    hashes = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)
    return ShingleBatch(offsets, hashes.astype(np.uint64))


def _jaccard_pairs(n_pairs, jaccard, union=100, seed=0):
    """``n_pairs`` pairs of sets of random uint64 hashes with |A ∩ B| / |A ∪ B| == exactly
    round(jaccard * union) / union, as one ShingleBatch: documents 2i and 2i+1 are pair i.

    Within a pair, all hashes differ in their low 32 bits (the bits MinHash reads), so a
    pair's signature columns agree exactly when the minimum falls in the intersection.
    Returns (batch, the exact Jaccard).
    """
    rng = np.random.default_rng(seed)
    common = int(round(jaccard * union))
    only = union - common
    only_a = only // 2
    values = rng.integers(0, 2**64, size=(n_pairs, union), dtype=np.uint64)
    low = np.sort(values & np.uint64(0xFFFFFFFF), axis=1)
    assert np.all(low[:, 1:] != low[:, :-1]), "change the seed: a low-32-bit collision"
    rows = []
    for row in values:
        rows.append(row[:common].tolist() + row[common:common + only_a].tolist())
        rows.append(row[:common].tolist() + row[common + only_a:].tolist())
    return _batch_from_rows(rows), common / union


@pytest.fixture
def batch_from_rows():
    return _batch_from_rows


@pytest.fixture
def jaccard_pairs():
    return _jaccard_pairs


def pytest_collection_modifyitems(config, items):
    """Skip tests marked ``gpu`` where no GPU backend can run (and only there)."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    from gpudedup.backends import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason is not None:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=f"needs a CUDA GPU: {reason}"))


def _output_names() -> list[str]:
    """The files a dedup run writes (the figures only where matplotlib is installed)."""
    from gpudedup import plots

    names = ["clusters.parquet", "deduplicated.parquet", "pairs.parquet", "report.html", "report.json"]
    if plots.matplotlib_available():
        names += ["candidates_histogram.png", "s_curve.png"]
    return sorted(names)


@pytest.fixture
def output_names():
    return _output_names()


def assert_conserved(result) -> None:
    """Every input record is accounted for (report.json's balance), and every removed document
    is named with a kept document of its own cluster. Called on every end-to-end run."""
    balance = result.report["balance"]
    assert balance["balanced"], balance
    assert (balance["kept"] + balance["kept_empty"] + balance["removed_duplicates"] + balance["skipped"]
            == balance["input_records"] == result.report["input"]["documents"] + balance["skipped"])
    keep = np.asarray(result.keep)
    assert balance["removed_duplicates"] == int((~keep).sum())
    clusters = result.clusters.to_pydict()
    kept_ids = {i for i, k in zip(clusters["id"], clusters["keep"]) if k}
    cluster_of = dict(zip(clusters["id"], clusters["cluster"]))
    for doc_id, cluster, kept, kept_id in zip(clusters["id"], clusters["cluster"], clusters["keep"],
                                              clusters["kept_id"]):
        assert kept_id in kept_ids and cluster_of[kept_id] == cluster
        assert kept == (kept_id == doc_id)
    assert len(kept_ids) == len(set(clusters["cluster"]))  # one kept document per cluster


@pytest.fixture
def conserved():
    return assert_conserved


@pytest.fixture(autouse=True)
def every_run_is_conserved(monkeypatch):
    """Check conservation (assert_conserved) on every result gpudedup.dedup makes in the test
    suite -- the API's runs and the CLI's (CliRunner runs in process)."""
    import gpudedup.api

    def checked(original):
        def run(*args, **kwargs):
            result = original(*args, **kwargs)
            assert_conserved(result)
            return result
        return run

    # The in-memory runs end in corpus_result, the staged ones (--work-dir) in staged_dedup.
    monkeypatch.setattr(gpudedup.api, "corpus_result", checked(gpudedup.api.corpus_result))
    monkeypatch.setattr(gpudedup.api, "staged_dedup", checked(gpudedup.api.staged_dedup))
