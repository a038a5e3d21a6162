"""The notebook API: gpudedup.dedup on strings, tables, data frames, Arrow streams and paths."""

from __future__ import annotations

import json
import random
import re
import string
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import gpudedup
from gpudedup import DedupResult, InputError, ParameterError
from gpudedup.cli import app
from output_support import kept_lines, result_tables


# --- helpers ------------------------------------------------------------------------------------


def paragraph(seed: int, words: int = 60) -> str:
    rng = random.Random(seed)
    return " ".join("".join(rng.choice(string.ascii_lowercase) for _ in range(7)) for _ in range(words))


def variant(text: str, last: str) -> str:
    """Last word replaced: J = 55/57 = 0.965 with word 5-grams over 60 words."""
    words = text.split()
    words[-1] = last
    return " ".join(words)


def planted_texts() -> list[str]:
    """Positions 2, 4, 6 are near-duplicates of 0, 3, 3."""
    a, c = paragraph(1), paragraph(3)
    return [a, paragraph(2), variant(a, "xxxxxxx"), c, variant(c, "yyyyyyy"), paragraph(4),
            variant(c, "zzzzzzz"), paragraph(5)]


EXPECTED_KEEP = [True, True, False, True, False, True, False, True]
EXPECTED_PAIRS = [(0, 2), (3, 4), (3, 6), (4, 6)]


def planted_table() -> pa.Table:
    texts = planted_texts()
    return pa.table({"doc_id": [f"d{i}" for i in range(len(texts))], "text": texts,
                     "n": list(range(len(texts))), "score": [i / 2 for i in range(len(texts))]})


def pair_list(result: DedupResult) -> list[tuple]:
    return list(zip(result.pairs["id_a"].to_pylist(), result.pairs["id_b"].to_pylist()))


def check_planted(result: DedupResult, ids=None) -> None:
    ids = ids or list(range(8))
    assert result.keep.dtype == np.bool_
    assert result.keep.shape == (8,)
    assert result.keep.tolist() == EXPECTED_KEEP
    assert pair_list(result) == sorted((ids[a], ids[b]) for a, b in EXPECTED_PAIRS)
    assert result.pairs.column_names == ["id_a", "id_b", "jaccard"]
    assert all(j == pytest.approx(55 / 57) for j in result.pairs["jaccard"].to_pylist())
    assert result.clusters.column_names == ["id", "cluster", "keep", "kept_id"]
    assert result.report["results"]["clusters"] == 2
    assert result.report["results"]["removed_documents"] == 3


def write_jsonl(path: Path, records) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


# --- input types --------------------------------------------------------------------------------


def test_list_of_strings():
    texts = planted_texts()
    result = gpudedup.dedup(texts)
    assert isinstance(result, DedupResult)
    check_planted(result)
    assert isinstance(result.deduplicated, list)
    assert result.deduplicated == [t for t, k in zip(texts, EXPECTED_KEEP) if k]
    # ids are positions
    assert result.pairs["id_a"].to_pylist() == [0, 3, 3, 4]
    assert result.clusters["id"].to_pylist() == [0, 2, 3, 4, 6]
    assert result.clusters["keep"].to_pylist() == [True, False, True, False, False]
    assert result.report["input"]["documents"] == 8
    assert "8 documents" in repr(result)


def test_the_arrays_a_result_hands_out_are_read_only(tmp_path):
    """keep, removed and checked_jaccard are the result's own: a caller's in-place edit (a mask
    narrowed with ``&=``) is refused, and deduplicated and the written rows stay the run's."""
    result = gpudedup.dedup(planted_texts(), backend="cpu", progress=False)
    for array in (result.keep, result.removed, result.checked_jaccard):
        with pytest.raises(ValueError, match="read-only"):
            array[...] = array[::-1]
    mask = result.keep
    with pytest.raises(ValueError, match="read-only"):
        mask &= np.zeros_like(mask)
    narrowed = result.keep.copy()
    narrowed[:] = False  # (a copy is the caller's to change)
    assert result.keep.tolist() == EXPECTED_KEEP
    assert result.deduplicated == [text for text, kept in zip(planted_texts(), EXPECTED_KEEP) if kept]
    result.write(tmp_path / "out", format="jsonl")
    written = [json.loads(line)["text"] for line in (tmp_path / "out" / "deduplicated.jsonl").read_text().splitlines()]
    assert written == result.deduplicated


def test_list_with_none_is_allowed():
    texts = planted_texts() + [None]
    result = gpudedup.dedup(texts)
    assert result.keep.tolist() == EXPECTED_KEEP + [True]
    assert result.report["input"]["null_texts"] == 1
    assert result.deduplicated[-1] is None


def test_tuple_of_strings():
    result = gpudedup.dedup(tuple(planted_texts()))
    assert result.keep.tolist() == EXPECTED_KEEP


def test_list_with_non_string_is_an_input_error():
    with pytest.raises(InputError) as info:
        gpudedup.dedup(["a b c", 42, "d e f"])
    message = str(info.value)
    assert re.search(r"\b1\b", message) and "int" in message and "string" in message, message


def test_unsupported_type_is_an_input_error():
    with pytest.raises(InputError, match="cannot deduplicate"):
        gpudedup.dedup(12345)


def test_pyarrow_table():
    table = planted_table()
    result = gpudedup.dedup(table)
    check_planted(result)
    assert isinstance(result.deduplicated, pa.Table)
    assert result.deduplicated.schema == table.schema
    assert result.deduplicated.to_pylist() == [r for r, k in zip(table.to_pylist(), EXPECTED_KEEP) if k]


def test_pyarrow_table_with_id_and_text_fields():
    table = planted_table().rename_columns(["doc_id", "body", "n", "score"])
    result = gpudedup.dedup(table, text_field="body", id_field="doc_id")
    check_planted(result, ids=[f"d{i}" for i in range(8)])
    assert result.clusters["id"].to_pylist() == ["d0", "d2", "d3", "d4", "d6"]


def test_pyarrow_large_string_and_chunked():
    table = planted_table()
    big = table.set_column(1, "text", table["text"].cast(pa.large_string()))
    chunked = pa.concat_tables([big.slice(0, 3), big.slice(3)])
    result = gpudedup.dedup(chunked)
    check_planted(result)


def test_record_batch():
    """A RecordBatch gives its kept rows back as one RecordBatch (none kept: its columns)."""
    batch = planted_table().to_batches()[0]
    result = gpudedup.dedup(batch)
    check_planted(result)
    assert isinstance(result.deduplicated, pa.RecordBatch) and result.deduplicated.schema == batch.schema
    assert result.deduplicated["n"].to_pylist() == [0, 1, 3, 5, 7]
    empty = gpudedup.dedup(batch.slice(0, 0)).deduplicated
    assert isinstance(empty, pa.RecordBatch) and empty.num_rows == 0 and empty.schema == batch.schema


def test_table_errors():
    table = planted_table()
    with pytest.raises(InputError, match="'content'"):
        gpudedup.dedup(table, text_field="content")
    with pytest.raises(InputError, match="'n'"):
        gpudedup.dedup(table, text_field="n")
    with pytest.raises(InputError, match="'nope'"):
        gpudedup.dedup(table, id_field="nope")
    dup = table.set_column(0, "doc_id", pa.array(["d0"] * 8))
    with pytest.raises(InputError, match="duplicate id 'd0'"):
        gpudedup.dedup(dup, id_field="doc_id")
    null = table.set_column(0, "doc_id", pa.array(["a", None] + [f"x{i}" for i in range(6)]))
    with pytest.raises(InputError, match="null"):
        gpudedup.dedup(null, id_field="doc_id")


class ArrowStream:
    """Not a pyarrow type: only the Arrow PyCapsule stream interface."""

    def __init__(self, table: pa.Table):
        self._table = table

    def __arrow_c_stream__(self, requested_schema=None):
        return self._table.__arrow_c_stream__(requested_schema)


def test_arrow_c_stream_object():
    table = planted_table()
    result = gpudedup.dedup(ArrowStream(table))
    check_planted(result)
    assert isinstance(result.deduplicated, pa.Table)
    assert result.deduplicated.column_names == table.column_names
    assert result.deduplicated["n"].to_pylist() == [0, 1, 3, 5, 7]


def test_record_batch_reader():
    table = planted_table()
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=3))
    result = gpudedup.dedup(reader)
    check_planted(result)
    assert result.deduplicated["n"].to_pylist() == [0, 1, 3, 5, 7]


def test_null_typed_text_column():
    """A text column of Arrow type null (every text missing) is allowed: nothing is a duplicate."""
    table = pa.table({"text": pa.nulls(3), "n": [1, 2, 3]})
    result = gpudedup.dedup(table)
    assert result.keep.tolist() == [True, True, True]
    assert result.report["input"]["null_texts"] == 3
    assert result.deduplicated["n"].to_pylist() == [1, 2, 3]


@pytest.mark.skipif(not hasattr(pa, "string_view"), reason="pyarrow without string_view")
def test_arrow_stream_with_string_view_text():
    """What polars and DuckDB export through __arrow_c_stream__: string_view columns."""
    table = planted_table()
    view = table.set_column(1, "text", table["text"].cast(pa.string_view()))
    result = gpudedup.dedup(ArrowStream(view))
    check_planted(result)
    assert result.deduplicated.num_rows == 5
    assert [str(t) for t in result.deduplicated["text"].to_pylist()] == [
        t for t, k in zip(planted_texts(), EXPECTED_KEEP) if k]
    # The kept and removed rows come in the caller's types, the texts as string_view too.
    assert result.deduplicated.schema == view.schema
    assert result.removed_rows()["text"].type == pa.string_view()


@pytest.mark.skipif(not hasattr(pa, "string_view"), reason="pyarrow without string_view")
def test_view_columns_beside_the_text_keep_their_type(tmp_path):
    """Columns of view types beside the text (string_view, binary_view, a struct, list or map
    of them: DuckDB's and polars' exports), which Arrow cannot filter: the kept and removed rows
    have them in their own types, and a Parquet file of them is written as any other."""
    table = planted_table()
    n = table.num_rows
    view = table.append_column("url", pa.array([f"u{i}" for i in range(n)], pa.string_view())) \
        .append_column("blob", pa.array([bytes([i]) for i in range(n)], pa.binary_view())) \
        .append_column("meta", pa.array([{"tag": f"t{i}"} for i in range(n)], pa.struct([("tag", pa.string_view())]))) \
        .append_column("tags", pa.array([[f"t{i}"] for i in range(n)], pa.list_(pa.string_view()))) \
        .append_column("pair", pa.array([[f"p{i}"] for i in range(n)], pa.list_(pa.string_view(), 1))) \
        .append_column("labels", pa.array([[(f"k{i}", f"v{i}")] for i in range(n)],
                                          pa.map_(pa.string_view(), pa.string_view())))
    result = gpudedup.dedup(view)
    check_planted(result)
    kept = result.deduplicated
    assert kept.schema == view.schema
    assert kept["url"].to_pylist() == [f"u{i}" for i, k in enumerate(EXPECTED_KEEP) if k]
    removed = result.removed_rows()
    assert removed.schema.field("tags").type == pa.list_(pa.string_view())
    assert removed["url"].to_pylist() == [f"u{i}" for i, k in enumerate(EXPECTED_KEEP) if not k]
    pq.write_table(view, tmp_path / "views.parquet")
    gpudedup.dedup(tmp_path / "views.parquet", output=tmp_path / "out")
    written = pq.read_table(tmp_path / "out" / "deduplicated" / "views.parquet")
    assert written["url"].to_pylist() == kept["url"].to_pylist()


def test_pandas_view_columns_keep_their_type():
    """pandas columns of Arrow view types (string_view, binary_view, and lists or structs of
    them), which neither Arrow's filter nor pandas' casts take: the kept and removed rows come
    back in them, with their own index, as a Series, a DataFrame and an Index."""
    pd = pytest.importorskip("pandas")
    table = planted_table()
    n, index = table.num_rows, [f"r{i}" for i in range(table.num_rows)]
    kept_index = [name for name, k in zip(index, EXPECTED_KEEP) if k]
    texts = pd.Series(table["text"].to_pylist(), dtype=pd.ArrowDtype(pa.string_view()), index=index, name="body")
    series = gpudedup.dedup(texts, progress=False)
    check_planted(series)
    assert series.deduplicated.dtype == texts.dtype and series.deduplicated.name == "body"
    assert list(series.deduplicated.index) == kept_index
    assert pa.array(series.deduplicated.array).to_pylist() == [t for t, k in zip(planted_texts(), EXPECTED_KEEP) if k]
    assert series.removed_rows().dtypes["body"] == texts.dtype
    frame = pd.DataFrame({
        "text": texts,
        "blob": pd.Series([bytes([i]) for i in range(n)], dtype=pd.ArrowDtype(pa.binary_view()), index=index),
        "n": pd.Series(range(n), index=index),
        "tags": pd.Series([[f"t{i}"] for i in range(n)], dtype=pd.ArrowDtype(pa.list_(pa.string_view())),
                          index=index)})
    result = gpudedup.dedup(frame, progress=False)
    check_planted(result)
    kept = result.deduplicated
    assert list(kept.columns) == list(frame.columns) and (kept.dtypes == frame.dtypes).all()
    assert list(kept.index) == kept_index
    assert pa.array(kept["tags"].array).to_pylist() == [[f"t{i}"] for i, k in enumerate(EXPECTED_KEEP) if k]
    removed = result.removed_rows()
    assert pa.array(removed["blob"].array).to_pylist() == [bytes([i]) for i, k in enumerate(EXPECTED_KEEP) if not k]
    as_index = gpudedup.dedup(pd.Index(texts.array, name="i"), progress=False).deduplicated
    assert isinstance(as_index, pd.Index) and as_index.dtype == texts.dtype and as_index.name == "i"
    # A row index of a view type (set_index on such a column) is filtered as the columns are.
    by_view = pd.DataFrame({"text": table["text"].to_pylist(), "n": range(n)}, index=pd.Index(texts.array, name="key"))
    kept = gpudedup.dedup(by_view, progress=False).deduplicated
    assert kept.index.dtype == texts.dtype and kept.index.name == "key"
    assert pa.array(kept.index.array).to_pylist() == [t for t, k in zip(planted_texts(), EXPECTED_KEEP) if k]


@pytest.mark.skipif(not hasattr(pa, "string_view"), reason="pyarrow without string_view")
@pytest.mark.parametrize("format", ["parquet", "jsonl"])
def test_a_table_given_in_python_is_written_in_its_own_types(tmp_path, format):
    """A table given in Python is written back in its columns' types, as its kept rows are
    given back and as a run over the same table in a Parquet file writes it: a dictionary text
    column and a string_view column stay so in deduplicated.parquet and removed.parquet."""
    table = planted_table()
    given = table.set_column(1, "text", table["text"].dictionary_encode()) \
        .append_column("url", pa.array([f"u{i}" for i in range(table.num_rows)], pa.string_view()))
    result = gpudedup.dedup(given)
    check_planted(result)
    result.write(tmp_path / "out", format=format, write_removed=True)
    kept, removed = (read_rows(tmp_path / "out" / f"{name}.{format}") for name in ("deduplicated", "removed"))
    if format == "parquet":
        assert kept.schema == given.schema
        assert removed.schema.names == given.schema.names + ["kept_id", "cluster", "jaccard"]
        assert [removed.schema.field(name).type for name in given.schema.names] == given.schema.types
    assert kept["url"].to_pylist() == [f"u{i}" for i, k in enumerate(EXPECTED_KEEP) if k]
    assert removed["text"].to_pylist() == [t for t, k in zip(planted_texts(), EXPECTED_KEEP) if not k]


@pytest.mark.skipif(not hasattr(pa, "string_view"), reason="pyarrow without string_view")
def test_a_table_s_view_dictionary_and_binary_view_columns_are_written(tmp_path):
    """A dictionary of string_view values (polars' Categorical through __arrow_c_stream__) is
    written as a dictionary of plain strings, which Parquet takes; binary_view values are
    written to JSONL as other bytes are (their text where UTF-8), not as Python's repr."""
    table = planted_table()
    n = table.num_rows
    given = table.append_column("cat", pa.DictionaryArray.from_arrays(
        pa.array([i % 2 for i in range(n)], pa.uint32()), pa.array(["p", "q"], pa.string_view()))) \
        .append_column("blob", pa.array([str(i).encode() for i in range(n)], pa.binary_view()))
    result = gpudedup.dedup(given)
    result.write(tmp_path / "parquet", write_removed=True)
    kept = pq.read_table(tmp_path / "parquet" / "deduplicated.parquet")
    assert kept.schema.field("cat").type == pa.dictionary(pa.uint32(), pa.string())
    assert kept["cat"].to_pylist() == ["pq"[i % 2] for i, k in enumerate(EXPECTED_KEEP) if k]
    result.write(tmp_path / "jsonl", format="jsonl")
    lines = (tmp_path / "jsonl" / "deduplicated.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["blob"] for line in lines] == [str(i) for i, k in enumerate(EXPECTED_KEEP) if k]


def read_rows(path: Path) -> pa.Table:
    """The rows of a Parquet or JSONL output file."""
    return pq.read_table(path) if path.suffix == ".parquet" else pa.Table.from_pylist(
        [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()])


def test_a_view_column_combines_with_the_plain_column_of_another_file(tmp_path):
    """An Arrow file of string_view columns (polars' write_ipc) beside a Parquet file of the same
    columns as large strings: the files combine, each keeps its own types, and a run with a work
    directory writes the same."""
    import pyarrow.ipc as ipc

    table = planted_table()
    half = table.num_rows // 2
    (tmp_path / "in").mkdir()
    views = table.slice(0, half)
    views = pa.table({name: views[name].cast(pa.string_view()) if pa.types.is_string(views[name].type)
                      else views[name] for name in views.column_names})
    with ipc.new_file(tmp_path / "in" / "a.arrow", views.schema) as writer:
        writer.write_table(views)
    pq.write_table(table.slice(half).cast(pa.schema([field.with_type(pa.large_string())
                                                      if pa.types.is_string(field.type) else field
                                                      for field in table.schema])), tmp_path / "in" / "b.parquet")
    memory = gpudedup.dedup(tmp_path / "in", output=tmp_path / "memory")
    staged = gpudedup.dedup(tmp_path / "in", output=tmp_path / "staged", work_dir=tmp_path / "work")
    assert memory.report["results"] == staged.report["results"] and memory.report["results"]["verified_pairs"]
    for name, kind in (("a", pa.string_view()), ("b", pa.large_string())):
        written = [pq.read_table(tmp_path / side / "deduplicated" / f"{name}.parquet") for side in ("memory", "staged")]
        assert written[0].equals(written[1]) and written[0].schema.field("text").type == kind


@pytest.mark.skipif(not hasattr(pa, "string_view"), reason="pyarrow without string_view")
def test_string_view_array_and_table_keep_their_type():
    table = planted_table()
    view = table.set_column(1, "text", table["text"].cast(pa.string_view()))
    kept = gpudedup.dedup(view).deduplicated
    assert kept.schema == view.schema
    assert kept["n"].to_pylist() == [0, 1, 3, 5, 7]
    texts = gpudedup.dedup(view["text"].combine_chunks()).deduplicated
    assert isinstance(texts, pa.Array) and texts.type == pa.string_view()  # (an Array, as given)
    assert texts.to_pylist() == [t for t, k in zip(planted_texts(), EXPECTED_KEEP) if k]


@pytest.mark.parametrize("arrow", [pa.array, lambda texts: pa.chunked_array([texts[:3], texts[3:]])])
def test_removed_rows_of_an_arrow_array_are_a_table(arrow):
    """An Arrow array of texts gives its removed rows as a Series does: a table of the texts
    (under "text") with id, kept_id, cluster and jaccard."""
    texts = planted_texts()
    removed = gpudedup.dedup(arrow(texts)).removed_rows()
    assert isinstance(removed, pa.Table)
    assert removed.column_names == ["text", "id", "kept_id", "cluster", "jaccard"]
    assert removed["id"].to_pylist() == [2, 4, 6]
    assert removed["text"].to_pylist() == [texts[2], texts[4], texts[6]]


@pytest.mark.parametrize("name, column", [("body", "body"), (None, "text")])
def test_removed_rows_of_a_series_are_a_frame_under_its_name(name, column):
    """A pandas or polars Series gives its removed rows as a DataFrame with the texts under the
    Series' name (as its deduplicated rows keep it), else under "text"."""
    import pandas as pd
    polars = pytest.importorskip("polars")
    texts = planted_texts()
    for series in (pd.Series(texts, name=name), polars.Series(name or "", texts)):
        result = gpudedup.dedup(series)
        removed = result.removed_rows()
        assert list(removed.columns) == [column, "id", "kept_id", "cluster", "jaccard"], type(series)
        assert list(removed[column]) == [texts[2], texts[4], texts[6]]
        assert (result.deduplicated.name or None) == name


def test_pandas_dataframe():
    import pandas as pd
    frame = planted_table().to_pandas()
    result = gpudedup.dedup(frame)
    check_planted(result)
    assert isinstance(result.deduplicated, pd.DataFrame)
    assert list(result.deduplicated.columns) == list(frame.columns)
    assert result.deduplicated["n"].tolist() == [0, 1, 3, 5, 7]
    assert result.deduplicated["text"].tolist() == [t for t, k in zip(frame["text"], EXPECTED_KEEP) if k]


@pytest.mark.parametrize("given", [list, iter])
def test_keep_is_aligned_with_the_records_given_when_some_are_left_out(given, tmp_path):
    """on_error="skip" leaves bad records out: ``keep`` and ``removed`` still speak of the
    records given (a record left out is not kept), so that the records where ``keep`` is True
    are those ``deduplicated`` holds, and the written rows are the same."""
    texts = planted_texts()
    records = [{"text": t, "n": n} for n, t in enumerate(texts)]
    records.insert(1, {"body": "no text field"})
    records.insert(4, "not a record")
    result = gpudedup.dedup(given(records), on_error="skip")
    assert len(result.skipped_records) == 2 and result.documents == len(texts)
    assert result.keep.shape == (len(records),)
    kept = [record for record, k in zip(records, result.keep) if k]
    assert [record["n"] for record in kept] == [0, 1, 3, 5, 7]
    deduplicated = result.deduplicated
    rows = deduplicated.to_pylist() if isinstance(deduplicated, pa.Table) else deduplicated
    assert [row["n"] for row in rows] == [0, 1, 3, 5, 7]
    assert [records[position]["n"] for position in result.removed] == [2, 4, 6]
    result.write(tmp_path / "out")
    assert pq.read_table(tmp_path / "out" / "deduplicated.parquet")["n"].to_pylist() == [0, 1, 3, 5, 7]


def test_a_repeated_id_in_data_passed_in():
    """Data passed in counts its rows from 0 in the repeated-id error, as in every other error
    about it; records (dicts) under on_error="skip" leave a repeated id's later records out,
    the first kept, as a file's lines are, each named in skipped_records."""
    import pandas as pd

    records = [{"text": t, "k": k} for t, k in zip(planted_texts(), "abcadefb")]
    for data, where in ((pd.DataFrame(records), "<table>"), (records, "<list>")):
        with pytest.raises(InputError, match=rf"duplicate id 'a': documents {where} row 0 \(from 0\), {where} "
                                             rf"row 3 \(from 0\) share it"):
            gpudedup.dedup(data, id_field="k")
    result = gpudedup.dedup(records, id_field="k", on_error="skip")
    assert [(r["line"], r["reason"]) for r in result.skipped_records] == [
        (3, "duplicate id 'a': the same id as record 0 (from 0), which is kept"),
        (7, "duplicate id 'b': the same id as record 1 (from 0), which is kept")]
    assert result.ids.to_pylist() == list("abcdef")
    assert result.keep.shape == (8,) and not result.keep[3] and not result.keep[7]


def test_kept_rows_are_those_of_the_input_as_it_was_read():
    """Changing the caller's list or frame after the run (sorting it, writing into it) does not
    change which rows ``deduplicated`` and ``removed_rows`` give, nor their contents."""
    texts = planted_texts()
    expected = [t for t, k in zip(texts, EXPECTED_KEEP) if k]
    given = list(texts)
    result = gpudedup.dedup(given)
    given.sort(reverse=True)
    given.append("one more")
    assert result.deduplicated == expected
    records = [{"text": t, "n": n} for n, t in enumerate(texts)]
    result = gpudedup.dedup(records)
    records.reverse()
    assert [row["text"] for row in result.deduplicated] == expected
    frame = planted_table().to_pandas()
    result = gpudedup.dedup(frame)
    frame.loc[0, "text"] = "changed"
    frame["n"] = frame["n"] * -1
    assert result.deduplicated["text"].tolist() == expected
    assert result.deduplicated["n"].tolist() == [0, 1, 3, 5, 7]
    assert result.removed_rows()["n"].tolist() == [2, 4, 6]


def test_a_pandas_index_of_texts_and_a_polars_lazy_frame():
    """A pandas Index of texts is taken as a Series is (its kept texts an Index); a polars
    LazyFrame, a query, is refused with the advice to collect it."""
    import pandas as pd
    import polars as pl

    texts = planted_texts()
    result = gpudedup.dedup(pd.Index(texts))
    assert isinstance(result.deduplicated, pd.Index)
    assert list(result.deduplicated) == [t for t, k in zip(texts, EXPECTED_KEEP) if k]
    assert result.removed_rows()["id"].tolist() == [2, 4, 6]
    with pytest.raises(InputError, match=r"LazyFrame is a query, not rows: collect\(\) it"):
        gpudedup.dedup(pl.LazyFrame({"text": texts}))


def test_pandas_non_string_text_is_an_input_error():
    import pandas as pd
    frame = pd.DataFrame({"text": ["a b c", 7, "d e f"]})
    with pytest.raises(InputError, match="text"):
        gpudedup.dedup(frame)


def test_pandas_all_none_text():
    import pandas as pd
    frame = pd.DataFrame({"text": [None, None], "n": [1, 2]})
    result = gpudedup.dedup(frame)
    assert result.keep.tolist() == [True, True]
    assert list(result.deduplicated["n"]) == [1, 2]


def test_pandas_dataframe_with_id_field():
    frame = planted_table().to_pandas()
    result = gpudedup.dedup(frame, id_field="doc_id")
    check_planted(result, ids=[f"d{i}" for i in range(8)])


def test_polars_dataframe():
    import polars as pl
    frame = pl.from_arrow(planted_table())
    result = gpudedup.dedup(frame)
    check_planted(result)
    assert isinstance(result.deduplicated, pl.DataFrame)
    assert result.deduplicated.columns == frame.columns
    assert result.deduplicated["n"].to_list() == [0, 1, 3, 5, 7]


def test_cudf_dataframe():
    cudf = pytest.importorskip("cudf", reason="cuDF is not installed (it needs a GPU; pip install 'gpudedup[cudf]')")
    frame = cudf.DataFrame.from_arrow(planted_table())
    result = gpudedup.dedup(frame)
    check_planted(result)
    assert isinstance(result.deduplicated, cudf.DataFrame)
    assert result.deduplicated["n"].to_arrow().to_pylist() == [0, 1, 3, 5, 7]


def test_hugging_face_dataset():
    import datasets
    ds = datasets.Dataset.from_dict(planted_table().to_pydict())
    result = gpudedup.dedup(ds)
    check_planted(result)
    assert result.deduplicated["n"] == [0, 1, 3, 5, 7]


def copies_dataset():
    """Six distinct documents u0..u5, then dup0 and dup1, identical copies of u0 and u1."""
    import datasets

    texts = [paragraph(10 + i) for i in range(6)]
    return datasets.Dataset.from_dict({"id": [f"u{i}" for i in range(6)] + ["dup0", "dup1"],
                                       "text": texts + texts[:2]})


DATASET_VIEWS = {
    "shuffle": lambda ds: ds.shuffle(seed=1),
    "filter": lambda ds: ds.filter(lambda row: row["id"] != "u5"),
    "train_test_split": lambda ds: ds.train_test_split(test_size=0.5, seed=0)["train"],
    "select_permutation": lambda ds: ds.select([7, 3, 0, 6, 1, 2, 5, 4]),
    "sort": lambda ds: ds.sort("id"),
    "shard": lambda ds: ds.shard(num_shards=2, index=0, contiguous=False),
}


@pytest.mark.parametrize("view", DATASET_VIEWS)
def test_a_hugging_face_dataset_is_deduplicated_over_the_rows_it_shows_in_its_order(view):
    """shuffle, filter, a split, select, sort and shard leave an indices mapping over the
    Dataset's table: the run and its kept rows are those of the rows the Dataset shows, as the
    same texts given as a list of strings (the oracle) give them."""
    import datasets

    datasets.disable_progress_bars()
    shown = DATASET_VIEWS[view](copies_dataset())
    ids, texts = shown["id"][:], shown["text"][:]
    result = gpudedup.dedup(shown, id_field="id", backend="cpu")
    oracle = gpudedup.dedup(list(texts), backend="cpu")
    assert result.keep.tolist() == oracle.keep.tolist()
    assert len(result.keep) == len(ids)
    # Of a document and its copy, the one the Dataset shows first is kept; nothing else goes.
    seen: set[str] = set()
    removed = [i for i, text in zip(ids, texts) if text in seen or seen.add(text)]
    assert [i for i, kept in zip(ids, result.keep) if not kept] == removed
    assert sorted(result.clusters.filter(pc.invert(result.clusters["keep"]))["id"].to_pylist()) == sorted(removed)
    assert set(result.clusters["id"].to_pylist()) <= set(ids)
    assert isinstance(result.deduplicated, datasets.Dataset)
    assert result.deduplicated["id"][:] == [i for i in ids if i not in removed]
    assert result.deduplicated["text"][:] == [t for t, kept in zip(texts, oracle.keep) if kept]


def test_the_review_s_shuffled_dataset_keeps_every_unique_document():
    """6 unique documents and 2 copies, shuffled (seed 1): the two copies shown after their
    originals are removed, in the clusters and in the kept rows alike."""
    import datasets

    datasets.disable_progress_bars()
    shown = copies_dataset().shuffle(seed=1)
    result = gpudedup.dedup(shown, id_field="id", backend="cpu")
    assert shown["id"][:] == ["u5", "u0", "u1", "u4", "u2", "dup0", "u3", "dup1"]
    assert result.clusters.filter(pc.invert(result.clusters["keep"]))["id"].to_pylist() == ["dup0", "dup1"]
    assert result.deduplicated["id"][:] == ["u5", "u0", "u1", "u4", "u2", "u3"]


# --- paths --------------------------------------------------------------------------------------


@pytest.fixture
def corpus_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    records = [{"text": t, "n": i} for i, t in enumerate(planted_texts())]
    write_jsonl(tmp_path / "corpus" / "a.jsonl", records[:5])
    pq.write_table(pa.Table.from_pylist(records[5:]), tmp_path / "corpus" / "b.parquet")
    return tmp_path / "corpus"


def test_pathlib_path_to_file(corpus_dir):
    result = gpudedup.dedup(Path("corpus/a.jsonl"))
    assert isinstance(result.deduplicated, pa.Table)
    assert result.keep.tolist() == [True, True, False, True, False]
    assert pair_list(result) == [("corpus/a.jsonl:1", "corpus/a.jsonl:3"),
                                 ("corpus/a.jsonl:4", "corpus/a.jsonl:5")]
    assert result.deduplicated.column_names == ["text", "n"]


def test_single_str_path_to_directory(corpus_dir):
    result = gpudedup.dedup("corpus")
    assert result.keep.tolist() == EXPECTED_KEEP
    assert isinstance(result.deduplicated, pa.Table)
    assert result.deduplicated["n"].to_pylist() == [0, 1, 3, 5, 7]
    removed = set(result.clusters.filter(pa.compute.invert(result.clusters["keep"]))["id"].to_pylist())
    assert removed == {"corpus/a.jsonl:3", "corpus/a.jsonl:5", "corpus/b.parquet:2"}


def test_list_of_paths(corpus_dir):
    result = gpudedup.dedup([Path("corpus/b.parquet"), Path("corpus/a.jsonl")])
    # file order is the order given; in this order, n=6 comes before n=3 and n=4
    assert result.table["n"].to_pylist() == [5, 6, 7, 0, 1, 2, 3, 4]
    # (rows 6, 3 and 4 form a cluster whose first row is now 6)
    assert result.deduplicated["n"].to_pylist() == [5, 6, 7, 0, 1]


def test_missing_path_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        gpudedup.dedup(tmp_path / "missing.jsonl")


# --- write --------------------------------------------------------------------------------------


def test_write_matches_cli(corpus_dir, output_names):
    base = corpus_dir.parent
    cli = CliRunner().invoke(app, ["dedup", "corpus", "-o", "cli-out", "-q", "--backend", "cpu"])
    assert cli.exit_code == 0, cli.output
    result = gpudedup.dedup(Path("corpus"), backend="cpu")
    written = result.write("api-out")
    assert written == Path("api-out")
    names = sorted(p.name for p in (base / "cli-out").iterdir())
    assert names == output_names
    assert sorted(p.name for p in (base / "api-out").iterdir()) == names
    cli_tables = result_tables(base / "cli-out")
    for name, table in result_tables(base / "api-out").items():
        assert table.equals(cli_tables[name]), name
    api_report = json.loads((base / "api-out" / "report.json").read_text())
    cli_report = json.loads((base / "cli-out" / "report.json").read_text())
    assert set(api_report) == set(cli_report)
    for key in ["input", "parameters", "results", "backend", "gpudedup_version"]:
        assert api_report[key] == cli_report[key], key
    # (a first run after an install has a "compile" stage: whichever of the two compiles)
    assert set(api_report["stages"]) - {"compile"} == set(cli_report["stages"]) - {"compile"}
    assert api_report["output"]["format"] == "parquet"


def test_write_jsonl_and_overwrite(tmp_path):
    texts = planted_texts()
    result = gpudedup.dedup(texts)
    out = tmp_path / "out"
    result.write(out, format="jsonl")
    rows = [json.loads(line) for line in kept_lines(out)]
    assert rows == [{"text": t} for t, k in zip(texts, EXPECTED_KEEP) if k]
    with pytest.raises(gpudedup.OutputError, match="holds a finished gpudedup output"):
        result.write(out)
    result.write(out, overwrite=True)
    assert (out / "deduplicated.parquet").is_file() and not (out / "deduplicated.jsonl").exists()
    assert not list(tmp_path.glob(".out.*"))


def test_write_bad_format(tmp_path):
    result = gpudedup.dedup(planted_texts())
    with pytest.raises(ParameterError, match="format"):
        result.write(tmp_path / "out", format="csv")
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(".out.*"))


@pytest.mark.parametrize("option", [{"format": "jsonl"}, {"overwrite": True}, {"single_file": True},
                                    {"write_removed": True}])
def test_how_to_write_an_output_without_one_is_refused(tmp_path, option):
    """An option of how output= is written, given without output=, would be dropped (a result
    written later takes its own): refused before the run, by dedup and by Index.add, with the
    way to give it."""
    (name,) = option
    index = gpudedup.Index.create(tmp_path / "index")
    for run in (gpudedup.dedup, index.add):
        with pytest.raises(ParameterError, match=rf"^{name}= says how output= is written, and no output= is given: "
                                                 r"give output=, or pass it to result\.write\(\)$"):
            run(planted_texts(), backend="cpu", **option)
    assert index.info()["documents"] == 0
    with pytest.raises(ParameterError, match=r"^format= and write_removed= say how output= is written"):
        gpudedup.dedup(planted_texts(), backend="cpu", format="jsonl", write_removed=True)


# --- parameters ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, name", [
    ({"threshold": 0}, "threshold"),
    ({"threshold": 1.5}, "threshold"),
    ({"threshold": "0.8"}, "threshold"),
    ({"ngram": 0}, "ngram"),
    ({"ngram": 2.5}, "ngram"),
    ({"num_perm": 0}, "num_perm"),
    ({"num_perm": 5000}, "num_perm"),
    ({"bands": 4}, "bands"),
    ({"rows": 4}, "rows"),
    ({"bands": 20, "rows": 10}, "bands x rows"),
    ({"shingle": "sentence"}, "shingle"),
    ({"keep": "last"}, "keep"),
    ({"seed": -1}, "seed"),
    ({"bucket_window": 0}, "bucket_window"),
    ({"batch_bytes": 0}, "batch_bytes"),
    ({"batch_rows": 0}, "batch_rows"),
    ({"backend": "tpu"}, "backend"),
    ({"threshold": True}, "threshold"),  # (a bool is not a number here)
    ({"ngram": 2**70}, "ngram"),  # (past int64: numpy's arrays would overflow)
    ({"bucket_window": 2**70}, "bucket_window"),
    ({"seed": 2**64}, "seed"),
])
def test_bad_parameters(kwargs, name):
    with pytest.raises(ParameterError) as info:
        gpudedup.dedup(planted_texts(), **kwargs)
    assert name in str(info.value)
    assert isinstance(info.value, ValueError)


def test_numpy_scalars_are_taken_as_numbers():
    """A notebook's numpy scalars (``for n in np.arange(3, 8)``) give the run of the same Python
    numbers, and the report holds Python's numbers."""
    texts = planted_texts()
    numbered = gpudedup.dedup(texts, threshold=np.float32(0.75), ngram=np.int64(3), num_perm=np.int32(64),
                              seed=np.uint64(2**64 - 1), max_fn=np.float64(0.02), progress=False)
    plain = gpudedup.dedup(texts, threshold=float(np.float32(0.75)), ngram=3, num_perm=64, seed=2**64 - 1,
                           max_fn=0.02, progress=False)
    assert numbered.pairs.equals(plain.pairs) and numbered.clusters.equals(plain.clusters)
    assert numbered.report.parameters == plain.report.parameters
    assert {type(numbered.report.parameters[name]) for name in ("threshold", "max_fn")} == {float}
    assert {type(numbered.report.parameters[name]) for name in ("ngram", "num_perm", "seed")} == {int}
    # np.float32(0.8) is 0.8 as typed (not 0.800000011920929): a pair at exactly 0.8 is found.
    exact = {"ngram": 1, "bands": 32, "rows": 1, "num_perm": 32, "progress": False}
    assert gpudedup.dedup(["a b c d", "a b c d e"], threshold=np.float32(0.8), **exact).pairs.num_rows == 1


def test_parameters_checked_before_reading(tmp_path):
    # a bad parameter is reported even when the input is bad too
    with pytest.raises(ParameterError):
        gpudedup.dedup(tmp_path / "missing.jsonl", threshold=2)


# --- behaviour ----------------------------------------------------------------------------------


def test_import_does_not_import_gpu_modules():
    code = (
        "import sys, gpudedup\n"
        "gpudedup.dedup(['a b c d e f', 'a b c d e g'], backend='cpu')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('cupy', 'cudf', 'cupyx'))\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_keep_longest():
    base = paragraph(7)
    longer, longest = base + " extraone", base + " extraone extratwo"
    texts = [longer, paragraph(8), longest, base]
    result = gpudedup.dedup(texts, keep="longest")
    assert result.keep.tolist() == [False, True, True, False]
    assert result.deduplicated == [paragraph(8), longest]
    kept = result.clusters.filter(result.clusters["keep"])["id"].to_pylist()
    assert kept == [2]
    first = gpudedup.dedup(texts, keep="first")
    assert first.keep.tolist() == [True, True, False, False]


def test_keep_longest_ties_keep_the_first():
    base = paragraph(9)
    texts = [variant(base, "aaaaaaa"), variant(base, "bbbbbbb"), variant(base, "ccccccc")]
    result = gpudedup.dedup(texts, keep="longest")
    assert result.keep.tolist() == [True, False, False]


def test_deterministic():
    texts = many_texts(60)
    one = gpudedup.dedup(texts)
    two = gpudedup.dedup(texts)
    assert one.pairs.equals(two.pairs)
    assert one.clusters.equals(two.clusters)
    assert np.array_equal(one.keep, two.keep)
    assert one.report["results"] == two.report["results"]


def test_seed_changes_nothing_for_clear_duplicates():
    texts = planted_texts()
    assert gpudedup.dedup(texts, seed=1).keep.tolist() == gpudedup.dedup(texts, seed=2).keep.tolist()


def many_texts(groups: int) -> list[str]:
    """groups * 4 documents: per group an original, two near-copies and one unrelated text,
    interleaved across groups."""
    texts = []
    for g in range(groups):
        base = paragraph(1000 + g)
        texts += [base, paragraph(5000 + g), variant(base, f"q{g:06d}"), variant(base, f"r{g:06d}")]
    rng = random.Random(3)
    rng.shuffle(texts)
    return texts


def test_batch_size_does_not_change_results():
    texts = many_texts(75)  # 300 documents, about 480 bytes each
    default = gpudedup.dedup(texts, backend="cpu")
    small = gpudedup.dedup(texts, backend="cpu", batch_bytes=1000)
    tiny_rows = gpudedup.dedup(texts, backend="cpu", batch_rows=7)
    assert default.report["results"]["clusters"] == 75
    assert default.report["results"]["removed_documents"] == 150
    for other in (small, tiny_rows):
        assert other.pairs.equals(default.pairs)
        assert other.clusters.equals(default.clusters)
        assert np.array_equal(other.keep, default.keep)
        assert other.report["results"] == default.report["results"]


def test_empty_and_short_documents():
    texts = ["", "   ", None, "one two", "one two"] + planted_texts()
    result = gpudedup.dedup(texts)
    assert result.keep.shape == (13,)
    assert result.keep[5:].tolist() == EXPECTED_KEEP
    assert result.keep[:3].all()  # empty documents are never duplicates
    assert result.report["input"]["empty_documents"] >= 3


def test_empty_list():
    result = gpudedup.dedup([])
    assert result.keep.shape == (0,)
    assert result.deduplicated == []
    assert result.pairs.num_rows == 0 and result.clusters.num_rows == 0


def test_backend_cpu_matches_auto():
    texts = planted_texts()
    assert gpudedup.dedup(texts, backend="cpu").pairs.equals(gpudedup.dedup(texts).pairs)


def test_report_balance_accounts_for_every_record():
    texts = ["a b c d e f g", "a b c d e f g", "", None, "   ", "x y z w v u t", "a b c d e f g"]
    result = gpudedup.dedup(texts, backend="cpu")
    assert result.report["balance"] == {"input_records": 7, "kept": 2, "kept_empty": 3,
                                        "removed_duplicates": 2, "skipped": 0, "balanced": True}
    clusters = result.clusters.to_pydict()
    assert clusters["kept_id"] == [0, 0, 0] and clusters["keep"] == [True, False, False]
