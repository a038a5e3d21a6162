"""Messages in the words of the interface they come from: one message per error, naming
parameters as keyword arguments in Python (``bands=10``, ``overwrite=True``) and as options on
the command line (``--bands 10``, ``--overwrite``); and ``index add`` refusing ids the index
holds before it signs anything."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest
import typer
from typer.testing import CliRunner

import gpudedup
from gpudedup.backends import get_backend
from gpudedup.cli import app
from gpudedup.cli.common import in_option_words
from gpudedup.errors import GpudedupError, InputError
from gpudedup.index import Index
from gpudedup.index.reader import IndexReader

runner = CliRunner()
# An option of the command line, and a keyword argument as messages name them.
OPTION = re.compile(r"(?<![\w-])--[a-z]")
KEYWORD = re.compile(r"(?<![\w.\-/'\"])[a-z][a-z0-9_]*=")


def records(count: int = 12, prefix: str = "d") -> list[dict]:
    return [{"id": f"{prefix}{i}", "text": " ".join(f"{prefix}{i}x{j}" for j in range(30))} for i in range(count)]


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def command_context(*words: str) -> typer.Context:
    command = typer.main.get_command(app)
    for word in words:
        command = command.commands[word]
    return typer.Context(command)


def test_keyword_arguments_become_the_commands_options():
    dedup = command_context("dedup")
    cases = {
        "bands=10 needs rows= too": "--bands 10 needs --rows too",
        "use overwrite=True to replace it": "use --overwrite to replace it",
        "backend='gpu' needs a GPU; or use backend='cpu'.": "--backend gpu needs a GPU; or use --backend cpu.",
        "(bands=20, rows=10) must be at most num_perm=128": "(--bands 20, --rows 10) must be at most --num-perm 128",
        "max_memory=1 MiB: reading": "--max-memory 1 MiB: reading",
        # a value the shell would split keeps its quotes
        "text_field='my text' is missing": "--text-field 'my text' is missing",
        # no option of this command: as Python names it
        "scheduler=, workers= and client= need Dask": "--scheduler, --workers and client= need Dask",
        # not a keyword argument: a path, a quoted value, a word, an upper-case variable
        "out/threshold=0.8/a.jsonl: 'threshold=2' is a name; GPUDEDUP_X=3": None,
    }
    for python, cli in cases.items():
        assert in_option_words(python, dedup) == (python if cli is None else cli), python
    assert in_option_words("bands=10", None) == "bands=10"
    # Another command, another set of options (verification= is --verify-from there).
    assert in_option_words("verification= must be 'sets'", command_context("index", "create")) == \
        "--verify-from must be 'sets'"
    assert in_option_words("resume=True needs work_dir=", command_context("params")) == "resume=True needs work_dir="


def python_error(call) -> str:
    with pytest.raises(GpudedupError) as raised:
        call()
    return str(raised.value)


def cli_error(*args) -> str:
    result = runner.invoke(app, [str(arg) for arg in args])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0].removeprefix("error: ")


@pytest.fixture
def places(tmp_path):
    """(a JSONL file of 12 documents, a non-empty folder, a new output path)."""
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("someone's file\n")
    return write_jsonl(tmp_path / "a.jsonl", records()), str(full), str(tmp_path / "out")


# name -> (the Python call, the command line, {what the Python message says: what the command line's says})
CASES = {
    "bands without rows": (lambda data, full, out: gpudedup.dedup(data, bands=10),
                           lambda data, full, out: ("dedup", data, "-o", out, "--bands", "10"),
                           {"bands=10": "--bands 10", "rows=": "--rows"}),
    "low without max_fp": (lambda data, full, out: gpudedup.dedup(data, low=0.5),
                           lambda data, full, out: ("params", "--low", "0.5"),
                           {"low=0.5": "--low 0.5", "max_fp=": "--max-fp"}),
    "threshold out of range": (lambda data, full, out: gpudedup.dedup(data, threshold=1.5),
                               lambda data, full, out: ("dedup", data, "-o", out, "--threshold", "1.5"),
                               {"threshold=": "--threshold"}),
    "bands x rows above num_perm": (
        lambda data, full, out: gpudedup.dedup(data, bands=20, rows=10),
        lambda data, full, out: ("dedup", data, "-o", out, "--bands", "20", "--rows", "10"),
        {"bands=20": "--bands 20", "rows=10": "--rows 10", "num_perm=128": "--num-perm 128"}),
    "token shingles normalised": (
        lambda data, full, out: gpudedup.dedup(data, shingle="token", strip_symbols=True),
        lambda data, full, out: ("dedup", data, "-o", out, "--shingle", "token", "--strip-symbols"),
        {"strip_symbols=": "--strip-symbols"}),
    "an output that holds files": (lambda data, full, out: gpudedup.dedup(data, output=full),
                                   lambda data, full, out: ("dedup", data, "-o", full),
                                   {"output=": "--output"}),
    "a memory size": (lambda data, full, out: gpudedup.dedup(data, max_memory="lots"),
                      lambda data, full, out: ("dedup", data, "-o", out, "--max-memory", "lots"),
                      {"max_memory=": "--max-memory"}),
    "a missing text field": (lambda data, full, out: gpudedup.dedup(data, text_field="body"),
                             lambda data, full, out: ("dedup", data, "-o", out, "--text-field", "body"),
                             {"text_field=": "--text-field", "token_field=": "--token-field"}),
    "remove with neither": (lambda data, full, out: Index(Path(full).parent / "idx").remove(),
                            lambda data, full, out: ("index", "remove", Path(full).parent / "idx"),
                            {"tag=": "--tag", "ids=": "--ids"}),
}


@pytest.mark.parametrize("case", CASES)
def test_one_message_in_the_words_of_each_interface(places, case):
    data, full, out = places
    Index.create(Path(full).parent / "idx")
    python_call, cli_args, words = CASES[case]
    python = python_error(lambda: python_call(data, full, out))
    cli = cli_error(*cli_args(data, full, out))
    assert not OPTION.search(python), python
    assert not KEYWORD.search(cli), cli
    expected = python
    for keyword, option in words.items():
        assert keyword in python, (keyword, python)
        expected = expected.replace(keyword, option)
    assert cli == expected
    assert not Path(out).exists()


def test_index_add_refuses_ids_the_index_holds_before_signing(tmp_path, monkeypatch):
    """The new documents' ids are checked against the index before they are signed (in memory)
    or before the index is probed (staged, where a shard is read and signed in one pass); the
    Python message names id_field=, the command line's --id-field."""
    index = Index.create(tmp_path / "idx")
    backend = get_backend("cpu")
    index.add(pa.Table.from_pylist(records()), id_field="id", backend=backend)
    signed, probed = [], []
    signatures, probe = backend.signatures, IndexReader.probe
    monkeypatch.setattr(backend, "signatures", lambda *args: signed.append(1) or signatures(*args))
    monkeypatch.setattr(IndexReader, "probe", lambda self, *args: probed.append(1) or probe(self, *args))
    again = records()[4:] + records(3, "new")
    with pytest.raises(InputError, match=r"id 'd4' of the new data is already in the index .*id_field=\)$"):
        index.add(pa.Table.from_pylist(again), id_field="id", backend=backend)
    assert signed == [] and probed == []
    data = write_jsonl(tmp_path / "again.jsonl", again)
    with pytest.raises(InputError, match="id 'd4' of the new data is already in the index"):
        index.add(data, id_field="id", backend=backend, work_dir=tmp_path / "work")
    assert probed == []
    assert index.info()["documents"] == 12
    # The spies see the work of an add whose ids are new.
    index.add(pa.Table.from_pylist(records(3, "new")), id_field="id", backend=backend)
    assert signed and probed and index.info()["documents"] == 15


def test_cli_index_add_refuses_ids_the_index_holds_before_any_stage(tmp_path):
    data = write_jsonl(tmp_path / "a.jsonl", records())
    assert runner.invoke(app, ["index", "create", str(tmp_path / "idx")]).exit_code == 0
    first = runner.invoke(app, ["index", "add", str(tmp_path / "idx"), data, "-o", str(tmp_path / "out1"),
                                "--id-field", "id", "--backend", "cpu"])
    assert first.exit_code == 0, first.output
    assert "Shingling + MinHash" in first.output  # the stages' progress, shown
    again = runner.invoke(app, ["index", "add", str(tmp_path / "idx"), data, "-o", str(tmp_path / "out2"),
                                "--id-field", "id", "--backend", "cpu"])
    assert again.exit_code == 2
    assert again.output.splitlines()[-1] == (
        f"error: id 'd0' of the new data is already in the index {tmp_path / 'idx'}: ids must be unique across the "
        "index (remove the indexed document first, or name an id field whose ids the index does not hold with "
        "--id-field)")
    assert "Shingling + MinHash" not in again.output and not (tmp_path / "out2").exists()


def test_errors_jsonl_says_its_reasons_in_the_words_of_the_interface(tmp_path):
    """The reasons a run writes into errors.jsonl are said as the interface that ran it says
    them: --text-field from the command line, text_field= from Python."""
    data = write_jsonl(tmp_path / "data.jsonl", records(4) + [{"id": "odd", "body": "no text here"}])
    done = CliRunner().invoke(app, ["dedup", data, "-o", str(tmp_path / "cli"), "--on-error", "skip", "-q"])
    assert done.exit_code == 0, done.output
    gpudedup.dedup(Path(data), on_error="skip", output=tmp_path / "api", backend="cpu")
    reasons = {place: [json.loads(line)["reason"] for line in (tmp_path / place / "errors.jsonl").open()]
               for place in ("cli", "api")}
    assert len(reasons["cli"]) == len(reasons["api"]) == 1
    assert "--text-field" in reasons["cli"][0] and "text_field=" not in reasons["cli"][0]
    assert "text_field=" in reasons["api"][0] and "--text-field" not in reasons["api"][0]
    assert reasons["cli"][0] == in_option_words(reasons["api"][0], command_context("dedup"))
