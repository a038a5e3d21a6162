"""The conservation checker (conservation.py) itself: it passes real runs and catches doctored
ones -- a kept row dropped from deduplicated.*, a record missing from the count, a removed
document without its kept one, a skipped record counted twice."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import gpudedup
from gpudedup.cli import app

from conservation import ConservationError, RunArgs, check_output_dir, check_result, is_empty, read_file_records

BASE = "the quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat"
RECORDS = [
    {"id": "a", "text": BASE},
    {"id": "b", "text": BASE + " today"},  # a near-duplicate of a
    {"id": "c", "text": "an entirely different document about rivers and mountains and the sea"},
    {"id": "d", "text": " \t "},  # empty: white space only
    {"id": "e", "text": None},  # empty: null text
    {"id": "f", "text": "an entirely different document about rivers and mountains and the sea"},  # copy of c
]


def write_corpus(root: Path) -> Path:
    """Two input files (JSONL with a blank line, Parquet) and one .txt; returns the directory."""
    corpus = root / "corpus"
    corpus.mkdir()
    lines = [json.dumps(r) for r in RECORDS[:4]]
    (corpus / "a.jsonl").write_text("\n".join(lines[:2]) + "\n\n" + "\n".join(lines[2:]) + "\n")
    pq.write_table(pa.Table.from_pylist(RECORDS[4:]), corpus / "b.parquet")
    return corpus


@pytest.fixture
def written(tmp_path, monkeypatch) -> Path:
    """A real run's output directory (CLI in process, ids from the files' paths and lines)."""
    monkeypatch.chdir(tmp_path)
    write_corpus(tmp_path)
    result = CliRunner().invoke(app, ["dedup", "corpus", "-o", "out", "-q", "--backend", "cpu",
                                      "--threshold", "0.7", "--ngram", "3"])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["results"]["removed_documents"] == 2 and report["input"]["empty_documents"] == 2
    return tmp_path / "out"


@pytest.fixture
def doctored(written) -> Path:
    """A copy of ``written`` for a test to doctor, removed afterwards: conftest checks every
    output directory left under pytest's temporary directories, and would fail the test."""
    copy = written.parent / "doctored"
    shutil.copytree(written, copy)
    yield copy
    shutil.rmtree(copy)


def test_real_run_passes(written):
    check_output_dir(written, RunArgs(cwd=written.parent))
    check_output_dir(written)  # the working directory found among the output's ancestors


def test_a_kept_row_dropped_from_deduplicated_is_caught(written, doctored):
    out = doctored
    table = pq.read_table(out / "deduplicated.parquet")
    pq.write_table(table.slice(1), out / "deduplicated.parquet")
    with pytest.raises(ConservationError, match="deduplicated holds 3 rows; 4 input records"):
        check_output_dir(out, RunArgs(cwd=written.parent))


def test_a_record_missing_from_the_count_is_caught(written, doctored):
    out = doctored
    report = json.loads((out / "report.json").read_text())
    # What a reader that dropped one kept record would report: one document fewer, balanced.
    report["input"]["documents"] -= 1
    report["input"]["files"][0]["documents"] -= 1
    report["results"]["kept_documents"] -= 1
    report["balance"]["input_records"] -= 1
    report["balance"]["kept"] -= 1
    table = pq.read_table(out / "deduplicated.parquet")
    pq.write_table(table.slice(1), out / "deduplicated.parquet")
    (out / "report.json").write_text(json.dumps(report))
    with pytest.raises(ConservationError) as caught:
        check_output_dir(out, RunArgs(cwd=written.parent))
    message = str(caught.value)
    assert "report input.documents = 5, recounted 6" in message
    assert "corpus/a.jsonl has 3 documents, recounted 4" in message


def test_a_removed_document_without_its_kept_one_is_caught(written, doctored):
    out = doctored
    clusters = pq.read_table(out / "clusters.parquet").to_pylist()
    removed = next(row for row in clusters if not row["keep"])
    removed["kept_id"] = removed["id"].replace(":", ":9")  # names no document of its cluster
    pq.write_table(pa.Table.from_pylist(clusters), out / "clusters.parquet")
    with pytest.raises(ConservationError, match="which is not the kept document of its cluster"):
        check_output_dir(out, RunArgs(cwd=written.parent))


def test_a_record_both_kept_and_skipped_is_caught(written, doctored):
    out = doctored
    (out / "errors.jsonl").write_text(json.dumps({"file": "corpus/a.jsonl", "line": 1, "reason": "x"}) + "\n")
    with pytest.raises(ConservationError, match="deduplicated holds 4 rows; 3 input records"):
        check_output_dir(out, RunArgs(cwd=written.parent))


def test_skipped_records_are_accounted_for(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    corpus = write_corpus(tmp_path)
    with (corpus / "a.jsonl").open("a") as file:
        file.write("{not json\n")
    (corpus / "bad.txt").write_bytes(b"\xff\xfe not utf-8")
    result = gpudedup.dedup(corpus, id_field=None, on_error="skip", backend="cpu", threshold=0.7, ngram=3)
    assert len(result.skipped_records) == 2
    result.write(tmp_path / "out")
    check_output_dir(tmp_path / "out", RunArgs(cwd=tmp_path))
    errors = tmp_path / "out" / "errors.jsonl"
    lines = errors.read_text().splitlines()
    errors.write_text(lines[0] + "\n")  # one skip forgotten
    try:
        with pytest.raises(ConservationError, match="recounted"):
            check_output_dir(tmp_path / "out", RunArgs(cwd=tmp_path))
    finally:
        errors.write_text("\n".join(lines) + "\n")


def test_in_memory_result_with_a_lost_row_is_caught():
    texts = [BASE, BASE + " today", "something else entirely here", ""]
    result = gpudedup.dedup(texts, backend="cpu", threshold=0.7, shingle="char", ngram=3)
    check_result(result, texts, RunArgs())
    with pytest.raises(ConservationError, match="5 input records"):
        check_result(result, [*texts, "a fifth text the run never saw"], RunArgs())


def test_the_checkers_reader_counts_records_itself(tmp_path):
    corpus = write_corpus(tmp_path)
    jsonl = read_file_records(corpus / "a.jsonl", "a.jsonl", "text", "id")
    assert [(r.line, r.id) for r in jsonl] == [(1, "a"), (2, "b"), (4, "c"), (5, "d")]  # line 3 is blank
    parquet = read_file_records(corpus / "b.parquet", "b.parquet", "text", None)
    assert [(r.id, r.text) for r in parquet] == [("b.parquet:1", None), ("b.parquet:2", RECORDS[5]["text"])]
    assert is_empty(None) and is_empty(" \u3000\u2028\x0b") and not is_empty("\x1c")  # U+001C is no White_Space
