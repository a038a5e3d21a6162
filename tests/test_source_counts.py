"""Where duplicates come from (pipeline/sourcecounts.py): report.json's per-file counts
(input.files[]) and, with group_field, the counts by a column's values and the matrix of which
groups' documents were removed as duplicates of which, checked against counts made here from
the input files and the run's clusters table, in memory, staged and on Dask (equal reports)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import gpudedup
from gpudedup.pipeline.sourcecounts import MAX_GROUPS
from gpudedup.errors import InputError

WORDS = [f"w{n}" for n in range(5000)]


def corpus_files(folder: Path) -> list[Path]:
    """Three JSONL files with copies and near copies within and across them, a source column
    (null in some records, absent from others) and texts of several UTF-8 widths."""
    rng = np.random.default_rng(3)
    bases = [" ".join(WORDS[i] for i in rng.integers(0, len(WORDS), 60)) + " é€𝄞" * (n % 3) for n in range(12)]
    sources = ["web", "books", None, "code"]
    files = [[], [], []]
    number = 0
    for n, base in enumerate(bases):
        for copy in range(n % 4 + 1):  # 1 to 4 copies, spread over the files
            text = base if copy % 2 == 0 else base + " tail"
            record = {"id": f"d{number}", "text": text, "lang": "en"}
            source = sources[(n + copy) % len(sources)]
            if not (number % 7 == 3):  # (some records lack the field: a null group too)
                record["source"] = source
            files[(n + 2 * copy) % 3].append(record)
            number += 1
    paths = []
    for index, records in enumerate(files):
        path = folder / f"part{index}.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
        paths.append(path)
    return paths


def expected(paths: list[Path], clusters, field: str = "source") -> tuple[list[dict], dict, dict]:
    """(per-file counts, per-group counts, matrix {(removed group, kept group): n}) made from
    the files and the clusters table (id, keep, kept_id)."""
    docs = {}
    for file, path in enumerate(paths):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            docs[record["id"]] = (file, record.get(field), len(record["text"].encode("utf-8")))
    table = clusters.to_pylist()
    kept_of = {row["id"]: row["kept_id"] for row in table if not row["keep"]}
    files = [dict(documents=0, kept=0, removed=0, removed_within=0, removed_across=0, bytes=0, kept_bytes=0)
             for _ in paths]
    groups: dict = {}
    matrix: dict = {}
    for doc, (file, group, size) in docs.items():
        row = groups.setdefault(group, dict(documents=0, kept=0, removed=0, removed_within=0, removed_across=0,
                                            bytes=0, kept_bytes=0))
        kept = docs[kept_of[doc]] if doc in kept_of else None
        for counts, same in ((files[file], kept is not None and kept[0] == file),
                             (row, kept is not None and kept[1] == group)):
            counts["documents"] += 1
            counts["bytes"] += size
            if kept is not None:
                counts["removed"] += 1
                counts["removed_within" if same else "removed_across"] += 1
            else:
                counts["kept"] += 1
                counts["kept_bytes"] += size
        if doc in kept_of:
            key = (group, docs[kept_of[doc]][1])
            matrix[key] = matrix.get(key, 0) + 1
    return files, groups, matrix


def reported(report) -> tuple[list[dict], dict, dict]:
    """The same three from a report."""
    names = ("documents", "kept", "removed", "removed_within", "removed_across", "bytes", "kept_bytes")
    files = [{name: f[name] for name in names} for f in report["input"]["files"]]
    g = report["groups"]
    groups = {row["group"]: {name: row[name] for name in names} for row in g["rows"]}
    matrix = {(g["rows"][i]["group"], g["rows"][j]["group"]): count
              for i, line in enumerate(g["matrix"]) for j, count in enumerate(line) if count}
    return files, groups, matrix


def test_files_and_groups_in_memory_staged_and_on_dask(tmp_path, client):
    paths = corpus_files(tmp_path)
    common = dict(id_field="id", threshold=0.7, group_field="source")
    memory = gpudedup.dedup(paths, **common)
    want = expected(paths, memory.clusters)
    assert want[1][None]["documents"] > 0 and any(v for (a, b), v in want[2].items() if a != b)
    assert any(f["removed_within"] for f in want[0]) and any(f["removed_across"] for f in want[0])
    assert reported(memory.report) == want
    staged = gpudedup.dedup(paths, work_dir=tmp_path / "work", **common)
    dask = gpudedup.dedup(paths, work_dir=tmp_path / "dwork", client=client, **common)
    for other in (staged, dask):
        assert other.report["input"]["files"] == memory.report["input"]["files"]
        assert other.report["groups"] == memory.report["groups"]
    assert memory.report["groups"]["field"] == "source" and memory.report["groups"]["count"] == len(want[1])
    removed = [row["removed"] for row in memory.report["groups"]["rows"]]
    assert removed == sorted(removed, reverse=True)


def test_files_counted_without_a_group_column(tmp_path):
    paths = corpus_files(tmp_path)
    result = gpudedup.dedup(paths, id_field="id", threshold=0.7)
    assert "groups" not in result.report
    files, _, _ = expected(paths, result.clusters)
    assert [{k: f[k] for k in files[0]} for f in result.report["input"]["files"]] == files
    assert sum(f["removed"] for f in files) == result.report["results"]["removed_documents"]


def test_tokens_with_token_shingles():
    rng = np.random.default_rng(5)
    base = [rng.integers(0, 50_000, 80).tolist() for _ in range(6)]
    records = [{"input_ids": ids, "lang": lang} for ids in base for lang in ("en", "de")]
    result = gpudedup.dedup(records, shingle="token", ngram=3, group_field="lang")
    (entry,) = result.report["input"]["files"]
    assert entry["tokens"] == sum(len(r["input_ids"]) for r in records) and "bytes" not in entry
    assert entry["kept_tokens"] == sum(len(ids) for ids in base)
    rows = {row["group"]: row for row in result.report["groups"]["rows"]}
    assert rows["de"]["removed"] == 6 and rows["de"]["removed_across"] == 6 and rows["en"]["removed"] == 0
    assert result.report["groups"]["matrix"] == [[0, 6], [0, 0]]


def test_a_group_column_no_input_has_is_named_before_the_run(tmp_path):
    """A group field no input has (a name mistyped) is refused before the run; a file without
    it counts its documents as null, as a record without it does, in memory and staged."""
    paths = corpus_files(tmp_path)
    for where in ({}, {"work_dir": tmp_path / "work"}):
        with pytest.raises(InputError, match=r"part0\.jsonl: no field 'sourc' to count by, nor in any other input"):
            gpudedup.dedup(paths, id_field="id", group_field="sourc", **where)
    with pytest.raises(InputError, match="no field 'nope'"):
        gpudedup.dedup(["a b c", "a b c"], group_field="nope")
    paths[1].write_text(json.dumps({"id": "x", "text": "a text of its own here"}) + "\n", encoding="utf-8")
    reports = [gpudedup.dedup(paths, id_field="id", group_field="source", backend="cpu", **where).report
               for where in ({}, {"work_dir": tmp_path / "work2"})]
    assert reports[0]["groups"] == reports[1]["groups"]
    rows = {row["group"]: row["documents"] for row in reports[0]["groups"]["rows"]}
    assert sum(rows.values()) == reports[0]["input"]["documents"] and rows.get(None, 0) >= 1


def test_many_groups_fold_into_other():
    records = [{"text": f"words of document {n // 2} here and there", "g": f"g{n}"} for n in range(130)]
    groups = gpudedup.dedup(records, ngram=2, group_field="g").report["groups"]
    assert groups["count"] == 130 and len(groups["rows"]) == MAX_GROUPS
    other = groups["rows"][-1]
    assert other["other"] is True and other["groups"] == 130 - MAX_GROUPS + 1
    assert sum(row["documents"] for row in groups["rows"]) == 130
    assert sum(map(sum, groups["matrix"])) == sum(row["removed"] for row in groups["rows"]) == 65
    assert len(groups["matrix"]) == MAX_GROUPS and all(len(line) == MAX_GROUPS for line in groups["matrix"])


def test_float_groups_nan_infinities_and_signed_zeros(tmp_path):
    """Float group values JSON has no number for are groups by their text, every NaN one group;
    0.0 and -0.0 (equal numbers) are one group; the groups' documents add up to the input's,
    in memory and staged, and report.json is strict JSON."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    same, other = "a b c d e f g h i j", "p q r s t u v w x y"
    values = [float("nan"), float("nan"), 0.0, -0.0, -0.0, float("inf"), float("-inf"), 1.0]
    texts = [same, same, other, other, "k l m n o p q", same + " z", "x y z w v u t", "one two three four five"]
    path = tmp_path / "floats.parquet"
    pq.write_table(pa.table({"text": texts, "g": values}), path)
    reports = [gpudedup.dedup(path, group_field="g", backend="cpu", **options).report
               for options in ({}, {"work_dir": tmp_path / "work"})]
    groups = reports[0]["groups"]
    assert reports[1]["groups"] == groups
    counts = {row["group"]: row["documents"] for row in groups["rows"]}
    assert counts == {"nan": 2, 0.0: 3, "inf": 1, "-inf": 1, 1.0: 1}
    assert sum(counts.values()) == len(texts) == groups["count"] + 3
    json.loads(json.dumps(reports[0].as_dict(), allow_nan=False))
