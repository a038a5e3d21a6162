"""The command line on bad input: every case exits with code 2, prints one 'error:' line naming
the file and line (or the field / parameter) and what was expected, prints no traceback and
writes nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli_support import (assert_unreadable_reported, assert_user_error, error_line, happy_records, invoke,
                         leftovers, paragraph, tree_snapshot, variant, without_read_permission, write_jsonl,
                         write_unreadable)
from output_support import kept_lines, read_kept, read_pairs


# --- bad input: exit 2, file and line, nothing written ------------------------------------------


def test_missing_path(in_tmp):
    result = invoke("dedup", "missing.jsonl", "-o", "out")
    assert_user_error(result, "missing.jsonl", "no such file or directory", out=in_tmp / "out")


@pytest.mark.parametrize("args", [["dedup", "", "-o", "out"], ["dedup", "data.jsonl", "-o", ""],
                                  ["dedup", "data.jsonl", "-o", "out", "--work-dir", ""],
                                  ["dedup", "data.jsonl", "-o", "out", "--against", ""],
                                  ["evaluate", "data.jsonl", "-o", ""], ["demo", "-o", ""], ["index", "info", ""]])
def test_an_empty_path_is_refused_not_read_as_this_folder(happy, args):
    """An empty path (an unset shell variable) would name the working directory: as an input
    it would deduplicate whatever lies there, as an output write into it. Refused in one line,
    nothing written, the folder as it was."""
    before = tree_snapshot(happy)
    result = invoke(*args)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert error_line(result) == ("error: a path is empty (an unset shell variable?): name a file or a folder ('.' "
                                  "for this one)")
    assert tree_snapshot(happy) == before


def test_names_from_the_data_never_steer_the_terminal(in_tmp):
    """File names, an output path and group values print as they are: rich markup in them is
    not read as markup (a name like x[/b] is a closing tag to rich, which raises on one it did
    not open), and a control character (ESC, which starts colours and links) shows as its
    escape."""
    esc = "\x1b"
    rows = happy_records()
    write_jsonl(in_tmp / "corpus" / f"a{esc}[41mred.jsonl", [{**row, "g": f"{esc}]8;;evil{esc}\\g"} for row in rows])
    write_jsonl(in_tmp / "corpus" / "b[bold].jsonl", rows)
    (in_tmp / "x[").mkdir()  # (x[/b] is b inside x[)
    for out, by in (("x[/b]", []), (f"o{esc}[7mrev", ["--group-field", "g"])):
        result = invoke("dedup", "corpus", "-o", out, *by)
        assert result.exit_code == 0, result.output
        assert esc not in result.output and "\\x1b" in result.output
        said = " ".join(result.output.split())  # (the summary wraps at the terminal's width)
        shown = out.replace(esc, "\\x1b")
        assert f"Results in {shown}/" in said
        assert ("\\x1b]8;;evil" if by else "b[bold].jsonl") in said
        assert (in_tmp / out / "report.json").is_file()


def test_an_error_about_a_file_whose_name_holds_a_newline_is_one_line(in_tmp):
    """A newline in a file's name (legal on Linux) shows as its escape in the error's one line."""
    (in_tmp / "corpus").mkdir()
    (in_tmp / "corpus" / "new\nline.jsonl").write_text('{"text": "one two three four five six"}\n{"text": "cut\n')
    result = invoke("dedup", "corpus", "-o", "out")
    assert_user_error(result, "corpus/new\\nline.jsonl:2: invalid JSON", out=in_tmp / "out")
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_name_that_is_not_utf8_is_one_line(in_tmp):
    """A file name of bytes that are not UTF-8 (common on Linux) cannot name ids, reports or
    output files: a file given, or found in a folder, is refused in one line (left out under
    --on-error skip, with a record); an output or work directory of such a name too."""
    import os

    folder = in_tmp / "corpus"
    write_jsonl(folder / "good.jsonl", happy_records())
    odd = Path(os.fsdecode(bytes(folder) + b"/bad\xffname.jsonl"))
    write_jsonl(odd, happy_records())
    shown = "bad\ufffdname.jsonl"
    assert_user_error(invoke("dedup", "corpus", "-o", "out"), f"corpus/{shown}: the name is not valid UTF-8",
                      "--on-error skip", out=in_tmp / "out")
    assert_user_error(invoke("dedup", str(odd), "-o", "out"), f"{shown}: the name is not valid UTF-8",
                      out=in_tmp / "out")
    skipped = invoke("dedup", "corpus", "-o", "out", "--on-error", "skip", "-q")
    assert skipped.exit_code == 0, skipped.output
    records = [json.loads(line) for line in (in_tmp / "out" / "errors.jsonl").read_text().splitlines()]
    assert [(r["file"], r["line"]) for r in records] == [(f"corpus/{shown}", None)]
    assert len(read_kept(in_tmp / "out")) == 5  # (good.jsonl's eight rows, three of them near-duplicates)
    for option in ("-o", "--work-dir"):
        place = os.fsdecode(bytes(in_tmp) + b"/place\xff")
        arguments = ["-o", place] if option == "-o" else ["-o", "out2", "--work-dir", place]
        result = invoke("dedup", "corpus/good.jsonl", *arguments)
        assert result.exit_code == 2 and "place\ufffd: the name is not valid UTF-8" in error_line(result)
        assert not os.path.lexists(place) and not (in_tmp / "out2").exists()


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
        rows = read_kept(in_tmp / "out").to_pylist()
        assert [r["text"] for r in rows] == [r["text"] for r in records if r is not records[2]]
    else:
        # the second line is where "meta" changes type (pyarrow's own message says "row 1",
        # counting from 0, which reads as line 1)
        line = assert_user_error(result, "mixed.jsonl:2", out=in_tmp / "out")
        assert "meta" in line, line


def test_all_texts_null_is_allowed(in_tmp):
    write_jsonl(in_tmp / "nulls.jsonl", [{"text": None, "n": 1}, {"text": None, "n": 2}, {"text": None, "n": 3}])
    result = invoke("dedup", "nulls.jsonl", "-o", "out", "-q")
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    report = json.loads((in_tmp / "out" / "report.json").read_text())
    assert report["input"]["documents"] == 3
    assert report["input"]["null_texts"] == 3
    assert report["results"]["removed_documents"] == 0
    assert read_kept(in_tmp / "out")["n"].to_pylist() == [1, 2, 3]


def test_empty_input_file(in_tmp):
    """Inputs that give no document stop the run (tests/test_skipped_files.py has the rest)."""
    (in_tmp / "empty.jsonl").write_text("")
    result = invoke("dedup", "empty.jsonl", "-o", "out", "-q")
    assert_user_error(result, "no document could be read from the inputs: the files read hold no records "
                              "(empty.jsonl)", out=in_tmp / "out")


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
    lines = kept_lines(in_tmp / "out")
    assert [json.loads(line) for line in lines] == records[:2]
    pairs = read_pairs(in_tmp / "out").to_pylist()
    assert [(p["id_a"], p["id_b"]) for p in pairs] == [("2020-01-01", "2020-01-03")]


def test_date_like_texts_only(in_tmp):
    # char 3-grams: J("2020-01-01", "2020-01-02") = 7/8, J(either, "1999-12-31") = 0
    write_jsonl(in_tmp / "dates.jsonl", [{"text": "2020-01-01"}, {"text": "1999-12-31"},
                                         {"text": "2020-01-02"}])
    result = invoke("dedup", "dates.jsonl", "-o", "out", "-q", "--shingle", "char", "--ngram", "3")
    assert result.exit_code == 0, result.output
    assert read_kept(in_tmp / "out")["text"].to_pylist() == [
        "2020-01-01", "1999-12-31"]
    pairs = read_pairs(in_tmp / "out").to_pylist()
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


@pytest.mark.parametrize("staged", [False, True], ids=["in memory", "staged"])
def test_an_unsigned_id_above_int64_is_refused_naming_the_row(in_tmp, staged):
    table = pa.table({"id": pa.array([1, 2**63 + 5, 3], pa.uint64()), "text": ["a b c", "d e f", "g h i"]})
    pq.write_table(table, in_tmp / "big.parquet")
    extra = ["--work-dir", "work"] if staged else []
    result = invoke("dedup", "big.parquet", "-o", "out", "--id-field", "id", *extra)
    assert_user_error(result, "big.parquet", "'id'", str(2**63 + 5), "row 2", "64-bit", out=in_tmp / "out")


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
    (["--threshold", "0"], ["--threshold", "(0, 1]", "0"]),
    (["--threshold", "1.5"], ["--threshold", "(0, 1]", "1.5"]),
    (["--threshold", "-0.2"], ["--threshold", "(0, 1]"]),
    (["--ngram", "0"], ["--ngram", ">= 1"]),
    (["--num-perm", "0"], ["--num-perm", "1 to 4096"]),
    (["--bands", "20", "--rows", "10", "--num-perm", "128"], ["bands x rows", "200", "--num-perm 128"]),
    (["--bands", "20"], ["--bands 20 needs --rows", "both"]),
    (["--rows", "4"], ["--rows 4 needs --bands", "both"]),
    (["--bands", "0", "--rows", "4"], ["--bands", ">= 1"]),
    (["--bucket-window", "0"], ["--bucket-window", ">= 1"]),
    (["--batch-bytes", "0"], ["--batch-bytes", "must be positive"]),
    (["--seed", "-1"], ["--seed", "2**64"]),
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
    # (not "use --overwrite": it replaces only a gpudedup output, and refuses this folder too)
    assert_user_error(result, "out", "holds files that are not a gpudedup output (keep-me.txt)", "empty it",
                      out=out, before=before)
    assert "--overwrite" not in result.output


@pytest.mark.parametrize("given", [".", "{here}", "..", "../here/sub/.."])
def test_the_current_folder_as_the_output_is_refused_before_any_work(happy, given):
    """An output that is or holds the current folder (-o ., its path, or a folder above it) is
    refused before any work: the write puts a new folder in the output's place, which would
    leave the process and its shell in a folder that is gone."""
    here = happy / "a" / "here"
    (here / "sub").mkdir(parents=True)
    os.chdir(here)
    before = tree_snapshot(happy)
    result = invoke("dedup", "../../data.jsonl", "-o", given.format(here=here))
    assert result.exit_code == 2 and "Shingling" not in result.output
    assert f"is or holds the current folder ({here})" in error_line(result)
    assert tree_snapshot(happy) == before and Path.cwd() == here


def test_an_output_named_by_dot_dot_after_a_link_is_the_folder_above_its_target(happy):
    """-o sub/lnk/.. with sub/lnk a link to elsewhere/deep: the folder above the link's target
    (elsewhere), as the file system takes sub/lnk/../x, not sub; it holds deep, so refused by
    that name, and sub is left alone."""
    (happy / "elsewhere" / "deep").mkdir(parents=True)
    (happy / "sub").mkdir()
    (happy / "sub" / "lnk").symlink_to(happy / "elsewhere" / "deep")
    before = tree_snapshot(happy)
    result = invoke("dedup", "data.jsonl", "-o", "sub/lnk/..")
    assert result.exit_code == 2, result.output
    assert error_line(result).startswith(f"error: {happy / 'elsewhere'}: holds files that are not a gpudedup output "
                                         "(deep)"), result.output
    assert tree_snapshot(happy) == before and leftovers(happy, "elsewhere") == [] and leftovers(happy, "sub") == []


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
    (happy / "a-file").write_text("mine")
    result = invoke("dedup", "data.jsonl", "-o", "a-file/out")
    assert_user_error(result, "parent directory", "a-file is a file, not a directory", out=happy / "a-file" / "out")
    assert (happy / "a-file").read_text() == "mine"


def test_an_output_in_a_work_directory_the_run_makes_is_written(happy):
    """-o WORK/out with --work-dir WORK, WORK not made yet: the run makes WORK before it
    writes, so the output's folder is not missing; a folder below WORK still is, and so is
    WORK named through a link that leads elsewhere (where the run would make it)."""
    result = invoke("dedup", "data.jsonl", "--work-dir", "work", "-o", "work/out", "-q")
    assert result.exit_code == 0, result.output
    assert (happy / "work" / "out" / "report.json").is_file() and (happy / "work" / "manifest.json").is_file()
    result = invoke("dedup", "data.jsonl", "--work-dir", "work2", "-o", "work2/below/out", "-q")
    assert_user_error(result, "parent directory", "does not exist", out=happy / "work2" / "below" / "out")
    assert not (happy / "work2").exists()
    (happy / "elsewhere" / "deep").mkdir(parents=True)
    (happy / "link").symlink_to(happy / "elsewhere" / "deep")
    result = invoke("dedup", "data.jsonl", "--work-dir", "link/../work3", "-o", "work3/out", "-q")
    assert_user_error(result, "parent directory", "does not exist", out=happy / "work3" / "out")
    assert not (happy / "elsewhere" / "work3").exists()


def test_bad_input_with_overwrite_keeps_old_output(in_tmp):
    out = in_tmp / "out"
    out.mkdir()
    (out / "report.json").write_text("{}")
    (out / ".gpudedup-output").write_text('{"written_by": "gpudedup"}')  # an output of ours
    before = tree_snapshot(out)
    (in_tmp / "bad.jsonl").write_text('{"text": "a"}\n{"text": \n')
    result = invoke("dedup", "bad.jsonl", "-o", "out", "--overwrite")
    assert_user_error(result, "bad.jsonl:2", out=out, before=before)


def test_bad_parameter_with_overwrite_keeps_old_output(happy):
    out = happy / "out"
    out.mkdir()
    (out / "report.json").write_text("{}")
    (out / ".gpudedup-output").write_text('{"written_by": "gpudedup"}')  # an output of ours
    before = tree_snapshot(out)
    result = invoke("dedup", "data.jsonl", "-o", "out", "--overwrite", "--threshold", "2")
    assert_user_error(result, "threshold", out=out, before=before)


@pytest.mark.parametrize("command", [["dedup", "{input}", "-o", "out"], ["dedup", "{input}", "-o", "{tmp}/out"],
                                     ["evaluate", "{input}", "-o", "{tmp}/out"]])
def test_a_current_folder_that_was_removed_is_one_error_line(tmp_path, monkeypatch, command):
    """Run from a folder removed after the shell entered it (every relative path and every path
    shown are taken from it): one error line, exit 2, nothing written, even where every path
    given is absolute; a command that needs no current folder runs."""
    (tmp_path / "in").mkdir()
    write_jsonl(tmp_path / "in" / "a.jsonl", happy_records())
    monkeypatch.chdir(tmp_path / "in")
    (tmp_path / "gone").mkdir()
    os.chdir(tmp_path / "gone")
    os.rmdir(tmp_path / "gone")
    arguments = [part.format(input=tmp_path / "in" / "a.jsonl", tmp=tmp_path) for part in command]
    assert_user_error(invoke(*arguments), "the current folder no longer exists", out=tmp_path / "out")
    assert invoke("params", "--threshold", "0.7").exit_code == 0


@pytest.mark.parametrize("command", [["dedup", "{input}", "-o", "{long}"], ["dedup", "{tmp}/{long}", "-o", "out"],
                                     ["evaluate", "{input}", "-o", "{long}"], ["index", "create", "{long}"],
                                     ["demo", "-o", "{long}"]])
def test_a_name_longer_than_the_file_system_takes_is_one_error_line(tmp_path, monkeypatch, command):
    """A file or folder name past the file system's limit (255 bytes a name on most), given
    anywhere: one error line naming it, exit 2, nothing written."""
    (tmp_path / "in").mkdir()
    write_jsonl(tmp_path / "in" / "a.jsonl", happy_records())
    monkeypatch.chdir(tmp_path)
    long = "a" * 300
    arguments = [part.format(input=tmp_path / "in" / "a.jsonl", tmp=tmp_path, long=long) for part in command]
    line = assert_user_error(invoke(*arguments), "a name in this path, or the whole path, is longer than the file "
                             "system takes",
                             out=tmp_path / "out")
    assert long in line and sorted(os.listdir(tmp_path)) == ["in"]
