"""The persistent index (gpudedup/index/, issue 14) against independent oracles: the batch run,
Python sets, brute force. Faults and concurrency: tests/test_index_faults.py.

Semantics (issue 14, point 2): adding new data is the batch job over (the indexed documents,
then the new data) with keep "first", except that an indexed document is never removed. So the
new documents an add keeps are exactly those ``gpudedup.dedup`` keeps over (every document the
index holds, in index order, then the new ones) -- not over every earlier part: a new document
near only an earlier document that an earlier add removed is kept (that document is not in the
index).
"""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpudedup
from gpudedup.index import Index
from gpudedup.errors import DamagedIndexError, InputError

from cli_support import assert_user_error, invoke, tree_snapshot, write_jsonl
from index_support import assert_only_committed, bible_records, committed_state
from oracles import is_similar, jaccard, shingle_set
from output_support import read_kept, read_pairs, result_tables

THRESHOLD = 0.8


def token_ids(text: str, vocabulary: dict[str, int]) -> list[int]:
    """Word ids of a text (a toy tokenizer: each distinct lower-cased word one id)."""
    return [vocabulary.setdefault(word, len(vocabulary)) for word in text.lower().split()]


def token_shingle_set(ids: list[int], n: int) -> frozenset:
    """Token n-grams as tuples of ids (a list shorter than n: one shingle, itself)."""
    if not ids:
        return frozenset()
    if len(ids) < n:
        return frozenset([tuple(ids)])
    return frozenset(tuple(ids[i:i + n]) for i in range(len(ids) - n + 1))


CASES = {
    # name: (shingle, ngram, records used, parts)
    "word": ("word", 5, None, 3),
    "char": ("char", 7, 600, 2),
    "token": ("token", 4, 900, 3),
}


def case_records(name: str) -> list[dict]:
    shingle, _, count, _ = CASES[name]
    records = bible_records()
    # Every translation's chapter next to the others': chapters of one book in several
    # translations, so that parts share near-duplicates at many similarities.
    records.sort(key=lambda r: (r["book"], r["chapter"], r["id"]))
    records = records[:count] if count else records
    if shingle == "token":
        vocabulary: dict[str, int] = {}
        for record in records:
            record["input_ids"] = token_ids(record["text"], vocabulary)
    return [{k: r[k] for k in ("id", "text", "input_ids") if k in r} for r in records]


def oracle_set(record: dict, shingle: str, ngram: int) -> frozenset:
    if shingle == "token":
        return token_shingle_set(record["input_ids"], ngram)
    return shingle_set(record["text"], shingle, ngram)


def keyed_pairs(table: pa.Table) -> dict[tuple, float]:
    return {(a, b): j for a, b, j in zip(table["id_a"].to_pylist(), table["id_b"].to_pylist(),
                                         table["jaccard"].to_pylist())}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", list(CASES))
def test_add_keeps_what_the_batch_run_over_indexed_then_new_keeps(name, tmp_path):
    shingle, ngram, _, parts = CASES[name]
    records = case_records(name)
    by_id = {r["id"]: r for r in records}
    # Round-robin parts: each part holds other translations of the chapters of the others.
    chunks = [records[i::parts] for i in range(parts)]
    index = Index.create(tmp_path / "index", threshold=THRESHOLD, shingle=shingle, ngram=ngram)
    indexed: list[dict] = []  # what the index holds, in index order
    options = dict(id_field="id", threshold=THRESHOLD, shingle=shingle, ngram=ngram, keep="first")
    found_old_pairs = 0
    for number, chunk in enumerate(chunks):
        table = pa.Table.from_pylist(chunk)
        # dedup against the index first: the same result, nothing changed.
        before = committed_state(index.path)
        dry = index.dedup(table, id_field="id")
        assert committed_state(index.path) == before
        result = index.add(table, id_field="id", tag=f"part{number}")
        assert np.array_equal(dry.keep, result.keep)
        assert dry.pairs.equals(result.pairs) and dry.clusters.equals(result.clusters)

        batch = gpudedup.dedup(pa.Table.from_pylist(indexed + chunk), **options)
        k = len(indexed)
        assert np.array_equal(result.keep, batch.keep[k:]), f"part {number}"
        # Pairs: every batch pair that involves a new document, by id, with the same Jaccard;
        # each one's Jaccard is the Python sets' (pairs between indexed documents: none).
        old_ids = {r["id"] for r in indexed}
        new_ids = {r["id"] for r in chunk}
        mine = keyed_pairs(result.pairs)
        expected = {key: j for key, j in keyed_pairs(batch.pairs).items() if not set(key) <= old_ids}
        assert mine == expected, f"part {number}"
        for (a, b), value in mine.items():
            assert {a, b} <= old_ids | new_ids and not {a, b} <= old_ids
            sets = oracle_set(by_id[a], shingle, ngram), oracle_set(by_id[b], shingle, ngram)
            assert value == jaccard(*sets) and is_similar(*sets, THRESHOLD), (a, b)
            found_old_pairs += bool({a, b} & old_ids)
        # Clusters: one holding an indexed document keeps every indexed one and removes its
        # new ones (kept_id: an indexed one); one of new documents alone keeps its first.
        clusters = result.clusters.to_pylist()
        position = {r["id"]: i for i, r in enumerate(chunk)}
        for cluster in {row["cluster"] for row in clusters}:
            members = [row for row in clusters if row["cluster"] == cluster]
            old = [row for row in members if row["id"] in old_ids]
            new = [row for row in members if row["id"] in new_ids]
            assert len(old) + len(new) == len(members)
            if old:
                assert all(row["keep"] for row in old)
                assert not any(row["keep"] for row in new)
                assert all(row["kept_id"] in {o["id"] for o in old} for row in new)
            else:
                first = min(new, key=lambda row: position[row["id"]])
                assert [row["id"] for row in new if row["keep"]] == [first["id"]]
        for row in clusters:
            if row["id"] in new_ids:
                assert result.keep[position[row["id"]]] == row["keep"]
        indexed += [r for r, kept in zip(chunk, result.keep) if kept]
        assert index.info()["documents"] == len(indexed)
    assert found_old_pairs > 0, "no new document matched an indexed one: the test proves nothing"


# --- query against brute force over Python sets ---------------------------------------------------

# Query index: threshold 0.5 with 64 bands of 2 rows. A pair at Jaccard s collides in a band
# with probability s**2, so one at s >= 0.5 is missed with probability at most
# (1 - 0.25)**64 < 1e-7: over the few hundred matches here, never in practice (and the seed is
# fixed, so the test is deterministic). Brute force over every indexed document is the oracle.
QUERY_THRESHOLD = 0.5


@pytest.fixture(scope="module")
def query_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("query") / "index"
    records = case_records("word")[:700]
    index = Index.create(root, threshold=QUERY_THRESHOLD, shingle="word", ngram=5, bands=64, rows=2)
    first = index.add(pa.Table.from_pylist(records[0::2]), id_field="id", tag="even")
    second = index.add(pa.Table.from_pylist(records[1::2]), id_field="id", tag="odd")
    kept = [r for r, k in zip(records[0::2], first.keep) if k] + [r for r, k in zip(records[1::2], second.keep) if k]
    return index, kept


def near_copy(text: str, rng: random.Random, changes: int) -> str:
    words = text.split()
    for _ in range(changes):
        words[rng.randrange(len(words))] = rng.choice(["zebra", "quartz", "nimbus", "otter"])
    return " ".join(words)


SETS: dict[str, frozenset] = {}  # text -> its word 5-gram set (the oracle's), made once


def text_set(text: str) -> frozenset:
    if text not in SETS:
        SETS[text] = shingle_set(text, "word", 5)
    return SETS[text]


def brute_force(query: str, indexed: list[dict], threshold: float) -> dict:
    """Every indexed document whose Jaccard with the query reaches the threshold: id -> Jaccard."""
    mine = text_set(query)
    found = {}
    for record in indexed:
        other = text_set(record["text"])
        if is_similar(mine, other, threshold):
            found[record["id"]] = jaccard(mine, other)
    return found


def query_texts(indexed: list[dict], seed: int) -> list[str]:
    rng = random.Random(seed)
    picked = rng.sample(indexed, 20)
    texts = [near_copy(r["text"], rng, rng.choice([1, 3, 10, 40])) for r in picked]
    texts += [" ".join(rng.choice(["alpha", "beta", "gamma", "delta", "epsilon"]) for _ in range(60))
              for _ in range(4)]
    texts += [picked[0]["text"], picked[0]["text"], "a", ""]  # an indexed text twice, short and empty ones
    return texts


def assert_matches(got: list, expected: dict) -> None:
    assert {i: j for i, j in got} == expected
    assert [j for _, j in got] == sorted((j for _, j in got), reverse=True)


def test_query_finds_exactly_the_indexed_documents_at_the_threshold(query_index):
    index, indexed = query_index
    texts = query_texts(indexed, seed=1)
    before = committed_state(index.path)
    answers = index.query(texts)
    assert committed_state(index.path) == before
    assert len(answers) == len(texts)
    some = 0
    for text, got in zip(texts, answers):
        expected = brute_force(text, indexed, QUERY_THRESHOLD)
        assert_matches(got, expected)
        some += len(expected)
    assert some >= len(texts) // 2


@pytest.mark.parametrize("seed, adds", [(None, 1), (7, 2)])
def test_an_index_object_answers_for_the_index_now_at_its_path(tmp_path, seed, adds):
    """An Index kept (a notebook's, a service's) while its index is made again at the path:
    deleted, or restored from a backup, reaching the generation it had read (one add), or
    another with other permutations (another seed, two adds). It answers as a new Index
    over the path does, never from the index it read before."""
    a = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu"
    b = "one two three four five six seven eight nine ten eleven twelve"
    kept = Index.create(tmp_path / "idx", threshold=0.8, ngram=3)
    kept.add(pa.table({"id": ["a"], "text": [a]}), id_field="id", backend="cpu")
    assert kept.query([a, b], backend="cpu") == [[("a", 1.0)], []]
    shutil.rmtree(tmp_path / "idx")
    made = Index.create(tmp_path / "idx", threshold=0.8, ngram=3, **({} if seed is None else {"seed": seed}))
    made.add(pa.table({"id": ["b"], "text": [b]}), id_field="id", backend="cpu")
    if adds == 2:
        made.add(pa.table({"id": ["c"], "text": ["x y z w v u t s r q p o"]}), id_field="id", backend="cpu")
    expected = [[], [("b", 1.0)]]
    assert Index(tmp_path / "idx").query([a, b], backend="cpu") == expected
    assert kept.query([a, b], backend="cpu") == expected
    result = kept.dedup(pa.table({"id": ["q1", "q2"], "text": [a, b]}), id_field="id", backend="cpu")
    assert result.deduplicated["id"].to_pylist() == ["q1"]


def test_queries_of_the_other_kind_than_the_index_cuts_are_refused(query_index, tmp_path):
    """A word index's queries are texts, a token index's lists of token ids: the other kind is
    refused in the index's words."""
    index, _ = query_index
    with pytest.raises(gpudedup.InputError, match=r"^the index cuts word shingles: its queries are texts, and these "
                                                  r"are token ids$"):
        index.query([[1, 2, 3, 4, 5]])
    tokens = Index.create(tmp_path / "tokens", shingle="token", ngram=3)
    with pytest.raises(gpudedup.InputError, match=r"^the index cuts token shingles: its queries are lists of token "
                                                  r"ids, and these are texts$"):
        tokens.query(["one two three four"])
    assert tokens.query([[1, 2, 3, 4]]) == [[]]


def test_a_query_takes_the_bucket_window_over_the_whole_index(tmp_path):
    """A query takes, per band key, the last bucket_window live documents of the whole index
    (segment order, then row), not of each segment: its answers are the same over three
    segments with removed documents, after compact, and from an index of those documents
    added at once."""
    rng = random.Random(3)
    base = [f"w{rng.randrange(100000)}" for _ in range(40)]

    def variant(name: str, changes: int) -> str:
        words = list(base)
        for place in rng.sample(range(40), changes):
            words[place] = f"v{name}_{place}"
        return " ".join(words)

    params = dict(threshold=0.5, shingle="word", ngram=1, bands=32, rows=1, bucket_window=3)
    batches = [[(f"s{s}_{k}", variant(f"{s}_{k}", 12)) for k in range(8)] for s in range(3)]
    queries = [variant(f"q{k}", 1) for k in range(10)] + [text for batch in batches for _, text in batch][:10]
    removed = [i for i, _ in batches[2][:3]] + [i for i, _ in batches[0][5:]]

    def made(path: Path, adds: list) -> Index:
        index = Index.create(path, **params)
        for batch in adds:
            index.add(pa.table({"id": [i for i, _ in batch], "text": [t for _, t in batch]}), id_field="id",
                      backend="cpu")
        return index

    spread = made(tmp_path / "spread", batches)
    assert spread.remove(ids=removed) == len(removed)
    answers = spread.query(queries, backend="cpu")
    assert sum(map(len, answers)) > 0
    spread.compact()
    assert spread.query(queries, backend="cpu") == answers
    live = [(i, t) for batch in batches for i, t in batch if i not in removed]
    assert made(tmp_path / "whole", [live]).query(queries, backend="cpu") == answers


def test_a_run_takes_the_bucket_window_over_the_whole_index(tmp_path):
    """A run against the index probes, per band key, the last bucket_window live documents of
    the whole index, as a query does: with buckets far over the window, its kept rows and pairs
    are the same over four segments, after compact, and through a work directory."""
    rng = random.Random(3)
    vocabulary = [f"w{i}" for i in range(10)]

    def texts(count: int) -> list[str]:
        return [" ".join(rng.sample(vocabulary, rng.randint(4, 7))) for _ in range(count)]

    index = Index.create(tmp_path / "idx", threshold=0.6, ngram=1, bucket_window=1, bands=6, rows=1)
    for segment in range(4):
        index.add(pa.table({"id": [f"s{segment}_{k}" for k in range(30)], "text": texts(30)}), id_field="id",
                  backend="cpu")
    new = tmp_path / "new.parquet"
    pq.write_table(pa.table({"id": [f"n{k}" for k in range(60)], "text": texts(60)}), new)

    def run(**staged) -> tuple:
        result = index.dedup(new, id_field="id", backend="cpu", **staged)
        return result.keep.tolist(), result.pairs.to_pylist()

    spread = run()
    assert spread[1] and run(work_dir=tmp_path / "work") == spread
    index.compact()
    assert index.info()["segments"] == 1 and run() == spread


def test_remove_and_compact(query_index, tmp_path):
    source, indexed = query_index
    shutil.copytree(source.path, tmp_path / "index")
    index = Index(tmp_path / "index")
    texts = query_texts(indexed, seed=2)
    info = index.info()
    assert info["documents"] == len(indexed) and info["segments"] == 2

    # Removing what is not there: 0, nothing changed; the name info() gives the untagged, and
    # an empty name, are no tags (to add or to remove by).
    before = committed_state(index.path)
    for name in ("", "(untagged)"):
        with pytest.raises(gpudedup.ParameterError,
                           match="is not a tag: the index's info counts the documents added without"):
            index.remove(tag=name)
        with pytest.raises(gpudedup.ParameterError, match="is not a tag"):
            index.add(pa.Table.from_pylist([{"id": "t", "text": "a b c d e f"}]), id_field="id", tag=name)
    assert index.remove(tag="no such tag") == 0
    assert index.remove(ids=["no such id", "nor this"]) == 0
    assert committed_state(index.path) == before

    odd = [r for r in indexed if r["id"] in set(index_ids_of_tag(index, "odd"))]
    gone = [r["id"] for r in indexed[:7]]  # even-tagged ones
    assert index.remove(ids=gone) == 7
    assert index.remove(ids=gone[:3]) == 0  # already removed: nothing changes
    assert index.remove(tag="odd") == len(odd)
    left = [r for r in indexed if r["id"] not in set(gone) and r not in odd]
    info = index.info()
    assert info["documents"] == len(left) and info["removed_not_compacted"] == 7 + len(odd)
    assert info["tags"] == {"even": len(left)}
    answers = index.query(texts)
    for text, got in zip(texts, answers):
        assert_matches(got, brute_force(text, left, QUERY_THRESHOLD))
    # A removed document's id may be added again; a new near-copy of a removed one is kept.
    probe = pa.Table.from_pylist([{"id": gone[0], "text": indexed[0]["text"]}])
    assert index.dedup(probe, id_field="id").keep.all()

    some = pa.Table.from_pylist([{"id": f"q{i}", "text": t} for i, t in enumerate(texts[:10])])
    dry = index.dedup(some, id_field="id")
    index.compact()
    info = index.info()
    assert info["segments"] == 1 and info["documents"] == len(left) and info["removed_not_compacted"] == 0
    assert json.loads((index.path / "manifest.json").read_text())["tombstones"] is None
    assert_only_committed(index.path)
    for text, got in zip(texts, index.query(texts)):
        assert_matches(got, brute_force(text, left, QUERY_THRESHOLD))
    again = index.dedup(some, id_field="id")
    assert np.array_equal(dry.keep, again.keep) and dry.pairs.equals(again.pairs)
    before = committed_state(index.path)
    index.compact()  # one segment, no tombstones: nothing to do
    assert committed_state(index.path) == before


def index_ids_of_tag(index: Index, tag: str) -> list:
    """The ids of a tag, read from the segment files with pyarrow alone."""
    ids = []
    manifest = json.loads((index.path / "manifest.json").read_text())
    for segment in manifest["segments"]:
        with pa.memory_map(str(index.path / "segments" / segment["name"] / "ids.arrow")) as source:
            table = pa.ipc.open_file(source).read_all()
        ids += [i for i, t in zip(table["id"].to_pylist(), table["tag"].to_pylist()) if t == tag]
    return ids


# --- the CLI ---------------------------------------------------------------------------------------


def cli_corpus(root: Path) -> tuple[Path, Path, list[dict]]:
    records = case_records("word")[:300]
    first = write_jsonl(root / "week1" / "a.jsonl", records[0::2])
    second = write_jsonl(root / "week2.jsonl", records[1::2])
    return first, second, records


@pytest.mark.timeout(120)
def test_cli_end_to_end(in_tmp, output_names):
    week1, week2, records = cli_corpus(in_tmp)
    made = invoke("index", "create", "idx", "--threshold", THRESHOLD, "--shingle", "word", "--ngram", 5)
    assert made.exit_code == 0, made.output
    added = invoke("index", "add", "idx", week1.parent, "-o", "out1", "--id-field", "id", "--tag", "w1", "-q")
    assert added.exit_code == 0, added.output
    assert sorted(p.name for p in Path("out1").iterdir()) == output_names
    # dedup --against: the same as the next add, which writes its outputs as dedup does.
    before = committed_state(Path("idx"))
    against = invoke("dedup", week2, "-o", "against", "--against", "idx", "--id-field", "id", "-q")
    assert against.exit_code == 0, against.output
    assert committed_state(Path("idx")) == before
    added = invoke("index", "add", "idx", week2, "-o", "out2", "--id-field", "id", "--tag", "w2", "-q")
    assert added.exit_code == 0, added.output
    for name, table in result_tables(Path("against")).items():
        assert table.equals(result_tables(Path("out2"))[name]), name
    pairs = read_pairs(Path("out2")).to_pylist()
    week1_ids = {r["id"] for r in records[0::2]}
    assert any(p["id_a"] in week1_ids or p["id_b"] in week1_ids for p in pairs), "pairs name indexed ids"
    report = json.loads(Path("out2/report.json").read_text())
    assert report["results"]["kept_documents"] == read_kept(Path("out2")).num_rows

    shown = invoke("index", "info", "idx")
    assert shown.exit_code == 0, shown.output
    info = json.loads(shown.stdout)
    assert set(info["tags"]) == {"w1", "w2"} and info["segments"] == 2
    assert info["documents"] == sum(info["tags"].values()) == len(index_ids_of_tag(Index("idx"), "w1")) + len(
        index_ids_of_tag(Index("idx"), "w2"))

    # query: a text and a file.
    query_file = write_jsonl(in_tmp / "queries.jsonl", [{"text": records[0]["text"]}])
    queried = invoke("index", "query", "idx", records[2]["text"], query_file)
    assert queried.exit_code == 0, queried.output
    lines = [json.loads(line) for line in queried.stdout.splitlines()]
    assert [line["query"] for line in lines] == [0, 1]
    assert {"id": records[0]["id"], "jaccard": 1.0} in lines[1]["matches"]
    # A folder is read as the files in it; a path-like text that names nothing is said to be a text.
    (in_tmp / "queries").mkdir()
    write_jsonl(in_tmp / "queries" / "a.jsonl", [{"text": records[0]["text"]}])
    queried = invoke("index", "query", "idx", "queries", "queries/a.jsnl")
    assert queried.exit_code == 0, queried.output
    lines = [json.loads(line) for line in queried.stdout.splitlines()]
    assert {"id": records[0]["id"], "jaccard": 1.0} in lines[0]["matches"] and lines[1]["matches"] == []
    assert "note: queries/a.jsnl names no file or folder here: it is queried as a text" in queried.stderr
    # An empty text is a text (a path, "", would be the current folder, which holds queries/).
    queried = invoke("index", "query", "idx", "")
    assert queried.exit_code == 0, queried.output
    assert [json.loads(line) for line in queried.stdout.splitlines()] == [{"query": 0, "matches": []}]

    # Ids already in the index: refused with one line, nothing written, index unchanged.
    before = committed_state(Path("idx"))
    again = invoke("index", "add", "idx", week2, "-o", "out3", "--id-field", "id")
    assert_user_error(again, "already in the index", out=in_tmp / "out3")
    against = invoke("dedup", week2, "-o", "out3", "--id-field", "id", "--against", "idx")
    assert_user_error(against, "already in the index", out=in_tmp / "out3")  # pairs would be ambiguous
    assert committed_state(Path("idx")) == before

    # remove by ids (a file) and by tag, compact.
    ids_file = in_tmp / "ids.txt"
    removed_ids = index_ids_of_tag(Index("idx"), "w2")[:3]
    # Each line an id as it stands (" x" is not "x"); ids that name no document are counted.
    ids_file.write_text("\n".join(removed_ids) + f"\n\n {removed_ids[0]}\nno such id\n")
    removed = invoke("index", "remove", "idx", "--ids", ids_file)
    assert removed.exit_code == 0 and "Removed 3 documents" in removed.output, removed.output
    assert "note: 2 of the 5 ids listed name no document the index holds" in removed.stderr
    removed = invoke("index", "remove", "idx", "--tag", "w1")
    assert removed.exit_code == 0, removed.output
    compacted = invoke("index", "compact", "idx")
    assert compacted.exit_code == 0, compacted.output
    info = json.loads(invoke("index", "info", "idx").stdout)
    assert info["segments"] == 1 and set(info["tags"]) == {"w2"} and info["documents"] == info["tags"]["w2"]
    assert_only_committed(Path("idx"))


# --- damage: exit 2, one line naming the file ------------------------------------------------------


@pytest.fixture
def damaged(in_tmp):
    """A fresh two-segment index and a near-copy of one of its documents as new data."""
    records = case_records("word")[:200]
    index = Index.create(in_tmp / "idx", threshold=THRESHOLD, shingle="word", ngram=5)
    index.add(pa.Table.from_pylist(records[0::2]), id_field="id", tag="a")
    index.add(pa.Table.from_pylist(records[1::2]), id_field="id", tag="b")
    new = write_jsonl(in_tmp / "new.jsonl", [{"id": "new-1", "text": records[0]["text"] + " amen"},
                                             {"id": "new-2", "text": records[1]["text"] + " amen"}])
    manifest = json.loads((in_tmp / "idx" / "manifest.json").read_text())
    return in_tmp / "idx", new, manifest


def segment_file(index: Path, manifest: dict, name: str) -> Path:
    return index / "segments" / manifest["segments"][0]["name"] / name


def runs_against(index: Path, new: Path, where: Path) -> list:
    """dedup --against, index add and index query over a new document near an indexed one."""
    return [invoke("dedup", new, "-o", where / "out", "--against", index, "--id-field", "id", "-q"),
            invoke("index", "add", index, new, "-o", where / "out", "--id-field", "id", "-q"),
            invoke("index", "query", index, new)]


@pytest.mark.parametrize("file_name", ["keys.npy", "signatures.npy", "set_columns.npy", "ids.arrow",
                                       "signatures.blocks", "set_columns.blocks"])
@pytest.mark.parametrize("damage", ["flipped", "truncated", "missing"])
def test_a_damaged_segment_file_is_refused_naming_it(damaged, damage, file_name):
    index, new, manifest = damaged
    path = segment_file(index, manifest, file_name)
    data = bytearray(path.read_bytes())
    if damage == "flipped":
        # In the bytes the runs read: a file checked by blocks has only those checked (row 0,
        # the indexed document the new ones are near, starts after the 128-byte header).
        data[130 if file_name in ("signatures.npy", "set_columns.npy") else len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
    elif damage == "truncated":
        path.write_bytes(bytes(data[:len(data) - 7]))
    else:
        path.unlink()
    before = {p: p.read_bytes() for p in index.rglob("*") if p.is_file()}
    results = runs_against(index, new, index.parent)
    if file_name.startswith("signatures.") and damage != "missing":
        # (a query reads no signature, as it checks every match exactly; a reader opens every file)
        assert results.pop().exit_code == 0
    for result in results:
        assert_user_error(result, str(path), out=index.parent / "out")
    assert {p: p.read_bytes() for p in index.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("file_name", ["signatures.npy", "set_columns.npy"])
def test_damage_where_a_run_reads_nothing_is_found_by_what_reads_it(damaged, file_name):
    """An add or a query checks the blocks of the documents it reads, not the whole file: a
    block of another document damaged leaves their results as they were, and what reads it
    (compact, which reads every document; info --check, every file) is refused naming the
    file."""
    index, new, manifest = damaged
    copy = index.parent / "copy"
    shutil.copytree(index, copy)
    path = segment_file(copy, manifest, file_name)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01  # (the last document's: none of the runs reads it)
    path.write_bytes(bytes(data))
    outcomes = []
    for root in (index, copy):
        out = index.parent / f"out-{root.name}"
        out.mkdir()
        results = [invoke("dedup", new, "-o", out / "against", "--against", root, "--id-field", "id", "-q"),
                   invoke("index", "add", root, new, "-o", out / "add", "--id-field", "id", "-q"),
                   invoke("index", "query", root, new)]
        assert [result.exit_code for result in results] == [0, 0, 0], [result.output for result in results]
        outcomes.append(([read_pairs(out / kind) for kind in ("against", "add")], results[2].stdout))
    assert outcomes[1] == outcomes[0]
    assert_user_error(invoke("index", "info", copy, "--check"), str(path), out=index.parent / "out")
    assert invoke("index", "info", index, "--check").exit_code == 0
    assert_user_error(invoke("index", "compact", copy), str(path), out=index.parent / "out")


def test_a_segment_without_block_digests_is_checked_whole(damaged):
    """A segment written without .blocks files (as an index of an earlier version) is read, and
    checked whole: damage to a document no run reads is refused."""
    from gpudedup.index.files import manifest_checksum

    index, new, manifest = damaged
    for entry in manifest["segments"]:
        for name in [name for name in entry["files"] if name.endswith(".blocks")]:
            (index / "segments" / entry["name"] / name).unlink()
            del entry["files"][name]
    manifest.pop("checksum")
    manifest["checksum"] = manifest_checksum(manifest)
    (index / "manifest.json").write_text(json.dumps(manifest))
    result = invoke("index", "query", index, new)
    assert result.exit_code == 0, result.output
    path = segment_file(index, manifest, "set_columns.npy")
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01
    path.write_bytes(bytes(data))
    assert_user_error(invoke("index", "query", index, new), str(path), out=index.parent / "out")


@pytest.mark.parametrize("damage", ["not json", "missing segment", "truncated", "no manifest", "edited"])
def test_a_damaged_manifest_is_refused_naming_it(damaged, damage):
    from gpudedup.index.files import manifest_checksum

    index, new, manifest = damaged
    path = index / "manifest.json"
    if damage == "edited":  # a changed parameter: the manifest's own checksum
        manifest["parameters"]["threshold"] = 0.5
        path.write_text(json.dumps(manifest))
    elif damage == "not json":
        path.write_text("this is not json\n")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    elif damage == "no manifest":
        path.unlink()
    else:
        # A well-formed manifest (its checksum made anew) that names a segment that is not there.
        manifest["segments"].append(dict(manifest["segments"][0], name="seg-999999-00000000"))
        manifest.pop("checksum")
        manifest["checksum"] = manifest_checksum(manifest)
        path.write_text(json.dumps(manifest))
    named = str(index / "segments" / "seg-999999-00000000") if damage == "missing segment" else \
        str(path) if damage != "no manifest" else str(index)
    for result in runs_against(index, new, index.parent) + [invoke("index", "info", index),
                                                           invoke("index", "remove", index, "--tag", "a"),
                                                           invoke("index", "compact", index)]:
        assert_user_error(result, named, out=index.parent / "out")


def test_other_parameters_and_a_directory_that_is_not_an_index(damaged, tmp_path):
    index, new, _ = damaged
    before = committed_state(index)
    result = invoke("dedup", new, "-o", index.parent / "out", "--against", index, "--threshold", 0.7, "-q")
    assert_user_error(result, "threshold", out=index.parent / "out")
    result = invoke("dedup", new, "-o", index.parent / "out", "--against", index, "--ngram", 3, "-q")
    assert_user_error(result, "ngram", out=index.parent / "out")
    result = invoke("dedup", new, "-o", index.parent / "out", "--against", index, "--keep", "longest", "-q")
    assert_user_error(result, "--keep", out=index.parent / "out")
    assert committed_state(index) == before
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "something.txt").write_text("x")
    for result in (invoke("dedup", new, "-o", tmp_path / "out", "--against", plain, "-q"),
                   invoke("index", "add", plain, new, "-o", tmp_path / "out"), invoke("index", "info", plain),
                   invoke("index", "query", plain, "some text"), invoke("index", "compact", plain),
                   invoke("index", "remove", plain, "--tag", "a")):
        assert_user_error(result, str(plain), "not a gpudedup index", out=tmp_path / "out")
    assert sorted(p.name for p in plain.iterdir()) == ["something.txt"]
    made = invoke("index", "create", plain)
    assert_user_error(made, str(plain), out=tmp_path / "out")


def test_the_bucket_window_counts_live_documents_only(tmp_path):
    """A key's last --bucket-window indexed documents are the live ones: when the last one is
    removed, an older live document sharing the key is still found (as a batch run over the
    live documents finds it), before and after compaction. With one band of 2 rows and a
    window of 1: b shares a's key but is not a near-duplicate of it (both are indexed, b after
    a), c is a near-copy of a with the same key; b is removed, then c must pair with a."""
    settings = dict(threshold=0.5, num_perm=2, bands=1, rows=2, bucket_window=1)
    index = Index.create(tmp_path / "index", **settings)
    rng = random.Random(5)
    vocabulary = [f"w{i}" for i in range(400)]
    a = " ".join(rng.choice(vocabulary) for _ in range(30))

    def key(text: str) -> int:
        return int(index_keys_of([text], index)[0, 0])

    def similarity(x: str, y: str) -> float:
        return jaccard(shingle_set(x, "word", 5), shingle_set(y, "word", 5))

    b = c = None
    for _ in range(5000):  # seeded: found within the first few hundred draws
        words = a.split()
        if b is None:  # 12 of a's words in a row, somewhere: 8 shared 5-grams, J about 0.18
            start = rng.randrange(len(words) - 12)
            candidate = " ".join(words[start:start + 12] + [rng.choice(vocabulary) for _ in range(18)])
            if key(candidate) == key(a) and similarity(a, candidate) < 0.5:
                b = candidate
        if c is None:
            words[rng.randrange(len(words))] = rng.choice(vocabulary)
            candidate = " ".join(words)
            if key(candidate) == key(a) and similarity(a, candidate) >= 0.5 and candidate != a:
                c = candidate
        if b is not None and c is not None:
            break
    assert b is not None and c is not None
    index.add(pa.Table.from_pylist([{"id": "a", "text": a}, {"id": "b", "text": b}]), id_field="id")
    assert index.info()["documents"] == 2
    new = pa.Table.from_pylist([{"id": "c", "text": c}])
    batch = gpudedup.dedup(pa.Table.from_pylist([{"id": "a", "text": a}, {"id": "c", "text": c}]), id_field="id",
                           **settings)
    assert batch.keep.tolist() == [True, False]
    index.remove(ids=["b"])
    for _ in range(2):  # before and after compaction
        assert index.dedup(new, id_field="id").keep.tolist() == [False]
        assert [hit[0] for hit in index.query([c])[0]] == ["a"]
        index.compact()


def test_a_reader_keeps_its_state_while_a_writer_replaces_the_files(tmp_path):
    """A reader opened before a compact (which removes the files it replaced) goes on reading
    the state it opened: open files outlive their names."""
    from gpudedup.index.reader import IndexReader

    records = bible_records()[:300]
    index = Index.create(tmp_path / "index")
    index.add(pa.Table.from_pylist(records[:150]), id_field="id")
    index.add(pa.Table.from_pylist(records[150:]), id_field="id")
    reader = IndexReader(index.path)
    texts = [r["text"] for r in records[:20]]
    before = index.query(texts)
    index.compact()
    assert len(list((index.path / "segments").iterdir())) == 1  # the old segments are gone
    keys = index_keys_of(texts, index)
    segment, row = reader.probe(keys, 256)
    assert sorted(reader.gather(segment, row).ids.to_pylist()) == sorted(
        {hit[0] for hits in before for hit in hits} | set(reader.gather(segment, row).ids.to_pylist()))
    assert reader.sets(segment, row).indptr.shape[0] == segment.shape[0] + 1
    assert index.query(texts) == before


def index_keys_of(texts: list[str], index: Index) -> np.ndarray:
    """uint64 (n, bands): the band keys of texts under the index's parameters (numpy backend)."""
    from gpudedup.backends import get_backend
    from gpudedup.core.hashing import draw_permutations
    from gpudedup.core.normalize import text_buffers

    params = index.params()
    banding = params.banding()
    backend = get_backend("cpu")
    shingles = backend.shingle_hashes(*text_buffers(texts), params.shingle_spec())
    signatures = backend.signatures(shingles, draw_permutations(banding.bands * banding.rows, params.seed))
    return backend.band_keys(signatures, banding)


def test_a_run_against_an_index_refuses_ids_of_the_other_kind(tmp_path):
    """Integer ids against an index of string ids (and the other way round) are refused by a
    run against it as by an add: cast to one type for the results, 0 and "0" would name two
    documents by one id."""
    text = "the cat sat on the mat and then it left the house"
    strings = Index.create(tmp_path / "strings", threshold=0.7)
    strings.add([{"id": "0", "text": text}], id_field="id", progress=False)
    with pytest.raises(gpudedup.InputError, match="the index holds string ids, this input has int64 ids"):
        strings.dedup([text + " again"], progress=False)
    new = tmp_path / "new.jsonl"
    write_jsonl(new, [{"id": 0, "text": text + " again"}])
    refused = invoke("dedup", str(new), "-o", str(tmp_path / "out"), "--id-field", "id", "--against",
                     str(strings.path))
    assert_user_error(refused, "the index holds string ids, this input has int64 ids", out=tmp_path / "out")
    numbers = Index.create(tmp_path / "numbers", threshold=0.7)
    numbers.add([{"id": 0, "text": text}], id_field="id", progress=False)
    with pytest.raises(gpudedup.InputError, match="the index holds int64 ids, this input has string ids"):
        numbers.dedup([{"id": "0", "text": text + " again"}], id_field="id", progress=False)
    # The same kind is taken: the indexed document is found.
    found = strings.dedup([{"id": "1", "text": text + " again"}], id_field="id", progress=False)
    assert found.pairs.to_pylist() == [{"id_a": "0", "id_b": "1", "jaccard": found.pairs["jaccard"][0].as_py()}]


def test_a_run_against_an_index_counts_the_new_documents_only(tmp_path):
    """report.json's results count the new data only (output-formats.md): its documents in
    clusters leave out the indexed documents the clusters hold."""
    text = "the cat sat on the mat and then it left the house for a walk in the park"
    index = Index.create(tmp_path / "index", threshold=0.5)
    index.add([{"id": "a", "text": text}, {"id": "b", "text": text + " again today"}], id_field="id",
              progress=False)
    result = index.dedup([{"id": "n", "text": text + " again"}], id_field="id", progress=False)
    r = result.report["results"]
    assert result.indexed_rows == 1 and r["clusters"] == 1  # (b went as a near-duplicate of a)
    assert r["documents_in_clusters"] == 1 == r["removed_documents"] and r["kept_documents"] == 0


def test_no_document_against_an_index_of_string_ids_is_no_document(tmp_path):
    """Nothing to deduplicate has no ids of either kind: an empty list or iterable, with an id
    field or not, runs against an index of string ids as an empty run."""
    index = Index.create(tmp_path / "index", threshold=0.7)
    index.add([{"id": "a", "text": "the cat sat on the mat and then it left the house"}], id_field="id",
              progress=False)
    for data, options in (([], {}), (iter([]), {}), ([], {"id_field": "id"})):
        assert index.dedup(data, progress=False, **options).documents == 0
    assert index.add([], id_field="id", progress=False).documents == 0 and index.info()["documents"] == 1


def test_one_string_where_a_list_is_asked_is_refused(tmp_path):
    """query and remove take lists: one string given alone is refused (a string iterates as its
    characters: 49 empty answers, or nothing removed), and so is a tag that is not a string,
    before an add does any work."""
    text = "the cat sat on the mat and then it left the house"
    index = Index.create(tmp_path / "index", threshold=0.7)
    index.add([{"id": "doc-1", "text": text}], id_field="id", tag="a", progress=False)
    with pytest.raises(gpudedup.ParameterError, match=r"pass \[text\]"):
        index.query(text)
    with pytest.raises(gpudedup.ParameterError, match=r"pass \['doc-1'\] to remove one"):
        index.remove(ids="doc-1")
    with pytest.raises(gpudedup.ParameterError, match="tag= must be a string"):
        index.remove(tag=5)
    out = tmp_path / "out"
    with pytest.raises(gpudedup.ParameterError, match="tag= must be a string"):
        index.add([text + " again"], tag=5, output=out, progress=False)
    assert not out.exists() and index.info()["documents"] == 1
    assert index.query([text])[0] == [("doc-1", 1.0)]
    assert index.remove(ids=["doc-1"]) == 1


def test_review_cases(tmp_path):
    """What a review found: all_pairs of a run against an index; a query of the wrong kind; an
    add refused for its kind of ids writes nothing; remove --ids takes the index's kind of id;
    --against refuses only options given with another value."""
    records = bible_records()[:60]
    index = Index.create(tmp_path / "index")
    index.add(pa.Table.from_pylist(records[:40]), id_field="id")
    with pytest.raises(gpudedup.InputError, match="already in the index"):  # pairs would be ambiguous
        index.dedup(pa.Table.from_pylist(records[30:]), id_field="id")
    again = [{**r, "id": r["id"] + " again"} for r in records[30:]]
    result = index.dedup(pa.Table.from_pylist(again), id_field="id")
    assert result.indexed_rows > 0 and len(result.all_pairs()) >= len(result.pairs)
    with pytest.raises(gpudedup.InputError, match="token shingles|text"):
        index.query([[1, 2, 3]])
    numbered = pa.Table.from_pylist([{"n": i, "text": r["text"] + " new"} for i, r in enumerate(records[40:])])
    out = tmp_path / "refused"
    with pytest.raises(gpudedup.InputError, match="the index holds string ids"):
        index.add(numbered, id_field="n", output=out)
    assert not out.exists()
    assert index.remove(ids=[records[0]["id"]]) == 1
    strings = tmp_path / "strings.jsonl"
    write_jsonl(strings, [{"id": "007", "text": records[50]["text"]}])
    invoke("index", "add", str(index.path), str(strings), "-o", str(tmp_path / "o"), "--id-field", "id", "-q")
    listed = tmp_path / "ids.txt"
    listed.write_text("007\n")
    assert invoke("index", "remove", str(index.path), "--ids", str(listed)).exit_code == 0
    assert index.info()["documents"] == 40 - 1 + 1 - 1
    new = tmp_path / "new.jsonl"
    write_jsonl(new, records[40:45])
    same = invoke("dedup", str(new), "-o", str(tmp_path / "same"), "--against", str(index.path), "--threshold",
                  "0.8", "-q")
    assert same.exit_code == 0, same.output
    other = invoke("dedup", str(new), "-o", str(tmp_path / "other"), "--against", str(index.path), "--threshold",
                   "0.8", "--keep", "longest", "-q")
    assert_user_error(other, "--keep", out=tmp_path / "other")


def test_an_index_of_integer_ids_takes_a_listed_id_only_as_the_integer_prints(tmp_path):
    """Ids are matched exactly: "05", "-0", "+5" or " 5" name no integer id, and are refused
    naming the id rather than taken for 5 or 0; "5", "-7" and a JSON 3 or "3" remove theirs."""
    texts = ["alpha beta gamma delta epsilon zeta eta theta", "one two three four five six seven eight",
             "red orange yellow green blue indigo violet", "north south east west up down left right"]
    index = Index.create(tmp_path / "idx")
    index.add(pa.Table.from_pylist([{"id": i, "text": t} for i, t in zip([5, 0, 3, -7], texts)]), id_field="id")
    listed = tmp_path / "ids.txt"
    for given in ["05", "-0", "+5", " 5", "0x5"]:
        listed.write_text(given + "\n")
        assert_user_error(invoke("index", "remove", str(index.path), "--ids", str(listed)), repr(given),
                          out=tmp_path / "out")
        with pytest.raises(InputError, match=re.escape(repr(given))):
            index.remove(ids=[given])
    assert index.info()["documents"] == 4
    listed.write_text("5\n")
    assert "Removed 1 document from" in invoke("index", "remove", str(index.path), "--ids", str(listed)).output
    listed.write_text("-7\n")
    assert invoke("index", "remove", str(index.path), "--ids", str(listed)).exit_code == 0
    as_json = tmp_path / "ids.jsonl"
    as_json.write_text('3\n"0"\n')
    assert invoke("index", "remove", str(index.path), "--ids", str(as_json)).exit_code == 0
    listed.write_text("3\n")  # (removed already: none now)
    assert "Removed 0 documents from" in invoke("index", "remove", str(index.path), "--ids", str(listed)).output
    assert index.info()["documents"] == 0


def test_an_ids_file_is_cut_at_its_line_ends_alone(tmp_path):
    """`index remove --ids`: a line ends at "\n" or "\r\n", so an id that holds another
    Unicode line break (U+0085, U+2028, a form feed, a lone carriage return) is one id, not two
    that remove other documents; a byte-order mark is no part of the first id."""
    texts = ["alpha beta gamma delta epsilon zeta eta theta", "one two three four five six seven eight",
             "red orange yellow green blue indigo violet", "north south east west up down left right",
             "spring summer autumn winter rain snow wind sun", "black white grey silver gold bronze copper"]
    ids = ["c\u0085d", "c", "d", "e\u2028f\x0cg", "bom", "c\rd"]
    index = Index.create(tmp_path / "idx")
    index.add(pa.Table.from_pylist([{"id": i, "text": t} for i, t in zip(ids, texts)]), id_field="id")
    listed = tmp_path / "ids.txt"
    listed.write_bytes("\ufeffbom\r\nc\u0085d\ne\u2028f\x0cg\r\nc\rd\n".encode("utf-8"))
    removed = invoke("index", "remove", str(index.path), "--ids", str(listed))
    assert removed.exit_code == 0 and "Removed 4 documents" in removed.output, removed.output
    still = [bool(matches) for matches in index.query(texts)]
    assert still == [False, True, True, False, False, False]
    # A tag no add committed removes nothing, and says so.
    untagged = invoke("index", "remove", str(index.path), "--tag", "w9")
    assert untagged.exit_code == 0 and "Removed 0 documents" in untagged.output
    assert "note: no document of the index has the tag 'w9' (its tags: none)" in untagged.stderr


def test_an_ids_file_of_json_lines_names_ids_no_plain_line_can(tmp_path):
    """`index remove --ids FILE.jsonl`: a JSON string or integer per line, so the empty id and
    one holding a line break can be removed from the command line (a plain file's empty line is
    no id); a line that is no such value is refused with its file and line, removing nothing."""
    texts = ["alpha beta gamma delta epsilon zeta eta theta", "one two three four five six seven eight",
             "red orange yellow green blue indigo violet", "north south east west up down left right"]
    ids = ["", "two\nlines", "7", "kept"]
    index = Index.create(tmp_path / "idx")
    index.add(pa.Table.from_pylist([{"id": i, "text": t} for i, t in zip(ids, texts)]), id_field="id")
    bad = tmp_path / "bad.jsonl"
    before = tree_snapshot(index.path)
    for lines, words in (('""\n\n{"id": "kept"}\n', ":3: expected an id as a JSON string or integer"),
                         ('"kept"\n"\\ud800"\n', ":2: the id holds an unpaired UTF-16 surrogate escape")):
        bad.write_text(lines)
        refused = invoke("index", "remove", str(index.path), "--ids", str(bad))
        assert_user_error(refused, f"{bad}{words}", out=index.path, before=before)
    listed = tmp_path / "ids.jsonl"
    listed.write_text('""\n\n"two\\nlines"\n7\n"absent"\n')
    removed = invoke("index", "remove", str(index.path), "--ids", str(listed))
    assert removed.exit_code == 0 and "Removed 3 documents" in removed.output, removed.output
    assert "note: 1 of the 4 ids listed name no document" in removed.stderr
    assert [bool(matches) for matches in index.query(texts)] == [False, False, False, True]


def test_index_query_and_info_print_an_id_s_steering_characters_as_escapes(tmp_path):
    """`index query` and `index info` print JSON: an id or tag holding ESC, C1, a right-to-left
    override or a line separator comes as its JSON escape (the same JSON to a parser), never as
    the character that would steer the terminal."""
    evil = "evil\u202eTXT.exe\u2028x\x1b[31mred\x85"
    text = "alpha beta gamma delta epsilon zeta eta theta"
    index = Index.create(tmp_path / "idx")
    index.add(pa.Table.from_pylist([{"id": evil, "text": text}]), id_field="id", tag="w\u202eeek")
    queried = invoke("index", "query", str(index.path), text)
    info = invoke("index", "info", str(index.path))
    for result in (queried, info):
        assert result.exit_code == 0, result.output
        assert not any(c in result.stdout for c in "\u202e\u2028\x1b\x85"), ascii(result.stdout)
    assert json.loads(queried.stdout)["matches"][0]["id"] == evil
    assert "w\u202eeek" in json.loads(info.stdout)["tags"]


def test_staged_and_dask_adds_equal_the_in_memory_add(tmp_path):
    """An add over files in stages (a work directory) and on a 2-worker Dask cluster keeps, pairs,
    removes (with the Jaccard of a removed row whose kept document is an indexed one) and
    commits what the in-memory add does, the indexed documents it meets read by the workers'
    tasks as every document of a work directory is; the staged add's work directory records
    the index's state, so resuming it after another commit is refused."""
    import logging

    distributed = pytest.importorskip("distributed")
    records = bible_records()[:240]
    again = [{"id": r["id"] + " again", "text": r["text"] + " amen"} for r in records[:40]]  # near-copies
    copies = [{"id": r["id"] + " copy", "text": r["text"]} for r in records[40:60]]  # identical copies
    parts = [write_jsonl(tmp_path / "part0.jsonl", records[:120]),
             write_jsonl(tmp_path / "part1.jsonl", records[120:] + again + copies)]
    indexes = {how: Index.create(tmp_path / how) for how in ("memory", "staged", "dask")}
    results: dict[str, list] = {how: [] for how in indexes}
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=logging.ERROR) as cluster, distributed.Client(cluster) as client:
        for number, part in enumerate(parts):
            results["memory"].append(indexes["memory"].add(part, id_field="id", backend="cpu"))
            results["staged"].append(indexes["staged"].add(part, id_field="id", backend="cpu",
                                                           work_dir=tmp_path / f"work{number}"))
            with distributed.get_task_stream(client) as stream:
                results["dask"].append(indexes["dask"].add(part, id_field="id", backend="cpu", client=client,
                                                           work_dir=tmp_path / f"dask-work{number}"))
    for how in ("staged", "dask"):
        for ours, reference in zip(results[how], results["memory"]):
            assert np.array_equal(ours.keep, reference.keep)
            assert ours.pairs.equals(reference.pairs) and ours.clusters.equals(reference.clusters)
            assert ours.removed_rows().equals(reference.removed_rows())
        assert indexes[how].info()["documents"] == indexes["memory"].info()["documents"]
        # The kept and removed rows as the tasks write them from the clusters' parts.
        for name, result in ((how, results[how][1]), ("memory", results["memory"][1])):
            if not (tmp_path / f"out-{name}").exists():
                result.write(tmp_path / f"out-{name}", write_removed=True)
        for table in ("deduplicated", "removed"):
            assert pq.read_table(tmp_path / f"out-{how}" / table).equals(pq.read_table(tmp_path / "out-memory" / table))
    second = results["memory"][1]
    assert second.indexed_rows > 0  # the second add did meet the first's documents
    assert second.report["results"]["identical_copies"] > 0
    removed = second.removed_rows()
    assert set(removed.column("kept_id").to_pylist()) & {r["id"] for r in records[:120]}  # indexed ones kept
    assert not np.isnan(removed.column("jaccard").to_numpy(zero_copy_only=False)).any()
    keys = {str(task["key"]) for task in stream.data}  # (the second add's)
    for task in ("likely_part", "spill_part_documents", "check_part", "group_part", "check_groups",
                 "decide_clusters"):
        assert any(task in key for key in keys), task
    with pytest.raises(gpudedup.ParameterError, match="another run") as refused:
        indexes["staged"].dedup(parts[0], id_field="id", backend="cpu", work_dir=tmp_path / "work0", resume=True)
    # (Which may be this add's own commit: the message says so.)
    assert "against generation 0 of the index, now at 2: an add, remove or compact committed since (if it was an " \
        "add that stopped after its commit, that one" in str(refused.value)
    # An index made again at the same path, to the same generation, is another index.
    shutil.rmtree(indexes["staged"].path)
    again = Index.create(indexes["staged"].path)
    again.add(parts[0], id_field="id", backend="cpu", tag="again")  # generation 1, as work1's add saw it
    with pytest.raises(gpudedup.ParameterError, match="the index at that path was made again since it ran"):
        again.dedup(parts[1], id_field="id", backend="cpu", work_dir=tmp_path / "work1", resume=True)


def test_an_add_on_a_local_cluster_without_a_work_dir_commits_what_the_in_memory_add_does(tmp_path):
    """workers= without work_dir: the run's temporary work directory lasts until the commit,
    which reads the new documents' spills (it read them after dedup had deleted them)."""
    pytest.importorskip("distributed")
    records = bible_records()[:120]
    part = write_jsonl(tmp_path / "part.jsonl", records + [{"id": r["id"] + " again", "text": r["text"]}
                                                           for r in records[:10]])
    memory, spread = Index.create(tmp_path / "memory"), Index.create(tmp_path / "spread")
    reference = memory.add(part, id_field="id", backend="cpu")
    added = spread.add(part, id_field="id", backend="cpu", workers=2)
    assert np.array_equal(added.keep, reference.keep) and added.pairs.equals(reference.pairs)
    assert spread.info()["documents"] == memory.info()["documents"] == int(reference.keep.sum())
    assert added.report["work_dir"] is None  # (its temporary one is gone)


def test_a_long_lived_index_checks_each_segment_once_and_still_sees_a_file_changed_since(tmp_path, monkeypatch):
    # Segments are immutable: after an add, the same Index object's next add or query takes
    # over the segments it already opened and checked, rather than hashing every file again
    # (which would make each add cost more the larger the index), and the segments it wrote
    # itself count as checked (it hashed them as it wrote them). A file changed after its
    # check (inode, size or modification time) is not taken over: it is checked again, and
    # its damage refused, as a fresh process would.
    from gpudedup.index import reader as reader_module

    hashed: list[str] = []
    check = reader_module.OpenedFile.check

    def counting_check(opened):
        if not opened.checked:
            hashed.append(opened.path.name)
        check(opened)

    monkeypatch.setattr(reader_module.OpenedFile, "check", counting_check)
    records = bible_records()
    Index.create(tmp_path / "idx", threshold=0.8, shingle="word", ngram=5).add(
        pa.Table.from_pylist(records[0:600]), id_field="id", tag="a")
    index = Index(tmp_path / "idx")  # another writer's segment (a), then its own (b, c)
    index.add(pa.Table.from_pylist(records[600:1200]), id_field="id", tag="b")
    assert hashed.count("keys.npy") == 1  # every add probes every segment's band keys: a's
    hashed.clear()
    index.add(pa.Table.from_pylist(records[1200:1800]), id_field="id", tag="c")
    assert hashed.count("keys.npy") == 0  # a's was checked before, b is this object's own
    hashed.clear()
    expected = Index(tmp_path / "idx").query([records[5]["text"]])
    assert index.query([records[5]["text"]]) == expected and expected[0][0][0] == records[5]["id"]

    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    path = tmp_path / "idx" / "segments" / manifest["segments"][0]["name"] / "keys.npy"
    original = path.read_bytes()
    data = bytearray(original)
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(DamagedIndexError, match=f"{manifest['segments'][0]['name']}/keys.npy"):
        index.add(pa.Table.from_pylist(records[1800:]), id_field="id", tag="d")
    path.write_bytes(original)  # whole again (and checked again: a new modification time)
    own = tmp_path / "idx" / "segments" / manifest["segments"][1]["name"] / "keys.npy"
    data = bytearray(own.read_bytes())
    data[len(data) // 2] ^= 0x01
    own.write_bytes(bytes(data))
    with pytest.raises(DamagedIndexError, match=f"{manifest['segments'][1]['name']}/keys.npy"):
        index.add(pa.Table.from_pylist(records[1800:]), id_field="id", tag="d")


def test_report_says_whether_an_add_commits(tmp_path):
    """report.json's index.added: true for an add that commits kept documents, false for one
    that keeps none (every new document a copy of an indexed one: nothing is committed) and
    for a run against the index."""
    records = bible_records()[:60]
    index = Index.create(tmp_path / "index")
    first = index.add(pa.Table.from_pylist(records), id_field="id")
    assert first.report["index"]["added"] is True and index.info()["generation"] == 1
    copies = pa.Table.from_pylist([{"id": f"copy-{r['id']}", "text": r["text"]} for r in records])
    again = index.add(copies, id_field="id")
    assert not again.keep.any() and again.report["index"]["added"] is False
    assert index.info()["generation"] == 1
    assert index.dedup(copies, id_field="id").report["index"]["added"] is False


@pytest.mark.parametrize("call", ["dedup", "add"])
def test_two_inputs_with_one_output_name_are_refused_before_the_run(tmp_path, monkeypatch, call):
    """Index.dedup(output=) and Index.add(output=) refuse inputs that would write one output file
    (day.jsonl beside day.txt is written as deduplicated/day.jsonl.parquet, as a Parquet input
    day.jsonl.parquet is) before any stage, as gpudedup.dedup(output=) does; nothing is written and nothing is added."""
    from gpudedup import stages

    seen: list[str] = []
    monkeypatch.setattr(stages, "announce_stage", seen.append)
    (tmp_path / "in").mkdir()
    write_jsonl(tmp_path / "in" / "day.jsonl", [{"text": "one two three four five six"}])
    (tmp_path / "in" / "day.txt").write_text("seven eight nine ten eleven twelve\n")
    pq.write_table(pa.table({"text": ["thirteen fourteen fifteen"]}), tmp_path / "in" / "day.jsonl.parquet")
    index = Index.create(tmp_path / "idx", threshold=0.8)
    with pytest.raises(gpudedup.errors.ParameterError, match="day"):
        getattr(index, call)(tmp_path / "in", backend="cpu", output=tmp_path / "out")
    assert seen == [] and not (tmp_path / "out").exists() and index.info()["documents"] == 0


def test_a_query_checks_its_documents_before_the_backend(tmp_path):
    """Index.query: no queries is no matches, and one string is refused as such, whatever the
    backend asked for (a GPU or a backend name that none has is not opened for nothing)."""
    index = Index.create(tmp_path / "idx", threshold=0.8)
    for backend in ("gpu", "no such backend"):
        assert index.query([], backend=backend) == []
        with pytest.raises(gpudedup.errors.ParameterError, match=r"one string: pass \[text\]"):
            index.query("a text", backend=backend)
