"""The conservation checker (conservation.py) itself: it passes real runs (in process, and a
CLI run in a subprocess checked from another working directory) and catches doctored ones -- a
kept row dropped from deduplicated.*, a record missing from the count, a whole file a run left
out of its report, a removed document without its kept one, a skipped record counted twice --
and it refuses a report that does not say how the input was read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import gpudedup
from gpudedup.cli import app

from conservation import (ConservationError, check_output_dir, check_reading_as_asked, check_result, is_empty,
                          read_file_records)
from output_support import kept_files, read_clusters
from stage_events import cli_process, finish

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


@pytest.fixture(scope="module")
def written_once(tmp_path_factory) -> Path:
    """A real run's output directory (CLI in process, ids from the files' paths and lines), made
    once for the tests that check it or doctor a copy of it (copy_to_doctor)."""
    root = tmp_path_factory.mktemp("written")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        write_corpus(root)
        result = CliRunner().invoke(app, ["dedup", "corpus", "-o", "out", "-q", "--backend", "cpu",
                                          "--threshold", "0.7", "--ngram", "3"])
    assert result.exit_code == 0, result.output
    report = json.loads((root / "out" / "report.json").read_text())
    assert report["results"]["removed_documents"] == 2 and report["input"]["empty_documents"] == 2
    return root / "out"


@pytest.fixture
def written(written_once, monkeypatch) -> Path:
    """written_once, with its run's working directory as the test's."""
    monkeypatch.chdir(written_once.parent)
    return written_once


@pytest.fixture
def copy_to_doctor() -> Iterator[Callable[[Path], Path]]:
    """copy(out): a copy of the output directory ``out`` beside it, for a test to doctor,
    removed afterwards: conftest checks every output directory left under pytest's temporary
    directories, and would fail the test."""
    copies: list[Path] = []

    def copy(out: Path) -> Path:
        copies.append(out.parent / f"doctored-{len(copies)}")
        shutil.copytree(out, copies[-1])
        return copies[-1]

    yield copy
    for made in copies:
        shutil.rmtree(made)


@pytest.fixture
def doctored(written, copy_to_doctor) -> Path:
    """A copy of ``written`` to doctor."""
    return copy_to_doctor(written)


def test_real_run_passes(written, monkeypatch):
    check_output_dir(written)
    monkeypatch.chdir(written.parent / "corpus")  # report.json alone says where the input is
    check_output_dir(written)


def test_a_kept_row_dropped_from_deduplicated_is_caught(written, doctored):
    out = doctored
    first = kept_files(out)[0]
    pq.write_table(pq.read_table(first).slice(1), first)
    with pytest.raises(ConservationError, match="deduplicated holds 3 rows; 4 input records"):
        check_output_dir(out)


def test_a_kept_row_written_into_another_files_output_is_caught(written, doctored):
    """The rows in input order are unchanged; only the file boundary moved."""
    first, second = kept_files(doctored)
    a, b = pq.read_table(first), pq.read_table(second)
    moved = a.slice(a.num_rows - 1).cast(b.schema) if a.schema != b.schema else a.slice(a.num_rows - 1)
    pq.write_table(a.slice(0, a.num_rows - 1), first)
    pq.write_table(pa.concat_tables([moved, b]), second)
    with pytest.raises(ConservationError, match="the output file of corpus/a.jsonl holds"):
        check_output_dir(doctored)


def test_a_record_missing_from_the_count_is_caught(written, doctored):
    out = doctored
    report = json.loads((out / "report.json").read_text())
    # What a reader that dropped one kept record would report: one document fewer, balanced.
    report["input"]["documents"] -= 1
    report["input"]["files"][0]["documents"] -= 1
    report["results"]["kept_documents"] -= 1
    report["balance"]["input_records"] -= 1
    report["balance"]["kept"] -= 1
    first = kept_files(out)[0]
    pq.write_table(pq.read_table(first).slice(1), first)
    (out / "report.json").write_text(json.dumps(report))
    with pytest.raises(ConservationError) as caught:
        check_output_dir(out)
    message = str(caught.value)
    assert "report input.documents = 5, recounted 6" in message
    assert "corpus/a.jsonl has 3 documents, recounted 4" in message


def test_a_removed_document_without_its_kept_one_is_caught(written, doctored):
    out = doctored
    clusters = read_clusters(out).to_pylist()
    removed = next(row for row in clusters if not row["keep"])
    removed["kept_id"] = removed["id"].replace(":", ":9")  # names no document of its cluster
    shutil.rmtree(out / "clusters")
    pq.write_table(pa.Table.from_pylist(clusters), out / "clusters.parquet")
    with pytest.raises(ConservationError, match="which is not the kept document of its cluster"):
        check_output_dir(out)


def test_a_record_both_kept_and_skipped_is_caught(written, doctored):
    out = doctored
    (out / "errors.jsonl").write_text(json.dumps({"file": "corpus/a.jsonl", "line": 1, "reason": "x"}) + "\n")
    with pytest.raises(ConservationError, match="deduplicated holds 4 rows; 3 input records"):
        check_output_dir(out)


def test_skipped_records_are_accounted_for(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    corpus = write_corpus(tmp_path)
    with (corpus / "a.jsonl").open("a") as file:
        file.write("{not json\n")
    (corpus / "bad.txt").write_bytes(b"\xff\xfe not utf-8")
    result = gpudedup.dedup(corpus, id_field=None, on_error="skip", backend="cpu", threshold=0.7, ngram=3)
    assert len(result.skipped_records) == 2
    result.write(tmp_path / "out")
    check_output_dir(tmp_path / "out")
    errors = tmp_path / "out" / "errors.jsonl"
    lines = errors.read_text().splitlines()
    errors.write_text(lines[0] + "\n")  # one skip forgotten
    try:
        with pytest.raises(ConservationError, match="recounted"):
            check_output_dir(tmp_path / "out")
    finally:
        errors.write_text("\n".join(lines) + "\n")


def test_in_memory_result_with_a_lost_row_is_caught():
    texts = [BASE, BASE + " today", "something else entirely here", ""]
    result = gpudedup.dedup(texts, backend="cpu", threshold=0.7, shingle="char", ngram=3)
    check_result(result, texts)
    with pytest.raises(ConservationError, match="5 input records"):
        check_result(result, [*texts, "a fifth text the run never saw"])


# --- a CLI run in a subprocess: report.json alone says how to read its input again --------------

# The last file read, holding one document that is kept and in no cluster: dropping it changes
# no cluster, only the counts and the last kept row, which a doctored report can follow.
LONE = {"id": "g", "text": "a lone lighthouse keeper writes letters to ships that never answer"}


@pytest.fixture(scope="module")
def subprocess_run(tmp_path_factory) -> Path:
    """The output directory of ``gpudedup dedup corpus -o out --on-error skip`` run in a
    subprocess in a folder ``run`` over write_corpus's files, a file of invalid UTF-8 (skipped
    as a whole) and c.jsonl (LONE); files named relative to that directory. Made once for the
    tests that check it or doctor a copy of it (copy_to_doctor)."""
    where = tmp_path_factory.mktemp("subprocess") / "run"
    where.mkdir()
    corpus = write_corpus(where)
    (corpus / "bad.txt").write_bytes(b"\xff\xfe not utf-8")
    (corpus / "c.jsonl").write_text(json.dumps(LONE) + "\n")
    run = cli_process(["dedup", "corpus", "-o", "out", "-q", "--backend", "cpu", "--threshold", "0.7",
                       "--ngram", "3", "--on-error", "skip"], where)
    stderr = finish(run)
    assert run.returncode == 0, stderr
    report = json.loads((where / "out" / "report.json").read_text())
    assert [f["path"] for f in report["input"]["files"]] == ["corpus/a.jsonl", "corpus/b.parquet", "corpus/c.jsonl"]
    assert report["input"]["skipped_records"] == 1 and report["results"]["removed_documents"] == 2
    return where / "out"


def drop_lone_record(out: Path, whole_file: bool) -> None:
    """Doctor ``out`` into what a reader that dropped LONE would write, every count following:
    with c.jsonl still listed (0 documents), or (whole_file) without c.jsonl at all."""
    report = json.loads((out / "report.json").read_text())
    files = report["input"]["files"]
    assert files[-1]["path"] == "corpus/c.jsonl" and files[-1]["documents"] == 1
    last = kept_files(out)[-1]  # c.jsonl's kept rows: LONE alone
    assert pq.read_table(last)["text"].to_pylist() == [LONE["text"]]
    if whole_file:  # no c.jsonl: no output file for it either
        files.pop()
        report["output"]["kept_files"].pop()
        last.unlink()
    else:
        files[-1]["documents"] = 0
        pq.write_table(pq.read_table(last).slice(0, 0), last)
    report["input"]["documents"] -= 1
    report["input"]["text_bytes"] -= len(LONE["text"].encode())
    report["results"]["kept_documents"] -= 1
    report["balance"]["input_records"] -= 1
    report["balance"]["kept"] -= 1
    (out / "report.json").write_text(json.dumps(report))


def problems(error: pytest.ExceptionInfo) -> list[str]:
    """The problems a ConservationError lists, one a line."""
    return [line.strip() for line in str(error.value).splitlines()[1:]]


def test_a_subprocess_run_is_checked_from_its_report_alone(subprocess_run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not the run's working directory: nothing depends on it
    check_output_dir(subprocess_run)


def test_a_file_a_subprocess_run_left_out_is_caught(subprocess_run, copy_to_doctor):
    out = copy_to_doctor(subprocess_run)
    drop_lone_record(out, whole_file=True)
    with pytest.raises(ConservationError) as caught:
        check_output_dir(out)
    # Every count follows the dropped file: only the checker's own walk of the inputs sees it.
    lone = subprocess_run.parent / "corpus" / "c.jsonl"
    assert problems(caught) == [f"{lone}: an input file under {lone.parent} that the run neither read nor skipped"]


def test_a_record_a_subprocess_run_dropped_is_caught(subprocess_run, copy_to_doctor):
    out = copy_to_doctor(subprocess_run)
    drop_lone_record(out, whole_file=False)
    with pytest.raises(ConservationError) as caught:
        check_output_dir(out)
    found = problems(caught)
    assert "report input.documents = 6, recounted 7" in found
    assert "report: corpus/c.jsonl has 0 documents, recounted 1" in found
    assert "deduplicated holds 4 rows; 5 input records are neither removed nor skipped" in found


def test_a_report_that_does_not_say_how_the_input_was_read_is_refused(subprocess_run, copy_to_doctor):
    out = copy_to_doctor(subprocess_run)
    report = json.loads((out / "report.json").read_text())
    del report["parameters"]["text_field"]
    del report["input"]["files"][1]["absolute_path"]
    (out / "report.json").write_text(json.dumps(report))
    with pytest.raises(ConservationError, match=r"lacks parameters\.text_field, input\.files\[1\]\.absolute_path "
                                                r"\(corpus/b\.parquet\): this version of gpudedup writes them"):
        check_output_dir(out)


def test_a_report_must_state_the_reading_asked_for(tmp_path):
    corpus = write_corpus(tmp_path)
    result = gpudedup.dedup(corpus, backend="cpu", id_field="id", threshold=0.7, ngram=3)
    check_reading_as_asked(result.report, "text", "id", "stop", [corpus])
    with pytest.raises(ConservationError, match="the run was asked for"):
        check_reading_as_asked(result.report, "text", None, "stop", [corpus])
    with pytest.raises(ConservationError, match="the run was asked for"):
        check_reading_as_asked(result.report, "text", "id", "stop", [corpus / "a.jsonl"])


def test_the_checkers_reader_counts_records_itself(tmp_path):
    corpus = write_corpus(tmp_path)
    jsonl = read_file_records(corpus / "a.jsonl", "a.jsonl", "text", "id")
    assert [(r.line, r.id) for r in jsonl] == [(1, "a"), (2, "b"), (4, "c"), (5, "d")]  # line 3 is blank
    parquet = read_file_records(corpus / "b.parquet", "b.parquet", "text", None)
    assert [(r.id, r.text) for r in parquet] == [("b.parquet:1", None), ("b.parquet:2", RECORDS[5]["text"])]
    assert is_empty(None) and is_empty(" \u3000\u2028\x0b") and not is_empty("\x1c")  # U+001C is no White_Space
