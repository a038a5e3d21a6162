"""Connected components of verified pairs: in this process (cluster.component_roots, numpy)
against a 2-worker Dask cluster (pipeline/components.py: a task per part of the pairs, then the
large-star / small-star shuffles) and against SciPy's connected components in this process
(the reference, its import not timed), on the same synthetic graph in the same run; the three
must give the same (docs, root).

The graph looks like a deduplication's: ``--pairs`` pairs over documents numbered up to 4x as
many, most in small clusters (a document and a few near copies, as pairs to the first),
one in fifty cluster a chain of 20-200 documents (pairs along versions of a text), edges in
random order. On the cluster the pairs lie, as a run leaves them, in verified parts of a work
directory (parts of ``--pairs-per-part`` pairs, written before the clock starts), which the
tasks read. Reported per route: seconds, and peak resident memory of the process that runs the
job (for Dask: the client's, and each worker's at the end, from ``getrusage``).

    python scripts/bench_components.py --pairs 20000000 --pairs-per-part 4000000

``--results bench-results/components.json`` writes the figures into the results file that
docs/performance.md is rendered from (scripts/render_performance.py), replacing those of the
same graph and parts.
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_results import record, this_run


def synthetic_pairs(pairs: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """int64 (p,) a < b: small stars and some chains, in random order, over 4x the documents."""
    rng = np.random.default_rng(seed)
    firsts, seconds, made, next_doc = [], [], 0, 0
    documents = rng.permutation(4 * pairs + 1000)
    while made < pairs:
        if rng.random() < 0.02:
            size = int(rng.integers(20, 201))
            nodes = documents[next_doc:next_doc + size]
            firsts.append(nodes[:-1]), seconds.append(nodes[1:])
        else:
            size = int(rng.integers(2, 6))
            nodes = documents[next_doc:next_doc + size]
            firsts.append(np.repeat(nodes[0], size - 1)), seconds.append(nodes[1:])
        next_doc += size
        made += size - 1
    a, b = np.concatenate(firsts)[:pairs], np.concatenate(seconds)[:pairs]
    order = rng.permutation(a.shape[0])
    return np.minimum(a, b)[order].astype(np.int64), np.maximum(a, b)[order].astype(np.int64)


def scipy_component_roots(first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The reference: component_roots' (docs, root) by SciPy's connected components over the
    pairs' documents, renumbered by the same sort."""
    import scipy.sparse
    from scipy.sparse.csgraph import connected_components

    docs, ends = np.unique(np.concatenate([first, second]), return_inverse=True)
    graph = scipy.sparse.coo_matrix((np.ones(first.shape[0], np.int8), (ends[:first.shape[0]], ends[first.shape[0]:])),
                                    shape=(docs.shape[0], docs.shape[0]))
    count, label = connected_components(graph, directed=False)
    smallest = np.full(count, docs.shape[0], np.int64)
    np.minimum.at(smallest, label, np.arange(docs.shape[0], dtype=np.int64))
    return docs, docs[smallest[label]]


def written_parts(work: str, first: np.ndarray, second: np.ndarray, per_part: int):
    """The pairs written as verified parts of ``per_part`` pairs (the last of fewer) in the work
    directory at ``work``, as a run's verification tasks leave them (pairparts.PairParts)."""
    from gpudedup.pipeline.pairparts import VERIFIED, PairParts, write_part

    starts = range(0, first.shape[0], per_part)
    for number, start in enumerate(starts):
        mine = slice(start, start + per_part)
        write_part(work, VERIFIED, number, {"first": first[mine], "second": second[mine],
                                            "jaccard": np.ones(first[mine].shape[0])})
    return PairParts.of(work, VERIFIED, np.array([min(per_part, first.shape[0] - start) for start in starts], np.int64))


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=20_000_000)
    parser.add_argument("--pairs-per-part", type=int, default=None, help="default: the engine's")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the figures here too")
    parser.add_argument("--results", type=Path, help="write the figures into this results file (bench-results/)")
    args = parser.parse_args()

    import distributed

    from gpudedup.core.cluster import component_roots
    from gpudedup.pipeline.components import PAIRS_PER_PART, dask_component_labels

    per_part = args.pairs_per_part or PAIRS_PER_PART
    # The cluster first, so that its workers do not start from this process's memory.
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=logging.ERROR) as cluster, distributed.Client(cluster) as client, \
            tempfile.TemporaryDirectory() as work:
        first, second = synthetic_pairs(args.pairs, args.seed)
        figures: dict = {"pairs": int(first.shape[0]), "pairs_per_part": per_part,
                         "rss_after_graph_mb": round(peak_mb())}
        parts = written_parts(work, first, second, per_part)
        start = time.perf_counter()
        labels = dask_component_labels(client, parts, per_part).compute()  # (document a, root b)
        order = np.argsort(labels["a"].to_numpy(np.int64), kind="stable")
        spread = labels["a"].to_numpy(np.int64)[order], labels["b"].to_numpy(np.int64)[order]
        figures["dask_seconds"] = round(time.perf_counter() - start, 2)
        figures["dask_client_peak_mb"] = round(peak_mb())
        workers = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        figures["dask_worker_peaks_mb"] = sorted(round(value) for value in workers.values())

    start = time.perf_counter()
    local = component_roots(first, second)
    figures["in_process_seconds"] = round(time.perf_counter() - start, 2)
    figures["in_process_peak_mb"] = round(peak_mb())
    figures["documents_in_clusters"] = int(local[0].shape[0])
    import scipy.sparse.csgraph  # noqa: F401  (its import is not the reference's time)

    start = time.perf_counter()
    reference = scipy_component_roots(first, second)
    figures["scipy_seconds"] = round(time.perf_counter() - start, 2)
    figures["same"] = bool(all(np.array_equal(local[i], spread[i]) and np.array_equal(local[i], reference[i])
                               for i in (0, 1)))
    print(json.dumps(figures, indent=1))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(figures, handle, indent=1)
    if args.results:
        record(args.results, "bench_components", [{**figures, "seed": args.seed}],
               key=("pairs", "pairs_per_part", "seed"), run=this_run("scipy", "dask", "distributed"))
    if not figures["same"]:
        raise SystemExit("the routes disagree")


if __name__ == "__main__":
    main()
