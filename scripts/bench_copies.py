"""Memory with mass identical copies: a corpus of N documents in groups of G identical copies
against N distinct documents of the same length (the reference), each run in its own
subprocess so that peak memory is its own.

Before copies.py, a million documents in groups of a thousand copies gave every document
``bucket_window`` candidate pairs in every band (hundreds of millions of pairs, over 18 GB);
now the copies leave LSH and each group costs one pair per copy.

    python scripts/bench_copies.py --documents 1000000 --group 1000

``--results bench-results/copies.json`` writes the rows into the results file that
docs/performance.md is rendered from (scripts/render_performance.py), replacing those of the
same corpus.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench_results import record, this_run

CHILD = r"""
import json, sys, time
import numpy as np
import pyarrow as pa
import gpudedup

documents, group, words, kind = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rng = np.random.default_rng(0)
texts = max(documents // group, 1) if kind == "copies" else documents
vocabulary = np.array([f"w{i}" for i in range(50_000)])
# One text per group (copies) or per document (distinct), each of ``words`` random words.
base = [" ".join(row) for row in vocabulary[rng.integers(0, vocabulary.size, size=(texts, words))]]
order = np.arange(documents) % texts  # copies of one text are spread over the whole input
table = pa.table({"id": pa.array(np.arange(documents)), "text": pa.array(base).take(pa.array(order))})
del base
start = time.perf_counter()
result = gpudedup.dedup(table, id_field="id", backend="cpu", threshold=0.8)
seconds = time.perf_counter() - start
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        hwm_mb = int(line.split()[1]) / 1024
print(json.dumps({"kind": kind, "documents": documents, "seconds": round(seconds, 1),
                  "peak_rss_mb": max(result.report["peak_rss_mb"], round(hwm_mb, 1)),
                  "text_mb": round(result.report["input"]["text_bytes"] / 2**20, 1),
                  **{k: result.report["results"][k] for k in ("candidate_pairs", "identical_copies",
                                                              "clusters", "kept_documents")}}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=1_000_000)
    parser.add_argument("--group", type=int, default=1000, help="copies of each text")
    parser.add_argument("--words", type=int, default=50, help="words per document")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--results", type=Path, help="write the rows into this results file (bench-results/)")
    args = parser.parse_args()
    rows = []
    for kind in ("distinct", "copies"):
        started = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", CHILD, str(args.documents), str(args.group), str(args.words), kind],
                             capture_output=True, text=True, check=True).stdout
        row = json.loads(out.strip().splitlines()[-1])
        row["process_seconds"] = round(time.perf_counter() - started, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    if args.results:
        record(args.results, "bench_copies", [{**row, "group": args.group, "words": args.words} for row in rows],
               key=("kind", "documents", "group", "words"), run=this_run("numba"))


if __name__ == "__main__":
    main()
