"""Nested fields (io/fields.py): --text-field, --id-field and --token-field given as dotted paths
into struct columns and JSON objects give what the same records with flat fields give (pairs,
clusters, kept rows), in JSONL, Parquet and Arrow files, in memory and staged, and in tables
passed to the API; kept rows keep the input's own columns; a missing path is one line naming
the file and the fields there are."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import gpudedup
from gpudedup.errors import InputError
from gpudedup.io.fields import field_column, field_names, with_field
from gpudedup.io.read import read_corpus

from cli_support import assert_user_error, happy_records, invoke, write_jsonl
from output_support import read_clusters, read_kept, read_pairs

counter = itertools.count()


def flat_records() -> list[dict]:
    return [{"text": r["text"], "n": r["n"]} for r in happy_records()]


def nested(record: dict) -> dict:
    """A flat record with its text under content.text and its id under meta.n."""
    return {"content": {"text": record["text"], "lang": "xx"}, "meta": {"n": record["n"], "tag": f"t{record['n']}"}}


def outcome(paths, tmp_path: Path, text_field: str, id_field: str, **options) -> dict:
    """Pairs, clusters, and the ids of the kept rows (read back from the output by
    ``id_field``) of a run over ``paths``."""
    out = tmp_path / f"out{next(counter)}"
    gpudedup.dedup(paths, text_field=text_field, id_field=id_field, output=out, **options)
    kept = read_kept(out)
    return {"pairs": read_pairs(out).to_pylist(), "clusters": read_clusters(out).to_pylist(),
            "kept": field_column(kept, id_field).to_pylist()}


@pytest.fixture
def flat(tmp_path: Path) -> dict:
    return outcome(write_jsonl(tmp_path / "flat" / "a.jsonl", flat_records()), tmp_path, "text", "n")


def test_nested_jsonl_fields_give_what_flat_fields_give(tmp_path, flat):
    path = write_jsonl(tmp_path / "in" / "a.jsonl", [nested(r) for r in flat_records()])
    assert outcome(path, tmp_path, "content.text", "meta.n") == flat
    assert outcome(path, tmp_path, "content.text", "meta.n", work_dir=tmp_path / "work", shard_bytes=300) == flat
    # Kept JSONL lines are the input's lines, their objects as written.
    out = tmp_path / "as_jsonl"
    gpudedup.dedup(path, text_field="content.text", id_field="meta.n", output=out, format="jsonl")
    lines = path.read_text().splitlines()
    assert (out / "deduplicated" / "a.jsonl").read_text().splitlines() == [lines[n] for n in flat["kept"]]


def test_a_file_without_records_joins_files_of_nested_fields(tmp_path, flat):
    """A file of no records has the nested field's struct, not a column named "content.text"
    that would win over every other file's content.text."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "0-empty.jsonl").write_text("\n")
    write_jsonl(tmp_path / "in" / "a.jsonl", [nested(r) for r in flat_records()])
    assert outcome(tmp_path / "in", tmp_path, "content.text", "meta.n") == flat


def test_nested_jsonl_read_line_by_line(tmp_path):
    """A file the fast path cannot take (a bad line) is read line by line with the same rules."""
    rows = [nested(r) for r in flat_records()]
    lines = [json.dumps(r) for r in rows]
    lines.insert(2, json.dumps({"content": {"lang": "xx"}, "meta": {"n": 50}}))  # no content.text
    lines.insert(4, json.dumps({"content": None, "meta": {"n": 51}}))  # null on the path: a null text
    path = tmp_path / "a.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"a.jsonl:3: no field 'content.text' \(its fields: content, content.lang, "
                                         r"meta, meta.n\)"):
        read_corpus([path], text_field="content.text", id_field="meta.n")
    corpus = read_corpus([path], text_field="content.text", id_field="meta.n", on_error="skip")
    assert corpus.ids.to_pylist() == [0, 1, 2, 51, 3, 4, 5, 6, 7]
    assert corpus.texts.to_pylist()[3] is None
    assert [(r["line"], r["reason"][:28]) for r in corpus.skipped_records] == [(3, "no field 'content.text' (its")]
    missing_id = tmp_path / "b.jsonl"
    missing_id.write_text(json.dumps({"content": {"text": "a b"}, "meta": {"n": 1}}) + "\n"
                          + json.dumps({"content": {"text": "c d"}, "meta": {}}) + "\n")
    with pytest.raises(InputError, match=r"b.jsonl:2: id field 'meta.n' is missing or null"):
        read_corpus([missing_id], text_field="content.text", id_field="meta.n")


def test_nested_null_and_missing_on_the_fast_path(tmp_path):
    """Arrow reads a null struct and a struct without the field both as null: the record whose
    line lacks the field is found and named, the null one is an empty document."""
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps({"content": {"text": "a b c"}}) + "\n" + json.dumps({"content": None}) + "\n")
    assert read_corpus([path], text_field="content.text").texts.to_pylist() == ["a b c", None]
    path.write_text(json.dumps({"content": {"text": "a b c"}}) + "\n" + json.dumps({"content": {"x": 1}}) + "\n")
    with pytest.raises(InputError, match=r"a.jsonl:2: no field 'content.text'"):
        read_corpus([path], text_field="content.text")


def test_a_key_of_that_very_name_in_one_record_names_the_field_in_every_record(tmp_path):
    """A JSONL file's columns are its records' keys: where one record has the key
    "content.text", that key is the text field of every record, as the file's table reads it,
    and a record that reaches content.text through objects alone lacks it (refused, saying that
    the field is named both ways, not read as an empty document); an id field the same. A file
    whose lines are read one by one (one is broken) and that names the field both ways is
    refused as a whole (skipped, with the reason)."""
    text = "the quick brown fox jumps over the lazy dog"
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps({"id": 1, "content": {"text": text}}) + "\n"
                    + json.dumps({"id": 2, "content.text": text, "content": {"text": text}}) + "\n")
    both = "is a key of its own in some records and a path through objects in others: give every record the one form"
    with pytest.raises(InputError, match=rf"a.jsonl:1: field 'content.text' {both}"):
        read_corpus([path], text_field="content.text", id_field="id")
    corpus = read_corpus([path], text_field="content.text", id_field="id", on_error="skip")
    assert corpus.texts.to_pylist() == [text] and [r["line"] for r in corpus.skipped_records] == [1]
    path.write_text(json.dumps({"meta": {"id": "a"}, "text": text}) + "\n"
                    + json.dumps({"meta.id": "b", "meta": {"id": "c"}, "text": text}) + "\n")
    with pytest.raises(InputError, match=rf"a.jsonl:1: field 'meta.id' {both}"):
        read_corpus([path], id_field="meta.id")
    path.write_text(json.dumps({"content": {"text": text}}) + "\n" + json.dumps({"content.text": text}) + "\n"
                    + "{broken\n")
    corpus = read_corpus([path], text_field="content.text", on_error="skip")
    assert corpus.texts.to_pylist() == []
    assert [(Path(r["file"]).name, r["line"], r["reason"]) for r in corpus.skipped_records] == [
        ("a.jsonl", None, "field 'content.text' is a key of its own in some records and a path through objects "
                          "in others: give every record the one form")]


@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_nested_columns_give_what_flat_columns_give(tmp_path, flat, kind):
    table = pa.Table.from_pylist([nested(r) for r in flat_records()])
    path = tmp_path / "in" / f"a.{kind}"
    path.parent.mkdir()
    if kind == "parquet":
        pq.write_table(table, path, row_group_size=3)
    else:
        with pa.ipc.new_stream(str(path), table.schema) as writer:
            writer.write_table(table, max_chunksize=3)
    assert outcome(path, tmp_path, "content.text", "meta.n") == flat
    assert outcome(path, tmp_path, "content.text", "meta.n", work_dir=tmp_path / "work", shard_bytes=1) == flat
    out = tmp_path / "kept"
    gpudedup.dedup(path, text_field="content.text", id_field="meta.n", output=out)
    kept = pq.read_table(out / "deduplicated" / "a.parquet")
    assert kept.schema == table.schema  # the struct columns as they were
    assert kept.to_pylist() == [nested(r) for r in flat_records() if r["n"] in flat["kept"]]


def test_nested_binary_text_in_parquet_is_read_as_strings(tmp_path):
    texts = [r["text"] for r in flat_records()]
    content = pa.StructArray.from_arrays([pa.array([t.encode() for t in texts], pa.binary()), pa.array(range(8))],
                                         names=["text", "k"], mask=pa.array([False] * 7 + [True]))
    pq.write_table(pa.table({"content": content}), tmp_path / "a.parquet")
    corpus = read_corpus([tmp_path / "a.parquet"], text_field="content.text")
    assert corpus.texts.to_pylist() == texts[:7] + [None]  # (the last struct is null)
    out = tmp_path / "out"
    gpudedup.dedup(tmp_path / "a.parquet", text_field="content.text", output=out)
    assert pq.read_table(out / "deduplicated" / "a.parquet").schema == pa.schema([("content", content.type)])


@pytest.mark.parametrize("kind", ["arrow", "pandas", "polars", "datasets"])
def test_nested_fields_of_tables_given_to_the_api(kind):
    texts = [r["text"] for r in flat_records()]
    rows = [nested(r) for r in flat_records()]
    if kind == "arrow":
        data = pa.Table.from_pylist(rows)
    elif kind == "pandas":
        import pandas

        data = pandas.DataFrame(rows)
    elif kind == "polars":
        import polars

        data = polars.DataFrame(rows)
    else:
        import datasets

        data = datasets.Dataset.from_list(rows)
    reference = gpudedup.dedup(texts)
    result = gpudedup.dedup(data, text_field="content.text", id_field="meta.n")
    assert result.keep.tolist() == reference.keep.tolist()
    assert result.pairs.to_pylist() == reference.pairs.to_pylist()
    assert len(result.deduplicated) == int(reference.keep.sum())


def test_a_column_named_with_dots_wins_over_the_path():
    texts = [r["text"] for r in flat_records()]
    table = pa.table({"content.text": texts, "content": pa.array([{"text": "one and the same"}] * 8)})
    assert gpudedup.dedup(table, text_field="content.text").keep.tolist() == gpudedup.dedup(texts).keep.tolist()
    assert field_names(table.schema) == ["content.text", "content", "content.text"]


def test_nested_token_field(tmp_path):
    rows = [{"tok": {"ids": [i % 7 + 3 * (n // 2) for i in range(40)]}} for n in range(6)]
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    result = gpudedup.dedup(path, shingle="token", ngram=3, token_field="tok.ids")
    reference = gpudedup.dedup([row["tok"]["ids"] for row in rows], shingle="token", ngram=3)
    assert result.keep.tolist() == reference.keep.tolist() == [True, False, True, False, True, False]


def test_a_missing_path_is_one_line_naming_the_file_and_its_fields(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_jsonl(Path("a.jsonl"), [nested(r) for r in flat_records()])
    pq.write_table(pa.Table.from_pylist([nested(r) for r in flat_records()]), "b.parquet")
    out = tmp_path / "out"
    for name in ("a.jsonl", "b.parquet"):
        assert_user_error(invoke("dedup", name, "-o", out, "--text-field", "content.txt"),
                          f"error: {name}: no field 'content.txt' (fields: content, content.text, content.lang, meta, "
                          "meta.n, meta.tag); choose the text field with --text-field", out=out)
    assert_user_error(invoke("dedup", "b.parquet", "-o", out, "--text-field", "content.text", "--id-field", "meta.id"),
                      "error: b.parquet: no id field 'meta.id' (fields: content, content.text", out=out)
    with pytest.raises(InputError, match=r"no column 'meta.id' for ids \(columns: content, content.text, "):
        gpudedup.dedup(pa.Table.from_pylist([nested(r) for r in flat_records()]), text_field="content.text",
                       id_field="meta.id")


@pytest.mark.parametrize("staged", [False, True], ids=["memory", "work-dir"])
def test_a_field_named_one_way_in_one_file_and_the_other_in_another_is_refused(tmp_path, monkeypatch, staged):
    """A dotted field that is a key of that very name in one file and a path into objects in
    another would be found each file's own way, and the files combined in memory would find
    only the key (the other file's texts null, its duplicates kept): the run stops, in memory
    and with a work directory alike, naming both files, for the text, the token ids and the
    group alike."""
    monkeypatch.chdir(tmp_path)
    text = "the quick brown fox jumps over the lazy dog again and again"
    write_jsonl(Path("in/a.jsonl"), [{"n": n, "content": {"text": text}, "meta": {"g": "x"}, "tok": {"ids": [1, 2, 3]}}
                                     for n in (1, 2)])
    write_jsonl(Path("in/b.jsonl"), [{"n": 3, "content.text": "another text altogether", "content": {"x": 1},
                                      "meta.g": "y", "meta": {"h": 1}, "tok.ids": [4, 5, 6]}])
    out = tmp_path / "out"
    for number, (options, field) in enumerate( ((["--text-field", "content.text"], "the content field 'content.text'"),
                           (["--shingle", "token", "--token-field", "tok.ids", "--ngram", "2"],
                            "the content field 'tok.ids'"),
                           (["--text-field", "content.text", "--group-field", "meta.g"], "--group-field meta.g"))):
        staging = ["--work-dir", f"work{number}"] if staged else []
        if "group" in field:  # (the texts named one way: only the group is not)
            write_jsonl(Path("in/b.jsonl"), [{"n": 3, "content": {"text": "another text"}, "meta.g": "y",
                                              "meta": {"h": 1}}])
        assert_user_error(invoke("dedup", "in", "-o", out, "--id-field", "n", *options, *staging),
                          f"error: {field} is a column of that name in in/b.jsonl but a field inside the column",
                          "in/a.jsonl: name it one way in every input file", out=out)


def test_with_field_keeps_the_struct_and_its_nulls():
    content = pa.array([{"text": b"a", "k": 1}, None, {"text": b"c", "k": 3}, {"text": None, "k": 4}],
                       pa.struct([("text", pa.binary()), ("k", pa.int64())]))
    table = pa.Table.from_arrays([pa.chunked_array([content.slice(0, 1), content.slice(1)])], names=["content"])
    text = field_column(table, "content.text")
    replaced = with_field(table, "content.text", pc.cast(text, pa.string()))
    assert replaced["content"].type == pa.struct([("text", pa.string()), ("k", pa.int64())])
    assert replaced["content"].to_pylist() == [{"text": "a", "k": 1}, None, {"text": "c", "k": 3},
                                               {"text": None, "k": 4}]
