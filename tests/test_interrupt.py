"""Runs killed at any moment: real ``gpudedup dedup`` processes get SIGINT, SIGTERM or SIGKILL
at seeded random points spread over the whole run, the write included, with and without a
previous complete output (``--overwrite``). A point is an event of the run, not a delay: the
moment its signal handlers are in place, the start of one of its stages (each stage announces
itself, gpudedup/stages.py), or its staging directory appearing; the test waits for it, then
signals. So the points fall where they were chosen on a fast machine and a slow one alike.

After every kill the output directory is absent, the previous complete output byte for byte,
or a new complete output (every file, a report.json that parses) from a run that exited 0,
said that the results were written (a signal during the commit), or was ended silently by
the signal during Python's own exit after the command had finished. After SIGINT and SIGTERM
the process exits with one line on stderr and no traceback, code 130 or 143, and leaves
nothing beside the output. After SIGKILL only a hidden ``.<out>.tmp-<host>-<pid>-<random>``
staging directory may be left, which the next run writing that output removes. Chosen points
(the last file staged, the commit, a __del__, a module being imported) are hit
deterministically by hooks in the wrappers; the writer's pieces are tested in process.

The runs go through a small wrapper around ``gpudedup.cli.main`` (gpudedup/interrupts.py
handles the signals) that can send a signal at a chosen point. No assertion depends on how
long anything takes: the limits of stage_events.py only turn a hang into a failure.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Optional

import pytest

from gpudedup.io import commit
from gpudedup.locks import folder_held
import gpudedup.interrupts as interrupts
from gpudedup.io.staging import host_tag, remove_stale_staging, staging_pattern, temporary_work_dir

from stage_events import finish, stages_begun, wait_for_stage, wait_until, with_stage_events

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX signals")

WRAPPER = r'''
import os, signal, sys
import gpudedup.cli as cli

hook, hook_signal = os.environ.get("TEST_SIGNAL_IN"), os.environ.get("TEST_SIGNAL")
if os.environ.get("TEST_SLOW_TIMER"):  # as under heavy load: the main thread gets the CPU back
    import threading                     # only after a timer thread it started has fired
    class SlowStart(threading.Timer):
        def start(self):
            super().start()
            self.finished.wait()
    threading.Timer = SlowStart
if hook == "__del__":  # a signal handled inside a __del__ (as the first file is written)
    import gpudedup.results.result as api  # the module that writes a run's files
    class Dropped:
        def __del__(self):
            os.kill(os.getpid(), getattr(signal, hook_signal))
            for _ in range(10000):  # the handler runs here, inside __del__
                pass
    import time
    real_write_parquet = api.write_parquet
    def write_parquet(*args, **kwargs):
        Dropped()
        # The signal comes back a little later: wait for it here, before this file is written,
        # so that the run stops at one known point (a lost signal lets the run finish).
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            time.sleep(0.001)
        return real_write_parquet(*args, **kwargs)
    api.write_parquet = write_parquet
elif hook == "after_commit":  # the signal is handled after the commit, on the way out of the write
    import gpudedup.io.commit as commit, gpudedup.stages as stages
    committed = []
    real_replace, real_peak = commit.replace_dir, stages._read_peak_rss_bytes
    def replace_dir(*args, **kwargs):
        real_replace(*args, **kwargs)
        committed.append(True)
    def peak():  # the write stage's exit reads the peak memory once the output is in place
        if len(committed) == 1:
            committed.append(True)
            os.kill(os.getpid(), getattr(signal, hook_signal))  # its handler runs right here
        return real_peak()
    commit.replace_dir, stages._read_peak_rss_bytes = replace_dir, peak
elif hook == "exit_entry":  # the signal is handled as the command ends (its last steps)
    import gpudedup.interrupts as interrupts
    ends = (cli.user_errors.done.__code__, cli.user_errors.__exit__.__code__)
    def profile(frame, event, arg):
        # As a signal that arrives after the command body's last eval-breaker check (a few
        # bytecodes, or longer when a collection or a large free happens there): Python runs
        # its handler at the first instruction of the next call, guard.done() or __exit__.
        if event == "call" and frame.f_code in ends and interrupts._phase == "running":
            sys.setprofile(None)
            os.kill(os.getpid(), getattr(signal, hook_signal))
    sys.setprofile(profile)
elif hook:  # the run sends itself a signal at a chosen point of the write
    import gpudedup.results.result as api, gpudedup.io.commit as commit  # result.py writes a run's files
    module = api if hook == "write_json" else commit
    real = getattr(module, hook)
    def signalling(*args, **kwargs):
        if hook == "write_json":
            real(*args, **kwargs)  # report.json, the last file, is in the staging directory
            os.kill(os.getpid(), getattr(signal, hook_signal))
        else:
            os.kill(os.getpid(), getattr(signal, hook_signal))  # held back during the commit
            real(*args, **kwargs)
    setattr(module, hook, signalling)

import gpudedup.interrupts
gpudedup.interrupts.install_signal_handlers()  # as the entry point (console.py) does before cli.main
sys.stderr.write("ready\n")
sys.stderr.flush()
sys.exit(cli.main())
'''


def output_names() -> list[str]:
    """The files a dedup run over corpus.jsonl writes, by their paths under its output."""
    return sorted([".gpudedup-output", "candidates_histogram.svg", "cluster_sizes.svg", "clusters/part-00000.parquet",
                   "deduplicated/corpus.parquet", "pairs/part-00000.parquet", "report.html", "report.json",
                   "s_curve.svg"])


# --- the runs -----------------------------------------------------------------------------------


def build_corpus(path: Path, copies: int, rows: int | None = None) -> Path:
    """The bundled Bible sample ``copies`` times, each copy with a few more words reversed per
    chapter (so copies are near-duplicates of one another at falling similarity)."""
    sample = resources.files("gpudedup").joinpath("data/bible_sample.jsonl.gz")
    with resources.as_file(sample) as source, gzip.open(source, "rt", encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle][:rows]
    rng = random.Random(0)
    with open(path, "w", encoding="utf-8") as out:
        for copy in range(copies):
            for record in records:
                words = record["text"].split()
                for _ in range(1 + 3 * copy):
                    i = rng.randrange(len(words))
                    words[i] = words[i][::-1]
                out.write(json.dumps({"id": f"{copy}:{record['id']}", "text": " ".join(words)}) + "\n")
    return path


@dataclass(frozen=True)
class KillPoint:
    """Where a run gets its signal: ``start`` (at once, before Python has started: SIGKILL
    only), ``ready`` (its handlers are in place), ``staging`` (its staging directory appeared,
    if the test sees it before the run ends), or the start of the ``occurrence``-th
    ``stage``."""

    stage: str
    occurrence: int = 1

    def __str__(self) -> str:
        return self.stage if self.stage in ("start", "ready", "staging") else f"{self.stage} #{self.occurrence}"


@dataclass
class Run:
    returncode: int
    stderr: str  # without the wrapper's "ready" line
    alive_at_signal: bool
    writing: bool = False  # its staging directory existed when the signal was sent
    stages: list[str] = field(default_factory=list)  # the stages it began


class Runner:
    def __init__(self, root: Path, corpus: Path):
        self.root, self.corpus = root, corpus
        self.script = root / "run_gpudedup.py"
        self.script.write_text(WRAPPER, encoding="utf-8")

    def command(self, out: Path, overwrite: bool) -> list[str]:
        return [sys.executable, str(self.script), "dedup", str(self.corpus), "-o", str(out), "--id-field", "id",
                "--batch-bytes", "32768", "-q"] + (["--overwrite"] if overwrite else [])

    def events(self, out: Path) -> Path:
        """The stage events file of a run writing ``out`` (apart from what runs leave beside it)."""
        return self.root / "events" / f"{out.name}.txt"

    def start(self, out: Path, overwrite: bool, env: Optional[dict] = None) -> subprocess.Popen:
        return subprocess.Popen(self.command(out, overwrite), cwd=self.root, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                env=with_stage_events(self.events(out), env))

    def run(self, out: Path, overwrite: bool, env: Optional[dict] = None) -> Run:
        process = self.start(out, overwrite, env)
        stderr = finish(process)
        return Run(process.returncode, strip_ready(stderr), False, stages=stages_begun(self.events(out)))

    def kill(self, out: Path, overwrite: bool, signum: int, point: KillPoint) -> Run:
        """Start a run and send it ``signum`` at ``point``."""
        process = self.start(out, overwrite)
        if point.stage != "start":
            assert process.stderr.readline() == "ready\n"
        if point.stage == "staging":  # a short write may come and go between two looks: then none
            wait_until(lambda: bool(staging_dirs(out)), process, "made its staging directory")
        elif point.stage not in ("start", "ready"):
            wait_for_stage(process, self.events(out), point.stage, point.occurrence)
        alive = process.poll() is None
        writing = bool(staging_dirs(out))
        if alive:
            process.send_signal(signum)
        stderr = finish(process)
        return Run(process.returncode, strip_ready(stderr), alive, writing, stages_begun(self.events(out)))


def staging_dirs(out: Path) -> list[Path]:
    return list(out.parent.glob(f".{out.name}.tmp-*"))


def strip_ready(stderr: str) -> str:
    return stderr[len("ready\n"):] if stderr.startswith("ready\n") else stderr


def snapshot(path: Path) -> dict:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def output_state(out: Path, previous: dict | None) -> str:
    """'absent', 'previous' (byte for byte) or 'new' (complete); anything else fails."""
    if not os.path.lexists(out):
        return "absent"
    files = snapshot(out)
    if previous is not None and files == previous:
        return "previous"
    assert sorted(files) == output_names(), f"{out} is a partial output: {sorted(files)}"
    report = json.loads(files["report.json"])
    assert report["results"]["kept_documents"] > 0 and "write" in report["stages"]
    return "new"


def beside(out: Path) -> list[str]:
    """Everything beside ``out`` that a run may have made (the corpus and wrapper excepted)."""
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}."))


def check_killed_run(run: Run, out: Path, previous: dict | None, signum: int) -> str:
    state = output_state(out, previous)
    if previous is not None:
        assert state != "absent", "the previous output is gone"
    if signum == signal.SIGKILL:
        # 0 only if it finished before the signal; a new output may also come from a run killed
        # after its commit (the output is complete either way: output_state checked it).
        assert run.returncode in (-signal.SIGKILL, 0), run.returncode
        if run.returncode == 0:
            assert state == "new"
        for name in beside(out):  # only a staging directory can be left, never taken for output
            assert staging_pattern(out.name).fullmatch(name), name
            assert name.startswith("."), name
        return state
    assert "Traceback" not in run.stderr, run.stderr
    assert beside(out) == [], f"left beside the output: {beside(out)}"
    if not run.alive_at_signal:  # it had finished before the signal
        assert run.returncode == 0 and state == "new", (run.returncode, state, run.stderr)
        return state
    lines = run.stderr.splitlines()
    if run.returncode in (0, -signum):
        # The signal came once the command was done: ignored, or, in the last ~0.2 s, once
        # Python's finalisation has put the default handlers back, it ends the process.
        assert state == "new" and lines == [], (run.returncode, state, run.stderr)
        return state
    assert run.returncode == 128 + signum, (run.returncode, run.stderr)
    assert len(lines) == 1, run.stderr
    word = "interrupted" if signum == signal.SIGINT else "terminated (SIGTERM)"
    assert lines[0].startswith(word + ": "), lines[0]
    if state == "new":  # interrupted during the commit or just after it
        assert "the results were written to" in lines[0], lines[0]
    else:
        assert lines[0] == f"{word}: nothing was written", lines[0]
    return state


# --- fixtures -----------------------------------------------------------------------------------


@dataclass
class Reference:
    stages: list[str]  # the stages a complete run begins, in order
    previous: Path  # its complete output


@pytest.fixture(scope="module")
def runner(tmp_path_factory) -> Runner:
    root = tmp_path_factory.mktemp("interrupt")
    return Runner(root, build_corpus(root / "corpus.jsonl", copies=2))


@pytest.fixture(scope="module")
def reference(runner) -> Reference:
    """One complete run: its output, and the stages where the others are signalled."""
    out = runner.root / "previous"
    run = runner.run(out, overwrite=False)
    assert run.returncode == 0, run.stderr
    assert run.stages[0] == "read" and run.stages[-1] == "write", run.stages
    return Reference(run.stages, out)


def kill_points(reference: Reference, signum: int, seed: int) -> list[KillPoint]:
    """One point anywhere in the run, one in its first half, and one in the write."""
    rng = random.Random(seed)
    seen: dict[str, int] = {}
    stages = []
    for stage in reference.stages:
        seen[stage] = seen.get(stage, 0) + 1
        stages.append(KillPoint(stage, seen[stage]))
    # SIGKILL can also come before the handlers (the others would meet Python's defaults there).
    points = ([KillPoint("start")] if signum == signal.SIGKILL else []) + [KillPoint("ready")] + stages \
        + [KillPoint("staging")]
    return [rng.choice(points), rng.choice(points[:len(points) // 2]),
            rng.choice([KillPoint("write"), KillPoint("staging")])]


def prepare(out: Path, reference: Reference, with_previous: bool) -> Optional[dict]:
    if os.path.lexists(out):
        shutil.rmtree(out)
    if not with_previous:
        return None
    shutil.copytree(reference.previous, out)
    return snapshot(out)


# --- random kills -------------------------------------------------------------------------------


SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}


@pytest.mark.timeout(300)  # four runs of a few seconds each, on a shared machine: more than 30 s
@pytest.mark.parametrize("with_previous", [False, True], ids=["no-previous", "previous"])
@pytest.mark.parametrize("name", list(SIGNALS))
def test_killed_run_leaves_previous_or_complete_output(runner, reference, name, with_previous):
    signum = SIGNALS[name]
    out = runner.root / f"out-{name}-{with_previous}"
    seed = 1000 * signum + with_previous
    for point in kill_points(reference, signum, seed):
        previous = prepare(out, reference, with_previous)
        run = runner.kill(out, with_previous, signum, point)
        state = check_killed_run(run, out, previous, signum)
        last = run.stages[-1] if run.stages else "-"
        print(f"{name} at {point}: alive {run.alive_at_signal}, writing {run.writing}, last stage begun {last}, "
              f"rc {run.returncode}, output {state}")
    if beside(out):  # after SIGKILL: the next run writing this output removes what a kill left
        previous = prepare(out, reference, with_previous)
        run = runner.run(out, with_previous)
        assert run.returncode == 0, run.stderr
        assert output_state(out, previous) == "new" and beside(out) == []


# --- kills at chosen points of the write ----------------------------------------------------------


@pytest.fixture(scope="module")
def small_runner(tmp_path_factory) -> Runner:
    root = tmp_path_factory.mktemp("interrupt-small")
    runner = Runner(root, build_corpus(root / "corpus.jsonl", copies=2, rows=150))
    first = runner.run(root / "previous", overwrite=False)
    assert first.returncode == 0, first.stderr
    return runner


def with_small_previous(runner: Runner, name: str) -> tuple[Path, dict]:
    out = runner.root / name
    shutil.copytree(runner.root / "previous", out)
    return out, snapshot(out)


def assert_stopped_with_nothing_written(run: Run, name: str, out: Path, previous: dict) -> None:
    """The run ended with the signal's code and one line, and left the previous output as it was."""
    assert run.returncode == 128 + SIGNALS[name], run.stderr
    assert run.stderr.splitlines() == [("interrupted" if name == "SIGINT" else "terminated (SIGTERM)")
                                       + ": nothing was written"], run.stderr
    assert snapshot(out) == previous
    assert beside(out) == []


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_signal_after_the_last_file_is_staged_removes_the_staging_directory(small_runner, name):
    """The signal arrives when report.json, the last file, is written in the staging directory
    (a directory that would look complete): it is removed, the old output stays."""
    out, previous = with_small_previous(small_runner, f"staged-{name}")
    run = small_runner.run(out, overwrite=True, env={"TEST_SIGNAL_IN": "write_json", "TEST_SIGNAL": name})
    assert_stopped_with_nothing_written(run, name, out, previous)


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_signal_handled_inside_a_finaliser_is_not_lost(small_runner, name):
    """Python drops an exception raised in a __del__ (printing 'Exception ignored'): the
    signal is delivered again and stops the run as anywhere else."""
    out, previous = with_small_previous(small_runner, f"finaliser-{name}")
    run = small_runner.run(out, overwrite=True, env={"TEST_SIGNAL_IN": "__del__", "TEST_SIGNAL": name})
    assert_stopped_with_nothing_written(run, name, out, previous)


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_signal_resent_while_the_unraisable_hook_runs_is_not_lost(small_runner, name):
    out, previous = with_small_previous(small_runner, f"slow-timer-{name}")
    run = small_runner.run(out, overwrite=True,
                           env={"TEST_SIGNAL_IN": "__del__", "TEST_SIGNAL": name, "TEST_SLOW_TIMER": "1"})
    assert "Traceback" not in run.stderr, run.stderr
    assert_stopped_with_nothing_written(run, name, out, previous)


def test_signal_during_the_commit_is_held_back_until_it_is_done(small_runner):
    """A signal that arrives during the swap does not cut it short: the new output is complete,
    nothing is left beside it, and the message says the results were written."""
    out, previous = with_small_previous(small_runner, "commit")
    run = small_runner.run(out, overwrite=True, env={"TEST_SIGNAL_IN": "replace_dir", "TEST_SIGNAL": "SIGINT"})
    assert run.returncode == 130, run.stderr
    assert run.stderr.splitlines() == [f"interrupted: the results were written to {out}"], run.stderr
    assert output_state(out, previous) == "new"
    assert beside(out) == []


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_signal_after_the_commit_says_the_results_were_written(small_runner, name):
    out, previous = with_small_previous(small_runner, f"after-commit-{name}")
    run = small_runner.run(out, overwrite=True, env={"TEST_SIGNAL_IN": "after_commit", "TEST_SIGNAL": name})
    assert output_state(out, previous) == "new" and beside(out) == []
    word = "interrupted" if name == "SIGINT" else "terminated (SIGTERM)"
    assert (run.returncode, run.stderr.splitlines()) == (128 + SIGNALS[name],
                                                         [f"{word}: the results were written to {out}"])


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_signal_handled_as_the_command_ends_gives_its_code_and_one_line(small_runner, name):
    out, previous = with_small_previous(small_runner, f"exit-entry-{name}")
    run = small_runner.run(out, overwrite=True, env={"TEST_SIGNAL_IN": "exit_entry", "TEST_SIGNAL": name})
    assert output_state(out, previous) == "new" and beside(out) == []
    word = "interrupted" if name == "SIGINT" else "terminated (SIGTERM)"
    # The command had finished: ending quietly with 0 would do, or with its code and one line.
    assert (run.returncode, run.stderr.splitlines()) in [
        (0, []), (128 + SIGNALS[name], [f"{word}: the results were written to {out}"])], (run.returncode, run.stderr)


def test_sigkill_after_staging_leaves_only_a_hidden_directory_that_the_next_run_removes(small_runner):
    out, previous = with_small_previous(small_runner, "killed")
    run = small_runner.run(out, overwrite=True, env={"TEST_SIGNAL_IN": "write_json", "TEST_SIGNAL": "SIGKILL"})
    assert run.returncode == -signal.SIGKILL
    assert snapshot(out) == previous
    left = beside(out)
    assert len(left) == 1 and staging_pattern(out.name).fullmatch(left[0]), left
    assert left[0].startswith(f".{out.name}.tmp-")  # hidden, and plainly temporary
    assert (out.parent / left[0] / "report.json").is_file()  # complete inside: only its name says not
    # Another output's run leaves it alone (see the stale-staging test below); the next run
    # writing this output removes it.
    run = small_runner.run(out, overwrite=True)
    assert run.returncode == 0, run.stderr
    assert output_state(out, previous) == "new" and beside(out) == []


# --- the stage events the kills wait for -----------------------------------------------------------


def test_stage_events_are_appended_and_never_block_or_stop_a_run(tmp_path, monkeypatch):
    """GPUDEDUP_STAGE_EVENTS: each stage appends its name as it starts; a file that cannot be
    written, or a FIFO that nobody reads, leaves the run alone."""
    from gpudedup.stages import STAGE_EVENTS_VARIABLE, StageLog

    log = StageLog()
    events = tmp_path / "events.txt"
    monkeypatch.setenv(STAGE_EVENTS_VARIABLE, str(events))
    with log.stage("read"):
        assert stages_begun(events) == ["read"]  # announced before the stage's work
    with log.stage("write"):
        pass
    assert stages_begun(events) == ["read", "write"]
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for target in (tmp_path / "missing" / "events.txt", fifo):
        monkeypatch.setenv(STAGE_EVENTS_VARIABLE, str(target))
        with log.stage("copies"):
            pass
    assert set(log.seconds) == {"read", "write", "copies"}


# --- the writer's pieces, in process --------------------------------------------------------------


def gone_process() -> subprocess.Popen:
    """A process that has ended: its pid names no running process."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    return dead


def test_stale_staging_directories_are_removed_only_when_their_process_is_gone(tmp_path):
    dead = gone_process()
    host = host_tag()
    names = {
        f".out.tmp-{host}-{dead.pid}-0a1b2c3d": False,  # removed: its process is gone
        f".out.tmp-{host}-{os.getppid()}-0a1b2c3d": True,  # a running process: kept
        f".out.tmp-{host}-{os.getpid()}-0a1b2c3d": True,  # this process: kept
        f".out.tmp-ffffffff-{dead.pid}-0a1b2c3d": host != "ffffffff",  # another machine: kept
        f".out.old-{host}-{dead.pid}-0a1b2c3d": False,  # old output, and out exists: removed
        f".other.tmp-{host}-{dead.pid}-0a1b2c3d": True,  # another output's: kept
        "out.tmp-x": True,
    }
    (tmp_path / "out").mkdir()
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "report.json").write_text("{}")
    (tmp_path / f".out.tmp-{host}-{dead.pid}-ffffffff").symlink_to(tmp_path / "out")  # a link: kept
    removed = remove_stale_staging(tmp_path, "out")
    assert sorted(p.name for p in removed) == sorted(name for name, kept in names.items() if not kept)
    for name, kept in names.items():
        assert (tmp_path / name).exists() == kept, name
    assert (tmp_path / "out").is_dir()


def test_a_staging_folder_whose_run_holds_it_is_kept_whatever_its_process_number(tmp_path):
    """A run in another PID namespace (a container sharing the volume and the host name) names
    a process this one cannot see: its folder is told live by the lock the run holds on it
    (as atomic_output_dir holds one), and removed once the lock is let go."""
    staging = tmp_path / f".out.tmp-{host_tag()}-{gone_process().pid}-0a1b2c3d"
    staging.mkdir()
    (tmp_path / "other").mkdir()
    held = subprocess.Popen([sys.executable, "-c", "import sys; from gpudedup.locks import hold_folder; "
                             f"held = hold_folder({str(staging)!r}); print(held is not None, flush=True); "
                             "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert held.stdout.readline().strip() == "True"
        assert remove_stale_staging(tmp_path, "out") == [] and staging.is_dir()
    finally:
        held.communicate("")  # (its end lets go of the lock)
    assert remove_stale_staging(tmp_path, "out") == [staging] and not staging.exists()


def test_a_run_holds_its_staging_folder_until_the_commit(tmp_path):
    with commit.atomic_output_dir(tmp_path / "out", overwrite=False) as staging:
        assert folder_held(str(staging))
        (staging / "report.json").write_text("{}")
    assert not folder_held(str(tmp_path / "out"))


def test_a_temporary_work_directory_is_held_while_it_is_in_use():
    """A run's temporary work directory is held as its staging folder is, so that a clean-up in
    another PID namespace leaves it; let go when it is cleaned up."""
    temporary = temporary_work_dir()
    assert folder_held(temporary.name)
    temporary.cleanup()
    assert not os.path.exists(temporary.name)


def test_an_add_s_words_for_its_index_hold_from_the_instant_its_output_is_written():
    """Index.add says what its index is left as once its output is written: recorded before the
    write (note_index's once_written), so that a signal delivered as the commit's held block
    ends, before the add's next line, still says it; none while nothing is written."""
    said = "nothing was added to the index idx: run the add again with --overwrite"
    try:
        interrupts.note_written(None)
        interrupts.note_index(None, once_written=said)
        assert interrupts.interrupted_outcome() == "nothing was written"
        interrupts.note_written("o1")  # (the commit, in its held block)
        assert interrupts.interrupted_outcome() == f"the results were written to o1; {said}"
        interrupts.note_index("the documents were added to the index idx (generation 2)")
        assert interrupts.interrupted_outcome() == ("the results were written to o1; the documents were added to "
                                                    "the index idx (generation 2)")
    finally:
        interrupts.note_written(None)
        interrupts.note_index(None)


def test_an_old_output_is_kept_while_the_output_is_missing(tmp_path):
    """After a kill between the fallback's two renames the old output exists only as .old-."""
    dead = gone_process()
    old = tmp_path / f".out.old-{host_tag()}-{dead.pid}-0a1b2c3d"
    old.mkdir()
    assert remove_stale_staging(tmp_path, "out") == []
    assert old.is_dir()


def test_a_killed_runs_temporary_work_directory_goes_with_the_next_run(tmp_path, monkeypatch):
    """A run on workers without --work-dir spills into a temporary folder named by its machine
    and process; one that SIGKILL left (no clean-up ran) is removed when the next such run
    makes its own, and no other folder is touched."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # (the system's temporary folder, here)
    dead = gone_process()
    host = host_tag()
    names = {
        f"gpudedup-work-{host}-{dead.pid}-x7_k2m9q": False,  # removed: its process is gone
        f"gpudedup-work-{host}-{os.getppid()}-x7_k2m9q": True,  # a running process: kept
        f"gpudedup-work-ffffffff-{dead.pid}-x7_k2m9q": host != "ffffffff",  # another machine: kept
        "gpudedup-work-cache": True,  # the work cache (workfolders.py)
        "gpudedup-work-a1b2c3d4": True,  # a name that says no machine or process
    }
    for name in names:
        (tmp_path / name / "shards").mkdir(parents=True)
    with temporary_work_dir() as made:
        assert Path(made).name.startswith(f"gpudedup-work-{host}-{os.getpid()}-")
        for name, kept in names.items():
            assert (tmp_path / name).exists() == kept, name
    assert not Path(made).exists()


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-renames"])
def test_replace_keeps_the_old_output_until_the_new_one_is_in_place(tmp_path, monkeypatch, exchange):
    out = tmp_path / "out"
    with commit.atomic_output_dir(out, overwrite=False) as staging:
        (staging / "report.json").write_text("old")
    if not exchange:
        monkeypatch.setattr(commit, "exchange_paths", lambda a, b: False)
    seen = []
    real_remove = commit.remove_path

    def remove(path):  # when the old output is deleted, the new one is already in place
        seen.append((out / "report.json").read_text())
        real_remove(path)

    monkeypatch.setattr(commit, "remove_path", remove)
    with commit.atomic_output_dir(out, overwrite=True) as staging:
        (staging / "report.json").write_text("new")
    assert seen == ["new"]
    assert (out / "report.json").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_failed_second_rename_puts_the_old_output_back(tmp_path, monkeypatch):
    out = tmp_path / "out"
    with commit.atomic_output_dir(out, overwrite=False) as staging:
        (staging / "report.json").write_text("old")
    monkeypatch.setattr(commit, "renameat2", lambda a, b, flags: False)  # neither exchange nor no-replace
    real_rename = Path.rename

    def rename(self, target):
        if Path(target) == out and ".tmp-" in self.name:
            raise OSError(28, "No space left on device")
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", rename)
    with pytest.raises(OSError, match="No space"):
        with commit.atomic_output_dir(out, overwrite=True) as staging:
            (staging / "report.json").write_text("new")
    assert (out / "report.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_signals_held_delivers_them_afterwards(tmp_path):
    # Python's own SIGINT handler, whatever the suite was started with (a shell's background job
    # starts with SIGINT ignored, and an ignored signal is left alone by signals_held).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        check_signals_held(tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous)


def check_signals_held(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        with commit.signals_held() as received:
            # To the main thread, whose Python handler (here the one that holds it back) runs at
            # its next check for pending calls: the loop's jumps are such checks. (A signal to the
            # process may land on another thread, an earlier test's, and be handled later.)
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            deadline = time.monotonic() + 60  # only to fail rather than hang
            while not received and time.monotonic() < deadline:
                pass
            assert received == [signal.SIGINT]
            (tmp_path / "done").write_text("")  # the block was not cut short
    assert (tmp_path / "done").exists()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


EARLY = r'''
import importlib.abc, os, sys, time
import gpudedup.interrupts as interrupts
assert "numpy" not in sys.modules and "pyarrow" not in sys.modules  # import gpudedup is light
pause_at = os.environ.get("TEST_PAUSE_IMPORTING")
class PauseAt(importlib.abc.MetaPathFinder):
    # The command stops as it starts importing pause_at, says so, and waits for the signal.
    def find_spec(self, name, path=None, target=None):
        if name == pause_at:
            sys.stderr.write(f"importing {name}\n")
            sys.stderr.flush()
            time.sleep(600)  # the signal's handler ends the process in here
        return None
installed = interrupts.install_signal_handlers
def install_and_tell():
    installed()
    sys.meta_path.insert(0, PauseAt())
    sys.stderr.write("ready\n")
    sys.stderr.flush()
interrupts.install_signal_handlers = install_and_tell
from gpudedup.console import main
sys.exit(main())
'''


# The moment the handlers are in place, and modules the command imports after that (the slow
# part of its start: console.py).
EARLY_POINTS = ["ready", "gpudedup.cli", "typer", "numpy", "pyarrow"]


@pytest.mark.parametrize("point", EARLY_POINTS)
@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_signal_while_the_command_is_still_importing_gives_one_line(small_runner, name, point):
    """The `gpudedup` entry point (console.py) installs the handlers before the heavy imports:
    a signal from then on, even before the command has started, ends it with one line."""
    out = small_runner.root / f"early-{name}-{point}"
    env = {**os.environ, "TEST_PAUSE_IMPORTING": "" if point == "ready" else point}
    process = subprocess.Popen([sys.executable, "-c", EARLY, "dedup", str(small_runner.corpus), "-o", str(out),
                                "--id-field", "id", "-q"], cwd=small_runner.root, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    assert process.stderr.readline() == "ready\n"
    if point != "ready":
        assert process.stderr.readline() == f"importing {point}\n"
    process.send_signal(SIGNALS[name])
    stderr = finish(process)
    word = "interrupted" if name == "SIGINT" else "terminated (SIGTERM)"
    assert (process.returncode, stderr.splitlines()) == (128 + SIGNALS[name], [f"{word}: nothing was written"]), stderr
    assert not os.path.lexists(out) and beside(out) == []


def test_an_error_raised_as_a_signal_is_handled_ends_as_the_interrupt(capsys):
    """A signal's exception raised inside Python's own lock handling (a thread starting) can
    come out as another error with the interrupt as its context ("RuntimeError: release
    unlocked lock", seen once in CI): the command ends as interrupted, one line, exit code
    128 + the signal, no traceback."""
    import typer

    from gpudedup.cli.common import user_errors
    from gpudedup.interrupts import Interrupted

    with pytest.raises(typer.Exit) as leaving:
        with user_errors(None):
            try:
                raise Interrupted(signal.SIGTERM)
            except Interrupted:
                raise RuntimeError("release unlocked lock")  # noqa: B904 -- as threading raises it
    assert leaving.value.exit_code == 128 + signal.SIGTERM
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("terminated (SIGTERM)"), lines
    with pytest.raises(RuntimeError):  # an error of its own, with no interrupt behind it, goes on
        with user_errors(None):
            raise RuntimeError("a bug")
