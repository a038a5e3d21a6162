"""The staged run (--work-dir, pipeline/disk.py) against independent oracles: the in-memory run
``gpudedup.dedup(path, backend="cpu")`` on the same files, and Python sets for every reported
Jaccard; resume after interruptions (real runs killed in chosen stages) and from every
intermediate state of a work directory; what the work directory refuses; and the input rules,
which must leave out or refuse what the in-memory run leaves out or refuses."""

from __future__ import annotations

import errno
import gzip
import json
import os
import random
import shutil
import signal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import gpudedup
from gpudedup.cli import app
from gpudedup.errors import GpudedupError, InputError, OutputError, ParameterError
from gpudedup.pipeline.workfolders import TEMPORARY_PREFIX
from gpudedup.stages import STAGE_EVENTS_VARIABLE

from stage_events import (cli_process, finish, kill_then_resume, stages_begun, wait_for_stage,
                          with_stage_events)
from test_api import write_jsonl
from oracles import oracle_shingles
from output_support import read_kept, result_bytes

SAMPLE = Path(__file__).resolve().parents[1] / "gpudedup" / "data" / "bible_sample.jsonl.gz"
WORDS = [f"w{i}" for i in range(300)]


# --- corpora and oracles ---------------------------------------------------------------------


def sample_records() -> list[dict]:
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def write_shards(root: Path, records: list[dict], shards: int) -> Path:
    """The records cut into ``shards`` JSONL files, the last one as Parquet with an extra column."""
    root.mkdir(parents=True, exist_ok=True)
    size = -(-len(records) // shards)
    for i in range(shards):
        part = records[i * size:(i + 1) * size]
        if i == shards - 1:
            table = pa.Table.from_pylist([{**r, "extra": n} for n, r in enumerate(part)])
            pq.write_table(table, root / f"part-{i:03d}.parquet")
        else:
            (root / f"part-{i:03d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part), encoding="utf-8")
    return root


def make_texts(n: int, seed: int) -> list[str]:
    """Random word texts, about a third of them near copies (one word changed) or exact
    copies of an earlier one, so that every stage has work."""
    rng = random.Random(seed)
    texts: list[str] = []
    for _ in range(n):
        if texts and rng.random() < 0.35:
            words = rng.choice(texts).split()
            if rng.random() < 0.6:
                words[rng.randrange(len(words))] = rng.choice(WORDS)
            texts.append(" ".join(words))
        else:
            texts.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 40))))
    return texts


def mixed_corpus(root: Path) -> Path:
    """JSONL, .jsonl.gz, Parquet and .txt in nested directories, with a file of zero rows of
    each kind, an all-null (string-typed) Parquet text column, null and empty texts, and
    exact copies of one text in five different shards."""
    texts = make_texts(420, seed=7)
    inp = root / "in"
    write_jsonl(inp / "a.jsonl", [{"text": t, "n": i} for i, t in enumerate(texts[:80])] + [{"text": None},
                                                                                           {"text": ""}])
    write_jsonl(inp / "b_empty.jsonl", [])
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), inp / "c_zero.parquet")
    pq.write_table(pa.table({"text": pa.nulls(3, pa.string())}), inp / "d_nulls.parquet")
    (inp / "sub" / "deep").mkdir(parents=True)
    with gzip.open(inp / "sub" / "e.jsonl.gz", "wt", encoding="utf-8") as handle:
        handle.write("".join(json.dumps({"text": t}) + "\n" for t in texts[80:180] + [texts[5]]))
    for i, text in enumerate(texts[180:190] + [texts[5]]):
        (inp / "sub" / "deep" / f"t{i:02d}.txt").write_text(text, encoding="utf-8")
    pq.write_table(pa.table({"text": texts[190:330] + [texts[5]], "x": list(range(141))}), inp / "sub" / "f.parquet")
    write_jsonl(inp / "z" / "g.jsonl", [{"text": t} for t in texts[330:] + [texts[5], texts[100]]])
    return inp


def check_pairs_with_python_sets(result, memory, kind: str, n: int, threshold: float) -> None:
    """Every reported pair's Jaccard equals the one of Python sets, and reaches the threshold."""
    text_of = dict(zip(memory.ids.to_pylist(), memory.table[memory.text_field].to_pylist()))
    for a, b, jaccard in zip(*(result.pairs[c].to_pylist() for c in ("id_a", "id_b", "jaccard"))):
        sa, sb = set(oracle_shingles(text_of[a], kind, n)), set(oracle_shingles(text_of[b], kind, n))
        assert jaccard == pytest.approx(len(sa & sb) / len(sa | sb), abs=1e-12), (a, b)
        assert jaccard >= threshold


def assert_same_results(memory, staged) -> None:
    """Pairs, clusters, kept rows, report figures and skipped records all equal."""
    assert staged.pairs.equals(memory.pairs)
    assert staged.clusters.equals(memory.clusters)
    np.testing.assert_array_equal(staged.keep, memory.keep)
    for section in ("input", "results", "balance"):
        assert staged.report[section] == memory.report[section], section
    assert staged.skipped_records == memory.skipped_records


def assert_same_files(a: Path, b: Path, fmt: str = "jsonl") -> None:
    """Two output directories hold the same pairs, clusters and kept rows (byte for byte, but
    for Parquet's deduplicated rows, compared as tables)."""
    files_a, files_b = result_bytes(a), result_bytes(b)
    assert files_a.keys() == files_b.keys()
    for name, data in files_a.items():
        if fmt == "jsonl" or not name.startswith("deduplicated"):
            assert data == files_b[name], name
    if fmt == "parquet":
        assert read_kept(a).equals(read_kept(b))


def assert_same_written(memory, staged, root: Path) -> None:
    """Both results written in both formats give the same files."""
    for fmt in ("jsonl", "parquet"):
        memory.write(root / f"m-{fmt}", format=fmt)
        staged.write(root / f"s-{fmt}", format=fmt)
        assert_same_files(root / f"m-{fmt}", root / f"s-{fmt}", fmt)


def invoke(*args: str):
    """``gpudedup dedup ARGS --backend cpu -q`` in this process."""
    return CliRunner().invoke(app, ["dedup", *args, "--backend", "cpu", "-q"])


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    return mixed_corpus(tmp_path_factory.mktemp("mixed"))


# --- the staged run equals the in-memory run ----------------------------------------------------


def test_staged_run_of_the_sample_equals_the_in_memory_run(tmp_path):
    records = sample_records()
    # Odd documents: a null text, an empty one, copies of a text in different shards.
    records[5]["text"] = None
    records[6]["text"] = ""
    for i in (100, 900, 1500):
        records[i]["text"] = records[50]["text"]
    corpus = write_shards(tmp_path / "in", records, 5)
    (corpus / "part-empty.jsonl").write_text("")
    memory = gpudedup.dedup(corpus, backend="cpu", threshold=0.7)
    staged = gpudedup.dedup(corpus, backend="cpu", threshold=0.7, work_dir=tmp_path / "work", batch_bytes=20_000)
    assert_same_results(memory, staged)
    assert staged.report["results"]["identical_copies"] >= 3
    assert staged.deduplicated.equals(memory.deduplicated)
    assert_same_written(memory, staged, tmp_path)


@pytest.mark.parametrize("options", [dict(), dict(shingle="char", ngram=4, keep="longest", threshold=0.6)],
                         ids=["word-first", "char-longest"])
def test_mixed_inputs_equal_the_in_memory_run(mixed, tmp_path, options):
    memory = gpudedup.dedup(mixed, backend="cpu", **options)
    staged = gpudedup.dedup(mixed, backend="cpu", work_dir=tmp_path / "work", batch_bytes=3000, **options)
    assert_same_results(memory, staged)
    assert memory.report["results"]["identical_copies"] >= 4  # the copies in five shards
    check_pairs_with_python_sets(staged, memory, options.get("shingle", "word"), options.get("ngram", 5),
                                 options.get("threshold", 0.8))
    assert_same_written(memory, staged, tmp_path)


@pytest.mark.parametrize("kind", ["int", "str"])
def test_many_small_shards_with_id_field(tmp_path, kind):
    texts = make_texts(240, seed=3)
    for shard in range(40):  # 40 files of six documents, in two directory levels
        records = [{"id": i if kind == "int" else f"doc-{i}", "text": texts[i]}
                   for i in range(shard * 6, shard * 6 + 6)]
        write_jsonl(tmp_path / "in" / f"d{shard % 3}" / f"s{shard:02d}.jsonl", records)
    memory = gpudedup.dedup(tmp_path / "in", backend="cpu", id_field="id")
    staged = gpudedup.dedup(tmp_path / "in", backend="cpu", id_field="id", work_dir=tmp_path / "work")
    assert_same_results(memory, staged)
    assert staged.pairs.num_rows > 0
    assert pa.types.is_integer(staged.pairs["id_a"].type) == (kind == "int")
    check_pairs_with_python_sets(staged, memory, "word", 5, 0.8)


def test_skip_with_broken_files_equals_the_in_memory_run(tmp_path):
    texts = make_texts(300, seed=11)
    inp = tmp_path / "in"
    write_jsonl(inp / "a.jsonl", [{"text": t} for t in texts[:80]])
    with open(inp / "a.jsonl", "a", encoding="utf-8") as handle:
        handle.write("{broken\n" + json.dumps({"text": 5}) + "\n" + json.dumps({"text": texts[3]}) + "\n")
    data = gzip.compress("".join(json.dumps({"text": t}) + "\n" for t in texts[80:160]).encode())
    (inp / "b.jsonl.gz").write_bytes(data[: len(data) // 2])  # truncated
    (inp / "n").mkdir()
    (inp / "n" / "c.parquet").write_bytes(b"PAR1garbagePAR1")
    (inp / "n" / "d.txt").write_bytes(b"\xff\xfe not UTF-8")
    pq.write_table(pa.table({"text": texts[160:]}), inp / "n" / "e.parquet")
    write_jsonl(inp / "f.jsonl", [{"text": t} for t in texts[:40]])  # copies of a.jsonl
    memory = gpudedup.dedup(inp, backend="cpu", on_error="skip")
    staged = gpudedup.dedup(inp, backend="cpu", on_error="skip", work_dir=tmp_path / "work")
    assert len(staged.skipped_records) == 5
    assert_same_results(memory, staged)
    memory.write(tmp_path / "m", format="jsonl")
    staged.write(tmp_path / "s", format="jsonl")
    assert_same_files(tmp_path / "m", tmp_path / "s")
    assert (tmp_path / "m" / "errors.jsonl").read_bytes() == (tmp_path / "s" / "errors.jsonl").read_bytes()
    # Without on_error="skip", the first broken record stops the staged run, located.
    with pytest.raises(InputError, match=r"a\.jsonl:81"):
        gpudedup.dedup(inp, backend="cpu", work_dir=tmp_path / "work-stop")


def test_the_staged_run_reads_a_shard_at_a_time_and_spills_only_the_sets_it_checks(mixed, tmp_path, monkeypatch):
    """A staged run never holds the corpus, nor every document's shingle sets. As its stage
    events say (GPUDEDUP_STAGE_EVENTS), it reads, signs and spills each shard (a file here)
    before it reads the next, and never reads the input as one corpus; the exact checks take
    the sets of the documents of the pairs they check from WORK/sets/, spilled there shard by
    shard: a unit per shard that holds some of them, with their sets alone. (That the checks
    read those a chunk at a time is too little memory to count beside a shard's read.)"""
    events = tmp_path / "stages.txt"
    monkeypatch.setenv(STAGE_EVENTS_VARIABLE, str(events))
    work = tmp_path / "work"
    result = gpudedup.dedup(mixed, backend="cpu", work_dir=work, batch_bytes=600)
    result.write(tmp_path / "out")
    shards = len(list((work / "shards").iterdir()))
    assert shards == len(result.report["input"]["files"])  # (a file each)
    assert stages_begun(events) == ["read", "signature_pass", "spill"] * shards + [
        "copies", "candidates", "verify", "cluster", "write"]
    likely = pq.read_table(work / "pairs" / "likely")  # (the pairs checked: a Parquet dataset)
    checked = np.unique(np.concatenate([likely[side].to_numpy() for side in ("first", "second")]))
    spilled = [np.load(unit / "rows.npy") for unit in sorted(work.glob("sets/pairs-*/*"))]
    assert 1 < len(spilled) < shards
    assert sum(rows.shape[0] for rows in spilled) == checked.shape[0] < result.report["input"]["documents"] / 4


# --- what the in-memory run refuses or leaves out, the staged run must too ------------------------


def two_id_kinds(tmp_path: Path) -> Path:
    texts = make_texts(120, seed=5)
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"id": i, "text": t} for i, t in enumerate(texts[:60])])
    write_jsonl(tmp_path / "in" / "b.jsonl", [{"id": f"s{i}", "text": t} for i, t in enumerate(texts[60:])])
    return tmp_path / "in"


def test_repeated_ids_are_refused_like_the_in_memory_run_before_the_heavy_stages(tmp_path):
    texts = make_texts(60, seed=4)
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(texts[:30])])
    write_jsonl(tmp_path / "in" / "b.jsonl", [{"id": f"d{i + 29}", "text": t} for i, t in enumerate(texts[30:])])
    located = r"duplicate id 'd29': documents \S*a\.jsonl:30, \S*b\.jsonl:1 share it.*ids must be unique"
    with pytest.raises(InputError, match=located):
        gpudedup.dedup(tmp_path / "in", backend="cpu", id_field="id")
    with pytest.raises(InputError, match=located):
        gpudedup.dedup(tmp_path / "in", backend="cpu", id_field="id", work_dir=tmp_path / "work")
    assert not (tmp_path / "work" / "stages").exists()


def test_integer_and_string_ids_are_refused_like_the_in_memory_run(tmp_path):
    corpus = two_id_kinds(tmp_path)
    with pytest.raises(InputError):
        gpudedup.dedup(corpus, backend="cpu", id_field="id")
    with pytest.raises(InputError):
        gpudedup.dedup(corpus, backend="cpu", id_field="id", work_dir=tmp_path / "work")


def test_incompatible_columns_stop_the_staged_cli_with_one_line(tmp_path):
    texts = make_texts(120, seed=6)
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"extra": i, "text": t} for i, t in enumerate(texts[:60])])
    write_jsonl(tmp_path / "in" / "b.jsonl", [{"extra": f"s{i}", "text": t} for i, t in enumerate(texts[60:])])
    memory = invoke(str(tmp_path / "in"), "-o", str(tmp_path / "m"))
    assert memory.exit_code == 2 and "cannot be combined" in memory.output
    staged = invoke(str(tmp_path / "in"), "-o", str(tmp_path / "s"), "--work-dir", str(tmp_path / "work"))
    assert staged.exit_code == 2, staged.exception
    assert "cannot be combined" in staged.output and not (tmp_path / "s").exists()


def rules_corpus(tmp_path: Path) -> Path:
    """Files that the input rules must sort out under on_error="skip": b.jsonl's ids are
    strings where a.jsonl's are integers (left out whole), c.jsonl repeats the ids 55..59 of
    a.jsonl (those rows left out) around a malformed line, d.jsonl has a column of its own and
    near copies of a.jsonl, e.jsonl has a number for a text (its record left out)."""
    corpus = two_id_kinds(tmp_path)
    texts = make_texts(60, seed=8)
    write_jsonl(corpus / "c.jsonl", [{"id": i, "text": t} for i, t in zip(range(55, 95), texts)])
    lines = (corpus / "c.jsonl").read_text().splitlines(keepends=True)
    (corpus / "c.jsonl").write_text("".join(lines[:3] + ["not json\n"] + lines[3:]))
    first = [json.loads(line)["text"] for line in (corpus / "a.jsonl").read_text().splitlines()[:20]]
    write_jsonl(corpus / "d.jsonl", [{"id": 1000 + i, "text": t + " end", "extra": i} for i, t in enumerate(first)])
    (corpus / "e.jsonl").write_text('{"id": 2000, "text": 5}\n')
    return corpus


def empty_repeats_corpus(root: Path) -> Path:
    """One JSONL file whose only rows the input rules leave out (a repeated id, under
    on_error="skip") have empty texts: rows are left out, but no row with shingles is."""
    root.mkdir(parents=True, exist_ok=True)
    write_jsonl(root / "a.jsonl", [{"id": 0, "text": "a b c d e f g h"}, {"id": 1, "text": "a b c d e f g x"},
                                   {"id": 2, "text": ""}, {"id": 2, "text": ""}, {"id": 3, "text": "p q r s t u v w"}])
    return root


def test_rows_left_out_without_shingles_leave_every_active_row_in(tmp_path):
    """Found by a fuzz against the in-memory run: when every row the input rules leave out
    is empty, the staged run made its rows with shingles a 2-D array and failed."""
    corpus = empty_repeats_corpus(tmp_path / "in")
    options = dict(backend="cpu", threshold=0.5, ngram=2, id_field="id", on_error="skip")
    memory = gpudedup.dedup(corpus, **options)
    staged = gpudedup.dedup(corpus, **options, work_dir=tmp_path / "work")
    assert memory.pairs.num_rows == 1
    assert_same_results(memory, staged)


def captured_stores(monkeypatch) -> list:
    """The stores of the runs that follow, in order, captured as they finish signing (with a
    copy of their signatures as ``signed`` and band keys as ``keyed``, which a store in memory
    drops after the candidates)."""
    from gpudedup.pipeline.disk import WorkDirStore
    from gpudedup.pipeline.memory import MemoryStore

    stores: list = []
    for store_class in (MemoryStore, WorkDirStore):
        def sign(self, *args, _sign=store_class.sign, **kwargs):
            _sign(self, *args, **kwargs)
            # (the active documents' signatures and band keys)
            if isinstance(self, MemoryStore):
                self.signed, self.keyed = np.array(self.signatures), np.array(self.keys)
            else:
                keys = self.probe_keys()
                self.signed = np.array(self.signatures[np.asarray(self.active)])
                self.keyed = np.stack([keys[:, band] for band in range(keys.shape[1])], axis=1)
            stores.append(self)
        monkeypatch.setattr(store_class, "sign", sign)
    return stores


@pytest.mark.parametrize("seed", range(40))
def test_the_kept_rows_map_places_as_a_mask_does(seed):
    """kept.Kept, held as the places left out (the input rules'), against a bool mask over the
    spilled items and numpy's own indexing of it: kept items to places and back, counts and
    masks of any span."""
    from gpudedup.pipeline.kept import Kept

    rng = np.random.default_rng(seed)
    size = int(rng.integers(0, 60))
    mask = rng.random(size) < [1.0, 0.97, 0.5, 0.03, 0.0][seed % 5]
    kept = np.flatnonzero(mask)
    held = Kept.of_mask(mask)
    assert np.array_equal(held.spilled(np.arange(kept.shape[0])), kept)
    assert np.array_equal(held.kept_at(kept.astype(np.uint64)), np.arange(kept.shape[0]))
    for _ in range(10):
        start = int(rng.integers(0, size + 1))
        stop = int(rng.integers(start, size + 1))
        assert held.count(start, stop) == int(mask[start:stop].sum())
        assert np.array_equal(held.mask(start, stop), mask[start:stop])
    assert held.every == bool(mask.all())


@pytest.mark.parametrize("rules", [False, True])
def test_a_work_dirs_documents_gather_as_the_in_memory_arrays(tmp_path, monkeypatch, rules):
    """disk.ActiveDocuments, SpilledLengths, the signatures by row and the band keys of an
    index's probe (read from the shards when asked, each document row found in its shard by
    DocumentsAt) against the in-memory run's arrays: whole, by positions or rows in any order,
    by a bool mask, by a scalar; and out-of-range indices, negative ones and masks of another
    length are refused rather than read from the wrong place. rules: the input rules leave
    rows out."""
    records = sample_records()[:300]
    records[7]["text"] = "  "  # (a document without shingles)
    corpus = rules_corpus(tmp_path) if rules else write_shards(tmp_path / "in", records, 4)
    if rules:
        write_jsonl(corpus / "f.jsonl", [{"id": 3000, "text": ""}])
    options = dict(backend="cpu", id_field="id", on_error="skip")
    stores = captured_stores(monkeypatch)
    gpudedup.dedup(corpus, **options)
    gpudedup.dedup(corpus, **options, work_dir=tmp_path / "work", shard_bytes=20_000)
    memory, staged = stores
    active, lengths = staged.active, staged.lengths
    assert staged.shards.count > 1 and staged.rows.every != rules
    np.testing.assert_array_equal(np.asarray(active), memory.active)
    np.testing.assert_array_equal(np.asarray(lengths), memory.lengths)
    rng = np.random.default_rng(5)
    positions = rng.integers(0, memory.active.shape[0], 50)
    rows = rng.integers(0, memory.documents, 50)
    np.testing.assert_array_equal(active[positions], memory.active[positions])
    np.testing.assert_array_equal(lengths[rows], memory.lengths[rows])
    mask = rng.random(memory.active.shape[0]) < 0.3
    np.testing.assert_array_equal(active[mask], memory.active[mask])
    assert int(lengths[np.int64(rows[0])]) == memory.lengths[rows[0]]
    np.testing.assert_array_equal(staged.signature_rows(memory.active[positions]), memory.signed[positions])
    np.testing.assert_array_equal(staged.signed, memory.signed)
    np.testing.assert_array_equal(staged.keyed, memory.keyed)
    with pytest.raises(RuntimeError, match="no shingles"):
        staged.signature_rows(np.setdiff1d(np.arange(memory.documents), memory.active)[:1])
    for bad in (np.array([-1]), np.array([memory.documents]), np.ones(3, bool)):
        with pytest.raises(IndexError):
            lengths[bad]
    with pytest.raises(IndexError):
        active[slice(0, 2)]


def test_skip_leaves_out_what_the_in_memory_run_leaves_out(tmp_path):
    corpus = rules_corpus(tmp_path)
    memory = gpudedup.dedup(corpus, backend="cpu", id_field="id", on_error="skip")
    staged = gpudedup.dedup(corpus, backend="cpu", id_field="id", on_error="skip", work_dir=tmp_path / "work")
    assert_same_results(memory, staged)
    reasons = [record["reason"] for record in memory.skipped_records]
    assert sum(reason.startswith("duplicate id") for reason in reasons) == 5
    assert any("cannot be combined" in reason for reason in reasons) and len(reasons) == 8
    assert memory.report["results"]["clusters"] > 0  # d.jsonl's near copies
    for fmt in ("jsonl", "parquet"):
        memory.write(tmp_path / f"m-{fmt}", format=fmt)
        staged.write(tmp_path / f"s-{fmt}", format=fmt)
        assert_same_files(tmp_path / f"m-{fmt}", tmp_path / f"s-{fmt}", fmt)
        assert (tmp_path / f"m-{fmt}" / "errors.jsonl").read_bytes() == \
            (tmp_path / f"s-{fmt}" / "errors.jsonl").read_bytes()


def test_an_all_null_jsonl_shard_keeps_the_parquet_text_type(tmp_path):
    texts = make_texts(120, seed=9)
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"text": t} for t in texts])
    write_jsonl(tmp_path / "in" / "b.jsonl", [{"text": None}, {"text": None}])
    gpudedup.dedup(tmp_path / "in", backend="cpu").write(tmp_path / "m")
    gpudedup.dedup(tmp_path / "in", backend="cpu", work_dir=tmp_path / "work").write(tmp_path / "s")
    assert_same_files(tmp_path / "m", tmp_path / "s", "parquet")


# --- resume ---------------------------------------------------------------------------------------


def staged_run(corpus: Path, work: Path, out: Path, **options) -> Path:
    options.setdefault("batch_bytes", 3000)
    gpudedup.dedup(corpus, backend="cpu", work_dir=work, **options).write(out, format="jsonl")
    return out


def finished_work(corpus: Path, root: Path) -> Path:
    """``root`` holding a finished work directory of ``corpus`` (work/) and its outputs
    (reference/)."""
    staged_run(corpus, root / "work", root / "reference")
    assert len(list((root / "work" / "sets").glob("*/*"))) >= 4
    return root


@pytest.fixture(scope="module")
def finished(mixed, tmp_path_factory) -> Path:
    return finished_work(mixed, tmp_path_factory.mktemp("finished"))


def rm(path: Path) -> None:
    shutil.rmtree(path) if path.is_dir() else path.unlink()


MUTATIONS = {
    "no_pairs": lambda w: rm(w / "stages" / "pairs"),
    "no_candidates": lambda w: rm(w / "stages" / "candidates"),
    "no_copies": lambda w: rm(w / "stages" / "copies"),
    "no_stages": lambda w: rm(w / "stages"),
    "some_shards": lambda w: [rm(w / "shards" / f"{i:05d}") for i in (0, 4, 7)],
    "some_shards_and_stages": lambda w: [rm(p) for p in [w / "stages", w / "shards" / "00001", w / "shards" / "00009"]],
    "no_sets": lambda w: rm(w / "sets"),
    "no_sets_no_pairs": lambda w: [rm(w / "sets"), rm(w / "stages" / "pairs")],
    "half_sets_no_stages": lambda w: [rm(p) for p in sorted((w / "sets").glob("*/*"))[::2] + [w / "stages"]],
    "temporary_leftovers": lambda w: [(w / f"{TEMPORARY_PREFIX}half").mkdir(),
                                      (w / f"{TEMPORARY_PREFIX}half" / "keys.npy").write_bytes(b"x"),
                                      (w / f"{TEMPORARY_PREFIX}file").write_bytes(b"x"), rm(w / "stages" / "pairs")],
    "manifest_only": lambda w: [rm(p) for p in w.iterdir() if p.is_dir()],
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_resume_from_an_intermediate_state_gives_identical_output(mixed, finished, tmp_path, mutation):
    work = tmp_path / "work"
    shutil.copytree(finished / "work", work)
    MUTATIONS[mutation](work)
    staged_run(mixed, work, tmp_path / "out", resume=True)
    assert_same_files(tmp_path / "out", finished / "reference")
    assert not list(work.glob(".tmp-*"))


def finished_units(work: Path) -> dict[str, tuple[int, int]]:
    """Every file of the finished units of ``work`` a resume may reuse (the shards' spills, the
    stages, the parts of pairs and the spilled sets; not the clusters, made again by each run),
    by path: its inode and modification time (ns). A unit written again is written anew under
    another name and renamed into place: a file of another inode."""
    return {str(path.relative_to(work)): (path.stat().st_ino, path.stat().st_mtime_ns)
            for folder in ("shards", "stages", "pairs", "sets") for path in sorted((work / folder).rglob("*"))
            if path.is_file()}


def test_resume_reuses_every_finished_stage(tmp_path, monkeypatch):
    """A resume of a finished run signs nothing, checks no copies, finds no candidates and
    verifies no pair again, and gives the same results: it reads no input file (its stage
    events, GPUDEDUP_STAGE_EVENTS, hold no "read"), and writes none of the work directory's
    finished units again (every file of them the same file, unchanged)."""
    corpus = write_shards(tmp_path / "in", sample_records(), 4)
    first = gpudedup.dedup(corpus, backend="cpu", work_dir=tmp_path / "work")
    _ = first.pairs, first.clusters, first.keep  # (read now: a resume makes the clusters again)
    before = finished_units(tmp_path / "work")
    assert {path.split("/")[0] for path in before} == {"shards", "stages", "pairs", "sets"}
    events = tmp_path / "stages.txt"
    monkeypatch.setenv(STAGE_EVENTS_VARIABLE, str(events))
    again = gpudedup.dedup(corpus, backend="cpu", work_dir=tmp_path / "work", resume=True)
    assert_same_results(first, again)
    assert stages_begun(events) == ["copies", "candidates", "verify", "cluster"]
    assert finished_units(tmp_path / "work") == before


def test_resume_with_another_batch_size_is_accepted_and_identical(mixed, finished, tmp_path):
    """Batch sizes change how the work is cut, not its results: a resume may change them."""
    work = tmp_path / "work"
    shutil.copytree(finished / "work", work)
    rm(work / "stages")
    rm(work / "shards" / "00002")
    staged_run(mixed, work, tmp_path / "out", resume=True, batch_bytes=1 << 20)
    assert_same_files(tmp_path / "out", finished / "reference")


@pytest.mark.parametrize("change, message", [
    (dict(threshold=0.7), "threshold was 0.8, now 0.7"),
    (dict(shingle="char"), "shingle was 'word', now 'char'"),
    (dict(seed=1), "seed was 42, now 1"),
    (dict(text_field="x"), "text_field was 'text', now 'x'"),
    (dict(on_error="skip"), "on_error was 'stop', now 'skip'"),
    (dict(unicode="nfkc"), "unicode was None, now 'nfkc'"),
    (dict(strip_punctuation=True), "strip_punctuation was False, now True"),
    (dict(strip_symbols=True), "strip_symbols was False, now True"),
])
def test_resume_with_a_changed_parameter_is_refused_naming_it(mixed, finished, change, message):
    with pytest.raises(ParameterError, match=message):
        gpudedup.dedup(mixed, backend="cpu", work_dir=finished / "work", resume=True, **change)


def test_resume_after_an_input_was_touched_is_refused_naming_the_file(mixed, tmp_path):
    corpus = tmp_path / "in"
    shutil.copytree(mixed, corpus)
    gpudedup.dedup(corpus, backend="cpu", work_dir=tmp_path / "work")
    path = corpus / "sub" / "f.parquet"
    status = path.stat()
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns + 10**9))  # content unchanged
    with pytest.raises(ParameterError, match=r"input files differ: \S*f\.parquet changed"):
        gpudedup.dedup(corpus, backend="cpu", work_dir=tmp_path / "work", resume=True)


# --- the work directory -------------------------------------------------------------------------


def test_the_work_directory_belongs_to_one_run(tmp_path):
    corpus = write_shards(tmp_path / "in", sample_records()[:300], 2)
    work = tmp_path / "work"
    gpudedup.dedup(corpus, backend="cpu", work_dir=work)
    with pytest.raises(ParameterError, match="pass resume=True"):
        gpudedup.dedup(corpus, backend="cpu", work_dir=work)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ParameterError, match="not a gpudedup work directory"):
        gpudedup.dedup(corpus, backend="cpu", work_dir=tmp_path / "other")
    with pytest.raises(OutputError, match="work directory must not be"):
        gpudedup.dedup(corpus, backend="cpu", work_dir=corpus / "work")
    for cluster in ({}, {"workers": 2}):  # (refused before a cluster starts)
        with pytest.raises(ParameterError, match="resume=True needs work_dir="):
            gpudedup.dedup(corpus, backend="cpu", resume=True, **cluster)
    with pytest.raises(ParameterError, match="runs over files"):
        gpudedup.dedup(["a text", "another"], backend="cpu", work_dir=tmp_path / "w3")


def test_a_result_whose_work_directory_is_gone_says_so_and_writes_nothing(tmp_path):
    """A run with work_dir= leaves its clusters and pairs in the work directory, which its
    result reads: written after the directory is removed, it names the directory and what to do,
    and no output is left."""
    corpus = write_shards(tmp_path / "in", sample_records(), 2)
    work = tmp_path / "work"
    result = gpudedup.dedup(corpus, backend="cpu", work_dir=work)
    assert result.report.results.clusters > 0
    shutil.rmtree(work)
    with pytest.raises(OutputError, match="the work directory is gone.*write the result before removing it") as gone:
        result.write(tmp_path / "out")
    assert str(work) in str(gone.value)
    assert not (tmp_path / "out").exists()


def test_a_result_whose_work_directory_is_gone_or_reused_reads_none_of_another_runs_ids(tmp_path):
    """A staged result reads its ids, pairs and clusters in its work directory after the run:
    once the directory is removed each says so, and once another run has made it again the
    result does not answer with that run's ids."""
    corpus = write_shards(tmp_path / "in", sample_records(), 2)
    work = tmp_path / "work"
    result = gpudedup.dedup(corpus, backend="cpu", work_dir=work, id_field="id")
    shutil.rmtree(work)
    for read in (lambda: result.ids, lambda: result.pairs, result._repr_html_):
        with pytest.raises(OutputError, match="the work directory is gone.*write the result before removing it"):
            read()
    gpudedup.dedup(corpus, backend="cpu", work_dir=work, threshold=0.9)  # another run, ids file:line
    with pytest.raises(OutputError, match="the work directory holds another run now.*reads its ids there"):
        _ = result.ids


def test_a_resume_with_the_same_parameters_spelled_otherwise_writes_its_result(tmp_path):
    """The parameters decide whether a work directory is a run's, as values: a threshold of 1
    resumed as 1.0 (the same run) is accepted, and its result reads the work directory and
    writes the same files as the first run's."""
    corpus = write_shards(tmp_path / "in", sample_records(), 2)
    work = tmp_path / "work"
    gpudedup.dedup(corpus, backend="cpu", work_dir=work, threshold=1, output=tmp_path / "first")
    again = gpudedup.dedup(corpus, backend="cpu", work_dir=work, threshold=1.0, resume=True)
    again.write(tmp_path / "again")
    assert_same_files(tmp_path / "first", tmp_path / "again", "parquet")


def test_an_output_inside_the_work_directory_works_and_resumes(mixed, tmp_path):
    (tmp_path / "work").mkdir()
    first = invoke(str(mixed), "-o", str(tmp_path / "work" / "out"), "--work-dir", str(tmp_path / "work"))
    assert first.exit_code == 0, first.output
    again = invoke(str(mixed), "-o", str(tmp_path / "work" / "out2"), "--work-dir", str(tmp_path / "work"), "--resume")
    assert again.exit_code == 0, again.output
    assert_same_files(tmp_path / "work" / "out", tmp_path / "work" / "out2", "parquet")


def test_a_work_dir_equal_to_the_output_is_refused_before_any_work(mixed, tmp_path):
    result = invoke(str(mixed), "-o", str(tmp_path / "out"), "--work-dir", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert "the output directory must not be or hold the work directory" in result.output
    assert not (tmp_path / "out" / "shards").exists(), "the job ran before the refusal"


def test_overwrite_never_deletes_a_work_dir_inside_the_output(mixed, tmp_path):
    work = tmp_path / "out" / "work"
    first = invoke(str(mixed), "-o", str(tmp_path / "elsewhere"), "--work-dir", str(work))
    assert first.exit_code == 0, first.output
    result = invoke(str(mixed), "-o", str(tmp_path / "out"), "--work-dir", str(work), "--resume", "--overwrite")
    assert result.exit_code == 2
    assert "must not be or hold the work directory" in result.output
    assert (work / "manifest.json").is_file()


def test_a_work_dir_that_is_a_file_is_a_clear_error(mixed, tmp_path):
    (tmp_path / "afile").write_text("mine")
    with pytest.raises(GpudedupError, match="afile"):
        gpudedup.dedup(mixed, backend="cpu", work_dir=tmp_path / "afile")


def test_a_full_disk_in_the_work_directory_is_a_clear_error(mixed, tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "save", full)
    with pytest.raises(GpudedupError, match="resume"):
        gpudedup.dedup(mixed, backend="cpu", work_dir=tmp_path / "work")


# --- interrupted runs ---------------------------------------------------------------------------
#
# A run is signalled as a chosen stage starts (stage_events.py), never after a delay: the kill
# lands in that stage on a fast machine and on a slow one alike.


@pytest.fixture(scope="module")
def bible_shards(tmp_path_factory) -> Path:
    """The sample and copies of a third of it, in 12 shards."""
    records = sample_records()
    return write_shards(tmp_path_factory.mktemp("bible") / "in", records + [
        {**r, "id": f"again:{r['id']}"} for r in records[::3]], 12)


@pytest.mark.timeout(120)  # two CLI runs in subprocesses and a reference run
def test_a_resume_from_another_working_directory_is_refused_naming_the_first(bible_shards, tmp_path,
                                                                           monkeypatch):
    """Ids and messages name the input files relative to the working directory, so a resume
    from another one would mix two namings: refused, naming the directory to resume from,
    where it then goes on."""
    start = bible_shards.parent
    monkeypatch.chdir(start)
    first = gpudedup.dedup(bible_shards, backend="cpu", work_dir=tmp_path / "work")
    _ = first.pairs, first.clusters  # (read now: the resume below makes the clusters again)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ParameterError) as refused:
        gpudedup.dedup(bible_shards, backend="cpu", work_dir=tmp_path / "work", resume=True)
    assert f"was started from another working directory ({start})" in str(refused.value)
    monkeypatch.chdir(start)
    again = gpudedup.dedup(bible_shards, backend="cpu", work_dir=tmp_path / "work", resume=True)
    assert again.pairs.equals(first.pairs) and again.clusters.equals(first.clusters)


def test_sigint_during_a_staged_cli_run_then_resume(bible_shards, tmp_path, monkeypatch):
    options = ["--id-field", "id", "--backend", "cpu", "-q", "--batch-bytes", "20000", "--format", "jsonl"]
    events = tmp_path / "events.txt"
    run = cli_process(["dedup", str(bible_shards), "-o", str(tmp_path / "out"), "--work-dir", str(tmp_path / "work"),
                       *options], tmp_path, with_stage_events(events))
    wait_for_stage(run, events, "read", 5)  # four of the twelve shards are in the work directory
    run.send_signal(signal.SIGINT)
    stderr = finish(run)
    assert run.returncode == 130, stderr
    assert stderr.strip().splitlines() == ["interrupted: nothing was written"], stderr
    assert not (tmp_path / "out").exists()
    assert len(list((tmp_path / "work" / "shards").iterdir())) >= 4
    monkeypatch.chdir(tmp_path)  # the working directory the run started from
    resumed = CliRunner().invoke(app, ["dedup", str(bible_shards), "-o", str(tmp_path / "out"), "--work-dir",
                                       str(tmp_path / "work"), "--resume", *options])
    assert resumed.exit_code == 0, resumed.output
    reference = gpudedup.dedup(bible_shards, backend="cpu", id_field="id")
    reference.write(tmp_path / "reference", format="jsonl")
    assert_same_files(tmp_path / "out", tmp_path / "reference")


# Each kill comes as a stage starts that the runs before had not finished, so that every
# resumed run gets further: the signatures of the fourth shard, those of a later shard, then
# the candidates, the exact checks and the write. (Counts are of the stages that run begins:
# a resumed run skips the shards that are done.)
KILL_POINTS = [("signature_pass", 4), ("read", 5), ("candidates", 1), ("verify", 1), ("write", 1)]


@pytest.mark.timeout(300)  # seven CLI runs in subprocesses
def test_a_run_killed_in_chosen_stages_resumes_to_identical_output(tmp_path):
    records = sample_records()
    rng = random.Random(11)
    # 16 shards of the sample with edited copies, so that there is work in every stage.
    edited = []
    for copy in range(3):
        for record in records:
            words = (record["text"] or "").split()
            if words and copy:
                words[rng.randrange(len(words))] = "edited"
            edited.append({"id": f"{copy}:{record['id']}", "text": " ".join(words)})
    corpus = write_shards(tmp_path / "in", edited, 16)
    options = ["--id-field", "id", "--backend", "cpu", "-q", "--batch-bytes", "20000"]
    out, work = tmp_path / "out", tmp_path / "work"
    reference = cli_process(["dedup", str(corpus), "-o", str(tmp_path / "reference"), "--work-dir",
                             str(tmp_path / "work-reference"), *options], tmp_path)
    stderr = finish(reference)
    assert reference.returncode == 0, stderr
    killed = kill_then_resume(["dedup", str(corpus), "-o", str(out), "--work-dir", str(work), "--resume", *options],
                              tmp_path, tmp_path / "events", KILL_POINTS, out)
    # The kills come with most of a run still to do; only one that finished first is not counted.
    assert killed >= len(KILL_POINTS) - 1, f"{killed} of {len(KILL_POINTS)} runs were killed"
    assert result_bytes(out) == result_bytes(tmp_path / "reference")
    assert not list(work.glob(".tmp-*")), "temporary files left in the work directory"


def test_max_memory_is_checked_before_each_shard(tmp_path):
    from gpudedup.errors import MemoryLimitError

    corpus = write_shards(tmp_path / "in", sample_records(), 2)
    with pytest.raises(MemoryLimitError, match=r"max_memory=150 MiB: reading .*part-000.jsonl needs about"):
        gpudedup.dedup(corpus, backend="cpu", work_dir=tmp_path / "work", max_memory="150M")
    assert not (tmp_path / "work" / "shards").exists()
    enough = gpudedup.dedup(corpus, backend="cpu", work_dir=tmp_path / "work2", max_memory="4G")
    assert enough.report["balance"]["balanced"]


def test_staged_sets_asked_for_twice_under_one_name_are_each_requests_own(tmp_path):
    """Sets spilled under one name for different sets of rows (an index add's commit, asked
    again): each request's spill is its own, and the Jaccard values read from it are its own
    pairs' (Python sets), not values read from an earlier request's spill."""
    from gpudedup.pipeline.disk import ShardReader
    from gpudedup.pipeline.shards import spill_sets, spilled_jaccard
    from gpudedup.pipeline.protocols import LocalExecutor
    from gpudedup.pipeline.workdir import WorkDir
    from gpudedup.params import DedupParams
    from gpudedup.core.verify import BELOW_THRESHOLD
    from index_support import bible_records
    from oracles import jaccard, shingle_set

    records = bible_records()[:300]
    files = [write_jsonl(tmp_path / "a.jsonl", records[:150]), write_jsonl(tmp_path / "b.jsonl", records[150:])]
    work = WorkDir.attach(tmp_path / "work")
    reader = ShardReader(files, "text", None, "stop")
    shard_rows = np.array([0, 150, 300], dtype=np.int64)
    rng = np.random.default_rng(3)
    for _ in range(3):
        first = np.sort(rng.choice(300, 40, replace=False)).astype(np.int64)
        second = rng.choice(300, 40).astype(np.int64)
        second[:8] = first[:8]  # pairs with a Jaccard of 1, next to pairs of unrelated verses
        # A threshold this low keeps the Jaccard of every pair that shares a shingle.
        spill = spill_sets(work, "copies", reader, shard_rows, DedupParams(), "cpu",
                           np.unique(np.concatenate([first, second])), LocalExecutor())
        got = spilled_jaccard(work, spill, shard_rows, first, second, 1e-9, 1)
        expected = [jaccard(shingle_set(records[a]["text"]), shingle_set(records[b]["text"]))
                    for a, b in zip(first, second)]
        assert got.tolist() == [value if value > 0 else BELOW_THRESHOLD for value in expected]
        assert (got > 0).any()
