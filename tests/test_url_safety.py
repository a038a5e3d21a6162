"""URLs that carry credentials (io/credentials.py, io/storage.py).

- An http(s) URL with a query (a presigned S3 URL, an Azure SAS URL, a token URL) is read as
  it names: the file at its path, requested with its query. Served here by a local HTTP server
  that, like a presigned URL's host, takes any query but refuses an expired token (403), and
  serves byte ranges (Parquet footers).
- Its credentials (the user part's password, credential options of its query) are shown
  nowhere: not in messages, ids, report.json, report.html, errors.jsonl or the command's
  output; credentials.shown_url is what shows a URL, credentials.scrubbed what takes
  credentials out of a library's message.
"""

from __future__ import annotations

import functools
import http.server
import io
import json
import re
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpudedup
from cli_support import assert_user_error, error_line, invoke, paragraph, variant, write_jsonl
from gpudedup.errors import InputError
from gpudedup.io import credentials, storage
from gpudedup.io.inputs import scan_inputs

SECRETS = ("SECRETSIG2", "AKIAFAKE", "SECRETTOKEN4", "EXPIREDSECRET")
PRESIGNED = "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAFAKE%2F20261128%2Fus-east-1%2Fs3%2Faws4_request" \
            "&X-Amz-Date=20261128T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature=SECRETSIG2"


class PresignedHost(http.server.SimpleHTTPRequestHandler):
    """Serves a folder as a presigned URL's host would: the path names the file, the query is
    the request's (any is taken, but a token "EXPIRED..." is refused with 403); a Range header
    gets those bytes. Each request's path and query is noted in ``server.requests``."""

    def log_message(self, *args) -> None:  # (quiet: the test reads server.requests)
        pass

    def send_head(self):
        self.server.requests.append(self.path)  # type: ignore[attr-defined]
        if "EXPIRED" in self.path:
            self.send_error(403, "Forbidden")
            return None
        wanted = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if wanted is None:
            return super().send_head()
        try:
            data = Path(self.translate_path(self.path)).read_bytes()
        except OSError:
            self.send_error(404, "File not found")
            return None
        start = int(wanted[1])
        stop = min(int(wanted[2]) + 1 if wanted[2] else len(data), len(data))
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{len(data)}")
        self.send_header("Content-Length", str(stop - start))
        self.end_headers()
        return io.BytesIO(data[start:stop])


def corpus_records(rows: int = 1500) -> list[dict]:
    """``rows`` records (no id field), every third a near-duplicate of the one before it."""
    texts = []
    for i in range(rows):
        texts.append(variant(texts[-1], f"w{i}") if i % 3 == 2 else paragraph(i, words=30))
    return [{"text": text, "n": i} for i, text in enumerate(texts)]


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """(the server's base URL, the folder it serves, the requests it got): a.jsonl (1,500
    records), bad.jsonl (20 records, 2 lines not JSON) and c.parquet."""
    folder = tmp_path_factory.mktemp("served")
    write_jsonl(folder / "a.jsonl", corpus_records())
    bad = write_jsonl(folder / "bad.jsonl", corpus_records(20))
    lines = bad.read_text(encoding="utf-8").splitlines(keepends=True)
    bad.write_text("".join(lines[:5] + ["{not json\n"] + lines[5:12] + ["[1, 2\n"] + lines[12:]), encoding="utf-8")
    texts = [r["text"] for r in corpus_records(300)]
    pq.write_table(pa.table({"text": texts}), folder / "c.parquet", row_group_size=50)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(PresignedHost, directory=str(folder)))
    server.requests = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", folder, server.requests  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()


def files_holding(folder: Path, secrets=SECRETS) -> list[str]:
    """The files under ``folder`` whose bytes hold one of ``secrets``."""
    return [str(path) for path in folder.rglob("*") if path.is_file()
            and any(secret.encode() in path.read_bytes() for secret in secrets)]


# --- F5: an http(s) URL with a query is read as it names ----------------------------------------


def test_a_presigned_url_reads_its_file_and_its_secrets_are_shown_nowhere(host, tmp_path):
    """The review's reproduction, as a user runs it (a process of its own, its stderr read):
    the file's 1,500 records are read (not the folder's listing), the requests go to the file's
    path with the URL's query, and no credential is in the output files or the output."""
    base, folder, requests = host
    url = f"{base}/a.jsonl{PRESIGNED}"
    before = len(requests)
    run = subprocess.run([sys.executable, "-m", "gpudedup", "dedup", url, "-o", tmp_path / "out", "--backend", "cpu",
                          "--format", "jsonl"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert report["balance"]["input_records"] == 1500 and report["results"]["removed_documents"] > 0
    assert {request.partition("?")[0] for request in requests[before:]} == {"/a.jsonl"}
    assert all(request.endswith("X-Amz-Signature=SECRETSIG2") for request in requests[before:])
    # The kept rows are the local file's.
    local = gpudedup.dedup(folder / "a.jsonl", backend="cpu")
    kept = [line for line, keep in zip((folder / "a.jsonl").read_text(encoding="utf-8").splitlines(keepends=True),
                                       local.keep) if keep]
    assert (tmp_path / "out" / "deduplicated" / "a.jsonl").read_text(encoding="utf-8") == "".join(kept)
    assert files_holding(tmp_path / "out") == []
    assert not any(secret in run.stdout + run.stderr for secret in SECRETS)
    # Ids name the file by its URL as shown: the credentials hidden, the other options kept.
    shown = credentials.shown_url(url)
    assert "X-Amz-Signature=***" in shown and "X-Amz-Credential=***" in shown and "X-Amz-Expires=3600" in shown
    assert report["input"]["paths"] == [shown] and report["input"]["files"][0]["path"] == shown
    ids = pq.read_table(tmp_path / "out" / "clusters").column("id").to_pylist()
    assert ids and all(id_.startswith(f"{shown}:") for id_ in ids)


def test_skipped_records_of_a_token_url_name_it_without_the_token(host, tmp_path):
    """Two URLs with --on-error skip, one with lines that are not JSON: errors.jsonl,
    report.json and report.html name both files without their credentials."""
    base, _, _ = host
    good, bad = f"{base}/a.jsonl{PRESIGNED}", f"{base}/bad.jsonl?X-Amz-Signature=SECRETSIG2&token=SECRETTOKEN4"
    result = invoke("dedup", good, bad, "-o", tmp_path / "out", "--backend", "cpu", "--on-error", "skip")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert report["balance"]["input_records"] == 1522 and report["balance"]["skipped"] == 2
    skipped = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert [(r["file"], r["line"]) for r in skipped] == [(f"{base}/bad.jsonl?X-Amz-Signature=***&token=***", 6),
                                                        (f"{base}/bad.jsonl?X-Amz-Signature=***&token=***", 14)]
    assert files_holding(tmp_path / "out") == [] and not any(secret in result.output for secret in SECRETS)


def test_a_parquet_file_at_a_sas_url_is_read_by_ranges(host, tmp_path):
    """A Parquet file at a URL with a query (its footer read by a ranged request), named by
    a Remote in the API: the same pairs as the local file, ids naming the URL as shown."""
    base, folder, _ = host
    url = f"{base}/c.parquet?sv=2022-11-02&se=2026-12-01&sp=r&sig=SECRETSIG2"
    remote = gpudedup.dedup([gpudedup.Remote(url)], backend="cpu")
    local = gpudedup.dedup(folder / "c.parquet", backend="cpu")
    assert local.pairs.num_rows > 0
    assert remote.pairs.to_pylist() == [{**pair, "id_a": pair["id_a"].replace(str(folder / "c.parquet"), shown_sas),
                                         "id_b": pair["id_b"].replace(str(folder / "c.parquet"), shown_sas)}
                                        for pair in local.pairs.to_pylist()
                                        for shown_sas in [f"{base}/c.parquet?sv=2022-11-02&se=2026-12-01&sp=r&sig=***"]]
    remote.write(tmp_path / "out")
    assert files_holding(tmp_path / "out") == []


def test_a_refused_url_is_one_line_without_its_token(host, tmp_path):
    base, _, _ = host
    result = invoke("dedup", f"{base}/a.jsonl?token=EXPIREDSECRET", "-o", tmp_path / "out", "--backend", "cpu")
    line = assert_user_error(result, f"{base}/a.jsonl?token=***: cannot read (the server answered 403 Forbidden)",
                             out=tmp_path / "out")
    assert "EXPIREDSECRET" not in result.output, line


def test_a_scheme_that_cannot_be_read_is_named_with_its_path_and_without_its_secret(monkeypatch, tmp_path):
    """Without fsspec's http support (aiohttp), the message names the file asked for, not the
    host's root, and hides the signature."""
    import fsspec.core

    def missing(url, **options):
        raise ImportError("HTTPFileSystem requires 'aiohttp' to be installed")

    monkeypatch.setattr(fsspec.core, "url_to_fs", missing)
    result = invoke("dedup", "http://127.0.0.1:9/a.jsonl?X-Amz-Signature=SECRETSIG2", "-o", tmp_path / "out",
                    "--backend", "cpu")
    assert_user_error(result, "http://127.0.0.1:9/a.jsonl?X-Amz-Signature=***: http:// URLs cannot be read here",
                      out=tmp_path / "out")
    assert "SECRETSIG2" not in result.output


# --- F10 and point 4: one rule hides every credential of a URL ---------------------------------


@pytest.mark.parametrize("url, shown", [
    # A presigned S3 URL: the credential and the signature hidden, the other options kept.
    ("https://b.s3.amazonaws.com/k.jsonl?X-Amz-Credential=AKIA%2Fx&X-Amz-Date=20261128T0Z&X-Amz-Signature=ab12"
     "&X-Amz-Security-Token=tok",
     "https://b.s3.amazonaws.com/k.jsonl?X-Amz-Credential=***&X-Amz-Date=20261128T0Z&X-Amz-Signature=***"
     "&X-Amz-Security-Token=***"),
    # An Azure SAS URL: sig is the secret.
    ("https://acct.blob.core.windows.net/c/k.jsonl?sv=2022-11-02&se=2026-12-01&sp=r&sig=a%2Bb%3D",
     "https://acct.blob.core.windows.net/c/k.jsonl?sv=2022-11-02&se=2026-12-01&sp=r&sig=***"),
    # abfs: client_secret hidden; the container before "@" names a place and stays, its password does not.
    ("abfs://cont@acct.dfs.core.windows.net/x/?tenant_id=t&client_id=c&client_secret=AZSECRET9",
     "abfs://cont@acct.dfs.core.windows.net/x/?tenant_id=t&client_id=c&client_secret=***"),
    ("abfs://cont:ACCOUNTKEY@acct.dfs.core.windows.net/x", "abfs://cont@acct.dfs.core.windows.net/x"),
    # A user part with a password is left out whole (an S3 access key, an http user).
    ("s3://AKIA:hush@b/k.jsonl", "s3://b/k.jsonl"),
    ("https://user:pass@host:8443/k.jsonl", "https://host:8443/k.jsonl"),
    ("hdfs://someone@namenode:8020/k.jsonl", "hdfs://someone@namenode:8020/k.jsonl"),
    # Names are matched by word, in any case; options without credentials stay as they are.
    ("https://h/k.jsonl?TOKEN=1&access_token=2&api_key=3&Password=4&code=5&session_token=6&secret_key=7",
     "https://h/k.jsonl?TOKEN=***&access_token=***&api_key=***&Password=***&code=***&session_token=***"
     "&secret_key=***"),
    ("s3://b/k.jsonl?endpoint_override=127.0.0.1:9000&scheme=http&region=eu-west-1",
     "s3://b/k.jsonl?endpoint_override=127.0.0.1:9000&scheme=http&region=eu-west-1"),
    ("https://h/k.jsonl#access_token=abc", "https://h/k.jsonl#access_token=***"),
])
def test_shown_url_hides_every_credential(url, shown):
    assert credentials.shown_url(url) == shown
    assert credentials.shown_url(shown) == shown  # (what is shown already is shown as it is)
    remote = storage.Remote(url)
    assert str(remote) == shown and storage.key_of(remote) == shown and storage.full_name(remote) == url


def test_a_library_message_is_scrubbed_of_the_credentials_it_quotes():
    """A library's message may quote the URL (encoded its own way) or a secret alone; an id's
    line number after a hidden value stays."""
    url = "https://h/a.jsonl?X-Amz-Credential=AKIA%2FSCOPE&X-Amz-Signature=SIGNATURE9"
    storage.Remote(url)  # (a URL named in this process: its credentials are looked for from now on)
    message = ("403, message='Forbidden', url='https://h/a.jsonl?X-Amz-Credential=AKIA/SCOPE&"
               "X-Amz-Signature=SIGNATURE9' (SIGNATURE9 expired)")
    scrubbed = credentials.scrubbed(message)
    assert "SIGNATURE9" not in scrubbed and "AKIA" not in scrubbed
    assert scrubbed.startswith("403, message='Forbidden', url='https://h/a.jsonl?X-Amz-Credential=***&")
    assert credentials.scrubbed("https://h/a.jsonl?token=***:5: not JSON") == "https://h/a.jsonl?token=***:5: not JSON"
    assert credentials.first_line(OSError("cannot reach https://u:PASSWORD1@h/a.jsonl\nmore")) == \
        "cannot reach https://h/a.jsonl"


def test_an_abfs_secret_is_not_in_the_error_that_names_it(monkeypatch, tmp_path):
    """The review's reproduction (abfs with client_secret in its query), with the file system's
    answer made here: the library's message quotes the URL and the secret; the error line
    shows neither, and names the container."""
    url = "abfs://cont@acct.dfs.core.windows.net/x/?tenant_id=t&client_id=c&client_secret=AZSECRET9"

    def unreachable(location):
        raise OSError(f"Check for {location.url} failed: client secret AZSECRET9 rejected")

    monkeypatch.setattr(storage, "info", unreachable)
    with pytest.raises(InputError) as refused:
        scan_inputs([url])
    assert "AZSECRET9" not in str(refused.value)
    assert str(refused.value).startswith("abfs://cont@acct.dfs.core.windows.net/x/?tenant_id=t&client_id=c&"
                                         "client_secret=***: cannot read (")
    result = invoke("dedup", url, "-o", tmp_path / "out", "--backend", "cpu")
    assert "AZSECRET9" not in error_line(result) and result.exit_code == 2


@pytest.mark.parametrize("place", ["s3://corpora/inout/./in/out", "s3://corpora/chain/x/../out"],
                         ids=["dot", "dot-dot"])
def test_an_output_or_work_directory_url_with_dot_parts_is_refused(tmp_path, place):
    """pyarrow's S3 client rewrites a/./b and x/../b into another key: the checks of where a run
    writes would see one place and its writes land in another (inside an input, beside someone's
    objects, over an old output). Such an output or work directory is one line, before any
    work (no object store is asked)."""
    write_jsonl(tmp_path / "data.jsonl", [{"text": paragraph(1)}, {"text": variant(paragraph(1), "x")}])
    for option in ("-o", "--work-dir"):
        arguments = ["-o", place] if option == "-o" else ["-o", str(tmp_path / "out"), "--work-dir", place]
        result = invoke("dedup", str(tmp_path / "data.jsonl"), *arguments)
        assert result.exit_code == 2, result.output
        part = "'.'" if "/./" in place else "'..'"
        assert f"the URL has a {part} part, which the object store's client rewrites into another key" in \
            error_line(result)
        assert not (tmp_path / "out").exists()
