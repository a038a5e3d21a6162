// shingle_hash.cu: the 64-bit hash of every shingle, from its span of code points.
//
//   hash[i] = poly_hash64(codepoints[starts[i]], ..., codepoints[ends[i] - 1])
//
// (gpudedup/shingling.py span_hashes is the reference. It gets the same value in O(1) per
// span from a prefix sum of c_j * POLY_BASE^-j; this kernel applies the definition directly,
// Horner's rule, which makes the two an independent cross-check of each other.)
//
// Tunables (override with -DNAME=value):
//   BLOCK_SIZE  threads per block (the most a launch may use: __launch_bounds__).
//
// Parallel decomposition
// ----------------------
// One thread per shingle in a grid-stride loop (any grid size is correct). Shingles are
// short -- n code points for char n-grams, n words for word n-grams -- so a sequential chain
// per thread is cheap and needs no prefix sum, no power tables and no second pass. Adjacent
// shingles overlap, so the threads of a warp read overlapping, nearby code points and the
// loads hit the same cache lines. A pathological span (a huge "word" without spaces) costs one
// thread a long loop; it is still correct.

#include "hash_common.cuh"

#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif

// codepoints: uint32 (M,) normalised code points of the batch.
// starts, ends: int64 (num_spans,), 0 <= starts[i] < ends[i] <= M.
// hashes: uint64 (num_spans,).
extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)
span_hashes_u32(const gd_u32* __restrict__ codepoints,
                const gd_i64* __restrict__ starts,
                const gd_i64* __restrict__ ends,
                const gd_i64 num_spans,
                gd_u64* __restrict__ hashes) {
    const gd_i64 stride = (gd_i64)blockDim.x * gridDim.x;
    for (gd_i64 i = (gd_i64)blockIdx.x * blockDim.x + threadIdx.x; i < num_spans; i += stride) {
        gd_u64 h = GD_POLY_OFFSET;
        const gd_i64 stop = ends[i];
        // A modest unroll: the chain is sequential anyway, and ptxas's default full-unroll
        // attempt on a runtime trip count spilled registers on sm_120 with BLOCK_SIZE=256.
#pragma unroll 4
        for (gd_i64 j = starts[i]; j < stop; ++j) {
            h = gd_poly_step(h, codepoints[j]);
        }
        hashes[i] = gd_fmix64(h);
    }
}
