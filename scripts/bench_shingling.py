"""Shingling on the CPU: the numpy reference against a build of the compiled loops (``--build``:
the C extension built at install, or numba's), per MB of text.

On the first ``--mb`` MB of a JSONL corpus (field ``text``), cut into batches of
``--batch-bytes`` as the engine cuts them, this times for each shingle spec:
- ``shingle_hashes``: shingling.utf8_shingle_hashes (numpy) against CompiledSteps.shingle_hashes;
- ``shingle_sets``: shingling.unique_per_row of the former (numpy and scipy) against
  CompiledSteps.shingle_sets;
each the best of ``--repeat`` passes over all batches, after a warm-up pass, on ``--threads``
threads (1: the figure per core). Every output of the kernels is compared with the numpy one
in the same run (offsets and hashes, exactly); a difference exits 1. The build's import and
first call (for numba: a compile, or a load of its on-disk cache) are timed apart;
``--fresh-cache`` points numba at an empty cache directory, so that the figure is a real compile.

    python scripts/bench_shingling.py bench_data/bench.jsonl --mb 19 --specs word:5,char:5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import numpy as np


def read_texts(path: Path, megabytes: float) -> list[str]:
    """The texts of the corpus's first lines, up to ``megabytes`` MB of UTF-8 text."""
    budget, texts, total = int(megabytes * 1e6), [], 0
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            text = json.loads(line).get("text") or ""
            texts.append(text)
            total += len(text.encode("utf-8"))
            if total >= budget:
                break
    return texts


def parse_specs(text: str):
    """"word:5,char:5" -> ShingleSpecs (a third field, nfc or nfkc, asks for a Unicode form)."""
    from gpudedup.core.shingling import ShingleSpec

    specs = []
    for item in text.split(","):
        kind, n, *form = item.split(":")
        specs.append(ShingleSpec(kind, int(n), unicode=form[0] if form else None))  # type: ignore[arg-type]
    return specs


def timed_pass(function: Callable, batches: list, threads: int) -> tuple[float, list]:
    """Seconds of one pass of ``function`` over every batch (on ``threads`` threads) and the results."""
    started = time.perf_counter()
    if threads == 1:
        results = [function(*batch) for batch in batches]
    else:
        with ThreadPoolExecutor(threads) as pool:
            results = list(pool.map(lambda batch: function(*batch), batches))
    return time.perf_counter() - started, results


def same(ours, reference) -> bool:
    return all(np.array_equal(a.offsets, b.offsets) and np.array_equal(a.hashes, b.hashes)
               for a, b in zip(ours, reference, strict=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path, help="JSONL with a 'text' field")
    parser.add_argument("--mb", type=float, default=19.0, help="MB of text from the start of the corpus")
    parser.add_argument("--specs", default="word:5,char:5", help="kind:n[:form],... (default word:5,char:5)")
    parser.add_argument("--batch-bytes", type=int, default=None, help="bytes per batch (default: the engine's)")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes; the best counts")
    parser.add_argument("--threads", type=int, default=1, help="batches at once (1: per core)")
    parser.add_argument("--build", choices=("c", "numba"), default="c", help="the loops' build (default c)")
    parser.add_argument("--fresh-cache", action="store_true", help="compile into an empty numba cache")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()

    if args.fresh_cache:
        os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="numba-cache-")  # before numba loads
    from gpudedup.core.normalize import text_buffers
    from gpudedup.params import DEFAULT_BATCH_BYTES
    from gpudedup.core.ragged import weighted_ranges
    from gpudedup.core.shingling import unique_per_row, utf8_shingle_hashes

    texts = read_texts(args.corpus, args.mb)
    data, offsets = text_buffers(texts)
    megabytes = data.shape[0] / 1e6
    batch_bytes = args.batch_bytes or DEFAULT_BATCH_BYTES
    batches = [(data[offsets[a]:offsets[b]], offsets[a:b + 1] - offsets[a])
               for a, b in weighted_ranges(np.diff(offsets), batch_bytes)]
    print(f"{args.corpus}: {len(texts):,} documents, {megabytes:.1f} MB of UTF-8 in {len(batches)} batches "
          f"of {batch_bytes / 2**20:g} MiB; {args.threads} thread(s); {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores")

    started = time.perf_counter()
    from gpudedup.backends.numpy_backend import extension_steps, numba_steps

    os.environ["GPUDEDUP_CPU_KERNELS"] = args.build
    compiled = extension_steps() if args.build == "c" else numba_steps()
    assert compiled is not None, f"the {args.build} build of the loops is not available"
    imported = time.perf_counter() - started
    specs = parse_specs(args.specs)
    started = time.perf_counter()
    for spec in specs:  # one tiny batch per spec: each kernel's first call compiles it
        tiny = batches[0][0][:1000], np.array([0, min(1000, batches[0][0].shape[0])], np.int64)
        compiled.shingle_sets(*tiny, spec)
    first_call = time.perf_counter() - started
    print(f"{compiled.name}: import {imported:.2f} s; first calls (for numba: compile or cache load) "
          f"{first_call:.2f} s{' (fresh cache: compiled)' if args.fresh_cache else ''}")

    figures = []
    print(f"{'spec':<12}{'step':<16}{'numpy s':>9}{'kernels s':>11}{'numpy MB/s':>12}{'kernels MB/s':>14}"
          f"{'speed-up':>10}  same")
    all_same = True
    for spec in specs:
        steps: dict[str, tuple[Callable, Callable]] = {
            "shingle_hashes": (lambda d, o, s=spec: utf8_shingle_hashes(d, o, s),
                               lambda d, o, s=spec: compiled.shingle_hashes(d, o, s)),
            "shingle_sets": (lambda d, o, s=spec: unique_per_row(utf8_shingle_hashes(d, o, s)),
                             lambda d, o, s=spec: compiled.shingle_sets(d, o, s)),
        }
        for step, (reference, kernels) in steps.items():
            seconds = {}
            for name, function in (("numpy", reference), ("kernels", kernels)):
                timed_pass(function, batches, args.threads)  # warm-up: caches, tables, pages
                runs = [timed_pass(function, batches, args.threads) for _ in range(args.repeat)]
                seconds[name] = min(run[0] for run in runs)
                if name == "numpy":
                    expected = runs[0][1]
                else:
                    agree = same(runs[0][1], expected)
            all_same &= agree
            label = f"{spec.kind}:{spec.n}" + (f":{spec.unicode}" if spec.unicode else "")
            print(f"{label:<12}{step:<16}{seconds['numpy']:>9.3f}{seconds['kernels']:>11.3f}"
                  f"{megabytes / seconds['numpy']:>12.1f}{megabytes / seconds['kernels']:>14.1f}"
                  f"{seconds['numpy'] / seconds['kernels']:>9.1f}x  {'yes' if agree else 'NO'}")
            figures.append({"spec": label, "step": step, "megabytes": megabytes, "numpy_s": seconds["numpy"],
                            "kernels_s": seconds["kernels"], "same": agree})
    if args.json:
        args.json.write_text(json.dumps({"corpus": str(args.corpus), "threads": args.threads,
                                         "build": compiled.name, "first_call_s": first_call,
                                         "figures": figures}, indent=1))
    if not all_same:
        print("the kernels and the numpy reference DIFFER", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
