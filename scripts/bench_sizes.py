"""Runs at every size: the whole process of gpudedup, rensa's and datasketch's pipelines, on
inputs from one document to 100 MB of real text, in the same run; and an ``index add``.

Every run is a process of its own, started afresh and timed from outside, from its start to its
exit (the interpreter, the imports, reading the file, everything until the process ends); each
figure is the best of --repeat runs (a run that takes over --long seconds is not repeated: its
noise is small next to it). The tools take turns within each repetition, so a change in the
machine's load falls on all of them.

- gpudedup: the command a user types, ``python -m gpudedup dedup INPUT -o OUT --overwrite
  --id-field id --shingle KIND --ngram 5 --threshold 0.8``: its outputs written, report.html and
  its figures included.
- rensa, datasketch: ``scripts/bench_cpu.py``'s pipelines (``run_rensa``, ``run_datasketch``)
  in a process that imports bench_cpu and runs one: the file read with pyarrow, canonical
  shingling in plain Python, each library's MinHash and LSH index (query, then insert), up to
  their candidate pairs: no verification, nothing written.
- index add: ``python -m gpudedup index add INDEX ADD.jsonl -o OUT --id-field id``, 10,000
  documents into an index of 50,000 (word 5-grams, threshold 0.8), on a fresh copy of the
  index for every run (the copy is not timed). The documents are scripts/bench_index.py's
  shuffle of the benchmark corpus (``make_plan``, --seed): its first 50,000 rows are indexed
  (``index create``, then ``index add``, untimed), the next 10,000 are added; then the first
  SMALL_ADD of them alone, and ``python -m gpudedup index query INDEX QUERY.jsonl`` of the first
  one alone: what a small increment or a lookup costs in a fresh process.

The inputs (JSONL, the corpus's own lines, written once under --data-dir):
- one document: the first record of the shipped sample (gpudedup/data/bible_sample.jsonl.gz);
- 1 MB: from the shipped sample, the first part of each translation's chapters;
- 10 MB, 100 MB: from the benchmark corpus (scripts/build_bench_corpus.py), the first part of
  each of its groups: the licence texts, the rules, and each translation's chapters in each of
  the two Bible renderings.
"The first part" is one fraction for every group, found so that the texts add up to the size
(MB = 10^6 bytes of UTF-8 text, within 0.5 %): a cut keeps each group's near-duplicates
(chapters across translations and renderings, rules of one licence) as the whole corpus has
them, at a smaller scale.

Before any timed run, one run of each tool on the 1 MB input for each shingle kind (not timed,
gpudedup's on its kernels whatever the size) fills the caches a second run finds: numba's cache
of gpudedup's kernels, and the bytecode of every module. The
processes run with Python's bytecode cache on (PYTHONPYCACHEPREFIX under --data-dir), as an
installed package has it, whatever PYTHONDONTWRITEBYTECODE says here.

    python scripts/build_bench_corpus.py --install bench_data/bench.jsonl
    python scripts/bench_sizes.py bench_data/bench.jsonl --results bench-results/sizes.json

``--gpudedup-python VENV/bin/python`` runs gpudedup with another interpreter: a venv made with
``pip install .`` alone has gpudedup's dependencies and nothing else, as a user's install has
(the development extras bring pandas, which pyarrow imports on its first conversion wherever it
is installed). The runs still start in the checkout, so they run its code.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

import numpy as np
from bench_results import REPOSITORY, corpus_path, record, this_run

SIZES = (("one document", None), ("1 MB", 1e6), ("10 MB", 10e6), ("100 MB", 100e6))
SHINGLES = ("word", "char")
TOOLS = ("gpudedup", "rensa", "datasketch")
INDEXED, ADDED, SMALL_ADD = 50_000, 10_000, 100
SAMPLE = "data/bible_sample.jsonl.gz"


# --- the inputs -----------------------------------------------------------------------------------


def corpus_lines(path: Path) -> tuple[list[bytes], list[str], np.ndarray]:
    """(lines, each line's group, each line's UTF-8 text bytes) of a JSONL corpus with id and
    text fields (gzip where the name says so). A line's group: the sample's translation (the id's
    first word), or the benchmark corpus's source with, for the Bible sources, the translation."""
    import gzip

    opened = gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")
    with opened as stream:
        lines = [line if line.endswith(b"\n") else line + b"\n" for line in stream if line.strip()]
    groups, sizes = [], np.empty(len(lines), np.int64)
    for row, line in enumerate(lines):
        record_ = json.loads(line)
        doc_id, source = str(record_["id"]), record_.get("source")
        if source is None:  # the shipped sample: "AKJV Ruth 1"
            groups.append(doc_id.split(" ", 1)[0])
        elif source.startswith("bible"):  # "bible/KJV Genesis 1"
            groups.append(f"{source}/{doc_id.split('/', 1)[1].split(' ', 1)[0]}")
        else:
            groups.append(source)
        sizes[row] = len((record_.get("text") or "").encode("utf-8"))
    return lines, groups, sizes


def first_part(groups: list[str], sizes: np.ndarray, target: float) -> np.ndarray:
    """bool (n,): the rows of the first fraction f of every group (in the corpus's order), f found
    by bisection so that their text bytes come within 0.5 % of ``target``."""
    names = sorted(set(groups))
    members = {name: [] for name in names}
    for row, name in enumerate(groups):
        members[name].append(row)
    if target >= sizes.sum():
        return np.ones(len(groups), bool)

    def chosen(fraction: float) -> np.ndarray:
        keep = np.zeros(len(groups), bool)
        for rows in members.values():
            keep[rows[: math.ceil(fraction * len(rows))]] = True
        return keep

    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        if sizes[chosen(middle)].sum() < target:
            low = middle
        else:
            high = middle
    keep = chosen(high)
    if abs(sizes[keep].sum() - target) > 0.005 * target:
        raise SystemExit(f"no cut of the corpus comes within 0.5 % of {target / 1e6:g} MB")
    return keep


def write_lines(path: Path, lines: list[bytes]) -> Path:
    if not path.exists():
        partial = path.with_suffix(".partial")
        partial.write_bytes(b"".join(lines))
        partial.replace(path)
    return path


def make_inputs(corpus: Path, folder: Path, sizes_wanted: list[str]) -> dict[str, dict]:
    """{size name: {"path", "documents", "text_mb", "source"}} for the inputs of SIZES."""
    folder.mkdir(parents=True, exist_ok=True)
    inputs = {}
    with resources.as_file(resources.files("gpudedup").joinpath(SAMPLE)) as sample_path:
        sample = corpus_lines(Path(sample_path))
    bench = corpus_lines(corpus) if any(size in ("10 MB", "100 MB") for size in sizes_wanted) else None
    for name, target in SIZES:
        if name not in sizes_wanted:
            continue
        lines, groups, text_bytes = sample if target is None or target <= 1e6 else bench
        keep = np.zeros(len(lines), bool)
        if target is None:
            keep[0] = True
        else:
            keep = first_part(groups, text_bytes, target)
        chosen = [line for line, kept in zip(lines, keep) if kept]
        path = write_lines(folder / f"{name.replace(' ', '-')}.jsonl", chosen)
        inputs[name] = {"path": path, "documents": len(chosen), "text_mb": float(text_bytes[keep].sum()) / 1e6,
                        "source": f"gpudedup/{SAMPLE}" if target is None or target <= 1e6 else corpus_path(corpus)}
    return inputs


def index_inputs(corpus: Path, folder: Path, seed: int) -> tuple[Path, Path]:
    """(the 50,000 indexed rows, the 10,000 added rows) as JSONL files: bench_index's shuffle."""
    from bench_index import make_plan

    lines, _, _ = corpus_lines(corpus)
    plan = make_plan(len(lines), INDEXED / len(lines), 1, 0, seed)
    indexed, added = plan.steps[0], plan.steps[1][:ADDED]
    return (write_lines(folder / f"index-base-{seed}.jsonl", [lines[row] for row in indexed]),
            write_lines(folder / f"index-add-{seed}.jsonl", [lines[row] for row in added]))


# --- the runs -------------------------------------------------------------------------------------


def environment(folder: Path) -> dict[str, str]:
    """The children's environment: bytecode cached under ``folder``, as an installed package's is."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
    return env


def timed(command: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one process, from its start to its exit; its output is shown on failure."""
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPOSITORY)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return seconds


def tool_command(tool: str, path: Path, shingle: str, out: Path, args) -> list[str]:
    if tool == "gpudedup":
        return [args.gpudedup_python, "-m", "gpudedup", "dedup", str(path), "-o", str(out), "--overwrite", "--id-field",
                "id", "--shingle", shingle, "--ngram", str(args.ngram), "--threshold", str(args.threshold)]
    return [sys.executable, __file__, "--child", tool, str(path), "--shingle", shingle, "--ngram", str(args.ngram),
            "--threshold", str(args.threshold), "--bands", str(args.bands), "--rows", str(args.rows)]


def interpreter_said(python: str) -> str:
    """What the run's conditions say of the interpreter that runs gpudedup: this one, or another
    (a venv of gpudedup alone), and whether pandas is installed there (pyarrow imports it on its
    first conversion where it is: gpudedup then imports it at start, about 0.3 s here)."""
    found = subprocess.run([python, "-c", "import importlib.util as u; print(u.find_spec('pandas') is not None)"],
                           capture_output=True, text=True, check=True).stdout.strip() == "True"
    where = "this interpreter" if python == sys.executable else python
    return f"gpudedup run by {where} ({'with' if found else 'without'} pandas installed)"


def run_child(args) -> None:
    """A reference pipeline, as scripts/bench_cpu.py runs it (its function, its arguments)."""
    import bench_cpu

    settings = argparse.Namespace(shingle=args.shingle, ngram=args.ngram, threshold=args.threshold,
                                  num_perm=args.num_perm, seed=args.seed, bands=args.bands, rows=args.rows)
    {"rensa": bench_cpu.run_rensa, "datasketch": bench_cpu.run_datasketch}[args.child](args.corpus, settings)


def best_of(commands: dict[str, list[str]], env: dict[str, str], repeat: int, long: float,
            prepare=None) -> dict[str, dict]:
    """{tool: {"seconds": best, "runs": count}}: each command run up to ``repeat`` times, taking
    turns; a command whose run took over ``long`` seconds is not run again."""
    times: dict[str, list[float]] = {tool: [] for tool in commands}
    for _ in range(repeat):
        for tool, command in commands.items():
            if times[tool] and max(times[tool]) > long:
                continue
            if prepare is not None:
                prepare()
            times[tool].append(timed(command, env))
    return {tool: {"seconds": min(found), "runs": len(found)} for tool, found in times.items()}


def index_runs(base: Path, added: Path, folder: Path, env: dict[str, str], args) -> list[dict]:
    """The best wall times of ``gpudedup index add`` of ``added`` to an index of ``base``, of
    its first SMALL_ADD lines, and of ``index query`` of its first line: rows of the results."""
    work = Path(tempfile.mkdtemp(dir=folder))
    try:
        index, copy = work / "index", work / "copy"
        gpudedup = [args.gpudedup_python, "-m", "gpudedup"]
        timed(gpudedup + ["index", "create", str(index), "--threshold", str(args.threshold), "--shingle", "word",
                          "--ngram", str(args.ngram)], env)
        timed(gpudedup + ["index", "add", str(index), str(base), "-o", str(work / "base-out"), "--id-field", "id"],
              env)
        indexed = json.loads(subprocess.run(gpudedup + ["index", "info", str(index)], capture_output=True, text=True,
                                            env=env, check=True).stdout)["documents"]
        lines = added.read_text(encoding="utf-8").splitlines(keepends=True)
        small, query = work / "small.jsonl", work / "query.jsonl"
        small.write_text("".join(lines[:SMALL_ADD]), encoding="utf-8")
        query.write_text(lines[0], encoding="utf-8")

        def fresh_copy() -> None:
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(index, copy)

        rows = []
        for name, given, documents in (("index add", added, ADDED), ("index add", small, SMALL_ADD),
                                       ("index query", query, 1)):
            command = gpudedup + (["index", "add", str(copy), str(given), "-o", str(work / "out"), "--overwrite",
                                   "--id-field", "id"] if name == "index add" else
                                  ["index", "query", str(index), str(given)])
            prepare = fresh_copy if name == "index add" else None
            fresh_copy()
            timed(command, env)  # (the caches, as for the other runs)
            best = best_of({"gpudedup": command}, env, args.repeat, args.long, prepare=prepare)["gpudedup"]
            rows.append({"input": name, "source": corpus_path(args.corpus), "documents": documents,
                         "indexed_documents": indexed, "shingle": "word", "ngram": args.ngram,
                         "threshold": args.threshold, "tools": {"gpudedup": best}})
        return rows
    finally:
        shutil.rmtree(work, ignore_errors=True)


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f} (1 min), {five:.2f} (5 min)"


# --- the driver -----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path, help="the benchmark corpus (JSONL with id, source and text fields)")
    parser.add_argument("--threshold", type=float, default=0.8)
    parser.add_argument("--ngram", type=int, default=5)
    parser.add_argument("--num-perm", type=int, default=128)
    parser.add_argument("--seed", type=int, default=42, help="rensa's MinHash; the index add's shuffle")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each process; the best is kept")
    parser.add_argument("--long", type=float, default=30.0, help="seconds beyond which a run is not repeated")
    parser.add_argument("--sizes", nargs="*", default=[name for name, _ in SIZES], choices=[n for n, _ in SIZES])
    parser.add_argument("--shingles", nargs="*", default=list(SHINGLES), choices=SHINGLES)
    parser.add_argument("--skip", nargs="*", default=[], choices=TOOLS + ("index",), help="what to leave out")
    parser.add_argument("--data-dir", type=Path, default=REPOSITORY / "bench_data" / "sizes",
                        help="where the inputs, the index and the bytecode cache go")
    parser.add_argument("--results", type=Path, help="write the figures into this results file (bench-results/)")
    parser.add_argument("--note", default="", help="words added to the run's conditions (what else ran, ...)")
    parser.add_argument("--gpudedup-python", default=sys.executable,
                        help="the interpreter that runs gpudedup (default: this one), e.g. a venv's made with "
                             "`pip install .` alone, as a user installs it")
    parser.add_argument("--child", choices=("rensa", "datasketch"), help=argparse.SUPPRESS)
    parser.add_argument("--shingle", choices=SHINGLES, help=argparse.SUPPRESS)
    parser.add_argument("--bands", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_child(args)
        return

    from gpudedup.params import DedupParams

    banding = DedupParams(threshold=args.threshold, num_perm=args.num_perm).banding()
    args.bands, args.rows = banding.bands, banding.rows
    folder = args.data_dir.resolve()
    inputs = make_inputs(args.corpus, folder, args.sizes + ["1 MB"])
    env = environment(folder)
    tools = [tool for tool in TOOLS if tool not in args.skip]
    load_before = load_average()
    out = Path(tempfile.mkdtemp(dir=folder))
    rows: list[dict] = []
    try:
        # The caches, not timed: every module's bytecode, and numba's cache of every kernel
        # (taken at any size for these runs alone).
        for tool in tools:
            for shingle in SHINGLES:
                timed(tool_command(tool, inputs["1 MB"]["path"], shingle, out / "warm", args),
                      {**env, "GPUDEDUP_CPU_KERNELS": "numba"})
        for name, _ in SIZES:
            if name not in args.sizes:
                continue
            given = inputs[name]
            for shingle in args.shingles:
                commands = {tool: tool_command(tool, given["path"], shingle, out / tool, args) for tool in tools}
                best = best_of(commands, env, args.repeat, args.long)
                row = {"input": name, "source": given["source"], "documents": given["documents"],
                       "text_mb": round(given["text_mb"], 3), "shingle": shingle, "ngram": args.ngram,
                       "threshold": args.threshold,
                       "tools": {tool: {"seconds": round(found["seconds"], 3), "runs": found["runs"]}
                                 for tool, found in best.items()}}
                ours = best.get("gpudedup")
                for tool, found in best.items():
                    if ours is not None and tool != "gpudedup":
                        row["tools"][tool]["times_gpudedup"] = round(found["seconds"] / ours["seconds"], 2)
                rows.append(row)
                print(json.dumps(row), flush=True)
        if "index" not in args.skip:
            base, added = index_inputs(args.corpus, folder, args.seed)
            for row in index_runs(base, added, folder, env, args):
                row["tools"]["gpudedup"]["seconds"] = round(row["tools"]["gpudedup"]["seconds"], 3)
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    conditions = (f"every run a fresh process timed from outside, best of up to {args.repeat}; load average "
                  f"{load_before} before the runs, {load_average()} after; {interpreter_said(args.gpudedup_python)}"
                  + (f"; {args.note}" if args.note else ""))
    print(conditions)
    if args.results:
        run = {**this_run("numba", "rensa", "datasketch"), "conditions": conditions}
        record(args.results, "bench_sizes", rows, key=("input", "shingle", "documents"), run=run)


if __name__ == "__main__":
    main()
