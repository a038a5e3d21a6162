"""Never delete what is not ours: where a run may write, and what its commit may replace.

- The output and the work directory are refused (one line, exit code 2, before any work) when
  they are, hold or lie inside an input, as given and as its scan resolves it (symbolic links
  followed), or the persistent index the run reads or writes; in the CLI, the API
  (gpudedup.dedup, DedupResult.write, Index.add) alike.
- Without --overwrite the commit replaces nothing: what appears at the output during the run
  is left as it is and the results go to a named folder beside it, which no clean-up removes.
- --overwrite replaces only an empty directory or a gpudedup output (its marker, or an earlier
  version's report.json), checked at the start and again at the commit.
- A local work directory is held by the run that uses it; a second run is told who holds it.
- Over random trees with symbolic links and outputs, work directories and an index placed
  inside, beside and above the inputs: no file outside the run's own output and work
  directories (and the index it adds to) is ever removed or changed.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unicodedata
from pathlib import Path
from typing import Optional, Sequence

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import gpudedup
from gpudedup.errors import GpudedupError, InputError, OutputError
from gpudedup.index import Index
from gpudedup.io import commit, outputdir
from gpudedup.io.staging import remove_stale_staging
from gpudedup.io.inputs import scan_inputs
from gpudedup.io.ours import OUTPUT_MARKER, WORK_ENTRIES, foreign_among, mount_point_within, output_path, written_files
from cli_support import error_line, invoke, leftovers, paragraph, tree_snapshot, variant, write_jsonl

CPU = ("--backend", "cpu", "-q")


def records(prefix: str, count: int = 6) -> list[dict]:
    """``count`` documents with ids ``<prefix>0``...; every third is a near-copy of the one before."""
    texts: list[str] = []
    seed = sum(map(ord, prefix)) * 100
    for number in range(count):
        texts.append(variant(texts[-1], "qqqqqqq") if number % 3 == 2 else paragraph(seed + number))
    return [{"id": f"{prefix}{number}", "text": text} for number, text in enumerate(texts)]


def tree_state(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``, links not followed: ("dir",), ("link", target) or ("file",
    sha256 of its bytes), by its path relative to ``root``."""
    state: dict[str, tuple] = {}
    for folder, folders, files in os.walk(root):
        for name in folders + files:
            path = Path(folder) / name
            relative = path.relative_to(root).as_posix()
            if path.is_symlink():
                state[relative] = ("link", os.readlink(path))
            elif path.is_dir():
                state[relative] = ("dir",)
            else:
                state[relative] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
    return state


def is_complete_output(folder: Path) -> bool:
    return (folder / "report.json").is_file() and (folder / OUTPUT_MARKER).is_file()


def set_aside_folder(line: str) -> Path:
    """The folder an error line says the results were written to."""
    found = re.search(r"the results were written to (\S+)$", line)
    assert found, line
    return Path(found[1])


# --- the index is no place to write ------------------------------------------------------------


@pytest.fixture(scope="module")
def indexed_once(tmp_path_factory) -> Path:
    """sub/idx: an index holding w1.jsonl's documents (added by the CLI, its output out1);
    w2.jsonl: new documents. Made once for the tests that start from it (indexed)."""
    root = tmp_path_factory.mktemp("indexed")
    write_jsonl(root / "w1.jsonl", records("a"))
    write_jsonl(root / "w2.jsonl", records("b"))
    Index.create(root / "sub" / "idx")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        result = invoke("index", "add", "sub/idx", "w1.jsonl", "-o", "out1", "--id-field", "id", *CPU)
    assert result.exit_code == 0, result.output
    return root


@pytest.fixture
def indexed(indexed_once, in_tmp):
    """indexed_once's folder copied into the test's working directory, for the test to change."""
    shutil.copytree(indexed_once, in_tmp, symlinks=True, dirs_exist_ok=True)
    return in_tmp


INDEX_PLACES = {
    "add -o IDX --overwrite": ["index", "add", "sub/idx", "w2.jsonl", "-o", "sub/idx", "--overwrite"],
    "dedup --against IDX -o IDX --overwrite": ["dedup", "w2.jsonl", "-o", "sub/idx", "--overwrite",
                                               "--against", "sub/idx"],
    "add -o a parent of IDX": ["index", "add", "sub/idx", "w2.jsonl", "-o", "sub", "--overwrite"],
    "dedup --against IDX -o a parent of IDX": ["dedup", "w2.jsonl", "-o", "sub", "--overwrite", "--against", "sub/idx"],
    "add -o inside IDX": ["index", "add", "sub/idx", "w2.jsonl", "-o", "sub/idx/segments/x"],
    "add --work-dir IDX --resume": ["index", "add", "sub/idx", "w2.jsonl", "-o", "out2", "--work-dir", "sub/idx",
                                    "--resume"],
    "dedup --against IDX --work-dir IDX --resume": ["dedup", "w2.jsonl", "-o", "out2", "--work-dir", "sub/idx",
                                                    "--resume", "--against", "sub/idx"],
    "add --work-dir a parent of IDX": ["index", "add", "sub/idx", "w2.jsonl", "-o", "out2", "--work-dir", "sub"],
}


@pytest.mark.parametrize("args", INDEX_PLACES.values(), ids=INDEX_PLACES.keys())
def test_the_index_is_never_an_output_or_a_work_directory(indexed, args):
    """`index add IDX X -o IDX --overwrite`, `dedup --against IDX -o IDX`, -o a parent of IDX,
    --work-dir IDX: refused before any work, naming the index, which stays as it is (and
    still answers)."""
    before = tree_state(indexed / "sub")
    result = invoke(*args, "--id-field", "id", *CPU)
    assert result.exit_code == 2, result.output
    line = error_line(result)
    assert "the index sub/idx" in line and ("--output" in line or "--work-dir" in line), line
    assert tree_state(indexed / "sub") == before
    assert not (indexed / "out2").exists()
    assert Index(indexed / "sub" / "idx").info()["documents"] == 4  # (6 documents, 2 near-copies)


def test_the_api_keeps_the_index_apart_too(indexed):
    """Index.add(output=...), Index.add(work_dir=...) and DedupResult.write of a run against
    the index: the same refusals, before anything is written."""
    index, new = Index(indexed / "sub" / "idx"), Path("w2.jsonl")
    before = tree_state(indexed / "sub")
    for place in ("sub", "sub/idx"):
        with pytest.raises(OutputError, match="must not be, hold or lie inside the index"):
            index.add(new, id_field="id", backend="cpu", output=place, overwrite=True)
        with pytest.raises(OutputError, match="the work directory must not be, hold or lie inside the index"):
            index.add(new, id_field="id", backend="cpu", output="out2", work_dir=place, resume=True)
        result = index.dedup(new, id_field="id", backend="cpu")
        with pytest.raises(OutputError, match="must not be, hold or lie inside the index"):
            result.write(place, overwrite=True)
    assert tree_state(indexed / "sub") == before and not (indexed / "out2").exists()


def test_a_plain_run_does_not_write_inside_an_index(indexed):
    """dedup -o and --work-dir inside an index's folders (which the run does not read) are
    refused before any work: the index's next writer removes what its manifest does not list."""
    before = tree_state(indexed / "sub")
    for option, place in (("-o", "sub/idx/segments/results"), ("--work-dir", "sub/idx/work")):
        extra = [] if option == "-o" else ["-o", "out3"]
        result = invoke("dedup", "w2.jsonl", option, place, *extra, "--id-field", "id", *CPU)
        assert result.exit_code == 2
        assert f"must not lie inside the index {(indexed / 'sub' / 'idx').absolute()}" in error_line(result)
    with pytest.raises(OutputError, match="must not lie inside the index"):
        gpudedup.dedup(["a b c d e"], output=indexed / "sub" / "idx" / "segments" / "x", backend="cpu")
    # The index itself: named as one (not "empty it"), with --overwrite or without.
    for overwrite in ((), ("--overwrite",)):
        result = invoke("dedup", "w2.jsonl", "-o", "sub/idx", "--id-field", "id", *CPU, *overwrite)
        assert error_line(result) == "error: sub/idx: is a gpudedup index; choose another --output"
    # Where the file system puts it: through a link into the index, refused; beside it by "..", not.
    os.symlink(indexed / "sub" / "idx" / "segments", indexed / "seglink")
    with pytest.raises(OutputError, match="must not lie inside the index"):
        gpudedup.dedup(["a b c d e"], output=indexed / "seglink" / "x", backend="cpu")
    assert tree_state(indexed / "sub") == before and not (indexed / "out3").exists()
    gpudedup.dedup(Path("w2.jsonl"), id_field="id", output=indexed / "sub" / "idx" / ".." / "beside", backend="cpu")
    assert (indexed / "sub" / "beside" / "report.json").is_file()


def test_a_failed_write_s_staging_is_removed_again_once_its_cluster_is_closed(tmp_path):
    """A cluster's tasks may write into the staging directory of a write that failed or was
    interrupted after the client removed it (the interrupt does not stop them): a run on Dask
    calls remove_abandoned once its cluster is closed, which removes what they left."""
    with pytest.raises(KeyboardInterrupt):
        with commit.atomic_output_dir(tmp_path / "out", False) as staging:
            raise KeyboardInterrupt
    assert not staging.exists()
    (staging / "deduplicated").mkdir(parents=True)  # a task's write, after the removal
    (staging / "deduplicated" / "a.parquet").write_bytes(b"late")
    commit.remove_abandoned()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("how, appears", [("in-memory", "folder"), ("work-dir", "folder"), ("index-add", "folder"),
                                          ("in-memory", "link"), ("index-add", "link")])
def test_a_folder_that_appears_at_the_output_during_the_run_keeps_it(tmp_path, monkeypatch, how, appears):
    """Someone's folder (or a link to one) that appears at the output while the run verifies
    pairs (before its write) is left as it is, and the results go beside it, named in the
    error: the output was checked free before the run, so the write stages its results and the
    commit sets them aside, rather than losing them at the write's own check. An add says that
    it added nothing."""
    from gpudedup import stages

    out = tmp_path / "out"
    theirs = tmp_path / "theirs" if appears == "link" else out

    def appear(name: str) -> None:
        if name == "verify" and not theirs.exists():
            theirs.mkdir()
            (theirs / "notes.txt").write_text("someone's")
            if theirs != out:
                out.symlink_to(theirs)

    monkeypatch.setattr(stages, "announce_stage", appear)
    sample = Path(gpudedup.__file__).parent / "data" / "bible_sample.jsonl.gz"
    index = Index.create(tmp_path / "idx") if how == "index-add" else None
    with pytest.raises(OutputError, match=r"\(it changed during the run\); it was left as it is, and the results "
                                          r"were written to .*out\.results-[^;]*" +
                                          ("; nothing was added to the index$" if index is not None else "$")):
        if index is not None:
            index.add(sample, output=out, backend="cpu")
        else:
            gpudedup.dedup(sample, output=out, backend="cpu",
                           **({"work_dir": tmp_path / "work"} if how == "work-dir" else {}))
    assert index is None or index.info()["documents"] == 0
    assert sorted(os.listdir(out)) == ["notes.txt"] and (out / "notes.txt").read_text() == "someone's"
    assert out.is_symlink() == (appears == "link")
    aside = [path for path in tmp_path.iterdir() if path.name.startswith("out.results-")]
    assert len(aside) == 1 and (aside[0] / "report.json").is_file()


def test_a_link_to_an_output_that_appears_during_an_overwrite_run_stays(tmp_path, monkeypatch):
    """With overwrite, a link that appears at the output during the run, to an earlier
    gpudedup output, is neither replaced nor followed (as one there before the run is
    refused): the link and its output stay, and the results go beside it."""
    from gpudedup import stages

    sample = Path(gpudedup.__file__).parent / "data" / "bible_sample.jsonl.gz"
    earlier, out = tmp_path / "earlier", tmp_path / "out"
    gpudedup.dedup(sample, output=earlier, backend="cpu")
    before = tree_state(earlier)

    def appear(name: str) -> None:
        if name == "verify" and not os.path.lexists(out):
            out.symlink_to(earlier)

    monkeypatch.setattr(stages, "announce_stage", appear)
    with pytest.raises(OutputError, match=r"is a link to .*earlier, which is not replaced \(it changed during the "
                                          r"run\); it was left as it is, and the results were written to "
                                          r".*out\.results-"):
        gpudedup.dedup(sample, output=out, backend="cpu", overwrite=True)
    assert out.is_symlink() and os.readlink(out) == str(earlier) and tree_state(earlier) == before
    assert len([path for path in tmp_path.iterdir() if path.name.startswith("out.results-")]) == 1


# --- inputs as their scan resolves them -------------------------------------------------------


@pytest.fixture
def linked_into_the_output(in_tmp):
    """in/a.jsonl, and in/linked: a link to out/deduplicated, the kept rows of out, a gpudedup
    output (of an earlier run): its a.parquet is read as input through the link."""
    write_jsonl(in_tmp / "in" / "a.jsonl", records("a"))
    result = invoke("dedup", "in", "-o", "out", "--id-field", "id", *CPU)
    assert result.exit_code == 0, result.output
    (in_tmp / "in" / "linked").symlink_to(Path("..") / "out" / "deduplicated")
    return in_tmp


@pytest.mark.parametrize("staged", [False, True], ids=["in-memory", "work-dir"])
def test_a_link_in_an_input_into_the_output_is_refused(linked_into_the_output, staged):
    """The walk follows in/linked into out/: replacing out would delete input the run reads.
    The files the scan finds are checked as they resolve, before any is read, and the run is
    refused."""
    root = linked_into_the_output
    before = tree_state(root / "out")
    extra = ["--work-dir", "work"] if staged else []
    result = invoke("dedup", "in", "-o", "out", "--overwrite", "--id-field", "id", *extra, *CPU)
    assert result.exit_code == 2, result.output
    line = error_line(result)
    assert "out: the output directory must not be or hold an input file" in line, line
    target = root / "out" / "deduplicated" / "a.parquet"
    assert f"in/linked/a.parquet leads to {target.resolve()}" in line
    assert tree_state(root / "out") == before and not (root / "work").exists()
    assert leftovers(root) == []


def test_a_link_into_the_output_is_refused_by_the_api(linked_into_the_output):
    root = linked_into_the_output
    before = tree_state(root / "out")
    with pytest.raises(OutputError, match="must not be or hold an input file"):
        gpudedup.dedup(Path("in"), id_field="id", backend="cpu", output="out", overwrite=True)
    result = gpudedup.dedup(Path("in"), backend="cpu")  # (ids by place: the kept rows repeat a.jsonl's ids)
    with pytest.raises(OutputError, match="must not be or hold an input file"):
        result.write("out", overwrite=True)
    assert tree_state(root / "out") == before


def test_a_work_directory_a_link_leads_the_scan_into_is_refused(in_tmp):
    """A work directory inside a folder the inputs are read from through a link: its files
    would be read as input; refused, and nothing is made there."""
    write_jsonl(in_tmp / "in" / "a.jsonl", records("a"))
    write_jsonl(in_tmp / "elsewhere" / "b.jsonl", records("b"))
    (in_tmp / "in" / "linked").symlink_to(Path("..") / "elsewhere")
    result = invoke("dedup", "in", "-o", "out", "--work-dir", "elsewhere/work", "--id-field", "id", *CPU)
    assert result.exit_code == 2, result.output
    assert "the work directory must not be, hold or lie inside a folder the inputs are read from" in \
        error_line(result)
    assert not (in_tmp / "elsewhere" / "work").exists() and not (in_tmp / "out").exists()


# --- what appears at the output during the run -----------------------------------------------


def appearing(monkeypatch, make) -> None:
    """Run ``make()`` between the staging and the commit (the output appears during the run)."""
    real = commit.replace_dir

    def replace_dir(staging, out, overwrite=True):
        make()
        return real(staging, out, overwrite)

    monkeypatch.setattr(commit, "replace_dir", replace_dir)


def skip_output_checks(monkeypatch) -> None:
    """Pass every output over the checks made before the work (outputdir.check_output_dir, as
    check_run_places calls it) and at the start of the write (as io/commit.py's
    atomic_output_dir calls it): the output is what it becomes during the run."""
    for module in (outputdir, commit):
        monkeypatch.setattr(module, "check_output_dir", lambda path, *args, **kwargs: Path(path))


def user_files(folder: Path) -> None:
    (folder / ".config").mkdir(parents=True)
    (folder / "notes.txt").write_text("precious")
    (folder / ".config" / "settings").write_text("mine")


@pytest.mark.parametrize("overwrite", [False, True], ids=["new", "overwrite"])
def test_a_directory_that_appears_at_the_output_during_the_run_is_left_alone(happy, monkeypatch, overwrite):
    """A directory made at -o while the run goes on (someone's files) is left as it is, with or
    without --overwrite (exit code 2, one line); the results are in a named folder beside it,
    which the stale-staging clean-up of later runs never removes."""
    out = happy / "out"
    appearing(monkeypatch, lambda: user_files(out))
    result = invoke("dedup", "data.jsonl", "-o", "out", *(["--overwrite"] if overwrite else []), *CPU)
    assert result.exit_code == 2, result.output
    line = error_line(result)
    assert "(it changed during the run); it was left as it is" in line, line
    assert tree_snapshot(out) == {"notes.txt": b"precious", ".config/settings": b"mine"}
    aside = set_aside_folder(line)
    assert aside.parent == happy and aside.name.startswith("out.results-") and is_complete_output(aside)
    assert remove_stale_staging(happy, "out") == [] and aside.is_dir()
    assert leftovers(happy) == []


def test_an_empty_directory_that_appears_is_replaced_and_an_output_is_not(happy, monkeypatch):
    """An empty directory at the output is fine at the start, so at the commit too; another
    run's output that appeared there is not replaced without --overwrite."""
    out = happy / "out"
    appearing(monkeypatch, lambda: out.mkdir(exist_ok=True))
    assert invoke("dedup", "data.jsonl", "-o", "out", *CPU).exit_code == 0
    assert is_complete_output(out)
    previous = tree_snapshot(out)
    skip_output_checks(monkeypatch)  # as if it appeared later
    result = invoke("dedup", "data.jsonl", "-o", "out", *CPU)
    assert result.exit_code == 2 and "holds a finished gpudedup output" in error_line(result)
    assert tree_snapshot(out) == previous and is_complete_output(set_aside_folder(error_line(result)))


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-renames"])
def test_what_changes_between_the_commits_check_and_its_rename_is_put_back(happy, monkeypatch, exchange):
    """The check at the commit and the exchange are two steps: what was taken out of the
    output's place is checked again under its temporary name, and put back where it is not
    what the check saw."""
    out = happy / "out"
    out.mkdir()
    if not exchange:
        monkeypatch.setattr(commit, "exchange_paths", lambda a, b: False)
    real_occupied, seen = commit.occupied, []

    def occupied(path, overwrite):  # the check at the commit sees it empty; then files arrive
        if Path(path).absolute() == out and not seen:
            seen.append(True)
            user_files(out)
            return None
        return real_occupied(path, overwrite)

    appearing(monkeypatch, lambda: None)
    monkeypatch.setattr(commit, "occupied", occupied)
    skip_output_checks(monkeypatch)
    result = invoke("dedup", "data.jsonl", "-o", "out", *CPU)
    assert result.exit_code == 2, result.output
    assert tree_snapshot(out) == {"notes.txt": b"precious", ".config/settings": b"mine"}
    assert is_complete_output(set_aside_folder(error_line(result)))
    assert leftovers(happy) == []


BARRIER_DRIVER = r'''
import os, pathlib, sys, time
import gpudedup.io.commit as commit
real = commit.replace_dir
def replace_dir(staging, out, overwrite=True):
    # Both runs have written their results before either commits.
    barrier = pathlib.Path(os.environ["BARRIER"])
    (barrier / str(os.getpid())).touch()
    deadline = time.monotonic() + 60
    while len(list(barrier.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    return real(staging, out, overwrite)
commit.replace_dir = replace_dir
from gpudedup.cli import main
sys.exit(main())
'''


@pytest.mark.timeout(120)
def test_two_runs_to_one_new_output_commit_once(happy):
    """Two runs started together to one new -o without --overwrite, both past the start's
    check when either commits: exactly one commits; the other exits with code 2, its results
    in a named folder beside the output, and neither replaces the other's."""
    barrier = happy / "barrier"
    barrier.mkdir()
    command = [sys.executable, "-c", BARRIER_DRIVER, "dedup", "data.jsonl", "-o", "out", *CPU]
    runs = [subprocess.Popen(command, cwd=happy, env={**os.environ, "BARRIER": str(barrier)},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    done = [(run.wait(timeout=100), run.stderr.read()) for run in runs]
    for run in runs:
        run.stdout.close()
        run.stderr.close()
    assert sorted(code for code, _ in done) == [0, 2], done
    message = next(stderr for code, stderr in done if code == 2).strip()
    assert message.startswith("error: out: holds a finished gpudedup output (its report.json is there) (it changed "
                              "during the run)")
    aside = set_aside_folder(message.replace("\n", " "))
    assert is_complete_output(happy / "out") and is_complete_output(happy / aside)
    assert leftovers(happy) == []


# --- --overwrite replaces only an output of ours ----------------------------------------------


def test_overwrite_refuses_a_folder_of_user_files(happy):
    """`-o ~ --overwrite` on a home directory: a folder that is not a gpudedup output is refused,
    naming what it holds (dotfiles included), and kept whole; by the CLI and the API."""
    home = happy / "fakehome"
    (home / "docs").mkdir(parents=True)
    (home / ".ssh").mkdir()
    (home / "docs" / "thesis.tex").write_text("years of work")
    (home / ".ssh" / "id_rsa").write_text("key")
    before = tree_state(home)
    result = invoke("dedup", "data.jsonl", "-o", "fakehome", "--overwrite", *CPU)
    assert result.exit_code == 2
    assert error_line(result) == ("error: fakehome: holds files that are not a gpudedup output (.ssh, docs); "
                                  "choose another --output or empty it")
    with pytest.raises(OutputError, match="not a gpudedup output"):
        gpudedup.dedup(Path("data.jsonl"), backend="cpu", output="fakehome", overwrite=True)
    Index.create(happy / "idx")
    with pytest.raises(OutputError, match="not a gpudedup output"):
        Index(happy / "idx").add(Path("data.jsonl"), backend="cpu", output="fakehome", overwrite=True)
    assert tree_state(home) == before and leftovers(happy, "fakehome") == []
    (home / "report.json").write_text('{"results": 1}')  # a report.json, not gpudedup's
    assert invoke("dedup", "data.jsonl", "-o", "fakehome", "--overwrite", *CPU).exit_code == 2


@pytest.mark.parametrize("added, shown", [
    (["thesis.tex"], "thesis.tex"),
    (["data/mixB.jsonl", "notes.md"], "data, notes.md"),
    (["deduplicated.txt"], "deduplicated.txt"),
    (["deduplicated/my_notes.txt", "pairs/mine/keep.parquet"], "deduplicated/my_notes.txt, pairs/mine/keep.parquet"),
    # Named as an output's file, but a folder.
    (["deduplicated.parquet/mine.txt", "errors.jsonl/mine.txt"], "deduplicated.parquet, errors.jsonl"),
    # A file of an output format among the kept rows, which the output's report.json does not name.
    (["deduplicated/mine/keep.parquet", "removed/keep.jsonl"], "deduplicated/mine/keep.parquet, removed/keep.jsonl"),
])
def test_overwrite_refuses_an_output_that_holds_the_user_s_files_beside_its_own(happy, added, shown):
    """A folder that is a gpudedup output (its marker, or a report.json of ours) and holds
    anything else: the user's files put beside the results or among them, or a folder with a
    copy of a report in it, are not the output's, and replacing it would delete them. (Finder's
    .DS_Store is no one's work: replaced with the output.)"""
    assert invoke("dedup", "data.jsonl", "-o", "out", "--write-removed", *CPU).exit_code == 0
    (happy / "out" / ".DS_Store").write_bytes(b"\0")
    (happy / "out" / "deduplicated" / ".DS_Store").write_bytes(b"\0")
    (happy / "out" / "deduplicated" / "._data.parquet").write_bytes(b"\0")  # (macOS's AppleDouble on a share)
    made = []
    for name in added:
        for folder in reversed((happy / "out" / name).parents):
            if not folder.exists():
                folder.mkdir()
                made.append(folder)
        (happy / "out" / name).write_text("the user's")
    before = tree_snapshot(happy / "out")
    result = invoke("dedup", "data.jsonl", "-o", "out", "--overwrite", *CPU)
    assert error_line(result) == (f"error: out: holds {shown} beside a gpudedup output, which replacing the output "
                                  f"would delete; move {'it' if ',' not in shown else 'them'} out, or choose another "
                                  "--output")
    with pytest.raises(OutputError, match="beside a gpudedup output"):
        gpudedup.dedup(Path("data.jsonl"), backend="cpu", output="out", overwrite=True)
    assert tree_snapshot(happy / "out") == before and leftovers(happy) == []
    for name in added:
        (happy / "out" / name).unlink()
    for folder in reversed(made):
        folder.rmdir()
    assert invoke("dedup", "data.jsonl", "-o", "out", "--overwrite", *CPU).exit_code == 0


def test_an_output_s_files_are_told_by_the_names_its_report_gives_them_composed():
    """A kept file's name listed decomposed (as HFS+ stores names) is the report's composed
    one; a file the report does not name is not the output's; with no list, any of its format."""
    report = json.dumps({"output": {"kept_files": ["deduplicated/caf\u00e9.parquet"]}}).encode()
    written = written_files(report)
    assert output_path(unicodedata.normalize("NFD", "deduplicated/café.parquet"), written)
    assert not output_path("deduplicated/cafe.parquet", written)
    assert output_path("deduplicated/cafe.parquet", written_files(b'{"output": {}}'))


def test_an_apple_double_file_goes_with_the_output_only_beside_what_it_describes():
    """macOS's ._NAME beside one of the output's files or folders is the output's; a ._NAME
    beside nothing of the output's (or beside a user's file) is a user's."""
    written = written_files(json.dumps({"output": {"kept_files": ["deduplicated/a.parquet"]}}).encode())
    listed = ["report.json", "._report.json", "deduplicated/", "._deduplicated", "deduplicated/a.parquet",
              "deduplicated/._a.parquet", "._taxes.xlsx", "deduplicated/._b.parquet", "notes.txt", "._notes.txt"]
    assert foreign_among(listed, written) == ["._notes.txt", "._taxes.xlsx", "deduplicated/._b.parquet", "notes.txt"]
    # On object storage, where a folder is only the prefix of its objects.
    assert foreign_among(["deduplicated/a.parquet", "._deduplicated", "notes/._draft"], written) == ["notes"]


def test_overwrite_refuses_a_file_named_as_an_output_s_folder(happy):
    """A user's file named removed (no extension) beside an output written without removed
    rows: an output's removed is a folder, so the file is the user's; refused, kept."""
    assert invoke("dedup", "data.jsonl", "-o", "out", *CPU).exit_code == 0
    (happy / "out" / "removed").write_text("the user's")
    result = invoke("dedup", "data.jsonl", "-o", "out", "--overwrite", *CPU)
    assert error_line(result).startswith("error: out: holds removed beside a gpudedup output"), result.output
    assert (happy / "out" / "removed").read_text() == "the user's"


def test_a_mount_point_under_a_folder_is_found_in_the_kernel_s_table(tmp_path):
    """mount_point_within reads /proc/self/mountinfo: a mount under a folder is found whatever
    its device number (a bind mount of the same file system has the same one), none under a
    folder that has none."""
    if not Path("/proc/self/mountinfo").exists():
        pytest.skip("no /proc/self/mountinfo (not Linux)")
    points = [line.split(" ")[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    point = next(Path(p) for p in points if p.count("/") >= 2 and "\\" not in p)  # (e.g. /dev/shm, /proc/sys)
    found = mount_point_within(point.parent)
    assert found is not None and str(found).startswith(str(point.parent) + os.sep)
    assert mount_point_within(tmp_path) is None


def test_overwrite_refuses_an_output_with_a_file_system_mounted_in_it(happy):
    """A volume mounted inside an old output (a bind mount of the input folder, here): replacing
    the output would delete the files of that file system through it; refused before any work,
    nothing deleted."""
    assert invoke("dedup", "data.jsonl", "-o", "out", *CPU).exit_code == 0
    (happy / "data").mkdir()
    shutil.copy(happy / "data.jsonl", happy / "data" / "mine.jsonl")
    point = happy / "out" / "deduplicated" / "m nt"
    point.mkdir()
    if subprocess.run(["mount", "--bind", str(happy / "data"), str(point)], capture_output=True).returncode != 0:
        pytest.skip("mount --bind is not permitted here (it needs CAP_SYS_ADMIN)")
    try:
        result = invoke("dedup", "data", "-o", "out", "--overwrite", *CPU)
        assert error_line(result) == (f"error: out: holds a mount point ({point.resolve()}), which replacing the "
                                      "output would delete; move it out, or choose another --output")
        assert (happy / "data" / "mine.jsonl").exists() and leftovers(happy) == []
    finally:
        subprocess.run(["umount", str(point)], check=True)
    # An empty mount point as the output (a fresh volume): the results cannot be renamed onto
    # it, which is said before any work.
    (happy / "empty").mkdir()
    (happy / "volume").mkdir()
    subprocess.run(["mount", "--bind", str(happy / "empty"), str(happy / "volume")], check=True)
    try:
        result = invoke("dedup", "data.jsonl", "-o", "volume", *CPU)
        assert error_line(result) == ("error: volume: is a mount point, which the results cannot be renamed onto; "
                                      "give a folder inside it (for example volume/out)")
        assert leftovers(happy) == []
    finally:
        subprocess.run(["umount", str(happy / "volume")], check=True)


def test_an_output_name_too_long_for_its_staging_folder_is_refused_before_any_work(happy, monkeypatch):
    """The results are written into a folder beside the output named after it and 31 bytes
    more: a name past 224 bytes is refused at once (not after the run, with the system's
    "File name too long"), one of 224 is written."""
    for size, code in ((225, 2), (224, 0)):
        name = "o" * size
        result = invoke("dedup", "data.jsonl", "-o", name, *CPU)
        assert result.exit_code == code, result.output
        if code:
            assert error_line(result) == (f"error: {name}: its name is 225 bytes long, and the folder the results are "
                                          "written into beside it takes 31 more, past the 255 a file name may have; "
                                          "give a name of at most 224 bytes")
            assert leftovers(happy) == [] and not os.path.lexists(happy / name)
        else:
            assert is_complete_output(happy / name)


@pytest.mark.parametrize("workers", [[], ["--workers", "2"]], ids=["work-dir", "workers"])
def test_an_output_in_the_work_directory_is_refused_where_the_run_writes_its_own(happy, workers):
    """An output inside the work directory is allowed, under another name than the entries
    the run writes there itself (ours.WORK_ENTRIES, which a finished run's top level keeps to):
    refused before any work at one of those, rather than after the run."""
    (happy / "work").mkdir()
    for inside in ("pairs", "stages/x", "clusters"):
        result = invoke("dedup", "data.jsonl", "-o", f"work/{inside}", "--work-dir", "work", *workers, *CPU)
        first = inside.split("/")[0]
        assert error_line(result) == (f"error: work/{inside}: the output directory must not be the work directory's "
                                      f"own {first} (the run writes it there); choose another --output (another "
                                      "name inside work will do)")
        assert list((happy / "work").iterdir()) == []
    result = invoke("dedup", "data.jsonl", "-o", "work/out", "--work-dir", "work", "--write-removed", *workers, *CPU)
    assert result.exit_code == 0, result.output
    assert {p.name for p in (happy / "work").iterdir()} - {"out"} <= WORK_ENTRIES


def test_an_output_that_is_a_link_to_a_directory_is_written_into_it(happy):
    """`-o out` where out is a link to an empty folder on another disk: the results go into that
    folder and the link stays (by the CLI and the API); once the folder holds them, the link
    is refused with --overwrite (nothing is deleted through a link) and the folder itself is
    replaced as any output."""
    target = happy / "elsewhere" / "results"
    target.mkdir(parents=True)
    (happy / "out").symlink_to(target, target_is_directory=True)
    result = invoke("dedup", "data.jsonl", "-o", "out", *CPU)
    assert result.exit_code == 0, result.output
    assert (happy / "out").is_symlink() and is_complete_output(target)
    again = invoke("dedup", "data.jsonl", "-o", "out", "--overwrite", *CPU)
    assert again.exit_code == 2 and f"give {target} itself" in error_line(again)
    with pytest.raises(OutputError, match="which is not empty"):
        gpudedup.dedup(Path("data.jsonl"), backend="cpu", output=happy / "out", overwrite=True)
    assert invoke("dedup", "data.jsonl", "-o", str(target), "--overwrite", *CPU).exit_code == 0
    assert (happy / "out").is_symlink() and is_complete_output(target)
    assert leftovers(happy) == [] and leftovers(target.parent) == []


def test_an_output_that_is_a_link_to_nothing_is_named_as_one(happy):
    """A link to nothing (its target gone) or a loop of links: refused as the link it is, and
    left as it is."""
    (happy / "gone").symlink_to(happy / "no" / "such" / "folder")
    (happy / "loop_a").symlink_to("loop_b")
    (happy / "loop_b").symlink_to("loop_a")
    for name, target in (("gone", str(happy / "no" / "such" / "folder")), ("loop_a", "loop_b")):
        refused = invoke("dedup", "data.jsonl", "-o", name, "--overwrite", *CPU)
        assert error_line(refused) == (f"error: {name}: is a link to {target}, which is no directory; choose "
                                       "another --output")
        assert refused.exit_code == 2 and (happy / name).is_symlink()


EARLIER_REPORT = {"gpudedup_version": "0.0.9", "backend": "cpu", "input": {}, "parameters": {}, "results": {},
                  "stages": {}}


@pytest.mark.parametrize("previous", ["output", "earlier version", "empty", "marker only"])
def test_overwrite_replaces_an_output_of_ours(happy, previous):
    """What --overwrite replaces: an output (it carries the marker), one written by a version
    before the marker (its report.json has gpudedup's keys), an empty folder."""
    out = happy / "out"
    out.mkdir()
    if previous == "output":
        assert invoke("dedup", "data.jsonl", "-o", "out", "--overwrite", "--write-removed", *CPU).exit_code == 0
        (out / "errors.jsonl").write_text("part of the old output")
    elif previous == "earlier version":
        (out / "report.json").write_text(json.dumps(EARLIER_REPORT))
        (out / "deduplicated.parquet").write_text("old")
    elif previous == "marker only":
        (out / OUTPUT_MARKER).write_text(json.dumps({"written_by": "gpudedup"}))
    result = invoke("dedup", "data.jsonl", "-o", "out", "--overwrite", *CPU)
    assert result.exit_code == 0, result.output
    assert is_complete_output(out) and not (out / "errors.jsonl").exists() and not (out / "removed").exists()
    assert not (out / "deduplicated.parquet").exists()
    assert leftovers(happy) == []


def test_overwrite_on_a_store_without_folders_replaces_the_output(happy):
    """An fsspec store whose folders go with their last object (its in-memory one here): the
    old output's files deleted, --overwrite finds its folders gone and writes the new output,
    rather than stop with neither."""
    fsspec = pytest.importorskip("fsspec")
    memory = fsspec.filesystem("memory")
    url = "memory://overwrite-folders/out"
    memory.mkdir("/overwrite-folders")  # (the bucket)
    try:
        for run in range(2):
            result = invoke("dedup", "data.jsonl", "-o", url, "--write-removed", *CPU,
                            *(["--overwrite"] if run else []))
            assert result.exit_code == 0, result.output
            written = {name.removeprefix("/overwrite-folders/out/") for name in memory.find("/overwrite-folders/out")}
            assert {"report.json", "pairs/part-00000.parquet", "clusters/part-00000.parquet"} <= written, written
    finally:
        memory.rm("/overwrite-folders", recursive=True)


@pytest.mark.parametrize("inside, what", [
    ("inner/.gpudedup-output", "a gpudedup output"),
    ("deep/work/manifest.json", "a gpudedup work directory"),
])
def test_overwrite_on_object_storage_keeps_what_was_put_into_the_output(happy, inside, what):
    """An output on object storage that another output or a work directory was put into: as on
    a local disk, --overwrite refuses, naming it, and deletes nothing; so it does for a folder
    of the user's own beside the output's files (a manifest.json of other keys: no work
    directory, but not the output's either)."""
    fsspec = pytest.importorskip("fsspec")
    memory = fsspec.filesystem("memory")
    url = "memory://overwrite-nested/out"
    memory.mkdir("/overwrite-nested")
    try:
        assert invoke("dedup", "data.jsonl", "-o", url, *CPU).exit_code == 0
        content = {"work_dir_format": 15, "gpudedup_version": "0"} if inside.endswith("manifest.json") else \
            {"written_by": "gpudedup"}
        memory.pipe(f"/overwrite-nested/out/{inside}", json.dumps(content).encode())
        memory.pipe("/overwrite-nested/out/other/manifest.json", b'{"a": 1}')
        before = sorted(memory.find("/overwrite-nested/out"))
        refused = invoke("dedup", "data.jsonl", "-o", url, "--overwrite", *CPU)
        folder = inside.rsplit("/", 1)[0]
        assert error_line(refused) == (f"error: {url}: holds {what} ({url}/{folder}), which replacing the output "
                                       "would delete; move it out, or choose another --output")
        assert sorted(memory.find("/overwrite-nested/out")) == before
        memory.rm(f"/overwrite-nested/out/{folder}", recursive=True)
        # A folder of the user's own beside the output's: refused too, then replaced without it.
        assert error_line(invoke("dedup", "data.jsonl", "-o", url, "--overwrite", *CPU)) == (
            f"error: {url}: holds other beside a gpudedup output, which replacing the output would delete; move it "
            "out, or choose another --output")
        memory.rm("/overwrite-nested/out/other", recursive=True)
        memory.pipe("/overwrite-nested/out/pairs/my_notes.txt", b"the user's")  # (among the output's files)
        assert "holds pairs/my_notes.txt beside a gpudedup output" in error_line(
            invoke("dedup", "data.jsonl", "-o", url, "--overwrite", *CPU))
        memory.rm("/overwrite-nested/out/pairs/my_notes.txt")
        # A file of an output format that report.json does not name; a file named as a table's folder.
        for mine, shown in (("deduplicated/mine/keep.parquet", "deduplicated/mine/keep.parquet"),
                            ("removed", "removed")):
            memory.pipe(f"/overwrite-nested/out/{mine}", b"the user's")
            assert f"holds {shown} beside a gpudedup output" in error_line(
                invoke("dedup", "data.jsonl", "-o", url, "--overwrite", *CPU))
            assert memory.cat(f"/overwrite-nested/out/{mine}") == b"the user's"
            memory.rm(f"/overwrite-nested/out/{mine}")
        assert invoke("dedup", "data.jsonl", "-o", url, "--overwrite", *CPU).exit_code == 0
    finally:
        memory.rm("/overwrite-nested", recursive=True)


def test_an_output_on_object_storage_that_holds_an_index_s_source_file_is_refused():
    """An index that verifies from its source files reads them again at every run: an output
    on object storage that is or holds one of them is refused, as a local one is."""
    from gpudedup.errors import OutputError
    from gpudedup.io.outputdir import check_apart_from_index
    from gpudedup.io.storage import Remote

    sources = ["memory://b/srcout/deduplicated/a.parquet"]
    for place in ("memory://b/srcout", "memory://b/srcout/deduplicated/a.parquet"):
        with pytest.raises(OutputError, match="must not be or hold a file the index verifies its documents from"):
            check_apart_from_index(Remote(place), sources, "the output directory", "output=")
    for place in ("memory://b/srcout2", "memory://b/srcout/other", "memory://c/srcout"):
        check_apart_from_index(Remote(place), sources, "the output directory", "output=")
    # memory:///b/x is memory://b/x; s3://b/x is another store's b/x.
    with pytest.raises(OutputError, match="must not be or hold a file the index verifies its documents from"):
        check_apart_from_index(Remote("memory:///b/srcout"), sources, "the output directory", "output=")
    check_apart_from_index(Remote("s3://b/srcout"), sources, "the output directory", "output=")
    # One store under two names: gcs:// is gs://, s3a:// is s3://.
    from gpudedup.io.outputdir import check_apart_from_inputs
    # An Azure container with its account and without it (taken from the environment).
    for out, into in (("gcs://b/x", "gs://b/x/in.jsonl"), ("s3a://b/x/out", "s3://b/x"),
                      ("abfs://c/x/out", "abfs://c@account.dfs.core.windows.net/x"),
                      ("abfss://c:KEY@account.dfs.core.windows.net/x", "az://c/x/in.jsonl")):
        with pytest.raises(OutputError, match="must not be, hold or lie inside the input"):
            check_apart_from_inputs(Remote(out), [into], "the output directory", "output=")


def test_a_finished_output_of_ours_is_named_as_such(happy):
    """Written twice without --overwrite: the second run says the folder holds a finished
    gpudedup output (what a resumed add that had committed meets), and replaces it only with
    --overwrite."""
    assert invoke("dedup", "data.jsonl", "-o", "out", *CPU).exit_code == 0
    before = tree_snapshot(happy / "out")
    refused = invoke("dedup", "data.jsonl", "-o", "out", *CPU)
    assert error_line(refused) == ("error: out: holds a finished gpudedup output (its report.json is there); use "
                                   "--overwrite to replace it")
    assert tree_snapshot(happy / "out") == before


def test_an_unfinished_output_of_ours_is_named_and_replaced_with_overwrite(happy):
    """A folder with gpudedup's marker but no report.json (what a run stopped while writing to
    object storage leaves) is named as such; --overwrite replaces it, and only it."""
    out = happy / "out"
    out.mkdir()
    (out / OUTPUT_MARKER).write_text(json.dumps({"written_by": "gpudedup"}))
    (out / "pairs.parquet").write_text("half written")
    refused = invoke("dedup", "data.jsonl", "-o", "out", *CPU)
    assert refused.exit_code != 0
    assert error_line(refused) == ("error: out: holds an unfinished gpudedup output (no report.json: a run stopped "
                                   "while it wrote there); use --overwrite to replace it")
    assert (out / "pairs.parquet").read_text() == "half written"
    assert invoke("dedup", "data.jsonl", "-o", "out", "--overwrite", *CPU).exit_code == 0
    assert is_complete_output(out)


@pytest.mark.timeout(90)
def test_demo_replaces_its_own_output_run_after_run(in_tmp):
    for _ in range(2):
        result = invoke("demo", "-o", "demo", "--backend", "cpu")
        assert result.exit_code == 0, result.output
    assert is_complete_output(in_tmp / "demo")


def test_demo_refuses_a_folder_of_user_files_before_it_runs(in_tmp, monkeypatch):
    """The demo replaces its own output, never someone's folder, and says so before the job."""
    user_files(in_tmp / "mine")
    before = tree_state(in_tmp / "mine")

    def no_job(*args, **kwargs):
        raise AssertionError("the demo ran its job before refusing its output")

    monkeypatch.setattr("gpudedup.api.dedup", no_job)
    result = invoke("demo", "-o", "mine", "--backend", "cpu")
    assert result.exit_code == 2
    assert error_line(result).startswith("error: mine: holds files that are not a gpudedup output")
    assert tree_state(in_tmp / "mine") == before


def test_demo_leaves_another_runs_results_alone(happy):
    """The demo replaces its own output, not the results of another run, and says so before
    its job; a folder of such results stays as it was."""
    assert invoke("dedup", "data.jsonl", "-o", "results", *CPU).exit_code == 0
    before = tree_state(happy / "results")
    result = invoke("demo", "-o", "results", "--backend", "cpu")
    assert error_line(result) == ("error: results: holds a gpudedup output that is not the demo's, which the demo "
                                  "does not replace; choose another -o for the demo")
    assert result.exit_code == 2 and tree_state(happy / "results") == before
    # An input whose name only ends as the sample's does is another run's too.
    (happy / "my_bible_sample.jsonl.gz").write_bytes(gzip.compress((happy / "data.jsonl").read_bytes()))
    assert invoke("dedup", "my_bible_sample.jsonl.gz", "-o", "mine", *CPU).exit_code == 0
    assert invoke("demo", "-o", "mine", "--backend", "cpu").exit_code == 2
    # So is an input of the sample's very name, not the shipped sample.
    (happy / "bible_sample.jsonl.gz").write_bytes(gzip.compress((happy / "data.jsonl").read_bytes()))
    assert invoke("dedup", "bible_sample.jsonl.gz", "-o", "named", *CPU).exit_code == 0
    before = tree_state(happy / "named")
    assert invoke("demo", "-o", "named", "--backend", "cpu").exit_code == 2
    assert tree_state(happy / "named") == before


# --- the work directory's lock ----------------------------------------------------------------


HOLDING_DRIVER = r'''
import os, pathlib, sys, time
import gpudedup.api as api
real = api.run_job
def run_job(*args, **kwargs):
    # The run holds its work directory here until told to go on.
    pathlib.Path(os.environ["STARTED"]).touch()
    deadline = time.monotonic() + 60
    while not pathlib.Path(os.environ["GO"]).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return real(*args, **kwargs)
api.run_job = run_job
from gpudedup.cli import main
sys.exit(main())
'''


@pytest.mark.timeout(120)
def test_a_second_run_on_a_work_directory_in_use_is_told_who_holds_it(happy):
    """Two runs sharing a --work-dir: the second, with or without --resume, is told that the
    directory is in use and by which process; the first goes on, and a later run may resume
    from it."""
    started, go = happy / "started", happy / "go"
    first = subprocess.Popen([sys.executable, "-c", HOLDING_DRIVER, "dedup", "data.jsonl", "-o", "first",
                              "--work-dir", "work", *CPU], cwd=happy, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "STARTED": str(started), "GO": str(go)})
    try:
        deadline = time.monotonic() + 60
        while not started.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert started.exists(), first.communicate()
        for extra in ([], ["--resume"]):
            second = invoke("dedup", "data.jsonl", "-o", "second", "--work-dir", "work", *extra, *CPU)
            assert second.exit_code == 2, second.output
            assert error_line(second) == (
                f"error: {happy / 'work'}: the work directory is in use by another run (process {first.pid} on "
                f"{socket.gethostname()}); wait for it or choose another --work-dir")
        with pytest.raises(gpudedup.ParameterError, match="in use by another run"):
            gpudedup.dedup(Path("data.jsonl"), backend="cpu", work_dir="work", resume=True)
    finally:
        go.touch()
        _, stderr = first.communicate(timeout=100)
    assert first.returncode == 0, stderr
    assert not (happy / "second").exists()
    resumed = invoke("dedup", "data.jsonl", "-o", "second", "--work-dir", "work", "--resume", *CPU)
    assert resumed.exit_code == 0, resumed.output


@pytest.mark.parametrize("inside", ["idx", "deduplicated/sub/idx", "work", "old-out"])
def test_overwrite_refuses_an_output_that_holds_an_index_work_directory_or_output(happy, inside):
    """--overwrite replaces a gpudedup output, but not what was put into it since that gpudedup
    made and the user owns: a persistent index, a work directory or another output, at any
    depth. The run is refused before any work and the folder is left as it was."""
    first = invoke("dedup", "data.jsonl", "-o", "out", *CPU)
    assert first.exit_code == 0, first.output
    place = happy / "out" / inside
    place.parent.mkdir(parents=True, exist_ok=True)
    if inside.endswith("idx"):
        made = invoke("index", "create", str(place))
    elif inside == "work":
        made = invoke("dedup", "data.jsonl", "-o", "out2", "--work-dir", str(place), *CPU)
    else:
        made = invoke("dedup", "data.jsonl", "-o", str(place), *CPU)
    assert made.exit_code == 0, made.output
    before = tree_snapshot(happy / "out")
    for command in (["dedup", "data.jsonl"], ["index", "add", "other-idx", "data.jsonl"]):
        if command[0] == "index":
            assert invoke("index", "create", "other-idx").exit_code == 0
        result = invoke(*command, "-o", "out", "--overwrite", *CPU)
        assert result.exit_code == 2
        assert "replacing the output would delete" in error_line(result) and inside in error_line(result)
        assert tree_snapshot(happy / "out") == before


@pytest.mark.parametrize("names", [["notes.txt"], [".tmp-notes.txt", ".tmp-backup/f"], ["manifest.json"],
                                   ["manifest.json", "segments/a"]])
def test_a_folder_that_is_no_work_directory_gets_no_lock_file(happy, names):
    """A work directory given that holds someone's files is refused, and nothing is written
    into it or taken out of it (not even the lock file): files named as temporary files
    commonly are, and a manifest.json that is not a run's (an index's, another tool's)."""
    refused_untouched(happy, {name: '{"format": 1}' if name == "manifest.json" else "x" for name in names})


def test_a_link_in_an_output_to_an_index_goes_with_the_output_and_the_index_stays(happy):
    """A link inside an output is the output's entry, not what it points to: --overwrite
    replaces the output, the link with it, and the index it pointed to is left as it was."""
    assert invoke("dedup", "data.jsonl", "-o", "out", *CPU).exit_code == 0
    assert invoke("index", "create", "idx").exit_code == 0
    (happy / "out" / "deduplicated" / "lidx").symlink_to(happy / "idx")
    before = tree_snapshot(happy / "idx")
    result = invoke("dedup", "data.jsonl", "-o", "out", "--overwrite", *CPU)
    assert result.exit_code == 0, result.output
    assert not os.path.lexists(happy / "out" / "deduplicated" / "lidx") and tree_snapshot(happy / "idx") == before


@pytest.mark.parametrize("manifest", ['// notes\n{"name": "app",}\n', "", "\xff", 'notes:\n{\n  "gpudedup_version": 1'])
@pytest.mark.parametrize("resume", [False, True])
def test_a_manifest_that_is_no_json_is_no_runs(happy, manifest, resume):
    """A run writes its manifest whole: a manifest.json that is not JSON is someone else's
    file, refused as the folder is, resumed or not, and nothing written beside it."""
    refused_untouched(happy, {"manifest.json": manifest, "notes.txt": "x"}, ["--resume"] if resume else [])


def refused_untouched(happy: Path, files: dict[str, str], options: Sequence[str] = ()) -> None:
    """A run with --work-dir mine, a folder of ``files`` (name -> text), is refused as no work
    directory, and the folder holds those files alone after it."""
    names = list(files)
    for name, text in files.items():
        (happy / "mine" / name).parent.mkdir(parents=True, exist_ok=True)
        (happy / "mine" / name).write_text(text)
    result = invoke("dedup", "data.jsonl", "-o", "out", "--work-dir", "mine", *CPU, *options)
    assert result.exit_code == 2 and "not a gpudedup work directory" in error_line(result)
    left = sorted(str(p.relative_to(happy / "mine")) for p in (happy / "mine").rglob("*") if p.is_file())
    assert left == sorted(names)


# --- the property: nothing outside the run's own places changes --------------------------------

# The folders of a random tree (each may hold input files, someone's files and links), and
# where a run's output, work directory and index may be: inside, beside and above the inputs.
# (Places listed twice are drawn more often: an earlier output, and new folders beside.)
FOLDERS = ["a", "a/b", "c", "c/d", "prev"]
PLACES = ["new", "new", "a", "a/new", "a/b", "c", "c/d/new", ".", "prev", "prev", "prev", "idx", "idx/new",
          "a/link0", "c/link1"]
TARGETS = FOLDERS + PLACES + ["c/d/x.jsonl", "prev/data", "prev/data", "prev/data/p.jsonl"]


@st.composite
def trees(draw):
    inputs = draw(st.lists(st.sampled_from(["a", "a/b", "c", "c/d/x.jsonl", "a/b/y.jsonl"]), min_size=1,
                           max_size=3, unique=True))
    links = draw(st.lists(st.tuples(st.sampled_from(FOLDERS[:4]), st.sampled_from(TARGETS)), max_size=3))
    return {
        "inputs": inputs, "links": links,
        "user_files": draw(st.lists(st.sampled_from(FOLDERS), max_size=3, unique=True)),
        "output": draw(st.sampled_from(PLACES)),
        "work": draw(st.one_of(st.none(), st.none(), st.sampled_from(PLACES))),
        "index": draw(st.one_of(st.none(), st.none(), st.sampled_from(["idx", "a/idx"]))),
        "overwrite": draw(st.sampled_from([True, True, False])),
    }


def make_tree(root: Path, tree: dict) -> None:
    for number, folder in enumerate(FOLDERS[:4]):
        write_jsonl(root / folder / f"f{number}.jsonl", records(f"r{number}", 3))
    write_jsonl(root / "c" / "d" / "x.jsonl", records("x", 3))
    write_jsonl(root / "a" / "b" / "y.jsonl", records("y", 3))
    # prev: an earlier output (marker and report), with input data of someone's inside
    (root / "prev").mkdir()
    (root / "prev" / OUTPUT_MARKER).write_text(json.dumps({"written_by": "gpudedup"}))
    (root / "prev" / "report.json").write_text(json.dumps(EARLIER_REPORT))
    write_jsonl(root / "prev" / "data" / "p.jsonl", records("p", 3))
    for folder in tree["user_files"]:
        (root / folder / "notes.txt").write_text(f"notes in {folder}")
        (root / folder / ".hidden").write_text("dotfile")
    for number, (folder, target) in enumerate(tree["links"]):
        link = root / folder / f"link{number}"
        if not os.path.lexists(link):
            link.symlink_to(os.path.relpath(root / target, root / folder))
    if tree["index"] is not None:
        Index.create(root / tree["index"])


def run(root: Path, tree: dict) -> Optional[str]:
    """The run the tree asks for (an Index.add where it has an index); None, or the refusal."""
    inputs = [root / path for path in tree["inputs"]]
    output = root / tree["output"]
    work = None if tree["work"] is None else root / tree["work"]
    try:
        if tree["index"] is not None:
            Index(root / tree["index"]).add(inputs, backend="cpu", output=output, overwrite=tree["overwrite"],
                                            work_dir=work)
        else:
            gpudedup.dedup(inputs, backend="cpu", output=output, overwrite=tree["overwrite"], work_dir=work)
    except GpudedupError as error:
        return str(error)
    return None


def inside(relative: str, place: Optional[str]) -> bool:
    if place is None:
        return False
    if place == ".":
        return True
    return relative == place or relative.startswith(place + "/")


def read_entries(root: Path, inputs: list[Path]) -> set[str]:
    """The entries under ``root`` that a run over ``inputs`` reads, as its scan resolves them
    (links followed): the files found, and everything inside the folders walked."""
    try:
        found = scan_inputs(inputs, "skip")
    except InputError:
        return set()
    files = {os.path.relpath(os.path.realpath(file), root) for file in found.files}
    folders = [os.path.relpath(os.path.realpath(folder), root) for folder in found.seen_dirs.values()]
    return files | {relative for relative in tree_state(root) if any(inside(relative, f) for f in folders)}


# Explicit examples: a link from an input into an earlier output replaced with --overwrite,
# the index as the output, an output holding the index, and the folder above the inputs (of
# someone's files) as the output.
LINK_INTO_OUTPUT = {"inputs": ["a"], "links": [("a", "prev/data")], "user_files": [], "output": "prev",
                    "work": None, "index": None, "overwrite": True}
INDEX_AS_OUTPUT = {"inputs": ["c"], "links": [], "user_files": [], "output": "idx", "work": None, "index": "idx",
                   "overwrite": True}
OUTPUT_HOLDS_INDEX = {**INDEX_AS_OUTPUT, "index": "a/idx", "output": "a", "inputs": ["c/d/x.jsonl"]}
USER_FOLDER_AS_OUTPUT = {"inputs": ["c/d/x.jsonl"], "links": [], "user_files": ["a", "c"], "output": ".",
                         "work": None, "index": None, "overwrite": True}

# An input given twice, once through a link, holding an index: passed over as first met.
INDEX_IN_A_LINKED_INPUT = {"inputs": ["c", "a"], "links": [("c", "a")], "user_files": [], "output": "new", "work": None,
                           "index": "a/idx", "overwrite": True}


@pytest.mark.timeout(120)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees())
@example(tree=LINK_INTO_OUTPUT)
@example(tree=INDEX_AS_OUTPUT)
@example(tree=OUTPUT_HOLDS_INDEX)
@example(tree=USER_FOLDER_AS_OUTPUT)
@example(tree=INDEX_IN_A_LINKED_INPUT)
def test_no_file_outside_the_runs_own_places_is_ever_removed_or_changed(tree):
    """Over random trees: every entry the run reads (as its scan resolves it), every file of
    the index (its manifest and lock aside, which an add that succeeds replaces), and every
    entry outside the run's output and work directory is what it was; after a refused run,
    every entry at all. New entries appear only in the run's output, work directory and index."""
    with tempfile.TemporaryDirectory(prefix="gpudedup-safety-") as folder:
        root = Path(folder).resolve()
        make_tree(root, tree)
        before = tree_state(root)
        read = read_entries(root, [root / path for path in tree["inputs"]])
        refused = run(root, tree)
        after = tree_state(root)
        index = tree["index"]
        for relative, entry in before.items():
            if inside(relative, index):
                kept = refused is not None or relative not in (f"{index}/manifest.json", f"{index}/writer.lock")
            else:
                kept = refused is not None or relative in read or \
                    not any(inside(relative, place) for place in (tree["output"], tree["work"]))
            if kept:
                assert after.get(relative) == entry, (relative, refused, tree)
        for relative in set(after) - set(before):  # (a work directory is made with its parents)
            assert any(inside(relative, place) for place in (tree["output"], tree["work"], index)) or \
                (tree["work"] is not None and inside(tree["work"], relative)), (relative, refused, tree)
        if refused is None:
            assert is_complete_output(root / tree["output"]), tree
            if index is not None:
                Index(root / index).info()  # (the index still answers)


# --- folders gpudedup wrote, inside the inputs ------------------------------------------------


def test_an_output_an_index_and_a_work_directory_inside_an_input_are_passed_over(indexed):
    """An earlier output, an index and a work directory inside an input folder hold no
    documents: the walk passes over each with a note that says what it is (never reading a
    report or a manifest as JSON Lines); given by name, each is refused with one line."""
    corpus = indexed / "corpus"
    corpus.mkdir()
    write_jsonl(corpus / "docs.jsonl", records("c"))
    assert invoke("dedup", "corpus/docs.jsonl", "-o", "corpus/old", "--id-field", "id",
                  "--work-dir", "corpus/work", *CPU).exit_code == 0
    (indexed / "sub" / "idx").rename(corpus / "idx")
    found = scan_inputs([corpus])
    assert [Path(file).name for file in found.files] == ["docs.jsonl"]
    assert sorted(found.notes) == ["corpus/idx: skipped: a gpudedup index, not documents",
                                   "corpus/old: skipped: a gpudedup output, not documents",
                                   "corpus/work: skipped: a gpudedup work directory, not documents"]
    result = invoke("dedup", "corpus", "-o", "out2", "--id-field", "id", *CPU)
    assert result.exit_code == 0, result.output
    assert json.loads((indexed / "out2" / "report.json").read_text())["input"]["documents"] == 6
    for folder, what in (("old", "a gpudedup output"), ("idx", "a gpudedup index"),
                         ("work", "a gpudedup work directory")):
        refused = invoke("dedup", f"corpus/{folder}", "-o", f"out-{folder}", *CPU)
        assert refused.exit_code == 2
        assert error_line(refused).startswith(f"error: corpus/{folder}: {what}, not documents")
