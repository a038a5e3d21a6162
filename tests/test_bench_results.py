"""The benchmarks' ``--results FILE``: what each script writes is the shape
scripts/render_performance.py renders (the same shape as the files in bench-results/), with the
run's commit, date, machine and command; a later run replaces the rows of the configurations it
measures and keeps the others with their own run.

The scripts that run in a few seconds on a tiny input are run so (as their own processes); those
that need a Dask cluster for seconds more, or packages the dev extra does not install (rensa,
datasketch, tokenizers, Redis), have their results rows made from outputs shaped as theirs.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"


def script(name: str, monkeypatch):
    """A module of scripts/, importable with its siblings (bench_results)."""
    monkeypatch.syspath_prepend(str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)  # (dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def render(monkeypatch):
    return script("render_performance", monkeypatch).RENDER


def run_script(name: str, *arguments: str) -> None:
    subprocess.run([sys.executable, str(SCRIPTS / f"{name}.py"), *arguments], check=True, cwd=ROOT,
                   capture_output=True, text=True)


def read(path: Path, benchmark: str) -> dict:
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["benchmark"] == benchmark
    (run,) = data["runs"]
    assert set(run) >= {"commit", "date", "machine", "command"}
    assert run["command"].startswith(f"python scripts/{benchmark}.py ")
    assert all(row["run"] == 0 for row in data["rows"])
    return data


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """300 texts of the bundled sample as JSONL (id, text), its last ten copies of the first ten."""
    with resources.as_file(resources.files("gpudedup").joinpath("data/bible_sample.jsonl.gz")) as sample:
        texts = [json.loads(line)["text"] for line in gzip.open(sample, "rt").read().splitlines()[:290]]
    texts += texts[:10]
    path = tmp_path_factory.mktemp("corpus") / "tiny.jsonl"
    path.write_text("".join(json.dumps({"id": f"d{n}", "text": t}) + "\n" for n, t in enumerate(texts)))
    return path


def test_record_replaces_the_rows_it_measures_and_keeps_the_others(monkeypatch, tmp_path):
    bench_results = script("bench_results", monkeypatch)
    path = tmp_path / "x.json"
    first = {"commit": "aaaaaaa", "date": "2026-01-01", "machine": "m", "command": "python scripts/x.py"}
    second = {**first, "commit": "bbbbbbb", "date": "2026-01-02"}
    bench_results.record(path, "x", [{"mode": "a", "s": 1}, {"mode": "b", "s": 2}], key=("mode",), run=first)
    written = bench_results.record(path, "x", [{"mode": "b", "s": 3}], key=("mode",), run=second)
    assert written == json.loads(path.read_text())
    assert written["runs"] == [first, second]
    assert written["rows"] == [{"run": 0, "mode": "a", "s": 1}, {"run": 1, "mode": "b", "s": 3}]
    # A run that measures every configuration leaves no older run behind.
    written = bench_results.record(path, "x", [{"mode": "a", "s": 4}, {"mode": "b", "s": 5}], key=("mode",),
                                   run=first)
    assert written["runs"] == [first] and [row["s"] for row in written["rows"]] == [4, 5]
    with pytest.raises(SystemExit, match="holds the results of .x., not of .y."):
        bench_results.record(path, "y", [{"mode": "a"}], key=("mode",), run=first)


def test_this_run_names_the_checkout_and_the_command(monkeypatch):
    bench_results = script("bench_results", monkeypatch)
    monkeypatch.setattr(sys, "argv", [str(SCRIPTS / "bench_cpu.py"), "corpus.jsonl", "--shingle", "char"])
    run = bench_results.this_run("numba")
    assert run["command"] == "python scripts/bench_cpu.py corpus.jsonl --shingle char"
    assert run["commit"] == "unknown" or len(run["commit"].split("-")[0]) >= 7
    assert run["date"].count("-") == 2 and "cores" in run["machine"]
    assert {"python", "numpy", "pyarrow", "numba"} <= set(run["versions"])


@pytest.mark.timeout(120)
def test_bench_cpu_results(corpus, tmp_path, render):
    results = tmp_path / "cpu.json"
    run_script("bench_cpu", str(corpus), "--skip", "datasketch", "rensa", "--results", str(results))
    data = read(results, "bench_cpu")
    (row,) = data["rows"]
    assert (row["documents"], row["shingle"], row["ngram"], row["threshold"]) == (300, "word", 5, 0.8)
    ours = row["pipelines"]["gpudedup"]
    assert ours["seconds"] > 0 and ours["pair_recall"] > 0.9 and ours["reported_pairs"] >= 10
    assert {"read", "verify", "write"} <= set(ours["stages"])
    page = "\n".join(render["cpu.json"](data))
    assert f"**{ours['seconds']:.1f} s**" in page and data["runs"][0]["command"] in page


@pytest.mark.timeout(120)
def test_bench_streaming_results(tmp_path, render):
    results = tmp_path / "streaming.json"
    run_script("bench_streaming", "--scales", "1", "--base-shards", "1", "--shard-documents", "300", "--words", "30",
               "--modes", "staged", "--results", str(results))
    (row,) = read(results, "bench_streaming")["rows"]
    assert (row["mode"], row["scale"], row["documents"], row["identical"]) == ("staged", 1, 300, 0.0)
    assert row["seconds"] > 0 and row["peak_rss_mb"] > 0 and row["report_peak_rss_mb"] > 0
    page = "\n".join(render["streaming.json"](json.loads(results.read_text())))
    assert f"| staged | 1× | 1 | 300 | none | {row['seconds']:.1f} s |" in page


@pytest.mark.timeout(120)
def test_bench_linux_results(corpus, tmp_path, render):
    shards = tmp_path / "shards"
    shards.mkdir()
    table = pa.Table.from_pylist([json.loads(line) for line in corpus.read_text().splitlines()])
    pq.write_table(table.slice(0, 150), shards / "part-00000.parquet")
    pq.write_table(table.slice(150), shards / "part-00001.parquet")
    results = tmp_path / "linux.json"
    run_script("bench_linux", str(shards), "--modes", "staged", "--results", str(results))
    data = read(results, "bench_linux")
    (row,) = data["rows"]
    assert (row["mode"], row["documents"], row["shards"], row["per_shard"]["shards"]) == ("staged", 300, 2, 2)
    assert row["wall_seconds"] > 0 and row["peak_tree_rss_mb"] > 0 and row["results"]["removed_documents"] >= 10
    page = "\n".join(render["linux.json"](data))
    assert f"| staged | {row['wall_seconds']:.1f} s |" in page and "Per shard of the staged run" in page


@pytest.mark.timeout(120)
def test_bench_copies_results(tmp_path, render):
    results = tmp_path / "copies.json"
    run_script("bench_copies", "--documents", "2000", "--group", "100", "--words", "20", "--results", str(results))
    data = read(results, "bench_copies")
    rows = {row["kind"]: row for row in data["rows"]}
    assert rows["copies"]["kept_documents"] == 20 and rows["distinct"]["kept_documents"] == 2000
    assert rows["copies"]["identical_copies"] == 1980 and rows["copies"]["group"] == 100
    assert "| 20 texts × 100 copies | 2,000 |" in "\n".join(render["copies.json"](data))


@pytest.mark.timeout(120)
def test_bench_components_results(tmp_path, render):
    results = tmp_path / "components.json"
    run_script("bench_components", "--pairs", "2000", "--results", str(results))
    data = read(results, "bench_components")
    (row,) = data["rows"]
    assert row["pairs"] == 2000 and row["seed"] == 0 and row["same"] is True
    assert row["documents_in_clusters"] > 2000 and len(row["dask_worker_peaks_mb"]) == 2
    assert f"| 2,000 | {row['pairs_per_part']:,} | 1 | {row['documents_in_clusters']:,} |" in "\n".join(
        render["components.json"](data))


def test_bench_task_bytes_results(monkeypatch, tmp_path, render):
    bench = script("bench_task_bytes", monkeypatch)
    rows = [{"shards": 25, "documents": 500, "verified_pairs": 50, "seconds": 6.4, "to_scheduler_bytes": 61_234,
             "to_workers_bytes": 548_765}]
    converted = bench.results_rows(rows, 20)
    assert converted[0]["to_scheduler_mb"] == 0.06 and converted[0]["to_workers_mb"] == 0.55
    data = script("bench_results", monkeypatch).record(tmp_path / "t.json", "bench_task_bytes", converted,
                                                        key=("shards", "documents_per_shard"))
    assert "| 25 | 500 | 0.06 MB | 0.55 MB | 6.4 s |" in "\n".join(render["task_bytes.json"](data))


def test_bench_index_results(monkeypatch, tmp_path, render):
    bench = script("bench_index", monkeypatch)

    def outcome(base, increments, median, precision):
        return {"steps": [{"seconds": base}] + [{"seconds": s} for s in increments],
                "query": {"median_ms": median, "p99_ms": 2 * median}, "bytes_per_document": 4054.4,
                "index_documents": 74915,
                "scores": [{"pair_precision": precision, "pair_recall": 0.99, "dropped": 9} for _ in increments]}

    results = {"gpudedup": outcome(2.581, [0.24, 0.22, 0.23, 0.24], 2.5, 1.0),
               "datasketch-bloom": {**outcome(19.5, [2.7] * 4, 0.3, None)}}
    scale = {"scale": 3, "adds": [{"seconds": 4.04}, {"seconds": 3.01}, {"seconds": 3.88}], "compact_s": 35.6,
             "documents": 250000, "bytes_per_document": 4834.2, "segments_before_compact": 3,
             "query_before_compact": {"median_ms": 6.94, "p99_ms": 12.8}, "query": {"median_ms": 2.71, "p99_ms": 17.0}}
    rows = bench.results_rows(Path("bench_data/bench.jsonl"), results, scale)
    assert rows[0]["increments_total_seconds"] == 0.93 and rows[0]["pair_recall"] == [0.99] * 4
    assert "pair_precision" not in rows[1]  # Bloom reports no pairs
    assert rows[2]["later_add_seconds"] == [3.0, 3.9] and rows[2]["tool"] == "gpudedup"
    data = script("bench_results", monkeypatch).record(tmp_path / "i.json", "bench_index", rows,
                                                        key=("tool", "scale"))
    page = "\n".join(render["index.json"](data))
    assert "| gpudedup `Index` | 2.58 s | 0.24 / 0.22 / 0.23 / 0.24 s | 0.93 s | 2.50 ms |" in page
    assert "| each later add | 3.0-3.9 s |" in page


def test_bench_tokens_results(monkeypatch, tmp_path, render):
    bench = script("bench_tokens", monkeypatch)
    job = {"shingle": "token", "ngram": 8, "seconds": 11.9, "peak_rss_mb": 2403.0, "bands": 16, "rows": 6,
           "candidate_pairs": 65104, "verified_pairs": 9000, "identical_copies": 10, "clusters": 5, "removed": 5,
           "stages": {}, "truth_pairs": 9258, "truth_seconds": 1.0, "precision": 1.0, "recall": 0.9995,
           "pairs_shared_with_word": 7947, "truth_shared_with_word": 7951, "pairs_reported": 9253}
    rows = bench.results_rows(Path("bench_data/bench.jsonl"), 0.8, [job])
    assert rows[0]["corpus"] == "bench_data/bench.jsonl" and rows[0]["pairs_reported"] == 9253
    data = script("bench_results", monkeypatch).record(tmp_path / "k.json", "bench_tokens", rows,
                                                        key=("corpus", "shingle", "ngram", "threshold"))
    assert "| token 8-grams | 11.9 s | 2,403 MB | 16 × 6 | 65,104 | 9,253 | 9,258 |" in "\n".join(
        render["tokens.json"](data))
