// cuda_cpu.h — CUDA C++ kernels of the scheme's passes run on the CPU, for the tests
// (tests/cuda_cpu.py builds them with the host's C++ compiler, with this header included
// first). It is an emulator of the few CUDA features those kernels use, not a GPU:
//
//   - a block's threads are fibers (ucontext) on one OS thread, switched only at
//     __syncthreads and at warp shuffles, in turn first to last, then last to first (so a
//     missing barrier shows in one of the orders); the blocks of a grid run one after
//     another, in order (x fastest). So `__shared__` is a `static`: one block at a time
//     owns it.
//   - __syncthreads waits for every thread of the block that has not returned; a warp
//     shuffle waits for the lanes its mask names, and fails if one of them has returned or
//     waits at another barrier (what a GPU would hang on, or leave undefined): the launch
//     reports it instead of hanging.
//   - atomics and fences are plain operations (nothing runs beside the running fiber).
//   - a fault (a read or write outside any buffer: tests/cuda_cpu.py places each buffer
//     against an unmapped page) or a launch longer than its time limit ends the launch with
//     a message naming the kernel, the block and the thread.
//
// What it cannot see: races between blocks (they never run at once), the GPU's memory
// model, and what NVRTC does differently from the host compiler (the build asks for no FMA
// contraction, and the kernels write their FMAs out). The GPU tests stay the judge.
#pragma once

#define SGEMM_CPU_EMULATOR 1

#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __grid_constant__
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }

namespace emu {

enum State { RUNNING, AT_BLOCK, AT_WARP, DONE };

struct Fiber {
    ucontext_t ctx;
    uint3 tid;
    int linear = 0;
    State state = DONE;
    unsigned mask = 0;  // the lanes a warp barrier waits for
    int line = 0;       // the source line of the __syncthreads it waits at
    std::vector<char> stack;
};

inline ucontext_t scheduler;
inline Fiber* cur = nullptr;
inline uint3 block_idx;
inline dim3 block_dim, grid_dim;
inline std::function<void()> body;
inline unsigned long long slots[32][32];  // a warp's shuffle values, by warp and lane
inline std::string failure;

// `n` bytes (rounded up to 16) that end where an unmapped page begins, after one before them.
inline void* alloc(size_t n) {
    const size_t page = sysconf(_SC_PAGESIZE), data = (n + 15) / 16 * 16 + 16 * (n == 0);
    const size_t span = (data + page - 1) / page * page;
    void* base = mmap(nullptr, span + 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return nullptr;
    char* first = static_cast<char*>(base) + page;
    if (mprotect(first, span, PROT_READ | PROT_WRITE)) return nullptr;
    return first + span - data;
}
inline void release(void* p, size_t n) {
    const size_t page = sysconf(_SC_PAGESIZE), data = (n + 15) / 16 * 16 + 16 * (n == 0);
    const size_t span = (data + page - 1) / page * page;
    munmap(static_cast<char*>(p) + data - span - page, span + 2 * page);
}

// the launch's dynamic shared memory (guarded as `alloc`'s buffers are)
inline unsigned char* dynamic = nullptr;
inline size_t dynamic_size = 0;

inline void yield(State s) {
    cur->state = s;
    swapcontext(&cur->ctx, &scheduler);
}

inline void fiber_main() {
    body();
    cur->state = DONE;  // (uc_link: back to the scheduler)
}

inline int lane() { return cur->linear % 32; }
inline int warp() { return cur->linear / 32; }

template <class T>
T shuffle(unsigned mask, T v, int src) {
    static_assert(sizeof(T) <= 8, "a shuffle of at most 8 bytes");
    std::memcpy(&slots[warp()][lane()], &v, sizeof(T));
    cur->mask = mask;
    yield(AT_WARP);
    T r;
    std::memcpy(&r, &slots[warp()][src], sizeof(T));
    cur->mask = mask;
    yield(AT_WARP);  // every lane has read before any writes again
    return r;
}

inline std::string where() {
    char s[160];
    std::snprintf(s, sizeof s, "block (%u, %u, %u), thread (%u, %u, %u)", block_idx.x,
                  block_idx.y, block_idx.z, cur ? cur->tid.x : 0u, cur ? cur->tid.y : 0u,
                  cur ? cur->tid.z : 0u);
    return s;
}

// One block: every fiber runs until it waits or returns; then a barrier that all of its
// threads have reached opens. Nothing to open with threads still waiting: a deadlock.
inline bool run_block(std::vector<Fiber>& fibers, int n) {
    for (int i = 0; i < n; ++i) {
        Fiber& f = fibers[i];
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack.data();
        f.ctx.uc_stack.ss_size = f.stack.size();
        f.ctx.uc_link = &scheduler;
        f.state = RUNNING;
        makecontext(&f.ctx, fiber_main, 0);
    }
    const int warps = (n + 31) / 32;
    for (int round = 0;; ++round) {
        // between two barriers the threads run one after another, first to last and then
        // last to first: a read of what another thread writes in the same phase (a missing
        // __syncthreads) sees it in one of the two orders and not in the other
        for (int j = 0; j < n; ++j) {
            const int i = round % 2 ? n - 1 - j : j;
            if (fibers[i].state == RUNNING) {
                cur = &fibers[i];
                swapcontext(&scheduler, &fibers[i].ctx);
            }
        }
        cur = nullptr;
        int live = 0, at_block = 0;
        for (int i = 0; i < n; ++i)
            live += fibers[i].state != DONE, at_block += fibers[i].state == AT_BLOCK;
        if (live == 0) return true;
        if (at_block == live) {
            // CUDA leaves a barrier undefined unless every thread of the block reaches it,
            // the same one: a thread that returned first, or threads at two __syncthreads,
            // fail here even where a GPU happens to let them through
            int line = -1, other = -1;
            for (int i = 0; i < n; ++i)
                if (fibers[i].state == AT_BLOCK) {
                    if (line < 0) line = fibers[i].line;
                    else if (fibers[i].line != line) other = fibers[i].line;
                }
            char s[200];
            if (other >= 0) {
                std::snprintf(s, sizeof s, "block (%u, %u, %u): threads wait at two "
                              "__syncthreads, lines %d and %d", block_idx.x, block_idx.y,
                              block_idx.z, line, other);
                failure = s;
                return false;
            }
            if (live < n) {
                std::snprintf(s, sizeof s, "block (%u, %u, %u): __syncthreads at line %d "
                              "after %d of its %d threads returned", block_idx.x, block_idx.y,
                              block_idx.z, line, n - live, n);
                failure = s;
                return false;
            }
            for (int i = 0; i < n; ++i) fibers[i].state = RUNNING;
            continue;
        }
        bool opened = false;
        for (int w = 0; w < warps; ++w) {
            unsigned waiting = 0, mask = 0, done = 0;
            for (int l = 0; l < 32 && w * 32 + l < n; ++l) {
                const Fiber& f = fibers[w * 32 + l];
                if (f.state == AT_WARP) waiting |= 1u << l, mask |= f.mask;
                if (f.state == DONE) done |= 1u << l;
            }
            if (waiting == 0) continue;
            if (mask & done) {
                char s[200];
                std::snprintf(s, sizeof s, "block (%u, %u, %u), warp %d: a shuffle names "
                              "lanes that have returned (mask %08x, returned %08x)",
                              block_idx.x, block_idx.y, block_idx.z, w, mask, done);
                failure = s;
                return false;
            }
            if ((mask & ~waiting) == 0) {
                for (int l = 0; l < 32 && w * 32 + l < n; ++l)
                    if (fibers[w * 32 + l].state == AT_WARP) fibers[w * 32 + l].state = RUNNING;
                opened = true;
            }
        }
        if (!opened) {
            char s[200];
            std::snprintf(s, sizeof s, "block (%u, %u, %u): a deadlock: %d threads wait at "
                          "__syncthreads, %d at shuffles whose lanes wait elsewhere",
                          block_idx.x, block_idx.y, block_idx.z, at_block, live - at_block);
            failure = s;
            return false;
        }
    }
}

inline sigjmp_buf escape;

inline void on_signal(int sig, siginfo_t* info, void*) {
    char s[240];
    if (sig == SIGALRM)
        std::snprintf(s, sizeof s, "the launch ran past its time limit at %s", where().c_str());
    else
        std::snprintf(s, sizeof s, "a fault (signal %d) at address %p, %s", sig, info->si_addr,
                      where().c_str());
    failure = s;
    siglongjmp(escape, 1);
}

// The grid, block by block. 0, or 1 with `failure` saying why.
inline int run_grid(const unsigned* grid, const unsigned* block, unsigned seconds) {
    const int n = static_cast<int>(block[0] * block[1] * block[2]);
    if (n < 1 || n > 1024) {
        failure = "a block of " + std::to_string(n) + " threads";
        return 1;
    }
    static std::vector<Fiber> fibers;
    if (fibers.size() < static_cast<size_t>(n)) fibers.resize(n);
    for (int i = 0; i < n; ++i) {
        fibers[i].stack.resize(1 << 18);
        fibers[i].linear = i;
        fibers[i].tid = {i % block[0], i / block[0] % block[1], i / (block[0] * block[1])};
    }
    block_dim = {block[0], block[1], block[2]};
    grid_dim = {grid[0], grid[1], grid[2]};
    failure.clear();
    static std::vector<char> alt(1 << 16);
    stack_t ss{}, old_ss{};
    ss.ss_sp = alt.data(), ss.ss_size = alt.size();
    sigaltstack(&ss, &old_ss);
    struct sigaction sa {}, old_segv{}, old_bus{}, old_alrm{};
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
    sigaction(SIGBUS, &sa, &old_bus);
    sigaction(SIGALRM, &sa, &old_alrm);
    int rc = 0;
    if (sigsetjmp(escape, 1) == 0) {
        alarm(seconds);
        for (unsigned z = 0; z < grid[2] && rc == 0; ++z)
            for (unsigned y = 0; y < grid[1] && rc == 0; ++y)
                for (unsigned x = 0; x < grid[0] && rc == 0; ++x) {
                    block_idx = {x, y, z};
                    // (what a block finds there: NaN, -1 and so on, not zeros)
                    std::memset(dynamic, 0xFF, dynamic_size);
                    if (!run_block(fibers, n)) rc = 1;
                }
    } else {
        rc = 1;
    }
    alarm(0);
    cur = nullptr;
    sigaction(SIGSEGV, &old_segv, nullptr);
    sigaction(SIGBUS, &old_bus, nullptr);
    sigaction(SIGALRM, &old_alrm, nullptr);
    sigaltstack(&old_ss, nullptr);
    return rc;
}

template <class... P, size_t... I>
void call(void (*f)(P...), void** args, std::index_sequence<I...>) {
    f(*static_cast<std::decay_t<P>*>(args[I])...);
}

// A kernel's launch as cuLaunchKernel takes it: a pointer to each argument's bytes; `sizes`
// their byte counts, checked against the kernel's parameters (a mismatch is a packing bug).
template <class... P>
int launch(void (*f)(P...), const unsigned* grid, const unsigned* block, unsigned smem,
           void** args, const unsigned* sizes, int count, unsigned seconds) {
    constexpr size_t want[] = {sizeof(std::decay_t<P>)..., 0};
    if (count != static_cast<int>(sizeof...(P))) {
        failure = std::to_string(count) + " arguments for " + std::to_string(sizeof...(P)) +
                  " parameters";
        return 1;
    }
    for (int i = 0; i < count; ++i)
        if (sizes[i] != want[i]) {
            failure = "argument " + std::to_string(i) + " has " + std::to_string(sizes[i]) +
                      " bytes; its parameter has " + std::to_string(want[i]);
            return 1;
        }
    if (dynamic) release(dynamic, dynamic_size);
    dynamic = static_cast<unsigned char*>(alloc(smem)), dynamic_size = smem;
    body = [&] { call(f, args, std::index_sequence_for<P...>{}); };
    return run_grid(grid, block, seconds);
}

}  // namespace emu

template <class T>
T* dynamic_smem() {
    return reinterpret_cast<T*>(emu::dynamic);
}

#define threadIdx (emu::cur->tid)
#define blockIdx (emu::block_idx)
#define blockDim (emu::block_dim)
#define gridDim (emu::grid_dim)

inline void emu_syncthreads(int line) {
    emu::cur->line = line;
    emu::yield(emu::AT_BLOCK);
}
#define __syncthreads() emu_syncthreads(__LINE__)
inline void __threadfence() {}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int o) {  // (whole warps, as the passes use it)
    return emu::shuffle(mask, v, emu::lane() ^ o);
}
template <class T>
T __ldcg(const T* p) { return *p; }

template <class T>
T atomicAdd(T* p, T v) {
    const T old = *p;
    *p = old + v;
    return old;
}

inline double __hiloint2double(int hi, int lo) {
    const unsigned long long bits = (static_cast<unsigned long long>(static_cast<unsigned>(hi))
                                     << 32) | static_cast<unsigned>(lo);
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
}
inline int __double2loint(double d) {
    unsigned long long bits;
    std::memcpy(&bits, &d, 8);
    return static_cast<int>(static_cast<unsigned>(bits));
}

// CUDA's min and max: overloads of both operands' common type (fmin, fmax for floating point)
template <class A, class B>
inline std::common_type_t<A, B> min(A a, B b) {
    using C = std::common_type_t<A, B>;
    if constexpr (std::is_floating_point_v<C>) return std::fmin(C(a), C(b));
    else return C(a) < C(b) ? C(a) : C(b);
}
template <class A, class B>
inline std::common_type_t<A, B> max(A a, B b) {
    using C = std::common_type_t<A, B>;
    if constexpr (std::is_floating_point_v<C>) return std::fmax(C(a), C(b));
    else return C(a) < C(b) ? C(b) : C(a);
}
