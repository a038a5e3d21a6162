"""The host kernel tests (tests/test_kernels_host.py) once more, with the kernels and the shim
built under AddressSanitizer and UndefinedBehaviorSanitizer: an out-of-bounds read or write of a
kernel (past a document's hashes, a tile, a shared array), a misaligned or overflowing signed
operation, an invalid value loaded, fails the run.

Each group runs in a subprocess of its own: the sanitizer runtime must be preloaded into Python
(LD_PRELOAD), and the libraries go to a cache of their own (KERNEL_HOST_CACHE) so that no
unsanitized build is reused. Leak checking is off: CPython does not free everything at exit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_host.host_kernels import GXX

TESTS = Path(__file__).resolve().parent
SANITIZER_FLAGS = "-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -O1"
REPORT_MARKERS = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer", "SUMMARY: ")


def asan_runtime() -> str | None:
    """The path of g++'s libasan.so, or None (g++ prints the bare name when it has none)."""
    if GXX is None:
        return None
    path = subprocess.run([GXX, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


@pytest.fixture(scope="module")
def sanitized_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kernel-host-sanitized")


# Groups, so that each subprocess stays well within its limit on a busy 2-core machine: building
# one sanitized library takes seconds (more when other jobs share the cores), so a group holds a
# few tunable combinations (test_minhash_matches_numpy's ids name them: block64-perms2-tile1024).
SUBPROCESS_SECONDS = 110


@pytest.mark.timeout(SUBPROCESS_SECONDS + 10)  # a subprocess that builds its own libraries: more than 30 s
@pytest.mark.parametrize("selection", [
    "minhash_matches_numpy and block256",
    "minhash_matches_numpy and (block64 or block128)",
    "minhash_matches_numpy and block32 and (perms1 or perms2 or perms3)",
    "minhash_matches_numpy and block32 and not (perms1 or perms2 or perms3)",
    "minhash and not minhash_matches_numpy",
    "not minhash",
])
def test_host_kernel_tests_pass_under_asan_and_ubsan(selection, sanitized_cache):
    runtime = asan_runtime()
    if runtime is None:
        pytest.skip("g++ with AddressSanitizer (libasan) is not installed")
    env = {**os.environ, "KERNEL_HOST_CACHE": str(sanitized_cache), "KERNEL_HOST_CXXFLAGS": SANITIZER_FLAGS,
           "LD_PRELOAD": runtime, "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1", "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-s", "-p", "no:cacheprovider",
               str(TESTS / "test_kernels_host.py"), "-k", selection]
    run = subprocess.run(command, env=env, cwd=TESTS.parent, capture_output=True, text=True,
                         timeout=SUBPROCESS_SECONDS)
    output = run.stdout + run.stderr
    reports = [line for line in output.splitlines() if line.startswith(REPORT_MARKERS) or " runtime error: " in line]
    assert run.returncode == 0 and not reports, output[-6000:]
    assert " passed" in output and " failed" not in output, output[-2000:]
    # The libraries that ran were the sanitized ones.
    built = sorted(sanitized_cache.glob("kernels-*.so"))
    assert built
    for library in built:
        needed = subprocess.run(["ldd", str(library)], capture_output=True, text=True).stdout
        assert "libasan" in needed and "libubsan" in needed, needed
