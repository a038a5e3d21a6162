"""The command's start-up: what `gpudedup --help`, `--version` and an argument error load, and
that no module of the package imports a name back from the lazy package ``__init__``.

Checked by the modules a fresh interpreter has loaded, not by timing: numpy, pyarrow, scipy,
pandas, matplotlib and the api are what made `gpudedup --help` take a second; a command that
does not run the job must not import them (issue 11, point 9).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gpudedup

# Imported only by a command that runs (dedup, params, evaluate, demo), never at start-up.
HEAVY = ("numpy", "pyarrow", "scipy", "pandas", "matplotlib", "cupy", "dask", "gpudedup.api", "gpudedup.pipeline")

LOADED_HEAVY = (
    "import json, sys\n"
    "heavy = sorted(m for m in sys.modules if m.split('.')[0] in {roots} or m.startswith({packages}))\n"
    "print('LOADED=' + json.dumps(heavy))\n"
).format(roots=sorted({name for name in HEAVY if "." not in name}),
         packages=tuple(name for name in HEAVY if "." in name))


def loaded_heavy_modules(code: str) -> list[str]:
    """Run `code` in a fresh interpreter, then list the heavy modules it has loaded."""
    script = f"{code}\n{LOADED_HEAVY}"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    line = [row for row in done.stdout.splitlines() if row.startswith("LOADED=")]
    assert len(line) == 1, done.stdout
    return json.loads(line[0].removeprefix("LOADED="))


def command(*args: str) -> str:
    """Code that runs `gpudedup ARGS` through the entry point and keeps the interpreter alive
    after typer's SystemExit, printing the exit code so that the test knows the command ran."""
    return (
        "import sys\n"
        f"sys.argv = ['gpudedup', *{list(args)!r}]\n"
        "from gpudedup.console import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as leaving:\n"
        "    print('EXIT=' + str(leaving.code), file=sys.stderr)\n"
    )


def test_the_heavy_module_list_is_seen_when_loaded():
    """The probe itself: a run's imports are listed (so an empty list below means something)."""
    assert {"numpy", "gpudedup.api"} <= set(loaded_heavy_modules("import gpudedup.api"))


@pytest.mark.parametrize("code", [
    "import gpudedup",
    "import gpudedup; gpudedup.__version__",
    "import gpudedup.cli",
], ids=["import gpudedup", "__version__", "import gpudedup.cli"])
def test_importing_loads_no_heavy_module(code):
    assert loaded_heavy_modules(code) == []


@pytest.mark.parametrize("args", [
    ("--help",), ("--version",), ("dedup", "--help"), ("params", "--help"), ("evaluate", "--help"),
    ("demo", "--help"), ("dedup", "data.jsonl"),  # the last one: --output missing, exit code 2
], ids=" ".join)
def test_help_version_and_argument_errors_load_no_heavy_module(args):
    assert loaded_heavy_modules(command(*args)) == []


def test_a_command_that_runs_loads_what_it_needs():
    """The other side of the lazy imports: `gpudedup params` does load numpy (for the curve)."""
    assert "numpy" in loaded_heavy_modules(command("params", "--threshold", "0.8"))


def package_modules() -> list[Path]:
    root = Path(gpudedup.__file__).parent
    return sorted(path for path in root.rglob("*.py") if path != root / "__init__.py")


def names_taken_from_the_package(source: str, depth: int) -> list[str]:
    """The names a module's `source` takes from the package ``__init__``: `from . import X`
    (`from .. import X` from a subpackage, `depth` levels down) or `from gpudedup import X`
    where X is not a module of the package (a source, a folder, or the stub of a compiled
    module: gpudedup/_cpu_kernels.pyi), and a plain `import gpudedup`. Such a name comes from
    the lazy ``__init__``, whose first use imports the whole public API."""
    root = Path(gpudedup.__file__).parent
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name == "gpudedup"]
        elif isinstance(node, ast.ImportFrom) and (
                (node.level == depth + 1 and node.module is None) or (node.level == 0 and node.module == "gpudedup")):
            found += [alias.name for alias in node.names
                      if not any((root / f"{alias.name}{suffix}").exists() for suffix in (".py", ".pyi"))
                      and not (root / alias.name).is_dir()]
    return found


def test_the_package_scan_sees_its_modules():
    names = {path.relative_to(Path(gpudedup.__file__).parent).as_posix() for path in package_modules()}
    assert {"cli/__init__.py", "version.py", "pipeline/job.py", "core/lsh.py"} <= names


@pytest.mark.parametrize("path", package_modules(),
                         ids=lambda path: path.relative_to(Path(gpudedup.__file__).parent).as_posix())
def test_no_module_imports_a_name_from_the_package_init(path):
    depth = len(path.relative_to(Path(gpudedup.__file__).parent).parts) - 1  # 1 inside gpudedup/pipeline/
    assert names_taken_from_the_package(path.read_text(), depth) == []


def test_the_scan_finds_names_taken_from_the_package_init():
    """The scan itself, on planted sources: the version through the package is found, modules are not."""
    assert names_taken_from_the_package("from . import __version__, display\nfrom .version import x\n", 0) \
        == ["__version__"]
    assert names_taken_from_the_package("from .. import __version__, version\nfrom . import job\n", 1) \
        == ["__version__"]
    assert names_taken_from_the_package("import gpudedup\nfrom gpudedup import dedup, io\n", 0) \
        == ["gpudedup", "dedup"]
    assert names_taken_from_the_package("from . import _cpu_kernels, __version__\n", 0) == ["__version__"]


def test_the_version_has_one_home():
    from gpudedup.version import __version__

    assert gpudedup.__version__ is __version__


# --- the end of the process ---------------------------------------------------------------------

ENDED = (
    "import atexit, os, sys\n"
    "import gpudedup.cli\n"
    "command = gpudedup.cli.main\n"
    "def with_a_handler():  # an atexit handler that a library registers while the command runs\n"
    "    atexit.register(lambda: open(os.environ['HANDLER_MARK'], 'w').write('ran'))\n"
    "    command()\n"
    "gpudedup.cli.main = with_a_handler\n"
    "sys.argv = ['gpudedup', *sys.argv[1:]]\n"
    "from gpudedup.console import {entry}\n"
    "{entry}()\n"
)


@pytest.mark.parametrize("args, code", [
    (("params", "--threshold", "0.8", "--shingle", "char"), 0),
    (("dedup", "no-such-file.jsonl", "-o", "out"), 2),
], ids=["a table on stdout", "an input error"])
def test_the_process_ends_as_the_command_does_without_the_interpreters_teardown(tmp_path, args, code):
    """console.run ends the process without the interpreter's teardown: with the command's exit
    code, its piped output whole, and after the atexit handlers registered while it ran; as
    console.main ends it with the teardown."""
    ended = {}
    for entry in ("run", "main"):
        marker = tmp_path / f"handler-{entry}"
        done = subprocess.run([sys.executable, "-c", ENDED.format(entry=entry), *args], capture_output=True,
                              text=True, timeout=120, cwd=tmp_path, env={**os.environ, "HANDLER_MARK": str(marker)})
        assert marker.read_text() == "ran", entry
        ended[entry] = (done.returncode, done.stdout, done.stderr)
    assert ended["run"] == ended["main"]
    assert ended["run"][0] == code
    assert ended["run"][1 if code == 0 else 2].strip()
