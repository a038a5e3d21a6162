"""Device memory of one batch on the GPU backend: the live peak and the pool's footprint.

    python scripts/gpu_memory.py [CORPUS.parquet] [--batch-mib 64]

For the first 600 documents of the shipped sample corpus and, when a Parquet corpus with a
``text`` column is given, its first --batch-mib MiB of text, and for char and word 5-grams:
one batch through ``shingle_hashes``, ``signatures`` (K = 128) and ``band_keys``, after a warm-up
batch (the tables and permutations stay). Prints, per byte of UTF-8 text, the live peak (a CuPy
memory hook adds every allocation and subtracts every free of the pool) and the growth of the
pool's footprint (``MemoryPool.total_bytes``, what ``nvidia-smi`` sees), then the largest arrays
live at the peak with the lines that made them. Needs a CUDA GPU and CuPy. docs/gpu.md's "GPU
memory" paragraph reads from its output.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import traceback
from importlib import resources

import cupy

from gpudedup.backends import get_backend
from gpudedup.core.hashing import draw_permutations
from gpudedup.core.lsh import Banding
from gpudedup.core.normalize import text_buffers
from gpudedup.core.shingling import ShingleSpec


class LivePeak(cupy.cuda.MemoryHook):
    """Live bytes of the pool's allocations, their peak, and the largest arrays at the peak."""

    name = "live_peak"

    def __init__(self) -> None:
        self.live: dict[int, tuple[int, str]] = {}
        self.now = self.peak = 0
        self.at_peak: list[tuple[int, str]] = []

    def malloc_postprocess(self, **allocation) -> None:
        frames = [f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno} {frame.name}"
                  for frame in traceback.extract_stack()[:-2] if "gpudedup" in frame.filename]
        self.live[allocation["mem_ptr"]] = (allocation["mem_size"], " < ".join(reversed(frames[-3:])))
        self.now += allocation["mem_size"]
        if self.now > self.peak:
            self.peak = self.now
            self.at_peak = sorted(self.live.values(), reverse=True)[:10]

    def free_postprocess(self, **allocation) -> None:
        self.now -= self.live.pop(allocation["mem_ptr"], (0, ""))[0]


def sample_texts(count: int) -> list[str]:
    path = resources.files("gpudedup").joinpath("data/bible_sample.jsonl.gz")
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [json.loads(line)["text"] for line in lines][:count]


def parquet_texts(path: str, limit_bytes: int) -> list[str]:
    import pyarrow.parquet as pq

    texts, total = [], 0
    for text in pq.read_table(path, columns=["text"]).column("text").to_pylist():
        texts.append(text)
        total += len(text.encode())
        if total >= limit_bytes:
            break
    return texts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="?", help="a Parquet file with a text column")
    parser.add_argument("--batch-mib", type=int, default=64)
    args = parser.parse_args(argv)
    gpu = get_backend("gpu")
    pool = cupy.get_default_memory_pool()
    inputs = {"sample, 600 documents": sample_texts(600)}
    if args.corpus:
        inputs[f"{args.corpus}, first {args.batch_mib} MiB"] = parquet_texts(args.corpus, args.batch_mib << 20)
    permutations, banding = draw_permutations(128, seed=0), Banding(9, 13, "probe")
    for name, texts in inputs.items():
        data, offsets = text_buffers(texts)
        for spec in (ShingleSpec("char", 5), ShingleSpec("word", 5)):
            def one_batch(data=data, offsets=offsets, spec=spec):
                with gpu.batch_scope():
                    gpu.band_keys(gpu.signatures(gpu.shingle_hashes(data, offsets, spec), permutations), banding)
                    gpu.synchronize()

            one_batch()  # tables and permutations are made once and stay
            pool.free_all_blocks()
            footprint = pool.total_bytes()
            hook = LivePeak()
            with hook:
                one_batch()
            size = data.shape[0]
            print(f"== {name}, {spec.kind} {spec.n}-grams: {size:,} text bytes, {offsets.shape[0] - 1:,} documents; "
                  f"live peak {hook.peak / size:.1f} B per text byte ({hook.peak:,} B), "
                  f"pool footprint +{(pool.total_bytes() - footprint) / size:.1f} B per text byte")
            for array_bytes, site in hook.at_peak:
                print(f"   {array_bytes:>14,} B  {array_bytes / size:6.2f} B/B  {site}")
            pool.free_all_blocks()
    return 0


if __name__ == "__main__":
    sys.exit(main())
