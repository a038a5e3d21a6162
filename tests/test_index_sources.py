"""An index that verifies from source files (``verification="source"``, index/sources.py), against
the index that stores shingle sets as the oracle (itself checked against the batch run and Python
sets in tests/test_index.py): the same results, a fraction of the bytes, and a clear refusal
when the files it points into are gone or changed, or when documents do not come from files."""

from __future__ import annotations

import shutil

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpudedup
from gpudedup.index import Index
from gpudedup.index.sources import SourceChangedError

from cli_support import assert_user_error, invoke, tree_snapshot, write_jsonl
from index_support import bible_records, committed_state
from oracles import jaccard, shingle_set


def source_parts(root: Path) -> list[Path]:
    """The shipped sample cut round-robin into three files of three formats (JSONL, gzip'd
    JSONL, Parquet), and a fourth, Arrow IPC: each part holds other translations of the
    others' chapters, so later parts match indexed documents, some as exact copies (the
    "again" records)."""
    records = bible_records()[:900]
    chunks = [records[i::3] for i in range(3)]
    chunks[2] += [{"id": r["id"] + " again", "text": r["text"]} for r in chunks[0][:30]]
    arrow = bible_records()[1000:1060] + [{"id": r["id"] + " again", "text": r["text"]} for r in chunks[1][:20]]
    root.mkdir(parents=True, exist_ok=True)
    write_jsonl(root / "part0.jsonl", chunks[0])
    with gzip.open(root / "part1.jsonl.gz", "wt", encoding="utf-8") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in chunks[1])
    pq.write_table(pa.Table.from_pylist(chunks[2]), root / "part2.parquet", row_group_size=50)
    table = pa.Table.from_pylist(arrow)
    with pa.ipc.new_file(root / "part3.arrow", table.schema) as writer:
        writer.write_table(table)
    return [root / "part0.jsonl", root / "part1.jsonl.gz", root / "part2.parquet", root / "part3.arrow"]


@pytest.mark.timeout(180)
def test_verifying_from_source_files_gives_what_stored_sets_give(tmp_path):
    parts = source_parts(tmp_path / "in")
    sets = Index.create(tmp_path / "sets")
    source = Index.create(tmp_path / "source", verification="source")
    staged = Index.create(tmp_path / "staged", verification="source")
    matched = 0
    for number, part in enumerate(parts):
        reference = sets.add(part, id_field="id", tag=f"p{number}")
        for index, options in ((source, {}), (staged, {"work_dir": tmp_path / f"work{number}"})):
            result = index.add(part, id_field="id", tag=f"p{number}", **options)
            assert np.array_equal(result.keep, reference.keep), (index.path, number)
            assert result.pairs.equals(reference.pairs) and result.clusters.equals(reference.clusters)
        matched += reference.indexed_rows
    assert matched > 0, "no new document met an indexed one: the test proves nothing"
    texts = [r["text"] for r in bible_records()[900:1000]] + [bible_records()[3]["text"]]
    expected = sets.query(texts)
    assert any(expected)
    assert source.query(texts) == expected and staged.query(texts) == expected
    # The pairs name indexed documents with the Jaccard of their Python sets.
    by_id = {r["id"]: r["text"] for r in bible_records()}
    for a, b, value in zip(reference.pairs["id_a"].to_pylist(), reference.pairs["id_b"].to_pylist(),
                           reference.pairs["jaccard"].to_pylist()):
        a, b = (key.removesuffix(" again") for key in (a, b))
        assert value == jaccard(shingle_set(by_id[a]), shingle_set(by_id[b]))
    info, reference_info = source.info(), sets.info()
    assert info["documents"] == reference_info["documents"] and info["tags"] == reference_info["tags"]
    assert info["verification"] == "source" and reference_info["verification"] == "sets"
    assert info["bytes_per_document"] < reference_info["bytes_per_document"] / 2
    # Removal and compaction carry the pointers: still the same answers, from one segment.
    for index in (sets, source):
        index.remove(tag="p1")
        index.compact()
    assert source.info()["segments"] == 1 and source.query(texts) == sets.query(texts)
    again = source.dedup(parts[1], id_field="id")  # its ids are free again
    assert again.indexed_rows > 0 and again.pairs.equals(sets.dedup(parts[1], id_field="id").pairs)


def test_a_run_reads_the_sources_of_the_indexed_documents_it_checks_alone(tmp_path):
    """The probe matches indexed documents that merely share a band key with a new one; only
    those in a candidate pair or a group of copies are checked, and only their source files are
    read. A file whose documents are matched but never checked is not read, in memory or
    through a work directory (where the matched documents are the work directory's lead
    shard): here it was edited after indexing, which reading it would refuse."""
    import random

    rng = random.Random(7)
    words = [f"w{i}" for i in range(3000)]
    far = [{"id": f"x{i}", "text": " ".join(rng.choice(words) for _ in range(200))} for i in range(100)]
    near = [{"id": f"y{i}", "text": " ".join(rng.choice(words) for _ in range(200))} for i in range(100)]
    new = [{"id": f"nx{i}", "text": " ".join(d["text"].split()[:110] + [rng.choice(words) for _ in range(90)])}
           for i, d in enumerate(far)]  # about half of an indexed document's shingles: matched, not checked
    new += [{"id": f"ny{i}", "text": d["text"].replace(d["text"].split()[100], "changed", 1)}
            for i, d in enumerate(near[:30])]  # near copies: checked and verified
    index = Index.create(tmp_path / "index", verification="source")
    index.add([write_jsonl(tmp_path / "far.jsonl", far), write_jsonl(tmp_path / "near.jsonl", near)], id_field="id")
    (tmp_path / "far.jsonl").write_text('{"id": "x0", "text": "edited"}\n', encoding="utf-8")
    part = write_jsonl(tmp_path / "new.jsonl", new)
    held = index.dedup(part, id_field="id")
    staged = index.dedup(part, id_field="id", work_dir=tmp_path / "work")
    assert held.indexed_rows > 30 and held.pairs.num_rows == 30  # (more matched than checked)
    assert staged.pairs.equals(held.pairs) and staged.clusters.equals(held.clusters)


def test_a_source_file_changed_or_gone_is_refused_naming_it(tmp_path, in_tmp):
    parts = source_parts(tmp_path / "in")
    index = Index.create(tmp_path / "index", verification="source")
    index.add(parts[0], id_field="id")
    query = [bible_records()[0]["text"]]
    assert index.query(query)[0]  # finds its own document
    original = parts[0].read_bytes()
    parts[0].write_bytes(original.replace(b"the", b"teh", 1))
    before = committed_state(index.path)
    with pytest.raises(SourceChangedError, match=rf"{parts[0]}: changed since its documents were indexed"):
        index.query(query)
    with pytest.raises(SourceChangedError, match=rf"{parts[0]}: changed"):
        index.add(parts[1], id_field="id")
    assert committed_state(index.path) == before
    result = invoke("index", "query", index.path, query[0])
    assert_user_error(result, f"{parts[0].name}: changed since its documents were indexed", out=tmp_path / "out")
    parts[0].unlink()
    result = invoke("dedup", parts[1], "-o", tmp_path / "out", "--id-field", "id", "--against", index.path)
    assert_user_error(result, f"{parts[0].name}: missing; the index verifies matches from this file",
                      out=tmp_path / "out")
    parts[0].mkdir()  # a folder where the file was: not missing, but no longer a file
    with pytest.raises(SourceChangedError, match=rf"{parts[0]}: no longer a file; the index verifies"):
        index.query(query)
    parts[0].rmdir()
    parts[0].write_bytes(original)  # as it was: usable again
    assert index.query(query)[0]


@pytest.mark.parametrize("how", ["memory", "staged"])
def test_a_source_file_changed_while_an_add_runs_is_not_committed(tmp_path, monkeypatch, how):
    """The index records a source file as the add read it: a JSONL file another process rewrites
    (the same size and time, other bytes) after the read and before the commit is refused
    naming it, the index left as it was, in memory and through a work directory."""
    import gpudedup.index.adding as index_module  # (writes the new segment, its pointers among it)

    parts = source_parts(tmp_path / "in")
    index = Index.create(tmp_path / "index", verification="source")
    before = committed_state(index.path)
    original = parts[0].read_bytes()
    stat = parts[0].stat()
    recorded = index_module.pointer_arrays

    def rewritten_first(pointers):
        parts[0].write_bytes(original.replace(b"the", b"teh", 1))  # (as another process would)
        os.utime(parts[0], ns=(stat.st_atime_ns, stat.st_mtime_ns))
        return recorded(pointers)

    monkeypatch.setattr(index_module, "pointer_arrays", rewritten_first)
    staged = {"work_dir": tmp_path / "work"} if how == "staged" else {}
    with pytest.raises(gpudedup.errors.InputError, match=rf"{parts[0]}: changed since the run read it.*nothing "
                                                         "was added to the index"):
        index.add(parts[0], id_field="id", **staged)
    assert committed_state(index.path) == before
    parts[0].write_bytes(original)
    monkeypatch.setattr(index_module, "pointer_arrays", recorded)
    index.add(parts[0], id_field="id")  # (the file as read: committed)
    assert index.query([bible_records()[0]["text"]])[0]


def test_compact_lists_only_the_source_files_its_documents_point_into(tmp_path):
    """After the documents of a file are removed, compact lists only the files the documents
    left point into (as an add lists its own): an output may then hold the other file again."""
    parts = source_parts(tmp_path / "in")
    index = Index.create(tmp_path / "index", verification="source")
    index.add(parts[0], id_field="id", tag="first")
    index.add(parts[2], id_field="id", tag="second")
    assert sorted(index.reader().source_files()) == sorted(str(p) for p in (parts[0], parts[2]))
    index.remove(tag="first")
    index.compact()
    assert index.reader().source_files() == [str(parts[2])]
    assert index.query([bible_records()[2]["text"]])[0]  # (a document of the file kept, found from it)


def test_an_output_or_work_directory_holding_a_source_file_is_refused(tmp_path, in_tmp):
    """The kept rows of an output, indexed with verification "source", are the index's source
    files: an add, or a run against the index, that would write its output (even with
    --overwrite) or its work directory over them is refused before any work, from the API and
    the command line, and the files and the index stay as they were."""
    parts = source_parts(tmp_path / "in")
    first = gpudedup.dedup(parts[0], id_field="id", backend="cpu", output=tmp_path / "out1", format="jsonl")
    kept = tmp_path / "out1" / "deduplicated" / "part0.jsonl"
    assert first.report["results"]["kept_documents"] and kept.is_file()
    index = Index.create(tmp_path / "index", verification="source")
    index.add(kept, id_field="id")
    assert index.reader().source_files() == [str(kept.absolute())]
    before, sources = committed_state(index.path), tree_snapshot(tmp_path / "out1")
    with pytest.raises(gpudedup.OutputError, match=rf"must not be or hold a file the index verifies its documents "
                                                   rf"from: the index's source file {kept}"):
        index.add(parts[1], id_field="id", output=tmp_path / "out1", overwrite=True)
    with pytest.raises(gpudedup.OutputError, match="the work directory must not be or hold a file the index verifies"):
        index.add(parts[1], id_field="id", output=tmp_path / "out2", work_dir=tmp_path / "out1")
    # A folder that is no gpudedup output, holding a source file: the source file is named.
    (tmp_path / "mine").mkdir()
    shutil.copy(kept, tmp_path / "mine" / "notes.jsonl")
    index_of_mine = Index.create(tmp_path / "index-of-mine", verification="source")
    index_of_mine.add(tmp_path / "mine" / "notes.jsonl", id_field="id")
    for call in (index_of_mine.add, index_of_mine.dedup):
        with pytest.raises(gpudedup.OutputError, match="a file the index verifies its documents from"):
            call(parts[1], id_field="id", output=tmp_path / "mine", overwrite=True)
    # A run against the index that adds nothing keeps off them when its result is written, too.
    against = index.dedup(parts[1], id_field="id")
    with pytest.raises(gpudedup.OutputError, match="a file the index verifies its documents from"):
        against.write(tmp_path / "out1", overwrite=True)
    against.write(tmp_path / "elsewhere")
    for command in (["index", "add", index.path, parts[1]], ["dedup", parts[1], "--against", index.path]):
        result = invoke(*command, "-o", tmp_path / "out1", "--id-field", "id", "--overwrite")
        assert_user_error(result, "a file the index verifies its documents from", out=tmp_path / "out1",
                          before=sources)
    assert committed_state(index.path) == before and tree_snapshot(tmp_path / "out1") == sources
    assert Index.create(tmp_path / "stored").reader().source_files() == []


def test_a_source_index_takes_files_only_and_says_so_before_writing(tmp_path):
    index = Index.create(tmp_path / "index", verification="source")
    table = pa.Table.from_pylist(bible_records()[:50])
    before = committed_state(index.path)
    with pytest.raises(gpudedup.ParameterError, match="must be read from files"):
        index.add(table, id_field="id", output=tmp_path / "out")
    assert committed_state(index.path) == before and not (tmp_path / "out").exists()
    index.dedup(table, id_field="id")  # a run that adds nothing needs no pointers
    with pytest.raises(gpudedup.ParameterError, match="verification= must be 'sets' or 'source'"):
        Index.create(tmp_path / "other", verification="pointers")


def test_cli_create_verify_from_source(tmp_path, in_tmp):
    parts = source_parts(tmp_path / "in")
    result = invoke("index", "create", tmp_path / "index", "--verify-from", "source")
    assert result.exit_code == 0, result.output
    result = invoke("index", "add", tmp_path / "index", parts[0], "-o", tmp_path / "out", "--id-field", "id")
    assert result.exit_code == 0, result.output
    result = invoke("index", "info", tmp_path / "index")
    assert json.loads(result.stdout)["verification"] == "source"
