"""The project's documents, docstrings and comments say what it is, not how it got there: no
commit hashes, issue numbers or dates outside the places that record history (git, CHANGELOG.md,
and the performance page's record of each run, rendered from bench-results/ by
scripts/render_performance.py, whose own prose is checked here). An upstream project's bug is
cited as owner/project#number."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
# A commit hash as prose cites one: 7 to 12 hex digits with a digit and a letter among them.
COMMIT = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,12}\b")
# An issue or pull request of ours ("issue 15", "#15"); a standard's numbered part ("UAX #15")
# and an upstream project's tracker (a URL) are not ours.
ISSUE = re.compile(r"\b[Ii]ssues? \d+|(?<!UAX )(?<![\w/&])#\d+\b")
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SOURCES = (sorted((ROOT / "gpudedup").rglob("*.py")) + sorted((ROOT / "kernels").glob("*.cu*"))
           + [ROOT / "scripts" / "render_performance.py"])


def findings(path: Path) -> list[str]:
    """Each commit hash, issue number and date in the file, as "path:line: what: the line"."""
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for name, pattern in (("commit hash", COMMIT), ("issue number", ISSUE), ("date", DATE)):
            for match in pattern.finditer(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {name} {match.group(0)!r}: {line.strip()[:100]}")
    return found


@pytest.mark.parametrize("path", [p for p in DOCUMENTS if p.name != "performance.md"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_a_document_names_no_commit_issue_or_date(path):
    assert findings(path) == []


def test_the_code_names_no_commit_issue_or_date():
    assert [line for path in SOURCES for line in findings(path)] == []
