"""The checks across input files (io/rules.py): plan_combination decides from per-file summaries
alone, so a staged run (which keeps of each file only its ids and columns) and the in-memory
reader leave out the same files and rows, and stop with the same messages."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from gpudedup.errors import InputError
from gpudedup.io.formats import file_format
from gpudedup.io.inputs import display_path, scan_inputs
from gpudedup.io.read import read_corpus, read_one_file
from gpudedup.io.rules import PartSummary, plan_combination, sorted_records
from gpudedup.io.source import SourceFile, file_record


def part(path: str, ids: list, columns: dict | None = None, lines: list[int] | None = None,
         format: str = "jsonl") -> PartSummary:
    """A summary of a file whose rows have ``ids`` (in an "id" column) and a "text" column."""
    schema = pa.schema([("id", pa.array(ids).type if ids else pa.string()), ("text", pa.string()),
                        *(columns or {}).items()])
    numbers = np.asarray(lines, dtype=np.int64) if lines is not None else None
    return PartSummary.of_ids(path, format, pa.array(ids, schema.field("id").type), schema, numbers)


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


# --- the decision, on summaries -----------------------------------------------------------------


def test_compatible_parts_are_all_kept_with_their_unified_columns():
    parts = [part("a.jsonl", [1, 2], {"n": pa.int32()}), part("b.parquet", [3], {"n": pa.int64(), "m": pa.bool_()},
                                                               format="parquet")]
    plan = plan_combination(parts, "text", "id", "stop")
    assert plan.kept == (0, 1) and plan.left_out == () and plan.repeated == {} and plan.records == []
    assert plan.id_type == pa.int64()
    assert plan.schema.names == ["id", "text", "n", "m"]
    assert plan.schema.field("n").type == pa.int64()  # Arrow's permissive promotion
    assert plan.ids(parts).to_pylist() == [1, 2, 3] and plan.ids(parts).type == pa.int64()
    assert plan.keep_mask(0, 2) is None


def test_without_an_id_field_ids_are_strings_and_the_text_column_is_a_string_type():
    parts = [PartSummary.of_ids("a.jsonl", "jsonl", pa.array(["a.jsonl:1"]), pa.schema([("text", pa.null())]))]
    plan = plan_combination(parts, "text", None, "skip")
    assert plan.id_type == pa.string()
    assert plan.schema.field("text").type == pa.large_string()  # an all-null column, as Corpus casts it


def test_nothing_kept_gives_the_text_column_alone():
    plan = plan_combination([], "body", "id", "skip")
    assert plan.kept == () and plan.schema == pa.schema([("body", pa.large_string())])
    assert plan.ids([]).to_pylist() == []


def test_stop_names_the_files_whose_columns_cannot_be_combined():
    parts = [part("a.jsonl", [1], {"m": pa.int64()}), part("b.jsonl", [2], {"m": pa.string()})]
    with pytest.raises(InputError) as caught:
        plan_combination(parts, "text", "id", "stop")
    assert str(caught.value) == ("the input files have columns of incompatible types and cannot be combined "
                                 "(Unable to merge: Field m has incompatible types: int64 vs string); "
                                 "files: a.jsonl, b.jsonl")
    # Among many files, the two that do not combine are named.
    many = [part(f"{name}.jsonl", [i], {"m": pa.int64()}) for i, name in enumerate("cdefg")]
    many[3] = part("f.jsonl", [3], {"m": pa.string()})
    with pytest.raises(InputError, match=r"; files: c\.jsonl, f\.jsonl$"):
        plan_combination(many, "text", "id", "stop")


def test_stop_refuses_integer_and_string_ids():
    # Schemas that unify (the id column is not among them) but ids of two kinds.
    parts = [PartSummary.of_ids("a.jsonl", "jsonl", pa.array([1]), pa.schema([("text", pa.string())])),
             PartSummary.of_ids("b.jsonl", "jsonl", pa.array(["x"]), pa.schema([("text", pa.string())]))]
    with pytest.raises(InputError, match=r"^id field 'id' holds integers in some files and strings in others "
                                         r"\(files: a\.jsonl, b\.jsonl\)$"):
        plan_combination(parts, "text", "id", "stop")


def test_stop_locates_a_repeated_id_by_line_and_row():
    parts = [part("a.jsonl", ["x", "y"], lines=[3, 7]), part("b.parquet", ["z", "y", "x"], format="parquet")]
    with pytest.raises(InputError) as caught:
        plan_combination(parts, "text", "id", "stop")
    assert str(caught.value) == ("duplicate id 'x': documents a.jsonl:3, b.parquet row 3 share it "
                                 "(2 distinct ids are repeated); ids must be unique")


def test_skip_leaves_out_files_that_cannot_be_combined_with_the_ones_before():
    parts = [part("a.jsonl", [1], {"m": pa.int64()}),
             part("b.jsonl", [2], {"m": pa.string()}),  # columns
             PartSummary.of_ids("c.jsonl", "jsonl", pa.array(["s"]), pa.schema([("text", pa.string())])),  # id kind
             part("d.jsonl", [], {"m": pa.string()}),  # no rows, but its columns still count
             part("e.jsonl", [5], {"m": pa.int64()})]
    plan = plan_combination(parts, "text", "id", "skip")
    assert plan.kept == (0, 4) and plan.left_out == (1, 2, 3)
    assert [(r["file"], r["line"]) for r in plan.records] == [("b.jsonl", None), ("c.jsonl", None), ("d.jsonl", None)]
    assert plan.records[0]["reason"] == ("its columns cannot be combined with the files read before it "
                                         "(Unable to merge: Field m has incompatible types: int64 vs string)")
    assert plan.records[1]["reason"] == "id field 'id' holds strings, but integers in the files read before it"
    assert plan.ids(parts).to_pylist() == [1, 5]


def test_skip_leaves_out_later_rows_of_a_repeated_id():
    parts = [part("a.jsonl", ["x", "y", "x"], lines=[1, 5, 6]), part("b.parquet", ["y", "z"], format="parquet")]
    plan = plan_combination(parts, "text", "id", "skip")
    assert plan.kept == (0, 1)
    assert {index: rows.tolist() for index, rows in plan.repeated.items()} == {0: [2], 1: [0]}
    assert plan.repeated[0].dtype == np.int64
    assert plan.keep_mask(0, 3).tolist() == [True, True, False]
    assert plan.records == [
        {"file": "a.jsonl", "line": 6, "reason": "duplicate id 'x': the same id as a.jsonl:1, which is kept"},
        {"file": "b.parquet", "line": 1, "reason": "duplicate id 'y': the same id as a.jsonl:5, which is kept"},
    ]
    assert plan.ids(parts).to_pylist() == ["x", "y", "z"]


def test_skip_without_an_id_field_still_refuses_a_repeated_id():
    parts = [PartSummary.of_ids("a.jsonl", "jsonl", pa.array(["a.jsonl:1", "a.jsonl:1"]),
                                pa.schema([("text", pa.string())]))]
    with pytest.raises(InputError, match="duplicate id 'a.jsonl:1'"):
        plan_combination(parts, "text", None, "skip")


# --- a staged run's use: one file at a time, then the plan ----------------------------------------


@pytest.mark.parametrize("on_error", ["stop", "skip"])
def test_a_plan_over_files_read_one_at_a_time_equals_the_in_memory_reader(tmp_path, monkeypatch, on_error):
    """As a staged run does: each file read alone, only its ids, columns and row numbers kept;
    the plan's ids and records equal read_corpus's on the same files."""
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"id": 1, "text": "one", "m": 1}, {"id": 2, "text": "two"}])
    bad_line = "not json\n" if on_error == "skip" else "\n"  # under "stop" it would stop both at reading
    (tmp_path / "in" / "b.jsonl").write_text('{"id": 3, "text": "three"}\n' + bad_line + '{"id": 1, "text": "again"}\n')
    write_jsonl(tmp_path / "in" / "c.jsonl", [{"id": 4, "text": "four", "m": "text"}])
    write_jsonl(tmp_path / "in" / "d.jsonl", [{"id": 2, "text": "two again"}, {"id": 5, "text": "five"}])
    found = scan_inputs([tmp_path / "in"], on_error)
    summaries, records = [], list(found.records)
    read_records = []
    for path in found.files:
        source = SourceFile(display_path(path), file_format(path))
        try:
            one = read_one_file(path, source, "text", "id", False, on_error)
        except InputError as error:
            if on_error == "stop":
                raise
            records.append(file_record(error, source.path))
            continue
        summaries.append(PartSummary.of_ids(source.path, source.format, one.ids, one.table.schema, source.row_numbers))
        read_records.append(one.records)
    if on_error == "stop":
        with pytest.raises(InputError) as staged:
            plan_combination(summaries, "text", "id", on_error)
        with pytest.raises(InputError) as memory:
            read_corpus([tmp_path / "in"], id_field="id")
        assert str(staged.value) == str(memory.value)
        assert str(staged.value).startswith("the input files have columns of incompatible types")
        return
    plan = plan_combination(summaries, "text", "id", on_error)
    for index in plan.kept:
        records.extend(read_records[index])
    records.extend(plan.records)
    corpus = read_corpus([tmp_path / "in"], id_field="id", on_error="skip")
    assert plan.ids(summaries).equals(corpus.ids)
    assert sorted_records(records, found) == corpus.skipped_records
    assert corpus.ids.to_pylist() == [1, 2, 3, 5]
    assert [r["line"] for r in corpus.skipped_records if r["file"].endswith("b.jsonl")] == [2, 3]  # line 3: row 1
    assert [r["file"] for r in corpus.skipped_records if r["line"] is None] == [str(Path("in") / "c.jsonl")]
    assert plan.schema == corpus.table.schema
