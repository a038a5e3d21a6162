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


def minhash_chunk(defines: dict) -> int:
    """The permutations one block of minhash.cu covers with these tunables:
    BLOCK_SIZE * PERMS_PER_THREAD."""
    return tunable(defines, "BLOCK_SIZE", "minhash.cu") * tunable(defines, "PERMS_PER_THREAD", "minhash.cu")


def minhash_wasted_slots(defines: dict, num_perm: int) -> int:
    """Thread slots past K = num_perm that a launch with these tunables computes for nothing
    (per shingle): the chunks of the grid's y dimension cover ceil(K / chunk) * chunk."""
    chunk = minhash_chunk(defines)
    return -(-num_perm // chunk) * chunk - num_perm


def minhash_tunables(num_perm: int) -> dict:
    """The tunables of minhash.cu for K = num_perm permutations, among
    kernel_tunables.MINHASH_LAUNCH_CHOICES: the fewest wasted slots past K, then the fewest
    permutation chunks (each chunk's blocks read the document again), then the earlier,
    preferred choice."""
    return min(MINHASH_LAUNCH_CHOICES,
               key=lambda defines: (minhash_wasted_slots(defines, num_perm), -(-num_perm // minhash_chunk(defines))))


def minhash_work_items(offsets: Any, item_shingles: int, xp: Any) -> tuple[Any, Any]:
    """The work items of one minhash_signatures_u64 launch over every document (the kernel's
    header comment says why): each document with shingles is cut into ranges of at most
    ``item_shingles`` shingles, so a short document is one item and a long one several.

    offsets: int64 (n + 1,) on xp's side, the documents' shingle offsets (CSR). Returns
    (item_docs, item_starts), int64 (n_items,) each on xp's side: item i covers shingles
    [item_starts[i], min(item_starts[i] + item_shingles, offsets[item_docs[i] + 1])).
    Documents without shingles have no item. Items come longest first, so that the blocks
    issued last are the short ones and the device does not idle while a few finish.
    """
    if item_shingles < 1:
        raise ValueError(f"item_shingles must be at least 1, got {item_shingles}")
    counts = offsets[1:] - offsets[:-1]
    pieces = (counts + (item_shingles - 1)) // item_shingles
    item_ends = xp.cumsum(pieces)  # items of documents 0..d: document d's items end there
    n_items = int(item_ends[-1]) if item_ends.shape[0] else 0
    items = xp.arange(n_items, dtype=xp.int64)
    item_docs = xp.searchsorted(item_ends, items, side="right")
    piece = items - (item_ends[item_docs] - pieces[item_docs])  # the item's number in its document
    del items, counts, pieces, item_ends
    item_starts = offsets[item_docs] + piece * item_shingles
    order = xp.argsort(-xp.minimum(offsets[item_docs + 1] - item_starts, item_shingles))
    return (xp.ascontiguousarray(item_docs[order], dtype=xp.int64),
            xp.ascontiguousarray(item_starts[order], dtype=xp.int64))


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
