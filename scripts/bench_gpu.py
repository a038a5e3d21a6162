"""GPU benchmark: strings to signatures on the GPU backend against references doing the same
work on the same GPU, on the same documents in the same run.

What is measured (every figure is the median of --repeats runs, in seconds and in GB of UTF-8
text per second, 1 GB = 1e9 bytes; the corpus is cut into batches of --batch-bytes, default
the backend's own, and a stage's time is its sum over the batches):

- ours, stage by stage: the host-to-device copy of the UTF-8 bytes and offsets
  (``backend.to_device``: one host copy into the batch stream's pinned staging buffer, then an
  asynchronous copy on that stream); shingle
  hashing (``backend.shingle_hashes``: decoding, normalisation, shingle spans, the
  span-hash kernel); signatures (``backend.signatures``, K = --num-perm permutations); the
  signature kernel alone (CUDA events around its launch); band keys (``backend.band_keys``,
  the bands and rows the job chooses for --threshold). Stages are timed by the wall clock with
  the device synchronised before and after each, so each includes its launch overheads.
- ours, strings -> signatures: host UTF-8 buffers to device signatures in one pass (copy,
  hashing, signatures), synchronised only at the end.
- plain CuPy: the same hash family written as plain array operations, the way a CuPy user
  would without a custom kernel: ``shingling.utf8_shingle_hashes`` with ``xp=cupy``,
  signatures from a padded (documents x shingles) matrix per group of documents of similar
  length, ``(x[:, :, None] * a + b).min(axis=1)`` over chunks of permutations in uint32
  arithmetic, and ``lsh.band_keys`` with ``xp=cupy``. Its shingle hashes, signatures and band
  keys are compared with ours for exact equality on every batch; if anything differs, the
  script prints no speed-up and exits with status 1.
- datasketch ``MinHash.bulk(..., gpu_mode="always")``: sha1 of every shingle on the host, the
  permutations and minimum on the GPU (datasketch's own hash family, so its signatures differ
  from ours and are not compared). It is given the shingle byte strings, made beforehand (not
  timed) by the canonical definition (normalised text, word or char n-grams, repeats kept),
  on --datasketch-docs documents spread evenly over the corpus; its GB/s is over their text.
  Leaving the shingling out of its time favours it.
- cuDF ``Series.str.minhash`` (char n-grams of width --ngram) or ``str.split(" ")`` then
  ``str.minhash`` on the lists (word n-grams), with K uint32 parameters, where ``import cudf``
  works. It is given the normalised texts already on the device (not timed), which favours it.
- the whole job from Parquet: the corpus written to a Parquet file (not timed), then
  ``gpudedup.dedup(path, backend=...)`` timed from reading the file to its result (all
  stages, exact verification and clustering; writing outputs is not included), on the GPU and,
  as a same-run reference, on the CPU.

Ratios printed at the end (the targets of the GPU work): strings -> signatures, ours against the
fastest reference (GB/s over GB/s); the signature kernel's (shingle x permutation) updates per
second as a fraction of the device's 32-bit integer limit; the whole job's GB/s on the GPU.

The int32 limit is the signature kernel's ceiling of docs/gpu.md, computed from the compiled
kernel by scripts/kernel_ceiling.py: each update costs one 32-bit multiply-add (IMAD), and the
multiply-add pipe issues 64 per SM per clock (the CUDA C++ Programming Guide's throughput table
for compute capability 7.0 to 9.0); the minima go to the ALU pipe and the instruction issue
allows more, so the limit is SMs x clock x 64 updates per second, at the clock the device
reports (its peak clock). Outside 7.0-9.0 the script prints no fraction unless
--int32-ops-per-clock says.

    pip install -e '.[gpu,bench]'          # cuDF optional: pip install -e '.[cudf]'
    python scripts/build_bench_corpus.py --install bench_data/bench.jsonl
    python scripts/bench_gpu.py bench_data/bench.jsonl --shingle word --ngram 5 --json gpu.json

``--host-dry-run`` runs the same code on the host (the CUDA kernels compiled by g++ from
tests/kernel_host, numpy as the array module, datasketch on the CPU, no cuDF): it checks the
script, and its figures are NOT GPU figures. The script measures and reports; it asserts
nothing about the figures.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import importlib.metadata
import inspect
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.json as pajson
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run from a checkout without an install
    sys.path.insert(0, str(REPO))

from gpudedup.core.hashing import EMPTY_SIGNATURE_VALUE, Permutations, draw_permutations  # noqa: E402
from gpudedup.core.lsh import band_keys  # noqa: E402
from gpudedup.core.normalize import (decode_utf8, host_tables, normalize_codepoints, tables_on,  # noqa: E402
                                text_buffers)
from gpudedup.params import DedupParams  # noqa: E402
from gpudedup.pipeline.signatures import text_batches  # noqa: E402
from gpudedup.core.shingling import ShingleBatch, ShingleSpec, base_powers, utf8_shingle_hashes  # noqa: E402

GB = 1e9
SIGNATURE_KERNEL = "minhash_signatures_u64"

# The plain reference's largest temporary, (documents x shingles x permutations) uint32: on a
# GPU large enough that each array operation fills the device many times over (launch overheads
# stay small), and far below its memory. On the host (dry runs) numpy is faster with temporaries
# that stay in the caches and do not fault in fresh pages on every call.
REFERENCE_TEMPORARY_BYTES = 1 << 28
HOST_REFERENCE_TEMPORARY_BYTES = 1 << 22

# 32-bit integer multiply-add and min per SM per clock, compute capability 7.0-9.0 (CUDA C++
# Programming Guide, "Arithmetic Instructions" throughput table). An assumption, stated in the
# output; other architectures need --int32-ops-per-clock.
INT32_OPS_PER_SM_CLOCK = 64
INT32_TABLE_CAPABILITIES = ((7, 0), (9, 0))  # inclusive range of (major, minor)
# One multiply-add per (shingle, permutation) binds: the minima (a three-input min per two
# updates) issue on the ALU pipe beside it (scripts/kernel_ceiling.py counts them).
OPS_PER_UPDATE = 1

TARGETS = {  # from the GPU issue; printed next to the measured figures
    "strings_to_signatures_speedup": 2.0,
    "signature_kernel_fraction_of_int32_limit": 0.5,
    "whole_job_gpu_gb_per_s": 1.0,
}

SKIPPABLE = ("plain", "datasketch", "cudf", "job-gpu", "job-cpu")


# --- clocks -----------------------------------------------------------------------------------


class HostClock:
    """Wall-clock stage timings and kernel intervals for host runs (the host kernels run
    synchronously, so an interval is two perf_counter readings)."""

    label = "host perf_counter (HOST DRY RUN: not GPU figures)"

    def synchronize(self) -> None:
        pass

    def wall(self, function, *args):
        """(function(*args), seconds), all queued work finished before and after."""
        self.synchronize()
        started = time.perf_counter()
        result = function(*args)
        self.synchronize()
        return result, time.perf_counter() - started

    def mark(self):
        return time.perf_counter()

    def between(self, start, end) -> float:
        return end - start


class CudaClock(HostClock):
    """Stages: wall clock with the whole device synchronised (every stream). Kernels: CUDA
    events recorded on the current stream around the launch, so only device time counts."""

    label = "stages: wall clock, device synchronised; signature kernel: CUDA events"

    def __init__(self, cupy):
        self.cupy = cupy

    def synchronize(self) -> None:
        self.cupy.cuda.Device().synchronize()

    def mark(self):
        event = self.cupy.cuda.Event()
        event.record()
        return event

    def between(self, start, end) -> float:
        end.synchronize()
        return self.cupy.cuda.get_elapsed_time(start, end) / 1e3  # milliseconds


class TimedKernels:
    """A kernel loader that records a clock interval around every launch of one kernel; wraps
    the backend's own loader, so the launch is exactly the backend's."""

    def __init__(self, kernels, clock, kernel_name: str):
        self.kernels, self.clock, self.kernel_name = kernels, clock, kernel_name
        self.intervals: list[tuple] = []

    def get(self, file_name: str, kernel_name: str, defines: dict):
        kernel = self.kernels.get(file_name, kernel_name, defines)
        if kernel_name != self.kernel_name:
            return kernel

        def timed(grid, block, args):
            start = self.clock.mark()
            kernel(grid, block, args)
            self.intervals.append((start, self.clock.mark()))

        return timed

    def take_seconds(self) -> float:
        """Device seconds of the launches recorded since the last call."""
        seconds = sum(self.clock.between(start, end) for start, end in self.intervals)
        self.intervals.clear()
        return seconds


def with_timed_kernel(backend, clock, kernel_name: str = SIGNATURE_KERNEL):
    """(a shallow copy of the backend whose loader times ``kernel_name``, the TimedKernels),
    or (backend, None) for a backend without a kernel loader."""
    if getattr(backend, "kernels", None) is None:
        return backend, None
    timed = copy.copy(backend)
    timed.kernels = TimedKernels(backend.kernels, clock, kernel_name)
    return timed, timed.kernels


# --- the plain array-operation reference ------------------------------------------------------


def to_host_array(array, xp) -> np.ndarray:
    return getattr(xp, "asnumpy", np.asarray)(array)


def reference_tables(xp, max_batch_bytes: int):
    """Normalisation tables and base-power tables on xp's side, copied once before timing
    (the power tables cover the largest batch: a batch has at most one code point per byte)."""
    inverse_powers, powers = base_powers(max_batch_bytes + 1)
    if xp is np:
        return host_tables(), (inverse_powers, powers)
    return tables_on(xp), (xp.asarray(inverse_powers), xp.asarray(powers))


def plain_signatures(shingles: ShingleBatch, permutations: Permutations, xp,
                     temporary_bytes: int = REFERENCE_TEMPORARY_BYTES):
    """MinHash signatures uint32 (n_docs, K) by plain array operations on xp's side.

    Documents are sorted longest first and taken in groups, each padded to its first (longest)
    document's shingle count, so padding stays small; a row is padded with its own last hash,
    a repeat, which cannot lower a minimum. Permutations go in chunks so that the
    (rows x length x chunk) temporary stays within ``temporary_bytes``.
    """
    offsets = shingles.offsets
    n_docs, num_perm = shingles.n_docs, permutations.count
    signatures = xp.full((n_docs, num_perm), EMPTY_SIGNATURE_VALUE, dtype=xp.uint32)
    counts = offsets[1:] - offsets[:-1]
    order = xp.argsort(-counts)
    sorted_counts = to_host_array(counts[order], xp)
    nonempty = int(np.count_nonzero(sorted_counts))
    low_bits = shingles.hashes.astype(xp.uint32)  # the permutations read the low 32 bits
    a = xp.asarray(permutations.a, dtype=xp.uint32)
    b = xp.asarray(permutations.b, dtype=xp.uint32)
    cells = max(1, temporary_bytes // 4)
    start = 0
    while start < nonempty:
        length = int(sorted_counts[start])
        rows = min(nonempty - start, max(1, cells // num_perm // length))
        docs = order[start : start + rows]
        columns = xp.arange(length, dtype=xp.int64)[None, :]
        # Column j of a row is its shingle min(j, count - 1): past its end, its last one again.
        gather = offsets[docs][:, None] + xp.minimum(columns, (counts[docs] - 1)[:, None])
        x = low_bits[gather]  # (rows, length)
        chunk = max(1, min(num_perm, cells // (rows * length)))
        for first in range(0, num_perm, chunk):
            last = min(first + chunk, num_perm)
            # uint32 times uint32 stays uint32 and wraps modulo 2**32: the family's arithmetic.
            signatures[docs, first:last] = (x[:, :, None] * a[first:last] + b[first:last]).min(axis=1)
        start += rows
    return signatures


# --- the measurement --------------------------------------------------------------------------


def host_batches(texts, batch_bytes: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The corpus as host (UTF-8 bytes uint8, byte offsets int64) batches of about
    ``batch_bytes``, cut as the pipeline cuts them."""
    data, offsets = text_buffers(texts)
    batches = []
    for start, stop in text_batches(offsets, batch_bytes, max(1, offsets.shape[0] - 1)):
        first, last = offsets[start], offsets[stop]
        batches.append((data[first:last], offsets[start : stop + 1] - first))
    return batches


def same(a, b, xp) -> bool:
    """Exact equality of two arrays on xp's side (shape, then every element)."""
    if tuple(a.shape) != tuple(b.shape):
        return False
    return bool(xp.all(xp.asarray(a) == xp.asarray(b)))


def median_or_none(values):
    return statistics.median(values) if values else None


def measure(texts, spec: ShingleSpec, num_perm: int, backend, xp, clock, *, threshold: float = 0.8,
            seed: int = 42, repeats: int = 3, batch_bytes: int | None = None,
            include_plain: bool = True, temporary_bytes: int = REFERENCE_TEMPORARY_BYTES) -> dict:
    """Time ours (``backend``) and the plain array reference (``xp``) from strings to band keys
    on the same batches, and check that their outputs are identical.

    texts: a pyarrow string array or a sequence of str; backend: a KernelBackend (CuPy, or the
    host kernels with numpy); xp: the reference's array module, on the backend's side; clock:
    HostClock or CudaClock; temporary_bytes: the plain reference's chunk size (plain_signatures).
    Returns a dict: sizes, the per-stage median seconds of ``ours`` and ``plain`` (and every
    repeat's in ``*_samples``), and ``equal``: per output, whether ours and the reference agreed
    exactly on every batch of the first repeat (``all_equal``: all of them).
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1 (the first repeat checks equality); got {repeats}")
    banding = DedupParams(threshold=threshold, num_perm=num_perm).banding()
    permutations = draw_permutations(num_perm, seed)
    batches = host_batches(texts, batch_bytes or backend.default_batch_bytes)
    max_bytes = max((int(data.shape[0]) for data, _ in batches), default=0)
    tables, power_tables = reference_tables(xp, max_bytes)
    timed_backend, timed_kernels = with_timed_kernel(backend, clock)
    bxp = backend.xp

    def ours_total(data, offsets):
        return timed_backend.signatures(timed_backend.shingle_hashes(data, offsets, spec), permutations)

    def plain_hashes(data, offsets):
        return utf8_shingle_hashes(data, offsets, spec, xp, tables, power_tables)

    def plain_sign(shingles):
        return plain_signatures(shingles, permutations, xp, temporary_bytes)

    def plain_total(data, offsets):
        return plain_sign(plain_hashes(xp.asarray(data), xp.asarray(offsets)))

    def one_pass(data, offsets, check: bool, samples: dict, equal: dict, sizes: dict):
        # Ours, stage by stage; the kernel intervals are those of this pass's signature call.
        # The copy as the pipeline makes it: through the batch stream's pinned staging buffer.
        (data_d, offsets_d), t_copy = clock.wall(timed_backend.to_device, data, offsets)
        shingles, t_hash = clock.wall(timed_backend.shingle_hashes, data_d, offsets_d, spec)
        if timed_kernels is not None:
            timed_kernels.take_seconds()  # drop launches outside the signature stage
        signatures, t_sign = clock.wall(timed_backend.signatures, shingles, permutations)
        t_kernel = timed_kernels.take_seconds() if timed_kernels is not None else None
        keys, t_keys = clock.wall(timed_backend.band_keys, signatures, banding)
        total, t_total = clock.wall(ours_total, data, offsets)
        if timed_kernels is not None:
            timed_kernels.take_seconds()
        ours = {"copy": t_copy, "shingle_hashes": t_hash, "signatures": t_sign, "band_keys": t_keys,
                "strings_to_signatures": t_total, "signature_kernel": t_kernel}
        for stage, seconds in ours.items():
            samples["ours"].setdefault(stage, []).append(seconds)
        if check:
            sizes["shingles"] += int(shingles.hashes.shape[0])
            sizes["documents"] += int(offsets.shape[0]) - 1
            equal["ours_total_vs_staged"] &= same(total, signatures, bxp)
        if not include_plain:
            return
        (pdata, poffsets), p_copy = clock.wall(lambda: (xp.asarray(data), xp.asarray(offsets)))
        pshingles, p_hash = clock.wall(plain_hashes, pdata, poffsets)
        psignatures, p_sign = clock.wall(plain_sign, pshingles)
        pkeys, p_keys = clock.wall(band_keys, psignatures, banding, xp)
        ptotal, p_total = clock.wall(plain_total, data, offsets)
        plain = {"copy": p_copy, "shingle_hashes": p_hash, "signatures": p_sign, "band_keys": p_keys,
                 "strings_to_signatures": p_total}
        for stage, seconds in plain.items():
            samples["plain"].setdefault(stage, []).append(seconds)
        if check:
            equal["shingle_offsets"] &= same(shingles.offsets, pshingles.offsets, xp)
            equal["shingle_hashes"] &= same(shingles.hashes, pshingles.hashes, xp)
            equal["signatures"] &= same(signatures, psignatures, xp)
            equal["band_keys"] &= same(keys, pkeys, xp)
            equal["plain_total_vs_staged"] &= same(ptotal, psignatures, xp)

    equal = {"ours_total_vs_staged": True}
    if include_plain:
        equal.update(shingle_offsets=True, shingle_hashes=True, signatures=True, band_keys=True,
                     plain_total_vs_staged=True)
    sizes = {"shingles": 0, "documents": 0}
    with backend.batch_scope():  # the stream the pipeline would use for a batch
        # Warm-up, not timed: kernel compilation, permutation copies, memory-pool growth (on the
        # largest batch).
        if batches:
            largest = max(batches, key=lambda batch: batch[0].shape[0])
            one_pass(*largest, False, {"ours": {}, "plain": {}}, {}, {})
        per_repeat = []
        for repeat in range(repeats):
            samples = {"ours": {}, "plain": {}}
            for data, offsets in batches:
                one_pass(data, offsets, repeat == 0, samples, equal, sizes)
            # A stage's time in this repeat: its sum over the batches.
            per_repeat.append({side: {stage: (None if None in values else sum(values))
                                      for stage, values in stages.items()}
                               for side, stages in samples.items()})

    text_bytes = sum(int(data.shape[0]) for data, _ in batches)
    result = {
        "documents": sizes["documents"], "text_bytes": text_bytes, "batches": len(batches),
        "shingles": sizes["shingles"], "num_perm": num_perm, "seed": seed,
        "bands": banding.bands, "rows": banding.rows, "shingle": spec.kind, "ngram": spec.n,
        "updates": sizes["shingles"] * num_perm, "equal": equal,
        "all_equal": all(equal.values()), "repeats": repeats,
    }
    for side in ("ours", "plain"):
        stages = {stage for run in per_repeat for stage in run[side]}
        result[side] = {stage: median_or_none([run[side][stage] for run in per_repeat
                                               if run[side].get(stage) is not None])
                        for stage in sorted(stages)}
        result[side + "_samples"] = {stage: [run[side][stage] for run in per_repeat] for stage in sorted(stages)}
    return result


# --- the other references (each needs only what it names) ------------------------------------


def normalized_strings(texts) -> list[str]:
    """The canonical normalised form of every text (normalize.normalize_text, for a batch)."""
    data, offsets = text_buffers(texts)
    codepoints, offsets = normalize_codepoints(*decode_utf8(data, offsets))
    joined = codepoints.astype(np.uint32).tobytes().decode("utf-32-le")
    return [joined[offsets[i] : offsets[i + 1]] for i in range(offsets.shape[0] - 1)]


def shingle_strings(text: str, spec: ShingleSpec) -> list[str]:
    """The shingles of one normalised text, with repeats (shingling.py's definition): word or
    char n-grams; a non-empty text shorter than n units is one shingle; an empty one has none."""
    if not text:
        return []
    units = text.split(" ") if spec.kind == "word" else text
    if len(units) < spec.n:
        return [text]
    joiner = " " if spec.kind == "word" else ""
    return [joiner.join(units[i : i + spec.n]) for i in range(len(units) - spec.n + 1)]


def sample_rows(count: int, wanted: int) -> np.ndarray:
    """``wanted`` row indices spread evenly over ``count`` rows (all when wanted is 0 or more)."""
    if wanted <= 0 or wanted >= count:
        return np.arange(count)
    return np.unique(np.linspace(0, count - 1, wanted).round().astype(np.int64))


def datasketch_support() -> tuple[object, str]:
    """(datasketch.MinHash, its version) when it has gpu_mode; else (None, why not)."""
    try:
        from datasketch import MinHash
    except ImportError:
        return None, "datasketch is not installed (pip install -e '.[bench]')"
    version = importlib.metadata.version("datasketch")
    if "gpu_mode" not in inspect.signature(MinHash.__init__).parameters:
        return None, f"the installed datasketch {version} has no gpu_mode: no datasketch GPU reference"
    return MinHash, version


def measure_datasketch(minhash_class, texts, spec: ShingleSpec, num_perm: int, seed: int, gpu_mode: str,
                       repeats: int) -> dict:
    """datasketch ``MinHash.bulk`` on the shingle byte strings of ``texts`` (made beforehand,
    not timed), with ``gpu_mode``; perf_counter is exact here, as its results come back to the
    host before it returns."""
    started = time.perf_counter()
    lists = [[s.encode("utf-8") for s in shingle_strings(text, spec)] for text in normalized_strings(texts)]
    prepare = time.perf_counter() - started
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        minhash_class.bulk(lists, num_perm=num_perm, seed=seed, gpu_mode=gpu_mode)
        seconds.append(time.perf_counter() - started)
    text_bytes = int(text_buffers(texts)[1][-1])
    return {"seconds": statistics.median(seconds), "samples": seconds, "documents": len(lists),
            "text_bytes": text_bytes, "shingles": sum(len(s) for s in lists),
            "shingle_preparation_seconds": prepare, "gpu_mode": gpu_mode}


def measure_cudf(texts, spec: ShingleSpec, permutations: Permutations, seed: int, clock, repeats: int) -> dict:
    """cuDF's minhash with K = len(permutations) uint32 parameters on the normalised texts,
    copied to the device beforehand (not timed). Raises ImportError without cuDF."""
    import cudf

    series = cudf.Series.from_arrow(pa.array(normalized_strings(texts), pa.string()))
    a = cudf.Series(permutations.a.astype(np.uint32))
    b = cudf.Series(permutations.b.astype(np.uint32))
    seed32 = seed & 0xFFFFFFFF

    def run():
        if spec.kind == "char":
            return series.str.minhash(seed32, a=a, b=b, width=spec.n)
        # Word n-grams: cuDF hashes n-grams of list elements (minhash on a list column
        # dispatches to minhash_ngrams in current cuDF; older cuDF names it directly).
        tokens = series.str.split(" ")
        try:
            return tokens.str.minhash(seed32, a=a, b=b, width=spec.n)
        except (AttributeError, TypeError, ValueError, NotImplementedError):
            return tokens.str.minhash_ngrams(ngrams=spec.n, seed=seed32, a=a, b=b)

    clock.wall(run)  # warm-up (JIT and memory pool)
    seconds = [clock.wall(run)[1] for _ in range(repeats)]
    return {"seconds": statistics.median(seconds), "samples": seconds, "version": cudf.__version__,
            "text_bytes": int(text_buffers(texts)[1][-1]), "documents": len(texts)}


def measure_whole_job(table: pa.Table, args, backend_name: str, repeats: int, warm_up: bool) -> dict:
    """``gpudedup.dedup`` from a Parquet file of the corpus, reading included; the file is
    written first (not timed). A warm-up run on a slice first when ``warm_up`` (GPU: kernel
    compilation and the memory pool are not part of a long job's throughput)."""
    import gpudedup

    id_field = "id" if "id" in table.column_names else None
    options = dict(text_field="text", id_field=id_field, threshold=args.threshold, shingle=args.shingle,
                   ngram=args.ngram, num_perm=args.num_perm, seed=args.seed, backend=backend_name)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "corpus.parquet"
        pq.write_table(table, path)
        if warm_up:
            warm = Path(directory) / "warm.parquet"
            pq.write_table(table.slice(0, min(table.num_rows, 2000)), warm)
            gpudedup.dedup(warm, **options)
        seconds, report = [], None
        for _ in range(repeats):
            started = time.perf_counter()
            result = gpudedup.dedup(path, **options)
            seconds.append(time.perf_counter() - started)
            report = result.report
    return {"seconds": statistics.median(seconds), "samples": seconds, "backend": report["backend"],
            "text_bytes": report["input"]["text_bytes"], "documents": report["input"]["documents"],
            "verified_pairs": report["results"]["verified_pairs"], "stages": report["stages"]}


# --- the device and its int32 limit -----------------------------------------------------------


def int32_update_limit(sm_count: int, clock_khz: int, capability: tuple[int, int],
                       ops_per_sm_clock: int | None = None) -> tuple[float | None, str]:
    """(the (shingle x permutation) updates per second the device's int32 units allow, how it
    was computed), or (None, why not)."""
    if ops_per_sm_clock is None:
        low, high = INT32_TABLE_CAPABILITIES
        if not low <= tuple(capability) <= high:
            return None, (f"compute capability {capability[0]}.{capability[1]} is outside the assumed table "
                          f"(7.0-9.0); give --int32-ops-per-clock")
        ops_per_sm_clock = INT32_OPS_PER_SM_CLOCK
        source = "assumed from the CUDA C++ Programming Guide throughput table"
    else:
        source = "given by --int32-ops-per-clock"
    limit = sm_count * clock_khz * 1e3 * ops_per_sm_clock / OPS_PER_UPDATE
    return limit, (f"{sm_count} SMs x {clock_khz / 1e3:.0f} MHz x {ops_per_sm_clock} int32 ops/SM/clock "
                   f"({source}) / {OPS_PER_UPDATE} ops per update")


def gpu_environment(cupy) -> dict:
    """The device and software versions, from CuPy. The SM count and clock come from device
    attributes, which work where cudaDeviceProp.clockRate is deprecated or absent (newer CUDA);
    the property is the fallback."""
    runtime = cupy.cuda.runtime
    device = cupy.cuda.Device().id
    properties = runtime.getDeviceProperties(device)
    name = properties["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    try:
        clock_khz = runtime.deviceGetAttribute(runtime.cudaDevAttrClockRate, device)
    except Exception:
        clock_khz = properties.get("clockRate")
    version = runtime.runtimeGetVersion()
    driver = runtime.driverGetVersion()
    return {
        "gpu": name,
        "compute_capability": [int(properties["major"]), int(properties["minor"])],
        "sm_count": int(runtime.deviceGetAttribute(runtime.cudaDevAttrMultiProcessorCount, device)),
        "clock_khz": int(clock_khz) if clock_khz else None,
        "memory_gib": round(properties["totalGlobalMem"] / 2**30, 1),
        "cupy": cupy.__version__,
        "cuda_runtime": f"{version // 1000}.{version % 1000 // 10}",
        "cuda_driver": f"{driver // 1000}.{driver % 1000 // 10}",
    }


def common_environment() -> dict:
    try:
        commit = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                                capture_output=True, text=True, check=True).stdout.strip()
    except Exception:
        commit = None
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": shlex.join([sys.executable, *sys.argv]), "python": sys.version.split()[0],
            "numpy": np.__version__, "pyarrow": pa.__version__, "gpudedup_commit": commit}


# --- report ------------------------------------------------------------------------------------


def rate(text_bytes: int, seconds) -> float | None:
    """GB of text per second (None without a time)."""
    if seconds is None or seconds <= 0:
        return None
    return text_bytes / GB / seconds


STAGE_LABELS = [
    ("copy", "host -> device copy"),
    ("shingle_hashes", "shingle hashing"),
    ("signatures", "signatures"),
    ("signature_kernel", "signature kernel alone (events)"),
    ("band_keys", "band keys"),
    ("strings_to_signatures", "strings -> signatures (one pass, incl. copy)"),
]


def table_rows(results: dict) -> list[dict]:
    """One row per measured figure: pipeline, stage, seconds, GB/s, note."""
    rows = []
    stages = results["stages"]
    names = {"ours": f"ours ({results['labels']['ours']})", "plain": f"plain {results['labels']['xp']} reference"}
    for side in ("ours", "plain"):
        for stage, label in STAGE_LABELS:
            seconds = stages.get(side, {}).get(stage)
            if seconds is None:
                continue
            rows.append({"pipeline": names[side], "stage": label, "seconds": seconds,
                         "gb_per_s": rate(stages["text_bytes"], seconds), "note": ""})
    for key, label in (("datasketch", "datasketch"), ("cudf", "cuDF")):
        entry = results.get(key)
        if entry is None:
            continue
        if "error" in entry:
            rows.append({"pipeline": label, "stage": "strings -> signatures", "seconds": None,
                         "gb_per_s": None, "note": entry["error"]})
            continue
        note = entry.get("note", "")
        rows.append({"pipeline": label, "stage": entry["stage"], "seconds": entry["seconds"],
                     "gb_per_s": rate(entry["text_bytes"], entry["seconds"]), "note": note})
    for key in ("job_gpu", "job_cpu"):
        entry = results.get(key)
        if entry is None:
            continue
        if "error" in entry:
            rows.append({"pipeline": f"whole job ({key[4:]})", "stage": "dedup() from Parquet", "seconds": None,
                         "gb_per_s": None, "note": entry["error"]})
            continue
        rows.append({"pipeline": f"whole job ({entry['backend']})", "stage": "dedup() from Parquet",
                     "seconds": entry["seconds"], "gb_per_s": rate(entry["text_bytes"], entry["seconds"]),
                     "note": f"{entry['documents']} docs, {entry['verified_pairs']} verified pairs"})
    return rows


def ratios(results: dict) -> dict:
    """The figures the targets are about; the speed-up only when every output is identical."""
    out = {}
    stages = results["stages"]
    ours_rate = rate(stages["text_bytes"], stages["ours"].get("strings_to_signatures"))
    references = {}
    if stages.get("plain"):
        references[f"plain {results['labels']['xp']}"] = rate(stages["text_bytes"],
                                                              stages["plain"].get("strings_to_signatures"))
    for key in ("datasketch", "cudf"):
        entry = results.get(key)
        if entry and "error" not in entry:
            references[key] = rate(entry["text_bytes"], entry["seconds"])
    references = {name: value for name, value in references.items() if value}
    if not stages["all_equal"]:
        out["strings_to_signatures_speedup"] = None
        out["refused"] = "outputs differ from the plain reference: no speed-up is reported"
    elif references and ours_rate:
        fastest = max(references, key=references.get)
        out["strings_to_signatures_speedup"] = ours_rate / references[fastest]
        out["fastest_reference"] = fastest
    out["strings_to_signatures_gb_per_s"] = ours_rate
    kernel = stages["ours"].get("signature_kernel")
    if kernel:
        out["signature_kernel_updates_per_s"] = stages["updates"] / kernel
        limit = results.get("int32_limit_updates_per_s")
        if limit:
            out["signature_kernel_fraction_of_int32_limit"] = stages["updates"] / kernel / limit
    for key in ("job_gpu", "job_cpu"):
        entry = results.get(key)
        if entry and "error" not in entry:
            out[f"whole_job_{key[4:]}_gb_per_s"] = rate(entry["text_bytes"], entry["seconds"])
    if out.get("whole_job_gpu_gb_per_s") and out.get("whole_job_cpu_gb_per_s"):
        out["whole_job_gpu_over_cpu"] = out["whole_job_gpu_gb_per_s"] / out["whole_job_cpu_gb_per_s"]
    return out


def fmt(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:,.0f}"


def format_report(results: dict) -> str:
    env, stages = results["environment"], results["stages"]
    lines = []
    if results.get("host_dry_run"):
        lines.append("HOST DRY RUN: host kernels and numpy; these are NOT GPU figures.")
    for key in ("gpu", "compute_capability", "sm_count", "clock_khz", "memory_gib", "cupy", "cuda_runtime",
                "cuda_driver", "date", "command", "python", "numpy", "pyarrow", "gpudedup_commit"):
        if key in env:
            lines.append(f"{key}: {env[key]}")
    lines.append(f"clock: {results['labels']['clock']}")
    lines.append(
        f"corpus: {results['corpus']}: {stages['documents']} documents, {stages['text_bytes'] / 1e6:.1f} MB of "
        f"text in {stages['batches']} batches; {stages['shingle']} {stages['ngram']}-grams, "
        f"{stages['shingles']} shingles; K = {stages['num_perm']} permutations (the job computes "
        f"bands x rows = {stages['bands']} x {stages['rows']} of them); median of {stages['repeats']} repeats")
    lines += ["", "| pipeline | stage | seconds | GB/s of text | note |", "|---|---|---|---|---|"]
    for row in table_rows(results):
        lines.append(f"| {row['pipeline']} | {row['stage']} | {fmt(row['seconds'])} | {fmt(row['gb_per_s'])} | "
                     f"{row['note']} |")
    lines.append("")
    equal = stages["equal"]
    lines.append("equality with the plain reference (first repeat, every batch): "
                 + ", ".join(f"{name} {'identical' if ok else 'DIFFERENT'}" for name, ok in equal.items()))
    r = results["ratios"]
    if r.get("refused"):
        lines.append(f"REFUSED: {r['refused']}")
    else:
        lines.append(f"strings -> signatures: ours {fmt(r.get('strings_to_signatures_gb_per_s'))} GB/s; "
                     f"over the fastest reference ({r.get('fastest_reference', '-')}): "
                     f"{fmt(r.get('strings_to_signatures_speedup'))}x "
                     f"(target >= {TARGETS['strings_to_signatures_speedup']}x)")
    lines.append(f"signature kernel: {fmt(r.get('signature_kernel_updates_per_s'))} updates/s "
                 f"({stages['updates']} shingle x permutation updates); int32 limit "
                 f"{fmt(results.get('int32_limit_updates_per_s'))} updates/s ({results.get('int32_limit_basis')}); "
                 f"fraction {fmt(r.get('signature_kernel_fraction_of_int32_limit'))} "
                 f"(target >= {TARGETS['signature_kernel_fraction_of_int32_limit']})")
    lines.append(f"whole job from Parquet: GPU {fmt(r.get('whole_job_gpu_gb_per_s'))} GB/s "
                 f"(target >= {TARGETS['whole_job_gpu_gb_per_s']} GB/s on one H100), CPU "
                 f"{fmt(r.get('whole_job_cpu_gb_per_s'))} GB/s, GPU / CPU {fmt(r.get('whole_job_gpu_over_cpu'))}")
    return "\n".join(lines)


# --- driver ------------------------------------------------------------------------------------


def load_table(path: Path, limit_docs: int | None) -> pa.Table:
    """The corpus's columns (JSONL, .jsonl.gz or Parquet, read by pyarrow; 'text' required), the
    first ``limit_docs`` rows when given. (Parquet: a 43 MB zstd copy of the benchmark corpus
    fits what can be carried to a GPU machine that has no network.)"""
    table = pq.read_table(path) if path.suffix == ".parquet" else pajson.read_json(path)
    if "text" not in table.column_names:
        raise SystemExit(f"{path} has no 'text' field")
    columns = [name for name in ("id", "text") if name in table.column_names]
    table = table.select(columns)
    if limit_docs:
        table = table.slice(0, limit_docs)
    return table.combine_chunks()


def host_dry_run_setup():
    """(backend, xp, clock, labels) on the host: the CUDA kernels compiled by g++ through
    tests/kernel_host (needs g++), numpy as the array module."""
    sys.path.insert(0, str(REPO / "tests"))
    from kernel_host.host_kernels import HostKernels

    from gpudedup.backends.kernel_backend import KernelBackend

    backend = KernelBackend(np, HostKernels(), description="kernels on the host shim (dry run)")
    return backend, np, HostClock(), {"ours": backend.description, "xp": "numpy"}


def gpu_setup():
    from gpudedup.backends import get_backend, gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason is not None:
        raise SystemExit(f"bench_gpu.py needs a CUDA GPU with CuPy, but {reason}; "
                         "--host-dry-run checks the script on the host (not GPU figures)")
    import cupy

    backend = get_backend("gpu")
    return backend, cupy, CudaClock(cupy), {"ours": backend.description, "xp": "CuPy"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path, help="JSONL, .jsonl.gz or Parquet with a 'text' field")
    parser.add_argument("--shingle", choices=("word", "char"), default="word")
    parser.add_argument("--ngram", type=int, default=DedupParams.ngram)
    parser.add_argument("--num-perm", type=int, default=DedupParams.num_perm)
    parser.add_argument("--threshold", type=float, default=DedupParams.threshold)
    parser.add_argument("--seed", type=int, default=DedupParams.seed)
    parser.add_argument("--limit-docs", type=int, help="use only the first N documents")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--job-repeats", type=int, default=1, help="repeats of each whole job")
    parser.add_argument("--batch-bytes", type=int, help="text bytes per batch (default: the backend's)")
    parser.add_argument("--datasketch-docs", type=int, default=2000,
                        help="documents (spread evenly) given to datasketch; 0: all")
    parser.add_argument("--int32-ops-per-clock", type=int,
                        help="int32 ops per SM per clock, for devices outside compute capability 7.0-9.0")
    parser.add_argument("--skip", nargs="*", default=[], choices=SKIPPABLE, help="references to leave out")
    parser.add_argument("--json", type=Path, help="write every figure to this JSON file")
    parser.add_argument("--host-dry-run", action="store_true",
                        help="run on the host (host kernels, numpy, datasketch on the CPU): checks the script; "
                             "not GPU figures")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    table = load_table(args.corpus, args.limit_docs)
    texts = table.column("text")
    spec = ShingleSpec(args.shingle, args.ngram)
    dry = args.host_dry_run
    backend, xp, clock, labels = host_dry_run_setup() if dry else gpu_setup()
    labels["clock"] = clock.label

    environment = common_environment()
    if not dry:
        environment = {**gpu_environment(xp), **environment}
    results = {"corpus": str(args.corpus), "host_dry_run": dry, "environment": environment, "labels": labels,
               "parameters": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}}

    results["stages"] = measure(texts, spec, args.num_perm, backend, xp, clock, threshold=args.threshold,
                                seed=args.seed, repeats=args.repeats, batch_bytes=args.batch_bytes,
                                include_plain="plain" not in args.skip,
                                temporary_bytes=HOST_REFERENCE_TEMPORARY_BYTES if dry else REFERENCE_TEMPORARY_BYTES)

    if not dry:
        limit, basis = int32_update_limit(environment["sm_count"], environment["clock_khz"] or 0,
                                          tuple(environment["compute_capability"]), args.int32_ops_per_clock)
    else:
        limit, basis = None, "no CUDA device in a host dry run"
    results["int32_limit_updates_per_s"], results["int32_limit_basis"] = limit, basis

    if "datasketch" not in args.skip:
        results["datasketch"] = run_datasketch(texts, spec, args, "disable" if dry else "always")
    if "cudf" not in args.skip:
        results["cudf"] = run_cudf(texts, spec, args, clock, dry)
    if "job-gpu" not in args.skip:
        results["job_gpu"] = ({"error": "no GPU in a host dry run"} if dry else
                              guarded(measure_whole_job, table, args, "gpu", args.job_repeats, True))
    if "job-cpu" not in args.skip:
        results["job_cpu"] = guarded(measure_whole_job, table, args, "cpu", args.job_repeats, False)

    results["ratios"] = ratios(results)
    print(format_report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
        print(f"\nwrote {args.json}")
    return 0 if results["stages"]["all_equal"] else 1


def guarded(function, *args) -> dict:
    """A reference's figures, or {"error": why} when it cannot run here (the run goes on)."""
    try:
        return function(*args)
    except Exception as error:  # a reference that fails must not hide the other figures
        return {"error": f"{type(error).__name__}: {error}"}


def run_datasketch(texts, spec, args, gpu_mode: str) -> dict:
    minhash_class, version = datasketch_support()
    if minhash_class is None:
        return {"error": version}
    rows = sample_rows(len(texts), args.datasketch_docs)
    entry = guarded(measure_datasketch, minhash_class, texts.take(pa.array(rows)), spec, args.num_perm,
                    args.seed, gpu_mode, args.repeats)
    if "error" not in entry:
        where = "on the CPU (dry run)" if gpu_mode == "disable" else "gpu_mode='always'"
        entry["stage"] = f"MinHash.bulk {where}"
        entry["note"] = (f"datasketch {version}, own hash family; {entry['documents']} docs spread over the corpus; "
                         f"shingle lists made beforehand in {entry['shingle_preparation_seconds']:.2f} s, not timed")
    return entry


def run_cudf(texts, spec, args, clock, dry: bool) -> dict:
    if dry:
        return {"error": "not run in a host dry run"}
    try:
        import cudf  # noqa: F401
    except Exception as error:
        return {"error": f"cuDF not available ({type(error).__name__}: {error})"}
    entry = guarded(measure_cudf, texts, spec, draw_permutations(args.num_perm, args.seed), args.seed, clock,
                    args.repeats)
    if "error" not in entry:
        entry["stage"] = "str.minhash" if spec.kind == "char" else "str.split + str.minhash (ngrams)"
        entry["note"] = f"cuDF {entry['version']}, own hash family; normalised text on the device beforehand"
    return entry


if __name__ == "__main__":
    sys.exit(main())
