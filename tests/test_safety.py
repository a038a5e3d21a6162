"""Safety of what a run writes and reads.

- Output directories and files get the user's umask (a directory made by tempfile.mkdtemp
  would be 0700 whatever the umask), for a new output and for one replaced with --overwrite.
- Nothing read from an input or an output directory is executed or unpickled: the package's
  source uses no pickle, eval, exec, np.load(allow_pickle=True), read_pickle, ... (scanned with
  ast), and pickled payloads planted in inputs and in a previous output never run.
- Paths in the data (ids such as "../../evil" or "/etc/passwd", paths in texts) never decide
  where files are written: everything lands in OUT, and the HTML report escapes them.
- A failing or interrupted write leaves neither OUT nor its staging directory (and a previous
  output unchanged); --overwrite never deletes anything outside OUT, a symlinked OUT's target
  included.
"""

from __future__ import annotations

import ast
import gzip
import json
import pickle
import subprocess
import sys
from importlib import resources
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import gpudedup
import gpudedup.io.layout
import gpudedup.results.result
from gpudedup.cli import app
from oracles import is_similar, shingle_set
from output_support import kept_files, read_pairs

runner = CliRunner()
PACKAGE = Path(gpudedup.__file__).parent


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def sample_records(rows: int = 40) -> list[dict]:
    sample = resources.files("gpudedup").joinpath("data/bible_sample.jsonl.gz")
    with resources.as_file(sample) as path, gzip.open(path, "rt", encoding="utf-8") as handle:
        records = [json.loads(line) for line, _ in zip(handle, range(rows))]
    return [{"id": r["id"], "text": r["text"]} for r in records]


def write_jsonl(path: Path, records) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}."))


def tree(path: Path) -> dict:
    return {str(p.relative_to(path)): (p.read_bytes() if p.is_file() and not p.is_symlink() else None)
            for p in sorted(path.rglob("*"))}


# --- permissions follow the umask --------------------------------------------------------------

UMASK_SCRIPT = r'''
import json, os, stat, sys
os.umask(int(sys.argv[1], 8))
from gpudedup.cli import app
data, out = sys.argv[2], sys.argv[3]
modes = []
for extra in ([], ["--overwrite"]):
    app(["dedup", data, "-o", out, "--id-field", "id", "-q", *extra], standalone_mode=False)
    modes.append({os.path.relpath(os.path.join(folder, name), out) + ("/" if name in folders else ""):
                  stat.S_IMODE(os.stat(os.path.join(folder, name)).st_mode)
                  for folder, folders, files in os.walk(out) for name in folders + files})
    modes[-1]["."] = stat.S_IMODE(os.stat(out).st_mode)
print(json.dumps(modes))
'''


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o027], ids=["022", "077", "027"])
def test_output_directory_and_files_follow_the_umask(tmp_path, umask):
    data = write_jsonl(tmp_path / "data.jsonl", sample_records())
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-c", UMASK_SCRIPT, f"{umask:o}", str(data), str(out)],
                          capture_output=True, text=True, timeout=25)
    assert done.returncode == 0, done.stderr
    for modes in json.loads(done.stdout.splitlines()[-1]):  # a new output, then one replaced
        assert modes.pop(".") == 0o777 & ~umask
        folders = {name: mode for name, mode in modes.items() if name.endswith("/")}
        files = {name: mode for name, mode in modes.items() if not name.endswith("/")}
        assert set(folders) == {"clusters/", "deduplicated/", "pairs/"}
        assert set(folders.values()) == {0o777 & ~umask}, {k: oct(v) for k, v in folders.items()}
        assert files and set(files.values()) == {0o666 & ~umask}, {k: oct(v) for k, v in files.items()}


# --- nothing is unpickled or executed ------------------------------------------------------------

UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "joblib", "marshal", "shelve",
                  "runpy", "code", "codeop"}
UNSAFE_BUILTINS = {"eval", "exec", "compile", "__import__", "execfile"}
UNSAFE_ATTRIBUTES = {"read_pickle", "import_module", "run_path", "run_module", "unsafe_load", "full_load",
                     "system", "popen"}
# load / loads are safe on json (and np.load without allow_pickle), not on these:
UNSAFE_LOADERS = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "joblib", "marshal", "yaml", "torch"}


def unsafe_uses(source: str, filename: str = "<source>") -> list[str]:
    """Where ``source`` imports a deserialiser that can run code, calls eval/exec/compile,
    passes allow_pickle=True, calls read_pickle, pickle-like .loads, yaml.load, os.system, ..."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        where = f"{filename}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            found += [f"{where}: import {a.name}" for a in node.names if a.name.split(".")[0] in UNSAFE_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in UNSAFE_MODULES:
            found.append(f"{where}: from {node.module} import ...")
        elif isinstance(node, ast.ImportFrom):
            found += [f"{where}: from {node.module} import {a.name}" for a in node.names
                      if a.name in (UNSAFE_BUILTINS | UNSAFE_ATTRIBUTES | {"PyExtensionType"}) - {"system"}]
        elif isinstance(node, ast.Call):
            function = node.func
            if isinstance(function, ast.Name) and function.id in UNSAFE_BUILTINS:
                found.append(f"{where}: {function.id}(...)")
            if isinstance(function, ast.Attribute):
                if function.attr in UNSAFE_ATTRIBUTES:
                    found.append(f"{where}: .{function.attr}(...)")
                owner = function.value.id if isinstance(function.value, ast.Name) else ""
                if function.attr in {"load", "loads"} and owner in UNSAFE_LOADERS:
                    found.append(f"{where}: {owner}.load(...)")
            for keyword in node.keywords:
                if keyword.arg == "allow_pickle" and not (isinstance(keyword.value, ast.Constant)
                                                          and keyword.value.value is False):
                    found.append(f"{where}: allow_pickle=...")
        elif isinstance(node, ast.Attribute) and node.attr == "PyExtensionType":
            found.append(f"{where}: .{node.attr}")
    return found


def test_the_scanner_finds_unsafe_code():
    bad = ("import pickle\nfrom joblib import load\nimport numpy as np\nx = np.load(p, allow_pickle=True)\n"
           "y = eval(s)\nexec(s)\nimport pandas as pd\npd.read_pickle(p)\nimport yaml\nyaml.load(s)\n"
           "__import__(name)\nimport os\nos.system(s)\nz = marshal.loads(b)\n")
    assert len(unsafe_uses(bad)) == 10, unsafe_uses(bad)
    fine = ("import re\nre.compile('x')\nimport numpy as np\nnp.load(p)\nnp.load(p, allow_pickle=False)\n"
            "import json\njson.dump(x, f)\njson.loads(s)\n")
    assert unsafe_uses(fine) == []


def test_the_package_never_unpickles_or_evaluates():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 20
    found = [use for path in files
             for use in unsafe_uses(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE)))]
    assert found == []


def test_pyarrow_does_not_unpickle_extension_types():
    """pyarrow before 14.0.1 unpickled 'arrow.py_extension_type' metadata of any file it read
    (CVE-2023-47248); the planted-payload tests below rely on a fixed one."""
    version = tuple(int(part) for part in pa.__version__.split(".")[:3] if part.isdigit())
    assert version >= (14, 0, 1), pa.__version__


class Payload:
    """Unpickling this creates the file ``marker``."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def parquet_with_pickled_extension(path: Path, records: list[dict], marker: Path) -> Path:
    """A Parquet file whose 'payload' column claims to be a pickled Python extension type."""
    payload = pickle.dumps(Payload(marker))
    field = pa.field("payload", pa.binary(), metadata={b"ARROW:extension:name": b"arrow.py_extension_type",
                                                       b"ARROW:extension:metadata": payload})
    table = pa.table({"id": [r["id"] for r in records], "text": [r["text"] for r in records],
                      "payload": pa.array([b"x"] * len(records), pa.binary())})
    table = table.cast(pa.schema([table.schema.field("id"), table.schema.field("text"), field]))
    pq.write_table(table, path)
    return path


def test_pickled_payloads_in_inputs_and_in_the_previous_output_never_run(tmp_path, monkeypatch, output_names):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "UNPICKLED"
    assert not marker.exists()
    pickle.loads(pickle.dumps(Payload(marker)))  # the payload works ...
    assert marker.exists()
    marker.unlink()  # ... and must not run again below

    records = sample_records()
    inputs = tmp_path / "in"
    inputs.mkdir()
    parquet_with_pickled_extension(inputs / "a.parquet", records[:20], marker)
    write_jsonl(inputs / "b.jsonl", records[20:])
    (inputs / "c.pkl").write_bytes(pickle.dumps(Payload(marker)))  # other file types are skipped
    np.save(inputs / "d.npy", np.array([Payload(marker)], dtype=object), allow_pickle=True)

    out = tmp_path / "out"  # a previous output holding the same kinds of payload
    out.mkdir()
    parquet_with_pickled_extension(out / "deduplicated.parquet", records[:5], marker)
    (out / "report.json").write_bytes(pickle.dumps(Payload(marker)))
    (out / "clusters.pkl").write_bytes(pickle.dumps(Payload(marker)))
    np.save(out / "pairs.npy", np.array([Payload(marker)], dtype=object), allow_pickle=True)
    (out / "__init__.py").write_text(f"open({str(marker)!r}, 'w')\n")
    (out / ".gpudedup-output").write_text('{"written_by": "gpudedup"}')  # a previous output: --overwrite replaces it

    result = invoke("dedup", "in", "-o", "out", "--id-field", "id", "-q", "--overwrite")
    assert not marker.exists()
    if result.exit_code == 0:  # the payload column read as plain binary (or refused, below)
        assert sorted(p.name for p in out.iterdir()) == output_names
        report = json.loads((out / "report.json").read_text())
        assert report["input"]["documents"] == len(records)
    else:  # refusing the file is fine too, as a user error
        assert result.exit_code == 2, result.output
    assert leftovers(out) == []


# --- paths in the data never choose where files go ----------------------------------------------


HOSTILE_IDS = ["../../evil", "/etc/passwd", "..\\..\\evil.txt", "~/.bashrc", "C:\\Windows\\evil",
               "out/../../escape", "\x00nul", "<script>alert(1)</script>", "<img src=x onerror=alert(1)>"]


@pytest.mark.parametrize("format", ["parquet", "jsonl"])
def test_paths_in_ids_and_texts_never_decide_where_files_are_written(tmp_path, monkeypatch, format):
    box = tmp_path / "box"
    work = box / "a" / "b"  # the working directory: '../../evil' from here is still inside box
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    texts = [r["text"] for r in sample_records(len(HOSTILE_IDS))]
    records = []
    for i, hostile in enumerate(HOSTILE_IDS):
        text = f"{texts[i]} see /etc/passwd and ../../evil and file:///etc/shadow <script>alert({i})</script>"
        records.append({"id": hostile, "text": text})
        records.append({"id": f"{hostile}#copy", "text": text + " again"})  # a near-duplicate pair
    write_jsonl(work / "in" / "data.jsonl", records)
    before = tree(tmp_path)
    passwd = Path("/etc/passwd").stat().st_mtime_ns if Path("/etc/passwd").exists() else None

    result = invoke("dedup", "in", "-o", "out", "--id-field", "id", "--format", format, "-q")
    assert result.exit_code == 0, result.output

    after = tree(tmp_path)
    created = sorted(set(after) - set(before))
    assert all(name == "box/a/b/out" or name.startswith("box/a/b/out/") for name in created), created
    assert {name: after[name] for name in before} == before  # nothing else changed
    out = work / "out"
    assert all((p.is_file() or p.is_dir()) and not p.is_symlink() for p in out.rglob("*"))
    # The only names that come from the input are those of its files: data.jsonl's output.
    assert [p.relative_to(out).as_posix() for p in kept_files(out)] == [f"deduplicated/data.{format}"]
    if passwd is not None:
        assert Path("/etc/passwd").stat().st_mtime_ns == passwd

    # Each hostile id and its copy are a true pair at the default threshold (the oracle says so,
    # so the run must report it), and every reported pair is a true one.
    text_of = {r["id"]: r["text"] for r in records}
    planted = {tuple(sorted((h, f"{h}#copy"))) for h in HOSTILE_IDS}
    assert all(is_similar(shingle_set(text_of[a]), shingle_set(text_of[b]), 0.8) for a, b in planted)
    pairs = read_pairs(out).to_pylist()
    assert {(p["id_a"], p["id_b"]) for p in pairs} >= planted
    assert all(is_similar(shingle_set(text_of[p["id_a"]]), shingle_set(text_of[p["id_b"]]), 0.8) for p in pairs)
    page = (out / "report.html").read_text(encoding="utf-8").lower()
    assert "<script" not in page and "<img src=x" not in page  # ids and texts are escaped


# --- failures leave nothing behind --------------------------------------------------------------


def failing_after(calls: int, error: BaseException):
    """write_parquet that writes its first ``calls`` files, then raises ``error``."""
    real = gpudedup.results.result.write_parquet
    done = []

    def write_parquet(*args, **kwargs):
        if len(done) == calls:
            raise error
        done.append(args[1])
        real(*args, **kwargs)

    return write_parquet, done


@pytest.mark.parametrize("with_previous", [False, True], ids=["no-previous", "previous"])
@pytest.mark.parametrize("error, code", [(OSError(28, "No space left on device"), 2), (KeyboardInterrupt(), 130)],
                         ids=["disk-full", "ctrl-c"])
def test_a_write_failing_half_way_leaves_no_staging_directory_and_no_new_output(
        tmp_path, monkeypatch, error, code, with_previous):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "data.jsonl", sample_records())
    out = tmp_path / "out"
    before = None
    if with_previous:
        assert invoke("dedup", "data.jsonl", "-o", "out", "--id-field", "id", "-q").exit_code == 0
        before = tree(out)
    broken, written = failing_after(2, error)  # deduplicated/data.parquet and clusters/, then fails
    monkeypatch.setattr(gpudedup.io.layout, "write_parquet", broken)
    monkeypatch.setattr(gpudedup.results.result, "write_parquet", broken)
    result = invoke("dedup", "data.jsonl", "-o", "out", "--id-field", "id", "-q", "--overwrite")
    assert result.exit_code == code, result.output
    assert [p.relative_to(p.parent.parent).as_posix() for p in written] == [
        "deduplicated/data.parquet", "clusters/part-00000.parquet"]
    assert all(not p.exists() for p in written)  # they were in the staging directory, now gone
    assert "Traceback" not in result.output
    assert leftovers(out) == []
    if with_previous:
        assert tree(out) == before
    else:
        assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["data.jsonl"] + (["out"] if with_previous else []))


def test_an_unexpected_error_in_the_report_also_removes_the_staging_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "data.jsonl", sample_records())
    import gpudedup.results.result

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in the report")

    monkeypatch.setattr(gpudedup.results.result, "write_report", broken)  # (as the write looks it up)
    result = invoke("dedup", "data.jsonl", "-o", "out", "--id-field", "id", "-q")
    assert isinstance(result.exception, RuntimeError)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.jsonl"]


def test_overwrite_never_deletes_outside_the_output(tmp_path, monkeypatch, output_names):
    """Nothing is deleted through a symlinked OUT: where it leads to a directory that holds
    anything (someone's files, or one marked as a gpudedup output) it is refused, even with
    --overwrite, and both stay as they were; where it leads to an empty directory the results
    go into that directory and the link stays."""
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "data.jsonl", sample_records())
    target = tmp_path / "precious"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    (tmp_path / "out").symlink_to(target, target_is_directory=True)
    for marked in (False, True):
        if marked:  # an output, with a file of ours
            (target / ".gpudedup-output").write_text('{"written_by": "gpudedup"}')
        result = invoke("dedup", "data.jsonl", "-o", "out", "--id-field", "id", "-q", "--overwrite")
        assert result.exit_code == 2 and "a link to" in result.output and "which is not empty" in result.output
        assert (tmp_path / "out").is_symlink()
    assert tree(target) == {"keep.txt": b"mine", ".gpudedup-output": b'{"written_by": "gpudedup"}'}
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "to-empty").symlink_to(empty, target_is_directory=True)
    result = invoke("dedup", "data.jsonl", "-o", "to-empty", "--id-field", "id", "-q")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "to-empty").is_symlink() and sorted(p.name for p in empty.iterdir()) == output_names
    assert leftovers(tmp_path) == []


def test_inputs_are_never_modified(tmp_path):
    """Every input byte and modification time is the same after runs that succeed, that skip
    bad records and that stop on them."""
    import gzip
    import hashlib

    import pyarrow as pa
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from gpudedup.cli import app

    source = tmp_path / "in"
    source.mkdir()
    (source / "a.jsonl").write_text('{"text": "one two three four five six"}\nnot json\n'
                                    '{"text": "one two three four five six"}\n')
    with gzip.open(source / "b.jsonl.gz", "wt") as out:
        out.write('{"text": "seven eight nine ten eleven twelve"}\n')
    pq.write_table(pa.table({"text": ["one two three four five six", None]}), source / "c.parquet")
    (source / "d.txt").write_text("one two three four five six seven\r\n")

    def state():
        return {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns, p.stat().st_mode)
                for p in sorted(source.iterdir())}

    before = state()
    runner = CliRunner()
    assert runner.invoke(app, ["dedup", str(source), "-o", str(tmp_path / "stop")]).exit_code == 2
    assert runner.invoke(app, ["dedup", str(source), "-o", str(tmp_path / "skip"), "--on-error", "skip"]).exit_code == 0
    assert runner.invoke(app, ["dedup", str(source / "c.parquet"), "-o", str(tmp_path / "ok"),
                               "--format", "jsonl"]).exit_code == 0
    assert state() == before
