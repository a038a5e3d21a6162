"""Inputs on object storage (io/storage.py), against a real S3-compatible server: moto's
stand-alone server (``python -m moto.server``), started here on a free port, reached through
pyarrow's S3 file system with the endpoint and credentials from the AWS environment, as a user
would set them. The same corpus is read from the bucket and from a local folder; every run
must give the same pairs, clusters, kept rows and skipped records, once ids name the files by
their URL instead of their local path.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

import gpudedup
from cli_support import assert_user_error, invoke, write_jsonl
from gpudedup.io import credentials, filesystems, outputdir, remote_output, storage
from gpudedup.io.ours import OUTPUT_MARKER
from gpudedup.pipeline.disk import WORK_DIR_FORMAT
from gpudedup.pipeline.manifest import FORMAT_KEY
from gpudedup.pipeline.workfolders import MARKER, TEMPORARY_PREFIX
from gpudedup.io.staging import host_tag, in_staging_prefix, remote_staging
from gpudedup.io.inputs import scan_inputs
from output_support import result_bytes
from stage_events import cli_process, finish, kill_then_resume
from test_streaming import make_texts, mixed_corpus

# moto[server] is in the dev extra: in CI a skip here fails the run (conftest.py).
pytest.importorskip("moto.server", reason="moto's server is not installed (pip install 'moto[server]')")

BUCKET = "corpora"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A running S3-compatible server with the bucket BUCKET, the AWS environment pointing at
    it for this module; yields upload(local folder, prefix) -> the prefix's URL."""
    port = free_port()
    log = open(tmp_path_factory.mktemp("moto") / "server.log", "wb")
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(port)], stdout=log, stderr=log)
    endpoint = f"http://127.0.0.1:{port}"
    settings = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint}
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "moto's server did not start"
                time.sleep(0.2)
        filesystem = pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", allow_bucket_creation=True)
        filesystem.create_dir(BUCKET)

        def upload(folder: Path, prefix: str) -> str:
            pafs.copy_files(str(folder), f"{BUCKET}/{prefix}", destination_filesystem=filesystem)
            return f"s3://{BUCKET}/{prefix}"

        yield upload
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
        filesystems._filesystem.cache_clear()  # (file systems of this server's endpoint)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, s3) -> tuple[Path, str]:
    """(the local root holding in/, the URL of the same in/ in the bucket): mixed_corpus's
    formats and layout, plus a JSONL file and a Parquet file of many row groups that a small
    --shard-bytes cuts into pieces, and entries a scan passes over (hidden, other types)."""
    root = tmp_path_factory.mktemp("object-storage")
    inp = mixed_corpus(root)
    texts = make_texts(300, seed=11)
    write_jsonl(inp / "big" / "h.jsonl", [{"text": t} for t in texts[:150] + texts[:20]])
    pq.write_table(pa.table({"text": texts[150:] + texts[140:160]}), inp / "big" / "i.parquet", row_group_size=16)
    (inp / "notes.csv").write_text("a,b\n", encoding="utf-8")
    (inp / ".hidden.jsonl").write_text('{"text": "x"}\n', encoding="utf-8")
    write_jsonl(inp / ".cache" / "j.jsonl", [{"text": "never read"}])
    return root, s3(inp, "mixed/in")


def local_ids(table: pa.Table, url: str) -> pa.Table:
    """``table`` with the URL of in/ in its string columns replaced by the local "in" (the ids
    of records without an id field name their file)."""
    columns = [pc.replace_substring(column, url, "in") if pa.types.is_string(column.type)
               or pa.types.is_large_string(column.type) else column
               for column in table.columns]
    return pa.table(columns, names=table.column_names)


def assert_same_as_local(remote, local, url: str) -> None:
    assert local_ids(remote.pairs, url).equals(local.pairs)
    assert local_ids(remote.clusters, url).equals(local.clusters)
    np.testing.assert_array_equal(remote.keep, local.keep)
    assert [{**r, "file": r["file"].replace(url, "in")} for r in remote.skipped_records] == local.skipped_records
    for section in ("results", "balance"):
        assert remote.report[section] == local.report[section], section


def test_listing_follows_the_local_walk(corpus, monkeypatch):
    root, url = corpus
    monkeypatch.chdir(root)
    remote, local = scan_inputs([url]), scan_inputs(["in"])
    assert [str(path).replace(url, "in") for path in remote.files] == [str(path) for path in local.files]
    assert [shown.replace(url, "in") for shown in remote.skipped] == local.skipped
    assert all(isinstance(path, storage.Remote) for path in remote.files)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_in_memory_run_reads_the_bucket(corpus, monkeypatch, tmp_path, fmt):
    root, url = corpus
    monkeypatch.chdir(root)
    remote = gpudedup.dedup(url, backend="cpu", on_error="skip")
    local = gpudedup.dedup(Path("in"), backend="cpu", on_error="skip")
    assert local.pairs.num_rows > 0 and (~np.asarray(local.keep)).sum() > 0
    assert_same_as_local(remote, local, url)
    # The kept rows go back to files named as the local run names them, with the same bytes
    # (JSONL lines copied from the objects).
    remote.write(tmp_path / "remote", format=fmt)
    local.write(tmp_path / "local", format=fmt)
    written_remote = {name: data for name, data in result_bytes(tmp_path / "remote").items()
                      if name.startswith("deduplicated")}
    written_local = {name: data for name, data in result_bytes(tmp_path / "local").items()
                     if name.startswith("deduplicated")}
    assert written_remote.keys() == written_local.keys()
    if fmt == "jsonl":
        assert written_remote == written_local


def test_staged_run_cuts_remote_files(corpus, monkeypatch, tmp_path):
    """A staged run over the bucket, its large JSONL file cut at line ends by ranged reads
    and its Parquet file by row groups, gives the whole in-memory run's results."""
    root, url = corpus
    monkeypatch.chdir(root)
    local = gpudedup.dedup(Path("in"), backend="cpu", on_error="skip")
    cut = gpudedup.dedup(url, backend="cpu", on_error="skip", work_dir=tmp_path / "work", shard_bytes=3000)
    plan = np.load(tmp_path / "work" / "plan.npy")
    assert plan.shape[0] > len(scan_inputs([url]).files), "no remote file was cut"
    assert_same_as_local(cut, local, url)
    # Written to the bucket, the cut files' kept rows (uploaded beside the staging folder, then
    # moved into place) are the local run's, and no staging prefix is left.
    out = f"s3://{BUCKET}/out-staged"
    cut.write(out, format="jsonl")
    local.write(tmp_path / "local", format="jsonl")
    fetched, written = result_bytes(download(out, tmp_path / "fetched")), result_bytes(tmp_path / "local")
    assert fetched.keys() == written.keys()
    assert {n: d for n, d in fetched.items() if n.startswith("deduplicated")} == \
        {n: d for n, d in written.items() if n.startswith("deduplicated")}
    assert hidden_left(out) == []


@pytest.mark.timeout(120)  # a run that starts a cluster of its own: 23 s alone, more beside other work
def test_dask_workers_read_the_bucket(corpus, monkeypatch, tmp_path):
    """Two local Dask workers (processes that inherit the AWS environment) read their shards
    from the bucket themselves."""
    pytest.importorskip("distributed", reason="Dask is not installed (pip install 'gpudedup[dask]')")
    root, url = corpus
    monkeypatch.chdir(root)
    local = gpudedup.dedup(Path("in"), backend="cpu", on_error="skip")
    remote = gpudedup.dedup(url, backend="cpu", on_error="skip", workers=2, work_dir=tmp_path / "work",
                            shard_bytes=3000)
    assert_same_as_local(remote, local, url)


def test_cli_over_a_url(corpus, monkeypatch, tmp_path):
    root, url = corpus
    monkeypatch.chdir(root)
    result = invoke("dedup", url + "/big", "-o", tmp_path / "out", "--backend", "cpu", "--quiet")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert report["output"]["kept_files"] == ["deduplicated/h.parquet", "deduplicated/i.parquet"]
    assert report["results"]["removed_documents"] > 0
    # The same into the bucket: the same objects, the report written last among them.
    result = invoke("dedup", url + "/big", "-o", f"s3://{BUCKET}/cli-out", "--backend", "cpu", "--quiet")
    assert result.exit_code == 0, result.output
    assert result_bytes(download(f"s3://{BUCKET}/cli-out", tmp_path / "fetched")) == result_bytes(tmp_path / "out")


@pytest.mark.parametrize("args, fragments", [
    (["s3://corpora/mixed/none/", "-o", "{out}"], ["s3://corpora/mixed/none: no such file or directory"]),
    (["s3://corpora/mixed/in/notes.csv", "-o", "{out}"], ["notes.csv", "unsupported file type"]),
    (["s3://corpora/mixed/in/", "-o", "s3://corpora/mixed/in/sub"],
     ["s3://corpora/mixed/in/sub: the output directory must not be, hold or lie inside the input"]),
    (["s3://corpora/mixed/in/", "-o", "{out}", "--work-dir", "s3://corpora/mixed/in/work"],
     ["s3://corpora/mixed/in/work: the work directory must not be, hold or lie inside the input"]),
    (["s3://corpora/mixed/in/", "-o", "{out}", "--work-dir", "s3://no-such-bucket/work"],
     ["s3://no-such-bucket/work: cannot write the work directory"]),
    (["s3://corpora/mixed/in//a.jsonl", "-o", "{out}"], ["s3://corpora/mixed/in//a.jsonl: cannot read"]),
    (["s3://corpora/mixed/in/", "-o", "s3://no-such-bucket/out"],
     ["s3://no-such-bucket/out: no-such-bucket does not exist"]),
])
def test_cli_refuses_with_one_line(corpus, tmp_path, args, fragments):
    out = tmp_path / "out"
    result = invoke("dedup", *[arg.format(out=out) for arg in args], "--backend", "cpu")
    assert_user_error(result, *fragments, out=out)


def download(url: str, local: Path) -> Path:
    """Every object under ``url`` copied into the folder ``local``."""
    filesystem, path = pafs.FileSystem.from_uri(url)
    pafs.copy_files(path, str(local), source_filesystem=filesystem)
    return local


def objects_under(url: str, files_only: bool = True) -> list[str]:
    """The keys under a URL (relative to it): its files, or also its folders (the empty
    marker objects some stores keep for them)."""
    filesystem, path = pafs.FileSystem.from_uri(url)
    entries = filesystem.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    return sorted(e.path[len(path) + 1:] for e in entries if e.type == pafs.FileType.File or not files_only)


def hidden_left(url: str) -> list[str]:
    """The hidden keys under an output URL other than its marker: what runs' staging left."""
    return [name for name in objects_under(url, files_only=False)
            if name.startswith(".") and name != OUTPUT_MARKER]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_output_on_object_storage(corpus, monkeypatch, tmp_path, fmt):
    """A result written to a URL is, object for object, the result written to a local folder
    (the kept rows, pairs and clusters byte for byte), with report.json among them."""
    root, url = corpus
    monkeypatch.chdir(root)
    result = gpudedup.dedup(url, backend="cpu", on_error="skip")
    out = f"s3://{BUCKET}/out-{fmt}"
    assert result.write(out, format=fmt) == storage.Remote(out)
    result.write(tmp_path / "local", format=fmt)
    fetched = download(out, tmp_path / "fetched")
    assert result_bytes(fetched) == result_bytes(tmp_path / "local")
    report = json.loads((fetched / "report.json").read_text(encoding="utf-8"))
    assert report["output"]["directory"] == out
    assert set(report["output"]["kept_files"]) <= set(objects_under(out))


def test_output_on_object_storage_is_replaced_in_order(corpus, monkeypatch, tmp_path):
    """An existing output is refused unless overwrite; replacing it removes every old object;
    an upload that fails part way leaves objects but no report.json (not a finished output)."""
    root, url = corpus
    monkeypatch.chdir(root)
    result = gpudedup.dedup(url + "/big", backend="cpu")
    out = f"s3://{BUCKET}/replaced"
    result.write(out)
    with pytest.raises(gpudedup.OutputError, match=r"holds a finished gpudedup output \(its report.json is there\); "
                                                   "use overwrite=True"):
        result.write(out)
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / "errors.jsonl").write_text("from an earlier run", encoding="utf-8")  # (one this write does not make)
    storage.upload(stale / "errors.jsonl", storage.Remote(out + "/errors.jsonl"))
    result.write(out, overwrite=True)
    assert "errors.jsonl" not in objects_under(out) and "report.json" in objects_under(out)

    uploads = []

    def failing_upload(local, remote):
        uploads.append(remote)
        if len(uploads) == 3:
            raise OSError("connection reset")
        return storage.upload(local, remote)

    monkeypatch.setattr(remote_output, "upload", failing_upload)
    with pytest.raises(gpudedup.OutputError, match="cannot write the results"):
        result.write(out, overwrite=True)
    left = objects_under(out)
    assert left and "report.json" not in left
    assert hidden_left(out) == []
    # Written again without overwrite, the leftover is named for what it is.
    monkeypatch.setattr(remote_output, "upload", storage.upload)
    with pytest.raises(gpudedup.OutputError, match=r"holds an unfinished gpudedup output \(no report.json"):
        result.write(out)
    result.write(out, overwrite=True)
    assert "report.json" in objects_under(out)


def test_a_killed_runs_staging_prefix_does_not_make_an_output_not_empty(corpus, monkeypatch, tmp_path):
    """What a killed run left in its hidden staging prefix under an output URL is no output:
    the next write there needs no --overwrite, and its commit removes the leftover."""
    root, url = corpus
    monkeypatch.chdir(root)
    out = f"s3://{BUCKET}/out-after-a-kill"
    left = tmp_path / "left.jsonl"
    left.write_text('{"text": "from a killed run"}\n', encoding="utf-8")
    killed = subprocess.Popen([sys.executable, "-c", "pass"])
    killed.wait()
    prefix = remote_staging(storage.Remote(out), tmp_path / f"gpudedup-output-{host_tag()}-{killed.pid}-k1lled_0")
    storage.upload(left, prefix.child("deduplicated/a.jsonl"))
    gpudedup.dedup(url + "/big", backend="cpu").write(out)
    assert "report.json" in objects_under(out)
    assert hidden_left(out) == []


def test_overwrite_on_object_storage_replaces_only_an_output_of_ours(corpus, monkeypatch):
    """--overwrite on a URL: objects that are no gpudedup output are refused, named and kept;
    an output of ours (its marker, or an earlier version's report.json) is replaced. Every
    output carries the marker."""
    root, url = corpus
    monkeypatch.chdir(root)
    result = gpudedup.dedup(url + "/big", backend="cpu")
    mine = put_objects("users-files", {"notes.txt": b"precious", ".ssh/id_rsa": b"key"})
    with pytest.raises(gpudedup.OutputError, match=r"holds files that are not a gpudedup output \(\.ssh, notes\.txt\)"):
        result.write(mine, overwrite=True)
    assert objects_under(mine) == [".ssh/id_rsa", "notes.txt"]
    earlier = put_objects("earlier", {"report.json": json.dumps({"input": {}, "parameters": {}, "results": {},
                                                                 "stages": {}}).encode(), "pairs.parquet": b"old"})
    result.write(earlier, overwrite=True)
    assert OUTPUT_MARKER in objects_under(earlier) and "pairs.parquet" not in objects_under(earlier)
    result.write(earlier, overwrite=True)  # (now by its marker)
    assert "report.json" in objects_under(earlier) and hidden_left(earlier) == []


def test_an_output_name_no_url_below_the_output_can_name_is_refused_before_any_work(s3, tmp_path, monkeypatch):
    """Local files named with "#" or "?" (where a URL's path ends) would have their kept rows
    written to another key, and an earlier output there deleted before the write failed; with
    "[" or "*" an fsspec store's deletion takes the name for a pattern. Each is refused before
    any work, naming the file, and the earlier output is left whole; one file of kept rows is
    written; brackets are names like any on S3, which pyarrow serves."""
    fsspec = pytest.importorskip("fsspec")
    fsspec.filesystem("memory").mkdir("/named-marks")
    monkeypatch.chdir(tmp_path)
    for name, text in (("b.jsonl", "x y z w v u"), ("h#.jsonl", "a b c d e f"), ("q?.jsonl", "g h i j k l")):
        write_jsonl(tmp_path / "in" / name, [{"text": text}])
    earlier = put_objects("named", {})
    gpudedup.dedup(Path("in") / "b.jsonl", backend="cpu", output=earlier)
    before = objects_under(earlier)
    for url in (earlier, "memory://named-marks/out"):
        with pytest.raises(gpudedup.ParameterError, match=r"in/h#\.jsonl: its output name 'h#\.parquet' holds '#', "
                                                          r"which no file below .* can be named by \(a URL's path"):
            gpudedup.dedup(Path("in"), backend="cpu", output=url, overwrite=True)
        with pytest.raises(gpudedup.ParameterError, match="its output name 'h#.parquet' holds '#'"):
            gpudedup.dedup(Path("in"), backend="cpu").write(url, overwrite=True)
    assert objects_under(earlier) == before and not fsspec.filesystem("memory").exists("/named-marks/out")
    (tmp_path / "in" / "h#.jsonl").unlink()
    (tmp_path / "in" / "q?.jsonl").rename(tmp_path / "in" / "[q].jsonl")
    with pytest.raises(gpudedup.ParameterError, match=r"holds '\[' and '\]', .* \(the store's deletion takes it for "
                                                      r"a pattern\)"):
        gpudedup.dedup(Path("in"), backend="cpu", output="memory://named-marks/out")
    gpudedup.dedup(Path("in"), backend="cpu", output=earlier, overwrite=True)
    assert "deduplicated/[q].parquet" in objects_under(earlier)
    gpudedup.dedup(Path("in"), backend="cpu", output="memory://named-marks/out", single_file=True)
    assert fsspec.filesystem("memory").exists("/named-marks/out/deduplicated.parquet")
    fsspec.filesystem("memory").rm("/named-marks", recursive=True)


def test_overwrite_on_object_storage_leaves_no_folder_of_the_old_output(corpus, monkeypatch):
    """Replacing an output whose folders the new one lacks (removed/, written by --write-removed)
    leaves no empty folder marker of them: the old output's folders go whole."""
    root, url = corpus
    monkeypatch.chdir(root)
    out = f"s3://{BUCKET}/folders"
    assert invoke("dedup", url + "/big", "-o", out, "--backend", "cpu", "--write-removed").exit_code == 0
    assert any(name.startswith("removed/") for name in objects_under(out))
    assert invoke("dedup", url + "/big", "-o", out, "--backend", "cpu", "--overwrite").exit_code == 0
    left = objects_under(out, files_only=False)
    assert not any(name == "removed" or name.startswith("removed/") for name in left), left
    assert "report.json" in left


def test_objects_that_appear_under_an_output_url_during_the_run_are_left_alone(corpus, monkeypatch):
    """Object stores have no no-replace rename: the commit looks again. What appeared under the
    output during the run is left as it is; the results go to a prefix beside it, named in the
    error."""
    root, url = corpus
    monkeypatch.chdir(root)
    result = gpudedup.dedup(url + "/big", backend="cpu")
    out = f"s3://{BUCKET}/appearing"
    real = remote_output.file_entries

    def file_entries(remote):  # the commit's first look: someone's file arrives just before it
        if not objects_under(out):
            put_objects("appearing", {"notes.txt": b"precious"})
        return real(remote)

    monkeypatch.setattr(remote_output, "file_entries", file_entries)
    with pytest.raises(gpudedup.OutputError, match="changed during the run") as refused:
        result.write(out)
    assert objects_under(out) == ["notes.txt"]
    aside = str(refused.value).rsplit("the results were written to ", 1)[1]
    assert aside.startswith(out + ".results-") and {"report.json", OUTPUT_MARKER} <= set(objects_under(aside))


def test_a_staging_prefix_is_known_by_its_whole_name_and_its_folder_marker():
    """A run's staging prefix: its objects and its own folder marker (listed as an object by
    some stores, with or without a trailing slash), never a name that only starts like one."""
    name = f".gpudedup-output-{host_tag()}-{os.getpid()}-ab12cd_3"
    assert all(in_staging_prefix(path) for path in (name, name + "/", name + "/deduplicated/a.jsonl"))
    assert not any(in_staging_prefix(path) for path in (".gpudedup-output-notes/a.txt", ".gpudedup-output-x",
                                                        name + "x/a", "out/" + name + "/a"))


def test_a_running_runs_staging_prefix_is_left_alone(corpus, monkeypatch):
    """The commit removes the staging prefixes of killed runs of this machine, never those of
    a run still going on (here: this process), nor another machine's."""
    root, url = corpus
    monkeypatch.chdir(root)
    host, dead = host_tag(), subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    prefixes = {"live": f".gpudedup-output-{host}-{os.getpid()}-aaaaaaaa",
                "dead": f".gpudedup-output-{host}-{dead.pid}-bbbbbbbb",
                "elsewhere": f".gpudedup-output-0badc0de-{os.getpid()}-cccccccc"}
    out = put_objects("prefixes", {f"{prefix}/deduplicated/a.jsonl": b"{}" for prefix in prefixes.values()})
    gpudedup.dedup(url + "/big", backend="cpu").write(out)
    left = {name.split("/")[0] for name in objects_under(out) if name.startswith(".gpudedup-output-")}
    assert left == {prefixes["live"], prefixes["elsewhere"]}
    for prefix in left:  # (this test's own leftovers)
        pafs.FileSystem.from_uri(out)[0].delete_dir(f"{BUCKET}/prefixes/{prefix}")


def test_a_users_objects_named_like_a_staging_prefix_are_theirs(corpus, monkeypatch):
    """Objects under an output URL whose names only start as a run's staging prefix does (no
    host, process and random part) are the user's: they make the output not empty, and
    --overwrite refuses them rather than delete them as a killed run's leftovers."""
    root, url = corpus
    monkeypatch.chdir(root)
    names = [".gpudedup-output-notes/plan.txt", ".gpudedup-output-drafts.txt"]
    out = put_objects("look-alikes", {name: b"precious" for name in names})
    result = gpudedup.dedup(url + "/big", backend="cpu")
    for overwrite in (False, True):
        with pytest.raises(gpudedup.OutputError, match="not a gpudedup output"):
            result.write(out, overwrite=overwrite)
        assert objects_under(out) == sorted(names)


class BrokenReads:
    """A file system whose input streams give one block, then raise ``error`` (a connection
    lost, or Ctrl-C, half way through a large object); everything else is ``inner``'s."""

    def __init__(self, inner, error: BaseException):
        self.inner, self.error = inner, error

    def open_input_stream(self, path):
        stream, error = self.inner.open_input_stream(path), self.error

        class Half:
            reads = 0

            def __enter__(self):
                return self

            def __exit__(self, *exception):
                stream.close()

            def read(self, size):
                self.reads += 1
                if self.reads > 1:
                    raise error
                return stream.read(1000)

        return Half()

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_large_object_is_moved_by_streaming_and_never_left_short(s3, monkeypatch, tmp_path):
    """storage.move_object over S3's copy limit (made 2,000 bytes here): the object is streamed
    to its new key, whole, and the source deleted; a read that fails or is interrupted half way
    leaves the source and no destination. On another file system it is the file system's own
    move (a local rename keeps the inode)."""
    monkeypatch.setattr(storage, "SERVER_COPY_LIMIT", 2000)
    filesystem, root = storage.Remote(f"s3://{BUCKET}/moves").filesystem()
    payload = bytes(range(256)) * 12  # 3,072 bytes: four blocks of the streams' 1,000
    with filesystem.open_output_stream(f"{root}/staged/a.jsonl") as stream:
        stream.write(payload)
    entry = filesystem.get_file_info(f"{root}/staged/a.jsonl")
    for error in (OSError("connection reset"), KeyboardInterrupt()):
        with pytest.raises(type(error)):
            storage.move_object(BrokenReads(filesystem, error), entry, f"{root}/out/a.jsonl")
        assert filesystem.get_file_info(f"{root}/out/a.jsonl").type == pafs.FileType.NotFound
        assert filesystem.get_file_info(f"{root}/staged/a.jsonl").size == len(payload)
    storage.move_object(filesystem, entry, f"{root}/out/a.jsonl")
    with filesystem.open_input_stream(f"{root}/out/a.jsonl") as stream:
        assert stream.read() == payload
    assert filesystem.get_file_info(f"{root}/staged/a.jsonl").type == pafs.FileType.NotFound

    local = pafs.LocalFileSystem()
    (tmp_path / "big").write_bytes(payload)
    inode = (tmp_path / "big").stat().st_ino
    storage.move_object(local, local.get_file_info(str(tmp_path / "big")), str(tmp_path / "moved"))
    assert (tmp_path / "moved").stat().st_ino == inode and not (tmp_path / "big").exists()


def test_a_process_that_used_s3_drops_its_file_systems_and_exits_cleanly(s3, tmp_path):
    """The exit hook (filesystems.release_file_systems) runs before pyarrow's own S3 finaliser: at
    the end of a process that read from the bucket, the cached file systems are gone and S3 is
    shut down by the time later exit functions run (registered first, so run last), and the
    process exits with 0."""
    url = s3(Path(__file__).parent / "kernel_host", "exit-hook")
    script = f"""
import atexit
def after():
    from gpudedup.io import filesystems
    import pyarrow.fs as pafs
    cached = filesystems._filesystem.cache_info().currsize
    try:
        pafs.S3FileSystem()
        state = "running"
    except Exception as error:
        state = type(error).__name__
    print("cached", cached, "s3", state, flush=True)
atexit.register(after)
from gpudedup.io import storage
assert storage.files_below(storage.Remote({url!r}))
"""
    done = subprocess.run([sys.executable, "-X", "faulthandler", "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["cached", "0", "s3", "ArrowInvalid"], (done.stdout, done.stderr)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("work_in_bucket", [False, True])
def test_dask_run_writes_to_object_storage(corpus, monkeypatch, tmp_path, work_in_bucket):
    """With the output on object storage each worker uploads the kept rows of its files (beside
    the client's staging folder; the commit moves them into place): the same files as from a
    local run. The largest object a server-side copy takes is made 2,000 bytes here, so that
    the commit moves some files by server-side copies and streams the others (as it streams
    files over S3's 5 GiB). With the work directory in the bucket too, the workers write their
    shards' units there (the clusters' parts among them) and read each other's through their
    caches, gone after the run."""
    pytest.importorskip("distributed", reason="Dask is not installed (pip install 'gpudedup[dask]')")
    root, url = corpus
    monkeypatch.chdir(root)
    monkeypatch.setattr(storage, "SERVER_COPY_LIMIT", 2000)
    sizes: list[int] = []
    move = storage.move_object
    monkeypatch.setattr(remote_output, "move_object",
                        lambda fs, entry, to: sizes.append(entry.size) or move(fs, entry, to))
    monkeypatch.setenv("GPUDEDUP_WORK_CACHE", str(tmp_path / "cache"))  # (the workers inherit it)
    out = f"s3://{BUCKET}/out-dask-{work_in_bucket}"
    work = f"s3://{BUCKET}/work-dask" if work_in_bucket else tmp_path / "work"
    gpudedup.dedup(url, backend="cpu", on_error="skip", workers=2, work_dir=work, shard_bytes=3000,
                   output=out, format="jsonl")
    assert min(sizes) <= 2000 < max(sizes), sizes  # both ways of moving
    if work_in_bucket:
        assert {"stages/pairs", "shards/00000", "clusters/00000"} <= set(units_under(work))
        assert not list((tmp_path / "cache").glob("*/*")), "a cache outlived the run"
        # A run stopped by an error on the workers (a repeated id) clears their caches too.
        texts = make_texts(20, seed=3)
        for name in ("x", "y"):
            write_jsonl(tmp_path / "repeated" / f"{name}.jsonl", [{"id": i, "text": t} for i, t in enumerate(texts)])
        with pytest.raises(gpudedup.InputError, match="duplicate id"):
            gpudedup.dedup(tmp_path / "repeated", backend="cpu", id_field="id", workers=2,
                           work_dir=f"s3://{BUCKET}/work-dask-failed")
        assert not list((tmp_path / "cache").rglob("*.*")), "a failed run left the workers' caches"
    gpudedup.dedup(Path("in"), backend="cpu", on_error="skip").write(tmp_path / "local", format="jsonl")
    fetched = result_bytes(download(out, tmp_path / "fetched"))
    local = result_bytes(tmp_path / "local")
    assert fetched.keys() == local.keys()
    for name, data in local.items():
        if name.startswith("deduplicated"):
            assert fetched[name] == data, name


KILLED_RUN_OPTIONS = ["--backend", "cpu", "-q", "--on-error", "skip", "--shard-bytes", "3000", "--format", "jsonl"]


@pytest.fixture(scope="module")
def bucket_reference(corpus, tmp_path_factory) -> Path:
    """The output of the killed runs' command, run once to its end (the same for both)."""
    root, url = corpus
    folder = tmp_path_factory.mktemp("bucket-reference")
    reference = cli_process(["dedup", url, "-o", str(folder / "reference"), "--work-dir", str(folder / "work"),
                             *KILLED_RUN_OPTIONS], root)
    stderr = finish(reference)
    assert reference.returncode == 0, stderr
    return folder / "reference"


@pytest.mark.timeout(300)  # five CLI runs in subprocesses
@pytest.mark.parametrize("work_in_bucket", [False, True])
def test_a_killed_run_over_the_bucket_resumes_to_the_same_output(corpus, bucket_reference, tmp_path, work_in_bucket):
    """A staged CLI run from the bucket into the bucket, its large files cut by ranged reads,
    killed (SIGKILL) as chosen stages begin, each time resumed with --resume from its work
    directory (a local folder, or a prefix of the bucket too): the finished output is the
    output of a run never killed, file for file, and no staging prefix is left in the bucket."""
    root, url = corpus
    options = KILLED_RUN_OPTIONS
    out = f"s3://{BUCKET}/resumed-{work_in_bucket}"
    work = f"s3://{BUCKET}/work-killed" if work_in_bucket else str(tmp_path / "work")
    killed = kill_then_resume(["dedup", url, "-o", out, "--work-dir", work, "--resume", *options],
                              root, tmp_path / "events", [("signature_pass", 3), ("read", 6), ("verify", 1),
                                                          ("write", 1)],
                              lambda: "report.json" in objects_under(out))
    assert killed >= 3, f"{killed} of 4 runs were killed"
    assert result_bytes(download(out, tmp_path / "fetched")) == result_bytes(bucket_reference)
    assert hidden_left(out) == []


def test_failed_upload_is_an_error(corpus, monkeypatch, tmp_path):
    """An object the store refuses (here: its bucket is gone after the checks) stops the write
    with one error; it is never reported as written."""
    root, url = corpus
    monkeypatch.chdir(root)
    result = gpudedup.dedup(url + "/big", backend="cpu")
    monkeypatch.setattr(outputdir, "check_remote_output", lambda out, overwrite, checked=False: None)
    with pytest.raises(gpudedup.OutputError, match="s3://no-such-bucket/out: cannot write the results"):
        result.write("s3://no-such-bucket/out")


def test_mixed_local_and_remote_inputs(corpus, monkeypatch, tmp_path):
    """A local file and an object in one run: the kept rows' files are named by their paths
    (the object's by its bucket and key, no scheme), each where report.json says."""
    root, url = corpus
    monkeypatch.chdir(root)
    result = gpudedup.dedup([Path("in/a.jsonl"), gpudedup.Remote(url + "/z/g.jsonl")], backend="cpu")
    result.write(tmp_path / "out", format="jsonl")
    kept = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))["output"]["kept_files"]
    assert all(":" not in name and (tmp_path / "out" / name).is_file() for name in kept), kept


def test_secrets_in_a_url_are_never_shown():
    remote = storage.Remote("s3://b/k.jsonl?access_key=AKIA&secret_key=hush&region=eu-west-1")
    assert str(remote) == "s3://b/k.jsonl?access_key=***&secret_key=***&region=eu-west-1"
    assert storage.key_of(remote) == str(remote) and storage.full_name(remote) == remote.url
    inline = storage.Remote("s3://AKIA:hush@b/k.jsonl")  # (credentials before the bucket, as pyarrow takes them)
    assert str(inline) == "s3://b/k.jsonl" and storage.parts_of(inline) == ["b", "k.jsonl"]
    assert storage.full_name(inline) == inline.url
    assert credentials.scrubbed("cannot reach s3://AKIA:hush@b/ (hush)", inline.url) == "cannot reach s3://b/ (***)"


def test_a_work_directory_url_with_credentials_is_shown_without_them(s3, monkeypatch, tmp_path):
    """A work directory named with its credentials (s3://KEY:SECRET@bucket/...) is reported,
    and named in messages, without them."""
    from gpudedup.pipeline.workdir import WorkDir

    monkeypatch.setenv("GPUDEDUP_WORK_CACHE", str(tmp_path / "cache"))
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    query = f"?scheme=http&endpoint_override={endpoint.split('://')[1]}"
    url = f"s3://testing:testing@{BUCKET}/work-credentials{query}"
    work = WorkDir(url, run_fingerprint(1), resume=False)
    assert work.shown == f"s3://{BUCKET}/work-credentials{query}" and "testing:" not in work.shown
    with pytest.raises(gpudedup.ParameterError) as refused:
        WorkDir(url, run_fingerprint(1), resume=False)
    assert "testing:" not in str(refused.value) and str(refused.value).startswith(work.shown)


def test_an_s3_url_with_its_options_in_the_query_reads_the_same(corpus, monkeypatch):
    """pyarrow's S3 options in the URL's query (endpoint_override, scheme): the query is the
    file system's, each file's path the key below the prefix, as without them."""
    root, url = corpus
    monkeypatch.chdir(root)
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    query = f"?endpoint_override={endpoint.split('://')[1]}&scheme=http"
    with_options = gpudedup.dedup(url + "/big" + query, backend="cpu")
    plain = gpudedup.dedup(url + "/big", backend="cpu")
    assert with_options.report["input"]["documents"] == plain.report["input"]["documents"] > 0
    assert [f["path"].replace(query, "") for f in with_options.report["input"]["files"]] == \
        [f["path"] for f in plain.report["input"]["files"]]
    assert with_options.pairs.num_rows == plain.pairs.num_rows > 0


# --- object keys taken as they are ---------------------------------------------------------------


def put_objects(prefix: str, objects: dict[str, bytes]) -> str:
    """Objects put under ``prefix`` in BUCKET by their keys exactly (boto3: pyarrow's client
    rewrites a key with "./" or "//" before it sends it); the prefix's URL."""
    import boto3

    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    for key, data in objects.items():
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{key}", Body=data)
    return f"s3://{BUCKET}/{prefix}"


def thirty(tag: str) -> bytes:
    return "".join(json.dumps({"id": f"{tag}{i}", "text": f"{tag} {make_texts(30, seed=3)[i]}"}) + "\n"
                   for i in range(30)).encode()


# Keys below in/ that no file name stands for one-to-one: "./a.jsonl" beside "a.jsonl" (the
# client reads a.jsonl for it), "sub/../../escape.jsonl" (read as a key outside in/, none), and
# "/c.jsonl" (refused by the client); and keys no URL names, "#" and "?" ending its path.
ODD_KEYS = ["./a.jsonl", "sub/../../escape.jsonl", "/c.jsonl", "hash#1.jsonl", "q?x.jsonl"]


@pytest.mark.parametrize("odd", ODD_KEYS)
def test_an_object_key_with_dot_or_empty_parts_is_refused_by_name(s3, tmp_path, odd):
    """The review's reproduction: in/a.jsonl (30 records) and one object of an odd key (30 other
    records). The run stops with one line naming the odd object, never reads another object for
    it, and never leaves it out unsaid."""
    url = put_objects(f"odd-keys/stop-{ODD_KEYS.index(odd)}/in", {"a.jsonl": thirty("a"), odd: thirty("b")})
    result = invoke("dedup", url + "/", "-o", tmp_path / "out", "--id-field", "id", "--backend", "cpu")
    assert_user_error(result, f"{url}/{odd}: the object's key h", "rename the object, or pass --on-error skip",
                      out=tmp_path / "out")


def test_objects_of_odd_keys_are_skipped_records_under_skip(s3, tmp_path):
    """Under --on-error skip each odd object is a skipped record of errors.jsonl, by its key as
    it is; a.jsonl is read once, as itself, and nothing is written outside the output."""
    url = put_objects("odd-keys/skip/in", {"a.jsonl": thirty("a"), **{odd: thirty(f"b{i}")
                                                                       for i, odd in enumerate(ODD_KEYS)}})
    result = invoke("dedup", url, "-o", tmp_path / "out", "--id-field", "id", "--backend", "cpu",
                    "--on-error", "skip")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert [f["path"] for f in report["input"]["files"]] == [f"{url}/a.jsonl"]
    assert report["input"]["documents"] == 30 and report["balance"]["skipped"] == len(ODD_KEYS)
    skipped = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert sorted(r["file"] for r in skipped) == sorted(f"{url}/{odd}" for odd in ODD_KEYS)
    assert all(r["line"] is None and "the object's key h" in r["reason"] for r in skipped)
    kept = (tmp_path / "out" / "deduplicated" / "a.parquet")
    assert all(id_.startswith("a") for id_ in pq.read_table(kept).column("id").to_pylist())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_index_must_be_local():
    with pytest.raises(gpudedup.ParameterError, match="an index must be a local folder"):
        gpudedup.Index.create("s3://corpora/index", threshold=0.8)


def test_index_verifies_from_remote_sources(corpus, monkeypatch, tmp_path):
    """An index made with verification "source" reads the stored documents back from the
    objects they came from, and checks them against the size and SHA-256 it recorded."""
    root, url = corpus
    monkeypatch.chdir(root)
    index = gpudedup.Index.create(tmp_path / "index", verification="source", threshold=0.8)
    index.add(url + "/big/h.jsonl")
    texts = [json.loads(line)["text"] for line in (root / "in" / "big" / "h.jsonl").read_text().splitlines()]
    [matches] = index.query([texts[3]])
    prefix = f"{url}/big/h.jsonl:"
    assert matches and all(found.startswith(prefix) for found, _ in matches)
    # The best match is an indexed copy of the query, read back from the object.
    best, jaccard = matches[0]
    assert jaccard == 1.0 and texts[int(best[len(prefix):]) - 1] == texts[3]


def test_an_add_with_its_work_directory_in_the_bucket_is_the_add_in_memory(corpus, monkeypatch, tmp_path):
    """An add over objects whose work directory is in the bucket too (the matched indexed
    documents as its lead shard, read by the stages from there) keeps, pairs and commits what
    the in-memory add of the same objects does, with an index verifying from the sources."""
    root, url = corpus
    monkeypatch.chdir(root)
    indexes = {how: gpudedup.Index.create(tmp_path / how, verification="source", threshold=0.8)
               for how in ("memory", "staged")}
    for index in indexes.values():
        index.add(url + "/big/i.parquet", backend="cpu")
    reference = indexes["memory"].add(url + "/big/h.jsonl", backend="cpu")
    work = url.rsplit("/", 1)[0] + "/work-index"  # (beside in/, which other tests read whole)
    staged = indexes["staged"].add(url + "/big/h.jsonl", backend="cpu", work_dir=work, shard_bytes="4KB")
    assert reference.indexed_rows > 0 and reference.removed.shape[0] > 0
    assert staged.pairs.equals(reference.pairs) and staged.clusters.equals(reference.clusters)
    np.testing.assert_array_equal(staged.keep, reference.keep)
    assert indexes["staged"].info()["documents"] == indexes["memory"].info()["documents"]


# --- the work directory on object storage (pipeline/workdir.py's BucketFolder) -----------------


def put(url: str, data: bytes) -> None:
    """Write the object ``url`` in one request (as gpudedup's own small writes go)."""
    filesystem, path = storage.Remote(url).filesystem()
    with filesystem.open_output_stream(path) as out:
        out.write(data)


def units_under(url: str) -> dict[str, dict]:
    """The complete units of a work directory in the bucket: folder -> its marker."""
    markers = [name for name in objects_under(url) if name.endswith(f"/{MARKER}")]
    return {name[:-len(f"/{MARKER}")]: json.loads(storage.read_bytes(storage.Remote(f"{url}/{name}")))
            for name in markers}


def shard_tokens(url: str) -> dict[str, str]:
    """The signed shards of the work directory ``url`` in the bucket: unit -> the token of its
    marker, which a shard signed again is written with anew."""
    return {unit: marker["token"] for unit, marker in units_under(url).items() if unit.startswith("shards/")}


@pytest.mark.timeout(120)
def test_staged_run_keeps_its_stages_in_the_bucket(corpus, monkeypatch, tmp_path):
    """A staged run whose work directory is a URL: the same results as the in-memory run; the
    bucket holds the manifest, the plan and a marker per unit naming its files' sizes; this
    machine's cache of it is gone after the run; a resume signs nothing and gives the same."""
    root, url = corpus
    monkeypatch.chdir(root)
    monkeypatch.setenv("GPUDEDUP_WORK_CACHE", str(tmp_path / "cache"))
    work = f"s3://{BUCKET}/work-staged"
    local = gpudedup.dedup(Path("in"), backend="cpu", on_error="skip")
    staged = gpudedup.dedup(url, backend="cpu", on_error="skip", work_dir=work, shard_bytes=3000)
    assert_same_as_local(staged, local, url)
    assert staged.report["work_dir"] == work
    names = objects_under(work)
    assert "manifest.json" in names and "plan.npy" in names
    units = units_under(work)
    plan = np.load(pa.BufferReader(storage.read_bytes(storage.Remote(f"{work}/plan.npy"))))
    assert plan.shape[0] > 8
    stages = {"stages/copies", "stages/candidates", "stages/pairs"}
    assert {f"shards/{index:05d}" for index in range(plan.shape[0])} | stages <= set(units)
    assert any(unit.startswith("sets/") for unit in units)
    for unit, marker in units.items():  # every file of a unit, as big as its marker says
        sizes = {name[len(unit) + 1:]: storage.file_size(storage.Remote(f"{work}/{name}"))
                 for name in names if name.startswith(unit + "/") and not name.endswith(f"/{MARKER}")}
        assert sizes == marker["sizes"], unit
    assert not list((tmp_path / "cache").glob("*/*")), "the cache outlived the run"
    assert local_ids(pa.table({"id": staged.ids}), url)["id"].combine_chunks().equals(local.ids)
    assert local_ids(staged.all_pairs(), url).equals(local.all_pairs())
    assert not list((tmp_path / "cache").rglob("*.*")), "reading the ids after the run filled the cache again"
    signed = shard_tokens(work)
    resumed = gpudedup.dedup(url, backend="cpu", on_error="skip", work_dir=work, shard_bytes=3000, resume=True)
    assert shard_tokens(work) == signed  # (no shard signed again)
    assert_same_as_local(resumed, local, url)


@pytest.mark.timeout(120)
def test_the_client_asks_the_bucket_about_many_shards_side_by_side(corpus, monkeypatch, tmp_path):
    """Whether each shard is signed, and each shard's small files (info.json, the columns'
    schema, the line numbers): asked one after the other, a request per shard takes hours at
    160,000 shards (at 10-20 ms a request on S3). The client asks them side by side
    (pipeline/workdir.py REQUEST_THREADS). Counted: the requests in flight at once (each held 20
    ms here so that side by side shows), which were never more than one before; the results
    are the local run's."""
    import threading
    import time

    root, url = corpus
    monkeypatch.chdir(root)
    monkeypatch.setenv("GPUDEDUP_WORK_CACHE", str(tmp_path / "cache"))
    in_flight = {"markers": [0, 0], "files": [0, 0]}  # now, most
    lock = threading.Lock()

    def held(kind: str, function):
        def wrapped(*args, **kwargs):
            with lock:
                in_flight[kind][0] += 1
                in_flight[kind][1] = max(in_flight[kind])
            try:
                time.sleep(0.02)
                return function(*args, **kwargs)
            finally:
                with lock:
                    in_flight[kind][0] -= 1
        return wrapped

    monkeypatch.setattr(storage, "read_bytes", held("markers", storage.read_bytes))
    monkeypatch.setattr(storage, "open_stream", held("files", storage.open_stream))
    local = gpudedup.dedup(Path("in"), backend="cpu", on_error="skip")
    staged = gpudedup.dedup(url, backend="cpu", on_error="skip", work_dir=f"s3://{BUCKET}/work-side-by-side",
                            shard_bytes=3000)
    assert_same_as_local(staged, local, url)
    assert in_flight["markers"][1] > 1 and in_flight["files"][1] > 1, in_flight


@pytest.mark.timeout(120)
def test_units_without_their_marker_are_written_again(corpus, monkeypatch, tmp_path):
    """What a killed writer leaves of a unit (its files, no marker) does not count: a resume
    signs that shard again and redoes that stage, over the left files, to the same results."""
    root, url = corpus
    monkeypatch.chdir(root)
    monkeypatch.setenv("GPUDEDUP_WORK_CACHE", str(tmp_path / "cache"))
    work = f"s3://{BUCKET}/work-unmarked"
    first = gpudedup.dedup(url, backend="cpu", on_error="skip", work_dir=work, shard_bytes=3000)
    _ = first.pairs, first.clusters, first.keep  # (read now: the resume makes the clusters again)
    filesystem, path = pafs.FileSystem.from_uri(work)
    for unit in ("shards/00002", "stages/pairs"):
        filesystem.delete_file(f"{path}/{unit}/{MARKER}")
    put(f"{work}/shards/00002/stray.npy", b"half a file")
    signed = shard_tokens(work)
    again = gpudedup.dedup(url, backend="cpu", on_error="skip", work_dir=work, shard_bytes=3000, resume=True)
    now = shard_tokens(work)
    assert "shards/00002" not in signed and {unit: now[unit] for unit in signed} == signed and set(now) == \
        set(signed) | {"shards/00002"}  # (that shard alone signed again)
    assert again.pairs.equals(first.pairs) and again.clusters.equals(first.clusters)
    np.testing.assert_array_equal(again.keep, first.keep)
    assert "shards/00002/stray.npy" not in objects_under(work)
    assert {"shards/00002", "stages/pairs"} <= set(units_under(work))


def test_a_unit_written_again_is_never_read_from_an_older_copy(s3, monkeypatch, tmp_path):
    """Each process reads a unit's files through its cache, under the token of the unit's
    marker: a unit removed and written again by another process is read anew, and a file
    shorter than its marker says is refused, not cached."""
    from gpudedup.pipeline.workdir import WorkDir

    monkeypatch.setenv("GPUDEDUP_WORK_CACHE", str(tmp_path / "cache"))
    url = f"s3://{BUCKET}/work-units"
    WorkDir(url, run_fingerprint(1), resume=False).save_stage("x", {"a": np.arange(5)})
    reader = WorkDir.attach(url)
    np.testing.assert_array_equal(reader.load_stage("x")["a"], np.arange(5))  # now in the cache
    writer = WorkDir.attach(url)
    writer.remove("stages/x")
    assert not WorkDir.attach(url).done("stages/x")
    writer.save_stage("x", {"a": np.arange(7) * 2})
    np.testing.assert_array_equal(WorkDir.attach(url).load_stage("x")["a"], np.arange(7) * 2)
    put(f"{url}/stages/x/a.npy", b"\x93NUMPY")
    fresh = WorkDir.attach(url)
    for cached in (tmp_path / "cache").rglob("a.npy"):
        cached.unlink()
    with pytest.raises(OSError, match="stages/x/a.npy: 6 bytes, its unit's marker says"):
        fresh.load_stage("x")
    assert not list((tmp_path / "cache").rglob("a.npy"))
    assert not list((tmp_path / "cache").rglob(f"{TEMPORARY_PREFIX}*"))


def run_fingerprint(run: int) -> dict:
    """A work directory's fingerprint for a test: a run's (it names the format) numbered ``run``."""
    return {FORMAT_KEY: WORK_DIR_FORMAT, "run": run}


@pytest.mark.parametrize("state, resume, message", [
    ("earlier", False, "the work directory holds an earlier run; pass resume=True"),
    ("other", True, "the work directory belongs to another run (run was 1, now 2)"),
    ("index", False, "not a gpudedup work directory (its manifest.json is not a run's) and not empty"),
    ("foreign", False, "not a gpudedup work directory (no manifest.json) and not empty"),
])
def test_a_work_directory_in_the_bucket_is_checked_like_a_folder(s3, tmp_path, state, resume, message):
    from gpudedup.pipeline.workdir import WorkDir

    url = f"s3://{BUCKET}/work-checked-{state}"
    if state == "foreign":
        put(f"{url}/notes.txt", b"someone else's")
    elif state == "index":
        put(f"{url}/manifest.json", b'{"format": 1, "segments": []}')
    else:
        WorkDir(url, run_fingerprint(1), resume=False)
    with pytest.raises(gpudedup.ParameterError, match=f"{url}: {message}".replace("(", r"\(").replace(")", r"\)")):
        WorkDir(url, run_fingerprint(2 if state == "other" else 1), resume=resume)


def test_an_input_the_store_cannot_answer_for_is_named_as_the_input(corpus, monkeypatch, tmp_path):
    """An input file whose store times out when a work directory's run looks at it again (its
    size and time, for the fingerprint) is an InputError naming that file, not a failure to
    write the work directory."""
    root, url = corpus
    monkeypatch.chdir(root)
    real = storage.size_and_time

    def timing_out(location):
        if isinstance(location, storage.Remote):
            raise OSError("AWS Error NETWORK_CONNECTION during HeadObject operation: timeout")
        return real(location)

    monkeypatch.setattr(storage, "size_and_time", timing_out)
    with pytest.raises(gpudedup.InputError, match=rf"^{url}/big/\S+: cannot read \(AWS Error NETWORK_CONNECTION"):
        gpudedup.dedup(url + "/big", backend="cpu", work_dir=tmp_path / "work")


@pytest.mark.timeout(120)
def test_a_failed_upload_to_the_work_directory_stops_the_run_and_resumes(corpus, monkeypatch, tmp_path):
    """An object of the work directory that the store refuses part way through the signatures
    stops the run with one error that says the finished stages are kept; the unit being
    written has no marker, so --resume signs exactly the shards without one, to the results of
    a run never stopped."""
    root, url = corpus
    monkeypatch.chdir(root)
    monkeypatch.setenv("GPUDEDUP_WORK_CACHE", str(tmp_path / "cache"))
    local = gpudedup.dedup(Path("in"), backend="cpu", on_error="skip")
    work = f"s3://{BUCKET}/work-refused"
    upload, uploads = storage.upload, []

    def refusing(path, remote):
        uploads.append(remote)
        if len(uploads) == 40:
            raise OSError("the store refused the object")
        upload(path, remote)

    monkeypatch.setattr(storage, "upload", refusing)
    with pytest.raises(gpudedup.OutputError, match=rf"^{work}: cannot write the work directory \(the store refused "
                                                   r"the object\); the stages it finished are kept"):
        gpudedup.dedup(url, backend="cpu", on_error="skip", work_dir=work, shard_bytes=3000)
    monkeypatch.setattr(storage, "upload", upload)
    finished = shard_tokens(work)
    assert 0 < len(finished) < 20
    resumed = gpudedup.dedup(url, backend="cpu", on_error="skip", work_dir=work, shard_bytes=3000, resume=True)
    plan = np.load(pa.BufferReader(storage.read_bytes(storage.Remote(f"{work}/plan.npy"))))
    now = shard_tokens(work)
    # The shards without a marker signed, those with one not signed again.
    assert set(now) == {f"shards/{index:05d}" for index in range(plan.shape[0])} and len(now) > len(finished)
    assert {unit: now[unit] for unit in finished} == finished
    assert_same_as_local(resumed, local, url)


def test_an_interrupt_while_an_output_in_the_bucket_is_replaced_says_so(corpus, monkeypatch, tmp_path):
    """Ctrl-C after the old output's objects began to be deleted (object stores have no rename)
    ends the CLI with one line that says the previous output is gone and the new one has no
    report.json, not "nothing was written"; before that point, "nothing was written"."""
    root, url = corpus
    monkeypatch.chdir(root)
    out = f"s3://{BUCKET}/interrupted"
    args = ["dedup", url + "/big", "-o", out, "--backend", "cpu", "--overwrite"]
    assert invoke(*args).exit_code == 0
    upload, file_entries = remote_output.upload, remote_output.file_entries

    def interrupted(local, remote):
        raise KeyboardInterrupt

    monkeypatch.setattr(remote_output, "upload", interrupted)
    result = invoke(*args)
    assert result.exit_code == 130
    assert result.stderr.strip().splitlines()[-1] == (
        f"interrupted: the previous output at {out} was removed and the new one is incomplete (it has no "
        "report.json)")
    assert "report.json" not in objects_under(out)
    monkeypatch.setattr(remote_output, "upload", upload)
    monkeypatch.setattr(remote_output, "file_entries", lambda remote: (_ for _ in ()).throw(KeyboardInterrupt))
    result = invoke(*args)
    assert result.exit_code == 130 and result.stderr.strip().splitlines()[-1] == "interrupted: nothing was written"
    # A new prefix has no previous output to lose: the new one is what is incomplete.
    monkeypatch.setattr(remote_output, "file_entries", file_entries)
    monkeypatch.setattr(remote_output, "upload", interrupted)
    fresh = f"s3://{BUCKET}/interrupted-new"
    result = invoke("dedup", url + "/big", "-o", fresh, "--backend", "cpu")
    assert result.exit_code == 130
    assert result.stderr.strip().splitlines()[-1] == (
        f"interrupted: the output at {fresh} is incomplete (it has no report.json)")
    assert "report.json" not in objects_under(fresh)
