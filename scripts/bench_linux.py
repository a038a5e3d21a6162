"""Whole-job benchmark on the Linux kernel sources (scripts/build_linux_corpus.py): the in-memory
run, the staged single-process run (--work-dir), and Dask local clusters of 1 and 2 workers
(--workers), each as its own `gpudedup dedup` process, on the same shards in the same session.

Peak memory is the largest sum of the resident sets of the command and every process under it
(client, scheduler, workers), sampled four times a second; the report's own per-stage peaks
cover only the client. The per-shard figures of the staged run (text, spill size, seconds of
the signature stage per shard) are what the scale plan in docs/scale.md is computed from. The outputs of
all runs are compared: pairs.parquet and clusters.parquet must be byte-identical.

    python scripts/build_linux_corpus.py
    python scripts/bench_linux.py bench_data/linux/shards --json bench_data/linux_bench.json

``--results bench-results/linux.json`` writes the rows into the results file that
docs/performance.md is rendered from (scripts/render_performance.py), replacing the modes run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from bench_results import record, this_run

MODES = {
    "in-memory": [],
    "staged": ["--work-dir", "{work}"],
    "dask, 1 worker": ["--work-dir", "{work}", "--workers", "1"],
    "dask, 2 workers": ["--work-dir", "{work}", "--workers", "2"],
}


def tree_rss_bytes(root: int) -> int:
    """Resident bytes of ``root`` and all its descendants (Linux /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)  # fields[1]: the parent's pid
        rss[pid] = int(fields[21]) * page  # fields[21]: resident pages
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


def run_sampled(command: list[str]) -> tuple[float, int, int]:
    """(wall seconds, peak tree resident bytes, exit code) of ``command``."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = 0
    done = threading.Event()

    def sample():
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_rss_bytes(process.pid))
            time.sleep(0.25)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, stderr = process.communicate()
    done.set()
    sampler.join()
    if process.returncode:
        print(stderr, file=sys.stderr)
    return time.perf_counter() - started, peak, process.returncode


def shard_figures(work: Path, report: dict) -> dict:
    """Per-shard figures of a staged run's work directory, for the scale plan."""
    shards = sorted((work / "shards").iterdir())
    infos = [json.loads((s / "info.json").read_text()) for s in shards]
    spill = [sum(f.stat().st_size for f in s.iterdir()) for s in shards]
    text = [int(np.load(s / "text_bytes.npy").sum()) for s in shards]  # (per row since work-dir format 2)
    # Each stage's pairs, in parts of the work directory (pipeline/pairparts.py's folders).
    stages = {name: sum(f.stat().st_size for folder in folders for f in (work / "pairs" / folder).rglob("*")
                        if f.is_file())
              for name, folders in (("copies", ("copies", "groups")), ("candidates", ("likely",)),
                                    ("pairs", ("verified",)))}
    return {"shards": len(shards), "mean_text_mb": round(sum(text) / len(text) / 2**20, 1),
            "mean_documents": round(sum(i["rows"] for i in infos) / len(infos)),
            "mean_spill_mb": round(sum(spill) / len(spill) / 2**20, 2),
            "spill_bytes_per_text_byte": round(sum(spill) / sum(text), 4),
            "signature_seconds_per_shard": round(report["stages"]["signature_pass"]["seconds"] / len(shards), 2),
            "stage_file_mb": {k: round(v / 2**20, 2) for k, v in stages.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shards", type=Path)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--results", type=Path, help="write the rows into this results file (bench-results/)")
    args = parser.parse_args()
    rows, reference = [], None
    scratch = Path(tempfile.mkdtemp(prefix="bench-linux-"))
    try:
        for mode in args.modes:
            out, work = scratch / "out", scratch / "work"
            extra = [a.replace("{work}", str(work)) for a in MODES[mode]]
            # The console entry point, as the installed `gpudedup` runs it (a Dask worker started
            # by spawn imports the parent's main module again: it must not be gpudedup.cli).
            command = [sys.executable, "-c", "from gpudedup.console import main; main()", "dedup",
                       str(args.shards), "-o", str(out),
                       "--backend", "cpu", "-q", *extra]
            seconds, peak, code = run_sampled(command)
            if code:
                raise SystemExit(f"{mode}: exit code {code}")
            report = json.loads((out / "report.json").read_text())
            row = {"mode": mode, "documents": report["input"]["documents"],
                   "text_gb": round(report["input"]["text_bytes"] / 1e9, 2),
                   "shards": len(list(args.shards.glob("*.parquet"))),
                   "wall_seconds": round(seconds, 1), "peak_tree_rss_mb": round(peak / 2**20),
                   "client_peak_rss_mb": report["peak_rss_mb"],
                   "stage_seconds": {k: v["seconds"] for k, v in report["stages"].items() if "seconds" in v},
                   "results": report["results"]}
            # pairs/ and clusters/: Parquet datasets, every part's bytes in order.
            outputs = {name: [part.read_bytes() for part in sorted((out / name).iterdir())]
                       for name in ("pairs", "clusters")}
            if reference is None:
                reference = outputs
            row["same_pairs_and_clusters_as_first_mode"] = outputs == reference
            if mode == "staged":
                row["per_shard"] = shard_figures(work, report)
            rows.append(row)
            print(json.dumps(row), flush=True)
            shutil.rmtree(out)
            shutil.rmtree(work, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    if args.results:
        record(args.results, "bench_linux", rows, key=("mode",), run=this_run("numba", "dask", "distributed"))


if __name__ == "__main__":
    main()
