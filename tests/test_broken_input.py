"""Broken input of every kind, through the CLI: each either works (and the report counts what
was odd) or stops with exit code 2, one 'error:' line naming the file (and line) and what was
expected, no traceback, and no output directory.

The reader's on_error="skip" mode is tested in tests/test_reader.py (the CLI option is wired
in cli/__init__.py).
"""

from __future__ import annotations

import gzip
import json
import os
import random
import string
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from gpudedup.cli import app
from gpudedup.errors import InputError
from gpudedup.io.read import read_corpus

from cli_support import DROP_DAC, root_can_drop_dac
from output_support import kept_files, read_kept

runner = CliRunner()


# --- helpers ------------------------------------------------------------------------------------


def paragraph(seed: int, words: int = 60) -> str:
    rng = random.Random(seed)
    return " ".join("".join(rng.choice(string.ascii_lowercase) for _ in range(7)) for _ in range(words))


def jsonl_bytes(records, newline: bytes = b"\n") -> bytes:
    return b"".join(json.dumps(r).encode() + newline for r in records)


def records(n: int = 4) -> list[dict]:
    return [{"text": paragraph(i), "n": i} for i in range(n)]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def leftovers(parent: Path, name: str = "out") -> list[Path]:
    return sorted(parent.glob(f".{name}.tmp-*")) + sorted(parent.glob(f".{name}.old-*"))


def assert_user_error(result, *fragments, where: Path) -> str:
    """Exit 2, one 'error:' line holding every fragment, no traceback, no output directory."""
    assert result.exit_code == 2, f"exit {result.exit_code}, output:\n{result.output}\n{result.exception!r}"
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.output
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    assert not (where / "out").exists(), "an output directory was written"
    assert leftovers(where) == []
    return lines[0]


def run_ok(*args) -> dict:
    """Run dedup into out/ (which must succeed) and return report.json."""
    result = invoke("dedup", *args, "-o", "out", "-q", "--backend", "cpu")
    assert result.exit_code == 0, f"exit {result.exit_code}:\n{result.output}\n{result.exception!r}"
    assert "Traceback" not in result.output
    return json.loads(Path("out/report.json").read_text())


def kept(column: str = "text") -> list:
    return read_kept(Path("out"))[column].to_pylist()


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


# --- Parquet ------------------------------------------------------------------------------------


def test_truncated_parquet(in_tmp):
    raw = parquet_bytes(pa.Table.from_pylist(records()))
    (in_tmp / "cut.parquet").write_bytes(raw[: len(raw) // 2])
    result = invoke("dedup", "cut.parquet", "-o", "out")
    assert_user_error(result, "cut.parquet", "not a readable Parquet file", where=in_tmp)


def test_corrupt_parquet_footer(in_tmp):
    raw = bytearray(parquet_bytes(pa.Table.from_pylist(records())))
    footer_length = int.from_bytes(raw[-8:-4], "little")
    start = len(raw) - 8 - footer_length
    raw[start:start + footer_length] = bytes(b ^ 0x5A for b in raw[start:start + footer_length])
    (in_tmp / "flipped.parquet").write_bytes(bytes(raw))
    result = invoke("dedup", "flipped.parquet", "-o", "out")
    assert_user_error(result, "flipped.parquet", "Parquet", where=in_tmp)


def test_parquet_with_invalid_utf8_text_names_the_row(in_tmp):
    texts = pa.array([paragraph(1).encode(), b"bad \xff byte", paragraph(2).encode()], pa.binary())
    pq.write_table(pa.table({"text": texts}), in_tmp / "bytes.parquet")
    result = invoke("dedup", "bytes.parquet", "-o", "out")
    assert_user_error(result, "bytes.parquet", "row 2", "not valid UTF-8", where=in_tmp)


def test_parquet_binary_and_dictionary_text_columns_are_read_as_strings(in_tmp):
    a = paragraph(1)
    pq.write_table(pa.table({"text": pa.array([a.encode(), paragraph(2).encode()], pa.binary())}),
                   in_tmp / "binary.parquet")
    pq.write_table(pa.table({"text": pa.array([a, paragraph(3)]).dictionary_encode()}),
                   in_tmp / "categorical.parquet")
    report = run_ok("binary.parquet", "categorical.parquet")
    assert report["input"]["documents"] == 4
    assert report["results"]["removed_documents"] == 1  # the second copy of a
    # Each file's kept rows keep its own column type.
    binary, categorical = (pq.read_table(path)["text"] for path in kept_files(Path("out")))
    assert binary.type == pa.binary() and binary.to_pylist() == [a.encode(), paragraph(2).encode()]
    assert pa.types.is_dictionary(categorical.type) and categorical.to_pylist() == [paragraph(3)]


def test_parquet_without_rows_and_empty_parquet_file(in_tmp):
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), in_tmp / "none.parquet")
    result = invoke("dedup", "none.parquet", "-o", "out")  # no document: nothing to deduplicate
    assert_user_error(result, "no document could be read from the inputs", "(none.parquet)", where=in_tmp)
    (in_tmp / "zero.parquet").write_bytes(b"")
    result = invoke("dedup", "zero.parquet", "-o", "out")
    assert_user_error(result, "zero.parquet", "0 bytes", where=in_tmp)


def test_parquet_text_of_wrong_type(in_tmp):
    pq.write_table(pa.table({"text": [1.5, 2.5]}), in_tmp / "floats.parquet")
    result = invoke("dedup", "floats.parquet", "-o", "out")
    assert_user_error(result, "floats.parquet", "'text'", "expected a string", where=in_tmp)


# --- gzip ---------------------------------------------------------------------------------------


def test_truncated_gzip(in_tmp):
    raw = gzip.compress(jsonl_bytes(records(200)))
    (in_tmp / "cut.jsonl.gz").write_bytes(raw[: len(raw) // 2])
    result = invoke("dedup", "cut.jsonl.gz", "-o", "out")
    assert_user_error(result, "cut.jsonl.gz", "corrupt or truncated gzip", where=in_tmp)


def test_gzip_with_a_flipped_byte(in_tmp):
    raw = bytearray(gzip.compress(jsonl_bytes(records(200))))
    raw[len(raw) // 2] ^= 0xFF
    (in_tmp / "flip.jsonl.gz").write_bytes(bytes(raw))
    result = invoke("dedup", "flip.jsonl.gz", "-o", "out")
    assert_user_error(result, "flip.jsonl.gz", "gzip", where=in_tmp)


def test_plain_text_named_gz(in_tmp):
    (in_tmp / "plain.jsonl.gz").write_bytes(jsonl_bytes(records()))
    result = invoke("dedup", "plain.jsonl.gz", "-o", "out")
    assert_user_error(result, "plain.jsonl.gz", "not gzip-compressed", where=in_tmp)


def test_gzip_data_named_jsonl(in_tmp):
    (in_tmp / "packed.jsonl").write_bytes(gzip.compress(jsonl_bytes(records())))
    result = invoke("dedup", "packed.jsonl", "-o", "out")
    assert_user_error(result, "packed.jsonl:1", "invalid UTF-8", "name it .jsonl.gz", where=in_tmp)


def test_concatenated_gzip_members_are_one_file(in_tmp):
    rows = records(4)
    raw = gzip.compress(jsonl_bytes(rows[:2])) + gzip.compress(jsonl_bytes(rows[2:]))
    (in_tmp / "members.jsonl.gz").write_bytes(raw)
    report = run_ok("members.jsonl.gz")
    assert report["input"]["documents"] == 4


# --- JSONL: bad lines and wrong types -----------------------------------------------------------


@pytest.mark.parametrize("bad_line, fragments", [
    (b'{"text": "a b c"', ["invalid JSON"]),
    (b'{"text": "cut', ["invalid JSON", "Unterminated string"]),
    (b'{"text": "a"} {"text": "b"}', ["invalid JSON", "Extra data"]),
    (b'{"text": "a"}\r{"text": "b"}', ["carriage return"]),
    (b'[1, 2, 3]', ["expected a JSON object", "an array"]),
    (b'"just text"', ["expected a JSON object", "a string"]),
    (b'null', ["expected a JSON object", "null"]),
    (b'{"text": "a", "text": "b"}', ["'text'", "appears twice"]),
    (b'{"text": "a", "x": 1e400}', ["too large for a double"]),
    (b'{"text": "a", "x": -1' + b"0" * 310 + b'}', ["-1000", "(311 digits) is too large for a double"]),
    (b'{"text": "a", "meta": {"k": 1' + b"0" * 5000 + b'}}', ["(5001 digits) is too large for a double"]),
    (b'{"text": "a\\ud800"}', ["surrogate"]),
    (b'{"text": "a", "deep": ' + b"[" * 300 + b"]" * 300 + b"}", ["nested more than"]),
    (b'{"text": "caf\xc3"}', ["invalid UTF-8", "0xc3"]),
    (b'\x00\x01\x02binary\xfe\xff', ["invalid UTF-8"]),
    (b'{"text": {"nested": "object"}}', ["'text'", "an object", "expected a string"]),
    (b'{"text": ["a", "list"]}', ["'text'", "an array", "expected a string"]),
    (b'{"text": true}', ["'text'", "a boolean", "expected a string"]),
    (b'{"text": "a", "n": "three"}', ["'n'", "a string", "a number on line 1", "one type"]),
    (b'{"text": "a", "meta": {"k": "v"}}', ["'meta.k'", "a string", "a number on line 2"]),
], ids=["unclosed", "cut-string", "two-objects", "bare-cr", "array", "string", "null", "duplicate-key", "1e400",
        "311-digits", "5001-digits-nested", "lone-surrogate", "too-deep", "cut-utf8", "binary", "text-object",
        "text-array", "text-bool",
        "type-change", "nested-type-change"])
def test_bad_jsonl_line_names_file_and_line(in_tmp, bad_line, fragments):
    good = [json.dumps({"text": paragraph(1), "n": 1}).encode(),
            json.dumps({"text": paragraph(2), "n": 2, "meta": {"k": 7}}).encode()]
    (in_tmp / "bad.jsonl").write_bytes(b"\n".join(good + [b"", bad_line, good[0]]) + b"\n")
    result = invoke("dedup", "bad.jsonl", "-o", "out")
    line = assert_user_error(result, "bad.jsonl:4", *fragments, where=in_tmp)
    # The same file with \r\n line ends: the same message, the \r no part of the line.
    (in_tmp / "crlf.jsonl").write_bytes(b"\r\n".join(good + [b"", bad_line, good[0]]) + b"\r\n")
    crlf = invoke("dedup", "crlf.jsonl", "-o", "out")
    assert_user_error(crlf, line.replace("bad.jsonl", "crlf.jsonl"), where=in_tmp)


def test_infinity_literals_are_read_and_kept(in_tmp):
    """An Infinity literal is a double (Arrow and Python take it), unlike an integer too large
    for one: read, and a float column's values written back as they were."""
    rows = [b'{"text": "' + paragraph(k).encode() + b'", "x": ' + value + b'}'
            for k, value in ((1, b"Infinity"), (2, b"-Infinity"), (3, b"1.5"))]
    (in_tmp / "inf.jsonl").write_bytes(b"\n".join(rows) + b"\n")
    run_ok("inf.jsonl")
    kept = pq.read_table("out/deduplicated/inf.parquet")
    assert kept["x"].to_pylist() == [float("inf"), float("-inf"), 1.5]


def test_text_field_null_is_counted_and_missing_is_a_bad_record(in_tmp):
    rows = [{"text": paragraph(1)}, {"other": 1}, {"text": None}, {"text": paragraph(2)}, {"text": ""}]
    (in_tmp / "holes.jsonl").write_bytes(jsonl_bytes(rows))
    assert_user_error(invoke("dedup", "holes.jsonl", "-o", "out"), "holes.jsonl:2", "no field 'text'",
                      "(its fields: other)", "as null", where=in_tmp)
    report = run_ok("holes.jsonl", "--on-error", "skip")
    assert report["input"]["documents"] == 4
    assert report["input"]["null_texts"] == 1
    assert report["input"]["empty_documents"] == 2  # null and ""
    assert report["results"]["removed_documents"] == 0
    errors = [json.loads(line) for line in Path("out/errors.jsonl").read_text().splitlines()]
    assert [(e["file"], e["line"]) for e in errors] == [("holes.jsonl", 2)]


def test_id_of_the_wrong_type(in_tmp):
    rows = [{"id": 1, "text": "a b c"}, {"id": 2.5, "text": "d e f"}]
    (in_tmp / "ids.jsonl").write_bytes(jsonl_bytes(rows))
    result = invoke("dedup", "ids.jsonl", "-o", "out", "--id-field", "id")
    assert_user_error(result, "ids.jsonl:2", "'id'", "not an integer", where=in_tmp)


# --- sizes --------------------------------------------------------------------------------------


def huge_text(size: int, seed: int = 5) -> bytes:
    """About ``size`` bytes of words: 5,000 random six-letter words, each followed by a space."""
    rng = np.random.default_rng(seed)
    vocabulary = rng.integers(ord("a"), ord("z") + 1, size=(5000, 7), dtype=np.uint8)
    vocabulary[:, 6] = ord(" ")
    return vocabulary[rng.integers(0, 5000, size=size // 7)].tobytes()


def test_enormous_single_document(in_tmp):
    """A 50 MB document on one JSONL line (Arrow reads JSON in 1 MiB blocks) between two
    small ones, deduplicated; and a 50 MB .txt file read whole. (500 MB on one line was
    measured by hand: see the reliability notes.)"""
    huge = huge_text(50_000_000)
    small = [paragraph(1).encode(), paragraph(2).encode()]
    (in_tmp / "huge.jsonl").write_bytes(
        b'{"text": "%s"}\n{"text": "%s"}\n{"text": "%s"}\n' % (small[0], huge, small[1]))
    (in_tmp / "huge.txt").write_bytes(huge)
    corpus = read_corpus(["huge.txt"])
    assert corpus.num_rows == 1 and corpus.units()[1][-1] == len(huge)
    del corpus
    report = run_ok("huge.jsonl")
    assert report["input"]["documents"] == 3
    assert report["input"]["text_bytes"] == len(huge) + len(small[0]) + len(small[1])
    assert report["results"]["removed_documents"] == 0
    assert read_kept(Path("out"))["text"][1].as_py().encode() == huge


def test_many_tiny_documents(in_tmp):
    """200,000 one-word documents (1,000,000 were measured by hand: see the reliability notes):
    read and deduplicated; exact copies form clusters."""
    n = 200_000
    words = [f"w{i % 150_000}" for i in range(n)]  # the first 50,000 words appear twice
    (in_tmp / "tiny.jsonl").write_text("".join(f'{{"text":"{w}"}}\n' for w in words))
    report = run_ok("tiny.jsonl")
    # Every repeated word is one cluster of identical one-word documents, all but one removed.
    copies = Counter(words)
    assert report["input"]["documents"] == n
    assert report["results"]["removed_documents"] == sum(c - 1 for c in copies.values()) == 50_000
    assert report["results"]["clusters"] == sum(c > 1 for c in copies.values()) == 50_000
    assert kept() == list(copies)  # the first of each word kept (the default policy), in input order


# --- encodings, line endings, byte order marks --------------------------------------------------


def test_invalid_utf8_in_jsonl_and_txt(in_tmp):
    (in_tmp / "a.jsonl").write_bytes(jsonl_bytes(records(2)) + b'{"text": "\xed\xa0\x80"}\n')
    result = invoke("dedup", "a.jsonl", "-o", "out")
    assert_user_error(result, "a.jsonl:3", "invalid UTF-8", where=in_tmp)
    (in_tmp / "b.txt").write_bytes(b"one\ntwo\r\nthree \xc0\xaf\n")
    result = invoke("dedup", "b.txt", "-o", "out")
    assert_user_error(result, "b.txt:3", "invalid UTF-8", where=in_tmp)


def test_binary_garbage_in_every_format(in_tmp):
    rng = random.Random(3)
    garbage = b"\xff" + bytes(rng.randrange(256) for _ in range(4096))
    for name in ("noise.jsonl", "noise.txt", "noise.parquet", "noise.jsonl.gz"):
        (in_tmp / name).write_bytes(garbage)
        result = invoke("dedup", name, "-o", "out")
        assert_user_error(result, name, where=in_tmp)


def test_mixed_line_endings_in_jsonl(in_tmp):
    rows = records(4)
    lines = [json.dumps(r).encode() for r in rows]
    raw = lines[0] + b"\r\n" + lines[1] + b"\n\r\n" + lines[2] + b"\n" + lines[3] + b"\r\n"
    (in_tmp / "eol.jsonl").write_bytes(raw)
    report = run_ok("eol.jsonl")
    assert report["input"]["documents"] == 4
    assert kept("n") == [0, 1, 2, 3]
    corpus = read_corpus(["eol.jsonl"])
    assert corpus.ids.to_pylist() == ["eol.jsonl:1", "eol.jsonl:2", "eol.jsonl:4", "eol.jsonl:5"]


def test_mixed_line_endings_in_txt_are_kept_and_normalised_for_matching(in_tmp):
    text = paragraph(1)
    words = text.split()
    (in_tmp / "unix.txt").write_bytes("\n".join(words).encode())
    (in_tmp / "mixed.txt").write_bytes(("\r\n".join(words[:30]) + "\n" + "\n".join(words[30:])).encode())
    report = run_ok("unix.txt", "mixed.txt")
    assert report["input"]["documents"] == 2
    assert report["results"]["removed_documents"] == 1  # white space is normalised
    assert kept() == ["\n".join(words)]


def test_byte_order_marks(in_tmp):
    rows = records(3)
    (in_tmp / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + jsonl_bytes(rows))
    (in_tmp / "bom.txt").write_bytes(b"\xef\xbb\xbf" + paragraph(7).encode())
    (in_tmp / "bom.jsonl.gz").write_bytes(gzip.compress(b"\xef\xbb\xbf" + jsonl_bytes([{"text": "x y z"}])))
    report = run_ok("bom.jsonl", "bom.txt", "bom.jsonl.gz")
    assert report["input"]["documents"] == 5
    assert kept() == [r["text"] for r in rows] + [paragraph(7), "x y z"]
    corpus = read_corpus(["bom.jsonl"])
    assert corpus.ids.to_pylist() == ["bom.jsonl:1", "bom.jsonl:2", "bom.jsonl:3"]


def test_byte_order_mark_before_a_bad_line_still_counts_lines(in_tmp):
    (in_tmp / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + jsonl_bytes(records(2)) + b'{"text": 3}\n')
    result = invoke("dedup", "bom.jsonl", "-o", "out")
    assert_user_error(result, "bom.jsonl:3", "expected a string", where=in_tmp)


# --- empty things -------------------------------------------------------------------------------


def test_empty_files(in_tmp):
    for name in ("empty.jsonl", "blank.jsonl", "empty.txt", "empty.jsonl.gz"):
        (in_tmp / name).write_bytes(b"\n \r\n\t\n" if name == "blank.jsonl" else
                                    gzip.compress(b"") if name.endswith(".gz") else b"")
    (in_tmp / "one.jsonl").write_bytes(jsonl_bytes(records(1)))
    report = run_ok("empty.jsonl", "blank.jsonl", "empty.txt", "empty.jsonl.gz", "one.jsonl")
    assert report["input"]["documents"] == 2  # the .txt file is one (empty) document
    assert report["input"]["empty_documents"] == 1


def test_empty_directory(in_tmp):
    (in_tmp / "nothing").mkdir()
    result = invoke("dedup", "nothing", "-o", "out")
    assert_user_error(result, "nothing", "no input files", where=in_tmp)


def test_empty_directory_beside_input_is_noted(in_tmp):
    (in_tmp / "nothing").mkdir()
    (in_tmp / "one.jsonl").write_bytes(jsonl_bytes(records(2)))
    assert run_ok("nothing", "one.jsonl")["input"]["documents"] == 2
    assert read_corpus(["nothing", "one.jsonl"]).notes == ["nothing: no input files in this directory"]


# --- links, special files, permissions ----------------------------------------------------------


needs_symlinks = pytest.mark.skipif(not hasattr(os, "symlink") or sys.platform == "win32",
                                    reason="needs symbolic links")


@needs_symlinks
def test_symlink_loop_to_parent_directory(in_tmp):
    (in_tmp / "corpus" / "sub").mkdir(parents=True)
    (in_tmp / "corpus" / "a.jsonl").write_bytes(jsonl_bytes(records(2)))
    (in_tmp / "corpus" / "sub" / "b.jsonl").write_bytes(jsonl_bytes(records(3)[2:]))
    os.symlink("..", in_tmp / "corpus" / "sub" / "up")
    os.symlink(".", in_tmp / "corpus" / "here")
    report = run_ok("corpus")
    assert report["input"]["documents"] == 3  # each file once
    corpus = read_corpus(["corpus"])
    assert [f.path for f in corpus.files] == ["corpus/a.jsonl", "corpus/sub/b.jsonl"]
    assert "corpus/sub/up: skipped: symbolic link to corpus, a directory that contains it" in "\n".join(corpus.notes)
    assert any(n.startswith("corpus/here: skipped: symbolic link to corpus") for n in corpus.notes)


@needs_symlinks
def test_symlinked_directory_and_file_are_followed_once(in_tmp):
    (in_tmp / "data").mkdir()
    (in_tmp / "data" / "a.jsonl").write_bytes(jsonl_bytes(records(2)))
    (in_tmp / "corpus").mkdir()
    os.symlink(in_tmp / "data", in_tmp / "corpus" / "linked")
    os.symlink(in_tmp / "data" / "a.jsonl", in_tmp / "corpus" / "same.jsonl")
    corpus = read_corpus(["corpus"])  # a directory's files come before its subdirectories
    assert [f.path for f in corpus.files] == ["corpus/same.jsonl"]
    assert corpus.notes == ["corpus/linked/a.jsonl: skipped: the same file as corpus/same.jsonl, already read"]
    assert run_ok("corpus")["input"]["documents"] == 2


@needs_symlinks
def test_symlink_loop_given_directly_reader(in_tmp):
    os.symlink("self.jsonl", in_tmp / "self.jsonl")
    with pytest.raises(InputError, match="self.jsonl: symbolic link loop"):
        read_corpus(["self.jsonl"])


@needs_symlinks
def test_symlink_loop_given_directly_cli(in_tmp):
    os.symlink("self.jsonl", in_tmp / "self.jsonl")
    result = invoke("dedup", "self.jsonl", "-o", "out")
    assert_user_error(result, "self.jsonl", "symbolic link loop", where=in_tmp)


@needs_symlinks
def test_broken_symlink(in_tmp):
    os.symlink("gone.jsonl", in_tmp / "dangling.jsonl")
    result = invoke("dedup", "dangling.jsonl", "-o", "out")
    assert_user_error(result, "dangling.jsonl", "broken symbolic link", "gone.jsonl", where=in_tmp)
    (in_tmp / "corpus").mkdir()
    (in_tmp / "corpus" / "a.jsonl").write_bytes(jsonl_bytes(records(2)))
    os.symlink("gone.jsonl", in_tmp / "corpus" / "dangling.jsonl")
    assert run_ok("corpus")["input"]["documents"] == 2
    assert read_corpus(["corpus"]).notes == [
        "corpus/dangling.jsonl: skipped: broken symbolic link (it points to gone.jsonl, which does not exist)"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_named_pipe_is_not_read(in_tmp):
    """Reading a pipe would block (and the JSONL reader reads a file more than once)."""
    (in_tmp / "corpus").mkdir()
    (in_tmp / "corpus" / "a.jsonl").write_bytes(jsonl_bytes(records(2)))
    os.mkfifo(in_tmp / "corpus" / "pipe.jsonl")
    assert run_ok("corpus")["input"]["documents"] == 2
    assert read_corpus(["corpus"]).notes == ["corpus/pipe.jsonl: skipped: not a regular file (a named pipe)"]
    result = invoke("dedup", "corpus/pipe.jsonl", "-o", "out2")
    assert result.exit_code == 2 and "not a regular file" in result.output and "Traceback" not in result.output


def can_be_denied(tmp_path: Path) -> list[str] | None:
    """The command prefix under which a chmod 000 file cannot be read: none for a normal user,
    setpriv without CAP_DAC_OVERRIDE for root; None when neither works here."""
    if not hasattr(os, "geteuid"):
        return None
    if os.geteuid() != 0:
        return []
    return DROP_DAC if root_can_drop_dac(tmp_path) else None


def test_unreadable_file_stops_or_is_skipped(in_tmp):
    prefix = can_be_denied(in_tmp)
    if prefix is None:
        pytest.skip("cannot make a file unreadable here (root without setpriv)")
    (in_tmp / "corpus").mkdir()
    (in_tmp / "corpus" / "a.jsonl").write_bytes(jsonl_bytes(records(2)))
    locked = in_tmp / "corpus" / "b.parquet"
    pq.write_table(pa.Table.from_pylist(records(2)), locked)
    locked.chmod(0)
    script = ("import json, sys; from gpudedup.io.read import read_corpus; from gpudedup.errors import InputError\n"
              "try:\n    c = read_corpus(['corpus'], on_error=sys.argv[1])\n"
              "    print(json.dumps([c.num_rows, c.skipped_records]))\n"
              "except InputError as e:\n    print('InputError', e)\n")
    try:
        stop = subprocess.run([*prefix, sys.executable, "-c", script, "stop"], capture_output=True,
                              text=True, timeout=120, cwd=in_tmp)
        skip = subprocess.run([*prefix, sys.executable, "-c", script, "skip"], capture_output=True,
                              text=True, timeout=120, cwd=in_tmp)
        main = "import sys; from gpudedup.cli import main; sys.exit(main())"
        cli = subprocess.run([*prefix, sys.executable, "-c", main,
                              "dedup", "corpus", "-o", "out", "-q", "--backend", "cpu"],
                             capture_output=True, text=True, timeout=120, cwd=in_tmp)
    finally:
        locked.chmod(0o644)
    assert stop.stdout.strip() == "InputError corpus/b.parquet: permission denied", stop.stdout + stop.stderr
    assert json.loads(skip.stdout) == [2, [{"file": "corpus/b.parquet", "line": None, "reason": "permission denied"}]]
    assert cli.returncode == 2 and "Traceback" not in cli.stderr
    assert "corpus/b.parquet: permission denied" in cli.stdout + cli.stderr
    assert not (in_tmp / "out").exists()
