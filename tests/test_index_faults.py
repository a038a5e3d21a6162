"""The persistent index under faults and concurrency (issue 14, point 4).

Kills: ``gpudedup index add``, ``index remove`` and ``index compact`` run as child processes
(tests/index_driver.py) that SIGKILL themselves at chosen steps of their work inside the index
-- every rename, the steps on both sides of each manifest swap, the middle of a segment file's
write, seeded random steps -- or that the test kills after seeded random delays (anywhere in
the run: imports, reading, hashing). Afterwards the index's committed state (manifest.json and
every file it names) equals, byte for byte, either the state before the command or the state an
uninterrupted run of the same command commits (the driver makes file names the same in every
run); which one is decided by the step: before the manifest's rename, the old one; after it, the
new one. ``Index(path).info()`` works, and the next ``add`` succeeds, leaves nothing but its
committed state, and keeps every document committed before it.

Concurrency: a writer paused just before its manifest swap (its new segment already renamed into
place) holds the lock; another ``add``, ``remove`` or ``compact`` exits 2 with one line naming
the holder, and readers (``index info``, ``index query``, ``dedup --against``) see the last
committed state; once the writer goes on, they see its commit.

No assertion depends on how long anything takes.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from gpudedup.index import Index
from gpudedup.index.files import writer_lock

from cli_support import error_line, invoke, write_jsonl
from index_support import assert_only_committed, bible_records, committed_state
from output_support import read_kept, result_tables

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX signals and flock")

DRIVER = Path(__file__).with_name("index_driver.py")
LIMIT = 300  # seconds a child may take: only turns a hang into a failure


def driver(root: Path, args: list, env: dict, stdin=subprocess.DEVNULL) -> subprocess.Popen:
    """One run of the driver in a process of its own."""
    return subprocess.Popen([sys.executable, str(DRIVER), str(root), *map(str, args)], cwd=root.parent,
                            stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env})


class Server:
    """The driver's fork server (tests/index_driver.py --serve): each run is a child process
    forked from it, gpudedup already imported."""

    def __init__(self, where: Path):
        self.where = where
        self.process = subprocess.Popen([sys.executable, str(DRIVER), "--serve"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        self.runs = 0

    def run(self, root: Path, args: list, env: dict, kill_after: float | None = None) -> tuple[int, str]:
        """(exit code or minus the signal, stderr) of ``gpudedup ARGS`` stopped as ``env`` and
        ``kill_after`` say (index_driver's module docstring)."""
        self.runs += 1
        stderr = self.where / f"stderr-{self.runs}.txt"
        request = {"root": str(root), "args": [str(a) for a in args], "env": env, "cwd": str(root.parent),
                   "stderr": str(stderr), "kill_after": kill_after}
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        assert answer, "the fork server has died"
        return json.loads(answer)["status"], stderr.read_text(encoding="utf-8")

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=LIMIT)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    started = Server(tmp_path_factory.mktemp("index_driver"))
    yield started
    started.close()


def steps_of(events: Path) -> list[str]:
    return events.read_text(encoding="utf-8").splitlines() if events.exists() else []


@dataclass
class Base:
    """An index with two segments and a tombstone file (index), the data of the next add, and
    the commands the kill tests run against copies of it."""

    root: Path
    index: Path
    new_data: Path
    state: dict

    def fresh(self, name: str) -> Path:
        copy = self.root / name
        shutil.copytree(self.index, copy)
        return copy

    def args(self, command: str, index: Path) -> list:
        if command == "add":
            return ["index", "add", index, self.new_data, "-o", self.root / f"out-{index.name}", "--id-field", "id",
                    "--tag", "c", "-q"]
        if command == "remove":
            return ["index", "remove", index, "--tag", "a"]
        return ["index", "compact", index]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Base:
    root = tmp_path_factory.mktemp("index_faults")
    records = bible_records()
    index = Index.create(root / "base", threshold=0.8, shingle="word", ngram=5)
    # Every 7th chapter: the parts share chapters of other translations (near-duplicates).
    index.add(pa.Table.from_pylist(records[0::7][:120]), id_field="id", tag="a")
    index.add(pa.Table.from_pylist(records[1::7][:120]), id_field="id", tag="b")
    assert index.remove(ids=[r["id"] for r in records[1::7][:5]]) == 5
    new_data = write_jsonl(root / "new.jsonl", records[2::7][:120])
    return Base(root, root / "base", new_data, committed_state(root / "base"))


@dataclass
class Reference:
    steps: list[str]
    after: dict  # the committed state an uninterrupted run leaves
    commit: int  # the number (from 1) of the step that renames the new manifest into place
    seconds: float


REFERENCES: dict[str, Reference] = {}


def reference(base: Base, server: Server, command: str) -> Reference:
    """One uninterrupted run of ``command``: its steps, the state it commits."""
    if command not in REFERENCES:
        index = base.fresh(f"reference-{command}")
        events = base.root / f"reference-{command}.txt"
        started = time.monotonic()
        status, stderr = server.run(index, base.args(command, index), {"TEST_INDEX_EVENTS": str(events)})
        seconds = time.monotonic() - started
        assert status == 0, stderr
        steps = steps_of(events)
        commits = [n for n, step in enumerate(steps, 1) if step.startswith("replace .tmp-") and
                   step.endswith("manifest.json")]
        assert len(commits) == 1, steps
        after = committed_state(index)
        assert after != base.state
        REFERENCES[command] = Reference(steps, after, commits[0], seconds)
    return REFERENCES[command]


def kill_steps(steps: list[str], commit: int, seed: int, writes_segment: bool) -> list[int]:
    """Every rename and the step after it, the steps around the manifest's rename, the middle
    of one segment file's write (a command that writes a segment must have such steps), and
    four seeded random steps (numbers from 1)."""
    rng = random.Random(seed)
    chosen = {commit - 1, commit, commit + 1}
    for number, step in enumerate(steps, 1):
        if step.startswith("replace "):
            chosen |= {number, number + 1}
    saves = [n for n, step in enumerate(steps, 1) if step.startswith("save ")]
    assert bool(saves) == writes_segment, f"segment file writes among the steps: {saves}"
    if saves:
        chosen.add(rng.choice(saves))
    chosen |= {rng.randrange(1, len(steps) + 1) for _ in range(4)}
    return sorted(n for n in chosen if 1 <= n <= len(steps))


def check_after_kill(base: Base, index: Path, ref: Reference, expected: str | None, label: str) -> None:
    """The committed state is the one before or the one after (``expected`` when known); info
    works; the next add succeeds, leaves only its committed state and keeps every document."""
    state = committed_state(index)
    found = "before" if state == base.state else "after" if state == ref.after else None
    assert found is not None, f"{label}: the committed state is neither the last nor the next one"
    if expected is not None:
        assert found == expected, f"{label}: {found}, expected {expected}"
    info = Index(index).info()
    tags = dict(info["tags"])
    documents = info["documents"]
    # The next add: cleans up what the killed run left, commits, loses nothing.
    extra = [{"id": f"next-{i}", "text": f"a text added after the kill number {i} " + "word " * i} for i in range(3)]
    result = Index(index).add(pa.Table.from_pylist(extra), id_field="id", tag="next")
    assert result.keep.all()
    assert_only_committed(index)
    after = Index(index).info()
    assert after["documents"] == documents + 3, label
    assert after["tags"] == {**tags, "next": tags.get("next", 0) + 3}, label


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["add", "remove", "compact"])
def test_sigkill_at_chosen_steps_leaves_the_last_committed_state(base, server, command):
    ref = reference(base, server, command)
    for number in kill_steps(ref.steps, ref.commit, seed=len(command), writes_segment=command != "remove"):
        index = base.fresh(f"{command}-step-{number}")
        status, stderr = server.run(index, base.args(command, index),
                                    {"TEST_INDEX_AT": str(number), "TEST_INDEX_ACTION": "kill"})
        label = f"{command} killed at step {number} ({ref.steps[number - 1]})"
        assert status == -signal.SIGKILL, f"{label}: exit {status}\n{stderr}"
        if ref.steps[number - 1].startswith("save "):  # killed half way through a segment's file
            written = index / ref.steps[number - 1].split()[1]
            assert written.is_file() and written.parent.name.startswith(".tmp-"), label
        check_after_kill(base, index, ref, "before" if number <= ref.commit else "after", label)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["add", "remove", "compact"])
def test_sigkill_after_random_delays(base, server, command):
    ref = reference(base, server, command)
    rng = random.Random(100 + len(command))
    # Anywhere from the start to a little past an uninterrupted run's length (then it has
    # finished, and the after state is the only one possible).
    for delay in sorted(rng.uniform(0.0, 1.1 * ref.seconds) for _ in range(6)):
        index = base.fresh(f"{command}-delay-{delay:.3f}")
        status, stderr = server.run(index, base.args(command, index), {}, kill_after=delay)
        assert status in (0, -signal.SIGKILL), f"exit {status}\n{stderr}"
        check_after_kill(base, index, ref, "after" if status == 0 else None,
                         f"{command} killed after {delay:.3f} s")


def ctrl_c_once_the_outputs_are_written(base: Base, index: Path, held_at: str, env: dict | None = None) -> str:
    """An add into ``index`` whose new segment's writer (beside the outputs: index/adding.py)
    is held at its first step that starts with ``held_at``, until its outputs are written and
    Ctrl-C has come; checks that it ends with the line of an add interrupted before its commit
    and leaves the index as it was (nothing of the segment either); its stderr."""
    out = base.root / f"out-{index.name}"
    process = driver(index, base.args("add", index), {"TEST_INDEX_AT": held_at, "TEST_INDEX_ACTION": "pause",
                                                      **(env or {})}, stdin=subprocess.PIPE)
    try:
        paused = process.stderr.readline()
        assert paused.startswith(f"paused {held_at}"), paused
        waited = time.monotonic()
        while not (out / "report.json").is_file():  # (the outputs appear at once: a rename)
            assert time.monotonic() - waited < LIMIT, "the outputs were not written while the segment waited"
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        # The main thread acts on the signal at its next bytecode; nothing outside the process
        # shows when it has, so the writer is released a while later.
        time.sleep(1.0)
    finally:
        process.stdin.write("\n")
        process.stdin.flush()
    _, stderr = process.communicate(timeout=LIMIT)
    said = f"the results were written to {out}; nothing was added to the index {index}: run the add again with " \
           "--overwrite"
    assert (process.returncode, stderr.splitlines()) == (130, [f"interrupted: {said}"])
    assert committed_state(index) == base.state
    assert_only_committed(index)  # (the segment it wrote, removed by the add itself)
    return stderr


@pytest.mark.timeout(120)
def test_ctrl_c_around_the_commit_of_an_add_says_whether_the_index_changed(base, server):
    """An add interrupted after its output is written says, besides that, whether its documents
    went into the index: before the commit they did not (run it again with --overwrite); a
    signal during the manifest's rename waits for it, and then they did."""
    ref = reference(base, server, "add")
    generation = json.loads((base.index / "manifest.json").read_text(encoding="utf-8"))["generation"]
    # Before the commit: the segment's writer held at its rename, after its last file.
    index = base.fresh("add-ctrl-c-before")
    ctrl_c_once_the_outputs_are_written(base, index, "replace segments/.tmp-seg-")
    check_after_kill(base, index, ref, "before", "add interrupted with its outputs written, before its commit")
    # During the manifest's rename: held until it is done.
    index = base.fresh(f"add-ctrl-c-{ref.commit}")
    status, stderr = server.run(index, base.args("add", index),
                                {"TEST_INDEX_AT": str(ref.commit), "TEST_INDEX_ACTION": "interrupt"})
    out = base.root / f"out-{index.name}"
    said = f"the documents were added to the index {index} (generation {generation + 1})"
    assert (status, stderr.splitlines()) == (130, [f"interrupted: the results were written to {out}; {said}"])
    check_after_kill(base, index, ref, "after", f"add interrupted at step {ref.commit} ({ref.steps[ref.commit - 1]})")


@pytest.mark.timeout(120)
def test_ctrl_c_stops_the_segment_written_beside_the_outputs_at_its_next_file(base, tmp_path):
    """A Ctrl-C while an add's new segment is written beside its outputs (index/adding.py)
    stops that writer before its next file, not after its last."""
    index = base.fresh("add-ctrl-c-segment")
    events = tmp_path / "events.txt"
    ctrl_c_once_the_outputs_are_written(base, index, "save segments/.tmp-seg-", {"TEST_INDEX_EVENTS": str(events)})
    steps = steps_of(events)
    at = next(n for n, step in enumerate(steps) if step.startswith("save segments/.tmp-seg-"))
    assert not [step for step in steps[at + 1:] if step.startswith("save ")], steps[at:]


# --- one writer at a time, readers see the last commit -------------------------------------------


def test_a_paused_writer_holds_the_lock_and_readers_see_the_last_commit(base, server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    records = bible_records()
    index = base.fresh("paused")
    indexed = Index(index).info()
    # A near-copy of a chapter the paused add commits (one the uninterrupted add kept), and one
    # of a chapter already indexed.
    ref = reference(base, server, "add")
    kept = read_kept(base.root / "out-reference-add").to_pylist()
    pending_id = kept[0]["id"]
    query_pending = kept[0]["text"] + " amen"
    query_indexed = records[0::7][0]["text"] + " amen"
    before_against = invoke("dedup", base.new_data, "-o", tmp_path / "against-before", "--against", index,
                            "--id-field", "id", "-q")
    assert before_against.exit_code == 0, before_against.output

    out = base.root / "out-paused"
    process = driver(index, ["index", "add", index, base.new_data, "-o", out, "--id-field", "id", "--tag", "c",
                             "-q"], {"TEST_INDEX_AT": "replace .tmp-", "TEST_INDEX_ACTION": "pause"},
                     stdin=subprocess.PIPE)
    try:
        paused = process.stderr.readline()
        # Paused before the new manifest's rename: its segment is in place, not yet named.
        assert paused.startswith("paused replace .tmp-") and paused.strip().endswith("manifest.json"), paused
        renamed = [step for step in ref.steps[:ref.commit] if step.startswith("replace segments/.tmp-seg-")]
        segment = renamed[-1].split()[1].replace(".tmp-", "")
        assert (index / segment / "ids.arrow").is_file(), sorted(index.rglob("*"))
        # While it holds the lock: other writers are refused, naming it.
        other = write_jsonl(tmp_path / "other.jsonl", [{"id": "other-1", "text": "something else entirely"}])
        for args in (["index", "add", index, other, "-o", tmp_path / "out-other", "--id-field", "id"],
                     ["index", "remove", index, "--tag", "a"], ["index", "compact", index]):
            refused = invoke(*args)
            assert refused.exit_code == 2, refused.output
            line = error_line(refused)
            assert f"process {process.pid} on " in line and "being changed" in line, line
            assert "Traceback" not in refused.output
        assert not (tmp_path / "out-other").exists()
        # Readers see the last committed state.
        shown = invoke("index", "info", index)
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.stdout)["documents"] == indexed["documents"]
        assert json.loads(shown.stdout)["generation"] == indexed["generation"]
        queried = invoke("index", "query", index, query_pending, query_indexed)
        assert queried.exit_code == 0, queried.output
        lines = [json.loads(line) for line in queried.stdout.splitlines()]
        assert lines[0]["matches"] == [] or pending_id not in {m["id"] for m in lines[0]["matches"]}
        assert records[0::7][0]["id"] in {m["id"] for m in lines[1]["matches"]}
        during = invoke("dedup", base.new_data, "-o", tmp_path / "against-during", "--against", index, "--id-field",
                        "id", "-q")
        assert during.exit_code == 0, during.output
        before = result_tables(tmp_path / "against-before")
        for name, table in result_tables(tmp_path / "against-during").items():
            assert table.equals(before[name]), name
        assert committed_state(index) == base.state
    finally:
        if process.poll() is None:
            process.stdin.write("\n")
            process.stdin.flush()
    _, stderr = process.communicate(timeout=LIMIT)
    assert process.returncode == 0, stderr
    # Its commit is seen by the next reader.
    assert Index(index).info()["documents"] > indexed["documents"]
    queried = invoke("index", "query", index, query_pending)
    assert pending_id in {m["id"] for m in json.loads(queried.stdout)["matches"]}


LOCK_HOLDER = """
import sys
from pathlib import Path
from gpudedup.index.files import writer_lock
with writer_lock(Path(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_a_lock_held_by_another_process_refuses_a_writer_with_one_line(base, tmp_path):
    index = base.fresh("held")
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(index)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        # The CLI in its own process, as a user runs it.
        refused = subprocess.run([sys.executable, "-c", "from gpudedup.console import main; main()", "index", "add",
                                  str(index), str(base.new_data), "-o", str(tmp_path / "out"), "--id-field", "id"],
                                 capture_output=True, text=True, timeout=LIMIT)
        assert refused.returncode == 2, refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), refused.stderr
        assert f"process {holder.pid} on " in lines[0] and str(index) in lines[0], lines[0]
        assert not (tmp_path / "out").exists()
        assert committed_state(index) == base.state
        with pytest.raises(Exception, match=f"process {holder.pid}"):
            with writer_lock(index):
                pass
    finally:
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(timeout=LIMIT)
    # Released with its process: the next writer gets the lock.
    with writer_lock(index):
        pass
