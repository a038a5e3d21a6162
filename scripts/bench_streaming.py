"""Peak memory of the staged run (--work-dir) against the in-memory run on 1x, 4x and 16x the
same synthetic corpus: the staged run's peak should stay nearly flat, the in-memory run's
should grow with the corpus.

The corpus is Parquet shards of the same size (``--shard-documents`` documents of
``--words`` random words); a tenth of the documents are edited copies of others, so that
candidate pairs grow with the corpus as in real data. Each run is its own subprocess; the
peak is the largest of the report's per-stage peaks (resident high-water marks).

    python scripts/bench_streaming.py --scales 1 4 16 --json bench_data/streaming.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

CHILD = r"""
import json, sys, time, tempfile
from pathlib import Path
import gpudedup
corpus, mode, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
start = time.perf_counter()
work = {"work_dir": out / "work"} if mode == "staged" else {}
result = gpudedup.dedup(Path(corpus), id_field="id", backend="cpu", **work)
result.write(out / "result")
seconds = time.perf_counter() - start
report = json.loads((out / "result" / "report.json").read_text())
print(json.dumps({"seconds": round(seconds, 1), "peak_rss_mb": report["peak_rss_mb"],
                  "stage_peaks_mb": {k: v["peak_rss_mb"] for k, v in report["stages"].items() if "peak_rss_mb" in v},
                  **{k: report["results"][k] for k in ("candidate_pairs", "verified_pairs", "removed_documents")}}))
"""


def build_corpus(root: Path, shards: int, shard_documents: int, words: int, seed: int = 0) -> int:
    """``shards`` Parquet files; returns the text bytes."""
    rng = np.random.default_rng(seed)
    vocabulary = np.array([f"w{i}" for i in range(100_000)])
    text_bytes = 0
    for shard in range(shards):
        tokens = vocabulary[rng.integers(0, vocabulary.size, size=(shard_documents, words))]
        # A tenth of the documents copy another of their shard with one word changed.
        copies = rng.choice(shard_documents, size=shard_documents // 10, replace=False)
        tokens[copies] = tokens[rng.integers(0, shard_documents, size=copies.size)]
        tokens[copies, rng.integers(0, words, size=copies.size)] = "edited"
        texts = [" ".join(row) for row in tokens]
        text_bytes += sum(len(t) for t in texts)
        ids = np.arange(shard * shard_documents, (shard + 1) * shard_documents)
        pq.write_table(pa.table({"id": ids, "text": texts}), root / f"part-{shard:05d}.parquet")
    return text_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--base-shards", type=int, default=2, help="shards at scale 1")
    parser.add_argument("--shard-documents", type=int, default=20_000)
    parser.add_argument("--words", type=int, default=100)
    parser.add_argument("--skip-in-memory", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    for scale in args.scales:
        with tempfile.TemporaryDirectory() as scratch:
            corpus = Path(scratch) / "corpus"
            corpus.mkdir()
            text_bytes = build_corpus(corpus, args.base_shards * scale, args.shard_documents, args.words)
            for mode in ("staged",) + (() if args.skip_in_memory else ("in-memory",)):
                out = Path(scratch) / mode
                out.mkdir()
                started = time.perf_counter()
                done = subprocess.run([sys.executable, "-c", CHILD, str(corpus), mode, str(out)],
                                      capture_output=True, text=True, check=True)
                row = {"scale": scale, "mode": mode, "documents": args.base_shards * scale * args.shard_documents,
                       "text_mb": round(text_bytes / 2**20, 1),
                       "process_seconds": round(time.perf_counter() - started, 1),
                       **json.loads(done.stdout.strip().splitlines()[-1])}
                rows.append(row)
                print(json.dumps(row), flush=True)
                shutil.rmtree(out)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
