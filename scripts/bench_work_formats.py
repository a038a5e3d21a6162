"""The file formats of a work directory, each against the other choice, in the same run:

- **a part of pairs** (pipeline/pairparts.py, pipeline/clusterparts.py): a million pairs (first,
  second int64, ascending; jaccard float64) written and read as three .npy files, as a Parquet
  file with pyarrow's defaults, and as the Parquet file the work directory writes
  (workdir.PART_OPTIONS: no dictionary, no compression);
- **signature rows read by row** (the signature filter, pipeline/shards.py): the rows of the
  documents of some pairs, ascending, gathered from a shard's memory-mapped signatures.npy,
  against a Parquet file of the same signatures (a fixed-size list column, row groups of 65,536
  rows) whose row groups that hold the rows are read;
- **shingle sets read by row** (exact verification, pipeline/shards.spilled_sets): the sets of
  some documents of a shard's spill, gathered from its memory-mapped columns.npy by its
  offsets.npy, against a Parquet file of the same sets (a list column, row groups of 65,536
  rows) whose row groups that hold the rows are read;
- **one band's keys** (the candidate shuffle, dask.band_key_rows): a band of a shard's
  band-major keys.npy, memory-mapped, against a Parquet file with a column per band.

Each figure is the best of ``--repeats`` timings, files in the page cache (both formats alike).

    python scripts/bench_work_formats.py --results bench-results/work_formats.json
"""

from __future__ import annotations

import argparse
import functools
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from bench_results import record

from gpudedup.pipeline.workdir import PART_OPTIONS

ROW_GROUP = 65_536


def best(action: Callable[[], object], repeats: int) -> float:
    """The shortest of ``repeats`` timings of ``action``, in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return min(times)


def megabytes(*paths: Path) -> float:
    return round(sum(path.stat().st_size for path in paths) / 1e6, 1)


def pair_rows(root: Path, count: int, repeats: int, rng: np.random.Generator) -> list[dict]:
    """A part of ``count`` pairs in each format: write and read seconds, size."""
    first = np.sort(rng.integers(0, 50_000_000, count))
    columns = {"first": first, "second": first + rng.integers(1, 1000, count), "jaccard": rng.random(count)}
    npy = [root / f"{name}.npy" for name in columns]

    def write_npy() -> None:
        for path, values in zip(npy, columns.values()):
            np.save(path, values)

    rows = [{"case": "pairs", "format": ".npy files", "rows": count, "write_s": round(best(write_npy, repeats), 3),
             "read_s": round(best(lambda: [np.load(path) for path in npy], repeats), 3), "mb": megabytes(*npy)}]
    path = root / "part.parquet"

    def read_parquet() -> list[np.ndarray]:
        return [column.to_numpy() for column in pq.read_table(path).itercolumns()]

    for name, options in (("Parquet, pyarrow's defaults", {}), ("Parquet, as the work directory writes", PART_OPTIONS)):
        written = best(functools.partial(pq.write_table, pa.table(columns), path, **options), repeats)
        rows.append({"case": "pairs", "format": name, "rows": count, "write_s": round(written, 3),
                     "read_s": round(best(read_parquet, repeats), 3), "mb": megabytes(path)})
    return rows


def signature_rows(root: Path, documents: int, width: int, lookups: int, repeats: int,
                   rng: np.random.Generator) -> list[dict]:
    """``lookups`` signature rows of ``documents`` gathered from each format: seconds, size."""
    signatures = rng.integers(0, 2**32, (documents, width), dtype=np.uint32)
    wanted = np.unique(rng.integers(0, documents, lookups))
    npy = root / "signatures.npy"
    np.save(npy, signatures)
    parquet = root / "signatures.parquet"
    values = pa.FixedSizeListArray.from_arrays(pa.array(signatures.reshape(-1)), width)
    pq.write_table(pa.table({"signature": values}), parquet, row_group_size=ROW_GROUP, **PART_OPTIONS)

    def from_npy() -> np.ndarray:
        return np.load(npy, mmap_mode="r")[wanted]

    def from_parquet() -> np.ndarray:
        groups = np.unique(wanted // ROW_GROUP)
        table = pq.ParquetFile(parquet).read_row_groups(groups.tolist(), columns=["signature"])
        held = table["signature"].combine_chunks().flatten().to_numpy().reshape(-1, width)
        # The rows of the groups read, in order: a wanted row's place among them.
        starts = np.concatenate([[0], np.cumsum(np.minimum(ROW_GROUP, documents - groups * ROW_GROUP))])
        at = starts[np.searchsorted(groups, wanted // ROW_GROUP)] + wanted % ROW_GROUP
        return held[at]

    assert np.array_equal(from_npy(), from_parquet()), "both formats give the same rows"
    common = {"case": "signature rows", "rows": documents, "width": width, "lookups": int(wanted.shape[0])}
    return [{**common, "format": ".npy, memory-mapped", "read_s": round(best(from_npy, repeats), 3),
             "mb": megabytes(npy)},
            {**common, "format": "Parquet, row groups read", "read_s": round(best(from_parquet, repeats), 3),
             "mb": megabytes(parquet)}]


def set_rows(root: Path, documents: int, shingles: int, lookups: int, repeats: int,
             rng: np.random.Generator) -> list[dict]:
    """The shingle sets of ``lookups`` documents of a spill of ``documents`` sets (about
    ``shingles`` int64 hashes each) gathered from each format: seconds, size."""
    counts = rng.integers(shingles // 2, shingles * 3 // 2, documents)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    columns = rng.integers(0, 2**62, int(offsets[-1]), dtype=np.int64)
    wanted = np.unique(rng.integers(0, documents, lookups))
    np.save(root / "columns.npy", columns)
    np.save(root / "offsets.npy", offsets)
    parquet = root / "sets.parquet"
    values = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(columns))
    pq.write_table(pa.table({"set": values}), parquet, row_group_size=ROW_GROUP, **PART_OPTIONS)

    def from_npy() -> np.ndarray:  # (as shards.spilled_sets gathers them)
        stored, at = np.load(root / "columns.npy", mmap_mode="r"), np.load(root / "offsets.npy", mmap_mode="r")
        return np.concatenate([np.asarray(stored[a:b]) for a, b in zip(at[wanted], at[wanted + 1])])

    def from_parquet() -> np.ndarray:
        groups = np.unique(wanted // ROW_GROUP)
        table = pq.ParquetFile(parquet).read_row_groups(groups.tolist(), columns=["set"])
        starts = np.concatenate([[0], np.cumsum(np.minimum(ROW_GROUP, documents - groups * ROW_GROUP))])
        at = starts[np.searchsorted(groups, wanted // ROW_GROUP)] + wanted % ROW_GROUP
        return table["set"].combine_chunks().take(pa.array(at)).flatten().to_numpy()

    assert np.array_equal(from_npy(), from_parquet()), "both formats give the same sets"
    common = {"case": "shingle sets", "rows": documents, "shingles": int(columns.shape[0]),
              "lookups": int(wanted.shape[0])}
    return [{**common, "format": ".npy, memory-mapped", "read_s": round(best(from_npy, repeats), 3),
             "mb": megabytes(root / "columns.npy", root / "offsets.npy")},
            {**common, "format": "Parquet, row groups read", "read_s": round(best(from_parquet, repeats), 3),
             "mb": megabytes(parquet)}]


def band_rows(root: Path, documents: int, bands: int, repeats: int, rng: np.random.Generator) -> list[dict]:
    """One band's keys of a shard of ``documents`` read from each format: seconds, size."""
    keys = rng.integers(0, 2**64, (bands, documents), dtype=np.uint64)
    npy = root / "keys.npy"
    np.save(npy, keys)
    parquet = root / "keys.parquet"
    pq.write_table(pa.table({f"band{b}": keys[b] for b in range(bands)}), parquet, **PART_OPTIONS)
    band = bands // 2

    def from_npy() -> np.ndarray:
        return np.asarray(np.load(npy, mmap_mode="r")[band])

    def from_parquet() -> np.ndarray:
        return pq.read_table(parquet, columns=[f"band{band}"]).column(0).to_numpy()

    assert np.array_equal(from_npy(), from_parquet()), "both formats give the same keys"
    common = {"case": "one band's keys", "rows": documents, "bands": bands}
    return [{**common, "format": ".npy, memory-mapped", "read_s": round(best(from_npy, repeats), 4),
             "mb": megabytes(npy)},
            {**common, "format": "Parquet, a column per band", "read_s": round(best(from_parquet, repeats), 4),
             "mb": megabytes(parquet)}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--documents", type=int, default=200_000, help="signature rows in the file")
    parser.add_argument("--width", type=int, default=128, help="signature columns (bands x rows)")
    parser.add_argument("--lookups", type=int, default=20_000, help="rows asked for (before duplicates go)")
    parser.add_argument("--set-documents", type=int, default=20_000, help="shingle sets in the spill")
    parser.add_argument("--shingles", type=int, default=300, help="shingles of a set, on average")
    parser.add_argument("--bands", type=int, default=16, help="bands of the band keys")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--results", type=Path, help="write the rows into this results file (bench-results/)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as temporary:
        root = Path(temporary)
        rows = pair_rows(root, args.pairs, args.repeats, rng)
        rows += signature_rows(root, args.documents, args.width, args.lookups, args.repeats, rng)
        rows += set_rows(root, args.set_documents, args.shingles, args.lookups // 10, args.repeats, rng)
        rows += band_rows(root, args.documents, args.bands, args.repeats, rng)
    for row in rows:
        print(row)
    if args.results:
        record(args.results, "bench_work_formats", rows, ["case", "format"])


if __name__ == "__main__":
    main()
