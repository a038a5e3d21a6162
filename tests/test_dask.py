"""The Dask run (distributed.py): a LocalCluster of two worker processes gives the output of the
single-process run, byte for byte, through the API (a Client, or workers=2) and the CLI."""

from __future__ import annotations

import os

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import gpudedup
from gpudedup.cli import app
from gpudedup.errors import ParameterError

from test_streaming import sample_records, write_shards

if os.environ.get("GPUDEDUP_REQUIRE_DASK"):
    import distributed  # CI: Dask is in the dev extra, so a missing one is a failure
else:
    distributed = pytest.importorskip("distributed", reason="Dask is not installed (pip install 'gpudedup[dask]')")


@pytest.fixture(scope="module")
def client():
    # Two worker processes of one thread: tasks cross process boundaries as on real clusters.
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as connected:
        yield connected


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    records = sample_records()
    for i in (10, 700, 1400):  # identical copies across shards
        records[i]["text"] = records[3]["text"]
    return write_shards(tmp_path_factory.mktemp("dask") / "in", records, 6)


def test_a_two_worker_cluster_gives_the_single_process_output(client, corpus, tmp_path):
    single = gpudedup.dedup(corpus, backend="cpu", threshold=0.7)
    spread = gpudedup.dedup(corpus, backend="cpu", threshold=0.7, client=client, work_dir=tmp_path / "work")
    assert spread.report["dask"]["workers"] == 2
    assert spread.pairs.equals(single.pairs) and spread.clusters.equals(single.clusters)
    np.testing.assert_array_equal(spread.keep, single.keep)
    for section in ("input", "results", "balance"):
        assert spread.report[section] == single.report[section], section
    single.write(tmp_path / "single")
    spread.write(tmp_path / "spread")
    for name in ("clusters.parquet", "pairs.parquet"):
        assert (tmp_path / "spread" / name).read_bytes() == (tmp_path / "single" / name).read_bytes(), name
    assert pq.read_table(tmp_path / "spread" / "deduplicated.parquet").equals(
        pq.read_table(tmp_path / "single" / "deduplicated.parquet"))
    # The workers wrote every shard's spill into the work directory.
    assert len(list((tmp_path / "work" / "shards").iterdir())) == 6


def test_the_cli_starts_a_local_cluster(corpus, tmp_path):
    reference = gpudedup.dedup(corpus, backend="cpu")
    result = CliRunner().invoke(app, ["dedup", str(corpus), "-o", str(tmp_path / "out"), "--backend", "cpu",
                                      "--workers", "2", "-q"])
    assert result.exit_code == 0, result.output
    assert pq.read_table(tmp_path / "out" / "pairs.parquet").equals(reference.pairs)
    assert pq.read_table(tmp_path / "out" / "clusters.parquet").equals(reference.clusters)


def test_bad_input_on_a_worker_stops_the_run_with_its_message(client, tmp_path):
    corpus = write_shards(tmp_path / "in", sample_records()[:200], 2)
    with open(corpus / "part-000.jsonl", "a", encoding="utf-8") as handle:
        handle.write("{not json\n")
    with pytest.raises(gpudedup.InputError, match="part-000.jsonl:"):
        gpudedup.dedup(corpus, backend="cpu", client=client, work_dir=tmp_path / "work")


def test_cluster_options_are_checked(corpus, tmp_path):
    with pytest.raises(ParameterError, match="needs a work directory"):
        gpudedup.dedup(corpus, backend="cpu", scheduler="tcp://127.0.0.1:1")
    with pytest.raises(ParameterError, match="workers must be an integer"):
        gpudedup.dedup(corpus, backend="cpu", workers=0)
    with pytest.raises(ParameterError, match="give one of"):
        gpudedup.dedup(corpus, backend="cpu", workers=2, scheduler="tcp://127.0.0.1:1", work_dir=tmp_path / "w")


def test_a_scheduler_address_gives_the_same_output(client, corpus, tmp_path):
    single = gpudedup.dedup(corpus, backend="cpu")
    spread = gpudedup.dedup(corpus, backend="cpu", scheduler=client.scheduler.address, work_dir=tmp_path / "work")
    assert spread.report["dask"]["workers"] == 2
    assert spread.pairs.equals(single.pairs) and spread.clusters.equals(single.clusters)
