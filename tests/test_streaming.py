"""The staged run (--work-dir, engine/disk.py): the same results as the in-memory run on the same
files, resume after interruptions (real runs killed with SIGKILL), and the work directory's
refusals."""

from __future__ import annotations

import gzip
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import gpudedup
from gpudedup.cli import app
from gpudedup.errors import OutputError, ParameterError

SAMPLE = Path(__file__).resolve().parents[1] / "gpudedup" / "data" / "bible_sample.jsonl.gz"


def sample_records() -> list[dict]:
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def write_shards(root: Path, records: list[dict], shards: int) -> Path:
    """The records cut into ``shards`` JSONL files, the last one as Parquet with an extra column."""
    root.mkdir(parents=True, exist_ok=True)
    size = -(-len(records) // shards)
    for i in range(shards):
        part = records[i * size:(i + 1) * size]
        if i == shards - 1:
            table = pa.Table.from_pylist([{**r, "extra": n} for n, r in enumerate(part)])
            pq.write_table(table, root / f"part-{i:03d}.parquet")
        else:
            (root / f"part-{i:03d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part), encoding="utf-8")
    return root


def assert_same_results(memory, staged) -> None:
    assert staged.pairs.equals(memory.pairs)
    assert staged.clusters.equals(memory.clusters)
    np.testing.assert_array_equal(staged.keep, memory.keep)
    for section in ("input", "results", "balance"):
        assert staged.report[section] == memory.report[section], section
    assert staged.skipped_records == memory.skipped_records


def test_staged_run_equals_the_in_memory_run(tmp_path):
    records = sample_records()
    # Odd documents: a null text, an empty one, copies of a text in different shards.
    records[5]["text"] = None
    records[6]["text"] = ""
    for i in (100, 900, 1500):
        records[i]["text"] = records[50]["text"]
    corpus = write_shards(tmp_path / "in", records, 5)
    (corpus / "part-empty.jsonl").write_text("")
    memory = gpudedup.dedup(corpus, backend="cpu", threshold=0.7)
    staged = gpudedup.dedup(corpus, backend="cpu", threshold=0.7, work_dir=tmp_path / "work", batch_bytes=20_000)
    assert_same_results(memory, staged)
    assert staged.report["results"]["identical_copies"] >= 3
    assert staged.deduplicated.equals(memory.deduplicated)
    for fmt in ("parquet", "jsonl"):
        memory.write(tmp_path / f"m-{fmt}", format=fmt)
        staged.write(tmp_path / f"s-{fmt}", format=fmt)
    assert pq.read_table(tmp_path / "s-parquet" / "deduplicated.parquet").equals(
        pq.read_table(tmp_path / "m-parquet" / "deduplicated.parquet"))
    assert (tmp_path / "s-jsonl" / "deduplicated.jsonl").read_bytes() == \
        (tmp_path / "m-jsonl" / "deduplicated.jsonl").read_bytes()
    for name in ("clusters.parquet", "pairs.parquet"):
        assert (tmp_path / "s-parquet" / name).read_bytes() == (tmp_path / "m-parquet" / name).read_bytes()
    assert (tmp_path / "s-parquet" / "report.html").exists()


def test_staged_run_skips_bad_records_like_the_in_memory_run(tmp_path):
    corpus = write_shards(tmp_path / "in", sample_records()[:400], 3)
    with open(corpus / "part-000.jsonl", "a", encoding="utf-8") as handle:
        handle.write("{not json\n")
    (corpus / "part-broken.parquet").write_bytes(b"PAR1 this is not parquet")
    memory = gpudedup.dedup(corpus, backend="cpu", on_error="skip")
    staged = gpudedup.dedup(corpus, backend="cpu", on_error="skip", work_dir=tmp_path / "work")
    assert len(staged.skipped_records) == 2
    assert_same_results(memory, staged)
    with pytest.raises(gpudedup.InputError, match="part-000.jsonl:"):
        gpudedup.dedup(corpus, backend="cpu", work_dir=tmp_path / "work-stop")


def test_resume_reuses_every_finished_stage(tmp_path, monkeypatch):
    corpus = write_shards(tmp_path / "in", sample_records(), 4)
    first = gpudedup.dedup(corpus, backend="cpu", work_dir=tmp_path / "work")
    from gpudedup.engine import disk, job

    def must_not_run(*args, **kwargs):
        raise AssertionError("a finished stage ran again")

    monkeypatch.setattr(disk, "signature_pass", must_not_run)
    for name in ("identical_copies", "candidate_pairs", "plausible"):
        monkeypatch.setattr(job, name, must_not_run)
    again = gpudedup.dedup(corpus, backend="cpu", work_dir=tmp_path / "work", resume=True)
    assert_same_results(first, again)


def test_the_work_directory_belongs_to_one_run(tmp_path):
    corpus = write_shards(tmp_path / "in", sample_records()[:300], 2)
    work = tmp_path / "work"
    gpudedup.dedup(corpus, backend="cpu", work_dir=work)
    with pytest.raises(ParameterError, match="pass --resume"):
        gpudedup.dedup(corpus, backend="cpu", work_dir=work)
    with pytest.raises(ParameterError, match="threshold was 0.8, now 0.7"):
        gpudedup.dedup(corpus, backend="cpu", work_dir=work, resume=True, threshold=0.7)
    # Batch sizes change how the work is cut, not its results: a resume may change them.
    gpudedup.dedup(corpus, backend="cpu", work_dir=work, resume=True, batch_bytes=4096)
    with open(corpus / "part-000.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"text": "one more document"}) + "\n")
    with pytest.raises(ParameterError, match="input files differ"):
        gpudedup.dedup(corpus, backend="cpu", work_dir=work, resume=True)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ParameterError, match="not a gpudedup work directory"):
        gpudedup.dedup(corpus, backend="cpu", work_dir=tmp_path / "other")
    with pytest.raises(OutputError, match="work directory must not be"):
        gpudedup.dedup(corpus, backend="cpu", work_dir=corpus / "work")
    with pytest.raises(ParameterError, match="resume needs a work_dir"):
        gpudedup.dedup(corpus, backend="cpu", resume=True)
    with pytest.raises(ParameterError, match="runs over files"):
        gpudedup.dedup(["a text", "another"], backend="cpu", work_dir=tmp_path / "w3")


def cli(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import sys; from gpudedup.cli import main; sys.exit(main())",
                             *args], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_a_run_killed_at_random_points_resumes_to_identical_output(tmp_path):
    records = sample_records()
    rng = random.Random(11)
    # 16 shards of the sample with edited copies, so that there is work in every stage.
    edited = []
    for copy in range(3):
        for record in records:
            words = (record["text"] or "").split()
            if words and copy:
                words[rng.randrange(len(words))] = "edited"
            edited.append({"id": f"{copy}:{record['id']}", "text": " ".join(words)})
    corpus = write_shards(tmp_path / "in", edited, 16)
    options = ["--id-field", "id", "--backend", "cpu", "-q", "--batch-bytes", "20000"]
    reference = cli("dedup", str(corpus), "-o", str(tmp_path / "reference"), "--work-dir",
                    str(tmp_path / "work-reference"), *options, cwd=tmp_path)
    assert reference.wait(timeout=120) == 0, reference.stderr.read()
    started = time.monotonic()
    kills = 0
    for attempt, delay in enumerate([0.5, 1.0, 1.5, 2.0, 3.0]):
        run = cli("dedup", str(corpus), "-o", str(tmp_path / "out"), "--work-dir", str(tmp_path / "work"),
                  "--resume", *options, cwd=tmp_path)
        time.sleep(delay)
        if run.poll() is None:
            run.send_signal(signal.SIGKILL)
            kills += 1
        run.wait(timeout=60)
        if run.returncode == 0:
            break
        assert not (tmp_path / "out").exists(), "a killed run left an output"
    else:
        final = cli("dedup", str(corpus), "-o", str(tmp_path / "out"), "--work-dir", str(tmp_path / "work"),
                    "--resume", *options, cwd=tmp_path)
        assert final.wait(timeout=120) == 0, final.stderr.read()
    assert kills >= 1, f"every run finished before its signal ({time.monotonic() - started:.1f} s)"
    for name in ("deduplicated.parquet", "clusters.parquet", "pairs.parquet"):
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "reference" / name).read_bytes(), name
    assert not list((tmp_path / "work").glob(".tmp-*")), "temporary files left in the work directory"


def test_max_memory_is_checked_before_each_shard(tmp_path):
    from gpudedup.errors import MemoryLimitError

    corpus = write_shards(tmp_path / "in", sample_records(), 2)
    with pytest.raises(MemoryLimitError, match=r"--max-memory 150 MiB: reading .*part-000.jsonl needs about"):
        gpudedup.dedup(corpus, backend="cpu", work_dir=tmp_path / "work", max_memory="150M")
    assert not (tmp_path / "work" / "shards").exists()
    assert gpudedup.dedup(corpus, backend="cpu", work_dir=tmp_path / "work2", max_memory="4G").report["balance"]["balanced"]
