// minhash.cu: MinHash signatures of a batch of documents.
//
//   signature[d, k] = min over the shingle hashes x of document d of
//                     (a_k * (x mod 2^32) + b_k) mod 2^32          (0xFFFFFFFF if d has none)
//
// (gpudedup/minhash.py is the numpy reference; gpudedup/hashing.py states the hash family.)
//
// Tunables (override with -DNAME=value; defaults below):
//   BLOCK_SIZE        threads per block. Launch with blockDim = (BLOCK_SIZE, 1, 1).
//   PERMS_PER_THREAD  permutations each thread carries; a block covers
//                     BLOCK_SIZE * PERMS_PER_THREAD permutations.
//   TILE              shingles staged in shared memory at a time (4 * TILE bytes).
//
// Parallel decomposition
// ----------------------
// One block computes one document's signature for one chunk of permutations:
//   blockIdx.x -> document doc_ids[blockIdx.x]
//   blockIdx.y -> permutations [blockIdx.y * PERMS_PER_BLOCK, (blockIdx.y + 1) * PERMS_PER_BLOCK)
// so launch with grid = (len(doc_ids), ceil(K / (BLOCK_SIZE * PERMS_PER_THREAD))).
//
// Why: every signature entry of a document reads every shingle of that document, so the
// shingles are the data to share and the permutations are the work to split. The block loads
// a tile of the document's shingles into shared memory once (coalesced, each thread one
// element), and then every thread reads every tile element -- all threads read the same
// address at the same time, a shared-memory broadcast without bank conflicts -- and applies
// its PERMS_PER_THREAD permutations, keeping the running minima in registers. Each tile value
// is reused PERMS_PER_THREAD times per load; a_k and b_k are loaded once per thread. Only the
// low 32 bits of a hash are read by the family, so the tile holds uint32 (half the shared
// memory and half the shared-memory traffic of the uint64 hashes).
//
// Thread t of the block owns permutations k = k0 + p * BLOCK_SIZE + t, p < PERMS_PER_THREAD:
// consecutive threads own consecutive k, so the loads of a, b and the stores of a signature
// row are coalesced. A thread whose k is >= K (K not a multiple of the chunk) computes with
// a = b = 0 and stores nothing; it still helps load tiles, and every thread reaches every
// __syncthreads() because the loop bounds depend only on the document (uniform per block).
//
// Choosing tunables: make BLOCK_SIZE * PERMS_PER_THREAD just cover K (slots past K are wasted
// work); the defaults, 64 x 2 = 128, fit the default num_perm = 128 (and bands * rows <= 128).
// A larger PERMS_PER_THREAD reuses each shared-memory read more (fewer loads per
// multiply-add) but needs more registers; tests/test_kernels_nvrtc.py checks for spills.
//
// doc_ids lets the caller launch a bucket of documents of similar length with tunables that
// suit them (short documents: small blocks; very long ones with small K: a small
// PERMS_PER_THREAD, so that more blocks share the work). To process every document pass
// doc_ids = arange(n_docs). An empty document runs no tile and stores 0xFFFFFFFF.

#include "hash_common.cuh"

#ifndef BLOCK_SIZE
#define BLOCK_SIZE 64
#endif
#ifndef PERMS_PER_THREAD
#define PERMS_PER_THREAD 2
#endif
#ifndef TILE
#define TILE 1024
#endif

#define PERMS_PER_BLOCK (BLOCK_SIZE * PERMS_PER_THREAD)

// hashes:     uint64 (S,), the shingle hashes of all documents, grouped by document (CSR).
// offsets:    int64 (n_docs + 1,), document d is hashes[offsets[d]:offsets[d + 1]].
// doc_ids:    int64 (gridDim.x,), the documents this launch computes.
// a, b:       uint32 (num_perm,), permutation parameters.
// signatures: uint32 (n_docs, num_perm) row-major; rows of doc_ids are written.
extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)
minhash_signatures_u64(const gd_u64* __restrict__ hashes,
                       const gd_i64* __restrict__ offsets,
                       const gd_i64* __restrict__ doc_ids,
                       const gd_u32* __restrict__ a,
                       const gd_u32* __restrict__ b,
                       const int num_perm,
                       gd_u32* __restrict__ signatures) {
    __shared__ gd_u32 tile[TILE];

    const gd_i64 doc = doc_ids[blockIdx.x];
    const gd_i64 first = offsets[doc];
    const gd_i64 stop = offsets[doc + 1];
    const int k0 = (int)blockIdx.y * PERMS_PER_BLOCK + (int)threadIdx.x;

    gd_u32 perm_a[PERMS_PER_THREAD];
    gd_u32 perm_b[PERMS_PER_THREAD];
    gd_u32 minimum[PERMS_PER_THREAD];
#pragma unroll
    for (int p = 0; p < PERMS_PER_THREAD; ++p) {
        const int k = k0 + p * BLOCK_SIZE;
        perm_a[p] = k < num_perm ? a[k] : 0u;
        perm_b[p] = k < num_perm ? b[k] : 0u;
        minimum[p] = GD_EMPTY_SIGNATURE_VALUE;
    }

    for (gd_i64 base = first; base < stop; base += TILE) {
        const int count = stop - base < TILE ? (int)(stop - base) : TILE;
        for (int i = (int)threadIdx.x; i < count; i += BLOCK_SIZE) {
            tile[i] = (gd_u32)hashes[base + i];  // the low 32 bits: all the family reads
        }
        __syncthreads();  // the tile is complete
        for (int i = 0; i < count; ++i) {
            const gd_u32 x = tile[i];
#pragma unroll
            for (int p = 0; p < PERMS_PER_THREAD; ++p) {
                const gd_u32 value = gd_permute(perm_a[p], perm_b[p], x);
                minimum[p] = value < minimum[p] ? value : minimum[p];
            }
        }
        __syncthreads();  // every thread is done with the tile before it is overwritten
    }

    gd_u32* row = signatures + doc * (gd_i64)num_perm;
#pragma unroll
    for (int p = 0; p < PERMS_PER_THREAD; ++p) {
        const int k = k0 + p * BLOCK_SIZE;
        if (k < num_perm) {
            row[k] = minimum[p];
        }
    }
}
