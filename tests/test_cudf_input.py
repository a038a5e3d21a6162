"""cuDF input (io/cudf_reader.py): files and cuDF frames read straight to the GPU give the same
documents, and so the same results, as pyarrow on the host. Runs only where cuDF and a GPU are
installed (the gpu marker skips without a GPU; importorskip without cuDF)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpudedup
from gpudedup.io.cudf_reader import arrow_text_matches
from gpudedup.io.read import read_corpus

from test_kernel_backend import EDGE_TEXTS, sample_texts

pytestmark = pytest.mark.gpu
cudf = pytest.importorskip("cudf", reason="cuDF is not installed (pip install 'gpudedup[cudf]')")


def shard_table() -> pa.Table:
    """The documents the shards hold, in reading order (a.parquet, then b.jsonl)."""
    texts = sample_texts(400) + [text[:-9] for text in sample_texts(50)] + EDGE_TEXTS + [None]
    return pa.table({"text": texts, "id": [f"doc{i}" for i in range(len(texts))]})


@pytest.fixture
def shards(tmp_path):
    table = shard_table()
    pq.write_table(table.slice(0, 200), tmp_path / "a.parquet")
    with open(tmp_path / "b.jsonl", "w", encoding="utf-8") as out:
        for row in table.slice(200).to_pylist():
            out.write(json.dumps(row))
            out.write("\n")
    return tmp_path


def test_device_text_equals_the_host_text(shards):
    corpus = read_corpus([shards], id_field="id", use_cudf=True)
    assert corpus.device_text is not None
    data, offsets = corpus.device_text
    assert arrow_text_matches(corpus.table, "text", data, offsets)
    host = read_corpus([shards], id_field="id")
    assert corpus.ids.to_pylist() == host.ids.to_pylist()
    # And both are what the shards were written from, not only what the host reader makes of them.
    expected = shard_table()
    assert corpus.ids.to_pylist() == expected["id"].to_pylist()
    assert corpus.texts.to_pylist() == host.texts.to_pylist() == expected["text"].to_pylist()


def test_results_equal_with_and_without_cudf(shards, monkeypatch):
    with_cudf = gpudedup.dedup([shards], id_field="id", backend="gpu")
    monkeypatch.setattr(gpudedup.api, "cudf_installed", lambda: False)
    without = gpudedup.dedup([shards], id_field="id", backend="gpu")
    assert with_cudf.pairs.equals(without.pairs) and with_cudf.clusters.equals(without.clusters)
    np.testing.assert_array_equal(with_cudf.keep, without.keep)


def test_cudf_frame_input():
    texts = sample_texts(300) + [text[:-9] for text in sample_texts(40)]
    frame = cudf.DataFrame({"text": texts})
    result = gpudedup.dedup(frame, backend="gpu")
    reference = gpudedup.dedup(texts, backend="cpu")
    np.testing.assert_array_equal(result.keep, reference.keep)
    assert len(result.deduplicated) == int(reference.keep.sum())
