"""The command line on good input (typer CliRunner on gpudedup.cli.app): the outputs it writes,
ids, formats, overwriting, a failed write, help, version and the demo."""

from __future__ import annotations

import gzip
import os
import traceback
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpudedup
from gpudedup.cli import app

from cli_support import (CLUSTERS, PAIRS, REMOVED_ROWS, happy_records, invoke, leftovers, runner, tree_snapshot,
                         word_jaccard, write_jsonl)
from output_support import kept_files, kept_lines, read_clusters, read_kept, read_pairs


def test_planted_pairs_are_well_above_threshold():
    records = happy_records()
    for i, j in PAIRS:
        assert word_jaccard(records[i - 1]["text"], records[j - 1]["text"]) == pytest.approx(55 / 57)
    for i in range(8):
        for j in range(i + 1, 8):
            if (i + 1, j + 1) not in PAIRS:
                assert word_jaccard(records[i]["text"], records[j]["text"]) < 0.1


# --- happy path ---------------------------------------------------------------------------------


def test_dedup_writes_all_outputs(happy, output_names):
    records = happy_records()
    result = invoke("dedup", "data.jsonl", "-o", "out", "--quiet")
    assert result.exit_code == 0, result.output
    out = happy / "out"
    assert sorted(p.name for p in out.iterdir()) == output_names

    # deduplicated: every input column, input order, duplicates removed
    dedup = read_kept(out)
    assert dedup.column_names == ["text", "n", "tag", "score"]
    expected = [r for line, r in enumerate(records, 1) if line not in REMOVED_ROWS]
    assert dedup.to_pylist() == expected
    assert pa.types.is_integer(dedup.schema.field("n").type)
    assert pa.types.is_floating(dedup.schema.field("score").type)

    # clusters: (id, cluster, keep), one kept document (the first) per cluster
    clusters = read_clusters(out)
    assert clusters.column_names == ["id", "cluster", "keep", "kept_id"]
    rows = clusters.to_pylist()
    groups: dict = {}
    for row in rows:
        groups.setdefault(row["cluster"], []).append(row)
    found = sorted(({int(r["id"].rsplit(":", 1)[1]) for r in g} for g in groups.values()), key=min)
    assert found == CLUSTERS
    for members in groups.values():
        kept = [m["id"] for m in members if m["keep"]]
        assert len(kept) == 1
        assert kept[0] == min(members, key=lambda m: int(m["id"].rsplit(":", 1)[1]))["id"]
    assert {r["id"] for r in rows if not r["keep"]} == {f"data.jsonl:{i}" for i in REMOVED_ROWS}

    # pairs: id_a < id_b, exact Jaccard >= threshold
    pairs = read_pairs(out)
    assert pairs.column_names == ["id_a", "id_b", "jaccard"]
    got = set()
    for row in pairs.to_pylist():
        assert row["id_a"] < row["id_b"]
        assert row["jaccard"] >= 0.8
        assert row["jaccard"] == pytest.approx(55 / 57)
        got.add((int(row["id_a"].rsplit(":", 1)[1]), int(row["id_b"].rsplit(":", 1)[1])))
    assert got == PAIRS

    report = json.loads((out / "report.json").read_text())
    assert report["input"]["documents"] == 8
    assert report["input"]["empty_documents"] == 0
    assert report["input"]["null_texts"] == 0
    p = report["parameters"]
    assert isinstance(p["bands"], int) and isinstance(p["rows"], int)
    assert 1 <= p["bands"] * p["rows"] <= 128
    r = report["results"]
    assert r["candidate_pairs"] >= r["verified_pairs"] == 4
    assert r["clusters"] == 2
    assert r["removed_documents"] == 3
    stages = report["stages"]
    assert {"read", "candidates", "verify", "cluster", "write"} <= set(stages), stages
    for name in ["read", "candidates", "verify", "cluster", "write"]:
        assert isinstance(stages[name]["seconds"], (int, float)) and stages[name]["seconds"] >= 0, name
    for name, stage in stages.items():
        # sub-stages that overlap on threads may report busy_seconds instead
        seconds = stage.get("seconds", stage.get("busy_seconds"))
        assert isinstance(seconds, (int, float)) and seconds >= 0, (name, stage)
    assert leftovers(happy) == []


def test_dedup_summary_and_progress_without_quiet(happy):
    result = invoke("dedup", "data.jsonl", "-o", "out")
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert "clusters" in result.output
    assert (happy / "out" / "report.json").is_file()


def test_dedup_default_ids_are_path_and_line(happy):
    # blank lines move the line numbers
    records = happy_records()[:3]
    (happy / "gaps.jsonl").write_text(
        json.dumps(records[0]) + "\n\n" + json.dumps(records[1]) + "\n\n\n" + json.dumps(records[2]) + "\n")
    result = invoke("dedup", "gaps.jsonl", "-o", "out", "-q")
    assert result.exit_code == 0, result.output
    pairs = read_pairs(happy / "out").to_pylist()
    assert [(p["id_a"], p["id_b"]) for p in pairs] == [("gaps.jsonl:1", "gaps.jsonl:6")]


def test_dedup_with_id_field(happy):
    records = [{"uid": f"doc-{i}", **r} for i, r in enumerate(happy_records())]
    write_jsonl(happy / "ided.jsonl", records)
    result = invoke("dedup", "ided.jsonl", "-o", "out", "-q", "--id-field", "uid")
    assert result.exit_code == 0, result.output
    clusters = read_clusters(happy / "out")
    assert set(clusters["id"].to_pylist()) == {"doc-0", "doc-2", "doc-3", "doc-4", "doc-6"}
    pairs = read_pairs(happy / "out").to_pylist()
    assert {(p["id_a"], p["id_b"]) for p in pairs} == {
        ("doc-0", "doc-2"), ("doc-3", "doc-4"), ("doc-3", "doc-6"), ("doc-4", "doc-6")}


def test_dedup_format_jsonl_round_trips(happy):
    records = happy_records()
    result = invoke("dedup", "data.jsonl", "-o", "out", "-q", "--format", "jsonl")
    assert result.exit_code == 0, result.output
    out = happy / "out"
    assert [p.name for p in kept_files(out)] == ["data.jsonl"]
    lines = kept_lines(out)
    assert [json.loads(line) for line in lines] == [
        r for line, r in enumerate(records, 1) if line not in REMOVED_ROWS]
    assert (out / "clusters" / "part-00000.parquet").is_file() and (out / "pairs" / "part-00000.parquet").is_file()
    assert json.loads((out / "report.json").read_text())["results"]["removed_documents"] == 3


def test_dedup_directory_of_mixed_formats(in_tmp):
    records = happy_records()
    d = in_tmp / "corpus"
    write_jsonl(d / "a.jsonl", records[:3])
    pq.write_table(pa.Table.from_pylist(records[3:5]), d / "b.parquet")
    (d / "c.jsonl.gz").write_bytes(gzip.compress(
        "".join(json.dumps(r) + "\n" for r in records[5:7]).encode()))
    (d / "d.txt").write_text(records[7]["text"], encoding="utf-8")
    (d / "notes.md").write_text("ignored")
    result = invoke("dedup", "corpus", "-o", "out", "-q")
    assert result.exit_code == 0, result.output
    report = json.loads((in_tmp / "out" / "report.json").read_text())
    assert report["input"]["documents"] == 8
    assert report["results"]["removed_documents"] == 3
    assert any(s.endswith("notes.md") for s in report["input"]["skipped_files"])
    removed = {r["id"] for r in read_clusters(in_tmp / "out").to_pylist()
               if not r["keep"]}
    assert removed == {"corpus/a.jsonl:3", "corpus/b.parquet:2", "corpus/c.jsonl.gz:2"}


def test_dedup_null_text_allowed_and_missing_text_an_error(happy):
    """A null text is an empty document; a record without its text field is a bad record: it
    stops the run with its line, or under --on-error skip is left out and listed."""
    nulls = [{"text": None, "n": 8, "tag": "t8", "score": 8.5}, {"text": None, "n": 9, "tag": "t9", "score": 9.5}]
    write_jsonl(happy / "nulls.jsonl", happy_records() + nulls)
    result = invoke("dedup", "nulls.jsonl", "-o", "out", "-q")
    assert result.exit_code == 0, result.output
    report = json.loads((happy / "out" / "report.json").read_text())
    assert report["input"]["documents"] == 10
    assert report["input"]["null_texts"] == 2
    assert report["input"]["empty_documents"] == 2
    assert report["results"]["removed_documents"] == 3
    dedup = read_kept(happy / "out")
    assert dedup.num_rows == 7
    assert dedup["text"].to_pylist()[-2:] == [None, None]

    write_jsonl(happy / "missing.jsonl", happy_records() + [nulls[0], {"n": 9, "tag": "t9", "score": 9.5}])
    stopped = invoke("dedup", "missing.jsonl", "-o", "out2", "-q")
    assert stopped.exit_code == 2
    assert stopped.output.startswith("error: missing.jsonl:10: no field 'text'")
    assert not (happy / "out2").exists()
    skipped = invoke("dedup", "missing.jsonl", "-o", "out3", "-q", "--on-error", "skip")
    assert skipped.exit_code == 0, skipped.output
    errors = [json.loads(line) for line in (happy / "out3" / "errors.jsonl").read_text().splitlines()]
    assert [(error["file"], error["line"]) for error in errors] == [("missing.jsonl", 10)]
    assert json.loads((happy / "out3" / "report.json").read_text())["input"]["documents"] == 9


def test_dedup_char_shingles_and_explicit_banding(happy):
    result = invoke("dedup", "data.jsonl", "-o", "out", "-q", "--shingle", "char", "--ngram", "4",
                    "--bands", "20", "--rows", "5", "--threshold", "0.9", "--keep", "longest")
    assert result.exit_code == 0, result.output
    report = json.loads((happy / "out" / "report.json").read_text())
    assert report["parameters"]["bands"] == 20 and report["parameters"]["rows"] == 5
    assert report["parameters"]["shingle"] == "char" and report["parameters"]["ngram"] == 4
    assert report["results"]["clusters"] == 2
    for row in read_pairs(happy / "out").to_pylist():
        assert row["jaccard"] >= 0.9


def test_overwrite_replaces_non_empty_output(happy, output_names):
    """--overwrite replaces an earlier output whole (here its errors.jsonl and removed rows,
    which the new run does not write); a folder that is no gpudedup output, or an output that
    holds someone's files too, it refuses (tests/test_output_safety.py)."""
    out = happy / "out"
    assert invoke("dedup", "data.jsonl", "-o", "out", "-q", "--write-removed").exit_code == 0
    (out / "errors.jsonl").write_text("old")
    result = invoke("dedup", "data.jsonl", "-o", "out", "-q", "--overwrite")
    assert result.exit_code == 0, result.output
    assert not (out / "errors.jsonl").exists() and not (out / "removed").exists()
    assert sorted(p.name for p in out.iterdir()) == output_names
    assert leftovers(happy) == []


def test_empty_existing_output_dir_is_fine(happy):
    (happy / "out").mkdir()
    result = invoke("dedup", "data.jsonl", "-o", "out", "-q")
    assert result.exit_code == 0, result.output
    assert (happy / "out" / "report.json").is_file()
    assert leftovers(happy) == []


def test_failed_write_leaves_no_temporary_directory_and_old_output(happy, monkeypatch):
    out = happy / "out"
    out.mkdir()
    (out / "previous.txt").write_text("previous run")
    (out / ".gpudedup-output").write_text('{"written_by": "gpudedup"}')  # an output of ours
    before = tree_snapshot(out)

    import gpudedup.results.result

    def broken(table, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(gpudedup.results.result, "write_parquet", broken)
    result = invoke("dedup", "data.jsonl", "-o", "out", "-q", "--overwrite")
    assert result.exit_code != 0
    assert tree_snapshot(out) == before
    assert leftovers(happy) == []



# --- help, version, demo ------------------------------------------------------------------------


def test_help():
    result = runner.invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "dedup" in result.output and "demo" in result.output
    assert "--version" in result.output


def test_no_arguments_shows_help():
    result = runner.invoke(app, [], env={"COLUMNS": "200"})
    assert result.exit_code in (0, 2)
    assert "dedup" in result.output and "demo" in result.output


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert gpudedup.__version__ in result.output


def test_dedup_help():
    result = runner.invoke(app, ["dedup", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for option in ["--output", "--threshold", "--shingle", "--ngram", "--num-perm", "--bands",
                   "--rows", "--id-field", "--text-field", "--keep", "--format", "--overwrite",
                   "--backend", "--quiet"]:
        assert option in result.output, option


def test_demo_help():
    result = runner.invoke(app, ["demo", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "--output" in result.output and "--backend" in result.output


def test_demo(in_tmp):
    result = invoke("demo", "-o", "demo-out")
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    out = in_tmp / "demo-out"
    report = json.loads((out / "report.json").read_text())
    assert report["input"]["documents"] > 0
    assert report["results"]["clusters"] > 0
    assert report["results"]["removed_documents"] > 0
    clusters = read_clusters(out)
    assert clusters.num_rows >= 2 * report["results"]["clusters"]
    assert read_kept(out).num_rows == (
        report["input"]["documents"] - report["results"]["removed_documents"])
    assert "Largest clusters" in result.output
    assert leftovers(in_tmp, "demo-out") == []


@pytest.mark.parametrize("where", ["in memory", "work directory"])
def test_a_run_lists_its_input_folder_once(tmp_path, monkeypatch, where):
    # One scan of the inputs serves the checks of where the run writes, the output names and
    # the reading: on object storage each listing is a request, on a large tree a walk.
    shards = tmp_path / "shards"
    (shards / "sub").mkdir(parents=True)
    write_jsonl(shards / "a.jsonl", happy_records()[:4])
    write_jsonl(shards / "sub" / "b.jsonl", happy_records()[4:])
    listed: list[str] = []
    real_scandir = os.scandir
    package = os.path.dirname(gpudedup.__file__)

    def counting_scandir(path="."):
        # The run's listings only (the conservation checks of conftest.py walk the inputs too).
        if os.path.realpath(path) == str(shards.resolve()) and \
                traceback.extract_stack()[-2].filename.startswith(package):
            listed.append(str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", counting_scandir)
    monkeypatch.chdir(tmp_path)
    extra = ["--work-dir", "work"] if where == "work directory" else []
    result = invoke("dedup", "shards", "-o", "out", "--quiet", *extra)
    assert result.exit_code == 0, result.output
    assert len(read_kept(tmp_path / "out")) == 8 - len(REMOVED_ROWS)
    assert len(listed) == 1, listed
