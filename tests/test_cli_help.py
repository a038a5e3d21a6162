"""The command line's help: options grouped in panels, help text that reflows to the terminal's
width, pointers that work for a pip user (`gpudedup docs TOPIC`, which prints a document of the
installed package), and shell completion."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gpudedup.cli import app
from gpudedup.cli.common import INPUT_PANEL, OUTPUT_PANEL, SCALE_PANEL, SIMILARITY_PANEL

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()
PANEL_TITLE = re.compile(r"^╭─ (.+?) ─")
OPTION_ROW = re.compile(r"^│\s{1,4}(?:\*\s{1,4})?(--[a-z][a-z-]*)")


def commands(group=None, prefix=()) -> list[tuple[tuple[str, ...], object]]:
    """(the words that call it, the click command) of every command of the app, groups' too."""
    group = group or typer.main.get_command(app)
    found = []
    for name, command in group.commands.items():
        words = (*prefix, name)
        found.append((words, command))
        if hasattr(command, "commands"):
            found += commands(command, words)
    return found


def options_of(command) -> list:
    return [p for p in command.params if p.param_type_name == "option" and p.name != "help"]


def shown_help(words: tuple[str, ...], columns: int) -> str:
    result = runner.invoke(app, [*words, "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.output


def panels(text: str) -> dict[str, list[str]]:
    """Panel title -> the long options listed in it, from a rendered --help."""
    found: dict[str, list[str]] = {}
    title = None
    for line in text.splitlines():
        opened = PANEL_TITLE.match(line)
        if opened:
            title = opened.group(1)
            found[title] = []
        elif line.startswith("╰"):
            title = None
        elif title is not None:
            listed = OPTION_ROW.match(line)  # (a help text's wrapped line starts further right)
            if listed:
                found[title].append(listed.group(1))
    return found


def test_dedup_options_are_in_four_panels():
    text = shown_help(("dedup",), 80)
    shown = panels(text)
    assert [title for title in shown if title not in ("Arguments", "Options")] == \
        [INPUT_PANEL, SIMILARITY_PANEL, OUTPUT_PANEL, SCALE_PANEL]
    assert shown["Options"] == ["--help"]  # nothing left ungrouped
    expected = {INPUT_PANEL: {"--text-field", "--id-field", "--include", "--on-error", "--against"},
                SIMILARITY_PANEL: {"--threshold", "--shingle", "--ngram", "--num-perm", "--bands", "--rows"},
                OUTPUT_PANEL: {"--output", "--format", "--single-file", "--overwrite", "--keep"},
                SCALE_PANEL: {"--backend", "--work-dir", "--resume", "--max-memory", "--scheduler", "--workers"}}
    for title, options in expected.items():
        assert options <= set(shown[title]), (title, shown[title])
    # Every option of the command is listed once, in a panel of its own kind.
    (dedup,) = [command for words, command in commands() if words == ("dedup",)]
    listed = [option for title in expected for option in shown[title]]
    assert sorted(listed) == sorted(p.opts[0] if p.opts[0].startswith("--") else p.opts[1] for p in options_of(dedup))


def test_docs_cli_names_every_option_of_every_command():
    """docs/cli.md (the README's "every option" page) names each option of each command: a
    new option without its line there fails here."""
    page = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", page))
    missing = [(" ".join(words), name) for words, command in commands() for option in options_of(command)
               for name in option.opts if name.startswith("--") and name not in named]
    assert not missing, missing


def test_every_command_with_many_options_groups_all_of_them():
    for words, command in commands():
        options = options_of(command)
        if len(options) > 8:
            ungrouped = [p.name for p in options if not getattr(p, "rich_help_panel", None)]
            assert not ungrouped, (words, ungrouped)


def description(text: str) -> list[list[str]]:
    """The paragraphs of a rendered --help between the usage line and the first panel, each as
    its lines (stripped)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "Usage:" in line) + 1
    end = next(i for i, line in enumerate(lines) if line.startswith("╭"))
    paragraphs: list[list[str]] = [[]]
    for line in lines[start:end]:
        if line.strip():
            paragraphs[-1].append(line.strip())
        elif paragraphs[-1]:
            paragraphs.append([])
    return [paragraph for paragraph in paragraphs if paragraph]


@pytest.mark.parametrize("columns", [60, 80, 200])
def test_help_text_reflows_to_the_terminal_width(columns):
    """No hard line break inside a paragraph: each line but a paragraph's last is filled (its
    next word would not fit on it), at any width; an option's help is one paragraph."""
    for words, command in commands():
        for paragraph in description(shown_help(words, columns)):
            for line, following in zip(paragraph, paragraph[1:]):
                next_word = following.split()[0]
                assert len(line) + 1 + len(next_word) > columns - 2, (words, columns, line, following)
        for parameter in command.params:
            assert "\n" not in (getattr(parameter, "help", None) or ""), (words, parameter.name)


def test_help_points_to_documents_a_pip_user_has():
    """No help names a file of the repository's docs/ (absent from an installed package); it
    names `gpudedup docs TOPIC`, and every topic it names exists."""
    topics = {path.stem for path in (REPO / "docs").glob("*.md")}
    named = set()
    for words, _ in [((), None), *commands()]:
        text = re.sub(r"[│\s]+", " ", shown_help(words, 200))  # (a help text's lines joined again)
        assert not re.search(r"docs/\S+\.md", text), words
        named |= set(re.findall(r"gpudedup docs ([a-z-]+)", text))
    assert {"scale", "index", "cli"} <= named <= topics


def test_docs_lists_the_documents_and_prints_one_as_it_is():
    documents = sorted((REPO / "docs").glob("*.md"))
    listed = runner.invoke(app, ["docs"])
    assert listed.exit_code == 0, listed.output
    rows = [line.split(None, 1) for line in listed.stdout.splitlines()]
    assert [name for name, _ in rows] == [path.stem for path in documents]
    for (_, heading), path in zip(rows, documents):
        assert path.read_text(encoding="utf-8").splitlines()[0] == f"# {heading}"
    for topic in ("cli", "cli.md"):
        shown = runner.invoke(app, ["docs", topic])
        assert shown.exit_code == 0, shown.output
        assert shown.stdout == (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    unknown = runner.invoke(app, ["docs", "nope"])
    assert unknown.exit_code == 2
    assert "error: no document 'nope'; the documents are cli, " in unknown.output and "Traceback" not in unknown.output


def test_shell_completion_is_offered_and_completes():
    text = shown_help((), 120)
    assert "--install-completion" in text and "--show-completion" in text
    completing = {"_GPUDEDUP_COMPLETE": "complete_bash", "COMP_WORDS": "gpudedup de", "COMP_CWORD": "1"}
    completed = runner.invoke(app, [], prog_name="gpudedup", env=completing)
    assert completed.exit_code == 0 and completed.stdout.split() == ["dedup", "demo"]
    completing = {**completing, "COMP_WORDS": "gpudedup dedup in.jsonl --shingle ", "COMP_CWORD": "4"}
    completed = runner.invoke(app, [], prog_name="gpudedup", env=completing)
    assert completed.stdout.split() == ["word", "char", "token"]


def test_python_m_completes_the_installed_command():
    """Under `python -m gpudedup` the command is still `gpudedup`: the completion script it
    shows is for that command (not for `python`), and it runs. (The script is for the shell
    that started the command, found among its parent processes: here a bash that waits for
    it, so that the test does not depend on how pytest itself was started.)"""
    shown = subprocess.run(["bash", "-c", '"$0" -m gpudedup --show-completion; exit $?', sys.executable],
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.rstrip().splitlines()[-1] == "complete -o default -F _gpudedup_completion gpudedup"
    assert "_GPUDEDUP_COMPLETE=complete_bash" in shown.stdout
