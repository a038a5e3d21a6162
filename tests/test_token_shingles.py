"""Token-id shingles (``--shingle token``, ``dedup(shingle="token")``) against independent oracles.

- shingle hashes: the tuples of n consecutive ids of a list (the whole list when shorter, none
  when empty or null), each hashed by the oracles' plain-Python poly_hash64 with the ids as the
  units (docs/hash-spec.md, "Token shingles"), for every Arrow integer width;
- whole runs: with full-recall banding, the verified pairs, their Jaccard, the clusters and the
  kept rows are those of brute-force all pairs over Python sets of tuples;
- the kernel backend on the host (numpy and cupy_like) bit for bit against the numpy backend;
- in memory, staged (``work_dir``) and Dask (two workers) give the same bytes, over JSONL and
  Parquet files of token ids of different widths, and keep every column;
- bad token columns through the CLI: one line naming the file and line/row, exit code 2, and
  ``--on-error skip`` leaving out exactly the bad records;
- ``evaluate`` over ``--shingle word,token``: a ground truth per shingle kind, each the oracle's.
"""

from __future__ import annotations

import json
import logging
import random
import re
import shutil
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpudedup
from gpudedup.io.python_inputs import list_corpus
from gpudedup.backends.kernel_backend import KernelBackend
from gpudedup.backends.numpy_backend import NumpyBackend
from gpudedup.pipeline.memory import dedup_corpus
from gpudedup.evaluate import Setting, TruthCache, evaluate
from gpudedup.core.hashing import draw_permutations
from gpudedup.core.content import unit_buffers
from gpudedup.io.read import read_corpus
from gpudedup.core.lsh import Banding
from gpudedup.params import DedupParams
from gpudedup.core.shingling import ShingleSpec, shingle_hashes

from cli_support import assert_user_error, invoke
from oracles import oracle_clusters, oracle_poly_hash64, shingle_set, similar_pairs
from test_streaming import assert_same_results, assert_same_written
from output_support import read_kept

TOKEN_MAX = 2**32 - 1  # the largest id: ids are hashed as 32-bit units
WIDTHS = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
# One row per band: a pair of Jaccard J >= 0.5 becomes a candidate with probability
# 1 - (1 - J)**64 > 1 - 1e-19, so a run must find exactly the brute-force pairs (test_copies.py).
FULL_RECALL = dict(num_perm=64, bands=64, rows=1, bucket_window=100_000)


# --- oracles -----------------------------------------------------------------------------------


def oracle_token_shingles(ids: Optional[Sequence[int]], n: int) -> list[tuple]:
    """The n-grams of a list of ids in order, repeats included: tuples of n consecutive ids; a
    non-empty list shorter than n has one, itself; an empty or null list none."""
    ids = list(ids or [])
    if not ids:
        return []
    if len(ids) < n:
        return [tuple(ids)]
    return [tuple(ids[i:i + n]) for i in range(len(ids) - n + 1)]


def oracle_token_hashes(ids: Optional[Sequence[int]], n: int) -> list[int]:
    """poly_hash64 of each n-gram, the ids being the 32-bit units."""
    return [oracle_poly_hash64(gram) for gram in oracle_token_shingles(ids, n)]


def token_set(ids: Optional[Sequence[int]], n: int) -> frozenset:
    return frozenset(oracle_token_shingles(ids, n))


def random_ids(rng: random.Random, count: int, low: int, high: int) -> list[Optional[list[int]]]:
    """Lists of ids in [low, high], with the ends, short, empty and null lists among them."""
    lists: list[Optional[list[int]]] = [[], None, [low], [high], [low, high], [high] * 7, [low] * 3]
    for _ in range(count):
        lists.append([rng.choice((low, high, rng.randint(low, high))) if rng.random() < 0.1 else rng.randint(low, high)
                      for _ in range(rng.choice((1, 2, 4, 5, 6, 30, 200)))])
    return lists


def planted_token_corpus(seed: int, vocabulary: int = 60) -> list[Optional[list[int]]]:
    """Bases of random ids and their near copies (one id substituted, one appended, the first
    dropped, two swapped), exact copies, short, empty and null lists, shuffled."""
    rng = random.Random(seed)
    docs: list[Optional[list[int]]] = []
    for _ in range(8):
        base = [rng.randrange(vocabulary) for _ in range(rng.randrange(6, 40))]
        docs.append(base)
        for _ in range(rng.randrange(1, 4)):
            near = list(base)
            edit = rng.randrange(4)
            if edit == 0:
                near[rng.randrange(len(near))] = rng.randrange(vocabulary)
            elif edit == 1:
                near.append(rng.randrange(vocabulary))
            elif edit == 2:
                near = near[1:]
            else:
                i = rng.randrange(len(near) - 1)
                near[i], near[i + 1] = near[i + 1], near[i]
            docs.append(near)
        if rng.random() < 0.5:
            docs.append(list(base))
    docs += [[1, 2], [1, 2], [2, 1], [], None, [TOKEN_MAX, 0, TOKEN_MAX, 0, TOKEN_MAX, 0]]
    rng.shuffle(docs)
    return docs


def oracle_keep(docs, truth, lengths=None) -> list[bool]:
    """The kept mask of keep="first" (the union-find oracle)."""
    found, _, kept = oracle_clusters(len(docs), truth, lengths or [0] * len(docs))
    keep = [True] * len(docs)
    for d, k in zip(found, kept):
        keep[d] = k
    return keep


def pair_dict(table: pa.Table) -> dict:
    return {(a, b): j for a, b, j in zip(*(table[c].to_pylist() for c in ("id_a", "id_b", "jaccard")))}


# --- shingle hashes ----------------------------------------------------------------------------


@pytest.mark.parametrize("width", WIDTHS, ids=str)
@pytest.mark.parametrize("n", [1, 3, 5])
def test_token_hashes_of_every_width_against_python(width, n):
    info = np.iinfo(width.to_pandas_dtype())
    # Negative ids are refused by the readers: only 0 .. the width's largest id, at most 2**32 - 1.
    lists = random_ids(random.Random(n), 60, 0, min(int(info.max), TOKEN_MAX))
    batch = shingle_hashes(pa.array(lists, pa.list_(width)), ShingleSpec("token", n))
    assert batch.hashes.dtype == np.uint64 and batch.offsets.dtype == np.int64
    for d, ids in enumerate(lists):
        got = batch.hashes[batch.offsets[d]:batch.offsets[d + 1]].tolist()
        assert got == oracle_token_hashes(ids, n), (d, ids)


def test_token_hashes_of_lists_and_large_lists():
    lists = random_ids(random.Random(3), 40, 0, TOKEN_MAX)
    spec = ShingleSpec("token", 4)
    expected = [oracle_token_hashes(ids, 4) for ids in lists]
    for data in (lists, [None if ids is None else np.asarray(ids, np.uint64) for ids in lists],
                 pa.array(lists, pa.large_list(pa.uint32()))):
        batch = shingle_hashes(data, spec)
        assert [batch.hashes[batch.offsets[d]:batch.offsets[d + 1]].tolist() for d in range(len(lists))] == expected


def test_a_token_ngram_hashes_as_the_char_ngram_of_those_code_points():
    # Letters and digits stay what they are under normalisation, and are no white space.
    alphabet = [ord(c) for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
    rng = random.Random(11)
    lists = [[rng.choice(alphabet) for _ in range(rng.randrange(1, 50))] for _ in range(80)]
    for n in (1, 2, 5, 9):
        tokens = shingle_hashes(lists, ShingleSpec("token", n))
        chars = shingle_hashes(["".join(map(chr, ids)) for ids in lists], ShingleSpec("char", n))
        np.testing.assert_array_equal(tokens.offsets, chars.offsets)
        np.testing.assert_array_equal(tokens.hashes, chars.hashes)


# --- whole runs against brute force ------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("threshold, n", [(0.5, 3), (0.8, 5), (0.7, 1)])
def test_runs_agree_with_brute_force_over_python_sets(seed, threshold, n):
    docs = planted_token_corpus(seed)
    sets = [token_set(ids, n) for ids in docs]
    truth = similar_pairs(sets, threshold)
    result = gpudedup.dedup(docs, shingle="token", ngram=n, threshold=threshold, backend="cpu", **FULL_RECALL)
    found = pair_dict(result.all_pairs())
    assert found.keys() == truth.keys()
    for pair, jaccard in found.items():
        assert jaccard == pytest.approx(truth[pair], abs=1e-12)
    assert result.keep.tolist() == oracle_keep(docs, truth)
    assert result.report["input"]["empty_documents"] == sum(not s for s in sets)
    assert result.report["input"]["null_texts"] == sum(ids is None for ids in docs)
    assert result.report["parameters"]["shingle"] == "token"
    assert len(truth) >= 8


def test_default_banding_verifies_exact_jaccard_and_finds_the_planted_pairs():
    docs = planted_token_corpus(9, vocabulary=5000)
    sets = [token_set(ids, 5) for ids in docs]
    truth = similar_pairs(sets, 0.8)
    result = gpudedup.dedup(docs, shingle="token", backend="cpu")
    found = pair_dict(result.all_pairs())
    assert set(found) <= set(truth)  # verification is exact
    for (a, b), jaccard in found.items():
        assert jaccard == pytest.approx(truth[(a, b)], abs=1e-12)
    assert len(found) >= 0.9 * len(truth) > 0


def test_tables_and_data_frames_of_token_ids():
    pandas = pytest.importorskip("pandas")
    docs = planted_token_corpus(2)
    reference = gpudedup.dedup(docs, shingle="token", ngram=3, backend="cpu", **FULL_RECALL)
    table = pa.table({"input_ids": pa.array(docs, pa.list_(pa.uint32())), "n": list(range(len(docs)))})
    frame = pandas.DataFrame({"input_ids": [None if d is None else np.asarray(d, np.int64) for d in docs],
                              "n": range(len(docs))})
    for data in (table, frame):
        result = gpudedup.dedup(data, shingle="token", ngram=3, backend="cpu", **FULL_RECALL)
        assert result.pairs.equals(reference.pairs)
        np.testing.assert_array_equal(result.keep, reference.keep)


# --- the kernel backend on the host ------------------------------------------------------------


def kernel_sides():
    if shutil.which("g++") is None:
        pytest.skip("needs g++ for the host build of the kernels")
    from cupy_like import cupy_like
    from kernel_host.host_kernels import HostKernels

    return [KernelBackend(xp, HostKernels(0), description="kernels on the host shim") for xp in (np, cupy_like)]


@pytest.mark.parametrize("n", [1, 5, 8])
def test_kernel_backend_token_hashes_signatures_and_band_keys_equal_numpy(n):
    lists = random_ids(random.Random(n), 120, 0, TOKEN_MAX) + [list(range(3000))]
    data, offsets = unit_buffers(pa.array(lists, pa.list_(pa.uint64())))
    spec = ShingleSpec("token", n)
    permutations = draw_permutations(96, seed=4)
    reference = NumpyBackend()
    expected = reference.shingle_hashes(data, offsets, spec)
    expected_signatures = reference.signatures(expected, permutations)
    banding = Banding(16, 6, "test")
    for backend in kernel_sides():
        ours = backend.shingle_hashes(data, offsets, spec)
        np.testing.assert_array_equal(backend.to_host(ours.offsets), expected.offsets)
        np.testing.assert_array_equal(backend.to_host(ours.hashes), expected.hashes)
        signatures = backend.signatures(ours, permutations)
        np.testing.assert_array_equal(backend.to_host(signatures), expected_signatures)
        np.testing.assert_array_equal(backend.to_host(backend.band_keys(signatures, banding)),
                                      reference.band_keys(expected_signatures, banding))


@pytest.mark.parametrize("n, threshold", [(3, 0.5), (5, 0.8)])
def test_kernel_backend_token_runs_equal_numpy(n, threshold):
    docs = [d for seed in range(6) for d in planted_token_corpus(seed, vocabulary=400)]
    corpus = list_corpus(docs, "input_ids")
    params = DedupParams(threshold=threshold, shingle="token", ngram=n, batch_bytes=2_000)
    reference = dedup_corpus(corpus, params, NumpyBackend())
    assert reference.pair_a.shape[0] > 20
    for backend in kernel_sides():
        ours = dedup_corpus(corpus, params, backend)
        for name in ("pair_a", "pair_b", "jaccard", "keep"):
            np.testing.assert_array_equal(getattr(ours, name), getattr(reference, name))
        np.testing.assert_array_equal(ours.clusters.cluster, reference.clusters.cluster)
        assert ours.report["results"] == reference.report["results"]


# --- in memory, staged and Dask over files -----------------------------------------------------


def file_records(count: int = 240, seed: int = 5) -> list[dict]:
    """Records with an id, a text, token ids (some near copies across files) and extra columns."""
    rng = random.Random(seed)
    records: list[dict] = []
    for i in range(count):
        if records and rng.random() < 0.35:
            ids = list(rng.choice([r for r in records if r["input_ids"]])["input_ids"])
            if rng.random() < 0.7:
                ids[rng.randrange(len(ids))] = rng.randrange(120)
        else:
            ids = [rng.randrange(120) for _ in range(rng.randrange(3, 40))]
        records.append({"id": f"d{i}", "text": f"text {i}", "input_ids": ids, "score": i / 2, "tag": f"t{i % 7}"})
    records[17]["input_ids"] = None
    records[18]["input_ids"] = []
    records[40]["input_ids"] = [0, 255, 0, 255, 1, 2, 3]  # fits uint8 (the widths below)
    return records


def write_token_files(root: Path, records: list[dict]) -> Path:
    """A JSONL file (ids read as int64) and Parquet files whose token column is uint8, uint16,
    int32 and large_list<uint64>."""
    root.mkdir(parents=True, exist_ok=True)
    parts = np.array_split(np.arange(len(records)), 5)
    (root / "a.jsonl").write_text("".join(json.dumps(records[i]) + "\n" for i in parts[0]), encoding="utf-8")
    for name, part, token_type in (("b.parquet", parts[1], pa.list_(pa.uint8())),
                                   ("c.parquet", parts[2], pa.list_(pa.uint16())),
                                   ("d.parquet", parts[3], pa.list_(pa.int32())),
                                   ("e.parquet", parts[4], pa.large_list(pa.uint64()))):
        rows = [records[i] for i in part]
        ids = [r["input_ids"] for r in rows]  # every id < 256: each width holds them
        table = pa.table({"id": [r["id"] for r in rows], "text": [r["text"] for r in rows],
                          "input_ids": pa.array(ids, token_type), "score": [r["score"] for r in rows],
                          "tag": [r["tag"] for r in rows]})
        pq.write_table(table, root / name)
    return root


@pytest.fixture(scope="module")
def token_files(tmp_path_factory) -> Path:
    return write_token_files(tmp_path_factory.mktemp("tokens") / "in", file_records())


@pytest.fixture(scope="module")
def memory_run(token_files):
    return gpudedup.dedup(token_files, shingle="token", ngram=3, threshold=0.6, id_field="id", backend="cpu")


def test_the_file_run_is_the_oracles(memory_run, token_files):
    corpus = read_corpus([token_files], "input_ids", "id")
    docs = corpus.table["input_ids"].to_pylist()
    sets = [token_set(ids, 3) for ids in docs]
    truth = similar_pairs(sets, 0.6)
    ids = corpus.ids.to_pylist()
    found = pair_dict(memory_run.all_pairs())
    for (a, b), jaccard in found.items():
        pair = tuple(sorted((ids.index(a), ids.index(b))))
        assert jaccard == pytest.approx(truth[pair], abs=1e-12)
    assert len(found) >= 0.95 * len(truth) and len(truth) > 30


def test_staged_run_equals_the_in_memory_run(memory_run, token_files, tmp_path):
    staged = gpudedup.dedup(token_files, shingle="token", ngram=3, threshold=0.6, id_field="id", backend="cpu",
                            work_dir=tmp_path / "work", batch_bytes=400)
    assert_same_results(memory_run, staged)
    assert_same_written(memory_run, staged, tmp_path)


def test_an_empty_file_beside_token_files_is_read_as_no_records(memory_run, token_files, tmp_path):
    """An empty JSONL file in the folder of token files: it has no records, and no columns that
    could clash with the token ids (a text column it never had); the run is the one without it,
    in memory and with a work directory."""
    shutil.copytree(token_files, tmp_path / "in")
    (tmp_path / "in" / "zz-empty.jsonl").write_bytes(b"")
    for options in ({}, {"work_dir": tmp_path / "work"}):
        run = gpudedup.dedup(tmp_path / "in", shingle="token", ngram=3, threshold=0.6, id_field="id", backend="cpu",
                             **options)
        assert run.pairs.equals(memory_run.pairs) and run.clusters.equals(memory_run.clusters)
        assert run.report["results"] == memory_run.report["results"]


def test_deduplicated_output_keeps_every_column(memory_run, token_files, tmp_path):
    memory_run.write(tmp_path / "out")
    kept = read_kept(tmp_path / "out")
    assert {"id", "text", "input_ids", "score", "tag"} <= set(kept.column_names)
    records = {r["id"]: r for r in file_records()}
    assert kept.num_rows == int(memory_run.keep.sum()) < len(records)
    for row in kept.to_pylist():
        original = records[row["id"]]
        assert (row["text"], row["score"], row["tag"]) == (original["text"], original["score"], original["tag"])
        assert row["input_ids"] == original["input_ids"]


@pytest.mark.timeout(180)  # starts a cluster of its own
def test_dask_run_equals_the_in_memory_run(memory_run, token_files, tmp_path):
    distributed = pytest.importorskip("distributed", reason="Dask is not installed (pip install 'gpudedup[dask]')")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=logging.ERROR) as cluster, distributed.Client(cluster) as client:
        spread = gpudedup.dedup(token_files, shingle="token", ngram=3, threshold=0.6, id_field="id", backend="cpu",
                                client=client, work_dir=tmp_path / "work", batch_bytes=400)
    assert spread.report["dask"]["workers"] == 2
    assert_same_results(memory_run, spread)
    assert_same_written(memory_run, spread, tmp_path)


# --- bad input through the CLI -----------------------------------------------------------------

GOOD = [{"id": i, "text": f"words of document {i}", "input_ids": list(range(20 * i, 20 * i + 12))}
        for i in range(5)]
EXPECTED_IDS = "expected a list of token ids (integers from 0 to 4294967295)"


def jsonl_with(root: Path, bad_value) -> Path:
    """GOOD with line 3 holding ``bad_value`` as its token ids."""
    records = [dict(r) for r in GOOD]
    records[2]["input_ids"] = bad_value
    path = root / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def parquet_with(root: Path, column: pa.Array) -> Path:
    path = root / "in.parquet"
    pq.write_table(pa.table({"id": list(range(len(column))), "text": [r["text"] for r in GOOD],
                             "input_ids": column}), path)
    return path


def run_tokens(path: Path, out: Path, *extra):
    return invoke("dedup", path, "-o", out, "--shingle", "token", "--ngram", "3", "--id-field", "id",
                  "--backend", "cpu", "-q", *extra)


JSONL_BAD = {
    "a null id": ([1, None, 3], ["in.jsonl:3", "null token id", EXPECTED_IDS]),
    "a negative id": ([1, -1, 3], ["in.jsonl:3", "token id -1, out of range", EXPECTED_IDS]),
    "2**32": ([1, 2**32, 3], ["in.jsonl:3", "token id 4294967296, out of range", EXPECTED_IDS]),
    "floats": ([1.5, 2.0], ["in.jsonl:3", "a number at position 0", "list of token ids"]),
    "strings in a list": (["a", "b"], ["in.jsonl:3", "a string at position 0", "list of token ids"]),
    "a string": ("hello", ["in.jsonl:3", "field 'input_ids' is a string", "one type"]),
    "a list of lists": ([[1], [2]], ["in.jsonl:3", "an array at position 0", "list of token ids"]),
}


@pytest.mark.parametrize("case", JSONL_BAD, ids=str)
def test_bad_token_ids_in_jsonl(case, tmp_path):
    value, fragments = JSONL_BAD[case]
    assert_refused_then_skipped(jsonl_with(tmp_path, value), fragments, tmp_path)


def assert_refused_then_skipped(path: Path, fragments: list, tmp_path: Path) -> None:
    """The bad record (the third) stops the run with one line, and --on-error skip leaves it
    out, recorded in errors.jsonl, keeping the others."""
    assert_user_error(run_tokens(path, tmp_path / "out"), *fragments, out=tmp_path / "out")
    result = run_tokens(path, tmp_path / "skip", "--on-error", "skip")
    assert result.exit_code == 0, result.output
    errors = [json.loads(line) for line in (tmp_path / "skip" / "errors.jsonl").read_text().splitlines()]
    assert [e["line"] for e in errors] == [3] and errors[0]["file"].endswith(path.name)
    kept = read_kept(tmp_path / "skip")
    assert sorted(kept["id"].to_pylist()) == [0, 1, 3, 4]


def uint_list(values, value_type: pa.DataType) -> pa.Array:
    """GOOD's token ids as a list<value_type> column, row 3 holding ``values``."""
    return pa.array([r["input_ids"] for r in GOOD[:2]] + [values] + [r["input_ids"] for r in GOOD[3:]],
                    pa.list_(value_type))


PARQUET_BAD = {
    "a null id": (lambda: uint_list([1, None, 3], pa.int32()), ["in.parquet: row 3", "null token id", EXPECTED_IDS]),
    "a negative int8 id": (lambda: uint_list([1, -1, 3], pa.int8()),
                           ["in.parquet: row 3", "token id -1, out of range", EXPECTED_IDS]),
    "2**32 as uint64": (lambda: uint_list([1, 2**32, 3], pa.uint64()),
                        ["in.parquet: row 3", "token id 4294967296", EXPECTED_IDS]),
    "2**32 as int64": (lambda: uint_list([1, 2**32, 3], pa.int64()), ["in.parquet: row 3", "4294967296"]),
}


@pytest.mark.parametrize("case", PARQUET_BAD, ids=str)
def test_bad_token_ids_in_parquet(case, tmp_path):
    column, fragments = PARQUET_BAD[case]
    assert_refused_then_skipped(parquet_with(tmp_path, column()), fragments, tmp_path)


@pytest.mark.parametrize("column, fragments", [
    (pa.array([r["text"] for r in GOOD]), ["in.parquet", "has type string", "token shingles need", "--token-field"]),
    (pa.array([[1.5]] * 5), ["in.parquet", "list<element: double>", "list of token ids"]),
    (pa.array([["a"]] * 5), ["in.parquet", "list<element: string>", "list of token ids"]),
], ids=["strings", "floats", "list of strings"])
def test_a_token_column_of_another_type(column, fragments, tmp_path):
    path = parquet_with(tmp_path, column)
    assert_user_error(run_tokens(path, tmp_path / "out"), *fragments, out=tmp_path / "out")


def test_a_missing_token_field(tmp_path):
    path = jsonl_with(tmp_path, [1, 2, 3])
    assert_user_error(run_tokens(path, tmp_path / "out", "--token-field", "tokens"),
                      "in.jsonl", "no field 'tokens'", "--token-field", out=tmp_path / "out")


def test_token_shingles_on_a_text_column_and_word_shingles_on_token_ids(tmp_path):
    path = jsonl_with(tmp_path, [1, 2, 3])
    assert_user_error(run_tokens(path, tmp_path / "out", "--token-field", "text"),
                      "in.jsonl", "field 'text' has type string", "token shingles need", out=tmp_path / "out")
    result = invoke("dedup", path, "-o", tmp_path / "out", "--shingle", "word", "--text-field", "input_ids",
                    "--backend", "cpu", "-q")
    assert_user_error(result, "in.jsonl", "field 'input_ids' holds token ids", "word shingles need text",
                      out=tmp_path / "out")


def test_text_options_are_refused_with_token_shingles(tmp_path):
    path = jsonl_with(tmp_path, [1, 2, 3])
    assert_user_error(run_tokens(path, tmp_path / "out", "--strip-punctuation"), "--strip-punctuation must be left out",
                      out=tmp_path / "out")


# --- evaluate: a ground truth per shingle kind --------------------------------------------------


def text_and_token_records(seed: int = 4) -> list[dict]:
    """Texts of words and their token ids from a toy tokenizer that splits words of a letter
    'q' into two tokens, so that word and token n-grams give different pairs."""
    rng = random.Random(seed)
    words = [f"{rng.choice('abcq')}{i}" for i in range(80)]
    vocabulary: dict[str, int] = {}

    def tokens(text: str) -> list[int]:
        out: list[int] = []
        for word in text.split():
            pieces = [word[:1], word[1:]] if word.startswith("q") else [word]
            out += [vocabulary.setdefault(p, len(vocabulary)) for p in pieces]
        return out

    texts: list[str] = []
    for _ in range(40):
        if texts and rng.random() < 0.5:
            picked = rng.choice(texts).split()
            picked[rng.randrange(len(picked))] = rng.choice(words)
            texts.append(" ".join(picked))
        else:
            texts.append(" ".join(rng.choice(words) for _ in range(rng.randrange(8, 25))))
    return [{"id": i, "text": t, "input_ids": tokens(t)} for i, t in enumerate(texts)]


def test_evaluate_scores_word_and_token_shingles_against_their_own_truth(tmp_path):
    records = text_and_token_records()
    path = tmp_path / "sample.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    result = invoke("evaluate", path, "-o", tmp_path / "eval", "--shingle", "word,token", "--ngram", "3",
                    "--threshold", "0.5", "--num-perm", "64", "--bands", "64", "--rows", "1", "--id-field", "id",
                    "--backend", "cpu", "-q")
    assert result.exit_code == 0, result.output
    evaluation = json.loads((tmp_path / "eval" / "evaluation.json").read_text())
    word_truth = similar_pairs([shingle_set(r["text"], "word", 3) for r in records], 0.5)
    token_truth = similar_pairs([token_set(r["input_ids"], 3) for r in records], 0.5)
    assert word_truth != token_truth and word_truth and token_truth
    truths = {t["shingle"]: t["pairs"] for t in evaluation["ground_truth"]}
    assert truths == {"word": len(word_truth), "token": len(token_truth)}
    by_kind = {r["setting"]["shingle"]: r for r in evaluation["results"]}
    for kind, truth in (("word", word_truth), ("token", token_truth)):
        assert by_kind[kind]["true_pairs"] == len(truth)
        assert by_kind[kind]["verified_pairs"] == len(truth)  # full-recall banding: every true pair
        assert by_kind[kind]["verified_recall"] == 1.0


def test_truth_cache_reads_the_token_field(tmp_path):
    records = text_and_token_records(seed=8)
    path = tmp_path / "sample.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    corpus = read_corpus([path], "text", "id")
    cache = TruthCache(corpus, token_field="input_ids")
    truth = cache.get(ShingleSpec("token", 2), 0.4)
    expected = similar_pairs([token_set(r["input_ids"], 2) for r in records], 0.4)
    assert list(zip(truth.doc_a.tolist(), truth.doc_b.tolist())) == sorted(expected)
    scored = evaluate(corpus, [Setting(64, 64, 1, "token", 2, 0.4)], backend="cpu", token_field="input_ids",
                      warmup=False, truth_cache=cache)
    assert scored.results[0].verified_recall == 1.0 and scored.results[0].true_pairs == len(expected)


def test_evaluate_refuses_a_bad_token_id_in_the_other_column(tmp_path):
    records = text_and_token_records()
    records[4]["input_ids"] = [3, -1, 4]
    path = tmp_path / "sample.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    result = invoke("evaluate", path, "-o", tmp_path / "eval", "--shingle", "word,token", "--id-field", "id",
                    "--backend", "cpu", "-q")
    assert_user_error(result, "sample.jsonl:5", "token id -1, out of range", out=tmp_path / "eval")


def test_evaluate_names_the_files_of_a_token_column_that_is_missing_or_no_token_ids(tmp_path):
    """A grid of word and token shingles reads the token column beside the text: where no file
    has it, or it holds no token ids, the refusal names the files, as the reader's do."""
    records = text_and_token_records()
    (tmp_path / "in").mkdir()
    for name, rows in (("a.jsonl", records[:3]), ("b.jsonl", records[3:])):
        (tmp_path / "in" / name).write_text("".join(json.dumps({**r, "input_ids": " ".join(map(str, r["input_ids"]))})
                                                    + "\n" for r in rows), encoding="utf-8")
    for options, words in ((["--token-field", "absent"], "no field 'absent' for token shingles"),
                           ([], "field 'input_ids' has type string, but token shingles need")):
        result = invoke("evaluate", tmp_path / "in", "-o", tmp_path / "eval", "--shingle", "word,token",
                        "--id-field", "id", "--backend", "cpu", "-q", *options)
        assert_user_error(result, f"{tmp_path / 'in' / 'a.jsonl'} (and 1 more file): {words}", out=tmp_path / "eval")


@pytest.mark.parametrize("options, named", [({"shingle": "token", "text_field": "body"}, "text_field='body'"),
                                            ({"shingle": "word", "token_field": "ids"}, "token_field='ids'"),
                                            ({"shingle": "char", "token_field": "ids"}, "token_field='ids'")])
def test_the_content_field_a_shingle_kind_does_not_read_is_refused(options, named):
    """A text field named for token shingles, or a token field for word or char shingles, would
    be read by nothing: refused, naming it (the field each kind reads by default is not)."""
    from gpudedup.errors import ParameterError

    with pytest.raises(ParameterError, match=f"^{re.escape(named)} names "):
        gpudedup.dedup([[1, 2, 3, 4, 5, 6]] if options["shingle"] == "token" else ["a b c d e f"], backend="cpu",
                       **options)
    kept = gpudedup.dedup([[1, 2, 3, 4, 5, 6]], backend="cpu", shingle="token", text_field="text")
    assert kept.documents == 1

