"""An input file that changes between a run's read and its write is refused with one line, and
nothing is written (gpudedup/io/stamps.py): by its size or modification time, and where its
bytes are read again at write time (a JSONL file: its kept lines copied, or a staged run's
rows, Parquet's too), by the bytes themselves, also when the size and the time are set back as they were.
In memory, staged (--work-dir, a file cut into pieces too) and on Dask workers; to JSONL and
Parquet output; through the API and the CLI."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import gpudedup
from gpudedup.cli import app
from gpudedup.io.pieces import Piece
from gpudedup.io.stamps import FileStamp, change, check_unchanged, content_digest, read_stamp
from gpudedup.results.result import DedupResult

from cli_support import assert_user_error, leftovers
from output_support import kept_lines
from test_api import paragraph

RUNS = ["memory", "staged"]


def corpus_lines(prefix: str, seed: int = 0, words: int = 60) -> list[str]:
    """Eight JSONL records: six distinct texts of ``words`` words, then copies of the first
    two (the copies are removed); ids ``<prefix>0`` .. ``<prefix>7``."""
    texts = [paragraph(seed * 100 + i, words) for i in range(6)]
    texts += texts[:2]
    return [json.dumps({"id": f"{prefix}{i}", "text": text}) + "\n" for i, text in enumerate(texts)]


def write_corpus(folder: Path, prefix: str = "y") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "a.jsonl"
    path.write_text("".join(corpus_lines(prefix)), encoding="utf-8")
    return path


def rewrite_in_place(path: Path, keep_size_and_time: bool) -> None:
    """Overwrite ``path`` with as many lines: other documents (another size), or the same
    texts under other ids of the same length with the file's size and modification time set
    back (only its bytes tell)."""
    before = path.stat()
    new = corpus_lines("x") if keep_size_and_time else corpus_lines("x", seed=1, words=50)
    path.write_text("".join(new), encoding="utf-8")
    if keep_size_and_time:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert (path.stat().st_size, path.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def run(source: Path, how: str, tmp_path: Path, **options) -> DedupResult:
    staged = {"work_dir": tmp_path / "work"} if how == "staged" else {}
    return gpudedup.dedup(source, id_field="id", backend="cpu", **staged, **options)


def assert_nothing_written(tmp_path: Path) -> None:
    assert not (tmp_path / "out").exists()
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("format", ["jsonl", "parquet"])
@pytest.mark.parametrize("how", RUNS)
def test_a_file_rewritten_with_as_many_lines_between_the_read_and_the_write_is_refused(tmp_path, how, format):
    """The review's shape: the file rewritten in place with as many lines (other documents)
    after the run read it; the write would copy the new lines (or rows) as the kept ones."""
    source = write_corpus(tmp_path / "in")
    result = run(source, how, tmp_path)
    assert result.report["results"]["removed_documents"] == 2
    rewrite_in_place(source, keep_size_and_time=False)
    with pytest.raises(gpudedup.InputError, match=r"a\.jsonl: changed since the run read it \(its size and "
                                                  r"modification time differ\); nothing was written"):
        result.write(tmp_path / "out", format=format)
    assert_nothing_written(tmp_path)


def test_a_staged_results_views_refuse_a_file_changed_since_the_run(tmp_path):
    """A staged run's views of its clusters and pairs read their texts from the files again:
    a file changed since the run is refused there as at the write, rather than its new texts
    shown (and scored) as the run's. The in-memory result shows the texts it read."""
    source = write_corpus(tmp_path / "in")
    held, staged = run(source, "memory", tmp_path), run(source, "staged", tmp_path)
    rewrite_in_place(source, keep_size_and_time=False)
    assert "Jaccard 1.0000" in repr(held.pair("y0", "y6"))
    for view in (lambda: staged.pair("y0", "y6"), lambda: repr(staged.cluster(0))):
        with pytest.raises(gpudedup.InputError, match=r"a\.jsonl: changed since the run read it .*the texts cannot "
                                                      "be read from it again"):
            view()


@pytest.mark.parametrize("format", ["jsonl", "parquet"])
@pytest.mark.parametrize("how", ["staged", "pieces"])
def test_other_bytes_under_the_same_size_and_time_are_caught_when_a_staged_run_reads_the_file_again(
        tmp_path, how, format):
    """A staged run reads every kept row from the files again (JSONL lines copied, or rows
    parsed): the bytes of what each shard read are checked, a file cut into pieces a piece at
    a time."""
    source = write_corpus(tmp_path / "in")
    options = {"shard_bytes": 700} if how == "pieces" else {}
    result = run(source, "staged", tmp_path, **options)
    rewrite_in_place(source, keep_size_and_time=True)
    with pytest.raises(gpudedup.InputError, match=r"a\.jsonl: changed since the run read it \(its bytes differ\); "
                                                  "nothing was written: run again with an empty work directory"):
        result.write(tmp_path / "out", format=format)
    assert_nothing_written(tmp_path)


def test_other_bytes_under_the_same_size_and_time_are_caught_when_the_kept_lines_are_copied(tmp_path):
    """In memory, JSONL to JSONL copies the kept lines from the file again: their bytes are
    checked. (To Parquet the kept rows come from memory, the rows the run read.)"""
    source = write_corpus(tmp_path / "in")
    result = run(source, "memory", tmp_path)
    rewrite_in_place(source, keep_size_and_time=True)
    with pytest.raises(gpudedup.InputError, match=r"a\.jsonl: changed since the run read it \(its bytes differ\); "
                                                  "nothing was written: run again$"):
        result.write(tmp_path / "out", format="jsonl")
    assert_nothing_written(tmp_path)


@pytest.mark.parametrize("how", RUNS)
def test_a_file_removed_before_the_write_is_refused(tmp_path, how):
    source = write_corpus(tmp_path / "in")
    result = run(source, how, tmp_path)
    source.unlink()
    with pytest.raises(gpudedup.InputError, match=r"a\.jsonl: removed since the run read it; nothing was written"):
        result.write(tmp_path / "out", format="jsonl")
    assert_nothing_written(tmp_path)


def write_parquet(path: Path, prefix: str, seed: int = 0, words: int = 60) -> Path:
    """corpus_lines' records as a Parquet file of row groups of three rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    records = [json.loads(line) for line in corpus_lines(prefix, seed, words)]
    pq.write_table(pa.Table.from_pylist(records), path, row_group_size=3)
    return path


def test_a_parquet_file_rewritten_with_as_many_rows_is_refused_by_a_staged_run(tmp_path):
    """A staged run reads a Parquet file's kept rows again too: its size and time are checked."""
    source = write_parquet(tmp_path / "in" / "a.parquet", "y")
    result = run(source, "staged", tmp_path)
    write_parquet(source, "x", seed=1, words=50)
    with pytest.raises(gpudedup.InputError, match=r"a\.parquet: changed since the run read it"):
        result.write(tmp_path / "out")
    assert_nothing_written(tmp_path)


@pytest.mark.parametrize("how", ["staged", "pieces"])
def test_a_parquet_file_of_other_rows_under_the_same_size_and_time_is_refused_by_a_staged_run(tmp_path, how):
    """Other ids of the same length give a file of the same size; its time set back, only
    the bytes of the row groups a shard read tell, a file cut into pieces a piece at a time."""
    source = write_parquet(tmp_path / "in" / "a.parquet", "y")
    before = source.stat()
    options = {"shard_bytes": 2000} if how == "pieces" else {}
    result = run(source, "staged", tmp_path, **options)
    write_parquet(source, "x")
    os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (source.stat().st_size, source.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    with pytest.raises(gpudedup.InputError, match=r"a\.parquet: changed since the run read it \(its bytes differ\); "
                                                  "nothing was written: run again with an empty work directory"):
        result.write(tmp_path / "out")
    assert_nothing_written(tmp_path)


def test_an_unchanged_file_is_written_and_a_touched_one_is_not(tmp_path):
    """Reading it (or writing its results) changes nothing; a new modification time alone,
    the same bytes under it, is a change (a run cannot tell what else it might mean)."""
    source = write_corpus(tmp_path / "in")
    result = run(source, "memory", tmp_path)
    result.write(tmp_path / "first", format="jsonl")
    assert kept_lines(tmp_path / "first") == [line.rstrip("\n") for line in corpus_lines("y")[:6]]
    os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 10**9))
    with pytest.raises(gpudedup.InputError, match=r"\(its modification time differs\)"):
        result.write(tmp_path / "out", format="jsonl")
    assert_nothing_written(tmp_path)


@pytest.mark.parametrize("how", RUNS)
def test_the_cli_refuses_a_file_changed_before_its_write_with_one_line(tmp_path, how, monkeypatch):
    """The file rewritten right as the CLI's write begins (after every stage read it): exit 2,
    one line, no output directory."""
    source = write_corpus(tmp_path / "in")
    write = DedupResult._write  # (the write of the CLI's run goes through it)

    def rewritten_first(self, *args, **options):
        rewrite_in_place(source, keep_size_and_time=True)
        return write(self, *args, **options)

    monkeypatch.setattr(DedupResult, "_write", rewritten_first)
    staged = ["--work-dir", str(tmp_path / "work")] if how == "staged" else []
    result = CliRunner().invoke(app, ["dedup", str(source), "-o", str(tmp_path / "out"), "--id-field", "id",
                                      "--format", "jsonl", "-q", "--backend", "cpu", *staged])
    assert_user_error(result, "a.jsonl: changed since the run read it (its bytes differ)", "nothing was written",
                      out=tmp_path / "out")


@pytest.mark.timeout(90)  # a staged run on two workers: 15 s beside other work
def test_dask_workers_check_the_bytes_of_the_files_they_copy(client, tmp_path, monkeypatch):
    """On a cluster each worker copies its files' kept lines (disk.write_file_rows); only the
    bytes tell this change (made as the run's write begins), and the worker's check says so."""
    source = write_corpus(tmp_path / "in")
    write = DedupResult._write  # (the write of a run with output= goes through it)

    def rewritten_first(self, *args, **options):
        rewrite_in_place(source, keep_size_and_time=True)
        return write(self, *args, **options)

    monkeypatch.setattr(DedupResult, "_write", rewritten_first)
    distributed = pytest.importorskip("distributed")
    with distributed.get_task_stream(client) as stream, \
            pytest.raises(gpudedup.InputError, match=r"a\.jsonl: changed since the run read it \(its bytes differ\)"):
        run(source, "staged", tmp_path, client=client, output=tmp_path / "out", format="jsonl")
    assert [task["status"] for task in stream.data if str(task["key"]).startswith("write_file_rows")] == ["error"]
    assert_nothing_written(tmp_path)


def test_the_digest_is_of_the_bytes_a_shard_reads(tmp_path):
    """A JSONL piece's digest is of its byte range; a Parquet piece's of its row groups' column
    chunks and the footer; in memory it is taken for JSONL only (a Parquet file's kept rows
    are held), in a staged run's shard for every format."""
    source = write_corpus(tmp_path / "in")
    data = source.read_bytes()
    assert content_digest(source) == hashlib.sha256(data).hexdigest()
    assert content_digest(source, Piece(100, 700, 0)) == hashlib.sha256(data[100:700]).hexdigest()
    stamp = read_stamp(source, "jsonl", Piece(100, 700, 0))
    assert stamp is not None and stamp.digest == hashlib.sha256(data[100:700]).hexdigest()
    assert (stamp.size, stamp.mtime_ns) == (source.stat().st_size, source.stat().st_mtime_ns)
    parquet = write_parquet(tmp_path / "a.parquet", "y")
    stamp = read_stamp(parquet, "parquet")
    assert stamp is not None and stamp.digest is None
    stamp = read_stamp(parquet, "parquet", read_again=True)
    assert stamp is not None and stamp.digest == hashlib.sha256(parquet.read_bytes()).hexdigest()
    metadata, data = pq.read_metadata(parquet), parquet.read_bytes()
    chunks = [metadata.row_group(1).column(i) for i in range(metadata.num_columns)]
    start = min(chunk.dictionary_page_offset or chunk.data_page_offset for chunk in chunks)
    stop = max((chunk.dictionary_page_offset or chunk.data_page_offset) + chunk.total_compressed_size
               for chunk in chunks)
    footer = data[len(data) - metadata.serialized_size - 8:]
    assert footer.endswith(b"PAR1")
    assert content_digest(parquet, Piece(1, 2, 3)) == hashlib.sha256(data[start:stop] + footer).hexdigest()
    assert read_stamp(tmp_path / "gone.jsonl", "jsonl") is None  # (the read says what is wrong)


def test_a_parquet_piece_whose_file_no_longer_holds_it_is_a_change(tmp_path):
    """A Parquet file cut into pieces, rewritten at the same size and time with a footer that
    no longer parses, or with fewer row groups than the piece's: the piece's bytes cannot be
    found, and that is the change, said in one line (not Arrow's error)."""
    path = tmp_path / "b.parquet"
    table = pa.table({"text": [f"doc {i} " * 20 for i in range(4000)]})
    pq.write_table(table, path, row_group_size=500)
    piece = Piece(6, 8, 3000)  # the last two of eight row groups
    stamp = read_stamp(path, "parquet", piece, read_again=True)
    before = path.stat()
    damaged = bytearray(path.read_bytes())
    damaged[-8:-4] = b"\xff\xff\xff\x7f"  # the footer's length
    path.write_bytes(bytes(damaged))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(gpudedup.InputError, match=r"b\.parquet: changed since the run read it \(its bytes differ\)"):
        check_unchanged(path, "b.parquet", stamp, piece)
    pq.write_table(table, path, row_group_size=1000)  # four row groups: the piece's are gone
    assert change(path, FileStamp(path.stat().st_size, path.stat().st_mtime_ns, stamp.digest), piece) == \
        "changed since the run read it (its bytes differ)"


def test_a_planned_piece_gone_before_its_read_is_a_change_said_in_one_line(tmp_path):
    """A shard about to read a Parquet piece that its file no longer holds (the file rewritten
    with fewer row groups after the run cut it, at the same size and time, as before a
    --resume): the stamp taken before the read says the file changed, naming it."""
    from gpudedup.pipeline.shardreader import ShardReader
    from gpudedup.io.pieces import Shard

    path = tmp_path / "b.parquet"
    table = pa.table({"text": [f"doc {i} " * 20 for i in range(4000)]})
    pq.write_table(table, path, row_group_size=1000)  # four row groups
    reader = ShardReader([path], "text", None, "stop")
    reader.shards = [Shard(0, Piece(6, 8, 3000))]  # the last two of the eight it was cut from
    with pytest.raises(gpudedup.InputError, match=r"b\.parquet: changed since the run cut it into pieces"):
        reader.stamp(0)
