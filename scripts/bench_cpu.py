"""CPU benchmark: gpudedup (numpy backend) against datasketch and rensa on one corpus.

Each pipeline runs in its own subprocess (so peak memory is its own) on the same JSONL file:
- gpudedup: the whole job, ``gpudedup.dedup`` plus writing the outputs (reading, shingling,
  signatures, banding, exact verification, clustering, Parquet output, report.html and its
  figures).
- datasketch: canonical shingling in plain Python, ``MinHash.update_batch`` per document, then
  ``MinHashLSH`` (its default band choice for the threshold), query then insert.
- rensa: the same shingling, ``RMinHash.update`` and ``RMinHashLSH`` with the bands and rows
  gpudedup chose, query then insert.
The references stop at LSH candidates (no verification or output), so they do less work.
Each pipeline's library is imported before its clock starts; the import is timed apart.

Recall is measured against the exact set of pairs with Jaccard >= threshold, computed by
gpudedup.core.allpairs (prefix filtering, exact) from the shingle-hash sets and cached under
bench_data/. Pair recall counts true pairs that a pipeline reports (gpudedup: verified pairs;
references: candidate pairs); gpudedup's cluster recall counts true pairs whose documents
share a cluster.

    pip install -e '.[bench]'
    python scripts/build_bench_corpus.py --install bench_data/bench.jsonl
    python scripts/bench_cpu.py bench_data/bench.jsonl --shingle word --ngram 5 --threshold 0.8

Many short documents (every verse of 27 translations, 616,623 documents of 130 bytes):
    python scripts/build_short_corpus.py --documents 640000 bench_data/short640k.jsonl
    python scripts/bench_cpu.py bench_data/short640k.jsonl

``--results bench-results/cpu.json`` writes the figures into the results file that
docs/performance.md is rendered from (scripts/render_performance.py), replacing the corpus's.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.json as pajson
from bench_results import corpus_path, record, this_run

WHITE_SPACE = re.compile("[\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+")
PIPELINES = ("gpudedup", "datasketch", "rensa")


def python_shingles(text: str, kind: str, n: int) -> list[str]:
    """DESIGN.md's canonical shingling, written the plain way a user of a MinHash library would."""
    text = WHITE_SPACE.sub(" ", (text or "").lower()).strip(" ")
    if not text:
        return []
    units = text.split(" ") if kind == "word" else text
    if len(units) < n:
        return [text]
    joiner = " " if kind == "word" else ""
    return list({joiner.join(units[i : i + n]) for i in range(len(units) - n + 1)})


def load_texts(path: Path) -> list[str]:
    return pajson.read_json(path).column("text").to_pylist()


# --- pipelines (each returns (first, second) row-index arrays of the pairs it reports) ---------


def run_gpudedup(path: Path, args) -> dict:
    import gpudedup

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        result = gpudedup.dedup(path, id_field="id", threshold=args.threshold, shingle=args.shingle,
                                ngram=args.ngram, num_perm=args.num_perm, backend="cpu")
        result.write(Path(out) / "result")
    seconds = time.perf_counter() - started
    # The job's peak: its stages cover it from reading to writing (the largest stage peak).
    peak = result.report["peak_rss_mb"]
    table = pajson.read_json(path).column("id").to_pylist()  # (not timed: for recall only)
    row = {doc_id: i for i, doc_id in enumerate(table)}
    pairs = result.all_pairs().to_pydict()  # groups of identical copies spelled out: every pair found
    first = np.array([row[i] for i in pairs["id_a"]], dtype=np.int64)
    second = np.array([row[i] for i in pairs["id_b"]], dtype=np.int64)
    clusters = result.clusters.to_pydict()
    cluster_of = np.full(len(table), -1, dtype=np.int64)
    cluster_of[[row[i] for i in clusters["id"]]] = clusters["cluster"]
    params = result.report["parameters"]
    return {"first": first, "second": second, "cluster_of": cluster_of, "seconds": seconds,
            "peak_rss_mb": peak, "bands": params["bands"], "rows": params["rows"],
            "stages": result.report["stages"], "results": result.report["results"]}


def query_then_insert(path: Path, args, lsh, make_minhash) -> tuple[np.ndarray, np.ndarray]:
    """The reference loop: per document, plain-Python shingles, a MinHash from
    ``make_minhash(shingles)``, its LSH query (candidate pairs), then its insertion."""
    first, second = [], []
    for i, text in enumerate(load_texts(path)):
        shingles = python_shingles(text, args.shingle, args.ngram)
        if not shingles:
            continue
        minhash = make_minhash(shingles)
        for j in lsh.query(minhash):
            first.append(j)
            second.append(i)
        lsh.insert(i, minhash)
    return np.array(first, np.int64), np.array(second, np.int64)


def run_datasketch(path: Path, args) -> dict:
    from datasketch import MinHash, MinHashLSH

    def make_minhash(shingles):
        minhash = MinHash(num_perm=args.num_perm)
        minhash.update_batch([s.encode("utf-8") for s in shingles])
        return minhash

    lsh = MinHashLSH(threshold=args.threshold, num_perm=args.num_perm)
    first, second = query_then_insert(path, args, lsh, make_minhash)
    return {"first": first, "second": second, "bands": lsh.b, "rows": lsh.r}


def run_rensa(path: Path, args) -> dict:
    from rensa import RMinHash, RMinHashLSH

    perms = args.bands * args.rows

    def make_minhash(shingles):
        minhash = RMinHash(num_perm=perms, seed=args.seed)
        minhash.update(shingles)
        return minhash

    lsh = RMinHashLSH(threshold=args.threshold, num_perm=perms, num_bands=args.bands)
    first, second = query_then_insert(path, args, lsh, make_minhash)
    return {"first": first, "second": second, "bands": args.bands, "rows": args.rows}


def exact_truth(path: Path, args) -> tuple[np.ndarray, np.ndarray]:
    """Row pairs with exact Jaccard >= threshold (cached next to the corpus)."""
    cache = path.with_name(f"{path.stem}.truth-{args.shingle}{args.ngram}-{args.threshold}.npz")
    if cache.exists():
        data = np.load(cache)
        return data["first"], data["second"]
    from gpudedup.core.allpairs import exact_similar_pairs
    from gpudedup.core.shingling import ShingleSpec, shingle_sets

    sets = shingle_sets(load_texts(path), ShingleSpec(args.shingle, args.ngram))
    truth = exact_similar_pairs(sets.offsets, sets.hashes, args.threshold)
    np.savez(cache, first=truth.doc_a, second=truth.doc_b)
    return truth.doc_a, truth.doc_b


def pair_codes(first, second, n: int) -> np.ndarray:
    a, b = np.minimum(first, second), np.maximum(first, second)
    return np.unique(a.astype(np.int64) * n + b)


# --- driver ------------------------------------------------------------------------------------


def high_water_mark_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# The module each pipeline imports: imported before its clock starts, timed on its own.
IMPORTS = {"gpudedup": "gpudedup.api", "datasketch": "datasketch", "rensa": "rensa"}


def run_one(name: str, path: Path, args) -> None:
    """Child process: run one pipeline, write its pairs and measurements to args.result."""
    # Every pipeline's library is imported first and that time reported apart ("import s"): a
    # notebook or a service imports once, and gpudedup's lazy top level would otherwise put its
    # imports (numpy, scipy, pyarrow: about 0.4 s) inside the job. What a first call costs
    # beyond the import (numba loading its cached kernels, pyarrow's first compute call) stays
    # inside the job's time.
    started = time.perf_counter()
    importlib.import_module(IMPORTS[name])
    imported = time.perf_counter()
    outcome = {"gpudedup": run_gpudedup, "datasketch": run_datasketch, "rensa": run_rensa}[name](path, args)
    # The references are timed here, from reading the file to their last candidate pair, with
    # the process's high-water mark (VmHWM: ru_maxrss would include the parent's, as Linux
    # keeps it across exec). gpudedup times itself (from reading to its written outputs) and
    # reports its peak from its stages, whose per-stage resets of the mark make VmHWM useless.
    outcome.setdefault("seconds", time.perf_counter() - imported)
    outcome["import_seconds"] = imported - started
    outcome.setdefault("peak_rss_mb", high_water_mark_mb())
    arrays = {k: v for k, v in outcome.items() if isinstance(v, np.ndarray)}
    meta = {k: v for k, v in outcome.items() if not isinstance(v, np.ndarray)}
    np.savez(args.result, **arrays, meta=json.dumps(meta))


def results_row(args, documents: int, text_mb: float, rows: list[dict]) -> dict:
    """The run's figures for its results file: the corpus, and each pipeline's figures (the
    references' with their time over gpudedup's)."""
    ours = next((row for row in rows if row["pipeline"] == "gpudedup"), None)
    pipelines = {}
    for row in rows:
        figures = {"seconds": round(row["seconds"], 2), "import_seconds": round(row["import_seconds"], 2),
                   "peak_rss_mb": round(row["peak_rss_mb"]), "bands_x_rows": row["bands x rows"],
                   "reported_pairs": row["reported pairs"], "pair_recall": round(row["pair recall"], 4)}
        if "cluster recall" in row:
            figures["cluster_recall"] = round(row["cluster recall"], 4)
            figures["stages"] = row["stages"]
        if ours is not None and row is not ours:
            figures["times_gpudedup"] = round(row["seconds"] / ours["seconds"], 2)
        pipelines[row["pipeline"]] = figures
    return {"corpus": corpus_path(args.corpus), "documents": documents, "text_mb": round(text_mb, 1),
            "shingle": args.shingle, "ngram": args.ngram, "threshold": args.threshold, "pipelines": pipelines}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path, help="JSONL with 'id' and 'text' fields")
    parser.add_argument("--shingle", choices=("word", "char"), default="word")
    parser.add_argument("--ngram", type=int, default=5)
    parser.add_argument("--threshold", type=float, default=0.8)
    parser.add_argument("--num-perm", type=int, default=128)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--only", choices=PIPELINES, help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--bands", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--skip", nargs="*", default=[], choices=PIPELINES, help="pipelines to leave out")
    parser.add_argument("--results", type=Path, help="write the figures into this results file (bench-results/)")
    args = parser.parse_args()
    if args.only:
        run_one(args.only, args.corpus, args)
        return

    texts = load_texts(args.corpus)
    n = len(texts)
    text_mb = sum(len(t.encode("utf-8")) for t in texts if t) / 1e6
    truth_first, truth_second = exact_truth(args.corpus, args)
    truth = pair_codes(truth_first, truth_second, n)
    print(f"corpus {args.corpus}: {n} documents, {text_mb:.0f} MB of text; {truth.size} pairs with "
          f"exact Jaccard >= {args.threshold} ({args.shingle} {args.ngram}-grams)")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}\n")

    from gpudedup.params import DedupParams

    banding = DedupParams(threshold=args.threshold, num_perm=args.num_perm).banding()
    rows = []
    for name in PIPELINES:
        if name in args.skip:
            continue
        with tempfile.NamedTemporaryFile(suffix=".npz") as result:
            command = [sys.executable, __file__, str(args.corpus), "--only", name, "--result", result.name,
                       "--shingle", args.shingle, "--ngram", str(args.ngram), "--threshold", str(args.threshold),
                       "--num-perm", str(args.num_perm), "--seed", str(args.seed),
                       "--bands", str(banding.bands), "--rows", str(banding.rows)]
            subprocess.run(command, check=True)
            data = np.load(result.name)
            meta = json.loads(str(data["meta"]))
        found = pair_codes(data["first"], data["second"], n)
        row = {"pipeline": name, "seconds": meta["seconds"], "import_seconds": meta["import_seconds"],
               "peak_rss_mb": meta["peak_rss_mb"],
               "bands x rows": f"{meta['bands']}x{meta['rows']}",
               "reported pairs": int(found.size),
               "pair recall": float(np.isin(truth, found).mean()) if truth.size else 1.0}
        if "cluster_of" in data:
            cluster_of = data["cluster_of"]
            same = (cluster_of[truth_first] >= 0) & (cluster_of[truth_first] == cluster_of[truth_second])
            row["cluster recall"] = float(same.mean()) if same.size else 1.0
            row["stages"] = meta["stages"]
        rows.append(row)
        print(json.dumps(row))

    print("\n| pipeline | wall s | import s | peak RSS MB | x text size | b x r | reported pairs | pair recall "
          "| cluster recall |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['pipeline']} | {row['seconds']:.1f} | {row['import_seconds']:.2f} | {row['peak_rss_mb']:.0f} | "
              f"{row['peak_rss_mb'] / text_mb:.1f} | {row['bands x rows']} | {row['reported pairs']} | "
              f"{row['pair recall']:.4f} | {row.get('cluster recall', float('nan')):.4f} |")
    ours = next((row for row in rows if row["pipeline"] == "gpudedup"), None)
    if ours is not None:
        for row in rows:
            if row is not ours:
                with_imports = (row["seconds"] + row["import_seconds"]) / (ours["seconds"] + ours["import_seconds"])
                print(f"gpudedup / {row['pipeline']}: {row['seconds'] / ours['seconds']:.2f}x faster (wall s, "
                      f"imports apart); {with_imports:.2f}x with them")
    if args.results:
        record(args.results, "bench_cpu", [results_row(args, n, text_mb, rows)],
               key=("corpus", "shingle", "ngram", "threshold"), run=this_run("numba", "rensa", "datasketch"))

if __name__ == "__main__":
    main()
