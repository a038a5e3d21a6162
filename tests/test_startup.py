"""A run's start-up: what a run on a few documents loads, and when the compiled kernels start.

Checked by the modules a fresh interpreter has loaded and by the route each step takes, not by
timing (scripts/bench_sizes.py times it). A run on little text takes the numpy reference
routes, bit for bit the kernels' results, and never imports numba (whose start costs some
tenths of a second however small the run); CuPy is not imported where no CUDA driver can load;
a run that writes its report and figures (SVG written directly) loads no plotting library.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from importlib import resources
from types import SimpleNamespace

import numpy as np
import pytest

import gpudedup
from gpudedup import compiled
from gpudedup.backends import cuda_driver_missing, get_backend
from gpudedup.compiled import KERNEL_SWITCH
from gpudedup.errors import ParameterError

# Not loaded by a run on one document that writes nothing (where no CUDA driver loads: cupy).
NOT_FOR_A_SMALL_RUN = ("numba", "llvmlite", "matplotlib", "scipy") + (("cupy",) if cuda_driver_missing() else ())


def loaded_after(code: str, **environment: str) -> list[str]:
    """The top-level modules a fresh interpreter has loaded after running ``code``."""
    script = (f"{code}\nimport json, sys\n"
              "print('LOADED=' + json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **environment})
    assert done.returncode == 0, done.stderr
    (line,) = [row for row in done.stdout.splitlines() if row.startswith("LOADED=")]
    return json.loads(line.removeprefix("LOADED="))


@pytest.fixture
def fresh_start(monkeypatch):
    """This process's account of the reference route's work, as a new process has it."""
    start = compiled._Start()
    monkeypatch.setattr(compiled, "_start", start)
    monkeypatch.delenv(KERNEL_SWITCH, raising=False)
    return start


@pytest.fixture
def numba_fallback(fresh_start, without_c_loops):
    """A new process's account of the reference route's work where the C loops were not built:
    numba's loops start once the reference route has read enough text."""
    return fresh_start


def test_a_run_on_one_document_loads_no_kernels_and_no_figures():
    loaded = loaded_after("import gpudedup\nbackend = gpudedup.dedup(['a b c d e f']).report['backend']\n"
                          "assert backend.startswith('numpy') and 'numba' not in backend", **{KERNEL_SWITCH: ""})
    assert "gpudedup" in loaded and "numpy" in loaded  # (the probe sees what a run loads)
    assert sorted(set(NOT_FOR_A_SMALL_RUN) & set(loaded)) == []


def test_a_run_with_pairs_on_the_c_loops_loads_neither_numba_nor_scipy():
    """Where the C loops were built (CI builds them), a run that verifies and clusters pairs
    shingles, signs and merges on them: numba's start and scipy.sparse's import are not paid."""
    loaded = loaded_after("import gpudedup\n"
                          "texts = ['the quick brown fox jumps over the lazy dog today'] * 2 + ['another text here']\n"
                          "texts[1] += '!'\n"
                          "result = gpudedup.dedup(texts, threshold=0.5)\n"
                          "assert result.pairs.num_rows == 1 and '+ C kernels' in result.report['backend']",
                          **{KERNEL_SWITCH: ""})
    assert "gpudedup" in loaded and sorted({"numba", "llvmlite", "scipy"} & set(loaded)) == []



# The runner over a work directory on Dask (pipeline/disk.py, dask.py and what only they use).
WORK_DIRECTORY_RUNNER = ("disk", "dask", "daskops", "shards", "shardids", "shardreader", "shardedrows", "pairparts",
                         "copyparts", "clusterparts", "clusterpairs", "components")


def test_a_run_in_memory_loads_neither_the_work_directory_runner_nor_the_index(tmp_path):
    """A run in memory, its outputs written with the removed rows, goes through the stages and
    results of the in-memory runner alone: no module of the work directory's runner, and no
    index module where it uses no index, is loaded."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(i), "text": text}) + "\n" for i, text in enumerate(
        ["the quick brown fox jumps over the lazy dog today", "the quick brown fox jumps over the lazy dog today!",
         "another text here"])))
    code = ("import sys, gpudedup\n"
            f"result = gpudedup.dedup({str(corpus)!r}, id_field='id', threshold=0.5)\n"
            f"result.write({str(tmp_path / 'out')!r}, write_removed=True)\n"
            "assert result.pairs.num_rows == 1\n"
            "print('LOADED=' + ','.join(sorted(m for m in sys.modules if m.startswith('gpudedup.'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (line,) = [row for row in done.stdout.splitlines() if row.startswith("LOADED=")]
    loaded = set(line.removeprefix("LOADED=").split(","))
    assert {"gpudedup.pipeline.memory", "gpudedup.pipeline.keptrows"} <= loaded  # (the probe sees the run)
    assert sorted(m for m in loaded if m.startswith("gpudedup.index")
                  or m.removeprefix("gpudedup.pipeline.") in WORK_DIRECTORY_RUNNER) == []


def test_a_cli_run_that_writes_its_output_loads_no_matplotlib_and_no_pandas(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(i), "text": text}) + "\n" for i, text in
                              enumerate(["the cat sat on the mat today", "the cat sat on the mat today!", "a dog"])))
    out = tmp_path / "out"
    loaded = loaded_after("import sys\nfrom gpudedup.console import main\n"
                          f"sys.argv = ['gpudedup', 'dedup', {str(corpus)!r}, '-o', {str(out)!r}, '-q', "
                          "'--backend', 'cpu', '--shingle', 'char', '--ngram', '3', '--threshold', '0.7']\n"
                          "try:\n    main()\nexcept SystemExit as leaving:\n    assert not leaving.code, leaving.code")
    assert {"s_curve.svg", "candidates_histogram.svg", "report.html"} <= {p.name for p in out.iterdir()}
    assert json.loads((out / "report.json").read_text())["results"]["clusters"] == 1
    assert "gpudedup" in loaded and "pyarrow" in loaded
    assert "matplotlib" not in loaded and "pandas" not in loaded


@pytest.mark.parametrize("command", ["query", "info", "remove", "compact"])
def test_the_index_commands_load_no_pandas(tmp_path, command):
    """A query, and the commands that only read or rewrite the index's own files, hand pyarrow no
    pandas object: they keep pandas (and its import) out, as a run over files does."""
    from gpudedup.index import Index

    Index.create(tmp_path / "idx", shingle="char", ngram=3).add(
        ["the cat sat on the mat today", "a dog ran in the park"], tag="a")
    arguments = {"query": ["the cat sat on the mat", "--backend", "cpu"], "info": ["--check"],
                 "remove": ["--tag", "a"], "compact": []}[command]
    loaded = loaded_after("import sys\nfrom gpudedup.console import main\n"
                          f"sys.argv = ['gpudedup', 'index', {command!r}, {str(tmp_path / 'idx')!r}, "
                          f"*{arguments!r}]\n"
                          "try:\n    main()\nexcept SystemExit as leaving:\n    assert not leaving.code, leaving.code")
    assert "gpudedup" in loaded and "pyarrow" in loaded
    assert "pandas" not in loaded


def test_a_run_with_clusters_loads_no_graph_library():
    """The components are numpy's (cluster.smallest_connected): SciPy's graph module and the
    linear algebra its import brings are not loaded by a run that clusters (on the reference
    routes; the compiled kernels' start imports SciPy's BLAS of its own)."""
    code = ("import sys, gpudedup\n"
            "result = gpudedup.dedup(['the cat sat on the mat today'] * 2 + ['a dog ran'], shingle='char', ngram=3)\n"
            "assert result.report['results']['clusters'] == 1\n"
            "graph = ('scipy.sparse.csgraph', 'scipy.linalg')\n"
            "print('GRAPH=' + ','.join(sorted(m for m in graph if m in sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, KERNEL_SWITCH: "numpy"})
    assert done.returncode == 0, done.stderr
    assert "GRAPH=\n" in done.stdout + "\n", done.stdout


def test_pandas_is_kept_out_only_of_runs_in_this_process_that_cudf_cannot_read(monkeypatch):
    from gpudedup.cli.common import pandas_wanted
    from gpudedup.io import cudf_reader

    monkeypatch.setattr(cudf_reader, "cudf_installed", lambda: False)
    assert not pandas_wanted(None, None, None, "cpu") and not pandas_wanted(None, None, None, "auto")
    assert pandas_wanted("work", None, None, "cpu")  # Dask's frames are pandas'
    assert pandas_wanted(None, "tcp://scheduler:8786", None, "cpu") and pandas_wanted(None, None, 2, "cpu")
    monkeypatch.setattr(cudf_reader, "cudf_installed", lambda: True)  # (cuDF brings pandas itself)
    assert pandas_wanted(None, None, None, "auto") and not pandas_wanted(None, None, None, "cpu")


def test_pyarrow_settled_without_pandas_still_converts_to_and_from_pandas():
    """A command in this process tells pyarrow there is no pandas (cli.common.settle_pyarrow);
    a conversion that needs pandas afterwards imports it and gives what it always gives."""
    loaded_after("from gpudedup.cli.common import settle_pyarrow\n"
                 "import sys\n"
                 "settle_pyarrow(pandas=False)\n"
                 "import pyarrow as pa\n"
                 "assert pa.array([1, 2]).to_numpy().tolist() == [1, 2] and 'pandas' not in sys.modules\n"
                 "assert pa.array([1, None]).to_pandas().isna().tolist() == [False, True]\n"
                 "import pandas as pd\n"
                 "table = pa.Table.from_pandas(pd.DataFrame({'a': [1.0, None]}), preserve_index=False)\n"
                 "assert table.column('a').null_count == 1\n"
                 "assert pa.array(pd.Series(['x', None])).to_pylist() == ['x', None]\n")


def test_the_kernels_start_once_the_reference_route_has_read_enough_text(fresh_start):
    assert not compiled.compiled_route()  # verification follows the signature passes
    assert not compiled.compiled_route(compiled.REFERENCE_WORK - 1)
    assert not compiled.compiled_route(0)
    assert compiled.compiled_route(1) and compiled.compiled_route(0)  # started: stays on


def test_a_pass_that_knows_its_text_starts_the_kernels_before_its_first_batch(fresh_start):
    compiled.expect_text(compiled.REFERENCE_WORK - 1)
    assert not compiled.compiled_route(0)
    compiled.expect_text(compiled.REFERENCE_WORK)
    assert compiled.compiled_route(0)


@pytest.mark.parametrize("kind", ["char", "word"])
def test_a_pass_counts_its_text_by_the_shingles_it_makes(numba_fallback, monkeypatch, kind):
    """The same text is more work for the reference route in char n-grams (one per code point)
    than in word n-grams (one per word): a pass over it starts the kernels for the one only."""
    monkeypatch.setattr(compiled, "REFERENCE_WORK", 1 << 20)
    text = ["the quick brown fox jumps over the lazy dog " * 1000] * 20  # (880 kB)
    backend = gpudedup.dedup(text, shingle=kind, backend="cpu").report["backend"]
    assert ("numba" in backend) == (kind == "char")
    assert compiled.text_work(1000, "char") > compiled.text_work(1000, "word")


def test_the_switch_asks_for_either_route_at_any_size(fresh_start, monkeypatch):
    monkeypatch.setenv(KERNEL_SWITCH, "numpy")
    assert not compiled.compiled_route(compiled.REFERENCE_WORK)
    monkeypatch.setenv(KERNEL_SWITCH, " Numba ")
    assert compiled.compiled_route(0)
    monkeypatch.setenv(KERNEL_SWITCH, "numpy")  # off again, started or not
    assert not compiled.compiled_route(0)


def test_a_switch_of_another_value_is_refused_in_one_line(fresh_start, monkeypatch):
    """A mistyped switch would leave the route to the work's size, unsaid: refused, naming it."""
    monkeypatch.setenv(KERNEL_SWITCH, "nmuba")
    with pytest.raises(ParameterError, match=rf"^{KERNEL_SWITCH} must be numpy, numba or c \(or unset\); got 'nmuba'$"):
        gpudedup.dedup(["the quick brown fox jumps over the lazy dog"], backend="cpu")


def test_a_large_enough_run_switches_to_the_kernels_with_the_same_results(numba_fallback, monkeypatch, tmp_path):
    """Part of the sample (about 0.7 MB) in a process whose earlier passes read enough text that
    this run's first batches run on the numpy reference and the rest on the kernels (and
    verification on them): the pairs, clusters, kept rows and every checked Jaccard of a run on
    the reference routes alone. A pass that reaches REFERENCE_WORK by itself starts the
    kernels before its first batch."""
    from importlib import resources

    import pyarrow.json as pajson

    from gpudedup.backends import cpu_kernels
    from gpudedup.core import shingling

    with resources.as_file(resources.files("gpudedup").joinpath("data/bible_sample.jsonl.gz")) as path:
        sample = pajson.read_json(path)
    # The first chapters in the order of their book and chapter, every translation of each
    # together: near-duplicates among 300 documents (about 0.7 MB).
    ids, every_text = sample.column("id").to_pylist(), sample.column("text").to_pylist()
    order = sorted(range(len(ids)), key=lambda row: (ids[row].split(" ", 1)[1], ids[row]))
    texts = [every_text[row] for row in order[:300]]
    monkeypatch.setenv(KERNEL_SWITCH, "numpy")
    reference = gpudedup.dedup(texts, backend="cpu", batch_bytes=64 << 10)
    monkeypatch.delenv(KERNEL_SWITCH)
    monkeypatch.setattr(compiled, "REFERENCE_WORK", 1 << 20)
    # (earlier passes of this process: what is left starts the kernels after about 0.3 MB of text)
    numba_fallback.reference_work = (1 << 20) - compiled.text_work(300_000, "word")
    taken: list[str] = []
    by_kernels, by_numpy = cpu_kernels.normalize_batch, shingling.utf8_shingle_hashes
    monkeypatch.setattr(cpu_kernels, "normalize_batch", lambda *args: taken.append("kernels") or by_kernels(*args))
    monkeypatch.setattr("gpudedup.backends.numpy_backend.utf8_shingle_hashes",
                        lambda *args: taken.append("numpy") or by_numpy(*args))
    mixed = gpudedup.dedup(texts, backend="cpu", batch_bytes=64 << 10)
    # (The batches run on threads: the step that starts the kernels may overtake one more
    # batch on the numpy route, so the order is checked at the ends.)
    assert taken[0] == "numpy" and taken[-1] == "kernels"
    assert "numba" in mixed.report["backend"] and "numba" not in reference.report["backend"]
    assert mixed.pairs.equals(reference.pairs) and mixed.pairs.num_rows > 10
    assert mixed.clusters.equals(reference.clusters)
    assert np.array_equal(mixed.keep, reference.keep)
    assert np.array_equal(mixed.checked_jaccard, reference.checked_jaccard)

    taken.clear()
    monkeypatch.setattr(compiled, "_start", compiled._Start())
    monkeypatch.setattr(compiled, "REFERENCE_WORK", 200 << 10)
    large = gpudedup.dedup(texts, backend="cpu", batch_bytes=64 << 10)
    assert set(taken) == {"kernels"} and large.pairs.equals(reference.pairs)


def test_an_evaluation_times_every_setting_on_one_route_after_a_warm_up_that_clusters(numba_fallback, monkeypatch):
    """An evaluation's settings are timed against each other (--criterion time): a grid whose
    signature passes together reach REFERENCE_WORK starts the kernels before its warm-up, so
    that no setting runs on the reference route beside others on the kernels, nor carries
    their start; the warm-up runs every stage a setting runs, pairs and clusters included."""
    from gpudedup.backends import cpu_kernels
    from gpudedup.evaluate import Setting, evaluate
    from gpudedup.evaluate import run as evaluation_run
    from gpudedup.io.python_inputs import strings_corpus

    words = np.random.default_rng(5).integers(0, 5000, size=(200, 150))  # (no two documents alike)
    texts = [" ".join(f"w{w}" for w in row) for row in words]
    corpus = strings_corpus(texts)
    one_pass = compiled.text_work(sum(len(t) for t in texts), "word")
    # (reached in the grid's third setting, or with the warm-up's two passes, in its first)
    monkeypatch.setattr(compiled, "REFERENCE_WORK", int(4.5 * one_pass))
    taken: list[str] = []
    by_kernels = cpu_kernels.normalize_batch
    monkeypatch.setattr(cpu_kernels, "normalize_batch", lambda *args: taken.append("kernels") or by_kernels(*args))
    runs: list[tuple[int, int]] = []  # (verified pairs, settings scored before it) of every run
    scored: list[list[str]] = []
    real_dedup = evaluation_run.dedup_corpus

    def dedup_corpus(*args, **kwargs):
        outcome = real_dedup(*args, **kwargs)
        runs.append((outcome.pairs.count, len(scored)))
        return outcome

    monkeypatch.setattr(evaluation_run, "dedup_corpus", dedup_corpus)

    def on_result(done, total, result):
        scored.append(taken[:])
        taken.clear()

    evaluate(corpus, [Setting(num_perm=k, threshold=0.7) for k in (64, 65, 66, 67)], backend="cpu",
             on_result=on_result)
    assert len(scored) == 4 and all(routes and set(routes) == {"kernels"} for routes in scored), scored
    warm_up = [pairs for pairs, before in runs if before == 0][:-1]  # (the last of them: setting 0)
    assert warm_up and all(pairs > 0 for pairs in warm_up), runs
    # Short texts at a high threshold: no near copy reaches it, the identical copies pair.
    runs.clear(), scored.clear()
    short = strings_corpus([" ".join(f"w{w}" for w in row[:12]) for row in words])
    evaluate(short, [Setting(num_perm=128, threshold=0.99)], backend="cpu", on_result=on_result)
    assert runs[0][0] > 0 and runs[0][1] == 0, runs


def test_a_backend_asked_for_its_kernels_starts_them(numba_fallback):
    backend = get_backend("cpu")
    assert "numba" not in backend.description
    assert backend.steps is not None and "numba" in backend.description
    assert compiled.compiled_route(0)


def test_compiling_is_said_once_and_only_without_cached_code(fresh_start, capsys):
    class Dispatcher:  # what announce_compiling reads of a numba dispatcher: its cache's index
        def __init__(self, index: dict):
            self._cache = SimpleNamespace(_cache_file=SimpleNamespace(_load_index=lambda: index))

    compiled.announce_compiling(Dispatcher({"signature": "cached"}))
    assert capsys.readouterr().err == ""
    compiled.announce_compiling(Dispatcher({}))
    compiled.announce_compiling(Dispatcher({}))
    assert capsys.readouterr().err.count("compiling the CPU kernels") == 1
    compiled.announce_compiling(object())  # numba's internals moved: nothing said, nothing raised


def test_numba_s_cache_index_is_read_as_announce_compiling_expects(tmp_path, monkeypatch, fresh_start):
    """A real kernel: its index is empty before its first call in a new cache folder, and holds
    the compiled signature after it (so the next process says nothing)."""
    import numba

    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path))
    source = tmp_path / "tiny_kernel.py"
    source.write_text("from gpudedup.compiled import kernel\n\n\n@kernel()\ndef plus_one(x):\n    return x + 1\n")
    spec = importlib.util.spec_from_file_location("tiny_kernel", source)
    assert spec is not None and spec.loader is not None
    tiny_kernel = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiny_kernel)

    assert tiny_kernel.plus_one._cache._cache_file._load_index() == {}
    assert tiny_kernel.plus_one(1) == 2
    assert tiny_kernel.plus_one._cache._cache_file._load_index() != {}


@pytest.mark.timeout(180)  # (the kernels compile: about 10 s on 2 cores)
def test_a_first_run_gives_its_compilation_as_a_stage_of_its_own(tmp_path):
    """A run whose kernels are not cached yet (a new NUMBA_CACHE_DIR) says so once, and its
    report gives the compilation's seconds as "compile", out of the other stages (which still
    add up with it to the run's time); the next run, cached, has no such stage."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "GPUDEDUP_CPU_KERNELS": "numba"}
    sample = resources.files("gpudedup") / "data" / "bible_sample.jsonl.gz"
    reports = []
    for run in ("first", "second"):
        done = subprocess.run([sys.executable, "-m", "gpudedup", "dedup", str(sample), "-o", str(tmp_path / run),
                               "--id-field", "id", "--quiet"], capture_output=True, text=True, env=env, timeout=170)
        assert done.returncode == 0, done.stderr
        reports.append((json.loads((tmp_path / run / "report.json").read_text()), done.stderr))
    (first, said), (second, said_again) = reports
    assert said.count("compiling the CPU kernels") == 1 and "compiling" not in said_again
    seconds = {name: stage["seconds"] for name, stage in first["stages"].items() if "seconds" in stage}
    assert seconds["compile"] > 0 and min(seconds.values()) >= 0
    assert abs(sum(seconds.values()) - first["total_seconds"]) < 0.01
    assert "compile" not in second["stages"]


@pytest.mark.timeout(180)  # (the kernels compile: about 10 s on 2 cores)
def test_a_cache_that_cannot_be_written_compiles_the_kernels_in_the_run(tmp_path):
    """The kernels' cache folder cannot be made (a file stands in its path; a full disk or a
    read-only home alike): one line says so, the kernels are compiled for the run alone, and
    the results are the reference route's, rather than a traceback half-way through numba's
    save of its cache."""
    (tmp_path / "file").write_text("not a folder")
    sample = resources.files("gpudedup") / "data" / "bible_sample.jsonl.gz"
    pairs = []
    for route, cache in (("numba", tmp_path / "file" / "cache"), ("numpy", tmp_path / "cache")):
        env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "GPUDEDUP_CPU_KERNELS": route}
        done = subprocess.run([sys.executable, "-m", "gpudedup", "dedup", str(sample), "-o", str(tmp_path / route),
                               "--id-field", "id", "--quiet"], capture_output=True, text=True, env=env, timeout=170)
        assert done.returncode == 0, done.stderr
        pairs.append((tmp_path / route / "pairs" / "part-00000.parquet").read_bytes())
        if route == "numba":
            assert done.stderr.startswith(f"gpudedup: the CPU kernels' cache {cache} is not usable (")
            assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert pairs[0] == pairs[1]
