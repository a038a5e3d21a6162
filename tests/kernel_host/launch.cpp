// launch.cpp: host entry points for the kernels in kernels/, called from Python via ctypes
// (tests/test_kernels_host.py). The kernel sources are compiled unchanged, as C++, on top of
// cuda_host_shim.h; tunables are the kernels' own #ifndef defaults unless -D overrides them.
//
// Build: g++ -std=c++17 -O2 -shared -fPIC -I<repo>/kernels [-DBLOCK_SIZE=...] launch.cpp
//
// Every launch_* function takes the launch geometry explicitly, like a CUDA launch, and
// returns a cuda_host::Status (0 on success). `schedule` picks the order in which the
// threads of a block run between barriers (cuda_host::Schedule).
//
// All three kernel files are compiled into one library, so a -D override of a shared
// tunable name (BLOCK_SIZE) applies to every kernel of that library.

#include "cuda_host_shim.h"

// The kernels hidden like the shim (cuda_host_shim.h, "One library, one copy of the shim"): a
// library exports its launch_* and tunable_* functions (GD_EXPORT) and nothing that a library
// loaded after it could bind to instead of its own.
#pragma GCC visibility push(hidden)
#include "minhash.cu"
#include "band_keys.cu"
#include "shingle_hash.cu"
#include "shim_selftest.cu"
#pragma GCC visibility pop

#define GD_EXPORT extern "C" __attribute__((visibility("default")))

// The tunables this library was compiled with, so tests can check that -D took effect.
GD_EXPORT int tunable_block_size() { return BLOCK_SIZE; }
GD_EXPORT int tunable_perms_per_thread() { return PERMS_PER_THREAD; }
GD_EXPORT int tunable_tile() { return TILE; }

GD_EXPORT int launch_minhash_signatures_u64(unsigned int grid_x, unsigned int grid_y,
                                            unsigned int block_x, int schedule,
                                            const gd_u64* hashes, const gd_i64* offsets,
                                            const gd_i64* item_docs, const gd_i64* item_starts,
                                            gd_i64 item_shingles, const gd_u32* a, const gd_u32* b,
                                            int num_perm, gd_u32* signatures) {
    return cuda_host::launch(dim3(grid_x, grid_y), dim3(block_x), schedule, [&] {
        minhash_signatures_u64(hashes, offsets, item_docs, item_starts, item_shingles, a, b,
                               num_perm, signatures);
    });
}

GD_EXPORT int launch_band_keys_u32(unsigned int grid_x, unsigned int block_x, int schedule,
                                   const gd_u32* signatures, gd_i64 n_docs, int num_perm,
                                   int bands, int rows, gd_u64* keys) {
    return cuda_host::launch(dim3(grid_x), dim3(block_x), schedule, [&] {
        band_keys_u32(signatures, n_docs, num_perm, bands, rows, keys);
    });
}

GD_EXPORT int launch_span_hashes_u32(unsigned int grid_x, unsigned int block_x, int schedule,
                                     const gd_u32* codepoints, const gd_i64* starts,
                                     const gd_i64* ends, gd_i64 num_spans, gd_u64* hashes) {
    return cuda_host::launch(dim3(grid_x), dim3(block_x), schedule, [&] {
        span_hashes_u32(codepoints, starts, ends, num_spans, hashes);
    });
}

// --- shim self-tests (tests/kernel_host/shim_selftest.cu) ----------------------------------

GD_EXPORT int launch_reverse_block_i32(unsigned int grid_x, unsigned int block_x, int schedule,
                                       const int* input, int* output, int sync) {
    return cuda_host::launch(dim3(grid_x), dim3(block_x), schedule,
                             [&] { reverse_block_i32(input, output, sync); });
}

GD_EXPORT int launch_divergent_barrier_i32(unsigned int block_x, int* output) {
    return cuda_host::launch(dim3(1), dim3(block_x), cuda_host::FORWARD,
                             [&] { divergent_barrier_i32(output); });
}

GD_EXPORT int launch_thread_coordinates_u32(unsigned int gx, unsigned int gy, unsigned int gz,
                                            unsigned int bx, unsigned int by, unsigned int bz,
                                            unsigned int* output) {
    return cuda_host::launch(dim3(gx, gy, gz), dim3(bx, by, bz), cuda_host::SHUFFLED,
                             [&] { thread_coordinates_u32(output); });
}

GD_EXPORT int launch_uninitialised_shared_u32(unsigned int grid_x, unsigned int block_x, unsigned int* output) {
    return cuda_host::launch(dim3(grid_x), dim3(block_x), cuda_host::FORWARD,
                             [&] { uninitialised_shared_u32(output); });
}
