// shim_selftest.cu: tiny kernels that check the host shim itself (not shipped; tests only).
//
// reverse_block_i32: each block reverses its BLOCK_SIZE-long slice through shared memory. With
//   sync = 0 the barrier between the write and the read is left out, which is a race on a
//   GPU; under the shim it must give wrong results (the shim runs a thread from barrier to
//   barrier alone), proving that the shim does not hide missing __syncthreads().
// divergent_barrier_i32: thread 0 returns before a barrier the others wait at; the shim must
//   report it (cuda_host::DIVERGENT_BARRIER).
// uninitialised_shared_u32: each thread reads its word of shared memory before anything wrote
//   it (undefined on a GPU), then writes it; the shim must show its fill pattern, never the
//   previous block's writes.
// thread_coordinates_u32: writes blockIdx/threadIdx/blockDim/gridDim of every thread of a 3-D
//   launch, to check the shim's index arithmetic.

extern "C" __global__ void reverse_block_i32(const int* input, int* output, int sync) {
    __shared__ int buffer[1024];
    const unsigned int t = threadIdx.x;
    const long long base = (long long)blockIdx.x * blockDim.x;
    buffer[t] = input[base + t];
    if (sync) {
        __syncthreads();
    }
    output[base + t] = buffer[blockDim.x - 1 - t];
}

extern "C" __global__ void divergent_barrier_i32(int* output) {
    if (threadIdx.x == 0) {
        return;
    }
    __syncthreads();
    output[threadIdx.x] = 1;
}

extern "C" __global__ void thread_coordinates_u32(unsigned int* output) {
    const unsigned int block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    const unsigned int thread = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    const unsigned int threads = blockDim.x * blockDim.y * blockDim.z;
    unsigned int* out = output + 6 * ((unsigned long long)block * threads + thread);
    out[0] = blockIdx.x;
    out[1] = blockIdx.y;
    out[2] = blockIdx.z;
    out[3] = threadIdx.x;
    out[4] = threadIdx.y;
    out[5] = threadIdx.z;
}

extern "C" __global__ void uninitialised_shared_u32(unsigned int* output) {
    __shared__ unsigned int scratch[1024];
    const unsigned int t = threadIdx.x;
    output[(unsigned long long)blockIdx.x * blockDim.x + t] = scratch[t];
    scratch[t] = 0x600DF00Du;
}
