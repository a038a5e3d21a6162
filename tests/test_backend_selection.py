"""Choosing a backend: auto / cpu / gpu, the messages when a GPU is asked for but absent, and the
kernel sources and the documentation shipped in the wheel."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

import gpudedup
from gpudedup.backends import get_backend, gpu_unavailable_reason
from gpudedup.backends.cuda_kernels import KERNEL_FILES, CupyKernels
from gpudedup.cli import app
from gpudedup.errors import BackendUnavailableError, ParameterError

REPO = Path(__file__).resolve().parents[1]
NO_GPU = gpu_unavailable_reason()
needs_no_gpu = pytest.mark.skipif(NO_GPU is None, reason="a GPU is present: the no-GPU paths cannot be seen")


@needs_no_gpu
def test_gpu_backend_without_a_gpu_says_why_and_how_to_install():
    with pytest.raises(BackendUnavailableError) as error:
        get_backend("gpu")
    message = str(error.value)
    assert NO_GPU in message
    assert "pip install 'gpudedup[gpu]'" in message and "cupy-cuda12x" in message
    assert "cupy-cuda13x" in message and "backend='cpu'" in message


@needs_no_gpu
def test_cli_gpu_backend_without_a_gpu_exits_2_without_traceback(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text('{"text": "a b c d e f"}\n')
    result = CliRunner().invoke(app, ["dedup", str(source), "-o", str(tmp_path / "out"), "--backend", "gpu"])
    assert result.exit_code == 2
    assert "gpudedup[gpu]" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


@needs_no_gpu
def test_auto_falls_back_to_numpy_and_says_so():
    backend = get_backend("auto")
    assert backend.name == "cpu"
    result = gpudedup.dedup(["a b c d e f", "a b c d e f"], backend="auto")
    assert result.report["backend"].startswith("numpy") and NO_GPU in result.report["backend"]


def test_a_backend_made_before_is_used_as_it_is(monkeypatch):
    """Every entry point takes a Backend object as well as a name (a notebook or a benchmark
    pays the backend's start-up once): dedup runs on that very object."""
    backend = get_backend("cpu")
    assert get_backend(backend) is backend
    used = []
    signatures = backend.signatures
    monkeypatch.setattr(backend, "signatures", lambda *args: used.append(1) or signatures(*args))
    texts = ["the quick brown fox jumps over the lazy dog"] * 2 + ["something else entirely here now"]
    by_object = gpudedup.dedup(texts, backend=backend)
    assert used and by_object.pairs.equals(gpudedup.dedup(texts, backend="cpu").pairs)
    assert by_object.pairs.num_rows == 1


def test_unknown_backend():
    with pytest.raises(ParameterError, match="auto, cpu, gpu"):
        get_backend("tpu")
    with pytest.raises(ParameterError, match="or a backend; got None"):
        get_backend(None)


def test_cupy_loader_launches_only_proven_tunables():
    class NoCupy:  # CupyKernels must refuse before it touches CuPy
        def __getattr__(self, name):
            raise AssertionError("CuPy was used")

    with pytest.raises(ValueError, match="not in kernel_tunables"):
        CupyKernels(NoCupy()).get("minhash.cu", "minhash_signatures_u64", {"BLOCK_SIZE": 96})


def test_wheel_ships_the_kernel_sources(tmp_path):
    # Built from a copy of what the build reads: an editable install's egg-info (its SOURCES.txt)
    # would add the files of a package the list in pyproject.toml leaves out, as package data.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "gpudedup", "kernels", "docs"):
        if (REPO / name).is_dir():
            # (no compiled module of an editable install either: the wheel's build must make its own)
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        else:
            shutil.copy2(REPO / name, source / name)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path),
         str(source)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("gpudedup-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for file_name in (*KERNEL_FILES, "hash_common.cuh"):
        assert f"gpudedup/kernels/{file_name}" in names
    # The loader finds them where the wheel puts them.
    assert "gpudedup/backends/cuda_kernels.py" in names
    # The CPU's C loops, compiled by the build (CI has a C compiler), and their types.
    assert [name for name in names if re.fullmatch(r"gpudedup/_cpu_kernels\..+\.so", name)], sorted(names)
    assert "gpudedup/_cpu_kernels.pyi" in names
    # Every module of the source tree (each package listed in pyproject.toml), the typing marker
    # and the licence.
    modules = {path.relative_to(REPO).as_posix() for path in (REPO / "gpudedup").rglob("*.py")}
    assert modules and modules | {"gpudedup/py.typed"} <= names, sorted(modules - names)
    (metadata,) = [name for name in names if name.endswith(".dist-info/METADATA")]
    assert metadata.replace("METADATA", "licenses/LICENSE") in names
    assert "License-Expression: Apache-2.0" in zipfile.ZipFile(wheel).read(metadata).decode()
    # The documentation, which `gpudedup docs` prints: every file of the repository's docs/, as it is.
    documents = sorted((REPO / "docs").glob("*.md"))
    assert documents and {f"gpudedup/docs/{path.name}" for path in documents} <= names
    for path in documents:
        assert zipfile.ZipFile(wheel).read(f"gpudedup/docs/{path.name}") == path.read_bytes(), path.name
    # ... and finds it where the wheel puts it (the unpacked wheel first on the path, away from
    # the repository, before the editable install's finder).
    unpacked = tmp_path / "unpacked"
    zipfile.ZipFile(wheel).extractall(unpacked)
    shown = subprocess.run([sys.executable, "-c", "from gpudedup.cli import docs_directory; print(docs_directory())"],
                           capture_output=True, text=True, timeout=60, cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": str(unpacked)})
    assert shown.returncode == 0, shown.stderr
    assert Path(shown.stdout.strip()) == unpacked / "gpudedup" / "docs"


def test_a_gpu_backend_that_cannot_start_falls_back_or_says_why(monkeypatch):
    import types

    import gpudedup.backends as backends

    class Broken:
        def __init__(self):
            raise RuntimeError("libnvrtc.so.12: cannot open shared object file")

    monkeypatch.setattr(backends, "gpu_unavailable_reason", lambda: None)
    monkeypatch.setitem(sys.modules, "gpudedup.backends.cupy_backend",
                        types.SimpleNamespace(CupyBackend=Broken))
    monkeypatch.setattr(backends, "cupy_backend", sys.modules["gpudedup.backends.cupy_backend"], raising=False)
    chosen = get_backend("auto")
    assert chosen.name == "cpu" and "libnvrtc" in chosen.description
    with pytest.raises(BackendUnavailableError, match="could not start.*libnvrtc"):
        get_backend("gpu")
