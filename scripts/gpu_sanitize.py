"""Drive the GPU backend's three kernels once on small real inputs, for compute-sanitizer.

    compute-sanitizer --tool memcheck --error-exitcode 3 python3 scripts/gpu_sanitize.py
    compute-sanitizer --tool racecheck --error-exitcode 3 python3 scripts/gpu_sanitize.py

(scripts/gpu_session.sh sanitize runs both and finds compute-sanitizer.) The inputs: the first
--docs documents of the shipped sample corpus (gpudedup/data/bible_sample.jsonl.gz), near copies
of some, and edge cases -- empty and blank documents, a single word, a text shorter than a
shingle, and one long document (many sample texts joined: longer than a block, a shared-memory
tile and a minhash work item). For word and char 5-grams, in two batch scopes on two threads
(two streams, as the pipeline runs them), each batch goes through ``shingle_hashes``
(kernels/shingle_hash.cu), ``signatures`` for every K in --num-perm (kernels/minhash.cu: each
K picks its own launch tunables), ``band_keys`` (kernels/band_keys.cu) and ``shingle_sets``.
Every output is compared with the numpy backend's, exactly; the script prints one line per
comparison and exits 1 if any differs.

CuPy's memory pools are switched off (cupy.cuda.set_allocator(None) and the pinned pool
likewise), so that every array is an allocation of its own: memcheck reports an access past an
array's end only at an allocation's edge, and inside a pool's block it would see none.

``--host-dry-run`` runs the same code on the host (the kernels compiled by g++, cupy_like
arrays and the stand-in runtime of tests/kernel_host): it checks the script, and no sanitizer
is involved.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import threading
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run from a checkout without an install
    sys.path.insert(0, str(REPO))

from gpudedup.backends.numpy_backend import NumpyBackend  # noqa: E402
from gpudedup.core.hashing import draw_permutations  # noqa: E402
from gpudedup.core.lsh import Banding  # noqa: E402
from gpudedup.core.normalize import text_buffers  # noqa: E402
from gpudedup.core.shingling import ShingleSpec  # noqa: E402

SAMPLE = REPO / "gpudedup" / "data" / "bible_sample.jsonl.gz"
SPECS = (ShingleSpec("word", 5), ShingleSpec("char", 5))


def sample_texts(count: int) -> list[str]:
    """The first ``count`` texts of the shipped sample corpus, near copies of a few, the edge
    cases, and one long document."""
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as lines:
        texts = [json.loads(line)["text"] for line, _ in zip(lines, range(count))]
    near = [text.replace("the", "teh", 1) for text in texts[:10]]
    edge = ["", "   ", "word", "two words", "\u00c9T\u00c9 \u4e2d\u6587 \U0001f600"]
    return texts + near + edge + [" ".join(texts * 3)]


def gpu_backend():
    """(the GPU backend, a label): CuPy with its memory pools off, so that memcheck sees every
    array's edges."""
    import cupy

    from gpudedup.backends import get_backend

    cupy.cuda.set_allocator(None)
    cupy.cuda.set_pinned_memory_allocator(None)
    backend = get_backend("gpu")
    return backend, backend.description


def host_backend():
    """(the GPU backend's code on the host, a label): host kernels, cupy_like, stand-in runtime."""
    sys.path.insert(0, str(REPO / "tests"))
    from kernel_host.host_backend import host_gpu_backend

    backend = host_gpu_backend()
    return backend, f"{backend.description} (HOST DRY RUN: no sanitizer, not a GPU run)"


def check_batch(backend, name: str, texts: list[str], spec: ShingleSpec, num_perms: list[int], report: list) -> None:
    """One batch through every kernel in a batch scope, each output against numpy's."""
    reference = NumpyBackend()
    data, offsets = text_buffers(texts)
    expected_shingles = reference.shingle_hashes(data, offsets, spec)
    with backend.batch_scope():
        shingles = backend.shingle_hashes(data, offsets, spec)
        outputs = {"shingle_hash.cu offsets": (shingles.offsets, expected_shingles.offsets),
                   "shingle_hash.cu hashes": (shingles.hashes, expected_shingles.hashes)}
        for num_perm in num_perms:
            permutations = draw_permutations(num_perm, seed=num_perm)
            signatures = backend.signatures(shingles, permutations)
            expected = reference.signatures(expected_shingles, permutations)
            outputs[f"minhash.cu K={num_perm}"] = (signatures, expected)
            rows = max(1, min(8, num_perm // 4))
            banding = Banding(num_perm // rows, rows, "sanitize")
            outputs[f"band_keys.cu K={num_perm} {banding.bands}x{rows}"] = (
                backend.band_keys(signatures, banding), reference.band_keys(expected, banding))
        sets = backend.shingle_sets(data, offsets, spec)
        expected_sets = reference.shingle_sets(data, offsets, spec)
        outputs["shingle_sets offsets"] = (sets.offsets, expected_sets.offsets)
        outputs["shingle_sets hashes"] = (sets.hashes, expected_sets.hashes)
        for output, (ours, theirs) in outputs.items():
            equal = np.array_equal(backend.to_host(ours), theirs)
            report.append((f"{spec.kind} {spec.n}-grams, {name} ({len(texts)} docs): {output}", equal))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=120, help="documents of the sample corpus to use")
    parser.add_argument("--num-perm", type=int, nargs="+", default=[1, 64, 128, 256, 300],
                        help="signature widths K (each picks its own minhash.cu tunables)")
    parser.add_argument("--host-dry-run", action="store_true",
                        help="run on the host (host kernels, cupy_like): checks the script; no sanitizer")
    args = parser.parse_args(argv)
    backend, label = host_backend() if args.host_dry_run else gpu_backend()
    print(f"backend: {label}", flush=True)
    texts = sample_texts(args.docs)
    halves = [texts[: len(texts) // 2], texts[len(texts) // 2 :]]
    report: list = []
    errors: list = []

    def run(name: str, batch: list[str], spec: ShingleSpec) -> None:
        try:
            check_batch(backend, name, batch, spec, args.num_perm, report)
        except Exception as error:  # a kernel fault must be reported, not lost in a thread
            errors.append(f"{spec.kind} {spec.n}-grams: {type(error).__name__}: {error}")

    for spec in SPECS:
        # Two batches at once on two threads: two batch scopes, two streams, as in the pipeline.
        threads = [threading.Thread(target=run, args=(f"batch {i + 1}", batch, spec)) for i, batch in enumerate(halves)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for name, equal in sorted(report):
        print(f"{'ok       ' if equal else 'DIFFERENT'} {name}", flush=True)
    for error in errors:
        print(f"ERROR     {error}", flush=True)
    different = sum(not equal for _, equal in report)
    print(f"gpu_sanitize: {len(report)} comparisons with the numpy backend, {different} different, "
          f"{len(errors)} errors", flush=True)
    return 1 if different or errors or not report else 0


if __name__ == "__main__":
    sys.exit(main())
