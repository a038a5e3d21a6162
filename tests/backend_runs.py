"""Whole runs of the kernel backend (on a device, or compiled for the host:
kernel_host/host_backend.py) against the numpy backend over the same inputs: the written
pairs, clusters and kept rows must be the same bytes. tests/test_gpu.py runs them on a GPU,
tests/test_kernel_backend_modes.py on the host."""

from __future__ import annotations

from pathlib import Path

import gpudedup
from gpudedup import Index

from output_support import result_bytes
from test_streaming import sample_records

THRESHOLD = 0.7


def mode_records() -> list[dict]:
    """360 records of the shipped sample, 40 near copies of them and one identical copy."""
    records = sample_records()[:360]
    records += [{**r, "id": f"{r['id']}-near", "text": r["text"].replace("the", "teh", 1)} for r in records[:40]]
    records[100]["text"] = records[7]["text"]  # an identical copy
    return records


def assert_same_outputs(ours: gpudedup.DedupResult, reference: gpudedup.DedupResult, root: Path,
                        described: str) -> None:
    """The written pairs, clusters and kept rows are the same bytes, and something was found;
    ``described``: how the kernel backend's report begins."""
    assert ours.report["backend"].startswith(described)
    assert reference.report["backend"].startswith("numpy")
    assert reference.pairs.num_rows > 20
    ours.write(root / "ours")
    reference.write(root / "reference")
    assert result_bytes(root / "ours") == result_bytes(root / "reference")
    assert ours.report["results"] == reference.report["results"]


def index_add_outputs(shards: Path, root: Path, described: str) -> None:
    """An index made of the first of ``shards``' files (sorted), then the others added, on the
    kernel backend and on the numpy backend: the second add's outputs are the same bytes, and
    it found pairs with the indexed documents."""
    files = sorted(path for path in shards.iterdir() if path.is_file())
    results = {}
    for backend in ("gpu", "cpu"):
        index = Index.create(root / f"index-{backend}", threshold=THRESHOLD, shingle="word", ngram=5)
        index.add(files[0], id_field="id", backend=backend)
        results[backend] = index.add(files[1:], id_field="id", backend=backend, output=root / f"out-{backend}")
    assert results["gpu"].report["backend"].startswith(described)
    assert results["cpu"].report["index"]["indexed_documents_checked"] > 0
    assert result_bytes(root / "out-gpu") == result_bytes(root / "out-cpu")
    assert results["gpu"].report["results"] == results["cpu"].report["results"]
