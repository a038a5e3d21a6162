"""The Dask run (pipeline/dask.py): a LocalCluster of two worker processes gives the output of the
single-process run, byte for byte, through the API (a Client, a scheduler address, or
workers=2) and the CLI; a work directory moves between single-process and Dask runs; errors
and interrupts end a workers run with one line."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpudedup
from gpudedup.errors import InputError, ParameterError
from gpudedup.io import layout
from gpudedup.pipeline.copyparts import CopyParts
from gpudedup.pipeline.pairs import IdenticalCopies

from stage_events import cli_process, finish, kill_then_resume, wait_for_stage, with_stage_events
from test_api import write_jsonl
from test_streaming import (assert_same_files, assert_same_results, empty_repeats_corpus, finished_work,
                            make_texts, mixed_corpus, rm, rules_corpus, sample_records, staged_run, write_shards)
from dask_messages import message_bytes
from output_support import kept_files, read_clusters, read_pairs
from test_shown import assert_same_shown

# Dask is in the dev extra: in CI a skip here fails the run (conftest.py).
distributed = pytest.importorskip("distributed", reason="Dask is not installed (pip install 'gpudedup[dask]')")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    records = sample_records()
    for i in (10, 700, 1400):  # identical copies across shards
        records[i]["text"] = records[3]["text"]
    return write_shards(tmp_path_factory.mktemp("dask") / "in", records, 6)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    return mixed_corpus(tmp_path_factory.mktemp("mixed"))


@pytest.fixture(scope="module")
def finished(mixed, tmp_path_factory) -> Path:
    return finished_work(mixed, tmp_path_factory.mktemp("finished"))


def broken_input(root: Path) -> Path:
    """Two small JSONL files, the first with a broken second line."""
    write_jsonl(root / "a.jsonl", [{"text": "one two three four five six"}])
    with open(root / "a.jsonl", "a", encoding="utf-8") as handle:
        handle.write("{broken\n")
    write_jsonl(root / "b.jsonl", [{"text": "seven eight nine ten eleven"}])
    return root


def cli_stderr_lines(stderr: str) -> list[str]:
    """stderr's lines, less distributed's warning that the port 8787 is taken (by a cluster of
    another process: not what these tests are about)."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    if any("UserWarning: Port 8787 is already in use" in line for line in lines):
        lines = [line for line in lines if not ("UserWarning: Port 8787" in line
                                                or line.startswith("Perhaps you already")
                                                or line.startswith("Hosting the HTTP server")
                                                or line.strip() == "warnings.warn(")]
    return lines


def written_by_workers(stream) -> int:
    """How many tasks of a task stream wrote a shard's kept rows (disk.write_file_rows)."""
    return sum(1 for task in stream.data if str(task["key"]).startswith("write_file_rows"))


# --- the same output as the single-process run ----------------------------------------------------


def test_a_two_worker_cluster_gives_the_single_process_output(client, corpus, tmp_path):
    single = gpudedup.dedup(corpus, backend="cpu", threshold=0.7)
    with distributed.get_task_stream(client) as stream:
        spread = gpudedup.dedup(corpus, backend="cpu", threshold=0.7, client=client, work_dir=tmp_path / "work",
                                output=tmp_path / "spread")
    assert spread.report["dask"]["workers"] == 2
    assert_same_results(single, spread)
    assert_same_shown(single._outcome.shown, spread._outcome.shown)
    single.write(tmp_path / "single")
    assert_same_files(tmp_path / "single", tmp_path / "spread", "parquet")
    # The workers wrote every shard's spill into the work directory, and each shard's kept rows
    # into its output file.
    assert len(list((tmp_path / "work" / "shards").iterdir())) == 6
    assert written_by_workers(stream) == 6
    # A result holds no client: written again after its run, this process writes the same files.
    with distributed.get_task_stream(client) as later_stream:
        spread.write(tmp_path / "later")
    assert written_by_workers(later_stream) == 0
    assert_same_files(tmp_path / "single", tmp_path / "later", "parquet")


@pytest.mark.parametrize("pairs_per_part", [None, 30])
def test_a_cluster_writes_the_single_process_parts_of_pairs_and_clusters(client, corpus, tmp_path, monkeypatch,
                                                                         pairs_per_part):
    """The pairs and clusters tables in parts of 5 rows, written by tasks: one process's files,
    the components found in one part or (few pairs a part: Dask's setting
    gpudedup.pairs-per-part) in rounds over several. The clusters, the pairs table and
    report.html's count of the pairs inside its largest clusters take their shuffles at any
    size. report.html's clusters are one process's, the client never reading every member of
    them: in the task stream, the documents it lists are read by a task per part of the
    clusters (part_shown), none of which hands it every member of a cluster (part_members)."""
    monkeypatch.setenv("GPUDEDUP_PART_ROWS", "5")
    gpudedup.dedup(corpus, backend="cpu", threshold=0.7, output=tmp_path / "single")
    with distributed.get_task_stream(client) as stream, pairs_a_part(pairs_per_part):
        gpudedup.dedup(corpus, backend="cpu", threshold=0.7, client=client, work_dir=tmp_path / "work",
                       output=tmp_path / "spread")
    for name in ("pairs", "clusters"):
        assert len(list((tmp_path / "spread" / name).iterdir())) > 2, name
    assert_same_files(tmp_path / "single", tmp_path / "spread", "parquet")
    assert "verified pairs inside it" in clusters_section(tmp_path / "spread")
    assert clusters_section(tmp_path / "single") == clusters_section(tmp_path / "spread")
    keys = " ".join(str(task["key"]) for task in stream.data)
    # The clusters by size, counted where the clusters are decided: by each range's task. The
    # pairs are named by a task per range; with few pairs a part the clusters are one range,
    # whose naming Dask fuses into the task of the shuffle before it.
    for task in ("decide_clusters", "pairs_inside_part", "part_shown", "sizes_of_clusters"):
        assert task in keys, task
    if pairs_per_part is not None:
        assert "named_end" in keys
    assert "part_members" not in keys, "a task handed the client every member of some clusters"
    assert ("large_star" in keys) == (pairs_per_part is not None)  # (one part's stars are the components)
    assert 'id="sampled"' in clusters_section(tmp_path / "spread")
    figure = [(tmp_path / side / "cluster_sizes.svg").read_text(encoding="utf-8") for side in ("single", "spread")]
    assert figure[0] == figure[1]


def pairs_a_part(count: Optional[int]):
    """Dask's setting of the most pairs a part of the components takes
    (components.PAIRS_PER_PART_SETTING) made ``count`` inside, as a user sets it (None: the
    default)."""
    import dask

    from gpudedup.pipeline.components import PAIRS_PER_PART_SETTING

    return contextlib.nullcontext() if count is None else dask.config.set({PAIRS_PER_PART_SETTING: count})


def clusters_section(out: Path) -> str:
    """report.html's sections of example documents: the largest clusters, the pairs just above
    the threshold and the sampled clusters."""
    page = (out / "report.html").read_text(encoding="utf-8")
    return page[page.index('<section id="clusters">'):page.index('<section id="stages">')]


def test_the_signature_filter_copy_grouping_and_components_run_on_the_workers(client, corpus, tmp_path):
    """On a cluster the client neither filters candidate pairs by their signatures, nor groups
    documents by their row hashes, nor finds the connected components and the clusters: tasks
    do these, reading signatures and hashes from the work directory, the components in parts
    of a few pairs (so that the rounds of pipeline/components.py run), the clusters by
    pipeline/clusterparts.py: each step's tasks are in the task stream, and the results
    (identical copies among them) are the single process's. That the client gathers no
    signature row meanwhile is counted in its memory (the tests of what the client holds,
    below: the peaks of its stages)."""
    single = gpudedup.dedup(corpus, backend="cpu", threshold=0.7)
    with distributed.get_task_stream(client) as stream, pairs_a_part(40):
        spread = gpudedup.dedup(corpus, backend="cpu", threshold=0.7, client=client, work_dir=tmp_path / "work")
    assert_same_results(single, spread)
    assert spread.report["results"]["identical_copies"] == single.report["results"]["identical_copies"] > 0
    keys = [str(task["key"]) for task in stream.data]
    for task in ("likely_part", "spill_part_documents", "check_part", "group_part", "check_groups", "part_stars",
                 "large_star", "small_star", "decide_clusters", "write_cluster_part"):
        assert any(task in key for key in keys), (task, sorted({k.split("-")[0] for k in keys}))


def test_the_candidate_pairs_and_their_verification_stay_on_the_workers(client, corpus, tmp_path):
    """The candidate pairs stay on the workers: two shuffles find them, keep each once and
    filter them by their signatures, and each partition's pairs that pass are a part in the
    work directory (pipeline/pairparts.py); their documents' sets are spilled by a shuffle on the
    shard, and a task per part verifies it into a part of verified pairs. The client turns no
    place into a row, checks no pair, and reads no part but the verified ones where a notebook
    asks for the pairs: in the task stream, tasks find, check and name the pairs and make the
    components, the pairs table and the report's figure and clusters from the parts; with the
    likely pairs' parts gone after the run, the result still gives every pair. The candidates'
    count (each pair once, though found in several bands and partitions), the checked pairs'
    count, the outputs (report.html's clusters included) and the results are the single
    process's."""
    from gpudedup.pipeline import pairparts

    single = gpudedup.dedup(corpus, backend="cpu", threshold=0.7, output=tmp_path / "single")
    with distributed.get_task_stream(client) as stream:
        spread = gpudedup.dedup(corpus, backend="cpu", threshold=0.7, client=client, work_dir=tmp_path / "work",
                                output=tmp_path / "spread")
    keys = " ".join(str(task["key"]) for task in stream.data)
    for task in ("likely_part", "spill_part_documents", "check_part", "part_labels", "on_pairs",
                 "write_pairs_part", "pairs_inside_part", "part_shown"):
        assert task in keys, task
    assert_same_files(tmp_path / "single", tmp_path / "spread", "parquet")
    assert "verified pairs inside it" in clusters_section(tmp_path / "spread")
    assert clusters_section(tmp_path / "single") == clusters_section(tmp_path / "spread")
    results, expected = spread.report["results"], single.report["results"]
    assert results["candidate_pairs"] == expected["candidate_pairs"]
    assert results["exactly_checked_pairs"] == expected["exactly_checked_pairs"]
    # The likely pairs' parts are a Parquet dataset, read here as a user would; then moved away.
    likely = tmp_path / "work" / "pairs" / pairparts.LIKELY
    assert len(list(likely.iterdir())) > 1 and pq.read_table(likely).num_rows == \
        results["exactly_checked_pairs"] - results["identical_copies"]  # (copies never were candidates)
    likely.rename(tmp_path / "likely")
    assert_same_results(single, spread)
    assert np.array_equal(np.sort(spread.checked_jaccard), np.sort(single.checked_jaccard))


@pytest.mark.timeout(90)  # two runs: about 11 s alone
def test_the_client_sends_no_array_inside_its_messages(client, tmp_path, monkeypatch):
    """A client may keep its last messages to the scheduler (distributed's low-level log, on
    by default), so an array sent inside a task's message would stay in its memory after the
    task is done, and a task graph of a document's worth of arrays per shard grows past
    distributed's warning size. A run sends the arrays of its tasks (a shard's rows, mask or
    pairs) to the workers apart (pipeline/daskops.py arrays_sent), and its messages carry
    references. Counted in every message the client sends the scheduler during a run and the
    writing of its result, over 1,000 and 4,000 documents that are all in clusters: the arrays
    in its messages (pickle's out-of-band buffers: the task graphs' empty metas and per-shard
    offsets, about 3 KB) grow by less than a byte per document added."""
    from distributed.protocol.serialize import Serialized

    def buffered(message) -> int:
        if isinstance(message, Serialized):
            return sum(memoryview(frame).nbytes for frame in message.frames[1:])
        if isinstance(message, dict):
            return sum(buffered(value) for value in message.values())
        if isinstance(message, (list, tuple)):
            return sum(buffered(value) for value in message)
        return 0

    messages: list = []
    send = client.scheduler_comm.send

    def kept(*sent):
        messages.extend(sent)
        return send(*sent)

    monkeypatch.setattr(client.scheduler_comm, "send", kept)
    held = {}
    for documents in (1000, 4000):
        messages.clear()
        spread = gpudedup.dedup(clustered_corpus(tmp_path / f"in{documents}", documents), id_field="id",
                                backend="cpu", client=client, work_dir=tmp_path / f"work{documents}",
                                output=tmp_path / f"out{documents}")
        assert len(messages) > 10 and spread.report["results"]["verified_pairs"] == documents // 2
        held[documents] = buffered(list(messages))
    assert held[4000] - held[1000] < 3000, held


def test_a_run_leaves_nothing_on_the_cluster(client, corpus, tmp_path):
    """What a run sends to the workers apart from its tasks (pipeline/daskops.py share and
    arrays_sent) and what it persists (the sorted pairs it writes) is released when the run is
    done, on a client made as docs/scale.md says (no log of its last messages, whose graphs
    would name them): no value is left on a long-lived cluster. Counted on the scheduler after
    two runs that write their outputs."""
    def held() -> int:
        return client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks))

    before = held()
    for run in range(2):
        result = gpudedup.dedup(corpus, backend="cpu", threshold=0.7, client=client, work_dir=tmp_path / f"w{run}",
                                output=tmp_path / f"out{run}")
        assert result.report["results"]["verified_pairs"] > 0
        del result
    gc.collect()
    deadline = time.monotonic() + 10
    while held() > before and time.monotonic() < deadline:  # (the releases are messages)
        time.sleep(0.2)
    assert held() <= before


def test_tasks_get_what_they_share_once_and_their_own_arrays_apart(client):
    """DaskExecutor.share sends what every task reads to every worker once (futures, one per
    value); the executor's map sends each task's arrays (also in a list) apart, as futures of
    their own, and leaves scalars, strings, other objects and the shared futures as they are;
    the tasks get the values."""
    from distributed import Future

    from gpudedup.pipeline.daskops import DaskExecutor
    from gpudedup.pipeline.daskops import arrays_sent

    executor = DaskExecutor(client)
    reader, alone = {"shards": list(range(100))}, {"only": "one task"}
    shared, = executor.share(reader)
    assert isinstance(shared, Future) and client.gather(shared) == reader
    first, second = np.arange(3), np.arange(4)
    sent = arrays_sent(client, [(shared, first, [first, 5], 1, "x", alone), (shared, second, [second], 2, "x", None)])
    assert sent[0][0] is shared and sent[1][0] is shared
    assert isinstance(sent[0][1], Future) and isinstance(sent[0][2][0], Future) and sent[1][1] is not sent[0][1]
    assert sent[0][2][1] == 5 and sent[0][3:] == (1, "x", alone) and sent[1][3:] == (2, "x", None)
    assert client.gather(sent[0][2][0]).tolist() == [0, 1, 2] and client.gather(sent[1][1]).tolist() == [0, 1, 2, 3]
    results = executor.map(describe, [(shared, np.arange(index), index) for index in range(20)], "a test")
    assert results == [(100, index, index) for index in range(20)]


def describe(reader: dict, array: np.ndarray, index: int) -> tuple:
    return len(reader["shards"]), int(array.shape[0]), index


def test_a_failing_map_raises_the_first_error_of_ours_in_input_order_else_one_cluster_error(client):
    """DaskExecutor.map: where tasks raise errors of ours, the first task's in input order
    (as one process running them in order meets it), whichever the cluster reported first;
    any other failure is one ClusterError that names the stage and says to resume."""
    from gpudedup.pipeline.daskops import DaskExecutor, in_temporary_work_dir
    from gpudedup.errors import ClusterError

    executor = DaskExecutor(client)
    with pytest.raises(InputError, match="task 3"):
        executor.map(fail_from, [(index, 3, 0.5) for index in range(8)], "a test")
    with pytest.raises(ClusterError, match="failed during a test .*OSError: a lost connection.*resume=True") as failed:
        executor.map(fail_from, [(index, 2, 0.0, OSError) for index in range(4)], "a test")
    # A run in a temporary work directory (workers without work_dir) has nothing to resume.
    temporary = str(in_temporary_work_dir(failed.value))
    assert "resume" not in temporary and temporary.startswith("the Dask cluster failed during a test (OSError: a lost")


def fail_from(index: int, first: int, pause: float, error: type = InputError) -> int:
    """Task: ``index``, or ``error`` where index >= first (the first failing one slowest, so
    that a later failure reaches the cluster first)."""
    if index >= first:
        time.sleep(pause if index == first else 0)
        raise error(f"task {index}") if error is InputError else error("a lost connection")
    return index


@pytest.mark.timeout(120)  # two runs over 12 and 48 small shards
def test_what_the_tasks_carry_grows_with_the_shards_not_their_square(client, tmp_path, monkeypatch):
    """Every task of a stage shares the shard reader (a description of every shard) and the
    per-shard offsets: sent inside each task, the bytes of the tasks grew with the square of
    the shards (for 100 and 400 shards of 20 documents, the client sent the scheduler 2.25 and
    37 MB, and the scheduler the workers 3.9 and 44 MB). They are sent once (pipeline/dask.py
    share). Counted: the bytes of every message the client sends the scheduler, and the
    scheduler the workers, in a run over 12 and over 48 files of the same documents; four times
    the shards may cost at most five times the bytes. Measured before: 172 KB to 1.58 MB to the
    scheduler, 389 KB to 2.48 MB to the workers; after: 68 to 223 KB, 290 KB to 1.13 MB."""
    sent: dict[str, list[int]] = {"to the scheduler": [], "to the workers": []}

    def counting(comm, name: str) -> None:
        send = comm.send

        def counted(*messages):
            sent[name].append(sum(message_bytes(message) for message in messages))
            return send(*messages)

        monkeypatch.setattr(comm, "send", counted)

    counting(client.scheduler_comm, "to the scheduler")
    for comm in client.cluster.scheduler.stream_comms.values():
        counting(comm, "to the workers")
    records = [{"id": f"doc-{i}", "text": text} for i, text in enumerate(make_texts(480, 15))]
    bytes_sent: dict[str, dict[int, int]] = {name: {} for name in sent}
    for shards in (12, 48):
        for messages in sent.values():
            messages.clear()
        spread = gpudedup.dedup(write_shards(tmp_path / f"in{shards}", records, shards), backend="cpu",
                                client=client, work_dir=tmp_path / f"work{shards}", output=tmp_path / f"out{shards}")
        assert len(spread.report["input"]["files"]) == shards and spread.report["results"]["verified_pairs"] > 0
        for name, messages in sent.items():
            bytes_sent[name][shards] = sum(messages)
    for name, by_shards in bytes_sent.items():
        assert 0 < by_shards[48] < 5 * by_shards[12], (name, by_shards)


def numpy_buffers_held() -> int:
    """The bytes of numpy buffers this process holds (tracemalloc, which must be tracing): the
    least of three counts 50 ms apart, since a buffer that one of Dask's threads in this
    process has in flight at one moment (a message being read) is not held (one CI run counted
    10.8 KB more at one stage's start, once)."""
    import tracemalloc

    counts = []
    for attempt in range(3):
        gc.collect()  # (a drawn figure is a cycle: garbage, not held)
        snapshot = tracemalloc.take_snapshot()
        counts.append(sum(trace.size for trace in snapshot.filter_traces(
            [tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)]).traces))
        time.sleep(0.05 if attempt < 2 else 0)
    return min(counts)


# Every pool set as Arrow's default while a run's client is measured (client_memory_at_stages):
# kept, since a buffer allocated from a pool frees itself through it, whenever that is.
MEASURING_POOLS: list = []


def client_memory_at_stages(client, monkeypatch, corpus: Path, work: Path, out: Path) -> tuple:
    """A run on ``client`` writing to ``out``, and what the client's memory held: (result,
    held, peaks). held: {stage: bytes}, the numpy buffers it held as each stage started and as
    the output was written ("written": as the run's write returns, before the suite's own
    checks read the kept rows). peaks: {stage: (traced, arrow)}, the most bytes it took at
    once from a stage's start to the next one's (the write's: until it returns), above what
    it held as the stage began: of every allocation tracemalloc traces (Python objects, numpy
    buffers), and of Arrow's default pool (a table read, ids cast). The signature pass's
    covers the client's input rules too."""
    import tracemalloc

    import pyarrow as pa

    from gpudedup import stages
    from gpudedup.results import result as result_module

    held: dict[str, int] = {}
    peaks: dict[str, tuple[int, int]] = {}
    arrow = pa.default_memory_pool()
    measured = {"stage": None, "pool": arrow, "traced": 0}

    def mark(name: str) -> None:
        if measured["stage"] is not None:
            peaks[measured["stage"]] = (tracemalloc.get_traced_memory()[1] - measured["traced"],
                                        measured["pool"].max_memory())
        held[name] = numpy_buffers_held()
        if name == "written":  # (what follows is the suite's: conftest.py's checks of the output)
            measured["stage"] = None
            return
        tracemalloc.reset_peak()
        measured["traced"] = tracemalloc.get_traced_memory()[0]
        measured["stage"], measured["pool"] = name, pa.proxy_memory_pool(arrow)  # (its peak: from now)
        MEASURING_POOLS.append(measured["pool"])
        pa.set_memory_pool(measured["pool"])

    write = result_module.write_outputs
    monkeypatch.setattr(stages, "announce_stage", mark)
    monkeypatch.setattr(result_module, "write_outputs", lambda *a, **k: (write(*a, **k), mark("written"))[0])
    tracemalloc.start(1)
    try:
        result = gpudedup.dedup(corpus, id_field="id", backend="cpu", client=client, work_dir=work, output=out)
    finally:
        tracemalloc.stop()
        pa.set_memory_pool(arrow)
        monkeypatch.setattr(stages, "announce_stage", lambda name: None)
        monkeypatch.setattr(result_module, "write_outputs", write)
    return result, held, peaks


def assert_grows_less(small: dict, large: dict, added: int) -> None:
    """Every stage's peaks (client_memory_at_stages) in the run over ``added`` more documents
    grow by less than PEAK_PER_DOCUMENT's bytes per document added, for each kind of memory."""
    assert list(small) == list(large)
    for stage in small:
        bounds = {**PEAK_PER_DOCUMENT, **PEAK_PER_DOCUMENT_AT.get(stage, {})}
        for kind, before, after in zip(("traced", "arrow"), small[stage], large[stage]):
            assert after - before < bounds[kind] * added, (stage, kind, before, after)


def unique_corpus(root: Path, documents: int, files: int = 8) -> Path:
    """``documents`` random texts of 40 words in ``files`` JSONL files (ids "doc-N"), unlike
    one another but for ten planted near-duplicate pairs and one identical copy: a corpus
    whose pairs and clusters stay the same however many documents it has."""
    rng = np.random.default_rng(documents)
    texts = [" ".join(f"w{word}" for word in rng.integers(0, 5000, 40)) for _ in range(documents)]
    for first in range(0, 20, 2):
        texts[first + 1] = texts[first] + " extra"
    texts[30] = texts[31]
    return corpus_files(root, texts, files)


def corpus_files(root: Path, texts: list[str], files: int) -> Path:
    """``texts`` dealt round ``files`` JSONL files in ``root`` (ids "doc-N", N the text's place)."""
    root.mkdir(parents=True)
    for file in range(files):
        write_jsonl(root / f"part{file}.jsonl", [{"id": f"doc-{i}", "text": texts[i]}
                                                   for i in range(file, len(texts), files)])
    return root


# The most a Dask run's client may take at once in a stage, above what it held as the stage
# began, per document added (client_memory_at_stages' peaks; assert_grows_less). Measured, the
# runs of 3,000 and 9,000 documents (2,000 and 6,000 in clusters) differ by up to 165 KB either
# way in tracemalloc's (what garbage waits for a collection), 41 bytes per document added; in
# Arrow's not at all before the write, and by 8 bytes per document in the write's (report.html
# reads the ids of the pairs it shows from their shards' ids, a shard's worth each). A
# signature row is 384 bytes (16 bands of 6 rows), a pair 16 or more, and every id of these
# corpora 12 to 16 as Arrow holds them.
PEAK_PER_DOCUMENT = {"traced": 100, "arrow": 1}
PEAK_PER_DOCUMENT_AT = {"write": {"arrow": 16}}


@pytest.mark.timeout(240)  # three runs, two under tracemalloc
def test_the_client_holds_nothing_per_document_between_stages(client, tmp_path, monkeypatch):
    """The client of a Dask run holds no array over the documents: not the input rules' rows,
    nor which documents take part in LSH, nor which are kept (the workers' tasks get their
    shards' share). Counted with tracemalloc: the numpy buffers the client holds as each stage
    starts, and after the result is written, in runs over 3,000 and 9,000 documents in the
    same 8 files with the same pairs (after a first run, unmeasured). They grow by less than 1
    byte per document added (a bool mask alone is 1 byte per document; the buffers held are
    the same permutations, per-shard offsets and pairs in both runs). Nor does it read them
    for a while within a stage: not the signature rows (the signature filter and the copies'
    grouping read them in tasks), nor every id (checked for repeats by tasks, which name the
    pairs and clusters too): the most it holds at once in each stage grows by less than
    PEAK_PER_DOCUMENT's bytes per document added (in Arrow's pool, by nothing before the
    write)."""
    small_corpus = unique_corpus(tmp_path / "in3000", 3000)
    # A first run fills what a process makes once (caches, plotting's colour maps), unmeasured.
    gpudedup.dedup(small_corpus, id_field="id", backend="cpu", client=client, work_dir=tmp_path / "first",
                   output=tmp_path / "first_out")
    runs, peaks = {}, {}
    for documents in (3000, 9000):
        corpus = small_corpus if documents == 3000 else unique_corpus(tmp_path / f"in{documents}", documents)
        result, runs[documents], peaks[documents] = client_memory_at_stages(
            client, monkeypatch, corpus, tmp_path / f"work{documents}", tmp_path / f"out{documents}")
        results = result.report["results"]
        assert (results["verified_pairs"], results["identical_copies"], results["removed_documents"]) == (11, 1, 11)
    small, large = runs[3000], runs[9000]
    assert list(small) == list(large) and {"candidates", "cluster", "write", "written"} <= set(small)
    for stage in small:
        assert large[stage] - small[stage] < 6000, (stage, small[stage], large[stage])
    assert_grows_less(peaks[3000], peaks[9000], 6000)


def clustered_corpus(root: Path, documents: int, files: int = 8, identical: bool = False) -> Path:
    """``documents`` random texts of 40 words in ``files`` JSONL files (ids "doc-N"), in
    near-duplicate pairs (a text, then it with a word added; identical: then a copy of it):
    every document in a cluster of two, half of them removed."""
    rng = np.random.default_rng(documents)
    texts = []
    for _ in range(documents // 2):
        text = " ".join(f"w{word}" for word in rng.integers(0, 5000, 40))
        texts += [text, text if identical else text + " extra"]
    return corpus_files(root, texts, files)


@pytest.mark.timeout(180)  # three runs, two under tracemalloc
@pytest.mark.parametrize("identical", [False, True], ids=["near", "identical"])
def test_the_client_holds_nothing_per_clustered_document(client, tmp_path, monkeypatch, identical):
    """The clusters of a Dask run are decided and kept by its tasks (pipeline/clusterparts.py):
    the client holds counts per part, not the documents in clusters, their numbers, ids or
    which are kept; the tasks that write the kept rows (a task per file, in the task stream)
    read which rows are removed from the parts, and the pairs and clusters tables are named
    and written by tasks. Nor, where the pairs are identical copies, the copies
    (pipeline/copyparts.py: grouped, checked and kept as parts by tasks; their places reach the
    candidates' shard tasks by tasks). Counted with tracemalloc as each stage starts and after
    the output is written, in runs of 2,000 and 6,000 documents that are all in clusters (after
    a first run, unmeasured): less than a byte more per clustered document added (held in the
    client, the clusters would be 17 bytes per clustered document, the removed rows 8 per
    removed one, and the ids and their ranks for the tables more; the copies 32 bytes per copy
    from the candidates stage on). Every document is in a candidate pair: the signature rows
    of the pairs, which the signature filter reads, stay with the tasks too, and so do the
    parts of pairs (the most the client holds at once in a stage grows by less than
    PEAK_PER_DOCUMENT's bytes per document added). The outputs are the single process's."""
    with distributed.get_task_stream(client) as stream:
        gpudedup.dedup(clustered_corpus(tmp_path / "in200", 200, identical=identical), id_field="id",
                       backend="cpu", client=client, work_dir=tmp_path / "first", output=tmp_path / "first_out")
    assert written_by_workers(stream) == 8
    runs, peaks = {}, {}
    for documents in (2000, 6000):
        corpus = clustered_corpus(tmp_path / f"in{documents}", documents, identical=identical)
        result, runs[documents], peaks[documents] = client_memory_at_stages(
            client, monkeypatch, corpus, tmp_path / f"work{documents}", tmp_path / f"out{documents}")
        results = result.report["results"]
        assert (results["clusters"], results["documents_in_clusters"], results["removed_documents"],
                results["identical_copies"]) == (documents // 2, documents, documents // 2,
                                                 documents // 2 if identical else 0)
    small, large = runs[2000], runs[6000]
    assert list(small) == list(large) and {"cluster", "write", "written"} <= set(small)
    for stage in small:
        assert large[stage] - small[stage] < 4000, (stage, small[stage], large[stage])
    assert_grows_less(peaks[2000], peaks[6000], 4000)
    single = gpudedup.dedup(tmp_path / "in6000", id_field="id", backend="cpu", output=tmp_path / "single")
    assert_same_files(tmp_path / "single", tmp_path / "out6000", "parquet")
    assert_same_results(single, result)


@pytest.mark.timeout(180)  # 74 small shards on 2 workers: about 15 s alone, more beside other work
def test_large_files_cut_into_pieces_on_a_cluster_give_the_single_process_output(client, tmp_path):
    """One JSONL and one Parquet file, each cut into many shards (io/pieces.py): the pieces are
    counted, signed and written by the workers, with the single process's results and files."""
    from test_pieces import cut_corpus

    inputs = cut_corpus(tmp_path / "in")
    single = gpudedup.dedup(inputs, backend="cpu", threshold=0.7)
    single.write(tmp_path / "single", format="jsonl")
    with distributed.get_task_stream(client) as stream:
        spread = gpudedup.dedup(inputs, backend="cpu", threshold=0.7, client=client, work_dir=tmp_path / "work",
                                shard_bytes=50_000, output=tmp_path / "spread", format="jsonl")
    assert_same_results(single, spread)
    assert_same_files(tmp_path / "single", tmp_path / "spread")
    keys = [str(task["key"]) for task in stream.data]
    assert sum(key.startswith("count_newlines") for key in keys) > 5  # the JSONL file's pieces, counted there
    assert sum(key.startswith("sign_shard") for key in keys) == len(list((tmp_path / "work" / "shards").iterdir())) > 10
    assert written_by_workers(stream) == 2  # one task per input file, over its pieces


def test_skip_on_a_cluster_leaves_out_what_the_in_memory_run_leaves_out(client, tmp_path):
    """Under on_error="skip" a cluster leaves out the files and repeated ids the in-memory run
    does. The ids are checked on the workers: in the task stream, a task per shard hashes its
    ids and a shuffle on the hashes finds the rows that share one (that the client reads no
    id but those rows' is counted in its memory: test_the_client_holds_nothing_per_document_between_stages)."""
    corpus = rules_corpus(tmp_path)
    memory = gpudedup.dedup(corpus, backend="cpu", id_field="id", on_error="skip")
    with distributed.get_task_stream(client) as stream:
        spread = gpudedup.dedup(corpus, backend="cpu", id_field="id", on_error="skip", client=client,
                                work_dir=tmp_path / "work")
    keys = [str(task["key"]) for task in stream.data]
    shards = len(list((tmp_path / "work" / "shards").iterdir()))
    assert sum(key.startswith("id_hash_rows") for key in keys) == shards - 1  # (but the file left out whole)
    assert any("hash_sharing_rows" in key for key in keys)
    assert_same_results(memory, spread)
    memory.write(tmp_path / "memory")
    spread.write(tmp_path / "spread")
    assert_same_files(tmp_path / "memory", tmp_path / "spread", "parquet")
    assert (tmp_path / "memory" / "errors.jsonl").read_bytes() == (tmp_path / "spread" / "errors.jsonl").read_bytes()


def test_a_local_cluster_without_a_work_dir_gives_a_result_whose_ids_can_be_read(corpus, tmp_path):
    """workers= without work_dir runs in a temporary work directory, gone when dedup returns:
    the result's ids (which a run with a work directory reads from its shards) and the
    identical copies (kept there as parts) were read before that."""
    single = gpudedup.dedup(corpus, backend="cpu", threshold=0.7)
    spread = gpudedup.dedup(corpus, backend="cpu", threshold=0.7, workers=2)
    assert spread.ids.equals(single.ids) and spread.all_pairs().equals(single.all_pairs())
    copies, expected = spread._outcome.copies, single._outcome.copies.held
    assert isinstance(copies, IdenticalCopies) and expected.first.shape[0] > 0  # (held here)
    for name in ("first", "member", "jaccard"):
        assert np.array_equal(getattr(copies.held, name), getattr(expected, name)), name
    # Its cluster has gone: report.html renders what the run counted, the single process's blocks.
    single.write(tmp_path / "single")
    spread.write(tmp_path / "spread")
    blocks = [(tmp_path / side / "report.html").read_text(encoding="utf-8").split('<section id="clusters">')[1]
              .split("</section>")[0] for side in ("single", "spread")]
    assert blocks[0] == blocks[1] and blocks[0].count('<div class="cluster">') == 5


def test_rows_left_out_without_shingles_on_a_cluster_give_the_in_memory_output(client, tmp_path):
    """As test_streaming's: every row the input rules leave out is empty (the candidate
    shuffle's places and the copies' positions are then the same, as where nothing is left
    out)."""
    corpus = empty_repeats_corpus(tmp_path / "in")
    options = dict(backend="cpu", threshold=0.5, ngram=2, id_field="id", on_error="skip")
    memory = gpudedup.dedup(corpus, **options)
    spread = gpudedup.dedup(corpus, **options, client=client, work_dir=tmp_path / "work")
    assert memory.pairs.num_rows == 1
    assert_same_results(memory, spread)


def test_a_repeated_id_on_a_cluster_stops_the_run_as_in_memory(client, tmp_path):
    """Under on_error="stop" the first repeated id in input order, with where it is used, as
    the in-memory run names it (the workers find the rows whose ids' hashes collide)."""
    from test_ids import repeated_id_files

    files = repeated_id_files(tmp_path / "in", lambda i: i % 7 + 3 * (i > 9))
    with pytest.raises(InputError) as memory:
        gpudedup.dedup(files, backend="cpu", id_field="id")
    with pytest.raises(InputError) as spread:
        gpudedup.dedup(files, backend="cpu", id_field="id", client=client, work_dir=tmp_path / "work")
    assert str(spread.value) == str(memory.value)
    assert "duplicate id 'd0': documents" in str(memory.value)


def test_a_scheduler_address_gives_the_in_memory_output(client, mixed, tmp_path):
    options = dict(shingle="char", ngram=4, keep="longest", threshold=0.6)
    memory = gpudedup.dedup(mixed, backend="cpu", **options)
    with distributed.get_task_stream(client) as stream:
        # output=: written while this call's connection to the scheduler is open, by the workers.
        spread = gpudedup.dedup(mixed, backend="cpu", scheduler=client.scheduler.address,
                                work_dir=tmp_path / "work-address", output=tmp_path / "s", format="jsonl", **options)
    assert spread.report["dask"]["workers"] == 2
    assert_same_results(memory, spread)
    memory.write(tmp_path / "m", format="jsonl")
    assert_same_files(tmp_path / "m", tmp_path / "s")
    assert written_by_workers(stream) == len(kept_files(tmp_path / "s")) > 1
    # A result written after its connection closed is written by this process, the same files.
    with distributed.get_task_stream(client) as later:
        spread.write(tmp_path / "later", format="jsonl")
    assert written_by_workers(later) == 0
    assert_same_files(tmp_path / "m", tmp_path / "later")


@pytest.mark.timeout(120)  # starts a cluster of its own
def test_the_cli_starts_a_local_cluster(corpus, tmp_path):
    """``python -m gpudedup`` in a process of its own: the workers, started by spawn, import that
    main module again, which must not run anything (gpudedup/__main__.py)."""
    reference = gpudedup.dedup(corpus, backend="cpu")
    result = subprocess.run([sys.executable, "-m", "gpudedup", "dedup", str(corpus), "-o", str(tmp_path / "out"),
                             "--backend", "cpu", "--workers", "2", "-q"], capture_output=True, text=True,
                            cwd=tmp_path, timeout=110)
    assert result.returncode == 0, result.stderr
    assert read_pairs(tmp_path / "out").equals(reference.pairs)
    assert read_clusters(tmp_path / "out").equals(reference.clusters)
    reference.write(tmp_path / "reference")
    assert_same_files(tmp_path / "reference", tmp_path / "out", "parquet")


@pytest.mark.timeout(90)  # five runs: 12-20 s alone
def test_a_work_dir_moves_between_the_local_scheduler_and_a_cluster(client, mixed, finished, tmp_path):
    """A work directory moves between Dask's local scheduler (a run without a cluster) and a
    cluster: both keep the same stages, their pairs in parts (WORK/stages/<name>/), so
    each resumes what the other finished and does again what is gone, its signed shards
    untouched: the same files every time."""
    work = tmp_path / "work-mixed"
    shutil.copytree(finished / "work", work)  # (finished on the local scheduler)
    stages = {"copies", "candidates", "pairs"}
    assert {path.name for path in (work / "stages").iterdir()} == stages
    rm(work / "shards" / "00003")
    rm(work / "stages" / "pairs")
    signed_before = shard_markers(work)
    gpudedup.dedup(mixed, backend="cpu", work_dir=work, resume=True, client=client,
                   batch_bytes=3000).write(tmp_path / "dask", format="jsonl")
    assert_same_files(tmp_path / "dask", finished / "reference")
    after = shard_markers(work)
    assert {name: after[name] for name in signed_before} == signed_before and "00003" in after
    assert {path.name for path in (work / "stages").iterdir()} == stages
    # The local scheduler resumes from the cluster's stages, and does them again where gone.
    staged_run(mixed, work, tmp_path / "local-resumed", resume=True)
    assert_same_files(tmp_path / "local-resumed", finished / "reference")
    rm(work / "stages" / "candidates")
    staged_run(mixed, work, tmp_path / "local", resume=True)
    assert_same_files(tmp_path / "local", finished / "reference")
    # And the cluster resumes from those: verification done again from the candidates.
    rm(work / "stages" / "pairs")
    gpudedup.dedup(mixed, backend="cpu", work_dir=work, resume=True, client=client,
                   batch_bytes=3000).write(tmp_path / "dask-again", format="jsonl")
    assert_same_files(tmp_path / "dask-again", finished / "reference")
    assert shard_markers(work) == after


def shard_markers(work: Path) -> dict[str, int]:
    """The modification time (ns) of each signed shard's files in ``work``, by shard."""
    return {shard.name: max(path.stat().st_mtime_ns for path in shard.iterdir())
            for shard in (work / "shards").iterdir()}


@pytest.mark.parametrize("pairs_per_part", [None, 5])
def test_the_identical_copies_found_by_tasks_are_the_single_process_copies(client, tmp_path, monkeypatch,
                                                                          pairs_per_part):
    """The identical copies on a cluster (pipeline/copyparts.py): grouped by a shuffle on the row
    hash, checked by a task per part of groups (in batches of a few documents; a member whose
    signature agrees by chance is no copy), kept as parts, and left out of LSH by their
    places, which reach the shards' tasks by ranges of shards, moved by Dask's set_index; the
    components in one part or (Dask's setting gpudedup.pairs-per-part) several. The copies,
    pairs, clusters, kept rows, report and report.html's largest clusters are the single
    process's."""
    from test_copies import copies_corpus, copies_review_corpus

    texts = [text or "" for seed in range(8) for text in copies_review_corpus(seed)] + copies_corpus(4, 15)
    corpus = corpus_files(tmp_path / "in", texts, 5)
    options = dict(id_field="id", backend="cpu", threshold=0.7, batch_bytes=200)
    single = gpudedup.dedup(corpus, output=tmp_path / "single", **options)
    with distributed.get_task_stream(client) as stream, pairs_a_part(pairs_per_part):
        spread = gpudedup.dedup(corpus, client=client, work_dir=tmp_path / "work", output=tmp_path / "spread",
                                **options)
    assert_same_results(single, spread)
    # report.html's largest clusters (of 16 documents: a dozen listed, "and 4 more"), as one process's.
    assert "and 4 more" in clusters_section(tmp_path / "spread")
    assert clusters_section(tmp_path / "single") == clusters_section(tmp_path / "spread")
    expected, found = single._outcome.copies.held, spread._outcome.copies
    assert isinstance(found, CopyParts)  # (in parts, not held)
    held = found.read()
    for name in ("first", "member", "jaccard"):
        np.testing.assert_array_equal(getattr(held, name), getattr(expected, name))
    assert expected.first.shape[0] > 40
    keys = " ".join(str(task["key"]) for task in stream.data)
    for task in ("group_part", "check_groups", "copy_rows", "sorted_rows"):
        assert task in keys, task


def test_dask_runs_with_work_dirs_of_the_same_name_do_not_share_tasks(client, mixed, tmp_path):
    bad = broken_input(tmp_path / "bad")
    memory = gpudedup.dedup(mixed, backend="cpu")
    # The first run's error is kept, as a notebook, a logger or a reference cycle keeps it.
    with pytest.raises(InputError) as held:
        gpudedup.dedup(bad, backend="cpu", client=client, work_dir=tmp_path / "one" / "work")
    try:
        spread = gpudedup.dedup(mixed, backend="cpu", client=client, work_dir=tmp_path / "two" / "work")
    finally:
        del held
        gc.collect()
    assert_same_results(memory, spread)


def test_dask_ids_do_not_depend_on_the_workers_directory(client, mixed, tmp_path, monkeypatch):
    monkeypatch.chdir(mixed.parent)  # ids relative to here: in/a.jsonl:1, ...
    memory = gpudedup.dedup(mixed, backend="cpu")
    before = client.run(os.getcwd)
    client.run(os.chdir, "/")  # as a `dask worker` started in another directory
    try:
        spread = gpudedup.dedup(mixed, backend="cpu", client=client, work_dir=tmp_path / "work-cwd")
    finally:
        for address, directory in before.items():
            client.run(os.chdir, directory, workers=[address])
    assert_same_results(memory, spread)


# --- errors and interrupts --------------------------------------------------------------------------


def test_bad_input_on_a_worker_stops_the_run_with_its_message(client, tmp_path):
    corpus = write_shards(tmp_path / "in", sample_records()[:200], 2)
    with open(corpus / "part-000.jsonl", "a", encoding="utf-8") as handle:
        handle.write("{not json\n")
    with pytest.raises(gpudedup.InputError, match="part-000.jsonl:"):
        gpudedup.dedup(corpus, backend="cpu", client=client, work_dir=tmp_path / "work")


def test_the_error_named_on_a_cluster_is_the_first_in_input_order(client, tmp_path):
    """The first file's bad line comes after 100,000 records, each checked on its own once the
    file is read line by line, so the second file's task fails first; the run still names the
    first file's line, as one process reading in order does."""
    records = "".join(json.dumps({"text": f"record {i} of many"}) + "\n" for i in range(100_000))
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text(records + "[1, 2]\n", encoding="utf-8")
    (tmp_path / "in" / "b.jsonl").write_text("[3]\n", encoding="utf-8")
    with pytest.raises(InputError) as single:
        gpudedup.dedup(tmp_path / "in", backend="cpu", work_dir=tmp_path / "work-single")
    with pytest.raises(InputError) as spread:
        gpudedup.dedup(tmp_path / "in", backend="cpu", client=client, work_dir=tmp_path / "work")
    assert "a.jsonl:100001" in str(single.value)
    assert str(spread.value) == str(single.value)


def test_cluster_options_are_checked(corpus, tmp_path):
    with pytest.raises(ParameterError, match="needs a work directory"):
        gpudedup.dedup(corpus, backend="cpu", scheduler="tcp://127.0.0.1:1")
    with pytest.raises(ParameterError, match="workers= must be an integer"):
        gpudedup.dedup(corpus, backend="cpu", workers=0)
    with pytest.raises(ParameterError, match="give one of"):
        gpudedup.dedup(corpus, backend="cpu", workers=2, scheduler="tcp://127.0.0.1:1", work_dir=tmp_path / "w")


@pytest.mark.timeout(120)  # a CLI run that starts a cluster of its own
def test_bad_input_with_workers_gives_one_line(tmp_path):
    broken_input(tmp_path / "in")
    run = cli_process(["dedup", "in", "-o", "out", "--backend", "cpu", "-q", "--workers", "2", "--work-dir", "work"],
                      tmp_path)
    stderr = finish(run)
    assert run.returncode == 2, stderr
    lines = cli_stderr_lines(stderr)
    assert len(lines) == 1 and lines[0].startswith("error: in/a.jsonl:2"), lines


@pytest.mark.timeout(120)  # CLI runs that start a cluster of their own
def test_a_bad_record_in_one_piece_of_a_run_without_a_work_directory_gives_one_line(tmp_path):
    """Workers and no --work-dir: the run works in a temporary folder. One piece of a file cut
    in many fails while the other pieces' tasks still write there; the run ends with the
    record's one line, and its temporary folder goes once the workers are gone."""
    lines = [json.dumps({"text": " ".join(f"w{(i * 7 + j) % 301}" for j in range(60))}) + "\n" for i in range(600)]
    lines.insert(301, '{"text": 5}\n')
    (tmp_path / "bad.jsonl").write_text("".join(lines), encoding="utf-8")
    (tmp_path / "tmp").mkdir()
    for _attempt in range(2):  # (a race with the tasks showed in most runs, not in every one)
        run = cli_process(["dedup", "bad.jsonl", "-o", "out", "--backend", "cpu", "-q", "--workers", "2",
                           "--shard-bytes", "7K"], tmp_path, {**os.environ, "TMPDIR": str(tmp_path / "tmp")})
        stderr = finish(run)
        assert run.returncode == 2, stderr
        assert cli_stderr_lines(stderr) == ["error: bad.jsonl:302: field 'text' is a number, expected a string or a "
                                            "list of token ids"], stderr[-3000:]
        assert [p.name for p in (tmp_path / "tmp").iterdir() if p.name.startswith("gpudedup-work-")] == []


@pytest.mark.timeout(120)  # a CLI run that starts a cluster of its own
@pytest.mark.parametrize("name, code, line", [("SIGINT", 130, "interrupted"), ("SIGHUP", 129, "terminated (SIGHUP)")])
def test_ctrl_c_or_a_closed_terminal_during_a_workers_run_gives_one_line(corpus, tmp_path, name, code, line):
    """The signal goes to the run's whole process group, as a terminal sends Ctrl-C and its
    hang-up: the run's workers and multiprocessing's resource tracker get it too, and none
    of them prints anything of its own."""
    events = tmp_path / "events.txt"
    run = cli_process(["dedup", str(corpus), "-o", str(tmp_path / "out"), "--backend", "cpu", "-q", "--workers", "2",
                       "--work-dir", str(tmp_path / "work"), "--batch-bytes", "20000"], tmp_path,
                      with_stage_events(events), own_group=True)
    # The workers' stages are announced too (they inherit the environment): a shard is being read.
    wait_for_stage(run, events, "read")
    os.killpg(run.pid, getattr(signal, name))
    stderr = finish(run)
    assert run.returncode == code, stderr
    assert cli_stderr_lines(stderr) == [f"{line}: nothing was written"], stderr[-3000:]


@pytest.mark.timeout(120)  # a CLI run that starts a cluster of its own
def test_ctrl_c_while_the_workers_start_gives_one_line(corpus, tmp_path):
    """Ctrl-C (to the whole process group) as the first worker process appears, while it is
    still importing: no worker prints a traceback of its own, the run ends with one line."""
    run = cli_process(["dedup", str(corpus), "-o", str(tmp_path / "out"), "--backend", "cpu", "-q", "--workers", "2",
                       "--work-dir", str(tmp_path / "work")], tmp_path, own_group=True)
    deadline = time.monotonic() + 60
    while not any(b"spawn_main" in command for command in group_commands(run.pid)):
        assert run.poll() is None and time.monotonic() < deadline, "no worker process started"
        time.sleep(0.005)
    os.killpg(run.pid, signal.SIGINT)
    stderr = finish(run)
    assert run.returncode == 130, stderr
    assert cli_stderr_lines(stderr) == ["interrupted: nothing was written"], stderr[-3000:]


def group_commands(group: int) -> list[bytes]:
    """The command lines of the processes of process group ``group`` (Linux's /proc)."""
    commands = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.getpgid(int(entry.name)) == group:
                commands.append((entry / "cmdline").read_bytes())
        except OSError:  # (gone meanwhile)
            continue
    return commands


@pytest.mark.timeout(240)  # six CLI runs in subprocesses
def test_a_client_killed_mid_run_resumes_to_the_same_output(client, corpus, tmp_path):
    """The client of a run on a cluster (the CLI with --scheduler: the cluster outlives it),
    killed (SIGKILL) as each stage after the signatures begins, each time resumed with --resume
    from its work directory: the finished output is the single process's, file for file."""
    options = ["--backend", "cpu", "-q", "--threshold", "0.7", "--format", "jsonl",
               "--scheduler", client.scheduler.address]
    gpudedup.dedup(corpus, backend="cpu", threshold=0.7).write(tmp_path / "single", format="jsonl")
    out = tmp_path / "out"
    killed = kill_then_resume(["dedup", str(corpus), "-o", str(out), "--work-dir", str(tmp_path / "work"), "--resume",
                               *options], tmp_path, tmp_path / "events",
                              [(stage, 1) for stage in ("copies", "candidates", "verify", "cluster", "write")], out)
    assert killed >= 4, f"{killed} of 5 runs were killed"
    assert_same_files(tmp_path / "single", out)


@pytest.mark.parametrize("pairs_count", [0, 60])
def test_the_pairs_table_sorted_and_written_by_tasks_is_the_one_process_table(client, tmp_path, monkeypatch,
                                                                               pairs_count):
    """dask.write_pairs_by_tasks (a task per place the pairs lie makes them a frame, two lookups
    in the clusters' parts name them, Dask sorts them, a task per part of the table writes it)
    against result._pairs_parts, the table one process makes of the same pairs: the same
    files, byte for byte, with ids whose order is not the rows' order, parts of 7 rows cut
    across the sorted partitions, an empty part among the stored ones, and no pair at all (one
    empty part, as one process writes)."""
    import pyarrow.compute as pc

    from gpudedup.pipeline.clusterparts import dask_clusters
    from gpudedup.pipeline.components import dask_component_labels
    from gpudedup.pipeline.dask import write_pairs_by_tasks
    from gpudedup.pipeline.daskops import DaskExecutor
    from gpudedup.pipeline.pairparts import VERIFIED, PairParts, VerifiedParts, write_part
    from gpudedup.io.write import write_parquet
    from gpudedup.pipeline.tables import NamedRows, pairs_parts

    monkeypatch.setenv("GPUDEDUP_PART_ROWS", "7")
    rng = np.random.default_rng(9)
    rows = np.sort(rng.choice(1000, 40, replace=False)).astype(np.int64)
    ids = pa.array([f"doc-{value}" for value in rng.permutation(40)], pa.large_string())
    rank = np.empty(40, np.int64)
    rank[pc.sort_indices(ids).to_numpy()] = np.arange(40)
    named = NamedRows(rows, ids, rank)
    chosen = sorted({tuple(sorted(rng.choice(rows, 2, replace=False).tolist())) for _ in range(pairs_count)})
    first = np.array([a for a, _ in chosen], np.int64)
    second = np.array([b for _, b in chosen], np.int64)
    jaccard = rng.random(first.shape[0])
    # Parts that interleave (each a third of the pairs, every third one), and an empty one.
    stored = [np.arange(first.shape[0])[start::3] for start in range(3)]
    stored.insert(1, np.zeros(0, np.int64))
    work = str(tmp_path / "work")
    for number, mine in enumerate(stored):
        write_part(work, VERIFIED, number, {"first": first[mine], "second": second[mine], "jaccard": jaccard[mine]})
    pairs = VerifiedParts(PairParts.of(work, VERIFIED, np.array([len(mine) for mine in stored], np.int64)))

    class RowIds:  # (disk.IdsAt's form: the ids of the 40 rows)
        type = pa.large_string()

        def take(self, asked: np.ndarray) -> pa.Array:
            return ids.take(pa.array(np.searchsorted(rows, asked)))

    labels = dask_component_labels(client, pairs.parts, 10_000, 1000)
    clustered = dask_clusters(client, labels, 1000, 4, work, np.ones(1000, np.int64), RowIds(), "first")
    (tmp_path / "tasks").mkdir()
    write_pairs_by_tasks(DaskExecutor(client), pairs, clustered, tmp_path / "tasks", pa.large_string())
    (tmp_path / "one").mkdir()
    for number, table in enumerate(pairs_parts(named, first, second, jaccard)):
        write_parquet(table, tmp_path / "one" / layout.part_name(number))
    written = sorted(path.name for path in (tmp_path / "one").iterdir())
    assert len(written) == max(1, -(-first.shape[0] // 7))
    assert sorted(path.name for path in (tmp_path / "tasks").iterdir()) == written
    for name in written:
        assert (tmp_path / "tasks" / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name


@pytest.mark.parametrize("bands, threads", [(1, 1), (1, 2), (2, 3), (2, 8), (3, 2), (16, 12)])
def test_a_partitions_candidate_codes_are_every_bands_bucket_pairs(bands, threads):
    """bucket_pair_codes, with its bands on threads and a band's buckets cut by key where the
    bands alone would leave threads idle, gives the multiset of pair codes that pairing each band's buckets
    in document order within the window gives (written here from Python dicts)."""
    import pandas as pd

    from gpudedup.pipeline.dask import bucket_pair_codes

    rng = np.random.default_rng(threads)
    window, span, documents = 3, np.uint64(1000), 400
    rows = pd.DataFrame({"band": np.repeat(np.arange(bands, dtype=np.int32), documents),
                         "key": rng.integers(0, 40, bands * documents).astype(np.uint64),
                         "row": np.tile(np.arange(documents, dtype=np.int64), bands)}).sample(frac=1, random_state=1)
    expected: list[int] = []
    for band in range(bands):
        buckets: dict[int, list[int]] = {}
        mine = rows[rows["band"] == band].sort_values("row")
        for key, row in zip(mine["key"].tolist(), mine["row"].tolist()):
            buckets.setdefault(key, []).append(row)
        for members in buckets.values():
            expected += [a * int(span) + b for i, a in enumerate(members) for b in members[i + 1:i + 1 + window]]
    codes = bucket_pair_codes(rows, window, span, threads)["code"].to_numpy()
    assert sorted(codes.tolist()) == sorted(expected)
    assert len(expected) > documents  # (buckets of several members: the window matters)


def test_a_scheduler_that_does_not_answer_and_too_many_workers_are_one_line(tmp_path):
    """An address no scheduler answers at is named in one ParameterError (after distributed's
    connect timeout, shortened here), and a local cluster of more workers than the machine
    can start (4 per core) is refused before any is started."""
    import dask

    data = tmp_path / "data.jsonl"
    data.write_text('{"text": "a b c d e f"}\n')
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}), \
            pytest.raises(ParameterError, match=r"cannot connect to the Dask scheduler at tcp://127\.0\.0\.1:1 \("):
        gpudedup.dedup(data, scheduler="tcp://127.0.0.1:1", work_dir=tmp_path / "work")
    most = 4 * (os.cpu_count() or 1)
    for workers in (most + 1, 10**20):
        with pytest.raises(ParameterError, match=f"workers= must be an integer from 1 to {most} "):
            gpudedup.dedup(data, workers=workers)
