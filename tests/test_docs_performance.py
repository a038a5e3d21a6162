"""docs/performance.md is what scripts/render_performance.py renders from bench-results/: the
page and the results files cannot drift apart, and the page stays short."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "performance.md"


def renderer():
    spec = importlib.util.spec_from_file_location("render_performance", ROOT / "scripts" / "render_performance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_is_what_the_results_files_render(tmp_path):
    rendered = tmp_path / "performance.md"
    assert renderer().main(["--output", str(rendered)]) == 0
    assert rendered.read_text(encoding="utf-8") == PAGE.read_text(encoding="utf-8"), (
        "docs/performance.md differs from bench-results/: run python scripts/render_performance.py")


def test_check_fails_on_a_page_that_differs(tmp_path, capsys):
    stale = tmp_path / "performance.md"
    stale.write_text(PAGE.read_text(encoding="utf-8").replace("| 2026-", "| 2025-", 1), encoding="utf-8")
    assert renderer().main(["--output", str(stale), "--check"]) == 1
    assert "render_performance.py" in capsys.readouterr().err
    assert renderer().main(["--output", str(PAGE), "--check"]) == 0


def test_the_page_is_at_most_360_lines():
    assert len(PAGE.read_text(encoding="utf-8").splitlines()) <= 360


def test_every_row_names_the_commit_and_date_of_its_run():
    """Each results file's rows point at a run with its provenance, and every run is used."""
    for path in sorted((ROOT / "bench-results").glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        assert data["rows"], path
        for run in data["runs"]:
            assert re.fullmatch(r"[0-9a-f]{7,40}(-dirty)?", run["commit"]), (path, run)
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", run["date"]), (path, run)
            assert run["machine"] and run["command"].startswith("python scripts/"), (path, run)
        assert sorted({row["run"] for row in data["rows"]}) == list(range(len(data["runs"]))), path
    # Every table of the page names the commit and date of its figures: in a column, in its
    # header, or in a last row under each column.
    tables: list[list[str]] = [[]]
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        if line.startswith("|"):
            tables[-1].append(line)
        elif tables[-1]:
            tables.append([])
    for table in filter(None, tables):
        header = table[0]
        assert ("| commit | date |" in header or re.search(r"\d{4}-\d{2}-\d{2}", header)
                or table[-1].startswith("| commit, date |")), table

def test_the_renderer_runs_as_a_script(tmp_path):
    import subprocess

    out = tmp_path / "page.md"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "render_performance.py"), "--output", str(out)], check=True)
    assert out.read_text(encoding="utf-8") == PAGE.read_text(encoding="utf-8")
