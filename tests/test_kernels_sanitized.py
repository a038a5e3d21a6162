"""The host kernel tests (tests/test_kernels_host.py) once more, with the kernels and the shim
built under AddressSanitizer and UndefinedBehaviorSanitizer: an out-of-bounds read or write of a
kernel (past a document's hashes, a tile, a shared array), a misaligned or overflowing signed
operation, an invalid value loaded, fails the run.

They run in subprocesses: the sanitizer runtime must be preloaded into Python (LD_PRELOAD), and
the libraries go to a cache of their own (KERNEL_HOST_CACHE) so that no unsanitized build is
reused. Leak checking is off: CPython does not free everything at exit.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
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


# The host kernel tests in two halves of about equal time (test_minhash_matches_numpy's ids name
# its tunables: block256-perms1-tile8192), run side by side: the suite runs one test at a time,
# so a second core waits idle beside these subprocesses. Every host test is in exactly one half
# (the second is "not" the first). Each half builds the sanitized libraries of its tunable
# combinations (a library both need is built once: build_library) and runs its kernels under
# the sanitizers, for minutes on a busy machine: the limit leaves room for one.
FIRST_HALF = "(minhash_matches_numpy and block256) or (minhash and not minhash_matches_numpy)"
HALVES = (FIRST_HALF, f"not ({FIRST_HALF})")
SUBPROCESS_SECONDS = 400


@pytest.mark.timeout(SUBPROCESS_SECONDS + 10)  # subprocesses that build their own libraries: more than 30 s
def test_host_kernel_tests_pass_under_asan_and_ubsan(sanitized_cache, tmp_path):
    runtime = asan_runtime()
    if runtime is None:
        pytest.skip("g++ with AddressSanitizer (libasan) is not installed")
    env = {**os.environ, "KERNEL_HOST_CACHE": str(sanitized_cache), "KERNEL_HOST_CXXFLAGS": SANITIZER_FLAGS,
           "LD_PRELOAD": runtime, "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1", "PYTHONDONTWRITEBYTECODE": "1"}
    # Each half's output (stdout and stderr) goes to a file, which no pipe left unread can stall.
    logs = [tmp_path / f"half-{number}.log" for number in range(len(HALVES))]
    runs = []
    for selection, log in zip(HALVES, logs):
        with open(log, "w", encoding="utf-8") as output:
            runs.append(subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-x", "-s", "-p", "no:cacheprovider",
                                          str(TESTS / "test_kernels_host.py"), "-k", selection], env=env,
                                         cwd=TESTS.parent, stdout=output, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + SUBPROCESS_SECONDS
    try:
        for run in runs:
            run.wait(timeout=max(deadline - time.monotonic(), 1))
    finally:
        for run in runs:  # (after a timeout: none is left running)
            if run.poll() is None:
                run.kill()
                run.wait()
    outputs = [log.read_text(encoding="utf-8", errors="replace") for log in logs]
    for selection, run, output in zip(HALVES, runs, outputs):
        reports = [line for line in output.splitlines()
                   if line.startswith(REPORT_MARKERS) or " runtime error: " in line]
        assert run.returncode == 0 and not reports, f"-k {selection!r}:\n{output[-6000:]}"
        assert " passed" in output and " failed" not in output, f"-k {selection!r}:\n{output[-2000:]}"
    # Between them the halves passed every test of the file: each deselected what the other passed.
    passed, deselected = ([int(re.search(rf"(\d+) {word}", output).group(1)) for output in outputs]
                          for word in ("passed", "deselected"))
    assert passed[0] == deselected[1] and passed[1] == deselected[0], (passed, deselected)
    # The libraries that ran were the sanitized ones.
    built = sorted(sanitized_cache.glob("kernels-*.so"))
    assert built
    for library in built:
        needed = subprocess.run(["ldd", str(library)], capture_output=True, text=True).stdout
        assert "libasan" in needed and "libubsan" in needed, needed
