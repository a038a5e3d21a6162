"""--max-memory before reading: the estimate of io/sizes.py against the resident set of real
reads (each in a fresh process), and the CLI stopping before it reads a file."""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpudedup.io.inputs import file_format
from gpudedup.io.sizes import gzip_uncompressed_size, read_bytes_estimate

MEASURE = r"""
import json, sys
from pathlib import Path
from gpudedup.io.read import read_corpus
from gpudedup.memory import resident_bytes
from gpudedup.stages import _read_peak_rss_bytes, _reset_peak_rss
paths = [Path(p) for p in sys.argv[1:]]
before = resident_bytes()
assert _reset_peak_rss()
corpus = read_corpus(paths, id_field="id")
corpus.utf8()  # the pipeline's first step: the text as one buffer
print(_read_peak_rss_bytes() - before)
"""


def records(start: int, count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(20_000)]
    return [{"id": start + i, "text": " ".join(rng.choice(words) for _ in range(80))} for i in range(count)]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """About 20 MB of text in JSONL, gzipped JSONL and Parquet files."""
    root = tmp_path_factory.mktemp("sizes")
    jsonl = lambda rows: "".join(json.dumps(r) + "\n" for r in rows).encode()
    (root / "a.jsonl").write_bytes(jsonl(records(0, 20_000, 1)))
    (root / "b.jsonl.gz").write_bytes(gzip.compress(jsonl(records(20_000, 20_000, 2)), 6))
    pq.write_table(pa.Table.from_pylist(records(40_000, 20_000, 3)), root / "c.parquet", compression="zstd")
    return root


@pytest.mark.parametrize("names", [["a.jsonl"], ["b.jsonl.gz"], ["c.parquet"], ["a.jsonl", "b.jsonl.gz", "c.parquet"]])
def test_the_read_estimate_covers_the_measured_peak_without_wasting_much(inputs, names):
    if not Path("/proc/self/clear_refs").exists():
        pytest.skip("needs Linux's resettable peak of the resident set")
    paths = [inputs / name for name in names]
    estimate = read_bytes_estimate([(p, file_format(p)) for p in paths])
    peak = int(subprocess.run([sys.executable, "-c", MEASURE, *map(str, paths)], capture_output=True,
                              text=True, check=True).stdout)
    assert peak <= estimate <= 2.5 * peak, (peak / 2**20, estimate / 2**20)


def test_gzip_size_counts_every_member_and_falls_back_on_garbage(tmp_path):
    data = b"x" * 1_000_000
    path = tmp_path / "a.jsonl.gz"
    path.write_bytes(gzip.compress(data) + gzip.compress(data[:1000]))  # two members
    assert gzip_uncompressed_size(path, path.stat().st_size) == len(data) + 1000
    path.write_bytes(gzip.compress(data)[:-4])  # truncated: what decompresses still counts
    assert gzip_uncompressed_size(path, path.stat().st_size) == len(data)
    path.write_bytes(b"\x1f\x8b\x08garbage" * 10)
    assert gzip_uncompressed_size(path, path.stat().st_size) == 4 * path.stat().st_size


def test_max_memory_stops_before_reading_anything(inputs, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import gpudedup.io.read as reader
    from gpudedup.cli import app

    def must_not_read(*args, **kwargs):
        raise AssertionError("a file was read")

    monkeypatch.setattr(reader, "read_one_file", must_not_read)
    result = CliRunner().invoke(app, ["dedup", str(inputs), "-o", str(tmp_path / "out"), "-q", "--id-field", "id",
                                      "--max-memory", "100M"])
    assert result.exit_code == 2, result.output
    assert "--max-memory 100 MiB: reading the input needs about" in result.output
    assert not (tmp_path / "out").exists()
