"""The ids of a staged run stay in its shards (pipeline/disk.py's ShardIds, ids.py) and are
checked without holding them (disk.repeated_shard_ids: hashes first, exact values only for
rows whose hashes collide). Oracles: Python's Counter for shared hashes, the in-memory run
(Arrow's dictionary encoding over every id) for the rules' decisions and messages."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import gpudedup
from gpudedup.pipeline.shardids import hash_sharing_rows
from gpudedup.errors import InputError
from test_api import write_jsonl
from test_streaming import assert_same_results, make_texts, rules_corpus


def test_rows_sharing_hash_are_those_whose_hash_repeats():
    rng = np.random.default_rng(4)
    for size, values in ((0, 1), (1, 1), (500, 40), (500, 5000), (2000, 3)):
        hashes = rng.integers(0, values, size).astype(np.uint64)
        rows = rng.permutation(size * 3)[:size].astype(np.int64)
        counts = Counter(hashes.tolist())
        expected = sorted(int(row) for row, value in zip(rows, hashes) if counts[int(value)] > 1)
        shared = hash_sharing_rows(pd.DataFrame({"hash": hashes, "row": rows}))
        assert sorted(shared["row"].tolist()) == expected


@pytest.mark.parametrize("collide", ["none", "every", "some"])
def test_hash_collisions_never_count_as_repeated_ids(tmp_path, monkeypatch, collide):
    """With the ids' hashes made to collide (all of them, or by threes), a staged run still
    leaves out exactly the repeated ids the in-memory run leaves out (skip) and stops with
    its message (stop): the colliding rows' ids are compared exactly."""
    corpus = rules_corpus(tmp_path)
    memory = gpudedup.dedup(corpus, backend="cpu", id_field="id", on_error="skip")
    hash_array = pd.util.hash_array
    if collide != "none":
        monkeypatch.setattr(pd.util, "hash_array", lambda values: np.zeros(len(values), np.uint64)
                            if collide == "every" else hash_array(values) % np.uint64(3))
    staged = gpudedup.dedup(corpus, backend="cpu", id_field="id", on_error="skip", work_dir=tmp_path / "work")
    assert_same_results(memory, staged)
    assert staged.skipped_records == memory.skipped_records
    assert sum(r["reason"].startswith("duplicate id") for r in staged.skipped_records) == 5


def repeated_id_files(folder: Path, later_id: Callable[[int], int]) -> list[Path]:
    """Two JSONL files of 20 documents each: a.jsonl with ids d0 .. d19, then b.jsonl whose
    i-th document has the id d<later_id(i)> (repeating ids of its own or of a.jsonl)."""
    texts = make_texts(40, seed=5)
    return [write_jsonl(folder / "a.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(texts[:20])]),
            write_jsonl(folder / "b.jsonl", [{"id": f"d{later_id(i)}", "text": t} for i, t in enumerate(texts[20:])])]


def test_a_repeated_id_stops_a_staged_run_as_in_memory_whatever_the_hashes(tmp_path, monkeypatch):
    """Under on_error="stop", every hash made the same: the first repeated id in input order
    and where it is used, as the in-memory run names them."""
    files = repeated_id_files(tmp_path / "in", lambda i: i % 7 + 25)
    with pytest.raises(InputError) as memory:
        gpudedup.dedup(files, backend="cpu", id_field="id")
    monkeypatch.setattr(pd.util, "hash_array", lambda values: np.zeros(len(values), np.uint64))
    with pytest.raises(InputError) as staged:
        gpudedup.dedup(files, backend="cpu", id_field="id", work_dir=tmp_path / "work")
    assert str(staged.value) == str(memory.value)
    assert str(memory.value).startswith("duplicate id 'd25': documents ")


def test_shard_ids_take_what_all_ids_hold(tmp_path):
    """ShardIds.take of any rows (any order, repeated) is every id's take, string ids wide,
    with rows the input rules left out (repeated ids, a file) not among the documents."""
    corpus = rules_corpus(tmp_path)
    staged = gpudedup.dedup(corpus, backend="cpu", id_field="id", on_error="skip", work_dir=tmp_path / "work")
    source = staged._id_source
    every = source.all()
    assert len(source) == len(every) == staged.report["input"]["documents"]
    assert every.equals(gpudedup.dedup(corpus, backend="cpu", id_field="id", on_error="skip").ids)
    rng = np.random.default_rng(2)
    rows = rng.integers(0, len(every), 300).astype(np.int64)
    assert source.take(rows).equals(every.take(pa.array(rows)))
    assert source.take(np.zeros(0, np.int64)).equals(pa.array([], every.type))
    texts = make_texts(10, seed=1)
    strings = gpudedup.dedup(write_jsonl(tmp_path / "s.jsonl", [{"text": t} for t in texts]), backend="cpu",
                             work_dir=tmp_path / "work-strings")
    taken = strings._id_source.take(np.array([3, 1, 3], np.int64))
    assert taken.type == pa.large_string()
    assert taken.to_pylist() == [strings.ids[3].as_py(), strings.ids[1].as_py(), strings.ids[3].as_py()]
