"""Building the host library of the kernels (tests/kernel_host/host_kernels.py) from an empty
cache while other threads and processes build the same library into the same cache.

On a fresh clone two threads of one test compiled under one temporary name and the second
``os.replace`` found the file gone (FileNotFoundError). Every builder here must get the same
finished library, which loads and runs, and the cache must hold no partial file afterwards.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kernel_host.host_kernels import CXXFLAGS, GXX, build_library

TESTS = Path(__file__).resolve().parent
BUILDERS = 4

pytestmark = pytest.mark.skipif(GXX is None, reason="g++ is not installed: the host library is built with g++")


def check_cache(cache: Path, built: list[str]) -> None:
    """Every builder got the one library; it loads and reports its tunables; nothing partial
    is left beside it."""
    assert len(built) == BUILDERS and len(set(built)) == 1, built
    library = ctypes.CDLL(built[0])
    assert library.tunable_block_size() == 64  # minhash.cu's default: the file is whole
    assert sorted(p.suffix for p in cache.iterdir()) == [".lock", ".so"], sorted(cache.iterdir())


def test_threads_build_one_library_from_an_empty_cache(tmp_path):
    cache = tmp_path / "cache"
    start = threading.Barrier(BUILDERS)
    built: list[str] = []
    errors: list[BaseException] = []

    def build() -> None:
        start.wait()  # all at once, as the batch threads of a run do
        try:
            built.append(str(build_library(CXXFLAGS, cache)))
        except BaseException as error:  # noqa: BLE001 -- reported below, with the others
            errors.append(error)

    threads = [threading.Thread(target=build) for _ in range(BUILDERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    check_cache(cache, built)


BUILD_IN_A_PROCESS = """
import sys
import time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from kernel_host.host_kernels import CXXFLAGS, build_library
Path(sys.argv[3]).touch()
while not Path(sys.argv[4]).exists():  # start together
    time.sleep(0.005)
print(build_library(CXXFLAGS, Path(sys.argv[2])))
"""


def test_processes_build_one_library_from_an_empty_cache(tmp_path):
    cache, go = tmp_path / "cache", tmp_path / "go"
    ready = [tmp_path / f"ready-{i}" for i in range(BUILDERS)]
    processes = [subprocess.Popen([sys.executable, "-c", BUILD_IN_A_PROCESS, str(TESTS), str(cache), str(r), str(go)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
                 for r in ready]
    try:
        while not all(r.exists() for r in ready):
            if any(p.poll() not in (None, 0) for p in processes):
                break
            time.sleep(0.01)
        go.touch()
        outputs = [p.communicate(timeout=25) for p in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    assert [p.returncode for p in processes] == [0] * BUILDERS, [err for _, err in outputs]
    check_cache(cache, [out.strip() for out, _ in outputs])
