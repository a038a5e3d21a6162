"""Fuzzing the readers: random bytes, and valid JSONL / gzip / Parquet / .txt files broken by
byte flips, truncation and inserted bytes.

read_corpus may raise nothing but InputError, in either on_error mode, and the two modes must
agree: a file read cleanly under "stop" gives the same corpus under "skip", with nothing
skipped; a file refused under "stop" leaves something recorded under "skip". What "stop" reads
is what the suite's own reader (conservation.py: json, gzip, pyarrow.parquet, plain bytes)
finds in the files, text and id of every record in order. Under "skip" every
non-blank JSONL line is either kept, with the id ``<path>:<line>`` and the text that line really
holds, or recorded as skipped. ``gpudedup dedup`` on the same files exits with 0 or 2 and never
prints a traceback.

The examples are fixed (derandomized) so that CI is repeatable and fast (about 30 s in all).
For a longer, random search set GPUDEDUP_FUZZ=N: N times the examples, a fresh seed each run.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpudedup.cli import app
from gpudedup.errors import InputError
from gpudedup.io.read import read_corpus
from conservation import read_file_records

SCALE = int(os.environ.get("GPUDEDUP_FUZZ", "0") or 0)


def fuzz_settings(examples: int):
    return settings(max_examples=examples * max(SCALE, 1), deadline=None, derandomize=SCALE == 0,
                    database=None, suppress_health_check=list(HealthCheck))


# --- what gets generated ------------------------------------------------------------------------

KEYS = ["text", "id", "n", "meta", "tags", ""]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=False, allow_infinity=False),
                    st.text(max_size=30), st.sampled_from(["2020-01-01", "2021-03-04T10:00:00", "1e400"]))
json_values = st.recursive(scalars, lambda children: st.one_of(
    st.lists(children, max_size=3), st.dictionaries(st.sampled_from(KEYS), children, max_size=3)), max_leaves=8)
records = st.one_of(
    st.fixed_dictionaries({"text": st.one_of(st.text(max_size=80), st.none())},
                          optional={"id": st.one_of(st.integers(0, 20), st.text(max_size=3)), "n": scalars,
                                    "meta": json_values}),
    st.dictionaries(st.sampled_from(KEYS), json_values, max_size=4),
    json_values,
)


@st.composite
def mutated(draw, data: bytes) -> bytes:
    """``data`` with a few byte flips, truncation, inserted or deleted bytes."""
    data = bytearray(data)
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "insert", "delete", "newline"]))
        where = draw(st.integers(0, len(data)))
        if kind == "flip" and data:
            data[min(where, len(data) - 1)] ^= draw(st.integers(1, 255))
        elif kind == "truncate":
            del data[where:]
        elif kind == "insert":
            data[where:where] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[where:where + draw(st.integers(1, 8))]
        else:
            data[where:where] = draw(st.sampled_from([b"\n", b"\r", b"\r\n", b"\n\n", b"\xef\xbb\xbf", b"{", b"}"]))
    return bytes(data)


@st.composite
def jsonl_files(draw) -> bytes:
    lines = [json.dumps(r, ensure_ascii=draw(st.booleans())).encode() for r in draw(st.lists(records, max_size=8))]
    newline = draw(st.sampled_from([b"\n", b"\r\n"]))
    data = newline.join(lines) + (newline if draw(st.booleans()) else b"")
    if draw(st.booleans()):
        data = b"\xef\xbb\xbf" + data
    return draw(mutated(data)) if draw(st.booleans()) else data


@st.composite
def gzip_files(draw) -> bytes:
    data = gzip.compress(draw(jsonl_files()), mtime=0)
    return draw(mutated(data)) if draw(st.booleans()) else data


@st.composite
def parquet_files(draw) -> bytes:
    n = draw(st.integers(0, 6))
    columns = {"text": pa.array(draw(st.lists(st.one_of(st.text(max_size=40), st.none()), min_size=n, max_size=n)),
                                draw(st.sampled_from([pa.string(), pa.large_string()])))}
    if draw(st.booleans()):
        columns["id"] = pa.array(draw(st.lists(st.one_of(st.integers(0, 5), st.none()), min_size=n, max_size=n)),
                                 pa.int64())
    if draw(st.booleans()):
        columns["score"] = pa.array(draw(st.lists(st.floats(), min_size=n, max_size=n)), pa.float64())
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table(columns), sink, compression=draw(st.sampled_from(["none", "snappy", "zstd"])),
                   row_group_size=draw(st.integers(1, 4)))
    data = sink.getvalue().to_pybytes()
    return draw(mutated(data)) if draw(st.booleans()) else data


@st.composite
def text_files(draw) -> bytes:
    data = draw(st.text(max_size=200)).encode("utf-8")
    if draw(st.booleans()):
        data = b"\xef\xbb\xbf" + data
    return draw(mutated(data)) if draw(st.booleans()) else data


FORMATS = {"data.jsonl": jsonl_files(), "data.jsonl.gz": gzip_files(), "data.parquet": parquet_files(),
           "data.txt": text_files()}
any_file = st.one_of([st.tuples(st.just(name), strategy) for name, strategy in FORMATS.items()]
                     + [st.tuples(st.sampled_from(list(FORMATS)), st.binary(max_size=600))])


# --- checks -------------------------------------------------------------------------------------


def read_both(path: Path, id_field=None):
    """(corpus or InputError) under "stop" and under "skip"; any other exception fails."""
    results = []
    for mode in ("stop", "skip"):
        try:
            results.append(read_corpus([path], id_field=id_field, on_error=mode))
        except InputError as error:
            assert str(error), "an InputError without a message"
            results.append(error)
    return results


def same_rows(a: pa.Table, b: pa.Table) -> bool:
    return a.schema == b.schema and json.dumps(a.to_pylist(), default=repr) == json.dumps(b.to_pylist(), default=repr)


def check_own_reader_agrees(path: Path, corpus, id_field=None) -> None:
    """The texts and ids of a corpus read under "stop" are those the suite's own reader finds
    in the file, or in the directory's files in name order (every generated name is an input)."""
    files = sorted(path.iterdir()) if path.is_dir() else [path]
    assert [f.path for f in corpus.files] == [str(f) for f in files]
    records = [r for f in files for r in read_file_records(f, str(f), "text", id_field)]
    assert corpus.texts.to_pylist() == [r.text for r in records]
    assert corpus.ids.to_pylist() == [r.id for r in records]


def check_modes_agree(path: Path, id_field=None):
    stop, skip = read_both(path, id_field)
    if not isinstance(stop, InputError):
        check_own_reader_agrees(path, stop, id_field)
    if isinstance(stop, InputError):
        if not isinstance(skip, InputError):
            assert skip.skipped_records, f"'stop' refused ({stop}) but 'skip' skipped nothing"
    else:
        assert not isinstance(skip, InputError), f"'stop' read the file but 'skip' refused it: {skip}"
        assert skip.skipped_records == []
        assert same_rows(skip.table, stop.table)  # (Table.equals is False where a float is NaN)
        assert skip.ids.equals(stop.ids)
    if not isinstance(skip, InputError):
        assert len(skip.ids) == skip.num_rows
        assert len(set(skip.ids.to_pylist())) == skip.num_rows
        for record in skip.skipped_records:
            assert set(record) == {"file", "line", "reason"} and record["reason"]
            assert record["line"] is None or isinstance(record["line"], int) and record["line"] >= 1
    return stop, skip


def check_jsonl_lines(path: Path, raw: bytes, corpus) -> None:
    """Under "skip", with ids <path>:<line>: every kept row is the object on its line, and every
    other non-blank line is recorded as skipped (unless the whole file is)."""
    if any(r["line"] is None for r in corpus.skipped_records):
        assert corpus.num_rows == 0 and len(corpus.skipped_records) == 1
        return
    lines = (raw[3:] if raw.startswith(b"\xef\xbb\xbf") else raw).split(b"\n")
    shown = corpus.files[0].path if corpus.files else None
    kept = {}
    for doc_id, text in zip(corpus.ids.to_pylist(), corpus.texts.to_pylist()):
        file, _, line = doc_id.rpartition(":")
        assert file == shown
        kept[int(line)] = text
    for number, text in kept.items():
        record = json.loads(lines[number - 1].decode("utf-8"))
        assert isinstance(record, dict)
        assert record.get("text") == text, f"line {number}: {record.get('text')!r} != {text!r}"
    skipped = {r["line"] for r in corpus.skipped_records}
    assert not kept.keys() & skipped
    non_blank = {i for i, line in enumerate(lines, start=1) if line.strip(b" \t\r\n")}
    assert kept.keys() | skipped == non_blank


# --- tests --------------------------------------------------------------------------------------


@fuzz_settings(250)
@given(any_file)
def test_read_corpus_raises_only_input_error(case):
    name, raw = case
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / name
        path.write_bytes(raw)
        _, skip = check_modes_agree(path)
        if name == "data.jsonl" and not isinstance(skip, InputError):
            check_jsonl_lines(path, raw, skip)


@fuzz_settings(150)
@given(jsonl_files())
def test_jsonl_with_id_field(raw):
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "ids.jsonl"
        path.write_bytes(raw)
        _, skip = check_modes_agree(path, id_field="id")
        if not isinstance(skip, InputError):
            assert all(isinstance(i, (int, str)) for i in skip.ids.to_pylist())


def directory_of(root: Path, cases) -> Path:
    """``root`` made and filled with the generated (name, bytes) files, numbered to keep order."""
    root.mkdir()
    for i, (name, raw) in enumerate(cases):
        (root / f"{i}_{name}").write_bytes(raw)
    return root


@fuzz_settings(60)
@given(st.lists(any_file, min_size=2, max_size=4))
def test_several_files_in_a_directory(cases):
    with tempfile.TemporaryDirectory() as directory:
        root = directory_of(Path(directory) / "corpus", cases)
        for id_field in (None, "id"):
            check_modes_agree(root, id_field)


runner = CliRunner()


@fuzz_settings(20)
@given(st.lists(any_file, min_size=1, max_size=3))
def test_cli_exits_0_or_2_without_traceback(cases):
    with tempfile.TemporaryDirectory() as directory:
        root = directory_of(Path(directory) / "in", cases)
        out = Path(directory) / "out"
        result = runner.invoke(app, ["dedup", str(root), "-o", str(out), "-q", "--backend", "cpu",
                                     "--format", "jsonl"])
        assert result.exit_code in (0, 2), f"exit {result.exit_code}\n{result.output}\n{result.exception!r}"
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
        assert "Traceback" not in result.output
        assert out.exists() == (result.exit_code == 0)


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_prefix_of_a_valid_file(name, tmp_path):
    """Truncation at every byte of one small valid file of each format."""
    examples = {
        "data.jsonl": b'\xef\xbb\xbf{"text": "a b c", "id": 1}\r\n{"text": null}\n\n{"id": 2, "meta": {"k": [1]}}\n',
        "data.txt": "\ufeffline one\r\nline two \u00e9\u6f22\n".encode(),
    }
    examples["data.jsonl.gz"] = gzip.compress(examples["data.jsonl"], mtime=0)
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"text": ["a b c", None], "id": [1, 2]}), sink)
    examples["data.parquet"] = sink.getvalue().to_pybytes()
    raw = examples[name]
    path = tmp_path / name
    for end in range(len(raw) + 1):
        path.write_bytes(raw[:end])
        stop, skip = check_modes_agree(path)
        if name == "data.jsonl" and not isinstance(skip, InputError):
            check_jsonl_lines(path, raw[:end], skip)
