"""docs/design.md's module layout against the package: every module it names exists where it
says, and every module of the package is named there, so that the map a newcomer reads is the
tree as it is."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "gpudedup"


def layout_block() -> list[str]:
    """The lines of the code block under design.md's "## Module layout"."""
    text = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    start = text.index("```", text.index("## Module layout")) + 3
    return text[start:text.index("```", start)].splitlines()


def named_modules(lines: list[str]) -> tuple[set[Path], list[str]]:
    """The modules the block names (a name is relative to the folder of the nearest line above
    it with less indentation that starts with a folder, else to the package), and the names
    that lie nowhere."""
    found, lost = set(), []
    folders: list[tuple[int, str]] = []  # (indentation, folder path under the package)
    for line in lines:
        if not line.strip() or not line.startswith("  "):
            continue
        indent = len(line) - len(line.lstrip())
        folders = [(depth, folder) for depth, folder in folders if depth < indent]
        here = folders[-1][1] if folders else ""
        first = line.split()[0]
        if first.endswith("/"):
            folders.append((indent, here + first))
            here += first  # (the names on a folder's own line are inside it)
        for name in re.findall(r"[\w/]*\w+\.py\b", line):
            place = next((path for path in (PACKAGE / here / name, PACKAGE / name) if path.is_file()), None)
            if place is None:
                lost.append(f"{here}{name}")
            else:
                found.add(place)
    return found, lost


def test_the_layout_names_every_module_where_it_lies():
    found, lost = named_modules(layout_block())
    assert lost == [], f"named in design.md's layout, but not in the package: {lost}"
    modules = {path for path in PACKAGE.rglob("*.py") if path.name not in ("__init__.py", "__main__.py")}
    unnamed = sorted(path.relative_to(PACKAGE).as_posix() for path in modules - found)
    assert unnamed == [], f"modules design.md's layout does not name: {unnamed}"


def test_the_check_finds_a_module_out_of_place():
    """The reading itself, on planted lines: a name resolves in its folder's block or at the
    top, and one that is nowhere is reported."""
    found, lost = named_modules(["  pipeline/          the job", "    job.py           the stages",
                                 "  results/           output: result.py", "    nowhere.py       lost"])
    assert {PACKAGE / "pipeline" / "job.py", PACKAGE / "results" / "result.py"} <= found
    assert lost == ["results/nowhere.py"]
