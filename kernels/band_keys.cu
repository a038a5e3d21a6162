// band_keys.cu: one 64-bit LSH key per (document, band).
//
//   key[d, j] = poly_hash64(signature[d, j*r], ..., signature[d, j*r + r - 1])
//
// (gpudedup/lsh.py band_keys is the reference; hash_common.cuh has poly_hash64's pieces.)
//
// Tunables (override with -DNAME=value):
//   BLOCK_SIZE  threads per block (the most a launch may use: __launch_bounds__).
//
// Parallel decomposition
// ----------------------
// One thread per (document, band), flat index i = d * bands + j, in a grid-stride loop (any
// grid size is correct; ceil(n_docs * bands / BLOCK_SIZE) blocks is the natural one). A key
// is a sequential chain of r multiply-adds (Horner's rule) followed by fmix64: there is no
// parallelism inside one key worth a reduction, and n_docs * bands keys are plenty of
// threads. Consecutive threads handle consecutive bands of a row, so a warp reads one
// contiguous stretch of signature memory and writes consecutive keys.

#include "hash_common.cuh"

#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif

// signatures: uint32 (n_docs, num_perm) row-major, num_perm >= bands * rows; the columns
//             past bands * rows are not read.
// keys:       uint64 (n_docs, bands) row-major.
extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)
band_keys_u32(const gd_u32* __restrict__ signatures,
              const gd_i64 n_docs,
              const int num_perm,
              const int bands,
              const int rows,
              gd_u64* __restrict__ keys) {
    const gd_i64 total = n_docs * (gd_i64)bands;
    const gd_i64 stride = (gd_i64)blockDim.x * gridDim.x;
    for (gd_i64 i = (gd_i64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const gd_i64 doc = i / bands;
        const int band = (int)(i - doc * bands);
        const gd_u32* values = signatures + doc * (gd_i64)num_perm + (gd_i64)band * rows;
        gd_u64 h = GD_POLY_OFFSET;
        // A modest unroll: the chain is sequential anyway, and ptxas's default full-unroll
        // attempt on a runtime trip count spilled registers on sm_120 with BLOCK_SIZE=256.
#pragma unroll 4
        for (int row = 0; row < rows; ++row) {
            h = gd_poly_step(h, values[row]);
        }
        keys[i] = gd_fmix64(h);
    }
}
