"""Real input at the readers' limits: many records without ids, deep nesting, many distinct
fields, many tiny records under --max-memory, records without the text field, Parquet columns
of one name and integer ids beyond int64. Each case either works or stops with one line naming
the file (and line) and what was expected; none crashes, and --max-memory stops a run before
it passes the budget.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpudedup

from cli_support import assert_user_error, invoke, paragraph, write_jsonl
from gpudedup.errors import InputError
from gpudedup.io import jsonl_lines
from gpudedup.io.inputs import InputFiles
from gpudedup.io.jsonl_lines import MAX_BRACKET_DEPTH, MAX_JSON_DEPTH, nesting_depths
from gpudedup.io.layout import FileRows, as_input, write_kept_file
from gpudedup.io.read import build_corpus, default_ids, read_corpus, read_one_file
from gpudedup.io.rules import combined_ids
from gpudedup.io.sizes import CELL_BYTES, JsonlColumns, file_read_bytes, read_bytes_estimate
from gpudedup.io.source import SourceFile
from gpudedup.stages import STAGE_EVENTS_VARIABLE
from stage_events import stages_begun

CLI = "import sys; from gpudedup.cli import main; sys.exit(main())"


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The CLI in a subprocess: a crash of a parser (SIGSEGV) must not take pytest with it."""
    return subprocess.run([sys.executable, "-c", CLI, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def errors_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "errors.jsonl").read_text(encoding="utf-8").splitlines()]


# --- ids <path>:<line> for millions of records --------------------------------------------------

# The review's reproduction: one file of this many records and no id field crashed in memory and
# staged (the ids, as a numpy unicode array past about 200 MB, came back from Arrow in chunks).
RECORDS = 2_555_475


@pytest.fixture(scope="module")
def many_tiny(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tiny") / "t.jsonl"
    path.write_bytes(b'{"text":"a b"}\n' * RECORDS)
    return path


def test_default_ids_of_millions_of_rows_are_one_array():
    ids = default_ids("some/dir/t.jsonl", np.arange(1, 2_600_001, dtype=np.int64))
    assert isinstance(ids, pa.StringArray) and len(ids) == 2_600_000
    assert ids[0].as_py() == "some/dir/t.jsonl:1" and ids[-1].as_py() == "some/dir/t.jsonl:2600000"
    # A part whose ids come in chunks (a column read in blocks) combines too.
    chunked = pa.chunked_array([pa.array(["a:1", "a:2"]), pa.array(["a:3"])])
    assert combined_ids([chunked, ids.slice(0, 1)], pa.string()).to_pylist() == ["a:1", "a:2", "a:3",
                                                                                   "some/dir/t.jsonl:1"]


@pytest.mark.timeout(120)
def test_a_file_of_2555475_records_without_ids_is_read_in_memory_and_staged(many_tiny):
    corpus = read_corpus([many_tiny])  # (in memory)
    assert corpus.num_rows == RECORDS and isinstance(corpus.ids, pa.StringArray)
    assert corpus.ids[RECORDS - 1].as_py() == f"{many_tiny}:{RECORDS}"
    del corpus
    source = SourceFile("t.jsonl", "jsonl")  # (a staged run: one file at a time, pipeline/disk.py)
    part = read_one_file(many_tiny, source, "text", None, False, "stop")
    shard = build_corpus([part], "text", None, InputFiles(), [str(many_tiny)])
    assert shard.ids[RECORDS - 1].as_py() == f"t.jsonl:{RECORDS}"


@pytest.mark.parametrize("staged", [False, True], ids=["in memory", "staged"])
def test_a_run_without_ids_in_memory_and_staged(in_tmp, staged):
    texts = [paragraph(i % 50) for i in range(3000)]
    write_jsonl(in_tmp / "c.jsonl", [{"text": t} for t in texts])
    result = invoke("dedup", "c.jsonl", "-o", "out", "-q", "--backend", "cpu",
                    *(["--work-dir", "work"] if staged else []))
    assert result.exit_code == 0, result.output
    report = json.loads((in_tmp / "out" / "report.json").read_text())
    assert report["input"]["documents"] == 3000 and report["results"]["removed_documents"] == 2950


# --- nesting -------------------------------------------------------------------------------------


def nested_line(depth: int, opening: str = "[", closing: str = "]", innermost: str = "1") -> bytes:
    """A record whose field "meta" holds ``depth`` nested containers (the review's line)."""
    return ('{"id":"deep","text":"x y z","meta":' + opening * depth + innermost + closing * depth + "}").encode()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("opening, closing", [("[", "]"), ('{"a":', "}")], ids=["lists", "objects"])
def test_a_line_nested_20000_deep_is_a_bad_record_not_a_crash(tmp_path, opening, closing):
    lines = [nested_line(20_000, opening, closing), json.dumps({"id": "ok", "text": "a b c"}).encode()]
    (tmp_path / "d.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    done = cli(tmp_path, "dedup", "d.jsonl", "-o", "out", "-q", "--backend", "cpu", "--id-field", "id",
               "--on-error", "skip")
    assert done.returncode == 0, done.stdout + done.stderr
    assert errors_of(tmp_path / "out") == [{"file": "d.jsonl", "line": 1,
                                            "reason": f"JSON nested more than {MAX_JSON_DEPTH} levels deep"}]
    done = cli(tmp_path, "dedup", "d.jsonl", "-o", "out2", "-q", "--backend", "cpu", "--id-field", "id")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert done.stderr.strip() == f"error: d.jsonl:1: JSON nested more than {MAX_JSON_DEPTH} levels deep"


@pytest.mark.parametrize("lists, refused", [(MAX_JSON_DEPTH - 1, False), (MAX_JSON_DEPTH, True),
                                            (MAX_JSON_DEPTH + 1, True), (5000, True)])
def test_nesting_at_the_limit_is_judged_alike_on_every_path(in_tmp, lists, refused):
    """Lists around a number: the number sits at depth lists + 1. A file read in one go and a
    file read line by line (another line is bad) judge the line alike."""
    good = json.dumps({"id": "ok", "text": "a b c"}).encode()
    (in_tmp / "clean.jsonl").write_bytes(good + b"\n" + nested_line(lists) + b"\n")
    (in_tmp / "mixed.jsonl").write_bytes(good + b"\n" + nested_line(lists) + b"\n{broken\n")
    for name, bad_lines in (("clean.jsonl", []), ("mixed.jsonl", [3])):
        corpus = read_corpus([name], id_field="id", on_error="skip")
        assert [r["line"] for r in corpus.skipped_records] == ([2] if refused else []) + bad_lines
        assert corpus.ids.to_pylist() == ["ok"] + ([] if refused else ["deep"])


@pytest.mark.parametrize("opening, closing", [("[", "]"), ('{"a":', "}")], ids=["lists", "objects"])
def test_a_record_nested_to_the_limit_is_written_where_it_reads_back(tmp_path, opening, closing):
    """The deepest record read (its value at MAX_JSON_DEPTH) is written as Parquet kept rows that
    pyarrow reads back, in memory and through a work directory's shards (an Arrow IPC schema)."""
    good = json.dumps({"id": "ok", "text": "a b c"}).encode()
    (tmp_path / "d.jsonl").write_bytes(good + b"\n" + nested_line(MAX_JSON_DEPTH - 1, opening, closing) + b"\n")
    for out, staged in (("memory", []), ("staged", ["--work-dir", "work"])):
        done = cli(tmp_path, "dedup", "d.jsonl", "-o", out, "-q", "--backend", "cpu", "--id-field", "id", *staged)
        assert done.returncode == 0, done.stdout + done.stderr
        kept = pq.read_table(tmp_path / out / "deduplicated")
        assert kept.column("id").to_pylist() == ["ok", "deep"]


def nested_lists(lists: int) -> pa.Array:
    """Three values, each inside ``lists`` nested lists of one item."""
    values = pa.array([1, 2, 3], pa.int64())
    for _ in range(lists):
        values = pa.ListArray.from_arrays(pa.array([0, 1, 2, 3], pa.int32()), values)
    return values


@pytest.mark.parametrize("lists, refused", [(MAX_JSON_DEPTH - 1, False), (MAX_JSON_DEPTH, True)])
def test_an_arrow_file_or_table_nested_past_the_limit_is_refused(tmp_path, lists, refused):
    """An Arrow IPC file, or a table given in Python, is held to a JSONL record's depth: deeper,
    its kept rows would be written as Parquet that pyarrow cannot read back."""
    table = pa.table({"id": ["a", "b", "c"], "text": ["one two three four five", "six seven eight nine ten",
                                                      "six seven eight nine ten"], "meta": nested_lists(lists)})
    path = tmp_path / "deep.arrow"
    with pa.ipc.new_file(path, table.schema) as writer:
        writer.write_table(table)
    done = cli(tmp_path, "dedup", "deep.arrow", "-o", "out", "-q", "--backend", "cpu", "--id-field", "id")
    words = f"column 'meta' nests {lists + 1} levels deep, more than the {MAX_JSON_DEPTH} a record may"
    if refused:
        assert done.returncode == 2 and done.stderr.strip() == f"error: deep.arrow: {words} (deeper, its kept rows " \
            "would be written as Parquet that cannot be read back)", done.stderr
        with pytest.raises(gpudedup.InputError, match=f"^{words}"):
            gpudedup.dedup(table, id_field="id", backend="cpu")
        return
    assert done.returncode == 0, done.stderr
    assert pq.read_table(tmp_path / "out" / "deduplicated").column("id").to_pylist() == ["a", "b"]
    kept = gpudedup.dedup(table, id_field="id", backend="cpu")
    kept.write(tmp_path / "table-out")
    assert pq.read_table(tmp_path / "table-out" / "deduplicated.parquet").num_rows == 2


def test_brackets_in_strings_do_not_count(in_tmp):
    texts = ["[" * 5000 + "{" * 5000, '\\"' + "[" * 3000, "a \\\\" + "{" * 400, "q" + "]" * 300]
    write_jsonl(in_tmp / "s.jsonl", [{"text": t, "n": i} for i, t in enumerate(texts)])
    corpus = read_corpus(["s.jsonl"])
    assert corpus.texts.to_pylist() == texts
    assert not corpus.files[0].line_by_line  # (read by Arrow in one go)


def reference_depth(line: bytes) -> int:
    """How deeply a line's brackets nest outside strings, by walking its characters."""
    depth = deepest = 0
    inside = escaped = False
    for char in line.decode("utf-8"):
        if inside:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                inside = False
        elif char == '"':
            inside = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def test_nesting_depths_against_a_walk_of_each_line():
    rng = random.Random(7)
    strings = ['a"[{', "\\", 'x]}"', 'q\\"[', "{[[[", "", "\\\\", "é{"]

    def value(depth: int):
        roll = rng.random()
        if depth > 8 or roll < 0.3:
            return rng.choice(strings + [1, None, 2.5])
        if roll < 0.65:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        return {rng.choice(strings): value(depth + 1) for _ in range(rng.randint(0, 3))}

    lines = [json.dumps({"t": value(0)}, ensure_ascii=rng.random() < 0.5).encode() for _ in range(2000)]
    lines += [b'{"a": "unterminated [[[', b"[[[[]", b"]]]][[", b""]
    assert nesting_depths(lines).tolist() == [reference_depth(line) for line in lines]
    assert MAX_BRACKET_DEPTH == MAX_JSON_DEPTH + 1


@pytest.mark.parametrize("chunk", [1, 7, 300, 1 << 24])
def test_line_shapes_flag_the_deep_lines_whatever_the_chunks(monkeypatch, chunk):
    """Every line nested too deep is flagged (also where a chunk cuts it), and a line is flagged
    only where it is, or where it has more opening brackets than a record may nest and a chunk
    cuts it (too_deep then reads it whole)."""
    monkeypatch.setattr(jsonl_lines, "CHUNK_BYTES", chunk)
    rng = random.Random(chunk)
    lines = []
    for _ in range(60):
        depth = rng.choice([0, 5, MAX_BRACKET_DEPTH - 1, MAX_BRACKET_DEPTH, MAX_BRACKET_DEPTH + 1, 400])
        lines.append(rng.choice([nested_line(depth), b'{"x": "\\\\\\"' + b"[" * depth + b'"}', b""]))
    data = b"\n".join(lines) + b"\n"
    shapes = jsonl_lines.line_shapes(lambda: pa.BufferReader(data))
    assert len(shapes) == len(lines)
    for line, shape in zip(lines, shapes):
        if jsonl_lines.too_deep(line):
            assert shape == jsonl_lines.DEEP, line[:40]
        elif shape == jsonl_lines.DEEP:
            assert chunk < len(data) and line.count(b"[") + line.count(b"{") > MAX_BRACKET_DEPTH
        else:
            assert shape == (jsonl_lines.OBJECT if line else jsonl_lines.BLANK)


# --- many distinct fields -------------------------------------------------------------------------


def sparse_lines(path: Path, lines: int) -> Path:
    """The review's file: each line has a field of its own besides id and text."""
    path.write_text("".join(json.dumps({"id": f"i{i}", "text": f"w{i} x y", f"k{i}": i}) + "\n" for i in range(lines)))
    return path


@pytest.mark.parametrize("staged", [False, True], ids=["in memory", "staged"])
def test_sparse_fields_stop_before_reading_under_max_memory(in_tmp, monkeypatch, staged):
    """20,000 lines (1.5 MB) of a field each make a table of 20,000 x 20,002 cells, 3 GB: the
    estimate counts them, so --max-memory 1G stops the run before anything is read. A staged
    run begins no shard's read (its stage events, GPUDEDUP_STAGE_EVENTS) and spills none."""
    import gpudedup.io.read as reader

    def must_not_read(*args, **kwargs):
        raise AssertionError("a file was read")

    if not staged:  # (in memory the estimate is taken within the read stage: the reader itself refuses)
        monkeypatch.setattr(reader, "read_one_file", must_not_read)
    monkeypatch.setenv(STAGE_EVENTS_VARIABLE, str(in_tmp / "stages.txt"))
    sparse_lines(in_tmp / "wide.jsonl", 20_000)
    result = invoke("dedup", "wide.jsonl", "-o", "out", "-q", "--backend", "cpu", "--id-field", "id",
                    "--max-memory", "1G", *(["--work-dir", "work"] if staged else []))
    line = assert_user_error(result, "--max-memory 1,024 MiB", "needs about", out=in_tmp / "out")
    assert "reading" in line
    if staged:
        assert stages_begun(in_tmp / "stages.txt") == [] and not list((in_tmp / "work").glob("shards/*"))


def test_jsonl_columns_counts_the_null_cells_arrow_makes():
    def null_cells(*records) -> int:
        columns = JsonlColumns()
        for record in records:  # (fed a line at a time, and in pieces)
            line = (json.dumps(record) + "\n").encode()
            columns.feed(line[:3])
            columns.feed(line[3:])
        columns.finish()
        return columns.null_cells()

    assert null_cells(*[{"text": "a", "n": i} for i in range(50)]) == 0  # dense: every cell a value
    assert null_cells(*[{"text": "a", f"k{i}": i} for i in range(50)]) == 50 * 51 - 100
    # A nested object's fields are as long as the records, those of the objects in a list as
    # long as those objects.
    assert null_cells(*[{"text": "a", "meta": {f"k{i}": 1}} for i in range(10)]) == 10 * 12 - 30
    assert null_cells({"text": "a", "items": [{f"k{i}": 1} for i in range(30)]}) == 30 * 30 - 30
    # Fields and brackets inside strings are text, escaped quotes included.
    assert null_cells(*[{"text": f'"k{i}": {{"a": [', f"x{i}": 1} for i in range(3)]) == 3 * 4 - 6
    assert null_cells(*[{"te\"xt": "\\\\", f"k{i}": 1} for i in range(3)]) == 3 * 4 - 6


def test_the_read_estimate_counts_sparse_columns(tmp_path):
    kept, _ = file_read_bytes(sparse_lines(tmp_path / "wide.jsonl", 2000), "jsonl")
    assert kept >= CELL_BYTES * 2000 * 1999


@pytest.mark.timeout(120)
def test_a_record_of_50000_fields_is_read_and_written_in_seconds(tmp_path):
    """One 0.8 MB line: laying out its kept row was quadratic in its columns (minutes); the
    watchdog's 120 s stand for "seconds"."""
    record = {"id": "a", "text": "x y z", **{f"k{i}": i for i in range(50_000)}}
    path = tmp_path / "wide.jsonl"
    path.write_text(json.dumps(record) + "\n")
    corpus = read_corpus([path], id_field="id")
    assert corpus.table.num_columns == 50_002
    source = corpus.files[0]
    assert as_input(corpus.table, source.schema).num_columns == 50_002
    write_kept_file(FileRows(source, corpus.table, np.ones(1, bool)), tmp_path / "kept.parquet", "parquet")
    assert pq.read_metadata(tmp_path / "kept.parquet").num_columns == 50_002


# --- many tiny records under --max-memory ----------------------------------------------------------

MEASURE = r"""
import sys, tracemalloc
import pyarrow as pa
from gpudedup.io.read import read_corpus
pool = pa.default_memory_pool()
arrow_before = pool.bytes_allocated()
tracemalloc.start()
corpus = read_corpus(sys.argv[1:])
corpus.units()
print(pool.max_memory() - arrow_before + tracemalloc.get_traced_memory()[1])
"""


@pytest.mark.timeout(120)
def test_the_read_estimate_covers_many_tiny_records(tmp_path):
    """1,000,000 lines of {"text":"a b"} (15 MB): what reading them allocates (ids, line
    numbers, offsets, the id checks) is mostly per record, not per byte."""
    path = tmp_path / "tiny.jsonl"
    path.write_bytes(b'{"text":"a b"}\n' * 1_000_000)
    estimate = read_bytes_estimate([(path, "jsonl")])
    allocated = int(subprocess.run([sys.executable, "-c", MEASURE, str(path)], capture_output=True, text=True,
                                   check=True, timeout=100).stdout)
    assert allocated <= estimate, (allocated / 2**20, estimate / 2**20)


# --- records without the text field ---------------------------------------------------------------


@pytest.mark.parametrize("other_bad_line", [False, True], ids=["read in one go", "read line by line"])
def test_a_record_without_the_text_field_stops_or_is_skipped(in_tmp, other_bad_line):
    lines = [json.dumps(r) for r in [{"id": "a", "text": paragraph(1)}, {"id": "b", "txt": paragraph(2)},
                                     {"id": "c", "text": None}, {"id": "d", "text": paragraph(3)}]]
    if other_bad_line:
        lines.append("{broken")
    (in_tmp / "m.jsonl").write_text("\n".join(lines) + "\n")
    assert_user_error(invoke("dedup", "m.jsonl", "-o", "out", "--id-field", "id"),
                      "m.jsonl:2: no field 'text' (its fields: id, txt)", "as null", "--text-field",
                      out=in_tmp / "out")
    result = invoke("dedup", "m.jsonl", "-o", "out", "--id-field", "id", "--on-error", "skip", "-q",
                    "--backend", "cpu")
    assert result.exit_code == 0, result.output
    report = json.loads((in_tmp / "out" / "report.json").read_text())
    assert report["input"]["documents"] == 3 and report["input"]["null_texts"] == 1  # c: a null text
    assert [e["line"] for e in errors_of(in_tmp / "out")] == [2] + ([5] if other_bad_line else [])


def test_a_record_without_the_token_field_stops(in_tmp):
    write_jsonl(in_tmp / "t.jsonl", [{"id": 1, "tokens": [1, 2, 3, 4]}, {"id": 2, "tokens": None},
                                     {"id": 3, "text": "no tokens"}])
    assert_user_error(invoke("dedup", "t.jsonl", "-o", "out", "--id-field", "id", "--shingle", "token",
                             "--token-field", "tokens", "--ngram", "2"),
                      "t.jsonl:3: no field 'tokens' (its fields: id, text)", out=in_tmp / "out")


def test_a_parquet_file_without_the_text_column_is_refused_whole(in_tmp):
    """Parquet has no per-record missing field: a column is there for every row or for none."""
    pq.write_table(pa.table({"id": ["a", "b"], "txt": ["x", "y"]}), in_tmp / "p.parquet")
    assert_user_error(invoke("dedup", "p.parquet", "-o", "out", "--id-field", "id"),
                      "p.parquet: no field 'text' (fields: id, txt)", out=in_tmp / "out")


def test_a_long_list_of_fields_is_cut_short_in_messages(in_tmp):
    write_jsonl(in_tmp / "m.jsonl", [{f"f{i}": i for i in range(40)}])
    with pytest.raises(InputError, match=r"\(fields: f0, f1, .*, f9 and 30 more\)"):
        read_corpus(["m.jsonl"])


# --- Parquet columns of one name --------------------------------------------------------------------


def test_a_parquet_file_with_two_columns_of_one_name(in_tmp):
    table = pa.Table.from_arrays([pa.array(["a", "b"]), pa.array(["x y z", "p q r"]), pa.array([1, 2]),
                                  pa.array([3, 4])], names=["id", "text", "meta", "meta"])
    pq.write_table(table, in_tmp / "dup.parquet")
    write_jsonl(in_tmp / "ok.jsonl", [{"id": "c", "text": "u v w"}])
    expected = "columns share a name ('meta'); each column of a Parquet file needs a name of its own"
    line = assert_user_error(invoke("dedup", "dup.parquet", "-o", "out", "--id-field", "id"),
                             f"dup.parquet: {expected}", out=in_tmp / "out")
    assert "__fragment_index" not in line
    result = invoke("dedup", "dup.parquet", "ok.jsonl", "-o", "out", "--id-field", "id", "--on-error", "skip",
                    "-q", "--backend", "cpu")
    assert result.exit_code == 0, result.output
    assert errors_of(in_tmp / "out") == [{"file": "dup.parquet", "line": None, "reason": expected}]


# --- integer ids beyond int64 -----------------------------------------------------------------------


@pytest.mark.parametrize("value", [2**64 * 1000, 2**63 + 5, -(2**63) - 1], ids=["double", "uint64", "negative"])
def test_an_integer_id_beyond_int64_names_its_line(in_tmp, value):
    (in_tmp / "ids.jsonl").write_text(f'{{"id": 1, "text": "a b c"}}\n{{"id": {value}, "text": "d e f"}}\n')
    assert_user_error(invoke("dedup", "ids.jsonl", "-o", "out", "--id-field", "id"),
                      f"ids.jsonl:2: id field 'id' is {value}, outside the range of integer ids",
                      "signed 64-bit integer", out=in_tmp / "out")
