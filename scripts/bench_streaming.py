"""Peak memory of the staged run (--work-dir), of a run on a 2-worker Dask cluster and of the
in-memory run on 1x, 4x, 16x (...) the same synthetic corpus: the staged run's peak should stay
nearly flat, the in-memory run's should grow with the corpus; on the cluster, the client's peak
and each worker's are measured apart (the scale benchmark of docs/scale.md).

The corpus is Parquet shards of the same size (``--shard-documents`` documents of ``--words``
words). The words are drawn from the bundled sample's words with their frequencies (real words,
Zipf-like counts), or (``--vocabulary random``) uniformly from 100,000 made-up ones; a tenth of
the documents are copies of another of their shard with one word changed, so that candidate
pairs grow with the corpus as in real data; ``--identical F`` makes a fraction F of each shard's
documents exact copies of documents of the shard before (of the same shard, for the first), so
that the identical-copies stage has work across shards too. Each run is its own subprocess; the peak
(``peak_rss_mb``) is that process's resident high-water mark at its end (VmHWM: the client
on a cluster). The report's own peak (``report_peak_rss_mb``, the largest of its
per-stage peaks) is given beside it; it stops before report.html is written, which reads the
texts of the largest clusters. The cluster's scheduler and workers run in a process of their
own, as on a real cluster, so the client's peak is its own. A worker's and the scheduler's
peak is its process's resident high-water mark at the end of the run (VmHWM, through
``Client.run`` and ``Client.run_on_scheduler``; not ``getrusage``'s ru_maxrss, which Linux
carries across exec, so that a worker's would count the process that started it).

The modes ``staged-s3`` and ``dask-s3`` keep the work directory on object storage: a moto
server started here (``python -m moto.server``, the tests' S3-compatible server; its speed is
not a real store's), the inputs and outputs local. For them ``cache_peak_mb`` is the largest
the machine's cache of the work directory grew (pipeline/workdir.py; the client and both workers
share it here), sampled every 0.2 s.

    python scripts/bench_streaming.py --scales 1 4 16 --modes staged dask in-memory \
        --json bench_data/streaming.json

``--results bench-results/streaming.json`` writes the rows into the results file that
docs/performance.md is rendered from (scripts/render_performance.py), replacing the rows of the
same mode, scale and corpus.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from bench_results import record, this_run

# A local cluster of 2 single-threaded worker processes, its scheduler in this process: prints
# the scheduler's address, then runs until its standard input closes.
CLUSTER = r"""
import logging, sys
from distributed import LocalCluster
with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                  silence_logs=logging.ERROR) as cluster:
    print(cluster.scheduler_address, flush=True)
    sys.stdin.read()
"""

CHILD = r"""
import json, sys, time, tempfile
from pathlib import Path
import gpudedup
CLUSTER = sys.argv[5]
corpus, mode, out, work = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
workers = {}
start = time.perf_counter()
def peak_mb():
    # The process's resident high-water mark (VmHWM), not getrusage's ru_maxrss: Linux carries
    # ru_maxrss across exec, so a process started from a larger one (this one from the
    # benchmark, which built the corpus) would report that one's size.
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
if mode.startswith("dask"):
    import subprocess
    from distributed import Client
    # The scheduler and the workers in a process of their own (as on a real cluster), so that
    # this process's peak is the client's alone.
    cluster = subprocess.Popen([sys.executable, "-c", CLUSTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True)
    with Client(cluster.stdout.readline().strip()) as client:
        start = time.perf_counter()  # the cluster's start-up is not the job's
        result = gpudedup.dedup(Path(corpus), id_field="id", backend="cpu", client=client, work_dir=work,
                                output=out / "result")
        seconds = time.perf_counter() - start
        workers = {"worker_peak_rss_mb": sorted(client.run(peak_mb).values()),
                   "scheduler_peak_rss_mb": client.run_on_scheduler(peak_mb)}
    cluster.stdin.close()
    cluster.wait()
else:
    staged = {"work_dir": work} if mode.startswith("staged") else {}
    result = gpudedup.dedup(Path(corpus), id_field="id", backend="cpu", output=out / "result", **staged)
    seconds = time.perf_counter() - start
report = json.loads((out / "result" / "report.json").read_text())
# The process's own high-water mark: the report's stops before report.html is written (its
# texts are read then), so it alone understates the client's peak.
print(json.dumps({"seconds": round(seconds, 1), "peak_rss_mb": peak_mb(),
                  "report_peak_rss_mb": report["peak_rss_mb"], **workers,
                  "stage_peaks_mb": {k: v["peak_rss_mb"] for k, v in report["stages"].items() if "peak_rss_mb" in v},
                  **{k: report["results"][k] for k in ("candidate_pairs", "verified_pairs", "removed_documents")}}))
"""


def sample_vocabulary() -> tuple[np.ndarray, np.ndarray]:
    """The bundled sample's distinct lower-cased words and their frequencies (sums to 1)."""
    import gzip
    import json as json_lib
    from collections import Counter
    from importlib import resources

    counts: Counter = Counter()
    with resources.as_file(resources.files("gpudedup").joinpath("data/bible_sample.jsonl.gz")) as path:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for line in handle:
                counts.update(json_lib.loads(line)["text"].lower().split())
    words, frequencies = zip(*counts.items())
    weights = np.array(frequencies, dtype=np.float64)
    return np.array(words), weights / weights.sum()


def build_corpus(root: Path, shards: int, shard_documents: int, words: int, vocabulary_kind: str = "sample",
                 seed: int = 0, identical: float = 0.0) -> int:
    """``shards`` Parquet files (identical: the fraction of each shard's documents that are
    exact copies of the shard before's); returns the text bytes."""
    rng = np.random.default_rng(seed)
    if vocabulary_kind == "sample":
        vocabulary, weights = sample_vocabulary()
    else:
        vocabulary, weights = np.array([f"w{i}" for i in range(100_000)]), None
    text_bytes = 0
    before: list[str] = []
    for shard in range(shards):
        tokens = vocabulary[rng.choice(vocabulary.size, size=(shard_documents, words), p=weights)]
        # A tenth of the documents copy another of their shard with one word changed.
        copies = rng.choice(shard_documents, size=shard_documents // 10, replace=False)
        tokens[copies] = tokens[rng.integers(0, shard_documents, size=copies.size)]
        tokens[copies, rng.integers(0, words, size=copies.size)] = "edited"
        texts = [" ".join(row) for row in tokens]
        source = before or list(texts)
        for row in rng.choice(shard_documents, size=int(identical * shard_documents), replace=False).tolist():
            texts[row] = source[(row + 1) % len(source)]  # (of the first shard: another row of its own)
        before = texts
        text_bytes += sum(len(t) for t in texts)
        ids = np.arange(shard * shard_documents, (shard + 1) * shard_documents)
        pq.write_table(pa.table({"id": ids, "text": texts}), root / f"part-{shard:05d}.parquet")
    return text_bytes


@contextmanager
def moto_bucket(bucket: str) -> Iterator[dict]:
    """A moto S3 server on a free port with ``bucket``; yields the AWS environment for it."""
    import pyarrow.fs as pafs

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        endpoint = f"http://127.0.0.1:{port}"
        pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", access_key="testing", secret_key="testing",
                          region="us-east-1", allow_bucket_creation=True).create_dir(bucket)
        yield {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_ENDPOINT_URL": endpoint}
    finally:
        server.terminate()
        server.wait(timeout=30)


class FolderPeak:
    """The largest total size of the files under ``folder``, sampled on a thread until stopped."""

    def __init__(self, folder: Path):
        self.folder, self.peak, self.running = folder, 0, True
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()

    def sample(self) -> None:
        while self.running:
            total = 0
            for top, _, names in os.walk(self.folder):
                for name in names:
                    try:
                        total += os.stat(os.path.join(top, name)).st_size
                    except OSError:
                        pass  # (a file renamed or deleted while walking)
            self.peak = max(self.peak, total)
            time.sleep(0.2)

    def stop(self) -> int:
        self.running = False
        self.thread.join()
        return self.peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--base-shards", type=int, default=2, help="shards at scale 1")
    parser.add_argument("--shard-documents", type=int, default=20_000)
    parser.add_argument("--words", type=int, default=100)
    parser.add_argument("--modes", nargs="+", choices=["staged", "dask", "in-memory", "staged-s3", "dask-s3"],
                        default=["staged", "in-memory"])
    parser.add_argument("--vocabulary", choices=["sample", "random"], default="sample",
                        help="words drawn from the bundled sample's (with their frequencies) or made up")
    parser.add_argument("--identical", type=float, default=0.0,
                        help="the fraction of each shard's documents that are exact copies of the shard before's")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--results", type=Path, help="write the rows into this results file (bench-results/)")
    args = parser.parse_args()
    rows = []
    with moto_bucket("bench") if any(mode.endswith("-s3") for mode in args.modes) else nullcontext({}) as aws:
        for scale in args.scales:
            rows.extend(run_scale(args, scale, aws))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    if args.results:
        # The corpus's parameters name the rows too: another corpus's rows are other figures.
        corpus = {"identical": args.identical, "base_shards": args.base_shards,
                  "shard_documents": args.shard_documents, "words": args.words, "vocabulary": args.vocabulary}
        record(args.results, "bench_streaming", [{**row, **corpus} for row in rows],
               key=("mode", "scale", *corpus), run=this_run("numba", "dask", "distributed"))


def run_scale(args, scale: int, aws: dict) -> list[dict]:
    """Every mode's row at one scale (each run in a subprocess of its own)."""
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        corpus = Path(scratch) / "corpus"
        corpus.mkdir()
        text_bytes = build_corpus(corpus, args.base_shards * scale, args.shard_documents, args.words,
                                  args.vocabulary, identical=args.identical)
        for mode in args.modes:
            out = Path(scratch) / mode
            out.mkdir()
            remote = mode.endswith("-s3")
            work = f"s3://bench/work-{scale}-{mode}" if remote else str(out / "work")
            cache = Path(scratch) / "cache"
            environment = {**os.environ, **aws, "GPUDEDUP_WORK_CACHE": str(cache)}
            peak = FolderPeak(cache) if remote else None
            started = time.perf_counter()
            done = subprocess.run([sys.executable, "-c", CHILD, str(corpus), mode, str(out), work, CLUSTER],
                                  capture_output=True, text=True, check=True, env=environment)
            row = {"scale": scale, "mode": mode, "shards": args.base_shards * scale,
                   "documents": args.base_shards * scale * args.shard_documents,
                   "text_mb": round(text_bytes / 2**20, 1),
                   "process_seconds": round(time.perf_counter() - started, 1),
                   **json.loads(done.stdout.strip().splitlines()[-1])}
            if peak is not None:
                row["cache_peak_mb"] = round(peak.stop() / 2**20, 1)
            rows.append(row)
            print(json.dumps(row), flush=True)
            shutil.rmtree(out)
    return rows


if __name__ == "__main__":
    main()
