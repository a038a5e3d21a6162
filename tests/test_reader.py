"""Reading corpora: JSONL (.jsonl, .jsonl.gz), Parquet, .txt files and directories of them."""

from __future__ import annotations

import gzip
import json
import random
import string
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpudedup.errors import InputError, ParameterError
from gpudedup.io.corpus import Corpus
from gpudedup.io.inputs import display_path, scan_inputs
from gpudedup.io.read import read_corpus


# --- helpers ------------------------------------------------------------------------------------


def paragraph(seed: int, words: int = 60) -> str:
    rng = random.Random(seed)
    return " ".join("".join(rng.choice(string.ascii_lowercase) for _ in range(7)) for _ in range(words))


def write_jsonl(path: Path, records, newline: str = "\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + newline for r in records), encoding="utf-8")
    return path


def ids_of(corpus: Corpus) -> list:
    return corpus.ids.to_pylist()


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    """Run inside tmp_path, so display paths (and default ids) are relative to it."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --- single files -------------------------------------------------------------------------------


def test_jsonl_default_ids_and_columns(in_tmp):
    records = [{"text": paragraph(i), "n": i, "tag": f"t{i}"} for i in range(3)]
    write_jsonl(in_tmp / "docs.jsonl", records)
    corpus = read_corpus(["docs.jsonl"])
    assert corpus.num_rows == 3
    assert corpus.text_field == "text"
    assert corpus.table.column_names == ["text", "n", "tag"]
    assert corpus.table.to_pylist() == records
    assert ids_of(corpus) == ["docs.jsonl:1", "docs.jsonl:2", "docs.jsonl:3"]
    assert corpus.texts.to_pylist() == [r["text"] for r in records]
    assert [f.path for f in corpus.files] == ["docs.jsonl"]
    assert [f.format for f in corpus.files] == ["jsonl"]
    assert corpus.files[0].rows == 3
    assert corpus.skipped == []


def test_jsonl_ids_are_line_numbers_with_blank_lines(in_tmp):
    a, b, c = ({"text": paragraph(i)} for i in range(3))
    raw = "\n" + json.dumps(a) + "\n\n   \n" + json.dumps(b) + "\n\t\n" + json.dumps(c) + "\n\n"
    (in_tmp / "gaps.jsonl").write_text(raw, encoding="utf-8")
    corpus = read_corpus([Path("gaps.jsonl")])
    assert corpus.texts.to_pylist() == [a["text"], b["text"], c["text"]]
    # a on line 2, b on line 5, c on line 7
    assert ids_of(corpus) == ["gaps.jsonl:2", "gaps.jsonl:5", "gaps.jsonl:7"]


def test_jsonl_without_final_newline_and_crlf(in_tmp):
    records = [{"text": paragraph(i)} for i in range(3)]
    (in_tmp / "crlf.jsonl").write_text("\r\n".join(json.dumps(r) for r in records), encoding="utf-8")
    corpus = read_corpus(["crlf.jsonl"])
    assert corpus.texts.to_pylist() == [r["text"] for r in records]
    assert ids_of(corpus) == ["crlf.jsonl:1", "crlf.jsonl:2", "crlf.jsonl:3"]


def test_jsonl_gz(in_tmp):
    records = [{"text": paragraph(i), "k": i} for i in range(4)]
    raw = "".join(json.dumps(r) + "\n" for r in records).encode()
    (in_tmp / "docs.jsonl.gz").write_bytes(gzip.compress(raw))
    corpus = read_corpus(["docs.jsonl.gz"])
    assert corpus.table.to_pylist() == records
    assert ids_of(corpus) == [f"docs.jsonl.gz:{i}" for i in range(1, 5)]
    assert corpus.files[0].format == "jsonl"


def test_corrupt_gzip_is_an_input_error(in_tmp):
    (in_tmp / "broken.jsonl.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(InputError, match="broken.jsonl.gz"):
        read_corpus(["broken.jsonl.gz"])


def test_parquet(in_tmp):
    table = pa.table({"text": [paragraph(i) for i in range(3)], "score": [0.5, 1.5, 2.5],
                      "n": pa.array([1, 2, 3], pa.int32())})
    pq.write_table(table, in_tmp / "docs.parquet")
    corpus = read_corpus(["docs.parquet"])
    assert corpus.table.equals(table)
    assert ids_of(corpus) == ["docs.parquet:1", "docs.parquet:2", "docs.parquet:3"]
    assert corpus.files[0].format == "parquet"


def test_txt_file_is_one_document(in_tmp):
    body = "first line\nsecond line\n\nthird line, with unicode: é ß 漢字\n"
    (in_tmp / "note.txt").write_text(body, encoding="utf-8")
    corpus = read_corpus(["note.txt"])
    assert corpus.num_rows == 1
    assert corpus.texts.to_pylist() == [body]
    assert ids_of(corpus) == ["note.txt:1"]
    assert corpus.files[0].format == "text"


def test_txt_utf8_bom_is_dropped(in_tmp):
    (in_tmp / "bom.txt").write_bytes("\ufeffhello world".encode("utf-8"))
    assert read_corpus(["bom.txt"]).texts.to_pylist() == ["hello world"]


def test_ids_use_absolute_path_outside_cwd(tmp_path, monkeypatch):
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    path = write_jsonl(tmp_path / "data" / "x.jsonl", [{"text": "a b c"}, {"text": "d e f"}])
    corpus = read_corpus([path])
    assert ids_of(corpus) == [f"{path.absolute()}:1", f"{path.absolute()}:2"]
    assert display_path(path) == str(path.absolute())


def test_ids_relative_below_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_jsonl(tmp_path / "sub" / "x.jsonl", [{"text": "a b c"}])
    # given absolute, shown relative to the working directory
    assert ids_of(read_corpus([path.absolute()])) == [str(Path("sub") / "x.jsonl") + ":1"]
    # named through "..": the same ids, unless a symbolic link before the ".." makes the
    # shorter path another file
    other = tmp_path.parent / "other"
    other.mkdir(exist_ok=True)
    (tmp_path / "link").symlink_to(other)
    for spelled in (Path("..") / tmp_path.name / "sub" / "x.jsonl", tmp_path / "sub" / ".." / "sub" / "x.jsonl"):
        assert display_path(spelled) == str(Path("sub") / "x.jsonl")
        assert ids_of(read_corpus([spelled])) == [str(Path("sub") / "x.jsonl") + ":1"]
    write_jsonl(other.parent / "y.jsonl", [{"text": "g h i"}])
    write_jsonl(tmp_path / "y.jsonl", [{"text": "j k l"}])
    beyond = Path("link") / ".." / "y.jsonl"  # (other's parent's y.jsonl, not the working directory's)
    assert display_path(beyond) == str(beyond) and display_path(Path("y.jsonl")) == "y.jsonl"


# --- id field -----------------------------------------------------------------------------------


def test_id_field_strings(in_tmp):
    records = [{"doc": f"d{i}", "text": paragraph(i)} for i in range(3)]
    write_jsonl(in_tmp / "docs.jsonl", records)
    corpus = read_corpus(["docs.jsonl"], id_field="doc")
    assert ids_of(corpus) == ["d0", "d1", "d2"]
    assert corpus.table.column_names == ["doc", "text"]


def test_id_field_integers_across_files(in_tmp):
    write_jsonl(in_tmp / "a.jsonl", [{"id": 10, "text": "x y z"}, {"id": 11, "text": "u v w"}])
    pq.write_table(pa.table({"id": pa.array([12], pa.int32()), "text": ["p q r"]}), in_tmp / "b.parquet")
    corpus = read_corpus(["a.jsonl", "b.parquet"], id_field="id")
    assert ids_of(corpus) == [10, 11, 12]
    assert pa.types.is_integer(corpus.ids.type)


def test_id_field_mixed_int_and_string_is_an_error(in_tmp):
    write_jsonl(in_tmp / "a.jsonl", [{"id": 1, "text": "x y z"}])
    write_jsonl(in_tmp / "b.jsonl", [{"id": "one", "text": "x y z"}])
    with pytest.raises(InputError) as info:
        read_corpus(["a.jsonl", "b.jsonl"], id_field="id")
    message = str(info.value)
    assert "id" in message and "a.jsonl" in message and "b.jsonl" in message


def test_text_field_option(in_tmp):
    write_jsonl(in_tmp / "docs.jsonl", [{"body": "a b c", "text": 1}, {"body": "d e f", "text": 2}])
    corpus = read_corpus(["docs.jsonl"], text_field="body")
    assert corpus.text_field == "body"
    assert corpus.texts.to_pylist() == ["a b c", "d e f"]


def test_duplicate_given_ids_are_rejected(in_tmp):
    write_jsonl(in_tmp / "a.jsonl", [{"id": "x", "text": "a"}, {"id": "y", "text": "b"}])
    write_jsonl(in_tmp / "b.jsonl", [{"id": "y", "text": "c"}])
    with pytest.raises(InputError) as info:
        read_corpus(["a.jsonl", "b.jsonl"], id_field="id")
    message = str(info.value)
    assert "'y'" in message and "a.jsonl:2" in message and "b.jsonl:1" in message


# --- null / missing text --------------------------------------------------------------------------


def test_null_text_becomes_null_and_a_missing_one_is_a_bad_record(in_tmp):
    lines = [{"text": paragraph(1), "n": 1}, {"text": None, "n": 2}, {"n": 3}, {"text": "", "n": 4}]
    write_jsonl(in_tmp / "docs.jsonl", lines)
    with pytest.raises(InputError, match="docs.jsonl:3: no field 'text' \\(its fields: n\\)"):
        read_corpus(["docs.jsonl"])
    corpus = read_corpus(["docs.jsonl"], on_error="skip")
    assert corpus.num_rows == 3
    assert corpus.texts.to_pylist() == [paragraph(1), None, ""]
    assert corpus.texts.null_count == 1
    assert corpus.table["n"].to_pylist() == [1, 2, 4]
    assert ids_of(corpus) == ["docs.jsonl:1", "docs.jsonl:2", "docs.jsonl:4"]
    assert [(r["line"], r["reason"][:16]) for r in corpus.skipped_records] == [(3, "no field 'text' ")]


def test_all_text_null_is_allowed(in_tmp):
    write_jsonl(in_tmp / "docs.jsonl", [{"text": None}, {"text": None}])
    corpus = read_corpus(["docs.jsonl"])
    assert corpus.texts.null_count == 2


def test_missing_text_field_in_whole_file_is_an_error(in_tmp):
    write_jsonl(in_tmp / "docs.jsonl", [{"body": "a"}, {"body": "b"}])
    with pytest.raises(InputError) as info:
        read_corpus(["docs.jsonl"])
    assert "docs.jsonl" in str(info.value) and "'text'" in str(info.value)


def test_parquet_text_of_wrong_type_is_an_error(in_tmp):
    pq.write_table(pa.table({"text": [1, 2]}), in_tmp / "nums.parquet")
    with pytest.raises(InputError) as info:
        read_corpus(["nums.parquet"])
    assert "nums.parquet" in str(info.value) and "expected a string" in str(info.value)


def test_not_a_parquet_file_is_an_error(in_tmp):
    (in_tmp / "fake.parquet").write_bytes(b"this is not parquet")
    with pytest.raises(InputError, match="fake.parquet"):
        read_corpus(["fake.parquet"])


# --- directories --------------------------------------------------------------------------------


# The texts make_tree writes, in the order a sorted recursive walk reads them.
TREE_TEXTS = ["a one", "b text", "d one", "d two", "e one", "g one", "g two"]


def make_tree(root: Path) -> None:
    """Files created in reverse order, so that only sorting gives the expected order."""
    write_jsonl(root / "c" / "f" / "g.jsonl", [{"text": "g one"}, {"text": "g two"}])
    write_jsonl(root / "c" / "e.jsonl", [{"text": "e one"}])
    pq.write_table(pa.table({"text": ["d one", "d two"]}), root / "c" / "d.parquet")
    (root / "b.txt").write_text("b text", encoding="utf-8")
    write_jsonl(root / "a.jsonl", [{"text": "a one"}])
    # skipped: hidden files, hidden directories, unknown extensions
    write_jsonl(root / ".hidden.jsonl", [{"text": "hidden"}])
    write_jsonl(root / ".git" / "inside.jsonl", [{"text": "in hidden dir"}])
    (root / "README.md").write_text("# not data", encoding="utf-8")
    (root / "c" / "table.csv").write_text("text\nx\n", encoding="utf-8")


def test_directory_recursive_sorted_and_skips(in_tmp):
    make_tree(in_tmp / "corpus")
    corpus = read_corpus(["corpus"])
    assert corpus.texts.to_pylist() == TREE_TEXTS
    sep = "/"
    assert [f.path.replace("\\", sep) for f in corpus.files] == [
        "corpus/a.jsonl", "corpus/b.txt", "corpus/c/d.parquet", "corpus/c/e.jsonl", "corpus/c/f/g.jsonl"]
    assert ids_of(corpus) == ["corpus/a.jsonl:1", "corpus/b.txt:1", "corpus/c/d.parquet:1",
                              "corpus/c/d.parquet:2", "corpus/c/e.jsonl:1", "corpus/c/f/g.jsonl:1",
                              "corpus/c/f/g.jsonl:2"]
    skipped = sorted(s.replace("\\", sep) for s in corpus.skipped)
    assert "corpus/.hidden.jsonl" in skipped
    assert "corpus/README.md" in skipped
    assert "corpus/c/table.csv" in skipped
    assert not any(".git" in f.path for f in corpus.files)
    assert "in hidden dir" not in corpus.texts.to_pylist()
    assert "hidden" not in corpus.texts.to_pylist()


def test_the_scan_matches_read_corpus(in_tmp):
    make_tree(in_tmp / "corpus")
    found = scan_inputs(["corpus"])
    files, skipped = found.files, found.skipped
    assert [p.name for p in files] == ["a.jsonl", "b.txt", "d.parquet", "e.jsonl", "g.jsonl"]
    assert {Path(s).name for s in skipped} >= {".hidden.jsonl", "README.md", "table.csv"}


def test_directory_order_independent_of_creation_order(in_tmp):
    for name in ["z.jsonl", "m.jsonl", "a.jsonl", "k.jsonl"]:
        write_jsonl(in_tmp / "d" / name, [{"text": name}])
    assert read_corpus(["d"]).texts.to_pylist() == ["a.jsonl", "k.jsonl", "m.jsonl", "z.jsonl"]


def test_mixed_formats_in_one_directory(in_tmp):
    d = in_tmp / "mixed"
    write_jsonl(d / "1.jsonl", [{"text": paragraph(1), "tag": "j"}])
    raw = (json.dumps({"text": paragraph(2), "tag": "g"}) + "\n").encode()
    (d / "2.jsonl.gz").write_bytes(gzip.compress(raw))
    pq.write_table(pa.table({"text": [paragraph(3)], "tag": ["p"]}), d / "3.parquet")
    (d / "4.txt").write_text(paragraph(4), encoding="utf-8")
    corpus = read_corpus(["mixed"])
    assert corpus.texts.to_pylist() == [paragraph(i) for i in range(1, 5)]
    assert [f.format for f in corpus.files] == ["jsonl", "jsonl", "parquet", "text"]
    # columns are unified across files: the .txt file has no "tag"
    assert corpus.table["tag"].to_pylist() == ["j", "g", "p", None]
    assert ids_of(corpus) == ["mixed/1.jsonl:1", "mixed/2.jsonl.gz:1", "mixed/3.parquet:1", "mixed/4.txt:1"]


def test_several_paths_keep_their_order(in_tmp):
    write_jsonl(in_tmp / "b.jsonl", [{"text": "b"}])
    write_jsonl(in_tmp / "a.jsonl", [{"text": "a"}])
    assert read_corpus(["b.jsonl", "a.jsonl"]).texts.to_pylist() == ["b", "a"]


def test_directory_without_inputs_is_an_error(in_tmp):
    (in_tmp / "empty").mkdir()
    (in_tmp / "empty" / "notes.md").write_text("x")
    with pytest.raises(InputError, match="no input files"):
        read_corpus(["empty"])


def test_missing_path_is_an_error(in_tmp):
    with pytest.raises(InputError) as info:
        read_corpus(["nope.jsonl"])
    assert "nope.jsonl" in str(info.value) and "no such file" in str(info.value)


def test_unknown_extension_given_directly_is_an_error(in_tmp):
    (in_tmp / "data.csv").write_text("text\nx\n")
    with pytest.raises(InputError) as info:
        read_corpus(["data.csv"])
    assert "data.csv" in str(info.value) and ".jsonl" in str(info.value)


def test_empty_jsonl_file_gives_no_rows(in_tmp):
    (in_tmp / "empty.jsonl").write_text("\n\n")
    write_jsonl(in_tmp / "one.jsonl", [{"text": "x"}])
    corpus = read_corpus(["empty.jsonl", "one.jsonl"])
    assert corpus.texts.to_pylist() == ["x"]
    assert ids_of(corpus) == ["one.jsonl:1"]


@pytest.mark.parametrize("content, line, fragment", [
    (b'{"text": "a"}\n{"text": "b"\n', 2, "invalid JSON"),
    (b'{"text": "a"}\n\n[1, 2]\n', 3, "expected a JSON object"),
    (b'{"text": "a"}\n{"text": 7}\n', 2, "expected a string"),
    (b'{"text": "a"}\n{"text": "b\xff"}\n', 2, "invalid UTF-8"),
])
def test_jsonl_errors_name_file_and_line(in_tmp, content, line, fragment):
    (in_tmp / "bad.jsonl").write_bytes(content)
    with pytest.raises(InputError) as info:
        read_corpus(["bad.jsonl"])
    assert f"bad.jsonl:{line}" in str(info.value)
    assert fragment in str(info.value)


def test_txt_invalid_utf8_names_file_and_line(in_tmp):
    (in_tmp / "bad.txt").write_bytes(b"line one\nline two\nline \xfe three\n")
    with pytest.raises(InputError) as info:
        read_corpus(["bad.txt"])
    assert "bad.txt:3" in str(info.value) and "invalid UTF-8" in str(info.value)


def test_json_null_line_is_not_an_object(in_tmp):
    (in_tmp / "nulls.jsonl").write_text('{"text": "a b c"}\n\n{"text": "d e f"}\nnull\n')
    with pytest.raises(InputError) as info:
        read_corpus(["nulls.jsonl"])
    assert "nulls.jsonl:4" in str(info.value) and "expected a JSON object" in str(info.value)


def test_empty_object_line_is_a_record_without_text(in_tmp):
    (in_tmp / "objs.jsonl").write_text('{"text": "a b c"}\n{}\n{"text": "d e f"}\n')
    with pytest.raises(InputError, match="objs.jsonl:2: no field 'text'"):
        read_corpus(["objs.jsonl"])
    corpus = read_corpus(["objs.jsonl"], on_error="skip")
    assert corpus.texts.to_pylist() == ["a b c", "d e f"]
    assert ids_of(corpus) == ["objs.jsonl:1", "objs.jsonl:3"]


def test_date_like_strings_are_read_as_strings(in_tmp):
    records = [{"text": "2020-01-01", "when": "2021-03-04T10:00:00", "id": "2020-01-01"},
               {"text": "2020-01-02", "when": "2021-03-05T11:00:00", "id": "2020-01-02"}]
    write_jsonl(in_tmp / "dates.jsonl", records)
    corpus = read_corpus(["dates.jsonl"], id_field="id")
    assert corpus.table.to_pylist() == records
    assert ids_of(corpus) == ["2020-01-01", "2020-01-02"]


def test_line_longer_than_the_json_block_size(in_tmp):
    """pyarrow reads JSON in 1 MiB blocks; a longer record must still be read."""
    long_text = "word " * 300_000  # 1.5 MB
    records = [{"text": "a b c"}, {"text": long_text}, {"text": "d e f"}]
    write_jsonl(in_tmp / "long.jsonl", records)
    corpus = read_corpus(["long.jsonl"])
    assert corpus.texts.to_pylist() == ["a b c", long_text, "d e f"]
    assert ids_of(corpus) == ["long.jsonl:1", "long.jsonl:2", "long.jsonl:3"]


# --- regressions found by fuzzing ---------------------------------------------------------------


@pytest.mark.parametrize("content", [b"null", b"null\n", b" null\n", b'null\n{"text": "a"}\n',
                                     b'{"text": "a"}\n' * 20000 + b"null\n" + b'{"text": "b"}\n' * 20000])
def test_null_line_is_refused_without_crashing_arrow(in_tmp, content):
    """pyarrow 26's JSON reader dies with SIGSEGV on a `null` line at the start of a block;
    the reader must never hand it such a file."""
    (in_tmp / "nulls.jsonl").write_bytes(content)
    with pytest.raises(InputError, match=r"nulls.jsonl:\d+: expected a JSON object, got null"):
        read_corpus(["nulls.jsonl"])
    corpus = read_corpus(["nulls.jsonl"], on_error="skip")
    assert [r["reason"] for r in corpus.skipped_records] == ["expected a JSON object, got null"]
    assert corpus.num_rows == content.count(b"{")


def test_empty_jsonl_with_id_field(in_tmp):
    (in_tmp / "empty.jsonl").write_bytes(b"")
    write_jsonl(in_tmp / "one.jsonl", [{"id": "a", "text": "x"}])
    corpus = read_corpus(["empty.jsonl", "one.jsonl"], id_field="id")
    assert ids_of(corpus) == ["a"]


def test_txt_file_with_id_field_is_an_input_error(in_tmp):
    (in_tmp / "note.txt").write_text("some text")
    with pytest.raises(InputError, match="note.txt: a .txt file .* no id field 'id'"):
        read_corpus(["note.txt"], id_field="id")


@pytest.mark.parametrize("content, line, fragment", [
    (b'{"text": "a"} {"text": "b"}\n', 1, "Extra data"),
    (b'{"text": "a"}\n{"text":\n"b"}\n', 2, "invalid JSON"),
    (b'{"text": "a"}\r{"text": "b"}\n', 1, "carriage return"),
    (b'{"text": "a", "m": {"k": 1}}\n{"text": "b", "m": {"k": "x"}}\n', 2, "'m.k' is a string, but a number on line 1"),
    (b'{"text": "a", "l": [1, "x"]}\n', 1, "'l[]' is a string, but a number earlier on this line"),
])
def test_records_must_sit_one_to_a_line(in_tmp, content, line, fragment):
    """Arrow reads two objects on one line, an object across lines and a lone \\r as a line
    end; the line numbers (ids) would then be wrong, so these are refused."""
    (in_tmp / "odd.jsonl").write_bytes(content)
    with pytest.raises(InputError) as info:
        read_corpus(["odd.jsonl"])
    assert f"odd.jsonl:{line}:" in str(info.value) and fragment in str(info.value)


# --- on_error="skip" ----------------------------------------------------------------------------


def test_on_error_must_be_stop_or_skip(in_tmp):
    write_jsonl(in_tmp / "a.jsonl", [{"text": "x"}])
    with pytest.raises(ParameterError, match="on_error"):
        read_corpus(["a.jsonl"], on_error="ignore")


BAD_LINES = [
    (b'{"text": "a b c", "n": 1}', None),
    (b'{"text": "b c d"', "invalid JSON (Expecting ',' delimiter at column 17)"),
    (b"", None),  # blank: not a record
    (b"[1, 2]", "expected a JSON object, got an array"),
    (b'{"text": 42}', "field 'text' is a number, expected a string or a list of token ids"),
    (b'{"text": "c\xff"}', "invalid UTF-8 (byte 0xff at column 12)"),
    (b'{"text": null, "n": 7}', None),  # a null text: an empty document, kept
    (b'{"text": "d", "n": "seven"}',
     "field 'n' is a string, but a number on line 1; a field must hold values of one type"),
    (b"null", "expected a JSON object, got null"),
    (b'{"text": "e e e", "n": 9}', None),
    (b'{"n": 11}', "no field 'text' (its fields: n); give a record without text as null, or choose the text "
                   "field with text_field= (token ids: token_field=)"),
    (b'{"text": "unterminated}', "invalid JSON (Unterminated string starting at column 10)"),
]


def test_skip_leaves_out_bad_lines_and_keeps_line_ids(in_tmp):
    (in_tmp / "bad.jsonl").write_bytes(b"\n".join(line for line, _ in BAD_LINES) + b"\n")
    with pytest.raises(InputError, match="bad.jsonl:2: invalid JSON"):
        read_corpus(["bad.jsonl"])
    corpus = read_corpus(["bad.jsonl"], on_error="skip")
    good = [i for i, (line, problem) in enumerate(BAD_LINES, start=1) if line and problem is None]
    assert ids_of(corpus) == [f"bad.jsonl:{i}" for i in good]
    assert corpus.texts.to_pylist() == ["a b c", None, "e e e"]
    assert corpus.table["n"].to_pylist() == [1, 7, 9]
    assert [f.row_numbers.tolist() for f in corpus.files] == [good]
    assert corpus.skipped_records == [
        {"file": "bad.jsonl", "line": i, "reason": problem}
        for i, (_, problem) in enumerate(BAD_LINES, start=1) if problem]


def test_skip_on_a_clean_file_is_the_same_as_stop(in_tmp):
    make_tree(in_tmp / "corpus")
    stop, skip = read_corpus(["corpus"]), read_corpus(["corpus"], on_error="skip")
    assert skip.table.equals(stop.table) and skip.ids.equals(stop.ids)
    assert skip.skipped_records == [] and stop.skipped_records == []


def test_skip_whole_files(in_tmp):
    good = [{"text": paragraph(1)}, {"text": paragraph(2)}]
    write_jsonl(in_tmp / "d" / "1.jsonl", good)
    raw = gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in good * 50))
    (in_tmp / "d" / "2.jsonl.gz").write_bytes(raw[: len(raw) // 2])
    (in_tmp / "d" / "3.parquet").write_bytes(b"PAR1 not really")
    (in_tmp / "d" / "4.txt").write_bytes(b"ok\nnot \xff ok\n")
    write_jsonl(in_tmp / "d" / "5.jsonl", [{"body": "no text field"}, {"body": "anywhere"}])
    (in_tmp / "d" / "6.jsonl").write_bytes(b'{"body": "x"}\n{oops\n')  # two bad lines: no text field, not JSON
    pq.write_table(pa.table({"text": ["p q r"]}), in_tmp / "d" / "7.parquet")
    corpus = read_corpus(["d"], on_error="skip")
    assert ids_of(corpus) == ["d/1.jsonl:1", "d/1.jsonl:2", "d/7.parquet:1"]
    assert [f.path for f in corpus.files] == ["d/1.jsonl", "d/6.jsonl", "d/7.parquet"]
    records = corpus.skipped_records
    assert [(r["file"], r["line"]) for r in records] == [
        ("d/2.jsonl.gz", None), ("d/3.parquet", None), ("d/4.txt", None), ("d/5.jsonl", None), ("d/6.jsonl", 1),
        ("d/6.jsonl", 2)]
    assert "corrupt or truncated gzip" in records[0]["reason"]
    assert "not a readable Parquet file" in records[1]["reason"]
    assert records[2]["reason"] == "line 2: invalid UTF-8 (byte 0xff at byte offset 7)"
    assert records[3]["reason"].startswith("no field 'text'")
    assert records[4]["reason"].startswith("no field 'text'")
    assert records[5]["reason"].startswith("invalid JSON")


def test_skip_everything_gives_an_empty_corpus(in_tmp):
    (in_tmp / "bad.jsonl").write_bytes(b"garbage\n")
    (in_tmp / "bad.parquet").write_bytes(b"garbage")
    corpus = read_corpus(["bad.jsonl", "bad.parquet"], on_error="skip")
    assert corpus.num_rows == 0 and len(corpus.ids) == 0
    assert [(f.path, f.rows) for f in corpus.files] == [("bad.jsonl", 0)]  # read, every line left out
    assert [(r["file"], r["line"]) for r in corpus.skipped_records] == [("bad.jsonl", 1), ("bad.parquet", None)]


def test_skip_bad_ids_and_duplicates_keeps_the_first(in_tmp):
    write_jsonl(in_tmp / "a.jsonl", [{"id": "x", "text": "1"}, {"text": "no id"}, {"id": None, "text": "null id"},
                                     {"id": True, "text": "bool id"}, {"id": "y", "text": "2"},
                                     {"id": "x", "text": "3"}])
    write_jsonl(in_tmp / "b.jsonl", [{"id": "y", "text": "4"}, {"id": "z", "text": "5"}])
    with pytest.raises(InputError, match="a.jsonl:2: id field 'id' is missing or null"):
        read_corpus(["a.jsonl", "b.jsonl"], id_field="id")
    corpus = read_corpus(["a.jsonl", "b.jsonl"], id_field="id", on_error="skip")
    assert ids_of(corpus) == ["x", "y", "z"]
    assert corpus.texts.to_pylist() == ["1", "2", "5"]
    assert [f.row_numbers.tolist() for f in corpus.files] == [[1, 5], [2]]
    assert corpus.skipped_records == [
        {"file": "a.jsonl", "line": 2, "reason": "id field 'id' is missing or null"},
        {"file": "a.jsonl", "line": 3, "reason": "id field 'id' is missing or null"},
        {"file": "a.jsonl", "line": 4, "reason": "id field 'id' is a boolean, expected a string or an integer"},
        {"file": "a.jsonl", "line": 6, "reason": "duplicate id 'x': the same id as a.jsonl:1, which is kept"},
        {"file": "b.jsonl", "line": 1, "reason": "duplicate id 'y': the same id as a.jsonl:5, which is kept"},
    ]


def test_skip_parquet_rows_with_null_ids_or_invalid_text(in_tmp):
    texts = pa.array([b"one", b"tw\xffo", b"three", b"four"], pa.binary())
    pq.write_table(pa.table({"id": [1, 2, None, 4], "text": texts}), in_tmp / "rows.parquet")
    with pytest.raises(InputError, match="rows.parquet: row 2: field 'text' is not valid UTF-8"):
        read_corpus(["rows.parquet"], id_field="id")
    corpus = read_corpus(["rows.parquet"], id_field="id", on_error="skip")
    assert ids_of(corpus) == [1, 4] and corpus.texts.to_pylist() == ["one", "four"]
    assert corpus.skipped_records == [
        {"file": "rows.parquet", "line": 2, "reason": "field 'text' is not valid UTF-8"},
        {"file": "rows.parquet", "line": 3, "reason": "id field 'id' is null"}]
    no_ids = read_corpus(["rows.parquet"], on_error="skip")
    assert ids_of(no_ids) == ["rows.parquet:1", "rows.parquet:3", "rows.parquet:4"]


def test_skip_files_that_cannot_be_combined(in_tmp):
    write_jsonl(in_tmp / "a.jsonl", [{"id": 1, "text": "x", "m": 1}])
    write_jsonl(in_tmp / "b.jsonl", [{"id": 2, "text": "y", "m": "one"}])
    write_jsonl(in_tmp / "c.jsonl", [{"id": "three", "text": "z"}])
    write_jsonl(in_tmp / "d.jsonl", [{"id": 4, "text": "w", "m": 2}])
    corpus = read_corpus(["a.jsonl", "b.jsonl", "c.jsonl", "d.jsonl"], id_field="id", on_error="skip")
    assert ids_of(corpus) == [1, 4]
    assert [(r["file"], r["line"]) for r in corpus.skipped_records] == [("b.jsonl", None), ("c.jsonl", None)]
    assert "cannot be combined" in corpus.skipped_records[0]["reason"]
    assert "cannot be combined" in corpus.skipped_records[1]["reason"]  # id: int64 vs string


def test_same_directory_or_file_given_twice_is_read_once(in_tmp):
    make_tree(in_tmp / "corpus")
    corpus = read_corpus(["corpus", "corpus/c", "corpus/a.jsonl"])
    assert corpus.texts.to_pylist() == TREE_TEXTS  # each record once, not what a second read says
    assert corpus.notes == ["corpus/c: skipped: the same directory as corpus/c, already read",
                            "corpus/a.jsonl: skipped: the same file as corpus/a.jsonl, already read"]
