"""The CUDA kernels of kernels/: where their sources are, how they are compiled, which tunables
a launch uses, and the CuPy loader that compiles each (file, tunables) once per device.

The sources ship inside the package as ``gpudedup.kernels`` (pyproject.toml maps the top-level
kernels/ there). Kernels are called as ``kernel(grid, block, args)``, CuPy's RawKernel
convention; tests/kernel_host/host_kernels.py offers the same call for the same sources compiled
for the host, which is how KernelBackend is tested without a GPU.

Nothing here imports CuPy at import time.
"""

from __future__ import annotations

import hashlib
import threading
from functools import cache
from pathlib import Path
from typing import Any

from .kernel_tunables import KERNEL_TUNABLES, MINHASH_LAUNCH_CHOICES

KERNEL_FILES = ("minhash.cu", "band_keys.cu", "shingle_hash.cu")

# Options CuPy's RawModule adds to every NVRTC compile itself (-ftz=true by compile_with_cache,
# --device-as-default-execution-space and -arch by compile_using_nvrtc); listed here so that
# the NVRTC tests compile exactly what the backend compiles.
CUPY_IMPLICIT_OPTIONS = ("-ftz=true", "--device-as-default-execution-space")


@cache
def kernel_directory() -> Path:
    """The directory holding the .cu / .cuh files: gpudedup/kernels in an installed wheel,
    the repository's kernels/ in a source checkout or an editable install."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "kernels", package.parent / "kernels"):
        if (candidate / "minhash.cu").is_file():
            return candidate
    raise FileNotFoundError(
        f"the CUDA kernel sources (minhash.cu, ...) are missing from {package}; reinstall gpudedup"
    )


def kernel_source(file_name: str) -> str:
    """The source of a kernel file as it is compiled: the file, headed by a comment holding the
    SHA-256 of hash_common.cuh. CuPy's on-disk cache keys a binary by the source and the
    options but not by included headers; with the digest in the source, a changed header can
    never be served a binary compiled from the old one."""
    if file_name not in KERNEL_FILES:
        raise ValueError(f"no kernel file {file_name!r}; the kernels are {', '.join(KERNEL_FILES)}")
    directory = kernel_directory()
    digest = hashlib.sha256((directory / "hash_common.cuh").read_bytes()).hexdigest()
    return f"// hash_common.cuh sha256 {digest}\n" + (directory / file_name).read_text()


def compile_options(defines: dict) -> tuple[str, ...]:
    """NVRTC options: the include path of hash_common.cuh and the -D tunables (sorted: one
    cache key per combination)."""
    return (f"-I{kernel_directory()}", *(f"-D{name}={value}" for name, value in sorted(defines.items())))


def minhash_tunables(num_perm: int) -> dict:
    """The tunables of minhash.cu for K = num_perm permutations: the launch choice whose
    permutation chunk (BLOCK_SIZE * PERMS_PER_THREAD) wastes the fewest thread slots past K
    (ties: the earlier, preferred choice)."""

    def wasted(defines: dict) -> int:
        chunk = tunable(defines, "BLOCK_SIZE", "minhash.cu") * tunable(defines, "PERMS_PER_THREAD", "minhash.cu")
        return -(-num_perm // chunk) * chunk - num_perm

    return min(MINHASH_LAUNCH_CHOICES, key=wasted)


def grid_stride_blocks(items: int, block_size: int, max_blocks: int = 1 << 16) -> int:
    """Blocks for a grid-stride kernel over ``items``: one item per thread up to max_blocks
    (enough to fill any current GPU; the loop covers the rest)."""
    return max(1, min(-(-items // block_size), max_blocks))


def tunable(defines: dict, name: str, file_name: str) -> int:
    """A tunable's value: the override in ``defines``, else the file's #ifndef default."""
    return int(defines.get(name, KERNEL_DEFAULTS[file_name][name]))


# The #ifndef defaults of the kernel files (tests/test_kernels_host.py checks them against the
# compiled sources).
KERNEL_DEFAULTS = {
    "minhash.cu": {"BLOCK_SIZE": 64, "PERMS_PER_THREAD": 2, "TILE": 1024},
    "band_keys.cu": {"BLOCK_SIZE": 256},
    "shingle_hash.cu": {"BLOCK_SIZE": 256},
}


class CupyKernels:
    """Compiled kernels on the current CUDA device: ``get(file, name, defines)`` returns a
    ``cupy.RawKernel``. Each (device, file, defines) is compiled once per process (CuPy also
    caches the binary on disk, in ~/.cupy/kernel_cache, across processes)."""

    def __init__(self, cupy):
        self.cupy = cupy
        self._modules: dict[tuple, Any] = {}  # cupy.RawModule
        self._kernels: dict[tuple, Any] = {}  # cupy.RawKernel
        self._lock = threading.Lock()

    def get(self, file_name: str, kernel_name: str, defines: dict):
        if defines not in KERNEL_TUNABLES[file_name]:
            # Only combinations proven on the host and compiled by the NVRTC tests are launched.
            raise ValueError(f"{file_name} tunables {defines} are not in kernel_tunables.KERNEL_TUNABLES")
        key = (self.cupy.cuda.Device().id, file_name, tuple(sorted(defines.items())), kernel_name)
        kernel = self._kernels.get(key)  # a dict read: safe without the lock
        if kernel is None:
            with self._lock:  # batches run on two threads; compile each module once
                module = self._modules.get(key[:3])
                if module is None:
                    module = self.cupy.RawModule(code=kernel_source(file_name), options=compile_options(defines))
                    self._modules[key[:3]] = module
                kernel = self._kernels[key] = module.get_function(kernel_name)
        return kernel
