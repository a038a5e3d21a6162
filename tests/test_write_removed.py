"""The removed documents as an output (--write-removed, write_removed=True;
gpudedup/pipeline/removedrows.py): each removed row with every input column, and kept_id,
cluster and jaccard, laid out like deduplicated/ under removed/, checked against clusters/ and
against a Jaccard computed here from the two texts by the test oracle's shingles."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpudedup
from cli_support import assert_user_error, invoke, write_jsonl
from oracles import jaccard, shingle_set
from output_support import kept_files, output_section, result_bytes, table_path

THRESHOLD = 0.6
WORDS = [f"w{n}" for n in range(3000)]


def text_of(rng: np.random.Generator, words: int = 100) -> list[str]:
    return [WORDS[i] for i in rng.integers(0, len(WORDS), words)]


def changed(words: list[str], places: list[int], tag: str) -> list[str]:
    """``words`` with the words at ``places`` replaced (each change alters up to 5 word
    5-grams)."""
    out = list(words)
    for place in places:
        out[place] = f"{tag}{place}"
    return out


def records_of(seed: int = 7) -> list[dict]:
    """Records with duplicates within and across what becomes two files: chains a ~ b ~ c whose
    ends are below the threshold (so that c is removed without being a pair of the kept a),
    exact copies, and unique documents; each with a str, an int and a nested column."""
    rng = np.random.default_rng(seed)
    texts: list[list[str]] = []
    for chain in range(6):
        a = text_of(rng)
        b = changed(a, [10, 30, 50], f"b{chain}x")  # 3 words: J(a, b) about 0.7
        c = changed(b, [5, 20, 40], f"c{chain}x")  # J(a, c) about 0.5
        texts += [a, b, c]
    for _ in range(4):
        copy = text_of(rng)
        texts += [copy, copy]
    texts += [text_of(rng) for _ in range(10)]
    order = rng.permutation(len(texts))
    return [{"id": f"doc-{n}", "text": " ".join(texts[i]), "source": f"src{n % 3}", "n": int(n) * 7,
             "meta": {"lang": "xx", "pos": int(n)}} for n, i in enumerate(order)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Two JSONL files of records_of()."""
    root = tmp_path_factory.mktemp("removed") / "in"
    records = records_of()
    write_jsonl(root / "a.jsonl", records[:22])
    write_jsonl(root / "sub" / "b.jsonl", records[22:])
    return root


def input_records(root: Path) -> dict[str, dict]:
    return {record["id"]: record for path in sorted(root.rglob("*.jsonl"))
            for record in map(json.loads, path.read_text(encoding="utf-8").splitlines())}


def removed_paths(out: Path) -> list[Path]:
    """The removed rows' files, as report.json lists them (checked to be removed/'s files)."""
    listed = [out / name for name in output_section(out)["removed_files"]]
    if (out / "removed").is_dir():
        assert sorted(listed) == sorted(p for p in (out / "removed").rglob("*") if p.is_file())
    return listed


def read_rows(path: Path) -> list[dict]:
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return pq.read_table(path).to_pylist()


def check_removed(out: Path, records: dict[str, dict]) -> list[dict]:
    """removed/ against clusters/ and the inputs: every removed id once, with its cluster's kept
    id and number, the input columns unchanged, the exact Jaccard to the kept text; and
    deduplicated/ + removed/ hold every record once. Returns the removed rows."""
    clusters = pq.read_table(table_path(out, "clusters")).to_pylist()
    removed = {row["id"]: row for row in clusters if not row["keep"]}
    rows = [row for path in removed_paths(out) for row in read_rows(path)]
    assert sorted(row["id"] for row in rows) == sorted(removed)  # each removed id exactly once
    for row in rows:
        assert (row["kept_id"], row["cluster"]) == (removed[row["id"]]["kept_id"], removed[row["id"]]["cluster"])
        assert {name: row[name] for name in records[row["id"]]} == records[row["id"]]
        assert row["jaccard"] == jaccard(shingle_set(records[row["id"]]["text"]),
                                         shingle_set(records[row["kept_id"]]["text"]))
    kept = [row["id"] for path in kept_files(out) for row in read_rows(path)]
    assert sorted(kept + [row["id"] for row in rows]) == sorted(records)  # conservation
    return rows


def test_removed_rows_in_memory_match_clusters_and_texts(corpus, tmp_path):
    """In memory: removed/a.parquet and removed/sub/b.parquet, named as under deduplicated/,
    each with its file's columns and the three added; a removed document that is no verified
    pair of its kept one gets its Jaccard computed (below the threshold)."""
    out = tmp_path / "out"
    gpudedup.dedup(corpus, id_field="id", threshold=THRESHOLD, backend="cpu", output=out, write_removed=True)
    assert output_section(out)["removed_files"] == ["removed/a.parquet", "removed/sub/b.parquet"]
    rows = check_removed(out, input_records(corpus))
    pairs = {(p["id_a"], p["id_b"]) for p in pq.read_table(table_path(out, "pairs")).to_pylist()}
    apart = [r for r in rows if (min(r["id"], r["kept_id"]), max(r["id"], r["kept_id"])) not in pairs]
    assert apart and all(r["jaccard"] < THRESHOLD for r in apart)
    assert any(r["jaccard"] == 1.0 for r in rows)  # the exact copies
    schema = pq.read_schema(out / "removed" / "a.parquet")
    assert schema.names[-3:] == ["kept_id", "cluster", "jaccard"]
    assert schema.names[:-3] == pq.read_schema(out / "deduplicated" / "a.parquet").names


@pytest.mark.timeout(120)  # three runs, one on the shared Dask cluster
def test_staged_and_dask_write_the_same_removed_files(corpus, tmp_path, client):
    """Staged (--work-dir) and on Dask (the workers write each file, as the kept rows) give the
    in-memory run's removed/ files byte for byte."""
    import distributed

    common = dict(id_field="id", threshold=THRESHOLD, backend="cpu", write_removed=True)
    gpudedup.dedup(corpus, output=tmp_path / "memory", **common)
    gpudedup.dedup(corpus, output=tmp_path / "staged", work_dir=tmp_path / "work", **common)
    with distributed.get_task_stream(client) as stream:
        gpudedup.dedup(corpus, output=tmp_path / "dask", work_dir=tmp_path / "dwork", client=client, **common)
    assert sum(str(task["key"]).startswith("write_file_removed") for task in stream.data) == 2  # one per file
    expected = {p.relative_to(tmp_path / "memory"): p.read_bytes() for p in removed_paths(tmp_path / "memory")}
    for run in ("staged", "dask"):
        check_removed(tmp_path / run, input_records(corpus))
        assert {p.relative_to(tmp_path / run): p.read_bytes() for p in removed_paths(tmp_path / run)} == expected


def test_jsonl_and_single_file(corpus, tmp_path):
    """--format jsonl: removed/<name>.jsonl, one object per removed row (the input fields as
    Arrow read them, then the three added); --single-file and a staged run's single file:
    removed.<format>, the same bytes from either run (a file's rows at a time)."""
    records = input_records(corpus)
    gpudedup.dedup(corpus, id_field="id", threshold=THRESHOLD, backend="cpu", output=tmp_path / "j", format="jsonl",
                   write_removed=True)
    assert output_section(tmp_path / "j")["removed_files"] == ["removed/a.jsonl", "removed/sub/b.jsonl"]
    check_removed(tmp_path / "j", records)
    for name, work in (("single", None), ("staged_single", tmp_path / "w")):
        gpudedup.dedup(corpus, id_field="id", threshold=THRESHOLD, backend="cpu", output=tmp_path / name,
                       single_file=True, work_dir=work, write_removed=True)
        assert output_section(tmp_path / name)["removed_files"] == ["removed.parquet"]
        assert output_section(tmp_path / name)["kept_files"] == ["deduplicated.parquet"]
        assert not (tmp_path / name / "removed").exists()
        check_removed(tmp_path / name, records)
    for name in ("removed.parquet", "deduplicated.parquet"):
        assert (tmp_path / "single" / name).read_bytes() == (tmp_path / "staged_single" / name).read_bytes(), name


def test_notebook_input_writes_one_file(tmp_path):
    """A table in memory (no files): removed.parquet beside deduplicated.parquet, with the
    table's columns; an empty removal still writes the file with its columns."""
    records = records_of(3)
    table = pa.Table.from_pylist(records)
    gpudedup.dedup(table, id_field="id", threshold=THRESHOLD, backend="cpu").write(tmp_path / "t", write_removed=True)
    rows = check_removed(tmp_path / "t", {r["id"]: r for r in records})
    assert rows
    unique = pa.Table.from_pylist(records[:1])
    gpudedup.dedup(unique, id_field="id", backend="cpu").write(tmp_path / "none", write_removed=True)
    empty = pq.read_table(tmp_path / "none" / "removed.parquet")
    assert empty.num_rows == 0 and empty.column_names == unique.column_names + ["kept_id", "cluster", "jaccard"]
    # A pandas frame's metadata (its dtypes) stays on removed.parquet, as on deduplicated.parquet.
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(records).assign(n=pd.array(range(len(records)), dtype="Int64"))
    gpudedup.dedup(frame, id_field="id", threshold=THRESHOLD, backend="cpu").write(tmp_path / "p", write_removed=True)
    for name in ("deduplicated.parquet", "removed.parquet"):
        assert b"pandas" in pq.read_schema(tmp_path / "p" / name).metadata, name
        assert str(pd.read_parquet(tmp_path / "p" / name).dtypes["n"]) == "Int64", name


def test_without_the_option_nothing_changes(corpus, tmp_path):
    """Without --write-removed: no removed/ folder and no removed_files in report.json, and the
    other outputs are byte for byte those of a run with it."""
    gpudedup.dedup(corpus, id_field="id", threshold=THRESHOLD, backend="cpu", output=tmp_path / "plain")
    gpudedup.dedup(corpus, id_field="id", threshold=THRESHOLD, backend="cpu", output=tmp_path / "with",
                   write_removed=True)
    assert not (tmp_path / "plain" / "removed").exists()
    assert "removed_files" not in output_section(tmp_path / "plain")
    for folder in ("deduplicated", "clusters", "pairs"):
        for path in sorted((tmp_path / "plain" / folder).rglob("*.parquet")):
            assert path.read_bytes() == (tmp_path / "with" / path.relative_to(tmp_path / "plain")).read_bytes()


def test_cli_option(corpus, tmp_path):
    result = invoke("dedup", corpus, "-o", tmp_path / "cli", "--id-field", "id", "--threshold", THRESHOLD,
                    "--backend", "cpu", "--write-removed", "--quiet")
    assert result.exit_code == 0, result.output
    check_removed(tmp_path / "cli", input_records(corpus))


def test_a_column_named_as_an_added_one_is_refused(tmp_path):
    """An input column named kept_id, cluster or jaccard would be overwritten: the write is
    refused with an error naming it, and nothing is written."""
    records = [{**r, "cluster": "x"} for r in records_of(3)]
    result = gpudedup.dedup(pa.Table.from_pylist(records), id_field="id", threshold=THRESHOLD, backend="cpu")
    with pytest.raises(gpudedup.errors.OutputError, match="'cluster'"):
        result.write(tmp_path / "o", write_removed=True)
    assert not (tmp_path / "o").exists()


def test_an_id_column_that_is_not_the_runs_ids_is_refused(corpus, tmp_path):
    """Rows with a column ``id`` that the run does not take as its ids (no id_field): removed/'s
    kept_id (row positions, or file:line) would stand beside ids of another kind, and join to
    the wrong rows by them. The write is refused, saying to pass id_field, and nothing is
    written, in memory and from the command line; with id_field it goes through."""
    records = records_of(3)
    result = gpudedup.dedup(pa.Table.from_pylist(records), threshold=THRESHOLD, backend="cpu")
    refusal = r"column 'id', but the run's ids are not it \(no id_field= given\).*id_field='id'"
    with pytest.raises(gpudedup.errors.OutputError, match=refusal):
        result.write(tmp_path / "o", write_removed=True)
    assert not (tmp_path / "o").exists()
    refused = invoke("dedup", corpus, "-o", tmp_path / "cli", "--backend", "cpu", "--write-removed", "--quiet")
    assert refused.exit_code != 0 and "(no --id-field given)" in refused.output and "--id-field id" in refused.output
    assert not (tmp_path / "cli").exists()
    result.write(tmp_path / "plain")  # (without removed/ there is nothing to mistake)
    named = gpudedup.dedup(pa.Table.from_pylist(records), id_field="id", threshold=THRESHOLD, backend="cpu")
    named.write(tmp_path / "named", write_removed=True)
    check_removed(tmp_path / "named", {r["id"]: r for r in records})


@pytest.mark.parametrize("column, refusal", [("cluster", "'cluster', which removed/ adds"),
                                              ("id", "column 'id', but the run's ids are not it")])
def test_dedup_with_output_refuses_such_columns_before_the_run(tmp_path, monkeypatch, column, refusal):
    """dedup(data, output=, write_removed=True) on data given in Python knows its columns before
    the run: the refusals of the write come before it, not after the whole run."""
    import gpudedup.api as api_module

    def must_not_run(*args, **kwargs):
        raise AssertionError("the run started")

    monkeypatch.setattr(api_module, "dedup_corpus", must_not_run)
    records = [{**r, "cluster": "x"} for r in records_of(3)] if column == "cluster" else records_of(3)
    id_field = "id" if column == "cluster" else None
    with pytest.raises(gpudedup.errors.OutputError, match=re.escape(refusal)):
        gpudedup.dedup(pa.Table.from_pylist(records), id_field=id_field, threshold=THRESHOLD, backend="cpu",
                       output=tmp_path / "o", write_removed=True)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("how", ["staged", "index-add", "index-add-staged", "against", "against-staged",
                                 "against-cli"])
def test_a_run_over_files_refuses_such_columns_once_it_has_read_them(tmp_path, monkeypatch, how):
    """A run over files with a work directory (or against an index) knows the columns once it
    has read them (staged, in its signature stage): an ``id`` column that is not the run's ids,
    beside removed/, is refused then, before the pairs are sought, not after the whole run;
    nothing is written and nothing is added."""
    from gpudedup import stages

    seen: list[str] = []
    monkeypatch.setattr(stages, "announce_stage", seen.append)
    write_jsonl(tmp_path / "in.jsonl", records_of(3))
    staged = {"work_dir": tmp_path / "work"} if how.endswith("-staged") or how == "staged" else {}
    refusal = "column 'id', but the run's ids are not it"
    if how != "staged":
        index = gpudedup.Index.create(tmp_path / "idx", threshold=THRESHOLD)
    if how == "against-cli":
        assert_user_error(invoke("dedup", str(tmp_path / "in.jsonl"), "--against", str(tmp_path / "idx"), "-o",
                                 str(tmp_path / "o"), "--write-removed", "--backend", "cpu"), refusal,
                          out=tmp_path / "o")
    else:
        with pytest.raises(gpudedup.errors.OutputError, match=re.escape(refusal)):
            run = {"staged": gpudedup.dedup}.get(how) or (index.add if how.startswith("index-add") else index.dedup)
            extra = {"threshold": THRESHOLD} if how == "staged" else {}
            run(tmp_path / "in.jsonl", backend="cpu", output=tmp_path / "o", write_removed=True, **staged, **extra)
    assert "read" in seen and "candidates" not in seen and "verify" not in seen
    assert not (tmp_path / "o").exists()
    assert how == "staged" or gpudedup.Index(tmp_path / "idx").info()["documents"] == 0


@pytest.mark.parametrize("how", ["memory", "staged"])
def test_against_an_index_names_the_indexed_document(tmp_path, how):
    """dedup --against: a new document removed as a duplicate of an indexed one has that
    document's id as kept_id, and as jaccard the verified pair's where the two are one (the
    index keeps no text to compute it from), else null; in memory, and staged, where the
    verified pairs lie in the work directory's parts."""
    records = records_of(5)
    old, new = records[::2], [{**r, "id": f"new-{r['id']}"} for r in records]
    index = gpudedup.Index.create(tmp_path / "idx", threshold=THRESHOLD)
    index.add(pa.Table.from_pylist(old), id_field="id", backend="cpu")
    write_jsonl(tmp_path / "new.jsonl", new)
    staged = {"work_dir": tmp_path / "work"} if how == "staged" else {}
    result = index.dedup(tmp_path / "new.jsonl", id_field="id", backend="cpu", **staged)
    result.write(tmp_path / "out", write_removed=True)
    # Written by the call itself (output=), the same files.
    index.dedup(tmp_path / "new.jsonl", id_field="id", backend="cpu", output=tmp_path / "direct", write_removed=True,
                **({"work_dir": tmp_path / "work2"} if staged else {}))
    assert result_bytes(tmp_path / "direct") == result_bytes(tmp_path / "out")
    rows = read_rows(tmp_path / "out" / "removed" / "new.parquet")
    clusters = {row["id"]: row for row in result.clusters.to_pylist()}
    pairs = {(p["id_a"], p["id_b"]): p["jaccard"] for p in result.pairs.to_pylist()}
    texts = {r["id"]: r["text"] for r in old + new}
    indexed = [row for row in rows if not row["kept_id"].startswith("new-")]
    assert indexed and sorted(row["id"] for row in rows) == sorted(i for i, c in clusters.items()
                                                                    if not c["keep"])
    for row in rows:
        assert (row["kept_id"], row["cluster"]) == (clusters[row["id"]]["kept_id"], clusters[row["id"]]["cluster"])
        pair = pairs.get((min(row["id"], row["kept_id"]), max(row["id"], row["kept_id"])))
        if row in indexed:
            assert row["jaccard"] == pair  # (None where the two are no pair)
        else:
            assert row["jaccard"] == jaccard(shingle_set(texts[row["id"]]), shingle_set(texts[row["kept_id"]]))


@pytest.mark.parametrize("how", ["memory", "staged"])
def test_a_copy_of_a_document_paired_with_an_indexed_one_has_its_jaccard(tmp_path, how):
    """Against an index: two identical new documents near an indexed one are listed as the
    pair of the indexed one with the first copy and the copies' pair; the second copy pairs
    with the indexed one as the first does, and removed/ gives it that pair's Jaccard, as
    result.pair does (not null, as for documents joined through others)."""
    base = " ".join(f"w{i}" for i in range(60))
    index = gpudedup.Index.create(tmp_path / "idx", threshold=THRESHOLD)
    index.add(pa.table({"id": ["k0"], "text": [base]}), id_field="id", backend="cpu")
    write_jsonl(tmp_path / "new.jsonl", [{"id": f"n{i}", "text": base + " tail"} for i in range(2)])
    staged = {"work_dir": tmp_path / "work"} if how == "staged" else {}
    result = index.dedup(tmp_path / "new.jsonl", id_field="id", backend="cpu", **staged)
    result.write(tmp_path / "out", write_removed=True)
    rows = {row["id"]: row for row in read_rows(tmp_path / "out" / "removed" / "new.parquet")}
    expected = jaccard(shingle_set(base), shingle_set(base + " tail"))
    assert {i: (row["kept_id"], row["jaccard"]) for i, row in rows.items()} == {"n0": ("k0", expected),
                                                                                "n1": ("k0", expected)}
    assert result.pair("n1", "k0").verified


def test_index_add_writes_the_removed_rows_and_counts_by_group(corpus, tmp_path):
    """`index add --write-removed --group-field source` into an empty index: the same removed/
    as dedup's, and report.json counts each source's documents against the test's own count."""
    index = tmp_path / "idx"
    assert invoke("index", "create", index, "--threshold", THRESHOLD).exit_code == 0
    result = invoke("index", "add", index, corpus, "-o", tmp_path / "added", "--id-field", "id", "--backend", "cpu",
                    "--write-removed", "--group-field", "source", "--quiet")
    assert result.exit_code == 0, result.output
    records = input_records(corpus)
    check_removed(tmp_path / "added", records)
    groups = json.loads((tmp_path / "added" / "report.json").read_text(encoding="utf-8"))["groups"]
    assert groups["field"] == "source"
    expected = {}
    for record in records.values():
        expected[record["source"]] = expected.get(record["source"], 0) + 1
    assert {row["group"]: row["documents"] for row in groups["rows"]} == expected
