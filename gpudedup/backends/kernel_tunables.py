"""The tunable combinations of the CUDA kernels in kernels/ that are proven: the GPU backend
picks among them, tests/test_kernels_host.py runs each on the host through the shim, and
tests/test_kernels_nvrtc.py compiles each with NVRTC.

Each kernel file maps to a list of -D override dicts; ``{}`` is the file's own defaults. A
GPU loader that picks tunables should pick among these (or add its choice here), so that
every shipped combination is proven on the host and compiles with NVRTC.
"""

KERNEL_TUNABLES = {
    "minhash.cu": [
        {},  # BLOCK_SIZE=64, PERMS_PER_THREAD=2, TILE=1024
        {"BLOCK_SIZE": 32, "PERMS_PER_THREAD": 1, "TILE": 32},
        {"BLOCK_SIZE": 32, "PERMS_PER_THREAD": 4, "TILE": 7},  # tiny tiles: many per document
        {"BLOCK_SIZE": 64, "PERMS_PER_THREAD": 3, "TILE": 100},  # TILE not a multiple of the block
        {"BLOCK_SIZE": 128, "PERMS_PER_THREAD": 1, "TILE": 256},
        {"BLOCK_SIZE": 32, "PERMS_PER_THREAD": 8, "TILE": 512},  # the most registers per thread
        {"BLOCK_SIZE": 256, "PERMS_PER_THREAD": 4, "TILE": 2048},
        {"BLOCK_SIZE": 256, "PERMS_PER_THREAD": 1, "TILE": 8192},  # 32 KiB of shared memory
        {"BLOCK_SIZE": 32, "PERMS_PER_THREAD": 2, "TILE": 1024},  # launch choices (below) from here on
        {"BLOCK_SIZE": 32, "PERMS_PER_THREAD": 3, "TILE": 1024},
        {"BLOCK_SIZE": 64, "PERMS_PER_THREAD": 3, "TILE": 1024},
        {"BLOCK_SIZE": 64, "PERMS_PER_THREAD": 4, "TILE": 1024},
        {"BLOCK_SIZE": 32, "PERMS_PER_THREAD": 5, "TILE": 1024},
        {"BLOCK_SIZE": 32, "PERMS_PER_THREAD": 7, "TILE": 1024},
        {"BLOCK_SIZE": 32, "PERMS_PER_THREAD": 1, "TILE": 1024},
    ],
    "band_keys.cu": [{}, {"BLOCK_SIZE": 32}, {"BLOCK_SIZE": 1024}],
    "shingle_hash.cu": [{}, {"BLOCK_SIZE": 32}, {"BLOCK_SIZE": 1024}],
}

# What the GPU backend launches minhash.cu with (cuda_kernels.minhash_tunables picks the one
# that wastes the fewest permutation slots past K, then the one with the fewest permutation
# chunks, then the earlier one). The other combinations above exist to test the kernel's edge
# cases (tiles smaller than a block, K not a multiple of the chunk); every choice here must be
# among them.
#
# The chunks (BLOCK_SIZE x PERMS_PER_THREAD) are every multiple of 32 up to 256, so any K up to
# 256 runs as one chunk with fewer than 32 slots wasted, which is the least a launch can waste:
# a warp is 32 threads, so the slots of a block come in 32s. The permutations computed are
# bands * rows of lsh.choose_bands; with DedupParams' defaults (num_perm 128, max_fn 0.01) they
# are, for thresholds 0.5, 0.55, ..., 0.95:
#   num_perm 128: 105, 78, 57, 96, 68, 85, 96 (0.8, the default), 120, 110, 128
#   num_perm 256: 105, 192, 136, 190, 222, 231, 208, 220, 252, 252
# and the multiples of 32 among them (96, 128, 192) waste nothing (tests/test_kernels_host.py
# recomputes this from choose_bands). Chunks of 64 threads where PERMS_PER_THREAD allows; one
# warp (32 threads) with 3, 5 or 7 permutations otherwise: PERMS_PER_THREAD stays at most 8,
# so the minima and parameters stay in registers (tests/test_kernels_nvrtc.py checks).
MINHASH_LAUNCH_CHOICES = [
    {},  # 64 threads x 2 permutations = 128, the default num_perm
    {"BLOCK_SIZE": 32, "PERMS_PER_THREAD": 3, "TILE": 1024},  # 96: threshold 0.8 with num_perm 128
    {"BLOCK_SIZE": 64, "PERMS_PER_THREAD": 3, "TILE": 1024},  # 192
    {"BLOCK_SIZE": 64, "PERMS_PER_THREAD": 4, "TILE": 1024},  # 256
    {"BLOCK_SIZE": 32, "PERMS_PER_THREAD": 5, "TILE": 1024},  # 160
    {"BLOCK_SIZE": 32, "PERMS_PER_THREAD": 7, "TILE": 1024},  # 224
    {"BLOCK_SIZE": 32, "PERMS_PER_THREAD": 2, "TILE": 1024},  # 64
    {"BLOCK_SIZE": 32, "PERMS_PER_THREAD": 1, "TILE": 1024},  # 32
]

# The most shingles one block of minhash.cu works on (a work item): longer documents are cut
# into items of this many shingles, whose minima the kernel combines with atomicMin (see the
# kernel's header comment). Why 4096: a full device runs a few thousand blocks at once (132
# SMs x up to 32 blocks on an H100), so a 64 MiB batch (13 M word or 64 M char 5-grams) gives
# each resident block several thousand shingles anyway; at 4096 the longest block is no
# longer than a typical one, however long its document, while the per-item costs (loading
# a and b, one atomicMin per permutation) stay below 0.1% of an item's 4096 updates per
# permutation. Results do not depend on it.
MINHASH_ITEM_SHINGLES = 4096
