"""Data as notebooks hold it (io.python_inputs.to_corpus): iterables of texts or of records (generators, map
objects), lists of records, Hugging Face IterableDatasets, pandas and polars Series, each
against the same data as a list of strings, a pyarrow Table or a JSONL file; and the kinds
refused with one line (a DatasetDict, a Series of numbers, a work directory for data in memory)."""

from __future__ import annotations

import datetime
import json
import random
import re
import string
import zoneinfo
from pathlib import Path

import pyarrow as pa
import pytest

import gpudedup
import gpudedup.io.python_inputs
from gpudedup import DedupResult, InputError, ParameterError

datasets = pytest.importorskip("datasets", reason="Hugging Face datasets is not installed (pip install -e '.[dev]')")
pandas = pytest.importorskip("pandas", reason="pandas is not installed (pip install -e '.[dev]')")
polars = pytest.importorskip("polars", reason="polars is not installed (pip install -e '.[dev]')")

# Small batches, so that every input here is read in several (python_inputs.BATCH_ITEMS is 10,000).
BATCH = 7


@pytest.fixture(autouse=True)
def small_batches(monkeypatch):
    monkeypatch.setattr(gpudedup.io.python_inputs, "BATCH_ITEMS", BATCH)


def paragraph(seed: int, words: int = 40) -> str:
    rng = random.Random(seed)
    return " ".join("".join(rng.choice(string.ascii_lowercase) for _ in range(6)) for _ in range(words))


def variant(text: str, last: str) -> str:
    """The last word replaced: word 5-grams keep 35 of 37 (J = 0.95)."""
    words = text.split()
    words[-1] = last
    return " ".join(words)


def corpus_texts() -> list:
    """24 texts (three batches and more) with near-duplicates planted across batches, a None
    and an empty text."""
    texts: list = [paragraph(seed) for seed in range(20)]
    texts[9] = variant(texts[1], "qqqqqq")  # a pair across the first two batches
    texts[16] = variant(texts[1], "rrrrrr")  # and a third member in the third
    texts[15] = variant(texts[14], "ssssss")
    texts[5] = None
    texts[11] = ""
    return texts + [variant(texts[3], "tttttt"), paragraph(30), paragraph(31), variant(texts[14], "uuuuuu")]


def corpus_records() -> list[dict]:
    return [{"id": f"doc-{i}", "text": text, "n": i, "meta": {"source": f"s{i % 3}"}}
            for i, text in enumerate(corpus_texts())]


def pairs_and_clusters(result: DedupResult) -> tuple[list, list]:
    return result.pairs.to_pylist(), result.clusters.to_pylist()


def kept_texts(result: DedupResult) -> list:
    kept = result.deduplicated
    return kept["text"].to_pylist() if isinstance(kept, pa.Table) else list(kept)


@pytest.fixture(scope="module")
def by_position() -> DedupResult:
    """The reference for texts: the list of strings (ids are positions)."""
    return gpudedup.dedup(corpus_texts(), backend="cpu")


@pytest.fixture(scope="module")
def by_id() -> DedupResult:
    """The reference for records: the same records as a pyarrow Table, ids from "id"."""
    return gpudedup.dedup(pa.Table.from_pylist(corpus_records()), id_field="id", backend="cpu")


def test_the_reference_finds_the_planted_clusters(by_position, by_id):
    assert by_position.report["results"]["clusters"] == 3
    assert [set(c) for c in by_position.clusters.group_by("cluster").aggregate([("id", "list")])["id_list"]
            .to_pylist()] == [{1, 9, 16}, {3, 20}, {14, 15, 23}]
    assert pairs_and_clusters(by_id)[1] == [{**row, "id": f"doc-{row['id']}", "kept_id": f"doc-{row['kept_id']}"}
                                            for row in by_position.clusters.to_pylist()]


@pytest.mark.parametrize("make", [
    lambda texts: (text for text in texts),
    lambda texts: iter(texts),
    lambda texts: map(lambda text: text, texts),
    lambda texts: tuple(texts),
], ids=["generator", "iterator", "map", "tuple"])
def test_an_iterable_of_strings_gives_what_the_list_gives(by_position, make):
    result = gpudedup.dedup(make(corpus_texts()), backend="cpu")
    assert pairs_and_clusters(result) == pairs_and_clusters(by_position)
    assert result.deduplicated == by_position.deduplicated  # a list of the kept strings
    assert result.report["input"]["documents"] == 24 and result.report["input"]["null_texts"] == 1


def test_a_generator_of_token_id_lists_gives_what_the_list_gives():
    rng = random.Random(7)
    lists = [[rng.randrange(50_000) for _ in range(30)] for _ in range(12)]
    lists[8] = lists[2][:-1] + [7]
    lists[4] = None
    reference = gpudedup.dedup(lists, shingle="token", ngram=3, backend="cpu")
    result = gpudedup.dedup((ids for ids in lists), shingle="token", ngram=3, backend="cpu")
    assert reference.report["results"]["clusters"] == 1
    assert pairs_and_clusters(result) == pairs_and_clusters(reference)
    assert result.deduplicated == reference.deduplicated


@pytest.mark.parametrize("kind", ["generator", "list", "map"])
def test_records_give_what_the_table_gives(by_id, kind):
    records = corpus_records()
    data = {"generator": (r for r in records), "list": records, "map": map(dict, records)}[kind]
    result = gpudedup.dedup(data, id_field="id", backend="cpu")
    assert pairs_and_clusters(result) == pairs_and_clusters(by_id)
    kept = result.deduplicated
    if kind == "list":  # the kept records themselves
        assert kept == [records[i] for i in range(len(records)) if by_id.keep[i]]
        assert all(a is b for a, b in zip(kept, (r for r, k in zip(records, by_id.keep) if k)))
    else:  # read once and not held: the kept rows as a table, every field a column
        assert isinstance(kept, pa.Table)
        assert kept.to_pylist() == by_id.deduplicated.to_pylist()


def test_records_give_what_their_jsonl_file_gives(tmp_path, by_id):
    """An independent reference: the same records as JSON Lines, read by the file reader."""
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in corpus_records()), encoding="utf-8")
    from_file = gpudedup.dedup(path, id_field="id", backend="cpu")
    from_generator = gpudedup.dedup((r for r in corpus_records()), id_field="id", backend="cpu")
    assert pairs_and_clusters(from_generator) == pairs_and_clusters(from_file)
    assert kept_texts(from_generator) == kept_texts(from_file)
    # Without an id field, ids are positions (from 0) for records passed in.
    by_position = gpudedup.dedup((r for r in corpus_records()), backend="cpu")
    assert by_position.clusters["id"].to_pylist() == [int(i.removeprefix("doc-")) for i in from_file.clusters["id"]
                                                      .to_pylist()]


def test_an_iterable_dataset_gives_what_the_dataset_gives(by_id):
    records = corpus_records()
    streaming = datasets.Dataset.from_list(records).to_iterable_dataset(num_shards=3)
    result = gpudedup.dedup(streaming, id_field="id", backend="cpu")
    assert pairs_and_clusters(result) == pairs_and_clusters(by_id)
    assert isinstance(result.deduplicated, pa.Table)  # the kept rows of a stream read once
    assert result.deduplicated.select(["id", "text", "n"]).to_pylist() == \
        by_id.deduplicated.select(["id", "text", "n"]).to_pylist()
    # One made from a generator (features unknown until read) and one shuffled as it streams.
    generated = datasets.IterableDataset.from_generator(lambda: iter(records))
    assert pairs_and_clusters(gpudedup.dedup(generated, id_field="id", backend="cpu")) == pairs_and_clusters(by_id)
    shuffled = streaming.shuffle(seed=3, buffer_size=5)
    in_order = gpudedup.dedup(pa.Table.from_pylist(list(shuffled)), id_field="id", backend="cpu")
    assert in_order.table["id"].to_pylist() != by_id.table["id"].to_pylist()
    result = gpudedup.dedup(shuffled, id_field="id", backend="cpu")
    assert pairs_and_clusters(result) == pairs_and_clusters(in_order)
    assert result.deduplicated.to_pylist() == in_order.deduplicated.to_pylist()


def test_an_empty_iterable_is_an_empty_run():
    assert gpudedup.dedup(iter([]), backend="cpu").report["input"]["documents"] == 0
    features = datasets.Features({"text": datasets.Value("string")})
    for known in (features, None):
        empty = datasets.IterableDataset.from_generator(lambda: iter([]), features=known)
        assert gpudedup.dedup(empty, backend="cpu").report["input"]["documents"] == 0


# --- bad records --------------------------------------------------------------------------------


def records_with_bad_ones() -> tuple[list, dict[int, str]]:
    """The corpus's records with bad ones put in, and (position: part of the reason) of each."""
    records: list = corpus_records()
    bad = {
        2: ({"id": "x-2", "body": "no text field"}, "no field 'text' (its fields: id, body)"),
        8: ({"id": "x-8", "text": 12}, "field 'text' holds a value of type int"),
        10: ({"text": "an id is missing"}, "id field 'id' is missing or null"),
        13: ("a string among records", "expected a dict (a record), got a value of type str"),
        17: ({"id": "x-17", "text": "a field of another type", "n": "seventeen"},
             "field 'n' is string, but int64 in the records before it"),
        26: ({"id": 2**64, "text": "a large id"}, "outside the range of integer ids"),
        27: ({"id": "x-27", "text": [1, -2]}, "token id -2, out of range"),
    }
    for position in sorted(bad):
        records.insert(position, bad[position][0])
    return records, {position: reason for position, (_, reason) in bad.items()}


def test_bad_records_are_skipped_and_named_by_position(by_id, tmp_path):
    records, reasons = records_with_bad_ones()
    result = gpudedup.dedup((r for r in records), id_field="id", on_error="skip", backend="cpu")
    result.write(tmp_path / "out")
    assert pairs_and_clusters(result) == pairs_and_clusters(by_id)
    assert result.deduplicated.select(["id", "text"]).to_pylist() == \
        by_id.deduplicated.select(["id", "text"]).to_pylist()
    skipped = result.skipped_records
    assert [entry["line"] for entry in skipped] == sorted(reasons)
    for entry in skipped:
        assert entry["file"] == "<iterable>" and reasons[entry["line"]] in entry["reason"], entry
    assert result.report["balance"]["skipped"] == len(reasons) and result.report["balance"]["balanced"]
    written = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert written == skipped
    # A list of records: the same, its kept rows being the kept records themselves.
    listed = gpudedup.dedup(records, id_field="id", on_error="skip", backend="cpu")
    assert pairs_and_clusters(listed) == pairs_and_clusters(by_id)
    assert [r["id"] for r in listed.deduplicated] == by_id.deduplicated["id"].to_pylist()
    assert listed.skipped_records == [{**entry, "file": "<list>"} for entry in skipped]


def test_a_bad_record_stops_the_run_with_one_line_naming_it():
    records, reasons = records_with_bad_ones()
    for position in sorted(reasons):
        good = [r for i, r in enumerate(records) if i not in reasons or i == position]
        at = good.index(records[position])
        with pytest.raises(InputError) as raised:
            gpudedup.dedup((r for r in good), id_field="id", backend="cpu")
        message = str(raised.value)
        assert message.startswith(f"record {at} (from 0): ") and reasons[position] in message, message
        assert "\n" not in message


@pytest.mark.parametrize("values, reason", [
    ((datetime.datetime(2024, 1, 1, 13, 45, 30), datetime.date(2024, 1, 2)),
     "record 1 (from 0): field 'v' is date32[day], but timestamp[us] in the records before it"),
    ((datetime.datetime(2024, 1, 1, 1), datetime.datetime(2024, 1, 1, 1, tzinfo=datetime.timezone.utc)),
     "record 1 (from 0): field 'v' is timestamp[us, tz=UTC], but timestamp[us] in the records before it"),
    ((2**53 + 1, 0.5), "record 0 (from 0): Integer value 9007199254740993 is outside of the range exactly"),
    (({"t": datetime.date(2024, 1, 2)}, {"t": datetime.datetime(2024, 1, 1, 13, 45, 30)}),
     "record 1 (from 0): field 'v' is struct<t: timestamp[us]>, but struct<t: date32[day]> in the records before it"),
    (([datetime.date(2024, 1, 2)], [{"a": 1}], [datetime.datetime(2024, 1, 1, 13, 45, 30)]),
     "record 1 (from 0): field 'v' is list<item: struct<a: int64>>, but list<item: date32[day]> in the records"),
    (([datetime.date(2024, 1, 2), datetime.datetime(2024, 1, 1, 13, 45, 30)],),
     "record 0 (from 0): field 'v' holds dates or times that Arrow would not keep as they are (a date beside a "
     "datetime, a naive beside an aware datetime, nanoseconds, a time of day with a zone)"),
    (([{"t": [datetime.datetime(2024, 1, 1, 1), datetime.datetime(2024, 1, 1, 1, tzinfo=datetime.timezone.utc)]}],),
     "record 0 (from 0): field 'v' holds dates or times that Arrow would not keep"),
    ((pandas.Timestamp("2024-01-01 00:00:00.000000001"),), "record 0 (from 0): field 'v' holds dates or times that"),
    ((datetime.time(1, 2, tzinfo=datetime.timezone.utc),), "record 0 (from 0): field 'v' holds dates or times that"),
], ids=["datetime-date", "naive-aware", "integer-fraction", "in-a-struct", "in-lists", "in-one-list",
        "in-a-list-in-a-struct", "nanoseconds", "time-with-a-zone"])
def test_records_whose_values_their_types_together_would_change_are_refused(values, reason):
    """Arrow converts a field holding a datetime and a date as dates (the time of day lost) and
    naive and aware datetimes as one (a wall time shifted); the records' types together, an
    integer past 2**53 beside a fraction, would round it: each is refused naming the record, as
    a list and as an iterable, not kept changed nor ended with Arrow's own error."""
    records = [{"text": f"document {i} has some words of its own here", "v": value} for i, value in enumerate(values)]
    for data in (records, iter(records)):
        with pytest.raises(InputError) as raised:
            gpudedup.dedup(data, backend="cpu")
        assert str(raised.value).startswith(reason), str(raised.value)
    # One kind of value in the field: kept as it is.
    same = [{"text": "document one has some words of its own", "v": datetime.datetime(2024, 1, 1, 13, 45, 30)},
            {"text": "document two has other words entirely", "v": datetime.datetime(2024, 1, 2, 8, 0)}]
    assert gpudedup.dedup(iter(same), backend="cpu").deduplicated.column("v").to_pylist() == [r["v"] for r in same]
    # Aware datetimes of two zones in structs with a NaN and a key one lacks: read in one go.
    utc = datetime.datetime(2024, 1, 1, 13, 45, tzinfo=datetime.timezone.utc)
    nested = [{"text": "document one has some words of its own", "v": {"t": utc, "f": float("nan")}},
              {"text": "document two has other words entirely",
               "v": {"t": utc.astimezone(datetime.timezone(datetime.timedelta(hours=2))), "f": 1.0, "x": 1}}]
    kept = gpudedup.dedup(nested, backend="cpu").deduplicated  # (a list of records, as given)
    assert [row["v"]["t"] for row in kept] == [utc, utc]
    # One zone's times of an ambiguous hour, and another zone's at the same instant: kept
    # (``==`` calls them unequal, PEP 495; Arrow holds the instants).
    paris = zoneinfo.ZoneInfo("Europe/Paris")
    ambiguous = [datetime.datetime(2024, 10, 27, 2, 30, tzinfo=paris), datetime.datetime(2024, 1, 1, tzinfo=paris),
                 datetime.datetime(2024, 10, 27, 0, 30, tzinfo=datetime.timezone.utc)]
    zoned = [{"text": f"document {i} has words of its own, number {i}", "v": [value]}
             for i, value in enumerate(ambiguous)]
    kept = gpudedup.dedup(iter(zoned), backend="cpu").deduplicated
    assert [row[0].timestamp() for row in kept.column("v").to_pylist()] == [v.timestamp() for v in ambiguous]
    # Wall times a DST change skips (either fold), alone in their zone: Arrow holds their
    # instants, which Python's subtraction of two times of one zone object does not compare.
    gap = [datetime.datetime(2024, 3, 31, 2, 30, fold=fold, tzinfo=paris) for fold in (0, 1)]
    skipped = [{"text": f"document {i} has words of its own, number {i}", "v": value} for i, value in enumerate(gap)]
    kept = gpudedup.dedup(skipped, backend="cpu").deduplicated
    assert [row["v"].timestamp() for row in kept] == [value.timestamp() for value in gap]


def test_records_none_of_which_can_be_read_are_an_error_whatever_on_error_says():
    records = [{"body": f"text {i}"} for i in range(10)]
    with pytest.raises(InputError, match=r"none of the 10 records could be read \(record 0 \(from 0\): no field"):
        gpudedup.dedup(iter(records), on_error="skip", backend="cpu")


@pytest.mark.parametrize("data, words", [
    ([Path("a.jsonl"), "b.parquet"], "the list holds paths and other items (item 1 is a str): files are given as "
                                     "pathlib.Path objects alone (a str in a list is a text)"),
    ([Path("a.jsonl"), {"text": "a b"}], "the list holds paths and other items (item 1 is a dict)"),
    (["a text", Path("a.jsonl")], "text 1 is a PosixPath, expected a string or None; files are given as pathlib.Path "
                                  "objects alone"),
], ids=["path-then-str", "path-then-record", "str-then-path"])
def test_a_list_of_paths_and_texts_is_refused(data, words):
    """A str in a list is a text: beside paths, the likely mistake is a path given as a str."""
    with pytest.raises(InputError, match=re.escape(words)):
        gpudedup.dedup(data)


def test_a_text_of_another_kind_is_named_by_its_position_across_batches():
    texts = [paragraph(i) for i in range(20)]
    texts[12] = 12
    with pytest.raises(InputError, match=r"^text 12 is a int, expected a string or None$"):
        gpudedup.dedup(t for t in texts)
    # Bytes that are UTF-8 are texts; the first that are not is named, not the first bytes.
    with pytest.raises(InputError, match=r"^text 2 is bytes that are not UTF-8 \(byte 3\); expected a string or None$"):
        gpudedup.dedup([b"one two three", "four five six", b"abc\xff def"], backend="cpu")
    # A list is read by the same rule: the first item that is not None says which.
    for given in (iter([[1, 2, 3]] * 10 + ["a text"]), [None] + [[1, 2, 3]] * 9 + ["a text"]):
        with pytest.raises(InputError, match=r"^item 10 is of type str, expected a list of token ids"):
            gpudedup.dedup(given, shingle="token")


# --- Series -------------------------------------------------------------------------------------


def test_a_pandas_series_keeps_its_index(by_position):
    texts = corpus_texts()
    labels = [f"row-{i}" for i in range(len(texts))]
    series = pandas.Series(texts, index=labels, name="body")
    result = gpudedup.dedup(series, backend="cpu")
    assert pairs_and_clusters(result) == pairs_and_clusters(by_position)  # ids are positions, as a list's
    kept = result.deduplicated
    assert isinstance(kept, pandas.Series) and kept.name == "body"
    assert kept.index.tolist() == [label for label, keep in zip(labels, by_position.keep) if keep]
    assert [None if pandas.isna(t) else t for t in kept.tolist()] == by_position.deduplicated
    # An index of repeated integers, not in order: the labels of the kept rows, as they were.
    odd = pandas.Series(texts, index=[7, 3, 3, 100] + list(range(20)))
    assert gpudedup.dedup(odd, backend="cpu").deduplicated.index.tolist() == \
        [label for label, keep in zip(odd.index, by_position.keep) if keep]


def test_a_column_and_a_polars_series_read_as_a_list_does(by_position):
    frame = pandas.DataFrame({"text": corpus_texts()})
    assert pairs_and_clusters(gpudedup.dedup(frame["text"], backend="cpu")) == pairs_and_clusters(by_position)
    result = gpudedup.dedup(polars.Series("text", corpus_texts()), backend="cpu")
    assert pairs_and_clusters(result) == pairs_and_clusters(by_position)
    assert isinstance(result.deduplicated, polars.Series)
    assert result.deduplicated.to_list() == by_position.deduplicated


def test_a_column_in_arrow_or_categorical_reads_as_a_list_does(by_position, by_id):
    """A table's column as an Arrow array (chunked or not), and categorical texts and ids (a
    pandas categorical column, an Arrow dictionary), give the list's and the table's results;
    the kept rows come back in the input's own type."""
    table = pa.Table.from_pylist(corpus_records())
    for column in (table["text"], table["text"].combine_chunks(), table["text"].dictionary_encode()):
        result = gpudedup.dedup(column, backend="cpu")
        assert pairs_and_clusters(result) == pairs_and_clusters(by_position)
        assert result.deduplicated.type == column.type
        assert result.deduplicated.to_pylist() == by_position.deduplicated
    frame = table.select(["id", "text"]).to_pandas()
    frame["id"], frame["text"] = frame["id"].astype("category"), frame["text"].astype("category")
    assert pairs_and_clusters(gpudedup.dedup(frame, id_field="id", backend="cpu")) == pairs_and_clusters(by_id)
    encoded = table.set_column(0, "id", table["id"].dictionary_encode())
    assert pairs_and_clusters(gpudedup.dedup(encoded, id_field="id", backend="cpu")) == pairs_and_clusters(by_id)


def test_a_binary_text_column_reads_as_a_parquet_file_of_it_does(by_id, tmp_path):
    """Texts stored as bytes (a binary column, as some writers store strings; binary_view, as
    polars' Binary exports) are read as UTF-8 text in a table as in a Parquet file, written back
    in their own type; one not UTF-8 is refused naming its row."""
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(corpus_records()).select(["id", "text"])
    as_bytes = table.set_column(1, "text", table["text"].cast(pa.binary()))
    pq.write_table(as_bytes, tmp_path / "bytes.parquet")
    for data in (as_bytes, as_bytes.set_column(1, "text", as_bytes["text"].dictionary_encode()),
                 as_bytes.set_column(1, "text", as_bytes["text"].cast(pa.binary_view())),
                 as_bytes.set_column(1, "text", pa.DictionaryArray.from_arrays(
                     pa.array(range(as_bytes.num_rows), pa.int32()), as_bytes["text"].combine_chunks().cast(
                         pa.binary_view()))), tmp_path / "bytes.parquet"):
        result = gpudedup.dedup(data, id_field="id", backend="cpu")
        assert pairs_and_clusters(result) == pairs_and_clusters(by_id)
        result.write(tmp_path / "out", overwrite=True)
        written = pq.read_table(next((tmp_path / "out").glob("deduplicated*/**/*.parquet"), None)
                                or tmp_path / "out" / "deduplicated.parquet")
        given = pq.read_schema(data) if isinstance(data, Path) else data.schema
        kind = given.field("text").type
        if pa.types.is_dictionary(kind) and pa.types.is_binary_view(kind.value_type):
            kind = pa.dictionary(kind.index_type, pa.binary())  # (Parquet's dictionaries hold no view)
        assert written.schema.field("text").type == kind
        assert written["text"].to_pylist() == [None if text is None else text.encode()
                                                 for text in by_id.deduplicated["text"].to_pylist()]
    for kind in (pa.binary(), pa.binary_view()):
        bad = pa.table({"text": pa.array([b"fine words", b"more words", b"\xff not utf-8", b"last"], kind)})
        with pytest.raises(InputError, match=re.escape("column 'text' at row 2 (from 0) is not valid UTF-8")):
            gpudedup.dedup(bad, backend="cpu")


def test_texts_as_bytes_in_an_array_or_a_series_read_as_the_list_does(by_position):
    """Texts as UTF-8 bytes in an Arrow array (binary, large, view; chunked), a pandas Series of
    bytes or a polars Binary Series give the list's results, the kept texts in the given type;
    bytes that are not UTF-8 are refused naming the item."""
    texts = [None if text is None else text.encode() for text in corpus_texts()]
    kept = [None if text is None else text.encode() for text in by_position.deduplicated]
    for data in (pa.array(texts), pa.array(texts, pa.large_binary()), pa.array(texts, pa.binary_view()),
                 pa.DictionaryArray.from_arrays(pa.array(range(len(texts)), pa.int32()),
                                                pa.array(texts, pa.binary_view())),
                 pa.chunked_array([pa.array(texts)]), pandas.Series(texts), polars.Series(texts)):
        result = gpudedup.dedup(data, backend="cpu")
        assert pairs_and_clusters(result) == pairs_and_clusters(by_position)
        given = result.deduplicated
        assert (given.to_list() if hasattr(given, "to_list") else given.to_pylist()) == kept
    with pytest.raises(InputError, match=re.escape("the Series's item 1 (from 0) is not valid UTF-8")):
        gpudedup.dedup(pandas.Series([b"fine words", b"\xff not utf-8"]), backend="cpu")


def test_a_dictionary_of_view_typed_texts_reads_as_its_values_do(by_position):
    """Texts as a dictionary of string_view values (a table's column, an array, a chunked array,
    one of no chunks) give the plain list's results, the kept texts in the given type."""
    texts = corpus_texts()
    dictionary = pa.DictionaryArray.from_arrays(pa.array(range(len(texts)), pa.int32()),
                                                pa.array(texts, pa.string_view()))
    for data in (pa.table({"text": dictionary}), dictionary, pa.chunked_array([dictionary])):
        result = gpudedup.dedup(data, backend="cpu")
        assert pairs_and_clusters(result) == pairs_and_clusters(by_position)
        kept = result.deduplicated["text"] if isinstance(data, pa.Table) else result.deduplicated
        assert kept.type == dictionary.type and kept.to_pylist() == by_position.deduplicated
    none = gpudedup.dedup(pa.chunked_array([], dictionary.type), backend="cpu")
    assert none.deduplicated.type == dictionary.type and len(none.deduplicated) == 0


def test_texts_arrow_did_not_check_are_refused_naming_the_row():
    """An Arrow string column made from buffers (or bytes viewed as strings) is not checked by
    Arrow: one that is not UTF-8 is refused as a Parquet file's is, in a table, an array or a
    chunked array, not cut into shingles of other texts."""
    texts = pa.array([b"fine words", b"more words", b"a\x80b words"]).view(pa.string())
    for data, words in ((pa.table({"text": texts}), "column 'text' at row 2 (from 0) is not valid UTF-8"),
                        (texts, "the StringArray's item 2 (from 0) is not valid UTF-8"),
                        (pa.chunked_array([texts]), "the ChunkedArray's item 2 (from 0) is not valid UTF-8"),
                        (texts.dictionary_encode(), "the DictionaryArray's item 2 (from 0) is not valid UTF-8"),
                        (pa.table({"text": pa.array([b"fine words", b"more words", b"a\x80b words"], pa.binary_view())
                                   .view(pa.string_view())}), "column 'text' at row 2 (from 0) is not valid UTF-8")):
        with pytest.raises(InputError, match=re.escape(words)):
            gpudedup.dedup(data, backend="cpu")


def test_categorical_ids_in_a_parquet_file_are_read_as_in_memory(by_id, tmp_path):
    """A frame of categorical ids saved with to_parquet (a dictionary column) gives the table's
    results read from the file, in memory and with a work directory."""
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(corpus_records()).select(["id", "text"])
    pq.write_table(table.set_column(0, "id", table["id"].dictionary_encode()), tmp_path / "ids.parquet")
    for options in ({}, {"work_dir": tmp_path / "work"}):
        result = gpudedup.dedup(tmp_path / "ids.parquet", id_field="id", backend="cpu", **options)
        assert pairs_and_clusters(result) == pairs_and_clusters(by_id)


DAY, DAY_AND_HOUR = datetime.date(2024, 1, 2), datetime.datetime(2024, 1, 2, 9)


@pytest.mark.parametrize("make, words", [
    (lambda: pandas.DataFrame({"text": ["a b", "c d"], "c": [1j, 2j]}), "column 'c' (complex128) cannot be read"),
    (lambda: pandas.DataFrame({"text": ["a b", "c d"], "m": pandas.Series([2**70, 1], dtype=object)}),
     "column 'm' (object) cannot be read"),
    (lambda: pandas.DataFrame([["a b", "x"], ["c d", "y"]], columns=["text", "text"]),
     "more than one column named 'text'"),
    (lambda: pa.Table.from_arrays([pa.array(["a b", "c d"]), pa.array([1, 2])], names=["text", "text"]),
     "the table has more than one column named 'text'; column names must be unique"),
    (lambda: polars.DataFrame({"text": ["a b", "c d"], "big": polars.Series([1, 2], dtype=polars.Int128)}),
     "column 'big' (Int128) cannot be read"),
    # (polars exports an Object column as its objects' addresses: written out, they would be
    # 8 bytes of a pointer, another each run)
    (lambda: polars.DataFrame({"text": ["a b", "c d"], "meta": polars.Series([object(), {}], dtype=polars.Object)}),
     "column 'meta' holds Python objects (Object)"),
    # (Arrow takes dates beside datetimes as dates and naive beside aware datetimes as one:
    # written out, a time of day or a zone would be lost)
    (lambda: pandas.DataFrame({"text": ["a b", "c d"], "t": [DAY, DAY_AND_HOUR]}),
     "column 't' holds dates or times that Arrow would not keep as they are (a date beside a datetime, a naive "
     "beside an aware datetime, nanoseconds, a time of day with a zone), read as date32[day]"),
    (lambda: pandas.DataFrame({"text": ["a b", "c d"], "t": [[DAY, DAY_AND_HOUR], None]}),
     "column 't' holds dates or times that Arrow would not keep as they are (a date beside a datetime, a naive "
     "beside an aware datetime, nanoseconds, a time of day with a zone), read as list<item: date32[day]>"),
], ids=["complex", "past-int64", "repeated-name", "repeated-arrow-name", "polars-int128", "polars-object",
        "date-datetime", "date-datetime-in-lists"])
def test_a_frame_column_arrow_cannot_take_is_named(make, words):
    with pytest.raises(InputError, match=re.escape(words)):
        gpudedup.dedup(make())


def test_a_polars_frame_changed_after_the_run_keeps_the_rows_read():
    """The kept rows are those the run read: a change made in place to the caller's polars
    frame or Series afterwards does not reach them (as for pandas). (Read by to_corpus itself:
    the suite's check of every dedup run reads the frame too, which makes polars copy it at the
    change.)"""
    texts = ["a b c d e f g", "a b c d e f g", "x y z"]
    frame = polars.DataFrame({"text": texts, "n": [0, 1, 2]})
    series = polars.Series("text", texts)
    (_, frame_rows), (_, series_rows) = (gpudedup.io.python_inputs.to_corpus(data, "text", None)
                                         for data in (frame, series))
    frame[0, "text"] = "changed after the run"
    series[0] = "changed after the run"
    keep = [True, False, True]
    assert frame_rows(keep).to_dicts() == [{"text": texts[0], "n": 0}, {"text": texts[2], "n": 2}]
    assert series_rows(keep).to_list() == [texts[0], texts[2]]


@pytest.mark.parametrize("ids, words", [
    ([[1], [2]], "id column 'id' has type list<item: int64>, expected strings or integers"),
    ([1.5, 2.5], "id column 'id' has type double, expected strings or integers"),
], ids=["lists", "floats"])
def test_ids_of_a_table_are_strings_or_integers_as_in_files(ids, words):
    with pytest.raises(InputError, match=words):
        gpudedup.dedup(pa.table({"text": ["a b", "c d"], "id": ids}), id_field="id")


@pytest.mark.parametrize("data", [["a b", "c d"], ("a b" for _ in range(2)), pa.array(["a b", "c d"])],
                         ids=["list", "generator", "arrow"])
def test_an_id_field_for_texts_is_refused(data):
    """(Nothing at all is records or texts alike: an empty list with an id field runs.)"""
    assert gpudedup.dedup([], id_field="doc").documents == 0
    with pytest.raises(ParameterError, match="id_field='doc' names a field of records or a column of a table"):
        gpudedup.dedup(data, id_field="doc")
    with pytest.raises(ParameterError, match="id_field='doc' names"):
        gpudedup.dedup(pandas.Series(["a b", "c d"]), id_field="doc")


@pytest.mark.parametrize("options", [{"text_field": None}, {"text_field": 0}, {"id_field": 3}],
                         ids=["text-None", "text-int", "id-int"])
def test_a_field_that_is_not_a_name_is_refused(options):
    with pytest.raises(ParameterError, match="must be a column or field name"):
        gpudedup.dedup([{"text": "a b"}], **options)


@pytest.mark.parametrize("series", [
    lambda: pandas.Series([1, 2, 3]),
    lambda: pandas.Series([0.5, 1.5]),
    lambda: polars.Series([1, 2, 3]),
], ids=["pandas-int", "pandas-float", "polars-int"])
def test_a_series_of_numbers_is_refused_with_one_line(series):
    with pytest.raises(InputError, match=r"^the Series holds (int64|float64|Int64) values; expected strings") as raised:
        gpudedup.dedup(series())
    assert "\n" not in str(raised.value)


def test_a_series_mixing_texts_and_numbers_names_the_item():
    with pytest.raises(InputError, match=r"^text 1 is a int, expected a string or None$"):
        gpudedup.dedup(pandas.Series(["a text", 5], dtype=object))


# --- refused ------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [
    lambda: datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": ["a"]}),
                                  "test": datasets.Dataset.from_dict({"text": ["b"]})}),
    lambda: datasets.IterableDatasetDict({
        "train": datasets.Dataset.from_dict({"text": ["a"]}).to_iterable_dataset(),
        "test": datasets.Dataset.from_dict({"text": ["b"]}).to_iterable_dataset()}),
], ids=["DatasetDict", "IterableDatasetDict"])
def test_a_dataset_dict_is_refused_naming_its_splits(make):
    data = make()
    with pytest.raises(InputError) as raised:
        gpudedup.dedup(data)
    assert str(raised.value) == (f"a {type(data).__name__} holds splits (train, test), not one dataset: pick the "
                                 "split to deduplicate, e.g. data['train']")


@pytest.mark.parametrize("data", [{"text": ["a", "b"]}, b"bytes", 5], ids=["dict", "bytes", "int"])
def test_other_kinds_are_refused_naming_what_is_accepted(data):
    with pytest.raises(InputError) as raised:
        gpudedup.dedup(data)
    message = str(raised.value)
    assert message.startswith(f"cannot deduplicate data of type {type(data).__name__}: pass texts")
    assert "any iterable of strings" in message and "iterable of dicts" in message and "IterableDataset" in message
    assert "\n" not in message


@pytest.mark.parametrize("options", [{"work_dir": "work"}, {"workers": 1}], ids=["work_dir", "workers"])
def test_a_work_directory_or_cluster_for_a_generator_is_one_line(tmp_path, options):
    options = {name: tmp_path / value if name == "work_dir" else value for name, value in options.items()}
    with pytest.raises(ParameterError) as raised:
        gpudedup.dedup((t for t in ["a text", "another"]), backend="cpu", **options)
    message = str(raised.value)
    assert "runs over files" in message and "here of type" in message and "\n" not in message
    assert not (tmp_path / "work").exists()


def test_the_cli_reads_files_as_before(tmp_path, by_id):
    """Paths still go to the file readers: the CLI's run over the records' JSONL file."""
    from typer.testing import CliRunner

    from gpudedup.cli import app

    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in corpus_records()), encoding="utf-8")
    ran = CliRunner().invoke(app, ["dedup", str(path), "-o", str(tmp_path / "out"), "--id-field", "id"])
    assert ran.exit_code == 0, ran.output
    report = json.loads(Path(tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert report["results"]["clusters"] == by_id.report["results"]["clusters"]
    assert report["results"]["removed_documents"] == by_id.report["results"]["removed_documents"]
