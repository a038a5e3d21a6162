"""The CUDA kernels of kernels/ compiled for the host by g++ on top of cuda_host_shim.h, and
called through ctypes (launch.cpp).

``host_library(**defines)`` builds (and caches) one shared library per tunable combination;
``HostKernels`` gives the kernels the call of a cupy.RawKernel, ``kernel(grid, block, args)``,
so that gpudedup.backends.kernel_backend.KernelBackend runs unchanged on the host with numpy
arrays (tests/test_kernel_backend.py).

Libraries are cached per (sources, tunables, compiler) hash under the temp directory (or
$KERNEL_HOST_CACHE), so only the first run compiles; building is safe when threads or processes
build the same library at once (build_library).
"""

from __future__ import annotations

import ctypes
import enum
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest

from gpudedup.backends.cuda_kernels import KERNEL_DEFAULTS

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "kernels"
HOST = Path(__file__).resolve().parent


GXX = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("g++")

# Extra flags from the environment help debugging, e.g. KERNEL_HOST_CXXFLAGS="-fsanitize=address"
# (then run python with LD_PRELOAD=$(g++ -print-file-name=libasan.so)).
CXXFLAGS = ["-std=c++17", "-O2", "-shared", "-fPIC", "-Wall", "-Wno-unknown-pragmas", "-Werror"]
CXXFLAGS += os.environ.get("KERNEL_HOST_CXXFLAGS", "").split()


class Status(enum.IntEnum):
    """cuda_host::Status (cuda_host_shim.h): what a launch_* function returns."""

    OK = 0
    DIVERGENT_BARRIER = 1
    BAD_LAUNCH = 2
    OUT_OF_MEMORY = 3
    NO_SHARED_MEMORY = 4  # the calling thread's shared memory was not found (so not filled)


OK, DIVERGENT_BARRIER, BAD_LAUNCH, OUT_OF_MEMORY, NO_SHARED_MEMORY = Status
# cuda_host::Schedule (cuda_host_shim.h)
FORWARD, REVERSE, SHUFFLED = 0, 1, 2
SCHEDULES = (FORWARD, REVERSE, SHUFFLED)

DEFAULTS = KERNEL_DEFAULTS["minhash.cu"]  # minhash.cu's #ifndefs


# --- building and loading the host library ----------------------------------------------------


def _pointer(dtype):
    return np.ctypeslib.ndpointer(dtype=dtype, flags="C_CONTIGUOUS")


_U32, _U64, _I64, _I32 = _pointer(np.uint32), _pointer(np.uint64), _pointer(np.int64), _pointer(np.int32)
_uint, _int, _i64 = ctypes.c_uint, ctypes.c_int, ctypes.c_longlong

_SIGNATURES = {
    "tunable_block_size": [],
    "tunable_perms_per_thread": [],
    "tunable_tile": [],
    "launch_minhash_signatures_u64": [_uint, _uint, _uint, _int, _U64, _I64, _I64, _I64, _i64, _U32, _U32, _int,
                                      _U32],
    "launch_band_keys_u32": [_uint, _uint, _int, _U32, _i64, _int, _int, _int, _U64],
    "launch_span_hashes_u32": [_uint, _uint, _int, _U32, _I64, _I64, _i64, _U64],
    "launch_reverse_block_i32": [_uint, _uint, _int, _I32, _I32, _int],
    "launch_divergent_barrier_i32": [_uint, _I32],
    "launch_thread_coordinates_u32": [_uint] * 6 + [_U32],
    "launch_uninitialised_shared_u32": [_uint, _uint, _U32],
}

_LIBRARIES: dict[tuple, ctypes.CDLL] = {}


def _compiler_version() -> str:
    return subprocess.run([GXX, "--version"], capture_output=True, text=True, check=True).stdout


def cache_directory() -> Path:
    """Where built libraries are kept: $KERNEL_HOST_CACHE, else gpudedup-kernel-host under the
    temp directory (shared by every test run on the machine: only the first one compiles)."""
    configured = os.environ.get("KERNEL_HOST_CACHE")
    return Path(configured) if configured else Path(tempfile.gettempdir()) / "gpudedup-kernel-host"


# One build at a time per library within this process (threads); fcntl.flock on a lock file
# beside the library serialises processes. Both are needed: flock is per open file, so two
# threads opening the lock file separately would not exclude each other on every system.
_BUILD_LOCK = threading.Lock()


def build_library(flags: list[str], cache: Path) -> Path:
    """The shared library of launch.cpp built with ``flags`` in ``cache``, compiled once.

    Safe under threads and processes that build the same library into the same cache at once:
    each compiles (if at all) to a temporary name of its own (pid and thread), under a lock
    file, and publishes the result with an atomic rename; whoever takes the lock after a build
    finds the finished library and reuses it."""
    digest = hashlib.sha256()
    for path in sorted(KERNELS.glob("*.cu*")) + sorted(HOST.glob("*.[ch]*")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(repr((flags, _compiler_version())).encode())
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / f"kernels-{digest.hexdigest()[:24]}.so"
    if target.exists():  # published by an atomic rename: never a partial file
        return target
    with _BUILD_LOCK, open(cache / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if target.exists():  # another thread or process built it while we waited
            return target
        partial = cache / f"{target.stem}.{os.getpid()}.{threading.get_ident()}.tmp.so"
        command = [GXX, *flags, f"-I{KERNELS}", f"-I{HOST}", str(HOST / "launch.cpp"), "-o", str(partial)]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            partial.unlink(missing_ok=True)
            pytest.fail(f"g++ failed on the kernels:\n{' '.join(command)}\n{result.stderr}")
        os.replace(partial, target)  # atomic: a concurrent loader never sees a partial file
    return target


def host_library(**defines) -> ctypes.CDLL:
    """The kernels compiled for the host with the given -D tunables (cached per source hash)."""
    if GXX is None:
        pytest.skip("g++ is not installed: the host kernel tests compile kernels/*.cu with g++")
    key = tuple(sorted(defines.items()))
    if key in _LIBRARIES:
        return _LIBRARIES[key]
    target = build_library(CXXFLAGS + [f"-D{name}={value}" for name, value in key], cache_directory())
    library = _LIBRARIES[key] = load_library(target)
    return library


def load_library(target: Path) -> ctypes.CDLL:
    """A built library (build_library) loaded, its functions given their ctypes signatures."""
    library = ctypes.CDLL(str(target))
    for name, argtypes in _SIGNATURES.items():
        function = getattr(library, name)
        function.argtypes = argtypes
        function.restype = ctypes.c_int
    return library


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)



# The launch function of each kernel in launch.cpp, and how many grid dimensions it takes
# before the block size and schedule.
LAUNCHERS = {
    "minhash_signatures_u64": ("launch_minhash_signatures_u64", 2),
    "band_keys_u32": ("launch_band_keys_u32", 1),
    "span_hashes_u32": ("launch_span_hashes_u32", 1),
}


class HostKernel:
    """One kernel of a host library, called like a cupy.RawKernel: kernel(grid, block, args).

    Array arguments must be C-contiguous numpy arrays of the kernel's dtypes (ctypes checks,
    which also catches a backend handing a strided view to a kernel that reads it flat).
    Scalars must be numpy scalars of the parameter's exact width -- np.int32 for ``int``,
    np.int64 for ``long long`` -- because CuPy passes a scalar by its own type, and a Python
    int or a wider type for an ``int`` parameter garbles the arguments on a GPU. A launch that
    the shim reports as failed raises.
    """

    SCALAR_TYPES = {ctypes.c_int: np.int32, ctypes.c_longlong: np.int64, ctypes.c_uint: np.uint32}

    def __init__(self, library, kernel_name: str, schedule: int):
        self.name = kernel_name
        self.max_block = library.tunable_block_size()
        launcher, self.grid_dims = LAUNCHERS[kernel_name]
        self.function = getattr(library, launcher)
        self.schedule = schedule
        self.parameters = self.function.argtypes[self.grid_dims + 2:]  # after grid, block, schedule

    def __call__(self, grid, block, args):
        grid = tuple(grid) + (1,) * (self.grid_dims - len(grid))
        if len(grid) != self.grid_dims or any(g != 1 for g in grid[self.grid_dims:]) or len(block) != 1:
            raise ValueError(f"{self.name}: unsupported launch geometry grid={grid} block={block}")
        if block[0] > self.max_block:
            # On a GPU a launch beyond the kernel's __launch_bounds__ fails; so does it here.
            raise RuntimeError(f"{self.name}: block {block[0]} exceeds BLOCK_SIZE {self.max_block}")
        if len(args) != len(self.parameters):
            raise TypeError(f"{self.name} takes {len(self.parameters)} arguments, got {len(args)}")
        for position, (arg, parameter) in enumerate(zip(args, self.parameters)):
            wanted = self.SCALAR_TYPES.get(parameter)
            if wanted is not None and type(arg) is not wanted:
                raise TypeError(f"{self.name} argument {position}: needs {wanted.__name__}, got "
                                f"{type(arg).__name__} (a GPU would read it with the wrong width)")
        args = [self.device_argument(position, arg, args) for position, arg in enumerate(args)]
        status = self.function(*grid[: self.grid_dims], int(block[0]), self.schedule, *args)
        if status != OK:
            name = Status(status).name if status in set(Status) else "unknown"
            raise RuntimeError(f"{self.name} launch failed on the host shim: {name} (status {status})")

    def device_argument(self, position: int, arg, args):
        """An argument as the shim takes it: a scalar as an int, an array as its memory.

        Device arrays (cupy_like) pass their memory, as a RawKernel passes a device pointer. A
        host numpy array among them is refused, as CuPy refuses one (a GPU cannot read host
        memory); numpy arrays alone are the backend run with ``xp`` = numpy."""
        # cupy_like is imported by the tests that make device arrays; without it there are none
        # (and the host kernel tests need no CuPy).
        cupy_like = sys.modules.get("cupy_like")
        device_array = cupy_like.DeviceArray if cupy_like is not None else ()
        if isinstance(arg, device_array):
            return cupy_like.device_buffer(arg)
        if isinstance(arg, np.ndarray):
            if any(isinstance(other, device_array) for other in args):
                raise TypeError(f"{self.name} argument {position}: a host numpy array among device arrays "
                                "(CuPy's RawKernel refuses one: copy it with xp.asarray)")
            return arg
        return int(arg)


class HostKernels:
    """The kernel loader of KernelBackend for host runs: get(file, name, defines).

    One library per tunable combination; launch.cpp compiles every kernel file into it, so
    the defines of a file apply to the others of the same library (they share BLOCK_SIZE).
    ``schedule`` picks the order of threads between barriers (FORWARD, REVERSE, SHUFFLED).
    """

    def __init__(self, schedule: int = 0):
        self.schedule = schedule
        self.launches: list[tuple[str, dict]] = []  # (kernel, defines) of every get, for tests

    def get(self, file_name: str, kernel_name: str, defines: dict) -> HostKernel:
        self.launches.append((kernel_name, dict(defines)))
        # The file's own defaults made explicit: launch.cpp compiles all files into one unit,
        # where the first file's #define BLOCK_SIZE would otherwise set the others' too.
        return HostKernel(host_library(**{**KERNEL_DEFAULTS[file_name], **defines}), kernel_name, self.schedule)
