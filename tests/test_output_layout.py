"""The output layout of runs over files (gpudedup/io/layout.py): one file of kept rows per input
file, named like it, with its own schema; pairs/ and clusters/ as Parquet datasets; the same
files in memory, staged and on Dask; --single-file for the one-file layout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpudedup
from gpudedup.errors import ParameterError
from gpudedup.io import layout
from gpudedup.io.layout import output_bases, output_names

from cli_support import assert_user_error, error_line, invoke, write_jsonl
from output_support import SINGLE_LAYOUT, kept_files, kept_lines, read_kept, result_bytes
from test_streaming import sample_records


INPUT_ORDER = ["a", "z", "sub/b", "sub/deeper/c"]  # a directory's files, then its subdirectories


def write_tree(root: Path) -> Path:
    """Four input files in a tree, with near-duplicates across and within files: a.jsonl and
    z.jsonl; sub/b.parquet (a float32 column and a dictionary-encoded large_string text, the
    type pyarrow reads back as a dictionary of string); sub/deeper/c.parquet."""
    records = sample_records()[:240]
    copies = [{**r, "id": f"{r['id']}-copy", "text": r["text"].replace(" the ", " teh ", 1)} for r in records[:40]]
    write_jsonl(root / "a.jsonl", records[:60] + copies[:10])
    write_jsonl(root / "z.jsonl", records[60:80] + copies[10:20])
    b = records[80:160] + copies[20:30]
    (root / "sub" / "deeper").mkdir(parents=True)
    pq.write_table(pa.table({
        "id": [r["id"] for r in b],
        "score": pa.array([float(i) for i in range(len(b))], pa.float32()),
        "text": pa.array([r["text"] for r in b], pa.large_string()).dictionary_encode(),
    }), root / "sub" / "b.parquet")
    pq.write_table(pa.Table.from_pylist(records[160:] + copies[30:]), root / "sub" / "deeper" / "c.parquet")
    return root


def stored_arrow_schema(path: Path) -> pa.Schema:
    """The Arrow schema a Parquet file's writer stored (what layout.stored_schema reads), parsed
    here on its own."""
    import base64

    raw = pq.read_metadata(path).metadata[b"ARROW:schema"]
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(raw)))


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return write_tree(tmp_path_factory.mktemp("layout") / "in")


@pytest.fixture(scope="module")
def runs(tree, tmp_path_factory) -> dict[str, Path]:
    """The tree deduplicated in memory, staged, in memory with --single-file, and as JSONL."""
    where = tmp_path_factory.mktemp("layout-runs")
    options = ["--id-field", "id", "-q", "--backend", "cpu"]
    outs = {"memory": [], "staged": ["--work-dir", str(where / "work")], "single": ["--single-file"],
            "jsonl": ["--format", "jsonl"]}
    for name, extra in outs.items():
        result = invoke("dedup", tree, "-o", where / name, *options, *extra)
        assert result.exit_code == 0, result.output
    return {name: where / name for name in outs}


def test_one_output_file_per_input_file_named_like_it(runs):
    out = runs["memory"]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [".gpudedup-output", "clusters", "deduplicated", "pairs", "candidates_histogram.svg", "cluster_sizes.svg",
         "report.html", "report.json", "s_curve.svg"])
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() and p.parent != out)
    assert files == ["clusters/part-00000.parquet", "deduplicated/a.parquet", "deduplicated/sub/b.parquet",
                     "deduplicated/sub/deeper/c.parquet", "deduplicated/z.parquet", "pairs/part-00000.parquet"]
    output = json.loads((out / "report.json").read_text())["output"]
    assert output["layout"] == "files"
    assert output["kept_files"] == [f"deduplicated/{name}.parquet" for name in INPUT_ORDER]  # in input order
    jsonl = runs["jsonl"]
    assert [p.relative_to(jsonl).as_posix() for p in kept_files(jsonl)] == [
        f"deduplicated/{name}.jsonl" for name in INPUT_ORDER]


def test_pairs_and_clusters_are_cut_into_parts_of_part_rows_in_their_order(tree, tmp_path, monkeypatch):
    """Oracle: the result's own tables (DedupResult.pairs, clusters): part k holds rows
    k * GPUDEDUP_PART_ROWS onwards, every part but the last is full, and the dataset reads back whole."""
    monkeypatch.setenv("GPUDEDUP_PART_ROWS", "7")
    result = gpudedup.dedup(tree, id_field="id", backend="cpu")
    result.write(tmp_path / "out")
    for name, table in (("pairs", result.pairs), ("clusters", result.clusters)):
        parts = sorted((tmp_path / "out" / name).iterdir())
        assert table.num_rows > 14  # at least three parts
        assert [p.name for p in parts] == [f"part-{k:05d}.parquet" for k in range(-(-table.num_rows // 7))]
        tables = [pq.read_table(p) for p in parts]
        assert [t.num_rows for t in tables[:-1]] == [7] * (len(parts) - 1) and 1 <= tables[-1].num_rows <= 7
        assert pa.concat_tables(tables).equals(table), name
        assert pq.read_table(tmp_path / "out" / name).equals(table), name


@pytest.mark.parametrize("given", ["0", "-3", "7.5", "many"])
def test_a_part_size_that_is_no_row_count_is_refused_before_anything_is_written(tree, tmp_path, monkeypatch, given):
    monkeypatch.setenv("GPUDEDUP_PART_ROWS", given)
    result = invoke("dedup", tree, "-o", tmp_path / "out", "--id-field", "id", "-q", "--backend", "cpu")
    assert result.exit_code == 2
    assert error_line(result) == f"error: GPUDEDUP_PART_ROWS={given!r}: expected a whole number of rows, 1 or more"
    assert not (tmp_path / "out").exists()


def test_the_parts_are_the_same_in_memory_and_staged(tree, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDEDUP_PART_ROWS", "7")
    options = ["--id-field", "id", "-q", "--backend", "cpu"]
    for name, extra in (("memory", []), ("staged", ["--work-dir", str(tmp_path / "work"), "--shard-bytes", "4K"])):
        done = invoke("dedup", tree, "-o", tmp_path / name, *options, *extra)
        assert done.exit_code == 0, done.output
    memory, staged = result_bytes(tmp_path / "memory"), result_bytes(tmp_path / "staged")
    assert sum(name.startswith("pairs/") for name in memory) > 2
    assert sum(name.startswith("clusters/") for name in memory) > 2
    for name in memory:
        if not name.startswith("deduplicated/"):  # (kept rows: test_staged_and_in_memory_runs_write_the_same_files)
            assert memory[name] == staged[name], name
    assert memory.keys() == staged.keys()


def test_each_file_holds_its_own_kept_rows_in_order(tree, runs):
    """Oracle: the one-file output (the rows in input order) cut at the input files' boundaries,
    each kept row found by its id in the input file it came from."""
    single = pq.read_table(runs["single"] / "deduplicated.parquet")
    ids_by_file = {
        "a": [json.loads(line)["id"] for line in (tree / "a.jsonl").read_text().splitlines()],
        "z": [json.loads(line)["id"] for line in (tree / "z.jsonl").read_text().splitlines()],
        "sub/b": pq.read_table(tree / "sub" / "b.parquet")["id"].to_pylist(),
        "sub/deeper/c": pq.read_table(tree / "sub" / "deeper" / "c.parquet")["id"].to_pylist(),
    }
    kept_ids = single["id"].to_pylist()
    position = 0
    for path, (name, ids) in zip(kept_files(runs["memory"]), ids_by_file.items()):
        assert path.as_posix().endswith(f"deduplicated/{name}.parquet")
        mine = pq.read_table(path)["id"].to_pylist()
        assert mine == kept_ids[position:position + len(mine)]
        assert set(mine) <= set(ids) and mine == [i for i in ids if i in set(mine)]
        position += len(mine)
    assert position == len(kept_ids) and 0 < len(kept_ids) < sum(len(ids) for ids in ids_by_file.values())
    assert sorted(p.name for p in runs["single"].iterdir()) == SINGLE_LAYOUT
    for name in ("pairs", "clusters"):
        assert pq.read_table(runs["memory"] / name).equals(pq.read_table(runs["single"] / f"{name}.parquet"))


def test_kept_rows_keep_their_input_schema_exactly(tree, runs):
    for run in ("memory", "staged"):
        a, _, b, c = kept_files(runs[run])
        # The dictionary of large_string survives (pyarrow reads both back as dictionary<string>).
        assert stored_arrow_schema(b) == stored_arrow_schema(tree / "sub" / "b.parquet"), run
        assert stored_arrow_schema(b).field("text").type == pa.dictionary(pa.int32(), pa.large_string())
        assert stored_arrow_schema(c) == stored_arrow_schema(tree / "sub" / "deeper" / "c.parquet"), run
        # a.jsonl's columns as pyarrow's JSON reader gives them, in the file's order.
        assert pq.read_schema(a).names == ["id", "translation", "book", "chapter", "text"]


def test_staged_and_in_memory_runs_write_the_same_files(runs):
    memory, staged = result_bytes(runs["memory"]), result_bytes(runs["staged"])
    assert memory.keys() == staged.keys()
    for name in memory:
        if name.startswith("deduplicated/"):  # Parquet row groups may differ: compared as tables
            assert pq.read_table(runs["memory"] / name).equals(pq.read_table(runs["staged"] / name)), name
        else:
            assert memory[name] == staged[name], name


def test_jsonl_output_per_file_is_the_parquet_rows(runs):
    rows = [json.loads(line) for line in kept_lines(runs["jsonl"])]
    assert [r["id"] for r in rows] == read_kept(runs["memory"])["id"].to_pylist()


def test_a_file_whose_rows_are_all_removed_is_written_empty_with_its_columns(tmp_path):
    records = sample_records()[:20]
    write_jsonl(tmp_path / "in" / "first.jsonl", records)
    pq.write_table(pa.table({"id": [f"{r['id']}-again" for r in records[:3]], "text": [r["text"] for r in records[:3]],
                             "n": pa.array([1, 2, 3], pa.int16())}), tmp_path / "in" / "second.parquet")
    result = invoke("dedup", tmp_path / "in", "-o", tmp_path / "out", "--id-field", "id", "-q", "--backend", "cpu")
    assert result.exit_code == 0, result.output
    first, second = kept_files(tmp_path / "out")
    assert pq.read_table(first).num_rows == 20
    emptied = pq.read_table(second)
    assert emptied.num_rows == 0 and emptied.schema.names == ["id", "text", "n"]
    assert emptied.schema.field("n").type == pa.int16()


def test_names_are_relative_to_the_inputs_common_directory(tmp_path):
    for name in ("x/one.jsonl", "x/deep/two.json.gz", "y/three.PARQUET", "y/four.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).touch()
    files = [tmp_path / n for n in ("x/one.jsonl", "x/deep/two.json.gz", "y/three.PARQUET", "y/four.txt")]
    def names(files, inputs, format):
        return output_names(files, output_bases(files, inputs), format)

    assert names(files[:2], [tmp_path / "x"], "parquet") == ["one.parquet", "deep/two.parquet"]
    assert names(files, [tmp_path / "x", tmp_path / "y"], "jsonl") == [
        "x/one.jsonl", "x/deep/two.jsonl", "y/three.jsonl", "y/four.jsonl"]
    assert names(files[:1], [files[0]], "parquet") == ["one.parquet"]  # a file given: its name


def test_files_that_would_share_a_name_keep_their_whole_name(tmp_path):
    write_jsonl(tmp_path / "in" / "day.jsonl", [{"text": "alpha beta gamma delta epsilon zeta"}])
    (tmp_path / "in" / "day.txt").write_text("one two three four five six seven\n")
    result = invoke("dedup", tmp_path / "in", "-o", tmp_path / "out", "-q", "--backend", "cpu")
    assert result.exit_code == 0, result.output
    assert [p.name for p in kept_files(tmp_path / "out")] == ["day.jsonl.parquet", "day.txt.parquet"]


def test_names_that_still_collide_are_refused_before_any_work(tmp_path, monkeypatch):
    write_jsonl(tmp_path / "in" / "day.jsonl", [{"text": "alpha beta gamma delta epsilon zeta"}])
    (tmp_path / "in" / "day.txt").write_text("one two three four five six seven\n")
    pq.write_table(pa.table({"text": ["x y z"]}), tmp_path / "in" / "day.jsonl.parquet")
    with pytest.raises(ParameterError, match="would both be written as deduplicated/day.jsonl.parquet"):
        files = sorted((tmp_path / "in").iterdir())
        output_names(files, output_bases(files, [tmp_path / "in"]), "parquet")
    # Every stage names itself in this file as it starts (stages.py): none may have.
    events = tmp_path / "stages.txt"
    monkeypatch.setenv("GPUDEDUP_STAGE_EVENTS", str(events))
    result = invoke("dedup", tmp_path / "in", "-o", tmp_path / "out", "-q", "--backend", "cpu")
    assert result.exit_code == 2
    assert "--single-file" in error_line(result) and "Traceback" not in result.output
    with pytest.raises(ParameterError, match="would both be written as deduplicated/day.jsonl.parquet"):
        gpudedup.dedup(tmp_path / "in", output=tmp_path / "out", backend="cpu")
    assert not events.exists() and not (tmp_path / "out").exists()
    monkeypatch.undo()
    single = invoke("dedup", tmp_path / "in", "-o", tmp_path / "out", "-q", "--backend", "cpu", "--single-file")
    assert single.exit_code == 0, single.output


def test_in_memory_data_writes_the_one_file_layout(tmp_path):
    result = gpudedup.dedup([r["text"] for r in sample_records()[:50]], backend="cpu")
    result.write(tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == SINGLE_LAYOUT
    assert json.loads((tmp_path / "out" / "report.json").read_text())["output"]["layout"] == "single"


def test_api_write_takes_single_file(tree, tmp_path):
    result = gpudedup.dedup(tree, id_field="id", backend="cpu")
    result.write(tmp_path / "files")
    result.write(tmp_path / "one", single_file=True)
    assert read_kept(tmp_path / "files")["id"].to_pylist() == read_kept(tmp_path / "one")["id"].to_pylist()
    assert [p.name for p in kept_files(tmp_path / "files")] == ["a.parquet", "z.parquet", "b.parquet", "c.parquet"]


# --- JSONL to JSONL: the kept records' lines as they were --------------------------------------


def odd_jsonl_lines() -> list[bytes]:
    """JSONL lines whose records Arrow would write back differently: fields in odd orders and
    missing from some records, numbers spelt 1.0 and 1e3, escapes, CRLF endings, a blank line;
    records 0 and 2 are near-duplicates (2 is removed)."""
    texts = [r["text"] for r in sample_records()[:4]]
    near = texts[0].replace(" the ", " teh ", 1)
    return [
        b'{"text": ' + json.dumps(texts[0]).encode() + b', "n": 1.0, "w": "\\u00e9t\\u00e9"}\r\n',
        b'{"z": 1e3, "text": ' + json.dumps(texts[1]).encode() + b'}\n',
        b'\n',
        b'{"n": 2.0, "text": ' + json.dumps(near).encode() + b'}\n',
        b'{"text":' + json.dumps(texts[2], ensure_ascii=False).encode() + b',"extra":[1,2.50]}',  # no final \n
    ]


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
def test_jsonl_to_jsonl_keeps_each_kept_line_byte_for_byte(tmp_path, compressed):
    import gzip

    lines = odd_jsonl_lines()
    name = "odd.jsonl.gz" if compressed else "odd.jsonl"
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / name).write_bytes(gzip.compress(b"".join(lines)) if compressed else b"".join(lines))
    expected = lines[0] + lines[1] + lines[4] + b"\n"  # line 4 (record 3) removed; the blank line is no record
    for run, extra in (("memory", []), ("staged", ["--work-dir", str(tmp_path / "work")])):
        out = tmp_path / run
        result = invoke("dedup", tmp_path / "in", "-o", out, "--format", "jsonl", "-q", "--backend", "cpu", *extra)
        assert result.exit_code == 0, result.output
        report = json.loads((out / "report.json").read_text())
        assert report["results"]["removed_documents"] == 1
        (kept,) = kept_files(out)
        assert kept.relative_to(out).as_posix() == "deduplicated/odd.jsonl"
        assert kept.read_bytes() == expected, run


def test_a_jsonl_file_changed_after_the_run_read_it_is_refused_at_the_write(tmp_path):
    lines = odd_jsonl_lines()
    (tmp_path / "in").mkdir()
    source = tmp_path / "in" / "odd.jsonl"
    source.write_bytes(b"".join(lines))
    read = source.stat()
    result = gpudedup.dedup(source, backend="cpu")
    source.write_bytes(lines[0])  # the other kept lines are gone
    with pytest.raises(gpudedup.InputError, match="odd.jsonl: changed since the run read it"):
        result.write(tmp_path / "out", format="jsonl")
    assert not (tmp_path / "out").exists() and [p.name for p in tmp_path.iterdir()] == ["in"]
    source.write_bytes(b"".join(lines))  # as it was, its modification time too: written
    os.utime(source, ns=(read.st_atime_ns, read.st_mtime_ns))
    result.write(tmp_path / "out", format="jsonl")
    assert kept_files(tmp_path / "out")[0].read_bytes() == lines[0] + lines[1] + lines[4] + b"\n"


def test_a_binary_text_column_without_a_stored_arrow_schema_stays_binary(tmp_path):
    """A Parquet writer other than Arrow stores no ARROW:schema: the columns as pyarrow reads
    them, before the run makes the text column plain, are the ones kept."""
    texts = [r["text"] for r in sample_records()[:6]]
    table = pa.table({"text": pa.array([t.encode() for t in texts + [texts[0]]], pa.binary())})
    (tmp_path / "in").mkdir()
    pq.write_table(table, tmp_path / "in" / "raw.parquet", store_schema=False)
    assert b"ARROW:schema" not in (pq.read_metadata(tmp_path / "in" / "raw.parquet").metadata or {})
    result = invoke("dedup", tmp_path / "in", "-o", tmp_path / "out", "-q", "--backend", "cpu")
    assert result.exit_code == 0, result.output
    kept = pq.read_table(kept_files(tmp_path / "out")[0])
    assert kept.schema == table.schema and kept["text"].to_pylist() == [t.encode() for t in texts]


def test_a_name_that_is_another_names_folder_or_differs_only_in_case_is_refused(tmp_path):
    (tmp_path / "in" / "docs.parquet").mkdir(parents=True)
    write_jsonl(tmp_path / "in" / "docs.jsonl", [{"text": "alpha beta gamma delta epsilon zeta"}])
    spark_style = tmp_path / "in" / "docs.parquet" / "part-0.parquet"  # a folder named like a file
    pq.write_table(pa.table({"text": ["one two three four five six"]}), spark_style)
    result = invoke("dedup", tmp_path / "in", "-o", tmp_path / "out", "-q", "--backend", "cpu")
    assert result.exit_code == 2 and "a file and a folder" in error_line(result)
    assert not (tmp_path / "out").exists()
    files = [tmp_path / "Day.jsonl", tmp_path / "day.txt"]  # one name where names ignore case
    assert output_names(files, output_bases(files, [tmp_path]), "parquet") == ["Day.jsonl.parquet", "day.txt.parquet"]


def test_names_do_not_depend_on_which_files_could_be_read(tmp_path):
    """a.txt is not valid UTF-8 and is left out under --on-error skip: a.jsonl keeps the name
    it has beside a readable a.txt, in memory and staged."""
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"text": r["text"]} for r in sample_records()[:5]])
    (tmp_path / "in" / "a.txt").write_bytes(b"not \xff valid")
    for run, extra in (("memory", []), ("staged", ["--work-dir", str(tmp_path / "work")])):
        result = invoke("dedup", tmp_path / "in", "-o", tmp_path / run, "-q", "--backend", "cpu", "--on-error", "skip",
                        *extra)
        assert result.exit_code == 0, result.output
        assert [p.name for p in kept_files(tmp_path / run)] == ["a.jsonl.parquet"], run


def test_a_run_over_files_that_left_every_file_out_stops_and_writes_nothing(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "bad.txt").write_bytes(b"\xff")
    result = invoke("dedup", tmp_path / "in", "-o", tmp_path / "out", "-q", "--backend", "cpu", "--on-error", "skip")
    assert result.exit_code == 2 and "no document could be read from the inputs" in error_line(result)
    assert not (tmp_path / "out").exists()


def test_columns_widened_across_files_and_string_view_come_back_as_each_file_had_them(tmp_path):
    texts = [r["text"] for r in sample_records()[:8]]
    (tmp_path / "in").mkdir()
    narrow = pa.table({"id": pa.array([1, 2, 3, 4], pa.int32()), "text": pa.array(texts[:4], pa.string_view())})
    wide = pa.table({"id": pa.array([5, 6, 7, 8], pa.int64()), "text": pa.array(texts[4:], pa.string_view()),
                     "extra": pa.array([0.5] * 4, pa.float32())})
    pq.write_table(narrow, tmp_path / "in" / "a.parquet")
    pq.write_table(wide, tmp_path / "in" / "b.parquet")
    for run, extra in (("memory", []), ("staged", ["--work-dir", str(tmp_path / "work")])):
        result = invoke("dedup", tmp_path / "in", "-o", tmp_path / run, "--id-field", "id", "-q", "--backend", "cpu",
                        *extra)
        assert result.exit_code == 0, result.output
        a, b = (pq.read_table(path) for path in kept_files(tmp_path / run))
        assert a.equals(narrow) and b.equals(wide), run


def test_every_column_type_of_a_parquet_input_is_written_as_read(tmp_path):
    """Columns beside the text come back with their types as read, those Arrow rebuilds to
    look into included (a map with sorted keys, a struct, lists, a dictionary), in memory and
    staged."""
    records = sample_records()[:12]
    n = len(records)
    table = pa.table({"text": [r["text"] for r in records],
                      "m": pa.array([[("k", i)] for i in range(n)], pa.map_(pa.string(), pa.int64(), keys_sorted=True)),
                      "s": pa.array([{"a": [i], "b": "x"} for i in range(n)]),
                      "f": pa.array([[i, i] for i in range(n)], pa.list_(pa.int32(), 2)),
                      "d": pa.array(["x", "y"] * (n // 2)).dictionary_encode(),
                      # (read back as their values: Arrow casts values to a dictionary of strings only)
                      "di": pa.array([1, 2] * (n // 2)).dictionary_encode(),
                      "dd": pa.array([0, 19_000] * (n // 2), pa.date32()).dictionary_encode(),
                      "sd": pa.StructArray.from_arrays([pa.array([5, None] * (n // 2)).dictionary_encode()], ["a"]),
                      "ld": pa.ListArray.from_arrays(pa.array(range(n + 1), pa.int32()),
                                                     pa.array(range(n)).dictionary_encode())})
    (tmp_path / "in").mkdir()
    pq.write_table(table, tmp_path / "in" / "a.parquet")
    stored = pq.read_schema(tmp_path / "in" / "a.parquet")
    for run, extra in (("memory", []), ("staged", ["--work-dir", str(tmp_path / "work")])):
        result = invoke("dedup", tmp_path / "in", "-o", tmp_path / run, "-q", "--backend", "cpu", *extra)
        assert result.exit_code == 0, result.output
        written, = kept_files(tmp_path / run)
        assert pq.read_schema(written).equals(stored, check_metadata=True), run


def test_an_arrow_file_of_view_columns_and_a_categorical_is_written_and_counted_by_group(tmp_path):
    """An Arrow file as polars writes one (every string column string_view, a Categorical as a
    dictionary of string_view): its kept rows are written as Parquet, the dictionary with plain
    values (Parquet has no dictionary of views), and --group-field on a view column counts in
    memory and staged alike."""
    records = sample_records()[:40]
    (tmp_path / "in").mkdir()
    table = pa.table({"text": pa.array([r["text"] for r in records], pa.string_view()),
                      "source": pa.array([r["id"][:1] for r in records], pa.string_view()),
                      "kind": pa.array([r["id"][:1] for r in records], pa.string_view()).dictionary_encode()})
    with pa.ipc.new_file(tmp_path / "in" / "a.arrow", table.schema) as writer:
        writer.write_table(table)
    groups = []
    for run, extra in (("memory", []), ("staged", ["--work-dir", str(tmp_path / "work")])):
        result = invoke("dedup", tmp_path / "in", "-o", tmp_path / run, "--group-field", "source", "-q",
                        "--backend", "cpu", *extra)
        assert result.exit_code == 0, result.output
        written, = (pq.read_table(path) for path in kept_files(tmp_path / run))
        assert pa.types.is_dictionary(written.schema.field("kind").type)
        assert written["kind"].to_pylist() == written["source"].to_pylist()
        groups.append(json.loads((tmp_path / run / "report.json").read_text())["groups"])
    assert groups[0] == groups[1] and groups[0]["rows"]


def test_a_result_is_written_by_the_names_of_its_run_after_a_change_of_directory(tree, tmp_path, monkeypatch):
    monkeypatch.chdir(tree.parent)
    result = gpudedup.dedup(Path(tree.name), id_field="id", backend="cpu")
    monkeypatch.chdir(tmp_path)
    result.write("out")
    assert [p.relative_to(tmp_path / "out").as_posix() for p in kept_files(tmp_path / "out")] == [
        f"deduplicated/{name}.parquet" for name in INPUT_ORDER]


def test_an_output_name_too_long_for_the_file_system_is_refused_before_any_work(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / ("x" * 249 + ".txt")).write_text("one two three four five six seven\n")  # 253 bytes
    result = invoke("dedup", tmp_path / "in", "-o", tmp_path / "out", "-q", "--backend", "cpu")  # x...x.parquet: 257
    assert result.exit_code == 2 and "longer than 255 bytes" in error_line(result)
    assert not (tmp_path / "out").exists()
    jsonl = invoke("dedup", tmp_path / "in", "-o", tmp_path / "out", "-q", "--backend", "cpu", "--format", "jsonl")
    assert jsonl.exit_code == 0, jsonl.output  # x...x.jsonl: 255 bytes


def test_a_pairs_part_has_the_same_bytes_however_its_rows_were_cut(tmp_path):
    """write_pairs_part writes a part of pairs/ from slices of sorted frames (a Dask run's):
    the file's bytes are those of the rows, not of where the sort cut them (Arrow-backed
    strings keep a chunk per slice, and the Parquet writer's pages follow chunks)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    count = 120_000
    frame = pd.DataFrame({"id_a": pd.Series([f"linux/{n:09d}/{'x' * int(n % 37)}" for n in rng.permutation(count)],
                                            dtype="string[pyarrow]"),
                          "id_b": pd.Series([f"linux/{n:09d}" for n in rng.permutation(count)],
                                            dtype="string[pyarrow]"),
                          "jaccard": rng.random(count)})
    whole, cut = tmp_path / "whole.parquet", tmp_path / "cut.parquet"
    layout.write_pairs_part([(frame, 0, count)], pa.large_string(), str(whole))
    pieces = [frame.iloc[start:stop] for start, stop in ((0, 1_000), (1_000, 70_001), (70_001, count))]
    joined = pd.concat(pieces)  # (one frame of three chunks, as a sorted partition may be)
    layout.write_pairs_part([(joined, 0, 50_000), (joined, 50_000, count)], pa.large_string(), str(cut))
    assert pq.read_table(cut).equals(pq.read_table(whole))
    assert cut.read_bytes() == whole.read_bytes()


def test_files_at_once_is_the_most_whose_largest_fit_a_quarter():
    """files_at_once against a search over every choice of files: the most files (at most the
    threads, at least one) such that any that many of them hold at most a quarter of all the
    bytes."""
    import itertools
    import random

    rng = random.Random(5)
    for _ in range(300):
        sizes = [rng.choice([0, 1, 10, 100, 1000]) * rng.randint(1, 9) for _ in range(rng.randint(1, 9))]
        threads = rng.randint(1, 12)
        fits = [k for k in range(1, min(threads, len(sizes)) + 1)
                if all(sum(chosen) <= sum(sizes) // 4 for chosen in itertools.combinations(sizes, k))]
        assert layout.files_at_once(sizes, threads) == max(fits + [1]), (sizes, threads)


@pytest.mark.parametrize("format", ["parquet", "jsonl"])
def test_kept_files_written_side_by_side_are_those_written_one_by_one(tmp_path, format):
    """Sixteen files written by write_kept_files (as Parquet several at once on a machine of
    two cores or more: files_at_once) hold the bytes write_kept_file gives each alone."""
    from gpudedup.io.read import read_corpus
    from gpudedup.io.layout import write_kept_file, write_kept_files

    records = sample_records()[:320]
    paths = []
    for number in range(16):
        paths.append(tmp_path / "in" / f"part-{number:02d}.jsonl")
        write_jsonl(paths[-1], records[number * 20:(number + 1) * 20])
    corpus = read_corpus(paths, "text", "id")
    keep = np.arange(corpus.num_rows) % 3 != 1
    names = [path.name.replace(".jsonl", f".{format}") for path in paths]
    assert layout.files_at_once([1] * 16, 2) == 2  # (so that two cores write two at once)
    write_kept_files(tmp_path / "together", names, layout.rows_by_file(corpus.table, corpus.files, keep), format)
    for name, rows in zip(names, layout.rows_by_file(corpus.table, corpus.files, keep), strict=True):
        write_kept_file(rows, tmp_path / "alone" / name, format)
    for name in names:
        assert (tmp_path / "together" / name).read_bytes() == (tmp_path / "alone" / name).read_bytes()


def test_jsonl_from_arrow_values_is_strict_json_that_reads_back(tmp_path):
    """Parquet rows written as JSONL: NaN and infinities as null, bytes as their text (UTF-8)
    or base64, a map of distinct keys as an object, timestamps as text; every line strict JSON
    (no NaN), and the output a valid input again."""
    import base64
    import math

    texts = ["one two three four five six", "alpha beta gamma delta epsilon", "red green blue cyan magenta"]
    table = pa.table({"text": texts, "f": [float("nan"), float("inf"), 1.5],
                      "bin": pa.array([b"\xff\x00abc", b"hello", None], pa.binary()),
                      "m": pa.array([[("k", 1)], [("a", 2)], None], pa.map_(pa.string(), pa.int64())),
                      "ts": pa.array([1, 2, 3], pa.timestamp("s")), "nested": [{"x": float("-inf")}, {"x": 1.0}, None]})
    (tmp_path / "in").mkdir()
    pq.write_table(table, tmp_path / "in" / "types.parquet")
    result = invoke("dedup", tmp_path / "in", "-o", tmp_path / "out", "--format", "jsonl", "-q", "--backend", "cpu")
    assert result.exit_code == 0, result.output

    def strict(constant: str):
        raise ValueError(f"not JSON: {constant}")

    lines = (tmp_path / "out" / "deduplicated" / "types.jsonl").read_text().splitlines()
    rows = [json.loads(line, parse_constant=strict) for line in lines]
    assert [row["f"] for row in rows] == [None, None, 1.5]
    assert [row["bin"] for row in rows] == [base64.b64encode(b"\xff\x00abc").decode(), "hello", None]
    assert [row["m"] for row in rows] == [{"k": 1}, {"a": 2}, None]
    assert [row["ts"] for row in rows] == ["1970-01-01 00:00:01", "1970-01-01 00:00:02", "1970-01-01 00:00:03"]
    assert [row["nested"] for row in rows] == [{"x": None}, {"x": 1.0}, None]
    assert not any(isinstance(v, float) and not math.isfinite(v) for row in rows for v in row.values())
    again = invoke("dedup", tmp_path / "out" / "deduplicated", "-o", tmp_path / "again", "-q", "--backend", "cpu")
    assert again.exit_code == 0, again.output


def test_a_field_all_null_in_one_file_comes_back_with_its_null_type(tmp_path):
    """A struct's field (and a list's items) all null in one JSONL file have Arrow's null type
    there and another file's type in the run's table, which Arrow casts nothing back to: the
    kept rows come back as their file had them, in memory as with a work directory."""
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"c": {"text": "the quick brown fox jumps over the lazy dog"},
                                              "l": ["x"]}])
    write_jsonl(tmp_path / "in" / "b.jsonl", [{"c": {"text": None}, "l": [None]}, {"c": None, "l": None}])
    for run, extra in (("memory", []), ("staged", ["--work-dir", str(tmp_path / "work")])):
        result = invoke("dedup", tmp_path / "in", "-o", tmp_path / run, "-q", "--backend", "cpu",
                        "--text-field", "c.text", *extra)
        assert result.exit_code == 0, result.output
        written = pq.read_table(tmp_path / run / "deduplicated" / "b.parquet")
        assert written.schema.field("c").type == pa.struct([("text", pa.null())]), run
        assert written.to_pylist() == [{"c": {"text": None}, "l": [None]}, {"c": None, "l": None}], run


def test_columns_parquet_has_no_type_for_are_written_as_jsonl_or_refused_in_one_line(tmp_path):
    """A JSONL field holding only empty objects (a struct of no fields) and an Arrow file's
    interval of months, days and nanoseconds or run-end encoded column have no Parquet type:
    the kept rows as Parquet are refused with one line naming the column, in memory and with a
    work directory alike (whose spill keeps each file's columns in Arrow's own format); as
    JSONL they are written, the same either way."""
    import pyarrow.ipc as ipc

    text = "the quick brown fox jumps over the lazy dog again"
    write_jsonl(tmp_path / "objects" / "a.jsonl", [{"text": text, "meta": {}}, {"text": text + " x", "meta": {}}])
    arrow_columns = {"intervals": pa.array([pa.MonthDayNano([1, 2, 3])] * 2, pa.month_day_nano_interval()),
                     # (held decoded: Arrow takes no rows of it; encoded again as written)
                     "runs": pa.RunEndEncodedArray.from_arrays(pa.array([2], pa.int32()), pa.array(["r"]))}
    for folder, values in arrow_columns.items():
        (tmp_path / folder).mkdir()
        table = pa.table({"text": [text, text + " y"], "span": values})
        with ipc.new_file(tmp_path / folder / "x.arrow", table.schema) as writer:
            writer.write_table(table)
    for folder, column in (("objects", "'meta' (struct<>)"), ("intervals", "'span' (month_day_nano_interval)"),
                           ("runs", "'span' (run_end_encoded<run_ends: int32, values: string>)")):
        written = {}
        for run, extra in (("memory", []), ("staged", ["--work-dir", str(tmp_path / f"work-{folder}")])):
            out = tmp_path / f"{folder}-{run}"
            assert_user_error(invoke("dedup", tmp_path / folder, "-o", out, "--backend", "cpu", *extra),
                              "the kept rows cannot be written as Parquet, which has no type for column " + column,
                              "write them as JSONL (--format jsonl)", out=out)
            result = invoke("dedup", tmp_path / folder, "-o", out, "-q", "--backend", "cpu", "--format", "jsonl",
                            *extra, *(["--resume"] if extra else []))
            assert result.exit_code == 0, result.output
            written[run] = result_bytes(out)
        assert written["memory"] == written["staged"]


def test_nanosecond_times_are_written_as_jsonl_with_every_digit(tmp_path):
    """Timestamps, durations and times of day in nanoseconds, which Python's types hold to the
    microsecond, are written as text with their nanoseconds: by the command, which keeps pandas
    out of pyarrow's conversions, as by the API, the same lines; whole microseconds (in lists
    too) written as before."""
    import subprocess
    import sys

    texts = ["one two three four five six", "alpha beta gamma delta epsilon", "red green blue cyan magenta"]
    table = pa.table({"text": texts, "ts": pa.array([1_000_000_007, 5_000, None], pa.timestamp("ns")),
                      "tz": pa.array([-1, 0, 7], pa.timestamp("ns", tz="UTC")),
                      "du": pa.array([1, -1, 5_000], pa.duration("ns")),
                      "t": pa.array([1_500, 5_000, 86_399_999_999_999], pa.time64("ns")),
                      "dict": pa.array([3, 3, 1_000], pa.timestamp("ns")).dictionary_encode(),
                      "list": pa.array([[7], [], None], pa.list_(pa.timestamp("ns"))),
                      "whole": pa.array([[1_000], [2_000_000], None], pa.list_(pa.duration("ns")))})
    (tmp_path / "in").mkdir()
    pq.write_table(table, tmp_path / "in" / "times.parquet")
    command = subprocess.run([sys.executable, "-m", "gpudedup", "dedup", str(tmp_path / "in"), "-o",
                              str(tmp_path / "cli"), "--format", "jsonl", "-q", "--backend", "cpu"],
                             capture_output=True, text=True)
    assert command.returncode == 0, command.stderr
    gpudedup.dedup(tmp_path / "in", backend="cpu", progress=False).write(tmp_path / "api", format="jsonl")
    lines = (tmp_path / "cli" / "deduplicated" / "times.jsonl").read_text(encoding="utf-8")
    assert lines == (tmp_path / "api" / "deduplicated" / "times.jsonl").read_text(encoding="utf-8")
    rows = [json.loads(line) for line in lines.splitlines()]
    assert [row["ts"] for row in rows] == ["1970-01-01 00:00:01.000000007", "1970-01-01 00:00:00.000005", None]
    assert [row["tz"] for row in rows] == ["1969-12-31 23:59:59.999999999+00:00", "1970-01-01 00:00:00+00:00",
                                           "1970-01-01 00:00:00.000000007+00:00"]
    assert [row["du"] for row in rows] == ["0:00:00.000000001", "-1 day, 23:59:59.999999999", "0:00:00.000005"]
    assert [row["t"] for row in rows] == ["00:00:00.000001500", "00:00:00.000005", "23:59:59.999999999"]
    assert [row["dict"] for row in rows] == ["1970-01-01 00:00:00.000000003"] * 2 + ["1970-01-01 00:00:00.000001"]
    assert [row["list"] for row in rows] == [["1970-01-01 00:00:00.000000007"], [], None]
    assert [row["whole"] for row in rows] == [["0:00:00.000001"], ["0:00:00.002000"], None]  # (as microseconds)


def test_single_file_kept_rows_are_the_same_bytes_staged_and_in_memory(tmp_path):
    """--single-file of JSONL with a list column: the work directory's spilled columns keep the
    list's item name as read, so the staged file is the in-memory one byte for byte."""
    rows = [{**row, "tags": [n, n + 1]} for n, row in enumerate(sample_records()[:120])]
    write_jsonl(tmp_path / "in.jsonl", rows)
    outputs = []
    for name, extra in (("memory", []), ("staged", ["--work-dir", str(tmp_path / "work")])):
        out = tmp_path / name
        result = invoke("dedup", tmp_path / "in.jsonl", "-o", out, "--single-file", "-q", "--backend", "cpu", *extra)
        assert result.exit_code == 0, result.output
        outputs.append((out / "deduplicated.parquet").read_bytes())
    assert outputs[0] == outputs[1]
    assert pq.read_schema(tmp_path / "staged" / "deduplicated.parquet").field("tags").type == pa.list_(pa.int64())



def test_jsonl_keys_of_maps_and_dictionaries_of_floats_are_strict_json(tmp_path):
    """A map keyed by dates writes its keys as their text, and a dictionary of floats its NaN as
    null: every line strict JSON."""
    import datetime

    from gpudedup.io.write import write_jsonl as write_rows

    table = pa.table({"m": pa.array([[(datetime.date(2024, 1, 1), 1)], None], pa.map_(pa.date32(), pa.int64())),
                      "x": pa.array([float("nan"), 1.0]).dictionary_encode()})
    write_rows(table, tmp_path / "rows.jsonl")

    def strict(constant: str):
        raise ValueError(f"not JSON: {constant}")

    rows = [json.loads(line, parse_constant=strict) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert rows == [{"m": {"2024-01-01": 1}, "x": None}, {"m": None, "x": 1.0}]


def test_a_row_is_written_to_jsonl_the_same_in_any_batch(tmp_path):
    """How a map whose keys repeat (pairs) and nanoseconds inside a list that are not whole
    microseconds (Arrow's text) are written is decided row by row: a row's line is the same
    whether its file is written whole (a run in memory) or in pieces (a staged run's), and a
    map of distinct keys beside one that repeats them is an object."""
    from gpudedup.io.write import write_jsonl_batches

    table = pa.table({"m": pa.array([[("k", 2), ("k", 3)], [("k", 5)], [("a", 1), ("b", 2)], None],
                                    pa.map_(pa.string(), pa.int64())),
                      "ts": pa.array([[7], [3_000], [1_000_000_001], [2_000]], pa.list_(pa.timestamp("ns")))})
    written = []
    for size in (4, 2, 1):
        write_jsonl_batches(table.to_batches(max_chunksize=size), tmp_path / f"{size}.jsonl")
        written.append((tmp_path / f"{size}.jsonl").read_text(encoding="utf-8"))
    assert written[0] == written[1] == written[2]
    rows = [json.loads(line) for line in written[0].splitlines()]
    assert [row["m"] for row in rows] == [[["k", 2], ["k", 3]], {"k": 5}, {"a": 1, "b": 2}, None]
    assert [row["ts"] for row in rows] == [["1970-01-01 00:00:00.000000007"], ["1970-01-01 00:00:00.000003"],
                                           ["1970-01-01 00:00:01.000000001"], ["1970-01-01 00:00:00.000002"]]


def test_top_level_floats_are_written_as_json_value_writes_them(tmp_path):
    """Top-level float columns (made JSON's by Arrow compute, not row by row) give the lines the
    row-by-row rule (json_value) gives: NaN and infinities null, -0.0 and nulls kept."""
    from gpudedup.io.write import json_value
    from gpudedup.io.write import write_jsonl as write_rows

    values = [float("nan"), float("inf"), float("-inf"), -0.0, None, 1.5, 1e300, 0.1]
    table = pa.table({"f64": pa.array(values, pa.float64()), "f32": pa.array(values[:-2] + [2.5, 0.25], pa.float32()),
                      "f16": pa.array(np.array([v if v not in (None, 1e300) else 0 for v in values], np.float16)),
                      "text": [str(n) for n in range(len(values))]})
    write_rows(table, tmp_path / "rows.jsonl")
    expected = [json.dumps(json_value(row), ensure_ascii=False) for row in table.to_pylist()]
    assert (tmp_path / "rows.jsonl").read_text().splitlines() == expected
    assert json.loads(expected[0])["f64"] is None and json.loads(expected[3])["f64"] == 0.0


@pytest.mark.parametrize("values", ["decimal", "uint64"])
def test_a_column_whose_values_the_combined_type_cannot_hold_is_never_rounded(tmp_path, values):
    """A column of a file whose values the type of the files combined does not hold (a long
    decimal or a uint64 in one file, doubles in another): a run in memory, which holds the files
    as one table, refuses in one line to write that file's rows back rounded, kept or removed
    (a JSONL file's kept lines, copied as they are, and a run that writes nothing are not
    refused); a run with a work directory writes each file's rows in its own types, exactly, and
    refuses one file of them all (--single-file) in one line."""
    from decimal import Decimal

    records = sample_records()[:6]
    exact = [Decimal("12345678901234567890.12"), Decimal("98765432109876543210.99")] if values == "decimal" \
        else [2**64 - 59, 2**63 + 7]
    kind = pa.decimal128(24, 2) if values == "decimal" else pa.uint64()
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"id": [r["id"] for r in records[:2]], "text": [r["text"] for r in records[:2]],
                             "n": pa.array(exact, kind)}), tmp_path / "in" / "a.parquet")
    write_jsonl(tmp_path / "in" / "b.jsonl", [{**r, "n": 0.5} for r in records[2:]])
    common = ("--id-field", "id", "-q", "--backend", "cpu")

    def command(*args: object) -> subprocess.CompletedProcess:
        # (a process of its own: the tests' check of every result reads its kept rows as one table)
        return subprocess.run([sys.executable, "-m", "gpudedup", "dedup", str(tmp_path / "in"), *map(str, args),
                               *common], capture_output=True, text=True, timeout=120)

    for extra in ([], ["--write-removed", "--format", "jsonl"]):
        memory = command("-o", tmp_path / "memory", *extra)
        assert memory.returncode == 2 and not (tmp_path / "memory").exists()
        # (a uint64 past 2**53 Arrow itself refuses to combine with doubles)
        assert (f"{tmp_path / 'in' / 'a.parquet'}: column 'n' holds values that its type in the files combined "
                "(double, which another file's values give it) does not hold exactly" if values == "decimal" else
                "the input files have columns of incompatible types and cannot be combined") in memory.stderr
    if values == "decimal":
        assert gpudedup.dedup(tmp_path / "in", id_field="id", backend="cpu").documents == 6
    staged = command("-o", tmp_path / "staged", "--work-dir", tmp_path / "w")
    assert staged.returncode == 0, staged.stderr
    kept = pq.read_table(tmp_path / "staged" / "deduplicated" / "a.parquet")
    assert kept.schema.field("n").type == kind and kept["n"].to_pylist() == exact
    one = command("-o", tmp_path / "one", "--work-dir", tmp_path / "w1", "--single-file")
    assert one.returncode == 2 and not (tmp_path / "one").exists()
    assert one.stderr.strip() == ("error: column 'n' holds values that its type in the files combined (double) does "
                                  "not take unchanged, so their rows are no one table or file: write each input "
                                  "file's rows apart, without --single-file")


def test_a_jsonl_file_beside_a_rounding_type_is_copied_as_it_is(tmp_path):
    """A JSONL column of integers past int64 (read as decimals) beside a file of doubles in the
    same column: the JSONL kept lines are copied byte for byte (--format jsonl), so the run in
    memory writes them; written as Parquet from the rounded values, it is refused."""
    records = sample_records()[:6]
    (tmp_path / "in").mkdir()
    write_jsonl(tmp_path / "in" / "a.jsonl", [{**r, "h": 2**64 - 59 - n} for n, r in enumerate(records[:3])])
    write_jsonl(tmp_path / "in" / "b.jsonl", [{**r, "h": 0.5} for r in records[3:]])
    copied = invoke("dedup", tmp_path / "in", "-o", tmp_path / "copied", "--format", "jsonl", "-q", "--backend", "cpu")
    assert copied.exit_code == 0, copied.output
    assert (tmp_path / "copied" / "deduplicated" / "a.jsonl").read_bytes() == (tmp_path / "in" / "a.jsonl").read_bytes()
    refused = invoke("dedup", tmp_path / "in", "-o", tmp_path / "parquet", "-q", "--backend", "cpu")
    assert_user_error(refused, "a.jsonl: column 'h' holds values that its type in the files combined (double",
                      out=tmp_path / "parquet")
    # One file of every file's rows holds them in the types combined: refused in memory as with a
    # work directory, kept rows or removed, whatever the format.
    for format, extra in (("parquet", []), ("jsonl", ["--write-removed"])):
        one = invoke("dedup", tmp_path / "in", "-o", tmp_path / f"one-{format}", "--single-file", "--format", format,
                     "--id-field", "id", *extra, "-q", "--backend", "cpu")
        assert_user_error(one, "column 'h' holds values that its type in the files combined (double) does not take "
                               "unchanged", out=tmp_path / f"one-{format}")


def test_jsonl_integers_past_int64_are_kept_exactly(tmp_path):
    """A JSONL column of integers with one past int64 (a uint64 hash) would be read as doubles,
    exact only below 2**53: it is read as whole decimals instead (of 76 digits where one is
    past 38, each column its own), so the Parquet output, the removed rows written as JSONL and
    ``deduplicated`` hold every value exactly, and a file of small integers beside it combines
    with it (--single-file). Floats written with an exponent stay doubles."""
    records = sample_records()[:240]
    big = [{**r, "hash": 2**53 + 1 + n if n != 7 else 2**64 - 1} for n, r in enumerate(records[:120])]
    longer = [{**r, "hash": 10**39 + n} for n, r in enumerate(records[120:160])]
    small = [{**r, "hash": n} for n, r in enumerate(records[160:])]
    (tmp_path / "in").mkdir()
    write_jsonl(tmp_path / "in" / "big.jsonl", big)
    write_jsonl(tmp_path / "in" / "longer.jsonl", longer)
    write_jsonl(tmp_path / "in" / "small.jsonl", small)
    expected = {r["id"]: r["hash"] for r in big + longer + small}
    for extra in ([], ["--format", "jsonl", "--write-removed"], ["--single-file"]):
        out = tmp_path / f"out{len(extra)}"
        result = invoke("dedup", tmp_path / "in", "-o", out, "--id-field", "id", "-q", "--backend", "cpu", *extra)
        assert result.exit_code == 0, result.output
        written = [path for path in out.rglob("*") if path.suffix in (".parquet", ".jsonl") and "pairs" not in
                   path.parts and "clusters" not in path.parts and path.name != "errors.jsonl"]
        assert written
        for path in written:
            rows = pq.read_table(path).to_pylist() if path.suffix == ".parquet" else [
                json.loads(line) for line in path.read_text().splitlines()]
            assert all(int(row["hash"]) == expected[row["id"]] for row in rows), path
    for name, decimal in (("big", pa.decimal128(38, 0)), ("longer", pa.decimal256(76, 0))):
        kept = gpudedup.dedup(tmp_path / "in" / f"{name}.jsonl", id_field="id", backend="cpu").deduplicated
        assert kept.schema.field("hash").type == decimal
        assert all(int(row["hash"]) == expected[row["id"]] for row in kept.to_pylist())
    # Each column its own type; a column of floats with an exponent, doubles as written.
    both = [{**r, "hash": 2**64 - 1 - n, "wide": 10**39 + n, "mass": 1e80 * (n + 1)} for n, r in enumerate(records[:5])]
    write_jsonl(tmp_path / "both.jsonl", both)
    kept = gpudedup.dedup(tmp_path / "both.jsonl", id_field="id", backend="cpu").deduplicated
    assert [kept.schema.field(name).type for name in ("hash", "wide", "mass")] == \
        [pa.decimal128(38, 0), pa.decimal256(76, 0), pa.float64()]
    assert [(int(row["hash"]), int(row["wide"]), row["mass"]) for row in kept.to_pylist()] == \
        [(r["hash"], r["wide"], r["mass"]) for r in both if r["id"] in set(kept["id"].to_pylist())]


def test_a_jsonl_integer_that_its_fields_fractions_would_round_is_refused_by_line(tmp_path):
    """A field holding fractions is read as doubles; an integer past 2**53 among them (at the
    top level, or inside a struct or list) would come back another number: refused naming its
    line and field, in memory and with a work directory, where the doubles alone (1e300, 2**53
    itself) are read and written back as they are."""
    records = sample_records()[:6]
    plain = [{**r, "y": value} for r, value in zip(records, [0.5, 1e300, 2**53, -2.25, 7, 0.125])]
    write_jsonl(tmp_path / "plain.jsonl", plain)
    kept = gpudedup.dedup(tmp_path / "plain.jsonl", id_field="id", backend="cpu").deduplicated
    assert kept.schema.field("y").type == pa.float64()
    assert kept.column("y").to_pylist() == [r["y"] for r in plain if r["id"] in set(kept["id"].to_pylist())]
    # A fraction beside it; a value written with a point whose double is whole (no decimal takes
    # it, so the field stays double); two other fields made decimals in one read.
    for name, rounded in (("top", {"y": 2**53 + 1}), ("nested", {"meta": {"values": [0.5, -(2**60) - 1]}}),
                          ("point", {"y": 2**64 - 1}), ("others", {"y": 2**53 + 1, "a": 2**64 - 1, "b": 2**64 - 2})):
        rows = [{**r, "y": 0.5 if name != "point" else "POINT", "meta": {"values": [1.5]}, "a": 1, "b": 2}
                for r in records]
        rows[3] = {**rows[3], **rounded}
        write_jsonl(tmp_path / f"{name}.jsonl", rows)
        text = (tmp_path / f"{name}.jsonl").read_text()  # (as written: json.dumps would give 1.2345678901234568e+17)
        (tmp_path / f"{name}.jsonl").write_text(text.replace('"POINT"', "123456789012345678.9"))
        field = "meta" if name == "nested" else "y"
        for extra in ([], ["--work-dir", str(tmp_path / f"work-{name}")]):
            out = tmp_path / f"out-{name}{len(extra)}"
            refused = invoke("dedup", tmp_path / f"{name}.jsonl", "-o", out, "--id-field", "id", "-q",
                             "--backend", "cpu", *extra)
            assert_user_error(refused, f"{name}.jsonl:4: field '{field}' holds the integer", "which its type, double",
                              out=out)
        with pytest.raises(gpudedup.InputError, match=f"{name}.jsonl:4: field '{field}'"):
            gpudedup.dedup(tmp_path / f"{name}.jsonl", id_field="id", backend="cpu")


@pytest.mark.parametrize("column", [pa.array([10**17, 1], pa.duration("ms")),
                                    pa.array([10**12, 1], pa.timestamp("s")),
                                    pa.array([{"t": 10**12}, {"t": 1}], pa.struct([("t", pa.timestamp("s"))]))],
                         ids=["duration", "timestamp", "nested"])
def test_a_time_past_python_s_range_is_refused_as_json_lines_by_column(tmp_path, column):
    """JSON Lines are written through Python's values: a timestamp past the year 9999 or a
    duration of more than a billion days has none, and is refused naming its column (nothing
    written), where Parquet writes it as it is."""
    table = pa.table({"id": ["a", "b"], "text": ["first document has some words", "second one has others"],
                      "when": column})
    with pa.ipc.new_file(tmp_path / "a.arrow", table.schema) as writer:
        writer.write_table(table)
    refused = invoke("dedup", tmp_path / "a.arrow", "-o", tmp_path / "out", "--format", "jsonl", "--id-field", "id",
                     "-q", "--backend", "cpu")
    assert_user_error(refused, f"column 'when' ({column.type}) holds a value past what Python's datetime takes",
                      "write Parquet (--format parquet)", out=tmp_path / "out")
    done = invoke("dedup", tmp_path / "a.arrow", "-o", tmp_path / "pq", "--id-field", "id", "-q", "--backend", "cpu")
    kept = pq.read_table(tmp_path / "pq" / "deduplicated").column("when")  # (Parquet's seconds: milliseconds)
    assert done.exit_code == 0 and kept.cast(column.type) == pa.chunked_array([column])


def test_jsonl_integers_past_int64_inside_structs_and_lists_are_kept_exactly(tmp_path):
    """The same holds inside a column: a struct field or list item of integers with one past
    int64 is read as whole decimals, each on its own, in memory and with a work directory, and a
    file whose field holds small integers combines with it; a list of whole numbers beside
    fractions stays doubles."""
    records = sample_records()[:60]
    nested = [{**r, "meta": {"hash": 2**64 - 1 - n, "n": n, "hashes": [2**63 + n, n], "mass": [1.5, 2.0]}}
              for n, r in enumerate(records[:40])]
    small = [{**r, "meta": {"hash": n, "n": n, "hashes": [n], "mass": [0.5]}} for n, r in enumerate(records[40:])]
    (tmp_path / "in").mkdir()
    write_jsonl(tmp_path / "in" / "nested.jsonl", nested)
    write_jsonl(tmp_path / "in" / "small.jsonl", small)
    expected = {r["id"]: r["meta"] for r in nested + small}
    for extra in ([], ["--single-file"], ["--single-file", "--work-dir", str(tmp_path / "work")]):
        out = tmp_path / f"out{len(extra)}"
        result = invoke("dedup", tmp_path / "in", "-o", out, "--id-field", "id", "-q", "--backend", "cpu", *extra)
        assert result.exit_code == 0, result.output
        for path in (out / "deduplicated").rglob("*.parquet") if not extra else [out / "deduplicated.parquet"]:
            rows = pq.read_table(path).to_pylist()
            assert rows and all({**row["meta"], "hash": int(row["meta"]["hash"]),
                                 "hashes": [int(h) for h in row["meta"]["hashes"]]} == expected[row["id"]]
                                for row in rows), path
    # Beside a file whose field holds a fraction, the files combined type it double, which
    # holds none of the hashes: refused, as a column of them is, in every layout.
    (tmp_path / "mixed").mkdir()
    write_jsonl(tmp_path / "mixed" / "nested.jsonl", nested)
    write_jsonl(tmp_path / "mixed" / "fraction.jsonl", [{**small[0], "meta": {**small[0]["meta"], "hash": 0.5}}])
    for extra in ([], ["--single-file"], ["--single-file", "--work-dir", str(tmp_path / "mixed-work")]):
        out = tmp_path / f"mixed-out{len(extra)}"
        refused = invoke("dedup", tmp_path / "mixed", "-o", out, "--id-field", "id", "-q", "--backend", "cpu", *extra)
        assert_user_error(refused, "column 'meta' holds values that its type in the files combined (struct<", out=out)
    meta = gpudedup.dedup(tmp_path / "in" / "nested.jsonl", id_field="id", backend="cpu").deduplicated.schema.field(
        "meta").type
    assert [meta.field(name).type for name in ("hash", "n", "hashes", "mass")] == \
        [pa.decimal128(38, 0), pa.int64(), pa.list_(pa.decimal128(38, 0)), pa.list_(pa.float64())]
