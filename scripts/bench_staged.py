"""A run with a work directory (``--work-dir``, no workers) of this checkout against a reference
install of gpudedup, in the same run: the whole process of

    gpudedup dedup CORPUS -o OUT --work-dir WORK --id-field id --backend cpu --shingle S --ngram 5

its wall time and its peak resident memory, the two installs taking turns
so that they share the machine's noise, and whether they wrote the same pairs, clusters and
kept rows (scripts/compare_outputs.py). The reference is another checkout's Python, for
example a virtual environment holding ``pip install -e <checkout>`` of an older commit;
its commit is read from that checkout.

    python -m venv /tmp/venv-ref && /tmp/venv-ref/bin/pip install -e /tmp/ref   # (/tmp/ref: git worktree)
    python scripts/bench_staged.py bench_data/bench.jsonl --reference-python /tmp/venv-ref/bin/python \
        --shingles word char --repeat 3 --results bench-results/staged.json

A process's first run after an install compiles the numba kernels (the report's "compile"
stage): each side runs once, untimed, before the timed runs.
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

from bench_results import corpus_path, record

REPOSITORY = Path(__file__).resolve().parents[1]

# The CLI in this process, then its resident high-water mark (VmHWM: getrusage's ru_maxrss is
# carried across exec, so it would count the benchmark that started the process). The run
# starts a new mark at each stage (stages.py), so this is the mark since its last stage began;
# run_once takes the larger of it and the report's peak, the largest of its stages' marks.
CHILD = r"""
import json, sys
sys.argv = ["gpudedup"] + sys.argv[1:]
from gpudedup.console import main
try:
    main()
except SystemExit as done:
    if done.code:
        raise
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        print(json.dumps({"peak_rss_mb": round(int(line.split()[1]) / 1024, 1)}))
"""


def revision(python: str) -> str:
    """The short commit of the checkout that ``python`` imports gpudedup from."""
    source = subprocess.run([python, "-c", "import gpudedup, os; print(os.path.dirname(gpudedup.__file__))"],
                            capture_output=True, text=True, check=True, cwd=tempfile.gettempdir()).stdout.strip()
    return subprocess.run(["git", "-C", source, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def run_once(python: str, corpus: Path, shingle: str, out: Path) -> dict:
    """One process's run: wall seconds, peak resident memory (MB: CHILD's) and its report's
    documents.
    Run from a temporary directory, so that ``python`` imports its own gpudedup, not this
    checkout's."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    command = [python, "-c", CHILD, "dedup", str(corpus.resolve()), "-o", str(out / "result"), "--work-dir",
               str(out / "work"), "--id-field", "id", "--backend", "cpu", "--shingle", shingle, "--ngram", "5", "-q"]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=tempfile.gettempdir())
    seconds = time.perf_counter() - started
    report = json.loads((out / "result" / "report.json").read_text())
    since_last_stage = json.loads(done.stdout.strip().splitlines()[-1])["peak_rss_mb"]
    return {"seconds": round(seconds, 2), "peak_rss_mb": max(since_last_stage, report["peak_rss_mb"]),
            "documents": report["input"]["documents"]}


def same_outputs(a: Path, b: Path) -> bool:
    """Whether two runs wrote the same pairs, clusters and kept rows."""
    return subprocess.run([sys.executable, str(REPOSITORY / "scripts" / "compare_outputs.py"), str(a), str(b)],
                          capture_output=True, text=True).returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path,
                        help="a corpus with an id field (the benchmark corpus, the Linux sources' shards)")
    parser.add_argument("--reference-python", required=True, help="the Python of the reference install")
    parser.add_argument("--shingles", nargs="+", default=["word"], choices=["word", "char"])
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each install, taking turns")
    parser.add_argument("--results", type=Path, help="write the rows into this results file (bench-results/)")
    args = parser.parse_args()
    sides = {"reference": args.reference_python, "this": sys.executable}
    revisions = {side: revision(python) for side, python in sides.items()}
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for shingle in args.shingles:
            runs: dict[str, list[dict]] = {side: [] for side in sides}
            for side, python in sides.items():  # (the first run after an install compiles the kernels)
                run_once(python, args.corpus, shingle, Path(scratch) / side)
            for _ in range(args.repeat):
                for side, python in sides.items():
                    runs[side].append(run_once(python, args.corpus, shingle, Path(scratch) / side))
            row = {"corpus": corpus_path(args.corpus), "shingle": shingle, "ngram": 5,
                   "documents": runs["this"][0]["documents"], "runs": args.repeat,
                   "identical": same_outputs(Path(scratch) / "reference" / "result", Path(scratch) / "this" / "result"),
                   **{side: {"revision": revisions[side], "seconds": min(r["seconds"] for r in runs[side]),
                             "seconds_each": [r["seconds"] for r in runs[side]],
                             "peak_rss_mb": max(r["peak_rss_mb"] for r in runs[side])} for side in sides}}
            row["times_reference"] = round(row["this"]["seconds"] / row["reference"]["seconds"], 3)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.results is not None:
        record(args.results, "bench_staged", rows, key=("corpus", "shingle"))


if __name__ == "__main__":
    main()
