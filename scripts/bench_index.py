"""Persistent-index benchmark: gpudedup's Index against datasketch and rensa LSH
indexes, on a real corpus cut into a base and weekly-style increments, all in the same run.

The corpus (JSONL with a 'text' field) is shuffled with --seed and cut into a base (--base, a
fraction) and --increments equal increments, so each increment holds near-duplicates of the
base and of itself. Every tool starts empty and "adds" the base, then each increment:

- gpudedup: ``Index.add`` of the step's rows as an in-memory pyarrow Table (columns row, text;
  reading the JSONL file is excluded, everything else is timed: shingling, signatures, probe,
  exact verification, clustering, the segment's commit with fsync). The backend is made
  before the clock starts, as the peers' shingling backend is (numba's start-up).
- gpudedup-source: the same with an index made with ``verification="source"`` (pointers into
  the source files instead of stored shingle sets); each step is written to a JSONL file first
  (untimed) and added from it, so its times include reading that file, and its queries read
  the files that hold their matches.
- peers: each document's shingle-hash set from gpudedup's CPU backend (``shingle_sets``, word
  5-grams of the normalised text, one batch per step, timed), its MinHash (the peer's own), the index's query,
  and insertion of the documents without a match (the same "add" semantics, query then insert,
  document by document). The peers see exactly gpudedup's shingle sets: datasketch hashes the
  low 32 bits of each shingle hash (``hashfunc=int``: no SHA-1 per shingle, which only makes
  it faster), rensa each hash's 8 bytes. Bands x rows are gpudedup's (16 x 6 for 0.8 / 128):
  datasketch ``MinHashLSH`` in memory and on Redis (``params=(16, 6)``, num_perm 128),
  ``MinHashLSHBloom`` (the same bands; --bloom-fp per band, capacity the corpus size) and rensa
  ``RMinHashLSH`` (num_perm 96 = 16 x 6, 16 bands). The peers do not verify: their matches are
  LSH candidates.

Each tool runs in its own process. Redis: a real ``redis-server`` (Debian package) started on a
free port in a temporary directory without persistence, stopped at the end.

Measured: seconds to add the base and each increment; single-document query latency over
--queries documents of the corpus (after 20 warm-up queries), from text to answer for every
tool (gpudedup: ``Index.query([text])``; peers: shingling + MinHash + query); index bytes per
indexed document (gpudedup: ``Index.info()['bytes_per_document']``, on disk, with the shingle
sets kept for exact verification; datasketch in memory: tracemalloc's count of what inserting
the final documents into a fresh index allocates; Redis: the growth of ``INFO memory``
used_memory; Bloom: the filters' bits; rensa: the growth of the process's resident set while a
fresh index takes the final documents, an approximation); and the quality of each increment's
matches against the exact all-pairs truth (gpudedup.core.allpairs over the same shingle sets):

- pair precision / recall: the reported pairs (gpudedup: verified pairs; peers: candidates of
  each query) that touch the increment, against the true pairs (exact Jaccard >= threshold)
  between the increment and (that tool's indexed documents + the increment);
- cross recall: only the true pairs between an increment document and an indexed one (each
  peer queries every new document against its whole index, so this is their like-for-like);
- document precision / recall: the new documents a tool drops, against those with a true
  near-duplicate in (indexed + increment) (precision) and those with one among the indexed
  documents or earlier in the increment (recall: under keep-first, exactly these must go).

A batch ``gpudedup.dedup`` over (gpudedup's indexed documents, then the increment) is scored the
same way for comparison (and timed), after all the adds and queries, so that no untimed work
runs between two timed adds. --scale N adds a gpudedup-only run on N perturbed copies
of the corpus (each copy changes one word in ten of every document, so copies are not near
duplicates of each other) to measure query latency and bytes per document on a larger index.

    apt-get install -y redis-server; pip install redis 'datasketch[bloom]' rensa
    python scripts/bench_index.py bench_data/bench.jsonl --json bench_index.json

``--results bench-results/index.json`` writes the figures into the results file that
docs/performance.md is rendered from (scripts/render_performance.py), replacing the tools' and
the scale's that the run measured.
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.json as pajson
from bench_results import corpus_path, record, this_run

TOOLS = ("gpudedup", "gpudedup-source", "datasketch", "datasketch-redis", "datasketch-bloom", "rensa")
WARM_UP_QUERIES = 20
# One word in PERTURB_EVERY is replaced in each scaled copy: every 5-gram that holds it changes,
# so a copy keeps about (1 - 1/10)**5 = 59% of its shingles (Jaccard ~0.42 with the original).
PERTURB_EVERY = 10


# --- the plan: which rows each step adds, which rows are queried ----------------------------


@dataclass(frozen=True)
class Plan:
    """steps: int64 arrays of corpus rows, the base then each increment (host); queries: int64
    rows whose texts are queried one at a time, the first WARM_UP_QUERIES not counted."""

    steps: list[np.ndarray]
    queries: np.ndarray


def make_plan(n: int, base: float, increments: int, queries: int, seed: int) -> Plan:
    rng = np.random.default_rng(seed)
    order = rng.permutation(n).astype(np.int64)
    cut = int(round(n * base))
    steps = [order[:cut]] + list(np.array_split(order[cut:], increments))
    asked = rng.choice(n, size=min(n, queries + WARM_UP_QUERIES), replace=False).astype(np.int64)
    return Plan(steps, asked)


def load_texts(path: Path) -> list[str]:
    return pajson.read_json(path).column("text").to_pylist()


def spec_of(args):
    from gpudedup.core.shingling import ShingleSpec

    return ShingleSpec("word", args.ngram)


def rss_bytes() -> int:
    with open("/proc/self/statm") as stream:
        return int(stream.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def latency_summary(seconds: list[float]) -> dict:
    counted = np.asarray(seconds[WARM_UP_QUERIES:]) * 1e3
    return {"queries": int(counted.size), "median_ms": float(np.median(counted)),
            "p99_ms": float(np.percentile(counted, 99)), "mean_ms": float(counted.mean())}


# --- gpudedup ---------------------------------------------------------------------------------


def found_pairs(result) -> tuple[np.ndarray, np.ndarray]:
    """(id_a, id_b) int64 host arrays: every pair a run found, groups of identical copies spelled
    out. This is DedupResult.all_pairs, but over all the run's rows (len(result.ids)): all_pairs
    sizes its graph by result.keep, which for a run against an index leaves out the indexed
    rows (and fails on their pairs)."""
    from gpudedup.core.copies import implied_pairs

    outcome = result._outcome
    copy = outcome.jaccard == 1.0  # only identical sets have Jaccard 1.0
    a, b, _ = implied_pairs(outcome.pair_a, outcome.pair_b, outcome.pair_a[copy], outcome.pair_b[copy],
                            len(result.ids))
    ids = result.ids.to_numpy(zero_copy_only=False).astype(np.int64)
    return ids[a], ids[b]


def run_gpudedup(texts: list[str], plan: Plan, args, verification: str = "sets") -> dict:
    """gpudedup's Index; verification "source" (the gpudedup-source tool) adds each step from a
    JSONL file written beforehand (untimed), so its add times include reading that file."""
    import gpudedup
    from gpudedup.backends import get_backend

    # Made before any clock starts, as the peers' shingling backend is (numba's start-up).
    backend = get_backend(args.backend)
    table = pa.table({"row": pa.array(np.arange(len(texts), dtype=np.int64)), "text": pa.array(texts)})
    parameters = dict(threshold=args.threshold, shingle="word", ngram=args.ngram, num_perm=args.num_perm)
    steps: list[dict] = []
    arrays: dict[str, np.ndarray] = {}
    indexed = np.zeros(0, np.int64)  # index order: each step's kept rows, in input order
    before: list[np.ndarray] = []  # per step: the indexed rows before it
    keeps: list[np.ndarray] = []  # per step: bool, which of its rows the add kept
    with tempfile.TemporaryDirectory(dir=args.work_dir) as work:
        index = gpudedup.Index.create(Path(work) / "index", verification=verification, **parameters)
        for step, rows in enumerate(plan.steps):
            data: Any = table.take(pa.array(rows))
            if verification == "source":
                data = Path(work) / f"step{step}.jsonl"
                with open(data, "w", encoding="utf-8") as sink:
                    sink.writelines(json.dumps({"row": int(r), "text": texts[int(r)]}) + "\n" for r in rows)
            started = time.perf_counter()
            result = index.add(data, id_field="row", tag=f"step{step}", backend=backend)
            seconds = time.perf_counter() - started
            keep = np.asarray(result.keep, dtype=bool)
            arrays[f"dropped{step}"] = rows[~keep]
            arrays[f"first{step}"], arrays[f"second{step}"] = found_pairs(result)
            steps.append({"seconds": seconds, "documents": int(rows.size), "stages": result.report["stages"]})
            before.append(indexed)
            keeps.append(keep)
            indexed = np.concatenate([indexed, rows[keep]])
        info = index.info()
        query = query_latencies(index, texts, plan, backend)
        # The batch runs come after every timed add and query, so that none of their work (or
        # the memory they free) falls between two timed adds.
        for step, rows in enumerate(plan.steps):
            if step == 0 or args.no_batch:
                continue
            batch_data = table.take(pa.array(np.concatenate([before[step], rows])))
            started = time.perf_counter()
            batch = gpudedup.dedup(batch_data, id_field="row", keep="first", backend=backend, **parameters)
            steps[step]["batch_seconds"] = time.perf_counter() - started
            batch_keep = np.asarray(batch.keep, dtype=bool)[before[step].size:]
            arrays[f"batch_dropped{step}"] = rows[~batch_keep]
            arrays[f"batch_first{step}"], arrays[f"batch_second{step}"] = found_pairs(batch)
            steps[step]["batch_keeps_the_same"] = bool(np.array_equal(batch_keep, keeps[step]))
        segment_files: dict[str, int] = {}
        for folder in (Path(work) / "index" / "segments").iterdir():
            for path in folder.iterdir():
                segment_files[path.name] = segment_files.get(path.name, 0) + path.stat().st_size
    return {"steps": steps, "arrays": arrays, "query": query,
            "index_documents": info["documents"], "bytes_per_document": info["bytes_per_document"],
            "bytes_method": f"Index.info()['bytes_per_document']: the segments' files on disk (verification "
                            f"{verification})",
            "bytes_by_file": segment_files, "segments": info["segments"], "bands x rows": "16x6 (the index's)"}


# --- peers ------------------------------------------------------------------------------------


@dataclass
class Peer:
    """One peer's index: make(hashes uint64 (s,) host) -> its MinHash; query(minhash) -> a list
    of keys (or a bool for Bloom); insert(key, minhash)."""

    make: Callable[[np.ndarray], Any]
    query: Callable[[Any], Any]
    insert: Callable[[int, Any], None]
    index: Any


LOW_32 = np.uint64(0xFFFFFFFF)


def datasketch_minhash(num_perm: int) -> Callable[[np.ndarray], Any]:
    from datasketch import MinHash

    def make(hashes: np.ndarray):
        minhash = MinHash(num_perm=num_perm, hashfunc=int)  # the shingle hash is the hash
        minhash.update_batch((hashes & LOW_32).astype(np.uint32))
        return minhash

    return make


def rensa_minhash(bands: int, rows: int, seed: int) -> Callable[[np.ndarray], Any]:
    from rensa import RMinHash

    def make(hashes: np.ndarray):
        minhash = RMinHash(num_perm=bands * rows, seed=seed)
        # Each hash's 8 bytes as one token ('S8' drops trailing zero bytes: still one-to-one).
        minhash.update(hashes.view("S8").tolist())
        return minhash

    return make


def make_peer(name: str, args, n: int) -> Peer:
    bands, rows = args.bands, args.rows
    if name == "rensa":
        from rensa import RMinHashLSH

        lsh = RMinHashLSH(threshold=args.threshold, num_perm=bands * rows, num_bands=bands)
        return Peer(rensa_minhash(bands, rows, args.seed), lsh.query, lsh.insert, lsh)
    make = datasketch_minhash(args.num_perm)
    if name == "datasketch-bloom":
        import warnings

        from datasketch import MinHashLSHBloom

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # "will not be persisted": in memory on purpose
            bloom = MinHashLSHBloom(threshold=args.threshold, num_perm=args.num_perm, n=n, fp=args.bloom_fp,
                                    params=(bands, rows))
        return Peer(make, bloom.query, lambda key, minhash: bloom.insert(minhash), bloom)
    from datasketch import MinHashLSH

    storage = None
    if name == "datasketch-redis":
        storage = {"type": "redis", "redis": {"host": "127.0.0.1", "port": args.redis_port}}
    lsh = MinHashLSH(threshold=args.threshold, num_perm=args.num_perm, params=(bands, rows), storage_config=storage)
    return Peer(make, lsh.query, lsh.insert, lsh)


def redis_used_memory(port: int) -> int:
    import redis

    return int(redis.Redis(host="127.0.0.1", port=port).info("memory")["used_memory"])


def run_peer(name: str, texts: list[str], plan: Plan, args) -> dict:
    from gpudedup.backends import get_backend
    from gpudedup.core.normalize import text_buffers

    # The peers get gpudedup's fastest shingling on this machine: the CPU backend's sets.
    backend = get_backend("cpu")

    def shingle_sets(batch: list[str], spec):
        return backend.shingle_sets(*text_buffers(pa.array(batch, pa.large_string())), spec)

    spec = spec_of(args)
    redis_before = redis_used_memory(args.redis_port) if name == "datasketch-redis" else 0
    peer = make_peer(name, args, len(texts))
    steps: list[dict] = []
    arrays: dict[str, np.ndarray] = {}
    kept: dict[int, Any] = {}  # indexed row -> its MinHash (to measure a fresh index's size)
    for step, rows in enumerate(plan.steps):
        started = time.perf_counter()
        sets = shingle_sets([texts[int(r)] for r in rows], spec)
        shingled = time.perf_counter()
        minhash_s = query_s = insert_s = 0.0
        dropped, first, second = [], [], []
        for j, row in enumerate(rows.tolist()):
            hashes = sets.hashes[sets.offsets[j]:sets.offsets[j + 1]]
            if hashes.size == 0:
                continue  # no shingles: never indexed, never paired (as in gpudedup)
            a = time.perf_counter()
            minhash = peer.make(hashes)
            b = time.perf_counter()
            found = peer.query(minhash)
            c = time.perf_counter()
            minhash_s += b - a
            query_s += c - b
            if found:
                dropped.append(row)
                if not isinstance(found, bool):
                    first += list(found)
                    second += [row] * len(found)
            else:
                peer.insert(row, minhash)
                kept[row] = minhash
                insert_s += time.perf_counter() - c
        seconds = time.perf_counter() - started
        arrays[f"dropped{step}"] = np.array(dropped, np.int64)
        if name != "datasketch-bloom":
            arrays[f"first{step}"] = np.array(first, np.int64)
            arrays[f"second{step}"] = np.array(second, np.int64)
        steps.append({"seconds": seconds, "documents": int(rows.size), "shingling_s": shingled - started,
                      "minhash_s": minhash_s, "query_s": query_s, "insert_s": insert_s})
    latencies = []
    for row in plan.queries:
        started = time.perf_counter()
        sets = shingle_sets([texts[int(row)]], spec)
        if sets.hashes.size:
            peer.query(peer.make(sets.hashes))
        latencies.append(time.perf_counter() - started)
    size, method, extra = peer_bytes(name, peer, kept, args, redis_before)
    return {"steps": steps, "arrays": arrays, "query": latency_summary(latencies), "index_documents": len(kept),
            "bytes_per_document": round(size / max(len(kept), 1), 1), "bytes_method": method, **extra,
            "bands x rows": f"{args.bands}x{args.rows}"}


def peer_bytes(name: str, peer: Peer, kept: dict[int, Any], args, redis_before: int) -> tuple[int, str, dict]:
    """(bytes of the index, how they were measured, more figures) for a peer's final index."""
    if name == "datasketch-redis":
        return (redis_used_memory(args.redis_port) - redis_before,
                "redis INFO memory used_memory, after minus before", {})
    if name == "datasketch-bloom":
        bits = sum(table.bloom_filter.num_bits for table in peer.index.hashtables)
        return bits // 8, f"the {len(peer.index.hashtables)} Bloom filters' bits (fp {args.bloom_fp} each, " \
                          "capacity the corpus size)", {}
    if name == "datasketch":
        import pickle

        from datasketch import MinHashLSH

        pickled = len(pickle.dumps(peer.index, protocol=pickle.HIGHEST_PROTOCOL))
        gc.collect()
        tracemalloc.start()
        fresh = MinHashLSH(threshold=args.threshold, num_perm=args.num_perm, params=(args.bands, args.rows))
        for key, minhash in kept.items():
            fresh.insert(key, minhash)
        traced = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        return traced, "tracemalloc: what inserting the final documents into a fresh MinHashLSH allocates", \
            {"pickle_bytes_per_document": round(pickled / max(len(kept), 1), 1)}
    from rensa import RMinHashLSH

    del peer
    gc.collect()
    before = rss_bytes()
    fresh = RMinHashLSH(threshold=args.threshold, num_perm=args.bands * args.rows, num_bands=args.bands)
    for key, minhash in kept.items():
        fresh.insert(key, minhash)
    return rss_bytes() - before, "growth of the resident set while a fresh RMinHashLSH takes the final " \
                                 "documents (approximate)", {}


# --- scale: gpudedup alone on a larger index -------------------------------------------------


def perturbed(texts: list[str], copy: int) -> list[str]:
    """Copy ``copy`` of the corpus: in every document, one word in PERTURB_EVERY (positions
    chosen by a generator seeded with the copy) replaced by a word made of the copy and the
    position, so copies are distinct documents (Jaccard about 0.4 with the original)."""
    rng = np.random.default_rng(copy)
    out = []
    for text in texts:
        words = (text or "").split()
        if words:
            for position in np.flatnonzero(rng.random(len(words)) < 1 / PERTURB_EVERY).tolist():
                words[position] = f"w{copy}x{position}"
        out.append(" ".join(words))
    return out


def run_scale(texts: list[str], plan: Plan, args) -> dict:
    """Add the corpus and args.scale - 1 perturbed copies of it to one index (copy by copy,
    then compact), then time single-document queries and read the index's size."""
    import gpudedup
    from gpudedup.backends import get_backend

    backend = get_backend(args.backend)  # made once, before any clock starts
    parameters = dict(threshold=args.threshold, shingle="word", ngram=args.ngram, num_perm=args.num_perm)
    adds: list[dict] = []
    with tempfile.TemporaryDirectory(dir=args.work_dir) as work:
        index = gpudedup.Index.create(Path(work) / "index", **parameters)
        n = len(texts)
        for copy in range(args.scale):
            documents = texts if copy == 0 else perturbed(texts, copy)
            table = pa.table({"row": pa.array(np.arange(n, dtype=np.int64) + copy * n), "text": pa.array(documents)})
            started = time.perf_counter()
            result = index.add(table, id_field="row", backend=backend)
            adds.append({"copy": copy, "seconds": time.perf_counter() - started,
                         "kept": int(np.count_nonzero(result.keep)), "indexed_before": copy and adds[-1]["indexed"],
                         "indexed": index.info()["documents"]})
            print(json.dumps({"scale add": adds[-1]}), flush=True)
        before = query_latencies(index, texts, plan, backend)
        print(json.dumps({"scale queries before compact": before}), flush=True)
        started = time.perf_counter()
        index.compact()
        compact_s = time.perf_counter() - started
        info = index.info()
        after = query_latencies(index, texts, plan, backend)
    return {"scale": args.scale, "adds": adds, "compact_s": compact_s, "documents": info["documents"],
            "bytes_per_document": info["bytes_per_document"], "query_before_compact": before,
            "segments_before_compact": args.scale, "query": after}


def query_latencies(index, texts: list[str], plan: Plan, backend) -> dict:
    """latency_summary of ``Index.query([text])``, one query document per call (plan.queries)."""
    latencies = []
    for row in plan.queries:
        started = time.perf_counter()
        index.query([texts[int(row)]], backend=backend)
        latencies.append(time.perf_counter() - started)
    return latency_summary(latencies)


# --- scoring ----------------------------------------------------------------------------------


def exact_truth(corpus: Path, args) -> tuple[np.ndarray, np.ndarray]:
    """The corpus's exact pairs (rows a < b, Jaccard >= threshold): bench_cpu's, whose cache
    under bench_data/ both scripts share."""
    location = Path(__file__).with_name("bench_cpu.py")
    loaded = importlib.util.spec_from_file_location("bench_cpu", location)
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    truth_args = argparse.Namespace(shingle="word", ngram=args.ngram, threshold=args.threshold)
    return module.exact_truth(corpus, truth_args)


def ratio(numerator: int, denominator: int) -> Optional[float]:
    return numerator / denominator if denominator else None


def score_step(truth_a: np.ndarray, truth_b: np.ndarray, n: int, indexed: np.ndarray, rows: np.ndarray,
               dropped: np.ndarray, first: Optional[np.ndarray], second: Optional[np.ndarray]) -> dict:
    """Precision and recall of one increment's matches (module docstring). indexed: the tool's
    indexed rows before the step (in index order); rows: the increment's rows (input order)."""
    from gpudedup.evaluate import pair_codes

    in_index = np.zeros(n, bool)
    in_index[indexed] = True
    position = np.full(n, -1, np.int64)  # position in the increment, -1 outside it
    position[rows] = np.arange(rows.size)
    new_a, new_b = position[truth_a] >= 0, position[truth_b] >= 0
    seen_a, seen_b = new_a | in_index[truth_a], new_b | in_index[truth_b]
    relevant = (new_a | new_b) & seen_a & seen_b
    ta, tb = truth_a[relevant], truth_b[relevant]
    truth = pair_codes(ta, tb, n)
    cross = (position[ta] >= 0) != (position[tb] >= 0)
    cross_truth = pair_codes(ta[cross], tb[cross], n)
    # Documents: any true partner in (indexed + increment); one that must go under keep-first.
    has_partner = np.zeros(n, bool)
    has_partner[ta] = True
    has_partner[tb] = True
    must_go = np.zeros(n, bool)
    for x, y in ((ta, tb), (tb, ta)):  # y must go when x is indexed or earlier in the increment
        earlier = (position[y] >= 0) & (in_index[x] | ((position[x] >= 0) & (position[x] < position[y])))
        must_go[y[earlier]] = True
    is_dropped = np.zeros(n, bool)
    is_dropped[dropped] = True
    out: dict[str, Any] = {
        "true_pairs": int(truth.size), "true_cross_pairs": int(cross_truth.size),
        "dropped": int(dropped.size), "must_go": int(must_go[rows].sum()),
        "doc_precision": ratio(int(has_partner[dropped].sum()), int(dropped.size)),
        "doc_recall": ratio(int((must_go & is_dropped)[rows].sum()), int(must_go[rows].sum())),
    }
    if first is not None and second is not None:
        touches = (position[first] >= 0) | (position[second] >= 0)
        found = pair_codes(first[touches], second[touches], n)
        true_found = np.isin(found, truth)
        out.update({"reported_pairs": int(found.size),
                    "pair_precision": ratio(int(true_found.sum()), int(found.size)),
                    "pair_recall": ratio(int(np.isin(truth, found).sum()), int(truth.size)),
                    "cross_recall": ratio(int(np.isin(cross_truth, found).sum()), int(cross_truth.size))})
    return out


def score_tool(outcome: dict, plan: Plan, truth: tuple[np.ndarray, np.ndarray], n: int, prefix: str = "") -> list:
    arrays = outcome["arrays"]
    scores = []
    indexed = np.setdiff1d(plan.steps[0], arrays["dropped0"])
    for step in range(1, len(plan.steps)):
        rows = plan.steps[step]
        dropped = arrays[f"{prefix}dropped{step}"]
        first = arrays.get(f"{prefix}first{step}")
        second = arrays.get(f"{prefix}second{step}")
        scores.append(score_step(truth[0], truth[1], n, indexed, rows, dropped, first, second))
        indexed = np.concatenate([indexed, np.setdiff1d(rows, arrays[f"dropped{step}"])])
    return scores


# --- driver -----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RedisServer:
    """A redis-server of its own: a free port, a temporary directory, no persistence."""

    def __init__(self) -> None:
        self.port = free_port()
        self.directory = tempfile.TemporaryDirectory(prefix="bench-index-redis-")
        binary = shutil.which("redis-server")
        assert binary is not None
        self.process = subprocess.Popen([binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
                                         self.directory.name, "--save", "", "--appendonly", "no"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self.version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
        for _ in range(100):
            try:
                redis_used_memory(self.port)
                return
            except Exception:  # not accepting connections yet
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self.directory.cleanup()


def missing_requirement(name: str) -> Optional[str]:
    """Why ``name`` cannot run here, or None."""
    needs = {"datasketch": ["datasketch"], "datasketch-redis": ["datasketch", "redis"],
             "datasketch-bloom": ["datasketch", "pybloomfilter"], "rensa": ["rensa"], "gpudedup": [],
             "gpudedup-source": []}[name]
    for module in needs:
        if importlib.util.find_spec(module) is None:
            return f"Python module {module!r} is not installed (pip install redis 'datasketch[bloom]' rensa)"
    if name == "datasketch-redis" and shutil.which("redis-server") is None:
        return "redis-server is not installed (apt-get install -y redis-server)"
    return None


def run_child(args) -> None:
    texts = load_texts(args.corpus)
    plan = make_plan(len(texts), args.base, args.increments, args.queries, args.seed)
    if args.only == "scale":
        outcome = run_scale(texts, plan, args)
    elif args.only == "gpudedup":
        outcome = run_gpudedup(texts, plan, args)
    elif args.only == "gpudedup-source":
        outcome = run_gpudedup(texts, plan, args, verification="source")
    else:
        outcome = run_peer(args.only, texts, plan, args)
    arrays = outcome.pop("arrays", {})
    np.savez(args.result, **arrays, meta=json.dumps(outcome))


def child(name: str, args, extra: list[str]) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".npz") as result:
        command = [sys.executable, __file__, str(args.corpus), "--only", name, "--result", result.name,
                   "--threshold", str(args.threshold), "--ngram", str(args.ngram), "--num-perm", str(args.num_perm),
                   "--seed", str(args.seed), "--base", str(args.base), "--increments", str(args.increments),
                   "--queries", str(args.queries), "--bloom-fp", str(args.bloom_fp), "--backend", args.backend,
                   "--bands", str(args.bands), "--rows", str(args.rows), "--scale", str(args.scale),
                   *(["--no-batch"] if args.no_batch else []),
                   *(["--work-dir", args.work_dir] if args.work_dir else []), *extra]
        subprocess.run(command, check=True)
        data = np.load(result.name)
        outcome = json.loads(str(data["meta"]))
        outcome["arrays"] = {key: data[key] for key in data.files if key != "meta"}
    return outcome


def fmt(value: Optional[float], digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path, help="JSONL with a 'text' field")
    parser.add_argument("--threshold", type=float, default=0.8)
    parser.add_argument("--ngram", type=int, default=5, help="word n-grams")
    parser.add_argument("--num-perm", type=int, default=128)
    parser.add_argument("--seed", type=int, default=42, help="the shuffle, the queries, rensa's MinHash")
    parser.add_argument("--base", type=float, default=0.6, help="fraction of the corpus in the base")
    parser.add_argument("--increments", type=int, default=4)
    parser.add_argument("--queries", type=int, default=1000, help="single-document queries timed per tool")
    parser.add_argument("--bloom-fp", type=float, default=0.001, help="false-positive rate of each band's filter")
    parser.add_argument("--backend", default="cpu", help="gpudedup's backend")
    parser.add_argument("--skip", nargs="*", default=[], choices=TOOLS, help="tools to leave out")
    parser.add_argument("--no-batch", action="store_true", help="do not run the batch comparison")
    parser.add_argument("--scale", type=int, default=0,
                        help="also build a gpudedup index of N perturbed copies of the corpus (N x its documents) "
                             "and time queries on it")
    parser.add_argument("--work-dir", help="where the gpudedup indexes are written (default: the temp dir)")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--results", type=Path, help="write the figures into this results file (bench-results/)")
    parser.add_argument("--only", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--redis-port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--bands", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only:
        run_child(args)
        return

    from gpudedup.params import DedupParams

    banding = DedupParams(threshold=args.threshold, num_perm=args.num_perm).banding()
    args.bands, args.rows = banding.bands, banding.rows
    texts = load_texts(args.corpus)
    n = len(texts)
    plan = make_plan(n, args.base, args.increments, args.queries, args.seed)
    truth = exact_truth(args.corpus, args)
    import datasketch
    import rensa  # noqa: F401 (its version, below)

    versions = {"datasketch": datasketch.__version__, "python": platform.python_version(),
                "rensa": importlib.metadata.version("rensa")}
    print(f"corpus {args.corpus}: {n} documents, {truth[0].size} exact pairs (word {args.ngram}-grams, "
          f"J >= {args.threshold}); base {plan.steps[0].size}, increments "
          f"{', '.join(str(s.size) for s in plan.steps[1:])}; bands x rows {args.bands}x{args.rows}")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; {versions}", flush=True)

    results: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    for name in TOOLS:
        if name in args.skip:
            continue
        reason = missing_requirement(name)
        if reason:
            skipped[name] = reason
            print(f"SKIPPED {name}: {reason}", flush=True)
            continue
        server = RedisServer() if name == "datasketch-redis" else None
        try:
            if server is not None:
                versions["redis-server"] = server.version
            extra = ["--redis-port", str(server.port)] if server is not None else []
            started = time.perf_counter()
            outcome = child(name, args, extra)
            print(f"{name}: done in {time.perf_counter() - started:.0f} s", flush=True)
        finally:
            if server is not None:
                server.stop()
        outcome["scores"] = score_tool(outcome, plan, truth, n)
        if name.startswith("gpudedup") and not args.no_batch:
            outcome["batch_scores"] = score_tool(outcome, plan, truth, n, prefix="batch_")
        outcome.pop("arrays")
        results[name] = outcome
    scale = None
    if args.scale:
        scale = child("scale", args, [])
        scale.pop("arrays", None)

    report_tables(results, scale)
    if args.json:
        args.json.write_text(json.dumps({"corpus": str(args.corpus), "documents": n, "exact_pairs": int(truth[0].size),
                                         "steps": [int(s.size) for s in plan.steps], "arguments": sys.argv[1:],
                                         "machine": {"cores": os.cpu_count(), "processor": platform.processor()},
                                         "versions": versions, "skipped": skipped, "tools": results, "scale": scale},
                                        indent=2) + "\n")
        print(f"\nwrote {args.json}")
    if args.results:
        run = this_run("numba")
        run["versions"].update(versions)
        record(args.results, "bench_index", results_rows(args.corpus, results, scale), key=("tool", "scale"), run=run)


def results_rows(corpus: Path, results: dict[str, dict], scale: Optional[dict]) -> list[dict]:
    """The run's figures for its results file: a row per tool, and one for the scale run."""
    rows = []
    for name, outcome in results.items():
        increments = [step["seconds"] for step in outcome["steps"][1:]]
        row = {"tool": name, "corpus": corpus_path(corpus), "base_seconds": round(outcome["steps"][0]["seconds"], 2),
               "increment_seconds": [round(value, 2) for value in increments],
               "increments_total_seconds": round(sum(increments), 2),
               "query_median_ms": round(outcome["query"]["median_ms"], 2),
               "query_p99_ms": round(outcome["query"]["p99_ms"], 2),
               "bytes_per_document": round(outcome["bytes_per_document"]),
               "indexed_documents": outcome["index_documents"]}
        scores = outcome.get("scores", [])
        if scores and all(score.get("pair_precision") is not None and score.get("pair_recall") is not None
                          for score in scores):
            row["pair_precision"] = [round(score["pair_precision"], 4) for score in scores]
            row["pair_recall"] = [round(score["pair_recall"], 4) for score in scores]
        rows.append(row)
    if scale is not None:
        adds = [add["seconds"] for add in scale["adds"]]
        row = {"tool": "gpudedup", "scale": scale["scale"], "corpus": corpus_path(corpus),
               "indexed_documents": scale["documents"], "bytes_per_document": round(scale["bytes_per_document"]),
               "first_add_seconds": round(adds[0], 1), "segments_before_compact": scale["segments_before_compact"],
               "query_before_compact_median_ms": round(scale["query_before_compact"]["median_ms"], 2),
               "query_before_compact_p99_ms": round(scale["query_before_compact"]["p99_ms"], 2),
               "compact_seconds": round(scale["compact_s"], 1),
               "query_median_ms": round(scale["query"]["median_ms"], 2),
               "query_p99_ms": round(scale["query"]["p99_ms"], 2)}
        if len(adds) > 1:
            row["later_add_seconds"] = [round(min(adds[1:]), 1), round(max(adds[1:]), 1)]
        rows.append(row)
    return rows


def report_tables(results: dict[str, dict], scale: Optional[dict]) -> None:
    print("\n| tool | base s | increments s | total add s | query median ms | query p99 ms | bytes/doc | indexed |")
    print("|---|---|---|---|---|---|---|---|")
    for name, outcome in results.items():
        steps = outcome["steps"]
        increments = [s["seconds"] for s in steps[1:]]
        print(f"| {name} | {steps[0]['seconds']:.1f} | {' / '.join(f'{s:.1f}' for s in increments)} | "
              f"{sum(increments):.1f} | {outcome['query']['median_ms']:.2f} | {outcome['query']['p99_ms']:.2f} | "
              f"{outcome['bytes_per_document']:,.0f} | {outcome['index_documents']} |")
    print("\n| tool | increment | dropped | pair precision | pair recall | cross recall | doc precision | doc recall |")
    print("|---|---|---|---|---|---|---|---|")
    for name, outcome in results.items():
        for label, key in ((name, "scores"), (f"{name} batch dedup", "batch_scores")):
            for step, score in enumerate(outcome.get(key, []), start=1):
                print(f"| {label} | {step} | {score['dropped']} | {fmt(score.get('pair_precision'))} | "
                      f"{fmt(score.get('pair_recall'))} | {fmt(score.get('cross_recall'))} | "
                      f"{fmt(score['doc_precision'])} | {fmt(score['doc_recall'])} |")
    if scale is not None:
        print(f"\nscale {scale['scale']}x: {scale['documents']} indexed documents, "
              f"{scale['bytes_per_document']:,.0f} bytes/doc, query median {scale['query']['median_ms']:.2f} ms, "
              f"p99 {scale['query']['p99_ms']:.2f} ms (before compacting {scale['segments_before_compact']} "
              f"segments: {scale['query_before_compact']['median_ms']:.2f} / "
              f"{scale['query_before_compact']['p99_ms']:.2f} ms); "
              f"adds {[round(a['seconds'], 1) for a in scale['adds']]} s, "
              f"compact {scale['compact_s']:.1f} s")


if __name__ == "__main__":
    main()
