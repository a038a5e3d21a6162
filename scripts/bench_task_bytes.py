"""The bytes a Dask run's tasks carry, against the number of shards: what the client sends the
scheduler, and what the scheduler sends the workers, in runs over 25, 100, 400 (...) JSONL
files of the same small documents on a 2-worker LocalCluster (the client must hold what grows
with the shards and tasks, not more).

A stage whose every task carried the shard reader (a description of every shard) and the
per-shard offsets would send bytes growing with the square of the shards; the stages send them
to the workers once (pipeline/daskops.share). The reference is the run's own smallest scale:
bytes per shard that stay flat as the shards grow are linear.

    python scripts/bench_task_bytes.py --shards 100 400 --json bench_data/task_bytes.json

``--results bench-results/task_bytes.json`` writes the rows into the results file that
docs/performance.md is rendered from (scripts/render_performance.py), replacing those of the
same shards.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_results import record, this_run

import gpudedup

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from dask_messages import message_bytes  # noqa: E402  (tests/dask_messages.py, found through the path above)


def write_corpus(root: Path, shards: int, per_shard: int, seed: int = 0) -> Path:
    """``shards`` JSONL files of ``per_shard`` documents of 40 random words, every tenth
    document a copy of the one before it with a word added (so that there are pairs)."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True)
    for shard in range(shards):
        texts: list[str] = []
        for number in range(per_shard):
            if number % 10 == 9:
                texts.append(texts[-1] + " more")
            else:
                texts.append(" ".join(f"w{word}" for word in rng.integers(0, 5000, 40)))
        lines = [json.dumps({"id": f"{shard}-{n}", "text": text}) + "\n" for n, text in enumerate(texts)]
        (root / f"part-{shard:05d}.jsonl").write_text("".join(lines), encoding="utf-8")
    return root


class Counted:
    """Wraps the send of a distributed comm (a BatchedSend), adding up the bytes it sends."""

    def __init__(self, comm) -> None:
        self.bytes = 0
        self.comm, self.send = comm, comm.send
        comm.send = self

    def __call__(self, *messages):
        self.bytes += sum(message_bytes(message) for message in messages)
        return self.send(*messages)


def results_rows(rows: list[dict], documents_per_shard: int) -> list[dict]:
    """The rows for the results file, with the bytes in MB as the page shows them."""
    return [{**row, "documents_per_shard": documents_per_shard,
             "to_scheduler_mb": round(row["to_scheduler_bytes"] / 1e6, 2),
             "to_workers_mb": round(row["to_workers_bytes"] / 1e6, 2)} for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, nargs="+", default=[25, 100, 400])
    parser.add_argument("--documents-per-shard", type=int, default=20)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--results", type=Path, help="write the rows into this results file (bench-results/)")
    args = parser.parse_args()

    from distributed import Client, LocalCluster

    rows = []
    with tempfile.TemporaryDirectory() as tmp, \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                         silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        logging.getLogger("distributed.shuffle").setLevel(logging.ERROR)
        for shards in args.shards:
            corpus = write_corpus(Path(tmp) / f"in{shards}", shards, args.documents_per_shard)
            to_scheduler = Counted(client.scheduler_comm)
            to_workers = [Counted(comm) for comm in cluster.scheduler.stream_comms.values()]
            start = time.perf_counter()
            result = gpudedup.dedup(corpus, backend="cpu", client=client, work_dir=Path(tmp) / f"work{shards}",
                                    output=Path(tmp) / f"out{shards}")
            seconds = time.perf_counter() - start
            client.scheduler_comm.send = to_scheduler.send
            for counted in to_workers:
                counted.comm.send = counted.send
            rows.append({"shards": shards, "documents": result.report["input"]["documents"],
                         "verified_pairs": result.report["results"]["verified_pairs"], "seconds": round(seconds, 1),
                         "to_scheduler_bytes": to_scheduler.bytes,
                         "to_workers_bytes": sum(counted.bytes for counted in to_workers)})
    first = rows[0]
    print(f"{'shards':>7} {'documents':>9} {'seconds':>8} {'to scheduler':>13} {'per shard':>10} {'to workers':>11} "
          f"{'per shard':>10}   per shard against {first['shards']} shards (1.0: linear)")
    for row in rows:
        up, down = row["to_scheduler_bytes"] / row["shards"], row["to_workers_bytes"] / row["shards"]
        print(f"{row['shards']:>7} {row['documents']:>9} {row['seconds']:>8} "
              f"{row['to_scheduler_bytes'] / 1e6:>10.2f} MB "
              f"{up:>8.0f} B {row['to_workers_bytes'] / 1e6:>8.2f} MB {down:>8.0f} B   "
              f"{up / (first['to_scheduler_bytes'] / first['shards']):.2f} / "
              f"{down / (first['to_workers_bytes'] / first['shards']):.2f}")
    if args.json:
        args.json.write_text(json.dumps({"gpudedup": gpudedup.__version__, "rows": rows}, indent=1) + "\n")
    if args.results:
        record(args.results, "bench_task_bytes", results_rows(rows, args.documents_per_shard),
               key=("shards", "documents_per_shard"), run=this_run("numba", "dask", "distributed"))


if __name__ == "__main__":
    sys.exit(main())
