"""The package's shape, beside the layers import-linter checks (pyproject.toml).

Imports inside functions are for what a run may not need: an optional dependency (Dask,
CuPy, cuDF, numba, pandas, ...), whose absence must not stop ``import gpudedup``, or a module
kept off the start-up path; each of the second kind says why in a comment that says so
(REASON: start-up, heavy, optional). Any other import, the standard library's included,
belongs at the top of its module, where the layers checked by import-linter see it.

A module owns one stage or one concern, in about 500 lines at most (LONGEST_MODULE)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "gpudedup"

# Not in the base dependencies (pyproject.toml's [project.optional-dependencies] and what they
# bring): imported where used, so that a run without them works.
OPTIONAL = {"dask", "distributed", "dask_cuda", "cupy", "cupyx", "cudf", "rmm", "numba", "pandas", "polars",
            "datasets", "fsspec", "gcsfs", "adlfs", "s3fs", "aiohttp", "IPython", "ipywidgets", "nvidia"}


# What a reason says: that the import is kept off the start-up path, heavy, or optional.
REASON = re.compile(r"\b(start-up|heavy|optional)\b")


def function_local_imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, module, has a reason) of every import inside a function of ``path``: the reason is
    a comment (one that REASON matches) on its line, or above the run of import lines it
    belongs to."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[tuple[int, str, bool]] = []

    def says_why(line: str) -> bool:
        return "#" in line and REASON.search(line.partition("#")[2]) is not None

    def reasoned(number: int) -> bool:
        if says_why(lines[number - 1]):
            return True
        above = number - 2
        while above >= 0 and lines[above].strip().startswith(("import ", "from ")):
            if says_why(lines[above]):
                return True
            above -= 1
        return above >= 0 and lines[above].strip().startswith("#") and says_why(lines[above])

    class Visitor(ast.NodeVisitor):
        depth = 0

        def visit_FunctionDef(self, node: ast.AST) -> None:
            self.depth += 1
            self.generic_visit(node)
            self.depth -= 1

        visit_AsyncFunctionDef = visit_FunctionDef

        def visit_Import(self, node: ast.Import) -> None:
            if self.depth:
                found.append((node.lineno, node.names[0].name, reasoned(node.lineno)))

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            if self.depth:
                found.append((node.lineno, "." * node.level + (node.module or ""), reasoned(node.lineno)))

    Visitor().visit(ast.parse("\n".join(lines)))
    return found


# "About 500 lines": a module past this owns more than one thing and is to be split.
LONGEST_MODULE = 500


def test_no_module_is_longer_than_about_500_lines():
    long = {str(path.relative_to(PACKAGE.parent)): lines for path in sorted(PACKAGE.rglob("*.py"))
            if (lines := len(path.read_text(encoding="utf-8").splitlines())) > LONGEST_MODULE}
    assert long == {}, f"modules over {LONGEST_MODULE} lines: {long}"


def test_every_import_inside_a_function_is_optional_or_says_why():
    unexplained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, module, has_reason in function_local_imports(path):
            if module.startswith(".") or module.split(".")[0] not in OPTIONAL:
                if not has_reason:
                    unexplained.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {module}")
    assert unexplained == [], "imports inside functions without a reason:\n" + "\n".join(unexplained)


def test_the_check_sees_imports_and_their_reasons(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os\n\ndef f():\n    import numpy\n    # (start-up: heavy)\n    import scipy\n"
                      "    import matplotlib\n\n    from . import x  # (a cycle)\n    import json\n"
                      "    import dask  # (optional)\n", encoding="utf-8")
    assert function_local_imports(module) == [(4, "numpy", False), (6, "scipy", True), (7, "matplotlib", True),
                                              (9, ".", False), (10, "json", False), (11, "dask", True)]
