"""What the command-line tests share: planted corpora with known pairs, running the CLI
in process (typer's CliRunner) or without read permission, and the checks of a user error
(exit code 2, one 'error:' line, nothing written)."""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import string
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from gpudedup.cli import app

runner = CliRunner()


def paragraph(seed: int, words: int = 60) -> str:
    rng = random.Random(seed)
    return " ".join("".join(rng.choice(string.ascii_lowercase) for _ in range(7)) for _ in range(words))


def variant(text: str, last: str) -> str:
    """The same text with its last word replaced: with word 5-grams over 60 words the copies
    share 55 of 57 shingles, J = 55/57 = 0.965."""
    words = text.split()
    words[-1] = last
    return " ".join(words)


def word_jaccard(a: str, b: str, n: int = 5) -> float:
    def grams(t):
        w = t.lower().split()
        return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}
    x, y = grams(a), grams(b)
    return len(x & y) / len(x | y)


def happy_records() -> list[dict]:
    """8 rows; rows 3, 5, 7 (from 1) are planted near-duplicates of rows 1, 4, 4."""
    a, c = paragraph(1), paragraph(3)
    texts = [a, paragraph(2), variant(a, "xxxxxxx"), c, variant(c, "yyyyyyy"), paragraph(4),
             variant(c, "zzzzzzz"), paragraph(5)]
    return [{"text": t, "n": i, "tag": f"t{i}", "score": i + 0.5} for i, t in enumerate(texts)]


REMOVED_ROWS = {3, 5, 7}  # 1-based lines
CLUSTERS = [{1, 3}, {4, 5, 7}]
PAIRS = {(1, 3), (4, 5), (4, 7), (5, 7)}


def write_jsonl(path: Path, records) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def leftovers(parent: Path, name: str = "out") -> list[Path]:
    return sorted(parent.glob(f".{name}.tmp-*")) + sorted(parent.glob(f".{name}.old-*"))


def tree_snapshot(path: Path) -> dict:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def error_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, f"expected one 'error:' line, got:\n{result.output}"
    return lines[0]


def assert_user_error(result, *fragments, out: Path, before: dict | None = None) -> str:
    """Exit 2, one error line holding every fragment, no traceback, nothing written."""
    assert result.exit_code == 2, f"exit {result.exit_code}, output:\n{result.output}\n{result.exception!r}"
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    line = error_line(result)
    for fragment in fragments:
        assert fragment in line, f"{fragment!r} not in {line!r}"
    if before is None:
        assert not out.exists(), f"{out} was written"
    else:
        assert tree_snapshot(out) == before, f"{out} was changed"
    assert leftovers(out.parent, out.name) == []
    return line


def assert_unreadable_reported(exit_code: int, output: str, name: str, where: Path) -> None:
    """Exit 2 without a traceback, naming the file and saying it cannot be read: either
    gpudedup's own 'error:' line or click's check of the argument ('... is not readable')."""
    assert exit_code == 2, output
    assert "Traceback" not in output
    assert name in output, output
    assert "permission denied" in output.lower() or "not readable" in output, output
    assert not (where / "out").exists()
    assert leftovers(where) == []


SETPRIV = shutil.which("setpriv")
DROP_DAC = [SETPRIV or "setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search"]


def without_read_permission(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The CLI in a subprocess that cannot read chmod 000 files: as it is for a user; for root
    (CI runs as root) without CAP_DAC_OVERRIDE, through setpriv, which must be able to drop it."""
    prefix: list[str] = []
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        assert root_can_drop_dac(cwd), "as root this test needs setpriv (util-linux) able to drop CAP_DAC_OVERRIDE"
        prefix = DROP_DAC
    return subprocess.run([*prefix, sys.executable, "-c", "import sys; from gpudedup.cli import main; sys.exit(main())",
                           *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def root_can_drop_dac(tmp_path: Path) -> bool:
    """Root reads chmod 000 files through CAP_DAC_OVERRIDE; without it (setpriv) it cannot."""
    if not (hasattr(os, "geteuid") and os.geteuid() == 0 and SETPRIV):
        return False
    probe = tmp_path / "probe"
    probe.write_text("x")
    probe.chmod(0)
    try:
        done = subprocess.run([*DROP_DAC, "cat", str(probe)], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        probe.chmod(0o644)
        probe.unlink()
    return done.returncode != 0


def write_unreadable(root: Path, name: str) -> Path:
    records = happy_records()
    if name.endswith(".parquet"):
        pq.write_table(pa.Table.from_pylist(records), root / name)
    elif name.endswith(".gz"):
        (root / name).write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode()))
    elif name.endswith(".txt"):
        (root / name).write_text(records[0]["text"])
    else:
        write_jsonl(root / name, records)
    return root / name
