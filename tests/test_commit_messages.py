"""scripts/check_commit_messages.py: the rules on a commit message, and a range of commits."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[1] / "scripts" / "check_commit_messages.py"
spec = importlib.util.spec_from_file_location("check_commit_messages", SCRIPT)
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)


def test_a_short_subject_with_a_body_after_a_blank_line_passes():
    assert check.problems("Scan the inputs once\n\nWhy, and the figures.\n") == []
    assert check.problems("x" * 72 + "\n") == []
    assert check.problems("Subject\n# an editor's comment\n") == []


def test_a_long_subject_a_missing_blank_line_and_an_empty_subject_are_named():
    assert check.problems("x" * 73) == ["the subject is 73 characters, more than 72"]
    assert check.problems("Subject\nbody at once") == ["the subject is not followed by a blank line"]
    assert check.problems("\n\n") == ["the subject line is empty"]


def test_a_range_is_checked_commit_by_commit(tmp_path):
    def git(*args):
        return subprocess.run(["git", *args], cwd=tmp_path, capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "Base")
    base = git("rev-parse", "HEAD").strip()
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "Good subject\n\nBody.")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "y" * 80)
    run = subprocess.run([sys.executable, str(SCRIPT), "--range", f"{base}..HEAD"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert run.returncode == 1
    assert run.stdout.count("\n") == 1 and "80 characters" in run.stdout
    message = tmp_path / "message"
    message.write_text("Fine\n")
    assert subprocess.run([sys.executable, str(SCRIPT), str(message)]).returncode == 0
