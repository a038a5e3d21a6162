// cuda_host_shim.h: compile gpudedup's CUDA kernels (kernels/*.cu) as plain C++ with g++ and
// run them on the host, so that their logic can be compared bit for bit with the numpy backend
// on a machine without a GPU (DESIGN.md, "Testing without a GPU", point 2).
//
// Include this header, then the .cu files (with -I<repo>/kernels for "hash_common.cuh"), then
// launch a kernel with cuda_host::launch(grid, block, schedule, [&] { kernel(args...); }).
//
// What it provides
//   __global__, __device__, __host__, __forceinline__, __launch_bounds__(...): annotations,
//       mapped to nothing / inline.
//   __shared__: `static thread_local`. Blocks run one after another on the calling OS thread,
//       and all threads of a block run on that OS thread as fibers, so a function-local static
//       is exactly one block's shared memory. (Dynamic `extern __shared__` is not supported.)
//   dim3, threadIdx, blockIdx, blockDim, gridDim: thread_local globals set by the launcher.
//   __syncthreads(): a barrier across the fibers of the block.
//   atomicMin(unsigned int*, unsigned int): CUDA's, returning the old value.
//
// How threads run
//   Each CUDA thread of a block is a ucontext fiber with its own stack. The launcher resumes
//   the fibers one at a time, in an order chosen by `schedule`; a fiber runs until it calls
//   __syncthreads() (it yields back to the launcher) or returns. When every fiber of the block
//   waits at the barrier, a new round starts. This is cooperative and deterministic, and
//   it is strict where it matters for correctness:
//   - a thread runs from one barrier to the next with no other thread interleaved, so a
//     missing __syncthreads() between a shared-memory write and another thread's read gives
//     wrong results instead of passing by luck (use several schedules to vary who goes first);
//   - a barrier that only some threads of a block reach (the others returned) is reported as
//     an error (CUDA leaves it undefined); the waiting fibers are abandoned.
//   Shared memory is filled with a garbage pattern before every block (a byte that changes
//   from block to block), as a GPU gives a block whatever the previous occupant left: a kernel
//   that reads shared memory it did not write sees the pattern, not zeros or the previous
//   block's values that might pass for right ones. A launch that cannot find the calling
//   thread's shared memory fails (NO_SHARED_MEMORY) instead of running unfilled.
//   One launch at a time per OS thread; launches do not nest.
//   Warp-level primitives (__shfl_*, __ballot_sync, warp-synchronous code) are NOT modelled:
//   kernels tested here must synchronise with __syncthreads() only.
//
// One library, one copy of the shim
//   Several libraries built from this header live in one process (one per tunable
//   combination). Everything declared here is hidden (#pragma GCC visibility): as default-
//   visibility `inline` variables the built-ins became process-wide unique symbols, so a
//   library loaded second ran on the first one's gridDim and blockIdx, and its shared-memory
//   fill landed in the first library's thread-local storage. An includer should hide the
//   kernels too (launch.cpp does), so that their __shared__ arrays are never interposed.
#pragma once

#include <link.h>
#include <pthread.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __shared__ static thread_local
#define __launch_bounds__(...)

// After the system headers (hiding their declarations would break them): see "One library,
// one copy of the shim" above.
#pragma GCC visibility push(hidden)

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};

inline thread_local dim3 threadIdx(0, 0, 0);
inline thread_local dim3 blockIdx(0, 0, 0);
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;

namespace cuda_host {

// Status codes returned by launch().
enum Status : int {
    OK = 0,
    DIVERGENT_BARRIER = 1,  // some threads of a block returned while others wait at a barrier
    BAD_LAUNCH = 2,         // an empty grid or block, or a block larger than MAX_THREADS
    OUT_OF_MEMORY = 3,      // fiber stacks could not be mapped
    NO_SHARED_MEMORY = 4,   // this library's thread-local storage (the __shared__ arrays) was
                            // not found on the calling thread, so it could not be filled
};

// Fiber schedules: the order in which the fibers of a block are resumed in each round.
enum Schedule : int {
    FORWARD = 0,   // thread 0, 1, 2, ...
    REVERSE = 1,   // the last thread first
    SHUFFLED = 2,  // a fresh pseudo-random order every round (deterministic per launch)
};

constexpr unsigned int MAX_THREADS = 1024;
constexpr std::size_t STACK_BYTES = 256 * 1024;  // per fiber; mapped lazily by the kernel

enum class FiberState { READY, AT_BARRIER, DONE };

struct Fiber {
    ucontext_t context;
    FiberState state;
};

struct Runtime {
    ucontext_t launcher;
    std::vector<Fiber> fibers;
    Fiber* current = nullptr;
    const std::function<void()>* body = nullptr;
    char* stacks = nullptr;  // MAX_THREADS stacks, each behind a PROT_NONE guard page
    std::size_t stride = 0;

    ~Runtime() {
        if (stacks != nullptr) munmap(stacks, stride * MAX_THREADS);
    }

    bool map_stacks() {
        if (stacks != nullptr) return true;
        const std::size_t page = (std::size_t)sysconf(_SC_PAGESIZE);
        stride = STACK_BYTES + page;
        void* memory = mmap(nullptr, stride * MAX_THREADS, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (memory == MAP_FAILED) return false;
        stacks = static_cast<char*>(memory);
        for (unsigned int t = 0; t < MAX_THREADS; ++t) {
            mprotect(stacks + t * stride, page, PROT_NONE);  // overflow faults, not corrupts
        }
        return true;
    }
};

// The runtime of the calling OS thread, kept out of this library's thread-local storage (a
// pthread key, freed when the thread ends): that storage holds the __shared__ arrays and is
// filled with garbage between blocks (scribble_shared_memory), and a thread_local of a class
// type would bring a compiler-made init guard into it that the filling would garble.
inline pthread_key_t runtime_key;
inline pthread_once_t runtime_key_once = PTHREAD_ONCE_INIT;

inline void delete_runtime(void* runtime) { delete static_cast<Runtime*>(runtime); }
inline void make_runtime_key() { pthread_key_create(&runtime_key, delete_runtime); }

inline Runtime& this_thread_runtime() {
    pthread_once(&runtime_key_once, make_runtime_key);
    Runtime* runtime = static_cast<Runtime*>(pthread_getspecific(runtime_key));
    if (runtime == nullptr) {
        runtime = new Runtime();
        pthread_setspecific(runtime_key, runtime);
    }
    return *runtime;
}

inline void fiber_entry() {
    Runtime& runtime = this_thread_runtime();
    (*runtime.body)();
    runtime.current->state = FiberState::DONE;
    // returning resumes uc_link, the launcher
}

// Yield to the launcher until every thread of the block has arrived.
inline void barrier() {
    Runtime& runtime = this_thread_runtime();
    Fiber* self = runtime.current;
    self->state = FiberState::AT_BARRIER;
    // Memory clobbers: shared memory written by other fibers must be re-read after the barrier
    // (swapcontext is an opaque call already; these make the intent explicit).
    asm volatile("" ::: "memory");
    swapcontext(&self->context, &runtime.launcher);
    asm volatile("" ::: "memory");
    // The launcher reset threadIdx to this fiber's index before resuming it.
}

// This library's thread-local storage on the calling thread: where the __shared__ arrays
// (`static thread_local`) live, beside the shim's own state above.
struct TlsSegment {
    char* data = nullptr;
    std::size_t size = 0;
};

struct TlsSearch {
    std::uintptr_t code;  // an address in this library's code: which loaded object is ours
    const char* anchor;   // &gridDim on the calling thread: must lie in the block found
    TlsSegment found;     // stays empty when the block is not found
};

// dl_iterate_phdr callback: this library is the object whose PT_LOAD segments hold `code`
// (found by its code, not by a thread-local address, which is only as good as the symbol
// binding behind it). Its dlpi_tls_data is the calling thread's block of its PT_TLS segment
// once this thread has allocated it -- launch() has, by writing gridDim -- and NULL before
// (glibc's dlinfo(RTLD_DI_TLS_DATA) gives the same pointer under the same condition). The
// anchor check turns any other answer into "not found", never into filling foreign memory.
inline int find_own_tls(struct dl_phdr_info* info, std::size_t, void* argument) {
    TlsSearch& search = *static_cast<TlsSearch*>(argument);
    bool ours = false;
    const ElfW(Phdr)* tls = nullptr;
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        const ElfW(Phdr)& header = info->dlpi_phdr[i];
        if (header.p_type == PT_LOAD) {
            const std::uintptr_t start = info->dlpi_addr + header.p_vaddr;
            ours = ours || (search.code >= start && search.code < start + header.p_memsz);
        } else if (header.p_type == PT_TLS) {
            tls = &header;
        }
    }
    if (!ours) return 0;  // another object: keep looking
    if (tls != nullptr && info->dlpi_tls_data != nullptr) {
        char* data = static_cast<char*>(info->dlpi_tls_data);
        if (search.anchor >= data && search.anchor + sizeof(dim3) <= data + tls->p_memsz) {
            search.found = TlsSegment{data, tls->p_memsz};
        }
    }
    return 1;  // this library: stop, found or not
}

// The calling thread's block of this library's thread-local storage; empty if not found.
inline TlsSegment own_shared_memory() {
    TlsSearch search{reinterpret_cast<std::uintptr_t>(&find_own_tls),
                     reinterpret_cast<const char*>(&gridDim), TlsSegment{}};
    dl_iterate_phdr(find_own_tls, &search);
    return search.found;
}

// Fill every __shared__ array with `pattern` bytes: the whole TLS segment of this library, which
// holds nothing else but the four dim3 of the CUDA built-ins (trivial, constant-initialised:
// no init guards), put back as they were.
inline void scribble_shared_memory(const TlsSegment& segment, unsigned char pattern) {
    const dim3 saved_grid = gridDim, saved_block = blockDim;
    std::memset(segment.data, pattern, segment.size);
    gridDim = saved_grid;
    blockDim = saved_block;
    // threadIdx and blockIdx are set by the launcher before they are read again
}

// Make `fiber` start fiber_entry on the given stack when it is first resumed. (A function of
// its own: g++ treats getcontext like setjmp, which would pessimise the caller.)
__attribute__((noinline)) inline void start_fiber(Fiber& fiber, char* stack) {
    getcontext(&fiber.context);
    fiber.context.uc_stack.ss_sp = stack;
    fiber.context.uc_stack.ss_size = STACK_BYTES;
    fiber.context.uc_link = &this_thread_runtime().launcher;
    makecontext(&fiber.context, fiber_entry, 0);
    fiber.state = FiberState::READY;
}

// A small xorshift generator for SHUFFLED schedules.
struct Xorshift {
    std::uint64_t s;
    std::uint64_t next() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    }
};

// Run `kernel` (a callable with no arguments that calls the __global__ function) for every
// thread of every block of the grid. Returns a Status.
inline int launch(dim3 grid, dim3 block, int schedule, const std::function<void()>& kernel) {
    const unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (threads == 0 || threads > MAX_THREADS || grid.x == 0 || grid.y == 0 || grid.z == 0) {
        return BAD_LAUNCH;
    }
    Runtime& rt = this_thread_runtime();
    if (!rt.map_stacks()) return OUT_OF_MEMORY;
    gridDim = grid;  // also allocates this thread's TLS block, which own_shared_memory needs
    blockDim = block;
    const TlsSegment shared = own_shared_memory();
    if (shared.data == nullptr) return NO_SHARED_MEMORY;  // never run a block unfilled
    const std::size_t page = rt.stride - STACK_BYTES;
    rt.fibers.resize(threads);
    rt.body = &kernel;
    std::vector<unsigned int> order(threads);
    Xorshift random{0x9E3779B97F4A7C15ULL};
    int status = OK;
    unsigned int block_number = 0;

    for (unsigned int bz = 0; bz < grid.z && status == OK; ++bz)
    for (unsigned int by = 0; by < grid.y && status == OK; ++by)
    for (unsigned int bx = 0; bx < grid.x && status == OK; ++bx) {
        const unsigned char pattern = (unsigned char)(0xA5u + 0x3Bu * block_number++);
        scribble_shared_memory(shared, pattern != 0 ? pattern : 0xA5);
        blockIdx = dim3(bx, by, bz);
        for (unsigned int t = 0; t < threads; ++t) {
            start_fiber(rt.fibers[t], rt.stacks + t * rt.stride + page);
        }
        for (;;) {
            for (unsigned int t = 0; t < threads; ++t) order[t] = t;
            if (schedule == REVERSE) {
                for (unsigned int t = 0; t < threads; ++t) order[t] = threads - 1 - t;
            } else if (schedule == SHUFFLED) {
                for (unsigned int t = threads - 1; t > 0; --t) {
                    const unsigned int u = (unsigned int)(random.next() % (t + 1));
                    const unsigned int swap = order[t];
                    order[t] = order[u];
                    order[u] = swap;
                }
            }
            for (unsigned int t : order) {
                Fiber& fiber = rt.fibers[t];
                if (fiber.state == FiberState::DONE) continue;
                threadIdx = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
                rt.current = &fiber;
                fiber.state = FiberState::READY;
                swapcontext(&rt.launcher, &fiber.context);
            }
            unsigned int done = 0;
            for (unsigned int t = 0; t < threads; ++t) done += rt.fibers[t].state == FiberState::DONE;
            if (done == threads) break;  // the block finished
            if (done != 0) {  // some returned, others wait at a barrier that can never open
                status = DIVERGENT_BARRIER;
                break;
            }
            // every fiber waits at the barrier: open it (the next round resumes them all)
        }
    }
    rt.current = nullptr;
    rt.body = nullptr;
    return status;
}

}  // namespace cuda_host

inline void __syncthreads() { cuda_host::barrier(); }

// CUDA's atomicMin on a 32-bit unsigned word: stores min(*address, value), returns the old
// value. The fibers of a launch never interleave between barriers, so a plain read-modify-write
// would already be atomic among them; the compare-and-swap loop keeps it atomic between OS
// threads too (the GPU backend's tests run two batches on two host threads).
inline unsigned int atomicMin(unsigned int* address, unsigned int value) {
    unsigned int old = __atomic_load_n(address, __ATOMIC_RELAXED);
    while (value < old &&
           !__atomic_compare_exchange_n(address, &old, value, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return old;
}

#pragma GCC visibility pop
