"""A file system that cannot be reached fails like a missing local file (io/filesystems.py): an
endpoint that refuses connections, a server that accepts them and never answers, an unknown
scheme and a scheme whose package is not installed each end a run with one line and exit
code 2, within the timeout (filesystems.remote_timeout, shortened here through its environment
variable); and SIGTERM or Ctrl-C ends a run blocked on such a server at once, even while its
main thread waits inside a file system's C++ client (interrupts.py's watcher).

The servers are local: a port with nothing listening on it, and a socket that accepts every
connection and never sends a byte (SilentServer). The CLI runs as the `gpudedup` entry point
does (console.main), in a subprocess.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import pytest

from cli_support import assert_user_error, invoke
from gpudedup.io import filesystems, storage
from gpudedup.io.credentials import shown_url

# The timeout the runs here are given (filesystems.REMOTE_TIMEOUT_VARIABLE), in seconds.
BOUND = 2.0
# What a run or a call may take beyond the bound once the server has been contacted (its exit,
# the imports of a first call), on a machine that other tests load: it took up to 2 s alone and
# past 3 s beside a full suite on two cores; a client without the bound waits minutes.
SLACK = 6.0
# The watcher's wait for the main thread (interrupts.UNTAKEN_SIGNAL_S) in the runs here.
UNTAKEN = 1.0
# What an S3 request may wait beyond the bound, which its attempts share: each attempt up to
# a second or two longer (curl checks the request timeout once a second, in whole seconds),
# and the client's pauses between attempts.
S3_OVER = filesystems.S3_ATTEMPTS * 2.5
SECRET = "s3cr3t-T0KEN"
# The command the `gpudedup` entry point runs, after what a test puts before it.
ENTRY = "from gpudedup.console import main; main()"


class SilentServer:
    """A local server that accepts every connection and never answers: ``port``; ``contacted``
    is set at the first connection, made at the monotonic time ``first``."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.settimeout(0.1)
        self.port = self.listener.getsockname()[1]
        self.connections: list[socket.socket] = []
        self.contacted = threading.Event()
        self.first: Optional[float] = None
        self.stopping = False
        self.thread = threading.Thread(target=self.accept, daemon=True)
        self.thread.start()

    def accept(self) -> None:
        while not self.stopping:
            try:
                connection, _ = self.listener.accept()
            except socket.timeout:
                continue
            self.connections.append(connection)  # (held open, never answered)
            if self.first is None:
                self.first = time.monotonic()
                self.contacted.set()

    def close(self) -> None:
        self.stopping = True
        self.thread.join()
        for connection in [self.listener, *self.connections]:
            connection.close()


@pytest.fixture
def silent():
    server = SilentServer()
    yield server
    server.close()


@pytest.fixture
def refused_port() -> int:
    """A local port with no server: bound, then closed."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def cli(tmp_path: Path, *args: str, env: Optional[dict] = None, before: str = "") -> subprocess.Popen:
    """``gpudedup dedup ARGS -o OUT`` as the entry point runs it, in a subprocess, with the
    timeout BOUND and AWS credentials of no account; ``before``: Python run first."""
    settings = {**os.environ, filesystems.REMOTE_TIMEOUT_VARIABLE: str(BOUND), "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1", **(env or {})}
    return subprocess.Popen([sys.executable, "-c", f"{before}\n{ENTRY}", "dedup", *args, "-o", str(tmp_path / "out")],
                            cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=settings)


def ended(run: subprocess.Popen) -> tuple[int, str, float]:
    """(exit code, stderr, the monotonic time it ended) of a run."""
    _, stderr = run.communicate(timeout=60)
    return run.returncode, stderr, time.monotonic()


def one_line(stderr: str, *fragments: str) -> str:
    """The one line a run printed on stderr, holding every fragment, no credential and no
    traceback."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    assert SECRET not in stderr
    return lines[0]


# A refused connection ----------------------------------------------------------------------


def test_refused_s3_endpoint_is_one_line(tmp_path, refused_port):
    run = cli(tmp_path, "s3://corpora/in/a.jsonl", env={"AWS_ENDPOINT_URL": f"http://127.0.0.1:{refused_port}"})
    code, stderr, _ = ended(run)
    assert code == 2
    one_line(stderr, "error: s3://corpora/in/a.jsonl: cannot read", "connect")
    assert not (tmp_path / "out").exists()


def test_refused_http_server_is_one_line(tmp_path, refused_port):
    url = f"http://127.0.0.1:{refused_port}/in/a.jsonl?sig={SECRET}"
    code, stderr, _ = ended(cli(tmp_path, url))
    assert code == 2
    # (not "no such file": fsspec's http reports a refused connection as a missing file)
    one_line(stderr, f"error: http://127.0.0.1:{refused_port}/in/a.jsonl?sig=***: cannot read (cannot reach the server",
             "Cannot connect")
    assert not (tmp_path / "out").exists()


# A server that accepts and never answers ---------------------------------------------------


@pytest.mark.parametrize("scheme", ["s3", "http", "hf"])
def test_silent_server_ends_within_the_bound(tmp_path, silent, scheme):
    """S3 through its connect and request timeouts (pyarrow's options), http(s) and Hugging
    Face (whose client has no timeout) through the bounded first contact."""
    endpoint = f"http://127.0.0.1:{silent.port}"
    url, env, over = {
        "s3": ("s3://corpora/in/a.jsonl", {"AWS_ENDPOINT_URL": endpoint}, S3_OVER),
        "http": (f"{endpoint}/in/a.jsonl?X-Amz-Signature={SECRET}", {}, 0.0),
        "hf": ("hf://datasets/someone/corpus/a.jsonl", {"HF_ENDPOINT": endpoint, "HF_HUB_OFFLINE": "0"}, 0.0),
    }[scheme]
    code, stderr, end = ended(cli(tmp_path, url, env=env))
    assert silent.first is not None, f"the server was never contacted: {stderr}"
    assert end - silent.first < BOUND + over + SLACK, stderr
    assert code == 2
    line = one_line(stderr, f"error: {shown_url(url)}: cannot read")
    if scheme != "s3":
        assert f"no answer from {scheme}://" in line and f"within {BOUND:g} s" in line
    assert not (tmp_path / "out").exists()


def test_gcs_without_an_answer_is_one_line(tmp_path, silent):
    """gs:// offline: pyarrow's GCS client retries a failure for as long as its retry limit
    allows and waits two minutes on a server that never answers; the run ends within the bound
    either way (the endpoint is the silent server, its credentials whatever this machine has)."""
    url = f"gs://corpora/in/a.jsonl?endpoint_override=127.0.0.1:{silent.port}&scheme=http"
    started = time.monotonic()
    code, stderr, end = ended(cli(tmp_path, url))
    assert code == 2
    one_line(stderr, f"error: {url}: cannot read")
    assert end - started < BOUND + SLACK + 10, stderr  # (10: the CLI's start on a loaded machine)


@pytest.mark.parametrize("scheme", ["http", "gs", "s3"])
def test_first_contact_is_bounded(silent, monkeypatch, scheme):
    """The same in this process, timed from the call: NoAnswer naming the server and the bound
    (S3: pyarrow's own error, its options bounding each attempt)."""
    monkeypatch.setenv(filesystems.REMOTE_TIMEOUT_VARIABLE, "1")
    monkeypatch.setattr(filesystems, "_reached", set())
    place = f"127.0.0.1:{silent.port}"
    url = {"http": f"http://{place}/a.jsonl?sig={SECRET}",
           "gs": f"gs://corpora/a.jsonl?endpoint_override={place}&scheme=http",
           "s3": f"s3://corpora/a.jsonl?endpoint_override={place}&scheme=http&region=us-east-1"}[scheme]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    started = time.monotonic()
    with pytest.raises(OSError) as raised:
        storage.info(storage.Remote(url))
    took = time.monotonic() - started
    assert took < 1 + (S3_OVER if scheme == "s3" else 0) + SLACK, took
    if scheme == "http":
        assert isinstance(raised.value, filesystems.NoAnswer)
        assert str(raised.value) == (f"no answer from http://{place} within 1 s; "
                                     f"{filesystems.REMOTE_TIMEOUT_VARIABLE} sets how long to wait")
    assert SECRET not in str(raised.value)


def test_file_systems_get_the_timeout_through_their_options(monkeypatch):
    """What each file system is given: S3 its connect and request timeouts (a share of the
    bound per attempt, as pyarrow pickles them), GCS its retry limit, http aiohttp's timeouts."""
    monkeypatch.setenv(filesystems.REMOTE_TIMEOUT_VARIABLE, "6")
    s3, _ = storage.Remote("s3://corpora/a.jsonl?endpoint_override=127.0.0.1:9&scheme=http&region=eu-west-3").filesystem()
    options = s3.__reduce__()[1][0]
    assert (options["connect_timeout"], options["request_timeout"]) == (2.0, 2.0)
    assert (options["endpoint_override"], options["scheme"], options["region"]) == ("127.0.0.1:9", "http", "eu-west-3")
    assert filesystems.http_options(6.0)["client_kwargs"]["timeout"].sock_read == 6.0
    assert filesystems.with_option("a=1", "retry_limit_seconds", "6") == "a=1&retry_limit_seconds=6"
    assert filesystems.with_option("retry_limit_seconds=60", "retry_limit_seconds", "6") == "retry_limit_seconds=60"


def test_a_bad_timeout_setting_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv(filesystems.REMOTE_TIMEOUT_VARIABLE, "soon")
    out = tmp_path / "out"
    assert_user_error(invoke("dedup", "http://127.0.0.1:9/a.jsonl", "-o", out),
                      f"{filesystems.REMOTE_TIMEOUT_VARIABLE}='soon': expected a number of seconds above 0", out=out)


# Signals while a call blocks ----------------------------------------------------------------


@pytest.mark.parametrize("scheme, signum", [("s3", signal.SIGTERM), ("http", signal.SIGTERM), ("s3", signal.SIGINT)])
def test_signal_ends_a_run_blocked_on_a_silent_server(tmp_path, silent, scheme, signum):
    """s3: the main thread waits inside pyarrow's C++ client, where Python cannot run its
    handler, so the watcher ends the process after UNTAKEN; http: the main thread waits for
    the bounded first contact, where the handler runs at once. Either way one line, 128 + the
    signal, nothing written."""
    endpoint = f"http://127.0.0.1:{silent.port}"
    url, env = {"s3": ("s3://corpora/in/a.jsonl", {"AWS_ENDPOINT_URL": endpoint}),
                "http": (f"{endpoint}/in/a.jsonl", {})}[scheme]
    run = cli(tmp_path, url, env={**env, filesystems.REMOTE_TIMEOUT_VARIABLE: "60"},
              before=f"import gpudedup.interrupts as interrupts; interrupts.UNTAKEN_SIGNAL_S = {UNTAKEN}")
    assert silent.contacted.wait(30), run.communicate(timeout=60)
    time.sleep(0.3)  # (inside the call)
    sent = time.monotonic()
    run.send_signal(signum)
    code, stderr, end = ended(run)
    assert code == 128 + signum
    word = "interrupted" if signum == signal.SIGINT else "terminated (SIGTERM)"
    assert one_line(stderr) == f"{word}: nothing was written"
    assert end - sent < (UNTAKEN if scheme == "s3" else 0) + SLACK
    assert not (tmp_path / "out").exists()


def test_a_held_signal_is_not_cut_short(tmp_path, silent):
    """A signal that comes while io/commit.py's signals_held holds signals back (a commit), the
    main thread blocked in C++ meanwhile, waits for the block's end however long the watcher
    waited: then the handler raises it."""
    script = f"""
import os, signal, sys, threading
import pyarrow.fs as pafs
from gpudedup import interrupts
from gpudedup.io.commit import signals_held
interrupts.UNTAKEN_SIGNAL_S = 0.3
interrupts.install_signal_handlers()
interrupts.set_phase("running")
blocked = pafs.S3FileSystem(endpoint_override="127.0.0.1:{silent.port}", scheme="http", access_key="a",
                            secret_key="b", region="us-east-1", connect_timeout=2, request_timeout=2,
                            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1))
threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
try:
    with signals_held():
        try:
            blocked.get_file_info("corpora/a")
        except OSError:
            pass
        print("the held block ran to its end", flush=True)
except interrupts.Interrupted as interrupted:
    print("then its handler took the signal", flush=True)
    sys.exit(128 + interrupted.signum)
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert run.returncode == 143, run.stderr
    assert run.stdout.splitlines() == ["the held block ran to its end", "then its handler took the signal"], run
    assert run.stderr == ""


# Schemes no library serves here ------------------------------------------------------------


def test_unknown_scheme_is_one_line(tmp_path):
    out = tmp_path / "out"
    assert_user_error(invoke("dedup", "foo://x/y.jsonl", "-o", out), "foo://x/y.jsonl: unknown URL scheme foo:// "
                      "(neither pyarrow nor fsspec has a file system for it)", out=out)


@pytest.mark.parametrize("url, package", [("gs://corpora/in/a.jsonl", "gcsfs"),
                                          ("hf://datasets/someone/corpus/a.jsonl", "huggingface_hub")])
def test_a_missing_package_is_named(tmp_path, url, package):
    """gs:// goes to fsspec's gcsfs where pyarrow is built without GCS, hf:// always goes to
    huggingface_hub: without the package, one line that says what to install."""
    before = (f"import sys; sys.modules[{package!r}] = None  # (not installed)\n"
              "from gpudedup.io import filesystems\n"
              "filesystems.pyarrow_serves = lambda scheme: False  # (no GCS in pyarrow)")
    code, stderr, _ = ended(cli(tmp_path, url, before=before))
    assert code == 2
    scheme = url.partition(":")[0]
    one_line(stderr, f"error: {url}: {scheme}:// URLs are read through the package {package}, which is not installed: "
                     f"pip install {package}")


def test_an_upload_stopped_part_way_leaves_no_part_under_the_name(tmp_path, monkeypatch):
    """An upload interrupted after some bytes (Ctrl-C while an output goes up): closing the
    stream sends what it holds, so the object is deleted again rather than left cut short
    under its final name; the interruption goes on."""
    import fsspec

    (tmp_path / "big.jsonl").write_bytes(b'{"text": "x"}\n' * 10_000)
    remote = storage.Remote("memory://bucket/out/big.jsonl")

    def cut(source, sink) -> None:
        sink.write(source.read(4096))
        raise KeyboardInterrupt

    monkeypatch.setattr(storage, "copy_stream", cut)
    with pytest.raises(KeyboardInterrupt):
        storage.upload(tmp_path / "big.jsonl", remote)
    assert not fsspec.filesystem("memory").exists("/bucket/out/big.jsonl")

