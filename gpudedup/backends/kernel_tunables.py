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
        {"BLOCK_SIZE": 32, "PERMS_PER_THREAD": 2, "TILE": 1024},  # a launch choice for K <= 64
    ],
    "band_keys.cu": [{}, {"BLOCK_SIZE": 32}, {"BLOCK_SIZE": 1024}],
    "shingle_hash.cu": [{}, {"BLOCK_SIZE": 32}, {"BLOCK_SIZE": 1024}],
}

# What the GPU backend launches minhash.cu with, in order of preference (cuda_kernels.
# minhash_tunables picks the one that wastes the fewest permutation slots for K). The other
# combinations above exist to test the kernel's edge cases (tiles smaller than a block, K not a
# multiple of the chunk); every choice here must be among them.
MINHASH_LAUNCH_CHOICES = [
    {},  # 64 threads x 2 permutations = 128, the default num_perm
    {"BLOCK_SIZE": 32, "PERMS_PER_THREAD": 2, "TILE": 1024},  # chunks of 64: less waste past K
]
