"""Shared fixtures and hooks: a watchdog for every test, ShingleBatches built directly, synthetic
set pairs of known Jaccard, conservation checked from outside on every run the suite makes
(conservation.py), and no silent skips in CI."""

from __future__ import annotations

import functools
import inspect
import json
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pyarrow.fs as pafs
import pytest

from gpudedup.core.shingling import ShingleBatch

from gpudedup.io.storage import Remote
from conservation import (ConservationError, absolute_place, check_output_dir, check_reading_as_asked, check_result,
                          url_filesystem)


@pytest.fixture(autouse=True)
def watchdog(request):
    """Fail a test that runs over 30 s (they take well under that) instead of hanging the suite.
    GPU tests get 300 s: on a fresh machine CuPy compiles its own kernels on first use. A test
    marked ``timeout(seconds)`` gets that limit when it is longer: the watchdog never cuts a
    test's own longer limit short."""
    default = 300 if request.node.get_closest_marker("gpu") else 30
    marker = request.node.get_closest_marker("timeout")
    limit = max(default, int(marker.args[0])) if marker else default
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



# --- no silent skips in CI ----------------------------------------------------------------------

# The only skips CI accepts: the hardware or the GPU-only library is genuinely absent (or, for
# the no-GPU paths, a GPU is present). Everything else the suite needs -- CuPy, NVRTC, g++,
# Dask, Chromium, polars, Hugging Face datasets -- the README's test command installs.
GPU_ABSENT = "needs a CUDA GPU"
CUDF_ABSENT = "cuDF is not installed"
GPU_PRESENT = "a GPU is present"
ALLOWED_SKIPS = (GPU_ABSENT, CUDF_ABSENT, GPU_PRESENT)


def in_ci() -> bool:
    return bool(os.environ.get("CI"))


def skip_reason(longrepr: Any) -> str:
    """The reason of a skip report ((file, line, 'Skipped: reason') or text)."""
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


def fail_skip_in_ci(report) -> None:
    """Turn a skip report into a failure in CI unless its reason is an allowed one."""
    if not (in_ci() and report.skipped) or hasattr(report, "wasxfail"):
        return
    reason = skip_reason(report.longrepr)
    if not reason.startswith(ALLOWED_SKIPS):
        report.outcome = "failed"
        report.longrepr = (f"skipped in CI ({reason}); there the test command installs everything the "
                           f"suite needs, and only these skips are allowed: {', '.join(ALLOWED_SKIPS)}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    fail_skip_in_ci(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    fail_skip_in_ci(outcome.get_result())  # a module-level skip (importorskip at import time)


def pytest_collection_modifyitems(config, items):
    """Skip tests marked ``gpu`` where no GPU backend can run (and only there)."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    from gpudedup.backends import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason is not None:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=f"{GPU_ABSENT}: {reason}"))


# --- outputs -----------------------------------------------------------------------------------


@pytest.fixture
def without_c_loops(monkeypatch):
    """As where no C compiler was found at install: the C loops (gpudedup._cpu_kernels) cannot be
    imported, so numba's build runs (once started) or the numpy and scipy reference."""
    import gpudedup

    monkeypatch.setitem(sys.modules, "gpudedup._cpu_kernels", None)  # an import raises ImportError
    monkeypatch.delattr(gpudedup, "_cpu_kernels", raising=False)


@pytest.fixture
def output_names():
    """What a dedup run over files writes at the top of its output directory."""
    from output_support import FILES_LAYOUT

    return FILES_LAYOUT


# --- conservation, checked from outside on every run --------------------------------------------
#
# Three ways in, so that no run escapes: gpudedup.dedup is wrapped (every result of the API and
# of the CLI in process is checked against its input, read again by conservation.py, and its
# report must state the reading the caller asked for, which is what lets the checker take the
# reading of a subprocess's run from its report.json);
# DedupResult._write, which every write goes through, is wrapped (every output directory written
# in process is checked from its files, wherever it is, even in a temporary directory gone
# before the test ends); and after
# every test, and again at the end of the session, pytest's temporary directories are searched
# for output directories not checked yet (CLI runs in subprocesses, module- and session-scoped
# fixtures, results made by the pipeline's internal functions and then written).

CONSERVATION_FAILURES: list[str] = []
_checked_reports: dict[str, tuple] = {}  # report.json path -> (inode, mtime, size) when checked
_seen_tops: set[str] = set()  # the entries of pytest's basetemp already searched
_originals: dict[str, Any] = {}
RUN_ATTRIBUTE = "_conservation_data"  # the input data of each result of the wrapped dedup


def _report_key(report: Path) -> Optional[tuple]:
    try:
        status = report.stat()
    except OSError:
        return None
    return status.st_ino, status.st_mtime_ns, status.st_size


def _fail(message: str) -> None:
    CONSERVATION_FAILURES.append(message)
    raise ConservationError(message)


def _is_path_input(data: Any) -> bool:
    # (gpudedup.io.storage.Remote: a file named by URL, which the CLI passes on as such)
    return isinstance(data, (str, os.PathLike)) or (
        isinstance(data, (list, tuple)) and bool(data) and all(isinstance(p, (os.PathLike, Remote)) for p in data))


def _checked_dedup(original):
    signature = inspect.signature(original)

    @functools.wraps(original)
    def dedup(data, **kwargs):
        import pyarrow as pa

        if isinstance(data, pa.RecordBatchReader):
            # A stream is read once: the checker keeps the table, the run gets the same batches.
            table = data.read_all()
            data, kept_data = pa.RecordBatchReader.from_batches(table.schema, table.to_batches()), table
        elif isinstance(data, Iterator):
            # So is an iterator (a generator, a map object): the checker keeps its items, the run
            # gets the same ones, one at a time.
            items = list(data)
            data, kept_data = iter(items), items
        else:
            kept_data = data
        paths = ([data] if isinstance(data, (str, os.PathLike)) else list(data)) if _is_path_input(data) else []
        # The reading asked for, with dedup's own defaults where the caller left them out;
        # paths made absolute now, in the caller's working directory.
        asked = signature.bind(data, **kwargs)
        asked.apply_defaults()
        reading = {name: asked.arguments[name] for name in ("text_field", "id_field", "on_error")}
        if asked.arguments["shingle"] == "token":  # the content column is then the token ids
            reading["text_field"] = asked.arguments["token_field"]
        given = [absolute_place(p) for p in paths]
        result = original(data, **kwargs)
        try:
            check_reading_as_asked(result.report, paths=given, **reading)
            check_result(result, kept_data)
        except ConservationError as error:
            _fail(f"gpudedup.dedup: {error}")
        setattr(result, RUN_ATTRIBUTE, kept_data)
        return result
    return dedup


def _checked_write(original):
    @functools.wraps(original)
    def write(self, output_dir, *args, **kwargs):
        written = original(self, output_dir, *args, **kwargs)
        if isinstance(written, Remote):  # on object storage: checked in a local copy
            with tempfile.TemporaryDirectory() as copy:
                filesystem, path = url_filesystem(written.url)
                pafs.copy_files(path, copy, source_filesystem=filesystem)
                _check_written(self, Path(copy))
            return written
        report = Path(written) / "report.json"
        # Checked here, once: the search after the test passes over it, failed or not.
        _checked_reports[str(report.resolve())] = _report_key(report)
        _check_written(self, Path(written))
        return written
    return write


def _check_written(result, out: Path) -> None:
    try:
        # The in-memory data of a result of the wrapped dedup; a run over files needs none.
        check_output_dir(out, getattr(result, RUN_ATTRIBUTE, None))
    except ConservationError as error:
        _fail(f"DedupResult.write: {error}")


def pytest_configure(config):
    """Wrap the public entry points before any test module imports them by name; and give the
    suite Python's own SIGINT and the default SIGHUP handling. The interrupt tests send SIGINT
    and SIGHUP to the runs they start and expect them handled, but a shell starts a background
    job with SIGINT ignored, and nohup starts one with SIGHUP ignored, which the runs would
    inherit (and rightly leave ignored, as nohup'd programs do)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
    import gpudedup
    import gpudedup.api
    import gpudedup.results.result

    _originals["dedup"] = gpudedup.api.dedup
    _originals["write"] = gpudedup.results.result.DedupResult._write
    gpudedup.api.dedup = gpudedup.dedup = _checked_dedup(_originals["dedup"])
    gpudedup.results.result.DedupResult._write = _checked_write(_originals["write"])


def pytest_unconfigure(config):
    if _originals:
        import gpudedup
        import gpudedup.api
        import gpudedup.results.result

        gpudedup.api.dedup = gpudedup.dedup = _originals["dedup"]
        gpudedup.results.result.DedupResult._write = _originals["write"]


def _is_run_report(report: Path) -> bool:
    """A report.json a gpudedup run wrote (tests also write stand-ins such as '{}')."""
    try:
        content = json.loads(report.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(content, dict) and "gpudedup_version" in content and "balance" in content


def check_new_outputs(roots: list[Path]) -> list[str]:
    """Check every output directory under ``roots`` whose report.json is new or changed since
    it was last checked; returns the failures."""
    failures = []
    for root in roots:
        for directory, _, names in os.walk(root):
            if "report.json" not in names:
                continue
            report = Path(directory) / "report.json"
            key = _report_key(report)
            if key is None or _checked_reports.get(str(report.resolve())) == key or not _is_run_report(report):
                continue
            _checked_reports[str(report.resolve())] = key
            try:
                check_output_dir(Path(directory))
            except (ConservationError, OSError, KeyError, ValueError) as error:
                failures.append(f"{directory}: {type(error).__name__}: {error}")
    CONSERVATION_FAILURES.extend(failures)
    return failures


@pytest.fixture(autouse=True)
def every_run_is_conserved(tmp_path_factory):
    """After each test: no conservation failure in its runs, and every output directory it (or
    a wider-scoped fixture it used) wrote under pytest's temporary directories is checked."""
    before = len(CONSERVATION_FAILURES)
    yield
    base = tmp_path_factory.getbasetemp()
    # pytest's "<name>current" links point at directories searched under their own names.
    tops = [entry for entry in base.iterdir() if str(entry) not in _seen_tops and not entry.is_symlink()]
    _seen_tops.update(str(entry) for entry in tops)
    check_new_outputs(tops)
    failures = CONSERVATION_FAILURES[before:]
    assert not failures, "conservation fails:\n" + "\n".join(failures)


@pytest.fixture(scope="session", autouse=True)
def outputs_found_at_the_end_are_conserved(tmp_path_factory):
    """Outputs written into a directory an earlier test made (a module-scoped fixture's) are
    found at the end of the session, by a search of all of pytest's temporary directories; a
    failure is an error of the session's last test. Under pytest-xdist each test process
    searches its own, where it knows what it checked already (the controlling process does
    not: it would check again, without their data, outputs of in-memory runs and of a bucket
    whose server is gone)."""
    yield
    if not _originals:
        return
    failures = check_new_outputs([tmp_path_factory.getbasetemp()])
    assert not failures, "conservation fails in outputs found at the end of the session:\n" + "\n".join(failures)


def assert_conserved(result) -> None:
    """Check a result of gpudedup.dedup against its input (conservation.py); every result of
    the wrapped dedup is checked already, this lets a test say so where it matters."""
    assert hasattr(result, RUN_ATTRIBUTE), "not a result of gpudedup.dedup: its input is unknown"
    check_result(result, getattr(result, RUN_ATTRIBUTE))


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """The test's temporary directory as the working directory (CLI tests give relative paths)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def happy(in_tmp):
    """A working directory holding data.jsonl: the CLI tests' corpus with planted pairs."""
    from cli_support import happy_records, write_jsonl

    write_jsonl(in_tmp / "data.jsonl", happy_records())
    return in_tmp


@pytest.fixture(scope="module")
def client():
    """A Dask client of a LocalCluster of two worker processes of one thread (tasks cross
    process boundaries as on real clusters), one per test module that asks for it; made as
    docs/scale.md tells a user to make the client of a long-lived cluster (no log of its
    last messages, which would hold on to what each run sent)."""
    import logging

    distributed = pytest.importorskip("distributed", reason="Dask is not installed (pip install 'gpudedup[dask]')")
    import dask

    with dask.config.set({"distributed.admin.low-level-log-length": 0}), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                     silence_logs=logging.ERROR) as cluster, distributed.Client(cluster) as connected:
        yield connected
