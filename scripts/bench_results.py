"""The results files of the benchmarks (bench-results/*.json), which docs/performance.md is
rendered from (scripts/render_performance.py).

A results file holds the latest figures of one benchmark:

    {"benchmark": "bench_cpu",
     "runs": [{"commit": "48c78ce", "date": "2026-11-27", "machine": "...", "command": "python scripts/...",
               "versions": {...}, "conditions": "..."}],
     "rows": [{"run": 0, ...figures...}, ...]}

Each row is one measured configuration (a corpus, a mode, a scale, a tool), its figures in the
units the page shows, and ``run`` the index of the run that measured it in ``runs``. A run
records where its figures come from: the commit of the code (``-dirty`` when tracked files
outside bench-results/ differed from it: results written by an earlier benchmark of the same
session are not code), the UTC date, the machine, the command line, and optionally the versions of
the libraries compared and the conditions (what else ran beside it).

A benchmark's ``--results FILE`` writes its run's rows into FILE with :func:`record`: a row
replaces the file's row of the same configuration (its ``key`` fields), rows of configurations
the run did not measure stay with their own run, and runs no row refers to any more are dropped.
So the file always holds the latest figures of every configuration measured, each with the run
that measured it.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

REPOSITORY = Path(__file__).resolve().parents[1]


def git_commit() -> str:
    """The short hash of the checkout's HEAD, ``-dirty`` when tracked files but the results
    files (bench-results/) differ from it."""
    try:
        head = subprocess.run(["git", "-C", str(REPOSITORY), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        changed = subprocess.run(["git", "-C", str(REPOSITORY), "status", "--porcelain", "--untracked-files=no",
                                  "--", ".", ":(exclude)bench-results"],
                                 capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}-dirty" if changed else head


def machine() -> str:
    """The processor, its cores and the memory of this machine, in words."""
    processor = platform.processor() or platform.machine()
    memory = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                processor = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = f", {int(line.split()[1]) / 2**20:.0f} GB"
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {processor}{memory}, {platform.system()}"


def command_line(argv: Optional[Sequence[str]] = None) -> str:
    """The command that runs this benchmark, as typed from the repository's root."""
    argv = list(sys.argv if argv is None else argv)
    script = Path(argv[0]).resolve()
    try:
        argv[0] = str(script.relative_to(REPOSITORY))
    except ValueError:
        pass
    return "python " + shlex.join(argv)


def versions(*names: str) -> dict[str, str]:
    """Python's version and those of the named distributions that are installed."""
    found = {"python": platform.python_version()}
    for name in names:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def this_run(*packages: str) -> dict[str, Any]:
    """The provenance of the running benchmark: commit, date, machine, command, versions."""
    return {"commit": git_commit(), "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
            "machine": machine(), "command": command_line(), "versions": versions("numpy", "pyarrow", *packages)}


def record(path: Path, benchmark: str, rows: Iterable[dict], key: Sequence[str],
           run: Optional[dict] = None) -> dict:
    """Write ``rows``, measured by ``run`` (default: :func:`this_run`), into the results file
    ``path``, replacing its rows of the same ``key`` fields; returns what was written."""
    run = this_run() if run is None else run
    new = [dict(row) for row in rows]
    keys = {tuple(row.get(field) for field in key) for row in new}
    old: dict[str, Any] = {"benchmark": benchmark, "runs": [], "rows": []}
    if path.exists():
        old = json.loads(path.read_text(encoding="utf-8"))
        if old.get("benchmark") != benchmark:
            raise SystemExit(f"{path} holds the results of {old.get('benchmark')!r}, not of {benchmark!r}")
    kept = [row for row in old["rows"] if tuple(row.get(field) for field in key) not in keys]
    runs: list[dict] = []
    for row in kept:  # the kept rows' runs, renumbered in their order
        if old["runs"][row["run"]] not in runs:
            runs.append(old["runs"][row["run"]])
        row["run"] = runs.index(old["runs"][row["run"]])
    if new:
        runs.append(run)
    written = {"benchmark": benchmark, "runs": runs,
               "rows": kept + [{"run": len(runs) - 1, **{k: v for k, v in row.items() if k != "run"}} for row in new]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(written, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"results in {path}")
    return written


def corpus_path(path: Path | str) -> str:
    """A corpus's path as the commands give it: relative to the repository's root when inside it."""
    resolved = Path(path).resolve()
    try:
        return str(resolved.relative_to(REPOSITORY))
    except ValueError:
        return str(path)
