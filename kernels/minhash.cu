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
// One block computes the minima of one work item -- a range of one document's shingles -- for
// one chunk of permutations:
//   blockIdx.x -> work item blockIdx.x: document item_docs[blockIdx.x], shingles
//                 [item_starts[blockIdx.x], min(item_starts[blockIdx.x] + item_shingles, end
//                 of the document))
//   blockIdx.y -> permutations [blockIdx.y * PERMS_PER_BLOCK, (blockIdx.y + 1) * PERMS_PER_BLOCK)
// so launch with grid = (n_items, ceil(K / (BLOCK_SIZE * PERMS_PER_THREAD))).
//
// Why work items, not one block per document: a block's time grows with its document's
// length, so one long document (a 100 KB licence text is ~100,000 char 5-grams) would run on
// one block for as long as the rest of the batch takes on the whole device, leaving it idle
// at the end. The caller (cuda_kernels.minhash_work_items) cuts every document longer than
// item_shingles into items of item_shingles shingles (the last one shorter) and gives a short
// document one item, its whole self. The items of one document combine their minima with
// atomicMin on the signature row, which the caller fills with 0xFFFFFFFF (the empty value,
// and the identity of min) beforehand; an item that is a whole document stores its minima
// directly (no other block writes that row chunk). Since min is associative and commutative,
// the result does not depend on how documents are cut or in which order blocks run, and it is
// bit for bit the numpy reference's.
//
// Why this shape inside a block: every signature entry of a document reads every shingle of
// that document, so the shingles are the data to share and the permutations are the work to
// split. The block loads a tile of its shingles into shared memory once (coalesced, each
// thread one element), and then every thread reads every tile element -- all threads read the
// same address at the same time, a shared-memory broadcast without bank conflicts -- and
// applies its PERMS_PER_THREAD permutations, keeping the running minima in registers. Each
// tile value is reused PERMS_PER_THREAD times per load; a_k and b_k are loaded once per
// thread. Only the low 32 bits of a hash are read by the family, so the tile holds uint32
// (half the shared memory and half the shared-memory traffic of the uint64 hashes).
//
// Thread t of the block owns permutations k = k0 + p * BLOCK_SIZE + t, p < PERMS_PER_THREAD:
// consecutive threads own consecutive k, so the loads of a, b and the stores of a signature
// row are coalesced. A thread whose k is >= K (K not a multiple of the chunk) computes with
// a = b = 0 and stores nothing; it still helps load tiles, and every thread reaches every
// __syncthreads() because the loop bounds depend only on the work item (uniform per block).
//
// Choosing tunables: make BLOCK_SIZE * PERMS_PER_THREAD just cover K (slots past K are wasted
// work); cuda_kernels.minhash_tunables picks, among kernel_tunables.MINHASH_LAUNCH_CHOICES,
// the one that wastes the fewest. A larger PERMS_PER_THREAD reuses each shared-memory read
// more (fewer loads and less loop overhead per multiply-add: scripts/kernel_ceiling.py counts
// the instructions) but needs more registers; tests/test_kernels_nvrtc.py checks for spills.
//
// The items of a launch can be any set of ranges that together cover each named document
// once (a caller may launch buckets of documents separately, with tunables that suit them);
// rows of documents no item names are left untouched. An empty document's item runs no tile
// and stores 0xFFFFFFFF.

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

// hashes:        uint64 (S,), the shingle hashes of all documents, grouped by document (CSR).
// offsets:       int64 (n_docs + 1,), document d is hashes[offsets[d]:offsets[d + 1]].
// item_docs:     int64 (gridDim.x,), the document of each work item.
// item_starts:   int64 (gridDim.x,), the first shingle of each item, an index into hashes in
//                [offsets[d], offsets[d + 1]] of its document d.
// item_shingles: the most shingles an item covers (> 0).
// a, b:          uint32 (num_perm,), permutation parameters.
// signatures:    uint32 (n_docs, num_perm) row-major; the rows of documents cut into several
//                items must hold 0xFFFFFFFF before the launch (atomicMin combines into them).
extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)
minhash_signatures_u64(const gd_u64* __restrict__ hashes,
                       const gd_i64* __restrict__ offsets,
                       const gd_i64* __restrict__ item_docs,
                       const gd_i64* __restrict__ item_starts,
                       const gd_i64 item_shingles,
                       const gd_u32* __restrict__ a,
                       const gd_u32* __restrict__ b,
                       const int num_perm,
                       gd_u32* __restrict__ signatures) {
    __shared__ gd_u32 tile[TILE];

    const gd_i64 doc = item_docs[blockIdx.x];
    const gd_i64 doc_stop = offsets[doc + 1];
    const gd_i64 first = item_starts[blockIdx.x];
    const gd_i64 stop = doc_stop - first <= item_shingles ? doc_stop : first + item_shingles;
    // The whole document in one item: no other block writes this row chunk.
    const bool whole_document = first == offsets[doc] && stop == doc_stop;
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
            if (whole_document) {
                row[k] = minimum[p];
            } else {
                atomicMin(row + k, minimum[p]);  // the other items of the document write too
            }
        }
    }
}
