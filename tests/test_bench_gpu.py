"""Smoke test of scripts/bench_gpu.py on the host: its measuring function runs the GPU backend's
code (the CUDA kernels compiled by g++, tests/kernel_host) against the plain array reference
(numpy, and numpy seen through CuPy's API), finds identical outputs and positive timings; it
refuses a speed-up when outputs differ; the references get the same shingles as ours.

The GPU-only parts (CUDA events, device properties, datasketch's gpu_mode, cuDF) need a GPU and
are not exercised here.

The first-contact kit (scripts/gpu_session.sh, one step per device call; scripts/gpu_sanitize.py,
the driver compute-sanitizer runs) is checked through its --host-dry-run: each step writes its
files straight under $OUT, says when compute-sanitizer is not run, and says when its time limit
stopped it; the driver fails when an output differs from numpy's.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpudedup.backends.kernel_backend import KernelBackend
from gpudedup.backends.numpy_backend import NumpyBackend
from gpudedup.core.hashing import draw_permutations, poly_hash64_scalar
from gpudedup.core.minhash import minhash_signatures
from gpudedup.core.normalize import text_buffers
from gpudedup.core.shingling import ShingleSpec, utf8_shingle_hashes

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
    given = bench.int32_update_limit(10, 1_000_000, (12, 0), ops_per_sm_clock=128)[0]
    assert given == 10 * 1e9 * 128 / bench.OPS_PER_UPDATE


def test_sample_rows(bench):
    assert bench.sample_rows(10, 0).tolist() == list(range(10))
    rows = bench.sample_rows(1000, 7)
    assert rows[0] == 0 and rows[-1] == 999 and len(rows) == 7


# --- the first-contact kit: scripts/gpu_session.sh and scripts/gpu_sanitize.py ----------------

SESSION = SCRIPT.parent / "gpu_session.sh"
SANITIZE = SCRIPT.parent / "gpu_sanitize.py"


def session(step: str, out: Path, *extra: str, **env: str) -> subprocess.CompletedProcess:
    """One step of the kit as a device call runs it (OUT set), here with --host-dry-run."""
    return subprocess.run(["bash", str(SESSION), step, *extra], capture_output=True, text=True, timeout=280,
                          env={**os.environ, "OUT": str(out), **env})


@pytest.mark.timeout(300)
def test_session_sanitize_step_dry_run(tmp_path):
    run = session("sanitize", tmp_path, "--host-dry-run")
    assert run.returncode == 0, run.stdout + run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sanitize_memcheck.txt", "sanitize_racecheck.txt",
                                                           "sanitizer.txt", "setup.txt"]
    found = (tmp_path / "sanitizer.txt").read_text()
    assert found.startswith("compute-sanitizer: ")  # a path, or NOT FOUND and where it looked
    for tool in ("memcheck", "racecheck"):
        log = (tmp_path / f"sanitize_{tool}.txt").read_text()
        assert f"HOST DRY RUN: compute-sanitizer --tool {tool} NOT run" in log
        assert "shingle_hash.cu hashes" in log and "minhash.cu K=300" in log and "band_keys.cu" in log
        assert re.search(r"gpu_sanitize: \d+ comparisons with the numpy backend, 0 different, 0 errors", log)
    assert "gpu_session.sh sanitize: exit status 0" in (tmp_path / "setup.txt").read_text()


@pytest.mark.timeout(300)
def test_session_bench_step_dry_run(tmp_path):
    run = session("bench-char", tmp_path, "--host-dry-run")
    assert run.returncode == 0, run.stdout + run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench_char.json", "bench_char.txt", "setup.txt"]
    results = json.loads((tmp_path / "bench_char.json").read_text())
    assert results["host_dry_run"] and results["stages"]["all_equal"] and results["stages"]["shingle"] == "char"
    assert "HOST DRY RUN" in (tmp_path / "bench_char.txt").read_text()


@pytest.mark.timeout(300)
def test_session_job_step_dry_run_compares_the_tables(tmp_path):
    # Without a GPU the step runs each of its commands on the CPU, the last with a work
    # directory; the comparisons of the tables are the ones that hold the GPU's runs against the
    # CPU's.
    sample = Path(__file__).parents[1] / "gpudedup" / "data" / "bible_sample.jsonl.gz"
    run = session("job", tmp_path, "--host-dry-run", JOB_CORPUS=str(sample))
    assert run.returncode == 0, run.stdout + run.stderr
    log = (tmp_path / "job.txt").read_text()
    assert log.count("backend: numpy") == 4 and re.search(r"run 3: wall [0-9.]+ s", log)
    assert re.search(r"run 3: .* --work-dir ", log) and "  spill: seconds" in log
    for table in ("pairs", "clusters", "deduplicated"):
        assert len(re.findall(rf"{table}: [0-9,]+ rows in 1 files, identical", log)) == 2


def compared_outputs(root: Path, tables: dict[str, dict[str, tuple[dict, str]]]) -> tuple[int, list[str]]:
    """compare_outputs.py's exit code and lines over two folders ``root``/a and ``root``/b,
    made from ``tables``: side -> table -> (its columns, the Parquet compression)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for side, written in tables.items():
        (root / side).mkdir(parents=True)
        (root / side / "report.json").write_text("{}")  # (a finished output has one)
        for table, (columns, compression) in written.items():
            (root / side / table).mkdir()
            pq.write_table(pa.table(columns), root / side / table / "part-00000.parquet", compression=compression)
    compare = subprocess.run([sys.executable, str(SCRIPT.parent / "compare_outputs.py"), str(root / "a"),
                              str(root / "b")], capture_output=True, text=True, timeout=60)
    return compare.returncode, compare.stdout.splitlines()


def test_compare_outputs_names_the_table_that_differs(tmp_path):
    pairs = ({"a": [0], "b": [1]}, "snappy")
    code, lines = compared_outputs(tmp_path, {
        side: {"pairs": pairs, "clusters": ({"id": [0, 1, 2], "cluster": cluster}, "snappy")}
        for side, cluster in (("a", [0, 0, 1]), ("b", [0, 1, 1]))})
    assert code == 1
    assert lines == ["pairs: 1 rows in 1 files, identical", "clusters: DIFFERENT at clusters/part-00000.parquet",
                     "deduplicated: absent on both sides", "removed: absent on both sides"]


def test_compare_outputs_refuses_a_folder_that_is_not_a_finished_output(tmp_path):
    # Two runs that failed wrote nothing (outputs appear whole or not at all): no match.
    compare = subprocess.run([sys.executable, str(SCRIPT.parent / "compare_outputs.py"), str(tmp_path / "a"),
                              str(tmp_path / "b")], capture_output=True, text=True, timeout=60)
    assert compare.returncode == 2 and compare.stdout == ""
    assert compare.stderr == f"not a finished gpudedup output (no report.json): {tmp_path / 'a'}, {tmp_path / 'b'}\n"


def test_compare_outputs_holds_pairs_and_clusters_to_their_bytes(tmp_path):
    # The same rows in other bytes (here another compression) are the same kept rows in
    # Parquet, and a difference in pairs/ or clusters/, which every runner writes byte for byte.
    code, lines = compared_outputs(tmp_path, {
        side: {"pairs": ({"a": [0], "b": [1]}, compression), "deduplicated": ({"text": ["x", "y"]}, compression)}
        for side, compression in (("a", "snappy"), ("b", "zstd"))})
    assert code == 1
    assert lines == ["pairs: DIFFERENT at pairs/part-00000.parquet (the same rows, other bytes)",
                     "clusters: absent on both sides", "deduplicated: 2 rows in 1 files, identical",
                     "removed: absent on both sides"]


def test_compare_outputs_reads_kept_rows_by_content(tmp_path):
    # A NaN is equal to a NaN at the same place, and a dictionary-encoded column to its values
    # (a file written piece by piece holds one dictionary per piece); a NaN beside a number, or
    # other values, still differ.
    import pyarrow as pa

    texts = pa.chunked_array([pa.array(["x", "y"]).dictionary_encode(), pa.array(["y", "z"]).dictionary_encode()])
    same = {"text": texts, "score": [float("nan"), 1.0, 2.0, float("nan")]}
    code, lines = compared_outputs(tmp_path / "same", {
        "a": {"deduplicated": (same, "zstd")},
        "b": {"deduplicated": ({"text": ["x", "y", "y", "z"], "score": [float("nan"), 1.0, 2.0, float("nan")]},
                               "zstd")}})
    assert (code, lines[2]) == (0, "deduplicated: 4 rows in 1 files, identical")
    for number, other in enumerate(({"text": ["x", "y", "y", "z"], "score": [0.0, 1.0, 2.0, float("nan")]},
                                    {"text": ["x", "y", "y", "w"], "score": [float("nan"), 1.0, 2.0, float("nan")]})):
        code, lines = compared_outputs(tmp_path / f"other{number}", {
            "a": {"deduplicated": (same, "zstd")}, "b": {"deduplicated": (other, "zstd")}})
        assert (code, lines[2]) == (1, "deduplicated: DIFFERENT at deduplicated/part-00000.parquet")


def test_session_step_stopped_by_its_limit_says_so(tmp_path):
    # A step that outlives STEP_SECONDS is stopped, and what it wrote stays, with a line saying so.
    # The step's Python is a stand-in that writes a line and then never ends, so the limit is
    # reached however fast the machine is (a real benchmark can finish inside any short limit).
    endless = tmp_path / "endless-python"
    endless.write_text("#!/bin/sh\necho 'started'\nexec sleep 120\n")
    endless.chmod(0o755)
    out = tmp_path / "out"
    run = session("bench-word", out, "--host-dry-run", STEP_SECONDS="1", PYTHON=str(endless))
    log = (out / "bench_word.txt").read_text()
    assert run.returncode == 124, run.stdout + run.stderr
    assert log.startswith("corpus: ") and "started" in log
    assert "STOPPED: the step's limit of 1 s was reached" in log


def test_session_refuses_unknown_steps(tmp_path):
    for arguments in (["benchmark"], ["tests", "--fast"], []):
        run = subprocess.run(["bash", str(SESSION), *arguments], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "OUT": str(tmp_path)})
        assert run.returncode == 2 and "usage: bash scripts/gpu_session.sh" in run.stderr


@pytest.fixture(scope="module")
def sanitize_driver():
    spec = importlib.util.spec_from_file_location("gpu_sanitize", SANITIZE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(120)
def test_sanitize_driver_reports_a_difference(sanitize_driver, monkeypatch, capsys):
    # The driver compares, it does not only run: a reference that differs makes it fail.
    assert sanitize_driver.main(["--host-dry-run", "--docs", "8", "--num-perm", "64"]) == 0
    original = NumpyBackend.band_keys
    monkeypatch.setattr(NumpyBackend, "band_keys", lambda self, s, b: original(self, s, b) + np.uint64(1))
    assert sanitize_driver.main(["--host-dry-run", "--docs", "8", "--num-perm", "64"]) == 1
    output = capsys.readouterr().out
    assert "DIFFERENT word 5-grams, batch 1" in output and ", 4 different, 0 errors" in output
