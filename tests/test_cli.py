"""The command line (typer CliRunner on gpudedup.cli.app): outputs, user errors, help, demo.

Every bad input must exit with code 2, print one 'error:' line naming the file and line (or the
field / parameter) and what was expected, print no traceback and write nothing.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import string
import subprocess
import sys
from pathlib import Path

import gpudedup

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from gpudedup.cli import app

runner = CliRunner()


# --- helpers ------------------------------------------------------------------------------------


def paragraph(seed: int, words: int = 60) -> str:
    rng = random.Random(seed)
    return " ".join("".join(rng.choice(string.ascii_lowercase) for _ in range(7)) for _ in range(words))


def variant(text: str, last: str) -> str:
    """The same text with its last word replaced: with word 5-grams over 60 words the copies
    share 55 of 57 shingles, J = 55/57 = 0.965."""
    words = text.split()
    words[-1] = last
    return " ".join(words)


def word_jaccard(a: str, b: str, n: int = 5) -> float:
    def grams(t):
        w = t.lower().split()
        return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}
    x, y = grams(a), grams(b)
    return len(x & y) / len(x | y)


def happy_records() -> list[dict]:
    """8 rows; rows 3, 5, 7 (from 1) are planted near-duplicates of rows 1, 4, 4."""
    a, c = paragraph(1), paragraph(3)
    texts = [a, paragraph(2), variant(a, "xxxxxxx"), c, variant(c, "yyyyyyy"), paragraph(4),
             variant(c, "zzzzzzz"), paragraph(5)]
    return [{"text": t, "n": i, "tag": f"t{i}", "score": i + 0.5} for i, t in enumerate(texts)]


REMOVED_ROWS = {3, 5, 7}  # 1-based lines
CLUSTERS = [{1, 3}, {4, 5, 7}]
PAIRS = {(1, 3), (4, 5), (4, 7), (5, 7)}


def write_jsonl(path: Path, records) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def leftovers(parent: Path, name: str = "out") -> list[Path]:
    return sorted(parent.glob(f".{name}.tmp-*")) + sorted(parent.glob(f".{name}.old-*"))


def tree_snapshot(path: Path) -> dict:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def error_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, f"expected one 'error:' line, got:\n{result.output}"
    return lines[0]


def assert_user_error(result, *fragments, out: Path, before: dict | None = None) -> str:
    """Exit 2, one error line holding every fragment, no traceback, nothing written."""
    assert result.exit_code == 2, f"exit {result.exit_code}, output:\n{result.output}\n{result.exception!r}"
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    line = error_line(result)
    for fragment in fragments:
        assert fragment in line, f"{fragment!r} not in {line!r}"
    if before is None:
        assert not out.exists(), f"{out} was written"
    else:
        assert tree_snapshot(out) == before, f"{out} was changed"
    assert leftovers(out.parent, out.name) == []
    return line


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def happy(in_tmp) -> Path:
    write_jsonl(in_tmp / "data.jsonl", happy_records())
    return in_tmp


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
    dedup = pq.read_table(out / "deduplicated.parquet")
    assert dedup.column_names == ["text", "n", "tag", "score"]
    expected = [r for line, r in enumerate(records, 1) if line not in REMOVED_ROWS]
    assert dedup.to_pylist() == expected
    assert pa.types.is_integer(dedup.schema.field("n").type)
    assert pa.types.is_floating(dedup.schema.field("score").type)

    # clusters: (id, cluster, keep), one kept document (the first) per cluster
    clusters = pq.read_table(out / "clusters.parquet")
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
    pairs = pq.read_table(out / "pairs.parquet")
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
    pairs = pq.read_table(happy / "out" / "pairs.parquet").to_pylist()
    assert [(p["id_a"], p["id_b"]) for p in pairs] == [("gaps.jsonl:1", "gaps.jsonl:6")]


def test_dedup_with_id_field(happy):
    records = [{"uid": f"doc-{i}", **r} for i, r in enumerate(happy_records())]
    write_jsonl(happy / "ided.jsonl", records)
    result = invoke("dedup", "ided.jsonl", "-o", "out", "-q", "--id-field", "uid")
    assert result.exit_code == 0, result.output
    clusters = pq.read_table(happy / "out" / "clusters.parquet")
    assert set(clusters["id"].to_pylist()) == {"doc-0", "doc-2", "doc-3", "doc-4", "doc-6"}
    pairs = pq.read_table(happy / "out" / "pairs.parquet").to_pylist()
    assert {(p["id_a"], p["id_b"]) for p in pairs} == {
        ("doc-0", "doc-2"), ("doc-3", "doc-4"), ("doc-3", "doc-6"), ("doc-4", "doc-6")}


def test_dedup_format_jsonl_round_trips(happy):
    records = happy_records()
    result = invoke("dedup", "data.jsonl", "-o", "out", "-q", "--format", "jsonl")
    assert result.exit_code == 0, result.output
    out = happy / "out"
    assert not (out / "deduplicated.parquet").exists()
    lines = (out / "deduplicated.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [
        r for line, r in enumerate(records, 1) if line not in REMOVED_ROWS]
    assert (out / "clusters.parquet").is_file() and (out / "pairs.parquet").is_file()
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
    removed = {r["id"] for r in pq.read_table(in_tmp / "out" / "clusters.parquet").to_pylist()
               if not r["keep"]}
    assert removed == {"corpus/a.jsonl:3", "corpus/b.parquet:2", "corpus/c.jsonl.gz:2"}


def test_dedup_null_and_missing_text_allowed(happy):
    records = happy_records() + [{"text": None, "n": 8, "tag": "t8", "score": 8.5},
                                 {"n": 9, "tag": "t9", "score": 9.5}]
    write_jsonl(happy / "nulls.jsonl", records)
    result = invoke("dedup", "nulls.jsonl", "-o", "out", "-q")
    assert result.exit_code == 0, result.output
    report = json.loads((happy / "out" / "report.json").read_text())
    assert report["input"]["documents"] == 10
    assert report["input"]["null_texts"] == 2
    assert report["input"]["empty_documents"] == 2
    assert report["results"]["removed_documents"] == 3
    dedup = pq.read_table(happy / "out" / "deduplicated.parquet")
    assert dedup.num_rows == 7
    assert dedup["text"].to_pylist()[-2:] == [None, None]


def test_dedup_char_shingles_and_explicit_banding(happy):
    result = invoke("dedup", "data.jsonl", "-o", "out", "-q", "--shingle", "char", "--ngram", "4",
                    "--bands", "20", "--rows", "5", "--threshold", "0.9", "--keep", "longest")
    assert result.exit_code == 0, result.output
    report = json.loads((happy / "out" / "report.json").read_text())
    assert report["parameters"]["bands"] == 20 and report["parameters"]["rows"] == 5
    assert report["parameters"]["shingle"] == "char" and report["parameters"]["ngram"] == 4
    assert report["results"]["clusters"] == 2
    for row in pq.read_table(happy / "out" / "pairs.parquet").to_pylist():
        assert row["jaccard"] >= 0.9


def test_overwrite_replaces_non_empty_output(happy, output_names):
    out = happy / "out"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    result = invoke("dedup", "data.jsonl", "-o", "out", "-q", "--overwrite")
    assert result.exit_code == 0, result.output
    assert not (out / "stale.txt").exists()
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
    before = tree_snapshot(out)

    import gpudedup.result

    def broken(table, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(gpudedup.result, "write_parquet", broken)
    result = invoke("dedup", "data.jsonl", "-o", "out", "-q", "--overwrite")
    assert result.exit_code != 0
    assert tree_snapshot(out) == before
    assert leftovers(happy) == []


# --- bad input: exit 2, file and line, nothing written ------------------------------------------


def test_missing_path(in_tmp):
    result = invoke("dedup", "missing.jsonl", "-o", "out")
    assert_user_error(result, "missing.jsonl", "no such file or directory", out=in_tmp / "out")


def assert_unreadable_reported(exit_code: int, output: str, name: str, where: Path) -> None:
    """Exit 2 without a traceback, naming the file and saying it cannot be read: either
    gpudedup's own 'error:' line or click's check of the argument ('... is not readable')."""
    assert exit_code == 2, output
    assert "Traceback" not in output
    assert name in output, output
    assert "permission denied" in output.lower() or "not readable" in output, output
    assert not (where / "out").exists()
    assert leftovers(where) == []


SETPRIV = shutil.which("setpriv")
DROP_DAC = [SETPRIV or "setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search"]


def without_read_permission(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The CLI in a subprocess that cannot read chmod 000 files: as it is for a user; for root
    (CI runs as root) without CAP_DAC_OVERRIDE, through setpriv, which must be able to drop it."""
    prefix: list[str] = []
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        assert root_can_drop_dac(cwd), "as root this test needs setpriv (util-linux) able to drop CAP_DAC_OVERRIDE"
        prefix = DROP_DAC
    return subprocess.run([*prefix, sys.executable, "-c", "import sys; from gpudedup.cli import main; sys.exit(main())",
                           *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def root_can_drop_dac(tmp_path: Path) -> bool:
    """Root reads chmod 000 files through CAP_DAC_OVERRIDE; without it (setpriv) it cannot."""
    if not (hasattr(os, "geteuid") and os.geteuid() == 0 and SETPRIV):
        return False
    probe = tmp_path / "probe"
    probe.write_text("x")
    probe.chmod(0)
    try:
        done = subprocess.run([*DROP_DAC, "cat", str(probe)], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        probe.chmod(0o644)
        probe.unlink()
    return done.returncode != 0


def write_unreadable(root: Path, name: str) -> Path:
    records = happy_records()
    if name.endswith(".parquet"):
        pq.write_table(pa.Table.from_pylist(records), root / name)
    elif name.endswith(".gz"):
        (root / name).write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode()))
    elif name.endswith(".txt"):
        (root / name).write_text(records[0]["text"])
    else:
        write_jsonl(root / name, records)
    return root / name


@pytest.mark.parametrize("name", ["secret.jsonl", "secret.jsonl.gz", "secret.txt", "secret.parquet"])
def test_unreadable_file(in_tmp, name):
    path = write_unreadable(in_tmp, name)
    path.chmod(0)
    try:
        done = without_read_permission(in_tmp, "dedup", name, "-o", "out", "-q")
    finally:
        path.chmod(0o644)
    assert_unreadable_reported(done.returncode, done.stdout + done.stderr, name, in_tmp)


def test_unreadable_directory(in_tmp):
    write_jsonl(in_tmp / "corpus" / "a.jsonl", happy_records())
    locked = in_tmp / "corpus" / "locked"
    locked.mkdir()
    write_jsonl(locked / "b.jsonl", happy_records())
    locked.chmod(0)
    try:
        done = without_read_permission(in_tmp, "dedup", "corpus", "-o", "out", "-q")
    finally:
        locked.chmod(0o755)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert "Traceback" not in output
    line = [line for line in output.splitlines() if line.startswith("error:")][0]
    assert "locked" in line and "cannot read directory" in line, line
    assert not (in_tmp / "out").exists()


def test_malformed_json_line(in_tmp):
    lines = [json.dumps(r) for r in happy_records()[:3]]
    lines[1] = lines[1][:-1]  # drop the closing brace
    (in_tmp / "bad.jsonl").write_text("\n".join(lines) + "\n")
    result = invoke("dedup", "bad.jsonl", "-o", "out")
    assert_user_error(result, "bad.jsonl:2", "invalid JSON", out=in_tmp / "out")


def test_malformed_json_after_blank_lines_counts_physical_lines(in_tmp):
    good = json.dumps({"text": "a b c"})
    (in_tmp / "bad.jsonl").write_text(f"{good}\n\n\n{good}\n{{oops\n")
    result = invoke("dedup", "bad.jsonl", "-o", "out")
    assert_user_error(result, "bad.jsonl:5", "invalid JSON", out=in_tmp / "out")


@pytest.mark.parametrize("value, kind", [("[1, 2]", "an array"), ('"just a string"', "a string"),
                                         ("42", "a number"), ("true", "a boolean"), ("null", "null")])
def test_json_line_not_an_object(in_tmp, value, kind):
    (in_tmp / "bad.jsonl").write_text(json.dumps({"text": "a b c"}) + "\n" + value + "\n")
    result = invoke("dedup", "bad.jsonl", "-o", "out")
    assert_user_error(result, "bad.jsonl:2", "expected a JSON object", kind, out=in_tmp / "out")


def test_column_with_mixed_types_is_accepted_or_explained(in_tmp):
    """A column other than text/id holding a number in one line and a string in another: Arrow
    cannot hold it, so rejecting is fine, but the message must say where and what."""
    records = happy_records()[:3]
    records[0]["meta"] = 1
    records[1]["meta"] = "one"
    records[2]["meta"] = 2
    write_jsonl(in_tmp / "mixed.jsonl", records)
    result = invoke("dedup", "mixed.jsonl", "-o", "out", "-q")
    assert "Traceback" not in result.output
    if result.exit_code == 0:
        rows = pq.read_table(in_tmp / "out" / "deduplicated.parquet").to_pylist()
        assert [r["text"] for r in rows] == [r["text"] for r in records if r is not records[2]]
    else:
        # the second line is where "meta" changes type (pyarrow's own message says "row 1",
        # counting from 0, which reads as line 1)
        line = assert_user_error(result, "mixed.jsonl:2", out=in_tmp / "out")
        assert "meta" in line, line


def test_all_texts_null_is_allowed(in_tmp):
    write_jsonl(in_tmp / "nulls.jsonl", [{"text": None, "n": 1}, {"n": 2}, {"text": None, "n": 3}])
    result = invoke("dedup", "nulls.jsonl", "-o", "out", "-q")
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    report = json.loads((in_tmp / "out" / "report.json").read_text())
    assert report["input"]["documents"] == 3
    assert report["input"]["null_texts"] == 3
    assert report["results"]["removed_documents"] == 0
    assert pq.read_table(in_tmp / "out" / "deduplicated.parquet")["n"].to_pylist() == [1, 2, 3]


def test_empty_input_file(in_tmp):
    (in_tmp / "empty.jsonl").write_text("")
    result = invoke("dedup", "empty.jsonl", "-o", "out", "-q")
    assert "Traceback" not in result.output
    assert result.exit_code == 0, result.output
    report = json.loads((in_tmp / "out" / "report.json").read_text())
    assert report["input"]["documents"] == 0
    assert report["results"]["clusters"] == 0


def test_date_like_strings_stay_strings(in_tmp):
    """pyarrow's JSON reader infers timestamps from ISO-8601 strings; text, ids and the other
    columns must come back exactly as they were written."""
    a = paragraph(11)
    records = [
        {"id": "2020-01-01", "text": a, "when": "2021-03-04", "n": 1},
        {"id": "2020-01-02", "text": "2021-03-05", "when": "2021-03-05", "n": 2},
        {"id": "2020-01-03", "text": variant(a, "kkkkkkk"), "when": "2021-03-06", "n": 3},
    ]
    write_jsonl(in_tmp / "dates.jsonl", records)
    result = invoke("dedup", "dates.jsonl", "-o", "out", "-q", "--format", "jsonl", "--id-field", "id")
    assert result.exit_code == 0, result.output
    lines = (in_tmp / "out" / "deduplicated.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == records[:2]
    pairs = pq.read_table(in_tmp / "out" / "pairs.parquet").to_pylist()
    assert [(p["id_a"], p["id_b"]) for p in pairs] == [("2020-01-01", "2020-01-03")]


def test_date_like_texts_only(in_tmp):
    # char 3-grams: J("2020-01-01", "2020-01-02") = 7/8, J(either, "1999-12-31") = 0
    write_jsonl(in_tmp / "dates.jsonl", [{"text": "2020-01-01"}, {"text": "1999-12-31"},
                                         {"text": "2020-01-02"}])
    result = invoke("dedup", "dates.jsonl", "-o", "out", "-q", "--shingle", "char", "--ngram", "3")
    assert result.exit_code == 0, result.output
    assert pq.read_table(in_tmp / "out" / "deduplicated.parquet")["text"].to_pylist() == [
        "2020-01-01", "1999-12-31"]
    pairs = pq.read_table(in_tmp / "out" / "pairs.parquet").to_pylist()
    assert [(p["id_a"], p["id_b"], p["jaccard"]) for p in pairs] == [
        ("dates.jsonl:1", "dates.jsonl:3", pytest.approx(7 / 8))]


def test_output_is_the_input_directory(in_tmp):
    """--overwrite must never delete the input: an output directory that is (or holds) an input
    is refused."""
    write_jsonl(in_tmp / "corpus" / "data.jsonl", happy_records())
    before = tree_snapshot(in_tmp / "corpus")
    result = invoke("dedup", "corpus", "-o", "corpus", "--overwrite", "-q")
    assert tree_snapshot(in_tmp / "corpus") == before, "the input corpus was deleted"
    assert result.exit_code == 2, result.output
    assert "corpus" in error_line(result)


def test_output_inside_the_input_directory(in_tmp):
    """A second run would read the first run's outputs as input: refused."""
    write_jsonl(in_tmp / "corpus" / "data.jsonl", happy_records())
    result = invoke("dedup", "corpus", "-o", "corpus/out", "-q")
    assert_user_error(result, "corpus", out=in_tmp / "corpus" / "out")
    assert [p.name for p in (in_tmp / "corpus").iterdir()] == ["data.jsonl"]


def test_missing_text_field(in_tmp):
    write_jsonl(in_tmp / "notext.jsonl", [{"body": "a b c"}, {"body": "d e f"}])
    result = invoke("dedup", "notext.jsonl", "-o", "out")
    assert_user_error(result, "notext.jsonl", "'text'", "--text-field", out=in_tmp / "out")


def test_missing_text_field_with_text_field_option(in_tmp):
    write_jsonl(in_tmp / "data.jsonl", happy_records())
    result = invoke("dedup", "data.jsonl", "-o", "out", "--text-field", "content")
    assert_user_error(result, "data.jsonl", "'content'", out=in_tmp / "out")


def test_missing_id_field_in_some_line(in_tmp):
    records = [{"id": f"d{i}", **r} for i, r in enumerate(happy_records()[:4])]
    del records[2]["id"]
    write_jsonl(in_tmp / "ids.jsonl", records)
    result = invoke("dedup", "ids.jsonl", "-o", "out", "--id-field", "id")
    assert_user_error(result, "ids.jsonl:3", "'id'", "missing", out=in_tmp / "out")


def test_missing_id_field_in_whole_file(in_tmp):
    write_jsonl(in_tmp / "data.jsonl", happy_records())
    result = invoke("dedup", "data.jsonl", "-o", "out", "--id-field", "uid")
    assert_user_error(result, "data.jsonl", "'uid'", out=in_tmp / "out")


def test_missing_id_field_in_parquet(in_tmp):
    pq.write_table(pa.Table.from_pylist(happy_records()), in_tmp / "data.parquet")
    result = invoke("dedup", "data.parquet", "-o", "out", "--id-field", "uid")
    assert_user_error(result, "data.parquet", "'uid'", out=in_tmp / "out")


def test_null_id(in_tmp):
    records = [{"id": f"d{i}", **r} for i, r in enumerate(happy_records()[:4])]
    records[3]["id"] = None
    write_jsonl(in_tmp / "ids.jsonl", records)
    result = invoke("dedup", "ids.jsonl", "-o", "out", "--id-field", "id")
    assert_user_error(result, "ids.jsonl:4", "'id'", "null", out=in_tmp / "out")


def test_null_id_in_parquet(in_tmp):
    table = pa.table({"id": ["a", None, "c"], "text": ["x y", "z w", "q r"]})
    pq.write_table(table, in_tmp / "ids.parquet")
    result = invoke("dedup", "ids.parquet", "-o", "out", "--id-field", "id")
    assert_user_error(result, "ids.parquet", "row 2", "'id'", "null", out=in_tmp / "out")


def test_duplicate_ids(in_tmp):
    records = [{"id": f"d{i}", **r} for i, r in enumerate(happy_records()[:4])]
    records[3]["id"] = "d1"
    write_jsonl(in_tmp / "ids.jsonl", records)
    result = invoke("dedup", "ids.jsonl", "-o", "out", "--id-field", "id")
    assert_user_error(result, "duplicate id", "'d1'", "ids.jsonl:2", "ids.jsonl:4", "unique",
                      out=in_tmp / "out")


def test_duplicate_ids_across_files(in_tmp):
    write_jsonl(in_tmp / "a.jsonl", [{"id": 1, "text": "a b c"}, {"id": 2, "text": "d e f"}])
    write_jsonl(in_tmp / "b.jsonl", [{"id": 3, "text": "g h i"}, {"id": 1, "text": "j k l"}])
    result = invoke("dedup", "a.jsonl", "b.jsonl", "-o", "out", "--id-field", "id")
    assert_user_error(result, "duplicate id", "1", "a.jsonl:1", "b.jsonl:2", out=in_tmp / "out")


def test_non_string_text(in_tmp):
    records = happy_records()[:4]
    records[2]["text"] = 12345
    write_jsonl(in_tmp / "nums.jsonl", records)
    result = invoke("dedup", "nums.jsonl", "-o", "out")
    assert_user_error(result, "nums.jsonl:3", "'text'", "a number", "expected a string",
                      out=in_tmp / "out")


def test_non_string_text_on_first_line(in_tmp):
    write_jsonl(in_tmp / "nums.jsonl", [{"text": 1}, {"text": "a b c"}])
    result = invoke("dedup", "nums.jsonl", "-o", "out")
    assert_user_error(result, "nums.jsonl:1", "expected a string", out=in_tmp / "out")


def test_all_texts_numbers(in_tmp):
    write_jsonl(in_tmp / "nums.jsonl", [{"text": 1}, {"text": 2}])
    result = invoke("dedup", "nums.jsonl", "-o", "out")
    assert_user_error(result, "nums.jsonl", "'text'", "expected a string", out=in_tmp / "out")


def test_invalid_utf8_in_jsonl(in_tmp):
    lines = [json.dumps(r).encode() for r in happy_records()[:4]]
    lines[2] = lines[2].replace(b'"text": "', b'"text": "\xc3\x28', 1)
    (in_tmp / "bytes.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    result = invoke("dedup", "bytes.jsonl", "-o", "out")
    assert_user_error(result, "bytes.jsonl:3", "invalid UTF-8", out=in_tmp / "out")


def test_invalid_utf8_in_txt(in_tmp):
    (in_tmp / "good.txt").write_text(paragraph(1))
    (in_tmp / "bad.txt").write_bytes(b"first line\nsecond \xff line\n")
    result = invoke("dedup", "good.txt", "bad.txt", "-o", "out")
    assert_user_error(result, "bad.txt:2", "invalid UTF-8", out=in_tmp / "out")


def test_corrupt_gzip(in_tmp):
    (in_tmp / "data.jsonl.gz").write_bytes(b"\x1f\x8b\x08\x00not really gzip")
    result = invoke("dedup", "data.jsonl.gz", "-o", "out")
    line = assert_user_error(result, "data.jsonl.gz", out=in_tmp / "out")
    assert any(word in line.lower() for word in ("gzip", "zlib", "decompress")), line


def test_corrupt_parquet(in_tmp):
    (in_tmp / "data.parquet").write_bytes(b"PAR1 garbage")
    result = invoke("dedup", "data.parquet", "-o", "out")
    assert_user_error(result, "data.parquet", "Parquet", out=in_tmp / "out")


def test_unsupported_file_type(in_tmp):
    (in_tmp / "data.csv").write_text("text\na b c\n")
    result = invoke("dedup", "data.csv", "-o", "out")
    assert_user_error(result, "data.csv", "unsupported file type", ".jsonl", out=in_tmp / "out")


def test_directory_without_inputs(in_tmp):
    (in_tmp / "empty").mkdir()
    result = invoke("dedup", "empty", "-o", "out")
    assert_user_error(result, "empty", "no input files", out=in_tmp / "out")


@pytest.mark.parametrize("args, fragments", [
    (["--threshold", "0"], ["threshold", "(0, 1]", "0"]),
    (["--threshold", "1.5"], ["threshold", "(0, 1]", "1.5"]),
    (["--threshold", "-0.2"], ["threshold", "(0, 1]"]),
    (["--ngram", "0"], ["ngram", ">= 1"]),
    (["--num-perm", "0"], ["num_perm", "1 to 4096"]),
    (["--bands", "20", "--rows", "10", "--num-perm", "128"], ["bands * rows", "200", "128"]),
    (["--bands", "20"], ["bands", "rows", "both"]),
    (["--rows", "4"], ["bands", "rows", "both"]),
    (["--bands", "0", "--rows", "4"], ["bands", ">= 1"]),
    (["--bucket-window", "0"], ["bucket_window", ">= 1"]),
    (["--batch-bytes", "0"], ["batch_bytes", ">= 1"]),
    (["--seed", "-1"], ["seed", "2**64"]),
])
def test_out_of_range_parameters(happy, args, fragments):
    result = invoke("dedup", "data.jsonl", "-o", "out", *args)
    assert_user_error(result, *fragments, out=happy / "out")


@pytest.mark.parametrize("args, option", [
    (["--shingle", "sentence"], "--shingle"),
    (["--keep", "last"], "--keep"),
    (["--format", "csv"], "--format"),
    (["--threshold", "high"], "--threshold"),
    (["--ngram", "2.5"], "--ngram"),
])
def test_invalid_option_values_are_usage_errors(happy, args, option):
    result = invoke("dedup", "data.jsonl", "-o", "out", *args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert option in result.output
    assert not (happy / "out").exists()


def test_missing_output_option(happy):
    result = invoke("dedup", "data.jsonl")
    assert result.exit_code == 2
    assert "--output" in result.output
    assert "Traceback" not in result.output


def test_non_empty_output_without_overwrite(happy):
    out = happy / "out"
    out.mkdir()
    (out / "keep-me.txt").write_text("precious")
    before = tree_snapshot(out)
    result = invoke("dedup", "data.jsonl", "-o", "out")
    assert_user_error(result, "out", "not empty", "--overwrite", out=out, before=before)


def test_output_is_an_existing_file(happy):
    out = happy / "out"
    out.write_text("a file")
    result = invoke("dedup", "data.jsonl", "-o", "out")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    line = error_line(result)
    assert "out" in line and "not a directory" in line
    assert out.read_text() == "a file"
    assert leftovers(happy) == []


def test_output_parent_missing(happy):
    result = invoke("dedup", "data.jsonl", "-o", "no/such/parent/out")
    assert_user_error(result, "parent", "does not exist", out=happy / "no" / "such" / "parent" / "out")
    assert not (happy / "no").exists()


def test_bad_input_with_overwrite_keeps_old_output(in_tmp):
    out = in_tmp / "out"
    out.mkdir()
    (out / "report.json").write_text("{}")
    before = tree_snapshot(out)
    (in_tmp / "bad.jsonl").write_text('{"text": "a"}\n{"text": \n')
    result = invoke("dedup", "bad.jsonl", "-o", "out", "--overwrite")
    assert_user_error(result, "bad.jsonl:2", out=out, before=before)


def test_bad_parameter_with_overwrite_keeps_old_output(happy):
    out = happy / "out"
    out.mkdir()
    (out / "report.json").write_text("{}")
    before = tree_snapshot(out)
    result = invoke("dedup", "data.jsonl", "-o", "out", "--overwrite", "--threshold", "2")
    assert_user_error(result, "threshold", out=out, before=before)


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
    import gpudedup

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
    clusters = pq.read_table(out / "clusters.parquet")
    assert clusters.num_rows >= 2 * report["results"]["clusters"]
    assert pq.read_table(out / "deduplicated.parquet").num_rows == (
        report["input"]["documents"] - report["results"]["removed_documents"])
    assert "Largest clusters" in result.output
    assert leftovers(in_tmp, "demo-out") == []


# --- gpudedup params ------------------------------------------------------------------------


def test_params_prints_the_chosen_banding_and_its_curve():
    result = CliRunner().invoke(app, ["params", "--threshold", "0.8", "--num-perm", "128"])
    assert result.exit_code == 0, result.output
    assert "16 bands x 6 rows" in result.output and "96 of 128 permutations" in result.output
    assert "steepest at s = 0.612" in result.output and "(threshold)" in result.output


def test_params_json_meets_the_targets():
    result = CliRunner().invoke(app, ["params", "--threshold", "0.8", "--num-perm", "512", "--low", "0.5",
                                      "--max-fp", "0.05", "--max-fn", "0.01", "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert (plan["bands"], plan["rows"]) == (41, 10)
    assert plan["miss_probability_at_threshold"] <= 0.01 and plan["candidate_probability_at_low"] <= 0.05
    assert plan["candidate_probability"]["0.5"] == plan["candidate_probability_at_low"]


def test_params_refuses_impossible_targets_and_names_the_num_perm_that_would_do():
    result = CliRunner().invoke(app, ["params", "--threshold", "0.8", "--low", "0.5", "--max-fp", "0.05"])
    assert result.exit_code == 2
    assert "num_perm=410 is the smallest" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(app, ["params", "--low", "0.5"])
    assert result.exit_code == 2 and "low/max_fp" in result.output


def test_dedup_chooses_bands_from_the_targets_and_reports_why(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"text": f"words {i} and more words here"}) + "\n" for i in range(5)))
    result = CliRunner().invoke(app, ["dedup", str(source), "-o", str(tmp_path / "out"), "--num-perm", "512",
                                      "--low", "0.5", "--max-fp", "0.05", "--quiet"])
    assert result.exit_code == 0, result.output
    parameters = json.loads((tmp_path / "out" / "report.json").read_text())["parameters"]
    assert (parameters["bands"], parameters["rows"]) == (41, 10)
    assert parameters["low"] == 0.5 and parameters["max_fp"] == 0.05
    assert "P(0.5) = 0.0393" in parameters["banding_rule"]


# --- gpudedup evaluate ----------------------------------------------------------------------


def test_evaluate_scores_a_grid_and_writes_json_and_csv(tmp_path):
    sample = Path(gpudedup.__file__).parent / "data" / "bible_sample.jsonl.gz"
    result = CliRunner().invoke(app, ["evaluate", str(sample), "-o", str(tmp_path / "eval"), "--id-field", "id",
                                      "--limit", "400", "--num-perm", "64,128", "--threshold", "0.8", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "best for f1" in result.output
    evaluation = json.loads((tmp_path / "eval" / "evaluation.json").read_text())
    assert len(evaluation["results"]) == 2
    csv_lines = (tmp_path / "eval" / "evaluation.csv").read_text().splitlines()
    assert len(csv_lines) == 3  # header and one row per setting
    figure = (tmp_path / "eval" / "recall_by_similarity.png").read_bytes()  # matplotlib: dev extra
    assert figure.startswith(b"\x89PNG")


def test_evaluate_refuses_a_bad_criterion_before_any_work(tmp_path):
    result = CliRunner().invoke(app, ["evaluate", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "e"),
                                      "--criterion", "nope"])
    assert result.exit_code == 2 and "criterion must be one of" in result.output


# --- --max-memory -----------------------------------------------------------------------------


def test_max_memory_stops_before_a_stage_that_would_exceed_it(happy):
    result = invoke("dedup", "data.jsonl", "-o", "out", "-q", "--max-memory", "1M")
    assert result.exit_code == 2
    assert "--max-memory 1 MiB" in result.output and "Traceback" not in result.output
    assert not (happy / "out").exists() and leftovers(happy) == []


def test_max_memory_generous_limit_runs_and_bad_sizes_are_refused(happy):
    assert invoke("dedup", "data.jsonl", "-o", "out", "-q", "--max-memory", "64G").exit_code == 0
    result = invoke("dedup", "data.jsonl", "-o", "out2", "-q", "--max-memory", "lots")
    assert result.exit_code == 2 and "max_memory must be a size like 8G" in result.output


def test_parse_size():
    from gpudedup.errors import ParameterError
    from gpudedup.memory import parse_size

    assert parse_size("4G") == 4 << 30 and parse_size("512m") == 512 << 20 and parse_size("1.5GiB") == 3 << 29
    assert parse_size("1000") == 1000 and parse_size(2048) == 2048 and parse_size("2 TB") == 2 << 40
    for bad in ("", "-1G", "0", "1X", "G"):
        with pytest.raises(ParameterError):
            parse_size(bad)


# --- --on-error skip --------------------------------------------------------------------------


def test_on_error_skip_counts_lists_and_balances_skipped_records(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text('{"text": "a b c d e f g"}\nnot json\n{"text": 5}\n{"text": "a b c d e f g"}\n')
    stopped = CliRunner().invoke(app, ["dedup", str(source), "-o", str(tmp_path / "stop"), "-q"])
    assert stopped.exit_code == 2 and "in.jsonl:2" in stopped.output and not (tmp_path / "stop").exists()
    result = CliRunner().invoke(app, ["dedup", str(source), "-o", str(tmp_path / "out"), "--on-error", "skip"])
    assert result.exit_code == 0, result.output
    assert "2 records or files were skipped" in result.output
    errors = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert [(e["line"], "JSON" in e["reason"] or "number" in e["reason"]) for e in errors] == [(2, True), (3, True)]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["balance"] == {"input_records": 4, "kept": 1, "kept_empty": 0, "removed_duplicates": 1,
                                 "skipped": 2, "balanced": True}
    assert report["input"]["skipped_records"] == 2
    ids = pq.read_table(tmp_path / "out" / "clusters.parquet")["id"].to_pylist()
    assert ids == [f"{source}:1", f"{source}:4"] or all(i.endswith((":1", ":4")) for i in ids)


def test_on_error_skip_writes_an_empty_errors_file_when_nothing_is_wrong(happy):
    assert invoke("dedup", "data.jsonl", "-o", "out", "-q", "--on-error", "skip").exit_code == 0
    assert (happy / "out" / "errors.jsonl").read_text() == ""
    assert invoke("dedup", "data.jsonl", "-o", "out2", "-q", "--on-error", "maybe").exit_code == 2
