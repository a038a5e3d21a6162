"""Input formats beside plain JSONL, each against the same records as plain JSONL (same pairs,
clusters and kept rows, in memory and staged): JSONL compressed with zstd (io/jsonl_lines.py:
pyarrow's codec), Arrow IPC files and streams (io/arrow.py), Hugging Face ``save_to_disk``
folders (io/dataset_folder.py), and JSON array files, which are refused with a message that
names the format."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pyarrow as pa
import pytest

import gpudedup
from gpudedup.errors import InputError
from gpudedup.io.arrow import read_ipc
from gpudedup.io.formats import compression_of, file_format
from gpudedup.io.pieces import cuttable
from gpudedup.io.read import read_corpus
from gpudedup.io.sizes import RECORD_BYTES, file_read_bytes

from cli_support import assert_user_error, happy_records, invoke, write_jsonl
from output_support import read_clusters, read_kept, read_pairs

try:  # the fixture s3: a moto S3 server (moto is in the dev extra)
    from test_object_storage import s3  # noqa: F401
except pytest.skip.Exception:
    pass

ZSTD = pa.Codec("zstd")
counter = itertools.count()


def records() -> list[dict]:
    """happy_records (8 rows, near-duplicates 1~3 and 4~5~7) twice over with new numbers: 16
    rows, so that Arrow files hold several record batches."""
    rows = happy_records()
    return rows + [{**row, "n": row["n"] + 100, "text": row["text"].replace("a", "o")} for row in rows]


def outcome(paths, tmp_path: Path, **options) -> dict:
    """What a run over ``paths`` (ids from the field "n") gives: its pairs, clusters and kept
    rows (an output written under tmp_path), and its documents."""
    out = tmp_path / f"out{next(counter)}"
    result = gpudedup.dedup(paths, id_field="n", output=out, **options)
    return {"pairs": read_pairs(out).to_pylist(), "clusters": read_clusters(out).to_pylist(),
            "kept": read_kept(out).to_pylist(), "documents": result.documents}


@pytest.fixture
def plain(tmp_path: Path) -> dict:
    """The reference: the records as one plain JSONL file, run in memory."""
    return outcome(write_jsonl(tmp_path / "plain" / "ref.jsonl", records()), tmp_path)


def zstd_file(path: Path, data: bytes, frames: int = 1) -> Path:
    """``data`` compressed with zstd into ``path``, as ``frames`` frames one after another (as
    pzstd and concatenated files have them)."""
    cut = -(-len(data) // frames)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(ZSTD.compress(data[i:i + cut], asbytes=True) for i in range(0, len(data), cut)))
    return path


def jsonl_bytes(rows: list[dict]) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


# --- JSONL compressed with zstd --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["c.jsonl.zst", "c.json.zst", "c.ndjson.zst", "c.zst", "C.JSONL.ZST"])
def test_zstd_jsonl_reads_as_plain_jsonl(tmp_path, plain, name):
    path = zstd_file(tmp_path / "in" / name, jsonl_bytes(records()), frames=3)
    assert file_format(path) == "jsonl" and compression_of(path) == "zstd"
    assert not cuttable(path, "jsonl")  # a zstd stream is read whole, as a gzip one
    assert outcome(path, tmp_path) == plain
    assert outcome(path, tmp_path, work_dir=tmp_path / "work") == plain
    # Default ids are the file's lines, as for a plain file.
    corpus = read_corpus([path])
    assert corpus.ids.to_pylist()[:2] == [f"{corpus.files[0].path}:1", f"{corpus.files[0].path}:2"]


def test_zstd_jsonl_kept_lines_are_copied_as_written(tmp_path):
    rows = records()
    text = "".join(json.dumps(row, indent=None, separators=(" ,", " : ")) + "\n" for row in rows).encode()
    out = tmp_path / "out"
    gpudedup.dedup(zstd_file(tmp_path / "a.jsonl.zst", text), output=out, format="jsonl")
    kept = (out / "deduplicated" / "a.jsonl").read_bytes().splitlines(keepends=True)
    assert kept == [line for number, line in enumerate(text.splitlines(keepends=True), 1)
                    if number not in {3, 5, 7, 11, 13, 15}]


def test_zstd_size_estimate_counts_the_uncompressed_bytes(tmp_path):
    data = jsonl_bytes(records())
    plain_file = tmp_path / "a.jsonl"
    plain_file.write_bytes(data)
    compressed = zstd_file(tmp_path / "a.jsonl.zst", data, frames=2)
    kept, during = file_read_bytes(compressed, "jsonl", path_ids=False)
    plain_kept, plain_during = file_read_bytes(plain_file, "jsonl", path_ids=False)
    assert kept == plain_kept  # the same bytes, records and null cells
    assert during == plain_during + compressed.stat().st_size


def test_zstd_errors_name_the_file(tmp_path):
    plain_named = tmp_path / "plain.jsonl.zst"
    plain_named.write_bytes(jsonl_bytes(records()))
    with pytest.raises(InputError, match=r"plain.jsonl.zst: not zstd-compressed \(it does not start with the zstd "
                                         r"signature 28 b5 2f fd\); a plain JSONL file must not end in .zst"):
        read_corpus([plain_named])
    truncated = tmp_path / "cut.jsonl.zst"
    truncated.write_bytes(zstd_file(tmp_path / "whole.zst", jsonl_bytes(records())).read_bytes()[:200])
    with pytest.raises(InputError, match=r"cut.jsonl.zst: cannot decompress: corrupt or truncated zstd data"):
        read_corpus([truncated])
    misnamed = tmp_path / "z.jsonl"
    misnamed.write_bytes(ZSTD.compress(jsonl_bytes(records()), asbytes=True))
    with pytest.raises(InputError, match=r"the file looks zstd-compressed: name it .jsonl.zst"):
        read_corpus([misnamed])
    corpus = read_corpus([plain_named, truncated], on_error="skip")  # each left out whole, once
    assert [record["file"] for record in corpus.skipped_records] == [str(plain_named), str(truncated)]


# --- Arrow IPC --------------------------------------------------------------------------------------


def write_ipc(path: Path, table: pa.Table, stream: bool, batch_rows: int = 5) -> Path:
    """``table`` as an Arrow IPC stream (as datasets writes) or file, in batches of batch_rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = pa.ipc.new_stream if stream else pa.ipc.new_file
    with opener(str(path), table.schema) as writer:
        writer.write_table(table, max_chunksize=batch_rows)
    return path


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "file"])
def test_arrow_ipc_reads_as_the_same_records(tmp_path, plain, stream):
    path = write_ipc(tmp_path / "in" / "c.arrow", pa.Table.from_pylist(records()), stream)
    assert file_format(path) == "arrow"
    assert outcome(path, tmp_path) == plain
    assert outcome(path, tmp_path, work_dir=tmp_path / "work") == plain
    corpus = read_corpus([path])  # ids <path>:<row>, as Parquet's
    assert corpus.ids.to_pylist()[:2] == [f"{corpus.files[0].path}:1", f"{corpus.files[0].path}:2"]


def test_arrow_kept_rows_are_written_in_the_output_format(tmp_path):
    table = pa.table({"text": pa.array([r["text"] for r in records()], pa.large_string()),
                      "n": pa.array([r["n"] for r in records()], pa.int32())})
    path = write_ipc(tmp_path / "in" / "c.arrow", table.replace_schema_metadata({"origin": "test"}), True)
    out = tmp_path / "out"
    gpudedup.dedup(path, output=out)
    kept = pa.parquet.read_table(out / "deduplicated" / "c.parquet")
    assert kept.schema == table.schema.with_metadata({"origin": "test"})  # the file's own columns and metadata
    assert kept.num_rows == 10
    gpudedup.dedup(path, output=tmp_path / "as_jsonl", format="jsonl")
    lines = (tmp_path / "as_jsonl" / "deduplicated" / "c.jsonl").read_text().splitlines()
    assert [json.loads(line)["n"] for line in lines] == kept["n"].to_pylist()


def test_arrow_local_file_is_memory_mapped(tmp_path):
    texts = ["word " * 2000] * 400  # about 4 MB of text
    path = write_ipc(tmp_path / "big.arrow", pa.table({"text": texts}), True, batch_rows=50)
    before = pa.total_allocated_bytes()
    table = read_ipc(path)
    assert table.num_rows == 400
    assert pa.total_allocated_bytes() - before < 1 << 20  # the buffers are the map's, not copies
    kept, during = file_read_bytes(path, "arrow", path_ids=False)  # --max-memory's estimate
    assert kept == table.nbytes + RECORD_BYTES * 400 and during == path.stat().st_size


def test_arrow_on_error(tmp_path):
    table = pa.table({"text": ["a b c", "d e f", "g h i"], "id": ["x", None, "z"]})
    path = write_ipc(tmp_path / "c.arrow", table, True)
    with pytest.raises(InputError, match=r"c.arrow: row 2: id field 'id' is null"):
        read_corpus([path], id_field="id")
    corpus = read_corpus([path], id_field="id", on_error="skip")
    assert corpus.ids.to_pylist() == ["x", "z"]
    assert corpus.skipped_records == [{"file": str(path), "line": 2, "reason": "id field 'id' is null"}]
    broken = tmp_path / "broken.arrow"
    broken.write_bytes(path.read_bytes()[:150])
    with pytest.raises(InputError, match=r"broken.arrow: not a readable Arrow IPC file or stream \("):
        read_corpus([broken])
    with pytest.raises(InputError, match=r"c.arrow: no field 'body' \(fields: text, id\)"):
        read_corpus([path], text_field="body")


def test_arrow_binary_text_is_read_as_strings(tmp_path):
    texts = [r["text"] for r in records()]
    path = write_ipc(tmp_path / "b.arrow", pa.table({"text": pa.array([t.encode() for t in texts], pa.binary())}),
                     False)
    assert read_corpus([path]).texts.to_pylist() == texts


# --- Hugging Face save_to_disk folders ----------------------------------------------------------


def save_to_disk(folder: Path, rows: list[dict], shards: int) -> Path:
    import datasets

    datasets.disable_progress_bars()
    datasets.Dataset.from_list(rows).save_to_disk(str(folder), num_shards=shards)
    return folder


def test_save_to_disk_folder_is_read_as_its_dataset(tmp_path, plain):
    folder = save_to_disk(tmp_path / "in" / "saved", records(), shards=3)
    assert outcome(folder, tmp_path) == plain
    assert outcome(folder, tmp_path, work_dir=tmp_path / "work") == plain
    # Inside a directory, beside another input: its metadata neither read nor listed as skipped.
    write_jsonl(tmp_path / "in" / "other.jsonl", [{"text": "one more document", "n": 999}])
    result = gpudedup.dedup(tmp_path / "in", id_field="n")
    assert [f.path for f in result.report.input.files] == [str(tmp_path / "in" / "other.jsonl")] + [
        str(folder / f"data-0000{i}-of-00003.arrow") for i in range(3)]  # (a folder's files, then its folders)
    assert result.report.input.skipped_files == [] and result.documents == 17


def test_save_to_disk_data_files_in_state_order(tmp_path):
    folder = save_to_disk(tmp_path / "saved", records(), shards=2)
    state = json.loads((folder / "state.json").read_text())
    state["_data_files"].reverse()
    (folder / "state.json").write_text(json.dumps(state))
    (folder / "notes.arrow").write_bytes((folder / "data-00000-of-00002.arrow").read_bytes())
    corpus = read_corpus([folder], id_field="n")
    assert [f.path for f in corpus.files] == [str(folder / "data-00001-of-00002.arrow"),
                                             str(folder / "data-00000-of-00002.arrow")]
    assert corpus.ids.to_pylist() == [r["n"] for r in records()[8:] + records()[:8]]
    assert corpus.skipped == [str(folder / "notes.arrow")]  # not one of the dataset's files: named
    assert any("notes.arrow: skipped: not one of the files of the dataset" in note for note in corpus.notes)


def test_broken_save_to_disk_folders(tmp_path):
    folder = save_to_disk(tmp_path / "saved", records(), shards=2)
    (folder / "data-00001-of-00002.arrow").unlink()
    with pytest.raises(InputError, match=r"saved/data-00001-of-00002.arrow: listed in state.json, but there is no "
                                         r"such file"):
        read_corpus([folder])
    (folder / "state.json").write_text("{")
    with pytest.raises(InputError, match=r"saved/state.json: not a readable datasets state file"):
        read_corpus([folder])


def test_dataset_dict_folder_is_refused(tmp_path, monkeypatch):
    import datasets

    datasets.disable_progress_bars()
    rows = records()
    splits = datasets.DatasetDict({"train": datasets.Dataset.from_list(rows[:10]),
                                   "test": datasets.Dataset.from_list(rows[10:])})
    splits.save_to_disk(str(tmp_path / "dd"))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    assert_user_error(invoke("dedup", "dd", "-o", out), "dd: a Hugging Face DatasetDict folder (splits: train, test); "
                      "give one split's folder (or several)", out=out)
    corpus = read_corpus([Path("dd/train"), Path("dd/test")], id_field="n")  # the splits, given apart
    assert corpus.ids.to_pylist() == [r["n"] for r in rows]


def test_formats_on_object_storage_read_as_local_ones(tmp_path, request):
    """zstd JSONL, an Arrow stream and a save_to_disk folder in a bucket: the same files, order,
    passed-over entries and results as the same folder on disk."""
    pytest.importorskip("moto.server", reason="moto's server is not installed (pip install 'moto[server]')")
    upload = request.getfixturevalue("s3")
    rows = records()
    local = tmp_path / "in"
    zstd_file(local / "a.jsonl.zst", jsonl_bytes(rows[:6]))
    write_ipc(local / "b.arrow", pa.Table.from_pylist(rows[6:10]), True)
    saved = save_to_disk(local / "saved", rows[10:], shards=2)
    state = json.loads((saved / "state.json").read_text())
    state["_data_files"].reverse()
    (saved / "state.json").write_text(json.dumps(state))
    (saved / "README.md").write_text("not the dataset's")
    url = upload(local, "formats/in")
    remote_result, local_result = gpudedup.dedup(url, id_field="n"), gpudedup.dedup(local, id_field="n")
    assert [f.path.replace(url, "in") for f in remote_result.report.input.files] == [
        "in/a.jsonl.zst", "in/b.arrow", "in/saved/data-00001-of-00002.arrow", "in/saved/data-00000-of-00002.arrow"]
    assert [shown.replace(url, "in") for shown in remote_result.report.input.skipped_files] == ["in/saved/README.md"]
    assert remote_result.keep.tolist() == local_result.keep.tolist()
    assert remote_result.pairs.equals(local_result.pairs) and remote_result.clusters.equals(local_result.clusters)


# --- JSON arrays ----------------------------------------------------------------------------------


@pytest.mark.parametrize("indent", [2, None], ids=["pretty", "one-line"])
def test_json_array_is_refused_naming_the_format(tmp_path, monkeypatch, indent):
    monkeypatch.chdir(tmp_path)
    Path("array.json").write_text(json.dumps(records(), indent=indent))
    out = tmp_path / "out"
    assert_user_error(invoke("dedup", "array.json", "-o", out), "error: array.json: a JSON array, not JSON Lines "
                      "(one JSON object per line); convert it, e.g. jq -c '.[]' array.json > array.jsonl", out=out)
    # An array named .jsonl: the advice never writes into the file it reads (the shell would empty it).
    Path("array.jsonl").write_text(json.dumps(records(), indent=indent))
    assert_user_error(invoke("dedup", "array.jsonl", "-o", out), "jq -c '.[]' array.jsonl > array.lines.jsonl",
                      out=out)
    write_jsonl(Path("b.jsonl"), records())
    corpus = read_corpus([Path("array.json"), Path("b.jsonl")], on_error="skip")  # left out whole, once
    assert [(r["file"], r["line"]) for r in corpus.skipped_records] == [("array.json", None)]
    assert corpus.num_rows == 16


def test_jsonl_of_other_arrays_is_still_read_line_by_line(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('[1, 2]\n{"text": "a b"}\n')
    with pytest.raises(InputError, match=r"a.jsonl:1: expected a JSON object, got an array"):
        read_corpus([path])


def test_a_parquet_file_of_categorical_texts_reads_as_its_strings(tmp_path):
    """pandas writes a categorical column as an Arrow dictionary: its texts are read as the
    plain strings are, and the kept rows written keep the file's own column type."""
    records = happy_records()
    plain, encoded = tmp_path / "plain.parquet", tmp_path / "categorical.parquet"
    table = pa.Table.from_pylist(records)
    import pyarrow.parquet as pq

    pq.write_table(table, plain)
    index = table.schema.get_field_index("text")
    pq.write_table(table.set_column(index, "text", table["text"].dictionary_encode()), encoded)
    results = [gpudedup.dedup(path, backend="cpu") for path in (plain, encoded)]
    assert results[0].pairs["jaccard"].equals(results[1].pairs["jaccard"])
    assert results[0].keep.tolist() == results[1].keep.tolist() and results[0].report["results"]["clusters"] > 0
    results[1].write(tmp_path / "out")
    assert pa.types.is_dictionary(pq.read_schema(tmp_path / "out" / "deduplicated" / "categorical.parquet")
                                  .field("text").type)
