"""Token-id shingles on the benchmark corpus: word n-grams against token n-grams of a BPE tokenizer.

Steps, each timed apart:
1. train a byte-level BPE tokenizer (the ``tokenizers`` package; offline, nothing downloaded)
   on every ``--train-every``-th document, with a vocabulary of ``--vocab`` ids;
2. tokenize every document (``encode_batch``) and write a Parquet file of id, text and
   input_ids (list<uint32>) next to the corpus;
3. in one run, on that Parquet file: the word ``--word-ngram`` job (``shingle="word"`` over the
   text) and one token job per ``--token-ngrams`` (``shingle="token"`` over input_ids), each
   timed as ``gpudedup.dedup`` alone (reading the file, every stage; not writing outputs);
4. each job's verified pairs (``all_pairs()``: groups of copies spelled out) against the exact
   all-pairs truth of its own shingles (``gpudedup.evaluate.exact_ground_truth``, timed apart):
   precision and recall; and how the token jobs' pairs and truths overlap the word job's.

Prints a table and writes JSON (``--json``); ``--results bench-results/tokens.json`` writes the
jobs' figures into the results file that docs/performance.md is rendered from
(scripts/render_performance.py), replacing those of the same corpus and jobs.

    pip install -e '.[bench]'
    python scripts/bench_tokens.py bench_data/bench.jsonl --token-ngrams 5,8
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import time
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np
import pyarrow as pa
import pyarrow.json as pajson
import pyarrow.parquet as pq
from bench_results import corpus_path, record, this_run

if TYPE_CHECKING:
    from gpudedup.core.shingling import ShingleKind


def train_tokenizer(texts: list[str], vocab: int):
    """A byte-level BPE tokenizer trained on ``texts`` (every byte is in the alphabet, so no id
    is unknown)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def token_column(tokenizer, texts: list[str], batch: int = 4096) -> pa.Array:
    """list<uint32> (n,): every text's ids (a null text has none), by encode_batch."""
    offsets = [np.zeros(1, np.int64)]
    values: list[np.ndarray] = []
    end = 0
    for start in range(0, len(texts), batch):
        encodings = tokenizer.encode_batch([t or "" for t in texts[start:start + batch]], add_special_tokens=False)
        ids = [np.asarray(e.ids, dtype=np.uint32) for e in encodings]
        lengths = np.array([a.shape[0] for a in ids], np.int64)
        offsets.append(end + np.cumsum(lengths))
        end += int(lengths.sum())
        values += ids
    flat = np.concatenate(values) if values else np.zeros(0, np.uint32)
    all_offsets = np.concatenate(offsets)
    offset_type = pa.int32() if end < 2**31 else pa.int64()
    make = pa.ListArray if offset_type == pa.int32() else pa.LargeListArray
    return make.from_arrays(pa.array(all_offsets, offset_type), pa.array(flat, pa.uint32()))


def pair_codes(first: np.ndarray, second: np.ndarray, n: int) -> np.ndarray:
    """Sorted distinct int64 codes min * n + max of row pairs."""
    first, second = np.asarray(first, np.int64), np.asarray(second, np.int64)
    return np.unique(np.minimum(first, second) * n + np.maximum(first, second))


def run_job(path: Path, kind: str, n: int, threshold: float, row_of: dict) -> dict:
    """One gpudedup job on the Parquet file (timed alone) and its verified pairs as row codes."""
    import gpudedup

    options = {"shingle": kind, "ngram": n, "threshold": threshold, "id_field": "id", "backend": "cpu"}
    if kind == "token":
        options["token_field"] = "input_ids"
    started = time.perf_counter()
    result = gpudedup.dedup(path, **options)
    seconds = time.perf_counter() - started
    pairs = result.all_pairs().to_pydict()
    first = np.array([row_of[i] for i in pairs["id_a"]], np.int64)
    second = np.array([row_of[i] for i in pairs["id_b"]], np.int64)
    report = result.report
    return {"seconds": seconds, "peak_rss_mb": report["peak_rss_mb"],
            "bands": report["parameters"]["bands"], "rows": report["parameters"]["rows"],
            "candidate_pairs": report["results"]["candidate_pairs"],
            "verified_pairs": report["results"]["verified_pairs"],
            "identical_copies": report["results"]["identical_copies"],
            "clusters": report["results"]["clusters"], "removed": report["results"]["removed_documents"],
            "stages": {k: round(v["seconds"], 3) for k, v in report["stages"].items() if "seconds" in v},
            "codes": pair_codes(first, second, len(row_of))}


def exact_truth(path: Path, kind: str, n: int, threshold: float) -> tuple[np.ndarray, float]:
    """(row-pair codes with exact Jaccard >= threshold, seconds) for this shingle kind."""
    from gpudedup.evaluate import exact_ground_truth
    from gpudedup.io.read import read_corpus
    from gpudedup.core.shingling import ShingleSpec

    corpus = read_corpus([path], "input_ids" if kind == "token" else "text", "id")
    started = time.perf_counter()
    truth = exact_ground_truth(corpus, ShingleSpec(cast("ShingleKind", kind), n), threshold)
    return pair_codes(truth.doc_a, truth.doc_b, corpus.num_rows), time.perf_counter() - started


def results_rows(corpus: Path, threshold: float, jobs: list[dict]) -> list[dict]:
    """The jobs' figures for the results file."""
    fields = ("shingle", "ngram", "seconds", "peak_rss_mb", "bands", "rows", "candidate_pairs", "pairs_reported",
              "truth_pairs", "precision", "recall", "pairs_shared_with_word", "truth_shared_with_word")
    return [{"corpus": corpus_path(corpus), "threshold": threshold, **{field: job[field] for field in fields}}
            for job in jobs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path, nargs="?", default=Path("bench_data/bench.jsonl"))
    parser.add_argument("--vocab", type=int, default=32_000)
    parser.add_argument("--train-every", type=int, default=10, help="Train on every N-th document.")
    parser.add_argument("--word-ngram", type=int, default=5)
    parser.add_argument("--token-ngrams", default="5,8", help="Comma list of token n-gram sizes.")
    parser.add_argument("--threshold", type=float, default=0.8)
    parser.add_argument("--parquet", type=Path, help="Where the tokenized corpus goes "
                                                     "(default: CORPUS's stem + .tokens.parquet beside it).")
    parser.add_argument("--reuse", action="store_true",
                        help="Take the tokenized corpus from --parquet as an earlier run wrote it (no training "
                             "or encoding, so no tokenization times) and run the jobs only.")
    parser.add_argument("--json", type=Path, help="Where the results go (default: beside the Parquet file).")
    parser.add_argument("--results", type=Path, help="Write the jobs' figures into this results file (bench-results/).")
    args = parser.parse_args()
    token_ngrams = [int(x) for x in args.token_ngrams.split(",") if x.strip()]
    parquet_path = args.parquet or args.corpus.with_name(f"{args.corpus.stem}.tokens.parquet")
    json_path = args.json or parquet_path.with_suffix(".json")

    table = pajson.read_json(args.corpus)
    texts = table.column("text").to_pylist()
    ids = table.column("id").to_pylist()
    text_mb = sum(len((t or "").encode("utf-8")) for t in texts) / 1e6
    print(f"corpus {args.corpus}: {len(texts):,} documents, {text_mb:.1f} MB of text")

    words = sum(len((t or "").split()) for t in texts)
    tokenizer_info: dict = {"model": "BPE, byte-level pre-tokenizer", "trained_on_every": args.train_every}
    if args.reuse:
        written = pq.read_table(parquet_path, columns=["id", "input_ids"])
        if written["id"].to_pylist() != ids:
            raise SystemExit(f"{parquet_path} does not hold the documents of {args.corpus} in order")
        tokens = len(written["input_ids"].combine_chunks().values)
        tokenizer_info.update(reused=str(parquet_path), vocab=None, train_seconds=None, encode_seconds=None)
        print(f"token ids reused from {parquet_path}: {tokens:,} tokens ({tokens / max(words, 1):.2f} per "
              "white-space word)")
        del written
    else:
        started = time.perf_counter()
        tokenizer = train_tokenizer([t for t in texts[::args.train_every] if t], args.vocab)
        train_seconds = time.perf_counter() - started
        started = time.perf_counter()
        input_ids = token_column(tokenizer, texts)
        encode_seconds = time.perf_counter() - started
        tokens = len(input_ids.values)
        tokenizer_info.update(vocab=tokenizer.get_vocab_size(), train_seconds=round(train_seconds, 2),
                              encode_seconds=round(encode_seconds, 2))
        print(f"BPE (byte-level, vocab {tokenizer.get_vocab_size():,}) trained on every {args.train_every}th "
              f"document in {train_seconds:.1f} s; {tokens:,} tokens ({tokens / max(words, 1):.2f} per "
              f"white-space word) encoded in {encode_seconds:.1f} s")
        pq.write_table(pa.table({"id": ids, "text": texts, "input_ids": input_ids}), parquet_path)
        del input_ids
    del table
    row_of = {doc_id: row for row, doc_id in enumerate(ids)}

    # Untimed warm-up of both kinds, so that first-use costs (imports, tables, thread pools) do
    # not land on whichever job runs first.
    import gpudedup

    gpudedup.dedup(texts[:200], backend="cpu")
    gpudedup.dedup([[i, i + 1, i + 2, i + 3, i + 4, i + 5] for i in range(200)], shingle="token", backend="cpu")
    jobs = [("word", args.word_ngram)] + [("token", n) for n in token_ngrams]
    results = []
    for kind, n in jobs:
        job = run_job(parquet_path, kind, n, args.threshold, row_of)
        truth, truth_seconds = exact_truth(parquet_path, kind, n, args.threshold)
        found = job.pop("codes")
        true_found = int(np.isin(found, truth).sum())
        results.append({"shingle": kind, "ngram": n, **job, "truth_pairs": int(truth.size),
                        "truth_seconds": truth_seconds,
                        "precision": true_found / found.size if found.size else 1.0,
                        "recall": true_found / truth.size if truth.size else 1.0,
                        "_found": found, "_truth": truth})
    word = results[0]
    for result in results:
        result["pairs_shared_with_word"] = int(np.isin(result["_found"], word["_found"]).sum())
        result["truth_shared_with_word"] = int(np.isin(result["_truth"], word["_truth"]).sum())
        result["pairs_reported"] = int(result["_found"].size)

    header = ("job", "s", "peak MB", "b x r", "pairs", "true pairs", "precision", "recall",
              "shared w/ word pairs", "truth shared w/ word truth", "truth s")
    print(" | ".join(header))
    for r in results:
        print(" | ".join([
            f"{r['shingle']} {r['ngram']}-grams", f"{r['seconds']:.1f}", f"{r['peak_rss_mb']:.0f}",
            f"{r['bands']} x {r['rows']}", f"{r['pairs_reported']:,}", f"{r['truth_pairs']:,}",
            f"{r['precision']:.4f}", f"{r['recall']:.4f}", f"{r['pairs_shared_with_word']:,}",
            f"{r['truth_shared_with_word']:,}", f"{r['truth_seconds']:.1f}"]))
    output = {
        "date": datetime.date.today().isoformat(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "corpus": {"path": str(args.corpus), "documents": len(texts), "text_mb": round(text_mb, 1),
                   "words": words, "tokens": tokens},
        "tokenizer": tokenizer_info,
        "threshold": args.threshold, "parquet": str(parquet_path),
        "jobs": [{k: v for k, v in r.items() if not k.startswith("_")} for r in results],
    }
    json_path.write_text(json.dumps(output, indent=2) + "\n", encoding="utf-8")
    print(f"results in {json_path}")
    if args.results:
        record(args.results, "bench_tokens", results_rows(args.corpus, args.threshold, output["jobs"]),
               key=("corpus", "shingle", "ngram", "threshold"), run=this_run("tokenizers"))


if __name__ == "__main__":
    main()
