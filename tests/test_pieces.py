"""Large files cut into pieces (io/pieces.py, ``shard_bytes``): the plan against oracles that
read the whole file (Python's bytes.count for line numbers, the footer for row groups), and a
staged run over cut files against the same files read whole in memory: the same pairs,
clusters, kept rows and output files, ids, line numbers in errors and skipped records, and
resume."""

from __future__ import annotations

import gzip
import json
import os
import random
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.memory import MemoryFileSystem

import gpudedup
from gpudedup.errors import InputError, ParameterError
from gpudedup.io.pieces import Shard, count_newlines, jsonl_cuts, parquet_pieces, plan_shards
from gpudedup.stages import STAGE_EVENTS_VARIABLE

from cli_support import invoke
from output_support import kept_files, kept_lines, read_clusters, read_kept, read_pairs, result_bytes
from stage_events import kill_then_resume, stages_begun

SAMPLE = Path(__file__).resolve().parents[1] / "gpudedup" / "data" / "bible_sample.jsonl.gz"


def sample_lines(n: int) -> list[bytes]:
    with gzip.open(SAMPLE, "rb") as handle:
        return [line.rstrip(b"\n") for line in handle if line.strip()][:n]


def serial_count(tasks):
    return [count_newlines(*task) for task in tasks]


def cut_corpus(root: Path, seed: int = 0) -> Path:
    """A JSONL file with what a cut may fall on (a BOM, CRLF line ends, blank lines, a record
    without the text's neighbours' fields, copies of earlier records far apart) and a Parquet
    file of many row groups holding copies of the JSONL's records."""
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    lines = sample_lines(1500)
    out = [b"\xef\xbb\xbf" + lines[0]]
    for i, line in enumerate(lines[1:], 1):
        if i % 97 == 0:
            out.append(b"")  # a blank line
        if i % 53 == 0:
            line += b"\r"  # CRLF
        out.append(line)
        if i % 11 == 0:  # a copy of an earlier record, with its own id
            record = json.loads(lines[rng.randrange(i)])
            record["id"] = f"copy-{i}"
            out.append(json.dumps(record).encode())
    (root / "big.jsonl").write_bytes(b"\n".join(out) + b"\n")
    records = [json.loads(line) for line in lines[::3]]
    for n, record in enumerate(records):
        record["id"] = f"pq-{n}"
    pq.write_table(pa.Table.from_pylist(records), root / "big.parquet", row_group_size=37)
    return root


# --- the plan --------------------------------------------------------------------------------


@pytest.mark.parametrize("shard_bytes", [1, 50, 333, 4096, 100_000, 10**9])
@pytest.mark.parametrize("ending", [b"\n", b""])
def test_jsonl_pieces_start_after_a_newline_and_count_the_lines_before(tmp_path, shard_bytes, ending):
    rng = random.Random(shard_bytes)
    lines = [b"x" * rng.choice([0, 1, 5, 40, 700]) for _ in range(400)]
    data = b"\n".join(lines) + ending
    path = tmp_path / "f.jsonl"
    path.write_bytes(data)
    shards = plan_shards([path], shard_bytes, serial_count)
    if len(shards) == 1:
        assert shards == [Shard(0)]  # read whole
        assert len(data) <= shard_bytes or jsonl_cuts(path, shard_bytes) == [0]
        return
    pieces = [shard.piece for shard in shards]
    assert all(shard.file == 0 for shard in shards)
    assert pieces[0].start == 0 and pieces[-1].stop == len(data)
    for before, after in zip(pieces, pieces[1:]):
        assert before.stop == after.start  # contiguous
    for piece in pieces:
        assert piece.stop > piece.start
        assert piece.start == 0 or data[piece.start - 1:piece.start] == b"\n"
        assert piece.before == data[:piece.start].count(b"\n")  # the oracle: the whole file counted
        if piece.stop < len(data):  # it ends with the line that holds its shard_bytes-th byte
            assert piece.stop - piece.start >= shard_bytes
            assert b"\n" not in data[piece.start + shard_bytes - 1:piece.stop - 1]
    # No piece is much larger than asked, beyond the line it had to finish.
    longest_line = max(len(line) for line in lines) + 1
    assert max(p.stop - p.start for p in pieces) <= shard_bytes + longest_line


def test_parquet_pieces_are_runs_of_row_groups_with_the_rows_before(tmp_path):
    table = pa.table({"text": [f"document {i} " * (i % 7 + 1) for i in range(1000)]})
    path = tmp_path / "f.parquet"
    pq.write_table(table, path, row_group_size=64)
    metadata = pq.read_metadata(path)
    sizes = [metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups)]
    rows = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
    for shard_bytes in (1, max(sizes), 3 * max(sizes), sum(sizes) + 1):
        pieces = parquet_pieces(path, shard_bytes)
        assert pieces[0].start == 0 and pieces[-1].stop == metadata.num_row_groups
        for before, after in zip(pieces, pieces[1:]):
            assert before.stop == after.start
        for piece in pieces:
            assert piece.before == sum(rows[:piece.start])
            assert piece.stop - piece.start == 1 or sum(sizes[piece.start:piece.stop]) <= shard_bytes


def test_only_plain_jsonl_and_parquet_files_past_the_size_are_cut(tmp_path):
    lines = b"".join(json.dumps({"text": f"t {i} " * 20}).encode() + b"\n" for i in range(200))
    (tmp_path / "a.jsonl").write_bytes(lines)
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(lines))
    (tmp_path / "c.txt").write_bytes(lines)
    (tmp_path / "d.jsonl").write_bytes(lines[:100])  # under the size
    files = sorted(tmp_path.iterdir())
    shards = plan_shards(files, 1000, serial_count)
    cut = {files[shard.file].name for shard in shards if shard.piece is not None}
    assert cut == {"a.jsonl"}
    assert [shard.file for shard in shards] == sorted(shard.file for shard in shards)  # input order


# --- a run over cut files is the run over whole files -------------------------------------------


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """cut_corpus, made once for the tests that only read it."""
    return cut_corpus(tmp_path_factory.mktemp("pieces") / "in")


@pytest.fixture(scope="module")
def whole(inputs, tmp_path_factory) -> tuple[gpudedup.DedupResult, Path]:
    """The in-memory run over ``inputs`` (each file read whole) at threshold 0.7, the reference
    of the runs over cut files; and the folder of its outputs in each format (parquet/,
    jsonl/), written as output= writes them (DedupResult.write)."""
    out = tmp_path_factory.mktemp("whole")
    result = gpudedup.dedup(inputs, backend="cpu", threshold=0.7)
    for format in ("parquet", "jsonl"):
        result.write(out / format, format=format)
    return result, out


@pytest.fixture(scope="module")
def cut(inputs, tmp_path_factory) -> tuple[gpudedup.DedupResult, Path, list[Path]]:
    """The staged run over ``inputs`` cut into pieces of 20,000 bytes at threshold 0.7, written
    in each format while its work directory is there (parquet/ by output=, jsonl/ after); the
    folder of its outputs and work/, and the shards it spilled."""
    root = tmp_path_factory.mktemp("cut")
    result = gpudedup.dedup(inputs, backend="cpu", threshold=0.7, work_dir=root / "work", shard_bytes=20_000,
                            output=root / "parquet", format="parquet")
    result.write(root / "jsonl", format="jsonl")
    return result, root, sorted((root / "work").glob("shards/*"))


@pytest.mark.parametrize("format", ["parquet", "jsonl"])
def test_a_staged_run_over_cut_files_gives_the_whole_files_results(whole, cut, format):
    (whole_result, whole_root), (cut_result, cut_root, spilled) = whole, cut
    whole_out, cut_out = whole_root / format, cut_root / format
    assert cut_result.report["results"] == whole_result.report["results"]
    assert cut_result.report["input"] == whole_result.report["input"]
    assert cut_result.ids.equals(whole_result.ids)  # ids <path>:<line> and <path>:<row>: the file's numbers
    assert read_pairs(cut_out).equals(read_pairs(whole_out))
    assert read_clusters(cut_out).equals(read_clusters(whole_out))
    if format == "parquet":
        assert read_kept(cut_out).equals(read_kept(whole_out))
    else:
        assert kept_lines(cut_out) == kept_lines(whole_out)
    names = [path.relative_to(whole_out) for path in kept_files(whole_out)]
    assert names == [path.relative_to(cut_out) for path in kept_files(cut_out)]
    for name in names:
        if format == "jsonl":  # JSONL lines copied, Parquet rows written: the same bytes
            assert (cut_out / name).read_bytes() == (whole_out / name).read_bytes()
        else:  # (the row groups differ: one per piece)
            assert pq.read_table(cut_out / name).equals(pq.read_table(whole_out / name))
    # The run really was cut: many shards, the JSONL file's counted from its newlines.
    assert len(spilled) > 10
    assert whole_result.report["results"]["removed_documents"] > 100


def test_lines_of_a_later_piece_are_named_as_in_the_whole_file(tmp_path):
    lines = [json.dumps({"id": f"d{i}", "text": f"text number {i} " * 8}) for i in range(600)]
    lines[457] = '{"id": "d457", "text": '  # broken JSON, far into the file
    path = tmp_path / "in" / "f.jsonl"
    path.parent.mkdir()
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as whole:
        gpudedup.dedup(path, backend="cpu", id_field="id")
    with pytest.raises(InputError) as cut:
        gpudedup.dedup(path, backend="cpu", id_field="id", work_dir=tmp_path / "work", shard_bytes=3000)
    assert ":458" in str(whole.value)
    assert str(cut.value) == str(whole.value)
    skipped_whole = gpudedup.dedup(path, backend="cpu", id_field="id", on_error="skip")
    skipped_cut = gpudedup.dedup(path, backend="cpu", id_field="id", on_error="skip", work_dir=tmp_path / "w2",
                                 shard_bytes=3000)
    assert skipped_cut.skipped_records == skipped_whole.skipped_records
    assert [record["line"] for record in skipped_cut.skipped_records] == [458]


class TimingOutOnceWriting(MemoryFileSystem):
    """A store in memory (fsspec's, at URLs of this protocol): the user's storage, whose reads
    time out once the run reading it has begun its write stage, as the file of stage events
    (GPUDEDUP_STAGE_EVENTS) says: a network that fails after the signatures, as the kept rows
    are read again."""

    protocol = "timing-out-when-writing"
    store: dict = {}  # (its own objects, not memory://'s)
    pseudo_dirs = [""]

    def _open(self, path, mode="rb", **kwargs):
        events = os.environ.get(STAGE_EVENTS_VARIABLE)
        if "r" in mode and events and "write" in stages_begun(Path(events)):
            raise TimeoutError("timed out")
        return super()._open(path, mode, **kwargs)


@pytest.mark.parametrize("on_error", ["stop", "skip"])
def test_a_piece_that_fails_when_its_kept_rows_are_read_again_is_one_line(tmp_path, monkeypatch, on_error):
    """A piece read again once signed (its kept rows, at the write) that fails to read (a
    network timeout, a file gone) is that failure, one InputError, under either on_error: not
    the signature pass's signal to read the file whole, which nothing after it catches (a
    traceback), nor an empty piece whose kept rows go missing. The file is on a store whose
    reads time out from the run's write stage on (TimingOutOnceWriting)."""
    fsspec.register_implementation(TimingOutOnceWriting.protocol, TimingOutOnceWriting, clobber=True)
    lines = [json.dumps({"id": f"d{i}", "text": f"text number {i} " * 8}) for i in range(600)]
    url = f"{TimingOutOnceWriting.protocol}://{tmp_path.name}-{on_error}/f.jsonl"
    fsspec.filesystem(TimingOutOnceWriting.protocol).pipe_file(url, ("\n".join(lines) + "\n").encode())
    monkeypatch.setenv(STAGE_EVENTS_VARIABLE, str(tmp_path / "stages.txt"))
    result = invoke("dedup", url, "-o", tmp_path / "out", "--id-field", "id", "--work-dir", tmp_path / "work",
                    "--shard-bytes", "10KB", "--on-error", on_error, "--backend", "cpu", "-q")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "f.jsonl: cannot be read again (timed out)" in result.output and not (tmp_path / "out").exists()
    shards = len(list((tmp_path / "work" / "shards").iterdir()))
    assert shards > 3 and stages_begun(tmp_path / "stages.txt").count("spill") == shards  # (every piece signed)


def test_a_resumed_run_reads_the_same_pieces_and_another_size_is_refused(inputs, cut):
    first, root, _ = cut
    again = gpudedup.dedup(inputs, backend="cpu", threshold=0.7, work_dir=root / "work", shard_bytes=20_000,
                           resume=True)
    assert again.pairs.equals(first.pairs) and again.clusters.equals(first.clusters)
    with pytest.raises(ParameterError, match="shard_bytes"):
        gpudedup.dedup(inputs, backend="cpu", threshold=0.7, work_dir=root / "work", shard_bytes=40_000, resume=True)


def test_a_shard_size_that_is_not_a_size_is_refused():
    with pytest.raises(ParameterError, match="shard_bytes"):
        gpudedup.dedup(["a b c"], backend="cpu", shard_bytes="lots")
    with pytest.raises(ParameterError, match="shard_bytes"):
        gpudedup.dedup(["a b c"], backend="cpu", shard_bytes=0)


def test_a_shard_size_for_a_run_in_memory_is_refused(tmp_path):
    """A run in memory reads each file whole: a shard size would be dropped, so it is refused,
    by dedup, Index.dedup and Index.add alike."""
    path = tmp_path / "a.txt"
    path.write_text("the quick brown fox jumps over the lazy dog\n")
    index = gpudedup.Index.create(tmp_path / "index")
    for run in (gpudedup.dedup, index.dedup, index.add):
        with pytest.raises(ParameterError, match=r"^shard_bytes= cuts the input files of a run with work_dir= or on "
                                                 r"Dask, and this run reads each file whole in memory"):
            run(path, backend="cpu", shard_bytes="1M")
    assert gpudedup.dedup(path, backend="cpu", shard_bytes="1M", work_dir=tmp_path / "work").documents == 1


def test_cut_pieces_never_overlap_a_record(inputs):
    """Every record of the file is read by exactly one piece: the pieces' row numbers are the
    whole file's, once each."""
    path = inputs / "big.jsonl"
    shards = plan_shards([path], 7_000, serial_count)
    from gpudedup.io.read import read_one_file
    from gpudedup.io.source import SourceFile

    numbers = []
    for shard in shards:
        part = read_one_file(path, SourceFile("big.jsonl", "jsonl", piece=shard.piece), "text", None, False, "stop")
        numbers.append(part.source.row_numbers)
    whole = read_one_file(path, SourceFile("big.jsonl", "jsonl"), "text", None, False, "stop")
    assert np.array_equal(np.concatenate(numbers), whole.source.row_numbers)


@pytest.mark.timeout(300)  # four CLI runs in subprocesses
def test_a_run_over_cut_files_killed_in_chosen_stages_resumes_to_identical_output(inputs, tmp_path):
    options = ["--backend", "cpu", "-q", "--threshold", "0.7", "--shard-bytes", "20000", "--format", "jsonl"]
    # The reference, run in process (only the runs that are killed need processes of their own).
    reference = invoke("dedup", inputs, "-o", tmp_path / "reference", "--work-dir", tmp_path / "work-reference",
                       *options)
    assert reference.exit_code == 0, reference.output
    out, work = tmp_path / "out", tmp_path / "work"
    killed = kill_then_resume(["dedup", str(inputs), "-o", str(out), "--work-dir", str(work), "--resume", *options],
                              tmp_path, tmp_path / "events", [("signature_pass", 3), ("read", 9), ("verify", 1)], out)
    assert killed >= 2
    assert result_bytes(out) == result_bytes(tmp_path / "reference")  # (JSONL kept rows: byte for byte)


@pytest.mark.timeout(120)  # a cluster of its own
def test_a_result_over_cut_files_is_written_after_its_work_directory_is_gone(inputs, whole, tmp_path):
    """A run on Dask without --work-dir uses a temporary one and writes after it is removed: the
    written files come from the input files and what the result holds, not from the spills.
    (A run of its own: the result has written nothing before its work directory is gone.)"""
    whole_out = whole[1] / "parquet"
    pytest.importorskip("distributed", reason="Dask is not installed (pip install 'gpudedup[dask]')")
    cut = gpudedup.dedup(inputs, backend="cpu", threshold=0.7, workers=1, shard_bytes=200_000)
    cut.write(tmp_path / "cut")
    assert read_kept(tmp_path / "cut").equals(read_kept(whole_out))
    for mine, theirs in zip(kept_files(tmp_path / "cut"), kept_files(whole_out), strict=True):
        assert pq.read_schema(mine).equals(pq.read_schema(theirs), check_metadata=False)


# --- a piece that does not stand for its part of the file: the file is read whole ------------------


def lines_file(path: Path, records: list) -> Path:
    """Records (dicts, or raw strings written as they are) one per line, of equal length where
    possible, so that small shard sizes cut between known lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((record if isinstance(record, str) else json.dumps(record)) + "\n"
                            for record in records))
    return path


def texts(n: int) -> list[str]:
    return [f"document {i % 7} about topic {i % 7} with words {' '.join(str(i % 7 + j) for j in range(8))}"
            for i in range(n)]


def type_change(path: Path) -> Path:
    """Field x a string on lines 1-10, a number on line 11, a string again after."""
    return lines_file(path, [{"id": f"d{i}", "text": t, "x": 11 if i == 10 else f"s{i}"}
                             for i, t in enumerate(texts(20))])


def text_absent_later(path: Path) -> Path:
    """No line after the tenth has the text field (each such line is a bad record; a piece of
    them alone is a file without the text field)."""
    return lines_file(path, [{"id": f"d{i}", "text": t} if i < 10 else {"id": f"d{i}", "note": "n"}
                             for i, t in enumerate(texts(20))])


def id_absent_later(path: Path) -> Path:
    return lines_file(path, [{"id": f"d{i}", "text": t} if i < 10 else {"text": t} for i, t in enumerate(texts(20))])


def blank_run(path: Path) -> Path:
    """Blank lines first and in the middle: pieces of blank lines only."""
    records = [""] * 40 + [json.dumps({"id": f"d{i}", "text": t}) for i, t in enumerate(texts(10))]
    return lines_file(path, records + [""] * 300 + [json.dumps({"id": f"e{i}", "text": t})
                                                    for i, t in enumerate(texts(10))])


def tokens_with_blank_run(path: Path) -> Path:
    rows = [{"id": f"d{i}", "input_ids": [i % 5 + j for j in range(12)]} for i in range(20)]
    return lines_file(path, [json.dumps(r) for r in rows[:10]] + [""] * 300 + [json.dumps(r) for r in rows[10:]])


def token_ids_null_later(path: Path) -> Path:
    """Token ids on lines 1-10, null after: a piece of nulls alone reads as a text column."""
    return lines_file(path, [{"id": f"d{i}", "input_ids": [i % 5 + j for j in range(12)] if i < 10 else None}
                             for i in range(20)])


def text_becomes_token_ids(path: Path) -> Path:
    return lines_file(path, [{"id": f"d{i}", "text": t if i < 10 else [i, i + 1, i + 2]}
                             for i, t in enumerate(texts(20))])


def no_text_field(path: Path) -> Path:
    return lines_file(path, [{"id": f"d{i}", "body": t} for i, t in enumerate(texts(20))])


def parquet_int_text(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(200)], "text": list(range(200))}), path,
                   row_group_size=20)
    return path


def outcome(path: Path, out: Path, **options) -> dict:
    """What a run gives, to compare two: its error, or its ids, pairs, clusters, skipped
    records, input report and kept rows' files (as tables)."""
    try:
        result = gpudedup.dedup(path, backend="cpu", threshold=0.7, **options)
    except InputError as error:
        return {"error": str(error)}
    result.write(out)
    return {"ids": result.ids.to_pylist(), "pairs": result.pairs, "clusters": result.clusters,
            "skipped": result.skipped_records, "input": result.report["input"],
            "kept": [pq.read_table(path) for path in kept_files(out)]}


@pytest.mark.parametrize("on_error", ["stop", "skip"])
@pytest.mark.parametrize("make, options", [
    (type_change, {"id_field": "id"}),
    (text_absent_later, {"id_field": "id"}),
    (id_absent_later, {"id_field": "id"}),
    (blank_run, {"id_field": "id"}),
    (tokens_with_blank_run, {"id_field": "id", "shingle": "token", "ngram": 3}),
    (token_ids_null_later, {"id_field": "id", "shingle": "token", "ngram": 3}),
    (text_becomes_token_ids, {"id_field": "id"}),
    (no_text_field, {}),
    (parquet_int_text, {}),
], ids=lambda value: getattr(value, "__name__", ""))
def test_a_file_whose_pieces_do_not_stand_alone_gives_the_whole_files_results(tmp_path, make, options, on_error):
    """Pieces read alone judge their lines alone (a type first seen, a field in no line of the
    piece, columns inferred from the piece); such a file is read whole, so the run over it is
    the run over the file read whole: the same error, or the same results and records."""
    suffix = ".parquet" if make is parquet_int_text else ".jsonl"
    path = make(tmp_path / "in" / f"f{suffix}")
    whole = outcome(path, tmp_path / "whole", on_error=on_error, **options)
    cut = outcome(path, tmp_path / "cut", on_error=on_error, work_dir=tmp_path / "work", shard_bytes=400,
                  **options)
    assert len(list((tmp_path / "work").glob("shards/*"))) > 2 or "error" in cut  # the file was cut
    assert cut.keys() == whole.keys()
    for key in whole:
        if key in ("pairs", "clusters"):
            assert cut[key].equals(whole[key]), key
        elif key == "kept":
            assert len(cut[key]) == len(whole[key]) and all(a.equals(b) for a, b in zip(cut[key], whole[key]))
        else:
            assert cut[key] == whole[key], key


def test_the_first_error_in_input_order_is_raised_when_an_earlier_file_is_read_whole(tmp_path):
    """A cut file's own error shows only when it is read whole, after the first pass over every
    shard: a later file's error must not be raised before it."""
    type_change(tmp_path / "in" / "a.jsonl")
    lines_file(tmp_path / "in" / "z.jsonl", [{"id": "z0", "text": "one two three"}, "{broken"])
    with pytest.raises(InputError) as whole:
        gpudedup.dedup(tmp_path / "in", backend="cpu", id_field="id")
    with pytest.raises(InputError) as cut:
        gpudedup.dedup(tmp_path / "in", backend="cpu", id_field="id", work_dir=tmp_path / "work", shard_bytes=400)
    assert "a.jsonl:11" in str(whole.value)
    assert str(cut.value) == str(whole.value)


@pytest.mark.parametrize("on_error", ["skip", "stop"])
def test_a_cut_file_left_out_whole_is_named_once(tmp_path, on_error):
    """A large Parquet file whose ids are of the other type than the file before it is left
    out whole (skip) or refused (stop). Cut into pieces (runs of row groups), each piece is a
    part of its own for the input rules: the skipped record, and the files the error names,
    still name it once, as for the file read whole."""
    from test_streaming import make_texts

    texts = make_texts(200, seed=9)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n"
                                                     for i, t in enumerate(texts[:20])))
    pq.write_table(pa.table({"id": [f"b{i}" for i in range(180)], "text": texts[20:]}), tmp_path / "in" / "b.parquet",
                   row_group_size=20)

    def run(**staged):
        try:
            result = gpudedup.dedup(tmp_path / "in", backend="cpu", id_field="id", on_error=on_error, **staged)
        except InputError as error:
            return str(error)
        return result.skipped_records

    whole = run()
    cut = run(work_dir=tmp_path / "work", shard_bytes=4000)
    assert len(list((tmp_path / "work" / "shards").iterdir())) > 3  # b.jsonl was cut
    assert cut == whole
    assert (len(whole) == 1) if on_error == "skip" else whole.count("b.parquet") == 1
