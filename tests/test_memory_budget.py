"""--max-memory before reading: the estimate of io/sizes.py against what real reads allocate
(each in a fresh process), and the CLI stopping before it reads a file.

What a read allocates is counted by the libraries themselves, not read from the resident set:
Arrow's memory pool keeps the high-water mark of the bytes it hands out, and tracemalloc that
of Python's and numpy's. Both are exact counts that come out the same on every machine; the
resident set also moves with the page size, transparent huge pages, what the allocator keeps
back and the number of parser threads, so a bound on it holds on one machine and not on
another. (The libraries' own code and tables, loaded by a first read, are what the estimate's
fixed READER_BYTES stands for.)
"""

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

from gpudedup.io.formats import file_format
from gpudedup.io.sizes import READER_BYTES, gzip_uncompressed_size, read_bytes_estimate

MEASURE = r"""
import sys, tracemalloc
from pathlib import Path
import pyarrow as pa
from gpudedup.io.read import read_corpus
paths = [Path(p) for p in sys.argv[1:]]
pool = pa.default_memory_pool()
arrow_before = pool.bytes_allocated()
tracemalloc.start()
corpus = read_corpus(paths, id_field="id")
corpus.units()  # the pipeline's first step: the text as one buffer
python_peak = tracemalloc.get_traced_memory()[1]
# The two high-water marks may come at different moments: their sum bounds what was live at once.
print(pool.max_memory() - arrow_before + python_peak)
"""


def records(start: int, count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(20_000)]
    return [{"id": start + i, "text": " ".join(rng.choice(words) for _ in range(80))} for i in range(count)]


def jsonl_bytes(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """About 20 MB of text in JSONL, gzipped JSONL and Parquet files."""
    root = tmp_path_factory.mktemp("sizes")
    (root / "a.jsonl").write_bytes(jsonl_bytes(records(0, 20_000, 1)))
    (root / "b.jsonl.gz").write_bytes(gzip.compress(jsonl_bytes(records(20_000, 20_000, 2)), 6))
    pq.write_table(pa.Table.from_pylist(records(40_000, 20_000, 3)), root / "c.parquet", compression="zstd")
    return root


@pytest.mark.parametrize("names", [["a.jsonl"], ["b.jsonl.gz"], ["c.parquet"], ["a.jsonl", "b.jsonl.gz", "c.parquet"]])
def test_the_read_estimate_covers_what_the_read_allocates_without_wasting_much(inputs, names):
    paths = [inputs / name for name in names]
    estimate = read_bytes_estimate([(p, file_format(p)) for p in paths])
    allocated = int(subprocess.run([sys.executable, "-c", MEASURE, *map(str, paths)], capture_output=True,
                                   text=True, check=True).stdout)
    assert allocated <= estimate, (allocated / 2**20, estimate / 2**20)
    # Beyond the fixed allowance for the readers' code, the estimate grows with the data as the
    # allocations do, not several times faster.
    assert estimate - READER_BYTES <= 2.5 * allocated, (allocated / 2**20, estimate / 2**20)


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


def test_the_signature_pass_of_a_small_corpus_charges_its_text_not_full_batches():
    """In memory too, the signature pass's estimate charges the batches that the corpus's text
    fills, so that a small corpus fits a budget that parallel_batches full batches would not."""
    from gpudedup.backends import get_backend
    from gpudedup.core.lsh import Banding
    from gpudedup.pipeline.signatures import HOST_BYTES_PER_BATCH_BYTE, batch_bytes, signature_pass_need
    from gpudedup.params import DedupParams

    backend, params, banding = get_backend("cpu"), DedupParams(), Banding(16, 6, "")
    rows, per_byte = 1_000 * (4 * 96 + 8 * 16 + 8), HOST_BYTES_PER_BATCH_BYTE["cpu"]
    assert signature_pass_need(1_000, 86_000, banding, params, backend) == rows + 86_000 * per_byte
    full = backend.parallel_batches * batch_bytes(params, backend) * per_byte
    assert signature_pass_need(1_000, 10**12, banding, params, backend) == rows + full


def test_a_budget_the_process_fills_before_the_run_is_named_as_such():
    """A budget below what the process holds once the input is read: the process fills it,
    not "the input alone", and the run needs nothing more yet."""
    import gpudedup
    from gpudedup.errors import MemoryLimitError

    with pytest.raises(MemoryLimitError, match=r"^max_memory=1 MiB: before the run, [\d,]+ MiB in use; the process "
                                               r"\(its libraries and the input read\) fills the budget"):
        gpudedup.dedup(["a b c d e f g", "a b c d e f h"], backend="cpu", max_memory="1M")


@pytest.mark.parametrize("cluster", [{"workers": 1}, {"scheduler": "tcp://127.0.0.1:9"}])
def test_a_budget_for_this_process_is_refused_for_a_cluster_s_run(tmp_path, cluster):
    """--max-memory is checked against this process's memory, which a cluster's workers do not
    use: asked of a run on a cluster, it is refused before any cluster starts or is reached,
    rather than left unchecked."""
    import gpudedup
    from gpudedup.errors import ParameterError

    (tmp_path / "a.txt").write_text("the quick brown fox jumps over the lazy dog\n")
    index = gpudedup.Index.create(tmp_path / "index")
    for run in (gpudedup.dedup, index.add):
        with pytest.raises(ParameterError, match=r"^max_memory= bounds a run in this process, but on a Dask cluster"):
            run(tmp_path / "a.txt", backend="cpu", max_memory="8G", work_dir=tmp_path / "work", **cluster)
        assert not (tmp_path / "work").exists()
    assert index.info()["documents"] == 0


def test_the_batches_in_flight_of_a_small_shard_are_its_text_at_most(inputs):
    """A shard whose text is less than the batches that can be in flight at once fills fewer
    of them: the estimate charges the text it has (bounded by what its table keeps), not
    parallel_batches full batches, so that a small --shard-bytes fits a --max-memory that full
    batches would not."""
    from gpudedup.backends import get_backend
    from gpudedup.pipeline.signatures import HOST_BYTES_PER_BATCH_BYTE, batches_in_flight_bytes
    from gpudedup.io.pieces import Piece
    from gpudedup.io.sizes import file_read_bytes, shard_read_bytes

    backend = get_backend("cpu")
    batch = 2**21
    full = batches_in_flight_bytes(backend, batch)
    assert full == backend.parallel_batches * batch * HOST_BYTES_PER_BATCH_BYTE["cpu"]
    assert batches_in_flight_bytes(backend, batch, 10_000) == 10_000 * HOST_BYTES_PER_BATCH_BYTE["cpu"]
    assert batches_in_flight_bytes(backend, batch, 10**12) == full
    path = inputs / "a.jsonl"
    whole = file_read_bytes(path, "jsonl")
    kept, _ = shard_read_bytes(path, "jsonl", Piece(0, path.stat().st_size // 10, 0), whole)
    text = sum(len(json.loads(line)["text"].encode()) for line in path.read_text().splitlines()[:2_000])
    assert text * 0.8 <= kept < whole[0] // 5  # a tenth of the file: about its text, bounded above
