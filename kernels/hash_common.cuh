// hash_common.cuh: the hash family shared by every gpudedup kernel.
//
// These are the definitions of gpudedup/hashing.py and of the README's "Hash specification",
// written for the device, and included as C by the CPU's compiled loops (cpu_kernels.c). They are frozen: stored signatures and band keys must stay valid
// across releases, and the numpy backend must agree bit for bit. tests/test_kernels_host.py
// checks that the constants below equal the ones in hashing.py.
//
// All arithmetic is unsigned and wraps: 64-bit values modulo 2^64, 32-bit values modulo 2^32.
// C++ unsigned arithmetic wraps by definition, so plain `*` and `+` are the specification.
//
// This header includes nothing, so that NVRTC (which has no system headers) can compile it and
// so that the host shim (tests/kernel_host/cuda_host_shim.h) can compile it with g++. Kernels
// include it as "hash_common.cuh": compile them with -I<kernels directory>.

#ifndef GPUDEDUP_HASH_COMMON_CUH
#define GPUDEDUP_HASH_COMMON_CUH

// The qualifiers of a constant and of a function: constexpr and device-inline in CUDA C++
// (NVRTC, and g++ on the host shim); const and `static inline` where cpu_kernels.c includes
// this as C (it defines GD_FUNCTION first).
#ifdef __cplusplus
#define GD_CONSTANT static constexpr
#else
#define GD_CONSTANT static const
#endif
#ifndef GD_FUNCTION
#define GD_FUNCTION __device__ __forceinline__
#endif

// Fixed-width names without <cstdint> (NVRTC has no standard headers). On every CUDA target
// and on LP64 hosts, unsigned int is 32 bits and (unsigned) long long is 64 bits.
typedef unsigned int gd_u32;
typedef unsigned long long gd_u64;
typedef long long gd_i64;

// poly_hash64: h = POLY_OFFSET; h = h * POLY_BASE + u for every unit u; then fmix64(h).
GD_CONSTANT gd_u64 GD_POLY_BASE = 0x9E3779B97F4A7C15ULL;
GD_CONSTANT gd_u64 GD_POLY_OFFSET = 0xCBF29CE484222325ULL;

// MurmurHash3's 64-bit finaliser.
GD_CONSTANT gd_u64 GD_FMIX_C1 = 0xFF51AFD7ED558CCDULL;
GD_CONSTANT gd_u64 GD_FMIX_C2 = 0xC4CEB9FE1A85EC53ULL;

// Signature entry of a document without shingles (hashing.EMPTY_SIGNATURE_VALUE).
GD_CONSTANT gd_u32 GD_EMPTY_SIGNATURE_VALUE = 0xFFFFFFFFu;

GD_FUNCTION gd_u64 gd_fmix64(gd_u64 h) {
    h ^= h >> 33;
    h *= GD_FMIX_C1;
    h ^= h >> 33;
    h *= GD_FMIX_C2;
    h ^= h >> 33;
    return h;
}

// One step of Horner's rule of poly_hash64: the state after appending unit u.
GD_FUNCTION gd_u64 gd_poly_step(gd_u64 h, gd_u32 u) {
    return h * GD_POLY_BASE + (gd_u64)u;
}

// MinHash permutation k of a shingle hash x: (a_k * (x mod 2^32) + b_k) mod 2^32.
// Callers pass x already truncated to its low 32 bits (the only bits the family reads).
GD_FUNCTION gd_u32 gd_permute(gd_u32 a, gd_u32 b, gd_u32 x_low) {
    return a * x_low + b;
}

#endif  // GPUDEDUP_HASH_COMMON_CUH
