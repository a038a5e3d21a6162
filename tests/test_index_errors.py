"""What a command says when the file system fails it: one line naming the path and what is
wrong, exit code 2, never a traceback; and what it leaves.

The index (gpudedup/index/): a writer (create, add, compact, remove) that meets a full disk
(ENOSPC, raised here in-process from the writes the index makes, and once in a process of its
own) or a file of the wrong kind (a segment's directory that is a file, a segment's file that
is a directory, writer.lock a directory) leaves the last committed state as it was, and no
temporary file; readers (info, query, dedup --against) name the damaged path. An ``index
create`` killed before its commit (tests/index_driver.py) can be made again, and the other
commands say so.

A staged run's work directory (--work-dir) with a truncated or garbage file says which file and
what to do; a short write there (numpy's "N requested and M written") is a full disk; a
--max-memory of a few bytes is not "0 MiB".
"""

from __future__ import annotations

import errno
import json
import re
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import gpudedup
import gpudedup.index.files as index_files
from gpudedup.index import Index
from gpudedup.io.credentials import os_reason

from cli_support import assert_user_error, error_line, invoke, write_jsonl
from index_support import assert_only_committed, bible_records, committed_state

DRIVER = Path(__file__).with_name("index_driver.py")
LIMIT = 120  # seconds a child process may take: only turns a hang into a failure
FULL = "No space left on device"


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A directory holding an index of two segments and a tombstone file (idx), and new data
    near some of its documents (new.jsonl)."""
    root = tmp_path_factory.mktemp("index_errors")
    records = bible_records()
    index = Index.create(root / "idx", threshold=0.8, shingle="word", ngram=5)
    index.add(pa.Table.from_pylist(records[0::7][:40]), id_field="id", tag="a")
    index.add(pa.Table.from_pylist(records[1::7][:40]), id_field="id", tag="b")
    assert index.remove(ids=[records[1::7][0]["id"]]) == 1
    write_jsonl(root / "new.jsonl", records[2::7][:40])
    return root


@pytest.fixture
def copy(base, tmp_path, monkeypatch) -> Path:
    """A fresh copy of the base index at tmp_path/idx (the working directory), new.jsonl beside it."""
    shutil.copytree(base / "idx", tmp_path / "idx")
    shutil.copy(base / "new.jsonl", tmp_path / "new.jsonl")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "idx"


def writer_args(command: str, index: Path) -> list:
    if command == "add":
        return ["index", "add", index, index.parent / "new.jsonl", "-o", index.parent / "out", "--id-field", "id",
                "--tag", "c", "-q"]
    if command == "remove":
        return ["index", "remove", index, "--tag", "a"]
    return ["index", "compact", index]


def reader_args(command: str, index: Path) -> list:
    if command == "dedup --against":
        return ["dedup", index.parent / "new.jsonl", "-o", index.parent / "out", "--against", index, "--id-field",
                "id", "-q"]
    if command == "query":
        return ["index", "query", index, "In the beginning God created the heaven and the earth."]
    return ["index", "info", index]


def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, FULL)


# --- a full disk under a writer ---------------------------------------------------------------


def half_then_full(path, array):
    """index_files.write_npy on a disk that fills half way through the file."""
    with open(path, "wb") as sink:
        sink.write(b"\x93NUMPY" + bytes(100))
    raise OSError(errno.ENOSPC, FULL)


def arrow_full(table, where, *args, **kwargs):
    """pyarrow.parquet.write_table on a full disk, as Arrow says it."""
    Path(where).write_bytes(b"PAR1")
    raise OSError(errno.ENOSPC, f"Error writing bytes to file. Detail: [errno {errno.ENOSPC}] {FULL}")


@pytest.mark.parametrize("command", ["add", "compact", "remove"])
def test_a_writer_on_a_full_disk_says_so_in_one_line_and_keeps_the_last_commit(copy, monkeypatch, command):
    before = committed_state(copy)
    with monkeypatch.context() as patched:
        if command == "remove":
            patched.setattr(index_files.pq, "write_table", arrow_full)
        else:
            patched.setattr(index_files, "write_npy", half_then_full)
        result = invoke(*writer_args(command, copy))
        assert result.exit_code == 2, f"exit {result.exit_code}\n{result.output}\n{result.exception!r}"
        assert "Traceback" not in result.output
        line = error_line(result)
        assert f"{copy}: cannot change the index ({FULL})" in line, line
        assert "last commit" in line, line
    if command == "add":  # its results were written before the commit: the line says where
        assert "run the add again with --overwrite" in line and str(copy.parent / "out") in line, line
    assert committed_state(copy) == before
    assert_only_committed(copy)  # the temporary files were removed at once
    assert Index(copy).info()["generation"] == json.loads(before["manifest.json"])["generation"]
    # Once there is room, the same command succeeds.
    again = invoke(*writer_args(command, copy), *(["--overwrite"] if command == "add" else []))
    assert again.exit_code == 0, again.output
    assert committed_state(copy) != before


def test_a_manifest_on_a_full_disk(copy, monkeypatch):
    before = committed_state(copy)
    real = index_files.fsync_path
    monkeypatch.setattr(index_files, "fsync_path",
                        lambda path: no_space() if path.name.endswith("-manifest.json") else real(path))
    result = invoke("index", "compact", copy)
    assert_user_error(result, str(copy), FULL, out=copy.parent / "out")
    assert committed_state(copy) == before
    assert_only_committed(copy)


ENOSPC_CHILD = """
import errno, sys
import gpudedup.index.files as files
def full(path, array):
    raise OSError(errno.ENOSPC, "No space left on device")
files.write_npy = full
from gpudedup.console import main
sys.argv = ["gpudedup", *sys.argv[1:]]
main()
"""


def test_a_full_disk_in_a_process_of_its_own_is_one_line_on_stderr(copy):
    before = committed_state(copy)
    child = subprocess.run([sys.executable, "-c", ENOSPC_CHILD, "index", "compact", str(copy)], capture_output=True,
                           text=True, timeout=LIMIT)
    assert child.returncode == 2, child.stderr
    lines = child.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), child.stderr
    assert str(copy) in lines[0] and FULL in lines[0], lines[0]
    assert committed_state(copy) == before
    assert_only_committed(copy)


def test_create_on_a_full_disk_can_be_made_again(tmp_path, monkeypatch):
    index = tmp_path / "made"
    with monkeypatch.context() as patched:
        real = index_files.fsync_path
        patched.setattr(index_files, "fsync_path",
                        lambda path: no_space() if path.name.endswith("-manifest.json") else real(path))
        result = invoke("index", "create", index)
        assert_user_error(result, str(index), FULL, "gpudedup index create", out=tmp_path / "out")
    assert index_files.interrupted_create(index), sorted(p.name for p in index.iterdir())
    assert invoke("index", "create", index).exit_code == 0
    assert_only_committed(index)
    assert Index(index).info()["documents"] == 0


def test_os_reason_names_a_full_disk_however_it_is_put():
    assert os_reason(OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left")) == FULL
    # numpy's short write names no cause: it is a full disk.
    assert os_reason(OSError("960000 requested and 463840 written")) == \
        f"{FULL}: a write stopped short, 960000 requested and 463840 written"
    assert os_reason(OSError(errno.EACCES, "Permission denied")) == "Permission denied"


# --- files of the wrong kind -------------------------------------------------------------------


def first_segment(index: Path) -> Path:
    return index / "segments" / json.loads((index / "manifest.json").read_text())["segments"][0]["name"]


def make_wrong(index: Path, what: str) -> tuple[Path, str]:
    """Replace a path of the index by one of the other kind; (the path, what the line says)."""
    if what == "segment directory is a file":
        path = first_segment(index)
        shutil.rmtree(path)
        path.write_text("not a segment\n")
        return path, "a file where the index has a directory"
    if what == "segment file is a directory":
        path = first_segment(index) / "keys.npy"
        path.unlink()
        path.mkdir()
        return path, "a directory where the index has a file"
    if what == "segments is a file":
        path = index / "segments"
        shutil.rmtree(path)
        path.write_text("")
        return path, "a file where the index has a directory"
    path = index / "tombstones" / json.loads((index / "manifest.json").read_text())["tombstones"]["name"]
    path.unlink()
    path.mkdir()
    return path, "a directory where the index has a file"


KINDS = ["segment directory is a file", "segment file is a directory", "segments is a file",
         "tombstone file is a directory"]


@pytest.mark.parametrize("what", KINDS)
def test_a_path_of_the_wrong_kind_is_named_by_every_command(copy, what):
    path, said = make_wrong(copy, what)
    manifest = (copy / "manifest.json").read_bytes()
    commands = [reader_args(name, copy) for name in ("info", "query", "dedup --against")] + \
               [writer_args(name, copy) for name in ("add", "compact", "remove")]
    for args in commands:
        result = invoke(*args)
        line = assert_user_error(result, f"{path}: {said}", "the index is damaged", out=copy.parent / "out")
        assert line.count("error:") == 1
    assert (copy / "manifest.json").read_bytes() == manifest
    assert not any(".tmp-" in p.name for p in copy.rglob("*"))


def test_an_index_under_a_file_is_refused_naming_the_file(tmp_path):
    """A path whose parent is a file (an input file taken for a folder): no index exists, so
    none is called damaged; the file is named and left as it was."""
    write_jsonl(tmp_path / "data.jsonl", bible_records()[:3])
    before = (tmp_path / "data.jsonl").read_bytes()
    result = invoke("index", "create", tmp_path / "data.jsonl" / "idx")
    assert result.exit_code == 2
    assert error_line(result) == (f"error: {tmp_path / 'data.jsonl' / 'idx'}: {tmp_path / 'data.jsonl'} is a file, "
                                  "not a directory; choose another path for the index")
    assert (tmp_path / "data.jsonl").read_bytes() == before


def test_names_that_are_not_utf8_are_refused_before_any_work(tmp_path):
    """An index folder or a tag of bytes that are not UTF-8 (Python holds them as surrogates)
    cannot be written where the index and its reports name them: refused in one line before
    anything is made or written, not a traceback after the outputs."""
    folder = Path(os.fsdecode(os.fsencode(str(tmp_path)) + b"/idx\xff"))
    for call in (lambda: Index.create(folder), lambda: Index(folder)):
        with pytest.raises(gpudedup.errors.ParameterError, match="the name is not valid UTF-8"):
            call()
    assert not any(tmp_path.iterdir())
    result = invoke("index", "create", folder)
    assert result.exit_code == 2 and "the name is not valid UTF-8" in error_line(result)
    write_jsonl(tmp_path / "new.jsonl", bible_records()[:20])
    index = Index.create(tmp_path / "idx")
    before = committed_state(index.path)
    with pytest.raises(gpudedup.errors.ParameterError, match="is not valid UTF-8, in which the index stores its tags"):
        index.add(tmp_path / "new.jsonl", id_field="id", tag="w\udcf6che", output=tmp_path / "out")
    assert committed_state(index.path) == before and not (tmp_path / "out").exists()


def test_a_lock_file_that_is_a_directory_says_to_remove_it(copy):
    before = committed_state(copy)
    (copy / "writer.lock").unlink()
    (copy / "writer.lock").mkdir()
    for command in ("add", "compact", "remove"):
        result = invoke(*writer_args(command, copy))
        assert_user_error(result, f"{copy / 'writer.lock'}: a directory where the index has its lock file",
                          "remove it", out=copy.parent / "out")
    assert committed_state(copy) == before
    # Readers take no lock.
    assert invoke(*reader_args("info", copy)).exit_code == 0
    (copy / "writer.lock").rmdir()
    assert invoke(*writer_args("compact", copy)).exit_code == 0


# --- an interrupted create --------------------------------------------------------------------


def interrupted_line(index: Path) -> str:
    return (f"{index}: an index whose creation was interrupted (no manifest.json); run "
            f"`gpudedup index create {index}` again")


def test_a_create_killed_before_its_commit_can_be_made_again(base, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    index = tmp_path / "idx"
    killed = subprocess.run([sys.executable, str(DRIVER), str(index), "index", "create", str(index)],
                            env={**os.environ, "TEST_INDEX_AT": "replace .tmp-", "TEST_INDEX_ACTION": "kill"},
                            capture_output=True, text=True, timeout=LIMIT)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    left = sorted(p.name for p in index.iterdir())
    assert len(left) == 2 and left[1] == "writer.lock" and left[0].startswith(".tmp-") \
        and left[0].endswith("-manifest.json"), left
    shutil.copy(base / "new.jsonl", tmp_path / "new.jsonl")
    for args in [reader_args(name, index) for name in ("info", "query", "dedup --against")] + \
                [writer_args(name, index) for name in ("add", "compact", "remove")]:
        assert_user_error(invoke(*args), interrupted_line(index), out=tmp_path / "out")
    made = invoke("index", "create", index, "--threshold", "0.7")
    assert made.exit_code == 0, made.output
    assert_only_committed(index)
    assert Index(index).info()["parameters"]["threshold"] == 0.7
    added = invoke(*writer_args("add", index))
    assert added.exit_code == 0, added.output
    assert Index(index).info()["documents"] == 40


def test_create_makes_again_only_what_an_interrupted_create_leaves(tmp_path):
    lock_only = tmp_path / "lock-only"  # killed between taking the lock and writing the manifest
    lock_only.mkdir()
    (lock_only / "writer.lock").write_text("process 1 on elsewhere")
    assert_user_error(invoke("index", "info", lock_only), interrupted_line(lock_only), out=tmp_path / "out")
    assert invoke("index", "create", lock_only).exit_code == 0
    assert_only_committed(lock_only)
    # Anything else in the directory is the user's: refused, nothing removed.
    other = tmp_path / "other"
    other.mkdir()
    (other / "writer.lock").write_text("")
    (other / ".tmp-0123-manifest.json").write_text("{")
    (other / "notes.txt").write_text("mine")
    before = sorted(p.name for p in other.iterdir())
    assert_user_error(invoke("index", "create", other), str(other), "not an empty directory", out=tmp_path / "out")
    assert_user_error(invoke("index", "info", other), str(other), "not a gpudedup index", out=tmp_path / "out")
    assert sorted(p.name for p in other.iterdir()) == before
    # An index that was made is never made again over.
    assert invoke("index", "create", lock_only).exit_code == 2


LOCK_HOLDER = """
import sys
from pathlib import Path
from gpudedup.index.files import writer_lock
with writer_lock(Path(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_a_create_under_way_elsewhere_is_not_made_over(tmp_path):
    index = tmp_path / "idx"
    index.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(index)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        refused = invoke("index", "create", index)
        assert_user_error(refused, f"process {holder.pid} on ", "being changed", out=tmp_path / "out")
        assert not (index / "manifest.json").exists()
    finally:
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(timeout=LIMIT)


# --- the work directory ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> Path:
    """A finished staged run: data.jsonl, its work directory work/ (every stage kept)."""
    root = tmp_path_factory.mktemp("staged")
    write_jsonl(root / "data.jsonl", bible_records()[:200])
    result = invoke("dedup", root / "data.jsonl", "-o", root / "out", "--work-dir", root / "work", "--id-field",
                    "id", "-q", "--backend", "cpu")
    assert result.exit_code == 0, result.output
    return root


DAMAGES = {
    "truncated plan": ("plan.npy", lambda data: data[:50]),
    "garbage stage array": ("stages/pairs/counts.npy", lambda data: bytes(range(256)) * 4),
    "truncated stage array": ("stages/candidates/candidates.npy", lambda data: data[:len(data) - 9]),
    "truncated shard info": ("shards/00000/info.json", lambda data: data[:len(data) // 2]),
    "garbage shard ids": ("shards/00000/ids.parquet", lambda data: b"not parquet" * 20),
    "truncated manifest": ("manifest.json", lambda data: data[:40]),
    # (None: the file deleted; a finished stage's info.json names its arrays)
    "missing pairs array": ("stages/pairs/part_sizes.npy", None),
    "missing copies array": ("stages/copies/sizes.npy", None),
    "missing candidates array": ("stages/candidates/parts.npy", None),
    "stage info without its list": ("stages/pairs/info.json", lambda data: b"{}"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_work_directory_file_is_named_with_what_to_do(staged, tmp_path, damage):
    name, change = DAMAGES[damage]
    work = tmp_path / "work"
    shutil.copytree(staged / "work", work)
    path = work / name
    if change is None:
        path.unlink()
    else:
        path.write_bytes(change(path.read_bytes()))
    result = invoke("dedup", staged / "data.jsonl", "-o", tmp_path / "out", "--work-dir", work, "--id-field", "id",
                    "-q", "--backend", "cpu", "--resume")
    assert_user_error(result, f"{path}: cannot be read", "the work directory is damaged",
                      "choose another --work-dir", out=tmp_path / "out")


@pytest.mark.parametrize("stage", ["signatures", "shingle sets"])
def test_a_short_write_in_the_work_directory_is_a_full_disk(tmp_path, monkeypatch, stage):
    """In the signature stage, and in a stage of Dask's tasks (the shingle sets' spill of the
    pairs' documents), whose other failures are the cluster's."""
    write_jsonl(tmp_path / "data.jsonl", bible_records())  # (its near-duplicates: pairs to verify)
    save = np.save

    def short(path, *args, **kwargs):
        if stage == "signatures" or getattr(path, "name", None) == "columns.npy":  # (a spill of sets)
            raise OSError("960000 requested and 463840 written")
        return save(path, *args, **kwargs)

    monkeypatch.setattr(np, "save", short)
    result = invoke("dedup", tmp_path / "data.jsonl", "-o", tmp_path / "out", "--work-dir", tmp_path / "work",
                    "--id-field", "id", "-q", "--backend", "cpu")
    assert_user_error(result, str(tmp_path / "work"), f"{FULL}: a write stopped short, 960000 requested",
                      out=tmp_path / "out")


def test_a_max_memory_of_a_few_bytes_is_said_in_bytes(staged, tmp_path):
    result = invoke("dedup", staged / "data.jsonl", "-o", tmp_path / "out", "--max-memory", "1", "-q")
    line = assert_user_error(result, "--max-memory 1 byte:", out=tmp_path / "out")
    assert re.search(r"(?<![\d.])0 MiB", line) is None  # (not "260 MiB in use")
