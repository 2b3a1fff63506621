// cuda_cpu.h — CUDA C++ kernels of the scheme's passes run on the CPU, for the tests
// (tests/cuda_cpu.py builds them with the host's C++ compiler, with this header included
// first). It is an emulator of the few CUDA features those kernels use, not a GPU:
//
//   - a block's threads are fibers (ucontext) on one OS thread, switched only at
//     __syncthreads and at warp shuffles, in turn first to last, then last to first (so a
//     missing barrier shows in one of the orders), or with a seed in an order drawn afresh
//     each round (emu_set_order); the blocks of a grid run one after
//     another, in order (x fastest), or last to first (emu_set_blocks_reversed). So
//     `__shared__` is a `static`: one block at a time owns it.
//   - __syncthreads waits for every thread of the block that has not returned; a warp
//     shuffle waits for the lanes its mask names, and fails if one of them has returned or
//     waits at another barrier (what a GPU would hang on, or leave undefined): the launch
//     reports it instead of hanging.
//   - atomics and fences are plain operations (nothing runs beside the running fiber).
//   - Hopper's pieces (rung 26): shared-memory addresses, mbarriers (a wait yields until the
//     phase completes), the copy engine (a tensor map's box, with the 128-byte swizzle and
//     zeros outside the matrix, lands after the round in which it was issued, then counts
//     its bytes on the barrier), wgmma with INT8 operands from shared-memory descriptors
//     (done when wgmma_wait retires its group, from what shared memory holds then),
//     setmaxnreg and fences as no-ops, and named barriers. A thread that returns with a
//     wgmma group in flight, a barrier used before its init, or a descriptor or map of a
//     kind not written here fails the launch.
//   - clusters (rung 26's CLUSTER 2): the blocks of a cluster run together, each with its
//     own dynamic shared memory, mbarriers and named barriers; barrier.cluster, arrivals on
//     a peer's mbarrier and multicast boxes. A copy or an arrival into a block whose threads
//     have all returned fails. With a seed, one block sits out half the rounds, so that the
//     blocks drift apart. (A kernel with `__shared__` variables runs in clusters of 1.)
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
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }

namespace emu {

// AT_SPIN: waits on a condition (retried every round); AT_PAUSE: sits out one round (after an
// mbarrier arrival)
enum State { RUNNING, AT_BLOCK, AT_WARP, AT_CLUSTER, AT_SPIN, AT_PAUSE, DONE };

// One wgmma of a thread: its accumulators (d, n of them) and the operands' descriptors.
struct WgOp {
    int* d;
    int n;
    unsigned long long a, b;
    int accumulate;
    unsigned long long stamp;  // the copies that had landed in its operands' rows at issue
};

struct Fiber {
    ucontext_t ctx;
    uint3 tid;
    int linear = 0;
    State state = DONE;
    unsigned mask = 0;  // the lanes a warp barrier waits for
    int line = 0;       // the source line of the __syncthreads it waits at
    std::vector<char> stack;
    std::vector<WgOp> open;                  // wgmmas since the last commit
    std::vector<std::vector<WgOp>> groups;  // committed, not yet retired
    int slot = 0;  // its block's place in the cluster
    uint3 bidx{};  // its block's blockIdx
};

inline ucontext_t scheduler;
inline Fiber* cur = nullptr;
inline uint3 block_idx;
inline dim3 block_dim, grid_dim;
inline std::function<void()> body;
constexpr int MAX_CLUSTER = 4;
inline int cluster_size = 1;  // blocks a cluster: they run together, each its own shared memory
inline unsigned long long slots[MAX_CLUSTER][32][32];  // shuffle values, by block, warp, lane
inline std::string failure;
inline unsigned long long ticks = 0;  // every change another thread could wait for
inline unsigned long long order_seed = 0;  // 0: first to last, then last to first; else drawn
inline bool blocks_reversed = false;  // a grid's blocks (clusters) last to first
inline std::vector<std::function<void()>> copies;  // the copy engine's, issued this round
inline Fiber* running = nullptr;  // the cluster's fibers, block after block
inline int block_threads = 0;
void start_block();                                // (the Hopper section's per-block state)
void finish_block();

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

// the launch's dynamic shared memory, a buffer for each block of a cluster (guarded as
// `alloc`'s buffers are)
inline unsigned char* dyn[MAX_CLUSTER] = {};
inline size_t dynamic_size = 0;

inline void yield(State s) {
    cur->state = s;
    if (s != AT_SPIN) ++ticks;  // (a pause is a change: the arrival before it)
    swapcontext(&cur->ctx, &scheduler);
}

inline void fiber_main() {
    body();
    ++ticks;
    if (!cur->open.empty() || !cur->groups.empty()) {
        char s[120];
        std::snprintf(s, sizeof s, "thread %d returned with wgmma groups in flight (no "
                      "wgmma_wait<0>)", cur->linear);
        failure = s;
    }
    cur->state = DONE;  // (uc_link: back to the scheduler)
}

inline int lane() { return cur->linear % 32; }
inline int warp() { return cur->linear / 32; }

template <class T>
T shuffle(unsigned mask, T v, int src) {
    static_assert(sizeof(T) <= 8, "a shuffle of at most 8 bytes");
    std::memcpy(&slots[cur->slot][warp()][lane()], &v, sizeof(T));
    cur->mask = mask;
    yield(AT_WARP);
    T r;
    std::memcpy(&r, &slots[cur->slot][warp()][src], sizeof(T));
    cur->mask = mask;
    yield(AT_WARP);  // every lane has read before any writes again
    return r;
}

inline std::string where() {
    char s[160];
    const uint3 b = cur ? cur->bidx : block_idx;
    std::snprintf(s, sizeof s, "block (%u, %u, %u), thread (%u, %u, %u)", b.x, b.y, b.z,
                  cur ? cur->tid.x : 0u, cur ? cur->tid.y : 0u, cur ? cur->tid.z : 0u);
    return s;
}

// One cluster of blocks (one block, with clusters of 1), from block_idx on along x: every
// fiber runs until it waits or returns; then a barrier that all of its threads have reached
// opens (__syncthreads: a block's; a warp's; barrier.cluster: the cluster's). Nothing to
// open with threads still waiting: a deadlock.
inline bool run_block(std::vector<Fiber>& fibers, int n) {
    const int cl = cluster_size, total = n * cl;
    for (int i = 0; i < total; ++i) {
        Fiber& f = fibers[i];
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack.data();
        f.ctx.uc_stack.ss_size = f.stack.size();
        f.ctx.uc_link = &scheduler;
        f.state = RUNNING;
        f.open.clear(), f.groups.clear();
        f.slot = i / n;
        f.bidx = {block_idx.x + static_cast<unsigned>(f.slot), block_idx.y, block_idx.z};
        makecontext(&f.ctx, fiber_main, 0);
    }
    running = fibers.data(), block_threads = n;
    start_block();
    const int warps = (n + 31) / 32;
    std::vector<int> order(total);
    for (int i = 0; i < total; ++i) order[i] = i;
    for (int round = 0;; ++round) {
        // between two barriers the threads run one after another, first to last and then
        // last to first: a read of what another thread writes in the same phase (a missing
        // __syncthreads) sees it in one of the two orders and not in the other. With a seed
        // (emu_set_order), in an order drawn afresh each round instead, and in a cluster
        // one block drawn to sit the round out half the time, so that the blocks drift apart
        int idle = -1;  // (the block that sits out)
        if (order_seed) {
            for (int i = total - 1; i > 0; --i) {
                order_seed = order_seed * 6364136223846793005ull + 1442695040888963407ull;
                std::swap(order[i], order[(order_seed >> 33) % (i + 1)]);
            }
            order_seed = order_seed * 6364136223846793005ull + 1442695040888963407ull;
            if (cl > 1 && (order_seed >> 40) % 2) idle = static_cast<int>((order_seed >> 42) % cl);
        }
        const unsigned long long before = ticks;
        for (int j = 0; j < total; ++j) {
            const int i = order_seed ? order[j] : round % 2 ? total - 1 - j : j;
            if (fibers[i].slot == idle) continue;
            if (fibers[i].state == AT_PAUSE) {
                fibers[i].state = AT_SPIN;
                ++ticks;
            } else if (fibers[i].state == RUNNING || fibers[i].state == AT_SPIN) {
                cur = &fibers[i];
                swapcontext(&scheduler, &fibers[i].ctx);
            }
        }
        cur = nullptr;
        if (!failure.empty()) return false;
        // the copies issued this round land now, and count their bytes on their barriers
        std::vector<std::function<void()>> landing;
        landing.swap(copies);
        for (auto& c : landing) c();
        int live = 0, at_block = 0, at_cluster = 0, spinning = 0;
        for (int i = 0; i < total; ++i) {
            const State st = fibers[i].state;
            live += st != DONE, at_block += st == AT_BLOCK, at_cluster += st == AT_CLUSTER;
            spinning += st == AT_SPIN || st == AT_PAUSE;
        }
        if (live == 0) {
            finish_block();
            return failure.empty();
        }
        bool opened = false;
        char s[240];
        if (at_cluster == live) {  // (every thread of the cluster that has not returned)
            for (int i = 0; i < total; ++i)
                if (fibers[i].state == AT_CLUSTER) fibers[i].state = RUNNING;
            continue;
        }
        for (int b = 0; b < cl; ++b) {
            Fiber* f = &fibers[b * n];
            const uint3 id = f->bidx;
            int live_b = 0, at_b = 0;
            for (int i = 0; i < n; ++i)
                live_b += f[i].state != DONE, at_b += f[i].state == AT_BLOCK;
            if (live_b > 0 && at_b == live_b) {
                // CUDA leaves a barrier undefined unless every thread of the block reaches
                // it, the same one: a thread that returned first, or threads at two
                // __syncthreads, fail here even where a GPU happens to let them through
                int line = -1, other = -1;
                for (int i = 0; i < n; ++i)
                    if (f[i].state == AT_BLOCK) {
                        if (line < 0) line = f[i].line;
                        else if (f[i].line != line) other = f[i].line;
                    }
                if (other >= 0) {
                    std::snprintf(s, sizeof s, "block (%u, %u, %u): threads wait at two "
                                  "__syncthreads, lines %d and %d", id.x, id.y, id.z, line,
                                  other);
                    failure = s;
                    return false;
                }
                if (live_b < n) {
                    std::snprintf(s, sizeof s, "block (%u, %u, %u): __syncthreads at line %d "
                                  "after %d of its %d threads returned", id.x, id.y, id.z, line,
                                  n - live_b, n);
                    failure = s;
                    return false;
                }
                for (int i = 0; i < n; ++i) f[i].state = RUNNING;
                opened = true;
                continue;
            }
            for (int w = 0; w < warps; ++w) {
                unsigned waiting = 0, mask = 0, done = 0;
                for (int l = 0; l < 32 && w * 32 + l < n; ++l) {
                    const Fiber& g = f[w * 32 + l];
                    if (g.state == AT_WARP) waiting |= 1u << l, mask |= g.mask;
                    if (g.state == DONE) done |= 1u << l;
                }
                if (waiting == 0) continue;
                if (mask & done) {
                    std::snprintf(s, sizeof s, "block (%u, %u, %u), warp %d: a shuffle names "
                                  "lanes that have returned (mask %08x, returned %08x)", id.x,
                                  id.y, id.z, w, mask, done);
                    failure = s;
                    return false;
                }
                if ((mask & ~waiting) == 0) {
                    for (int l = 0; l < 32 && w * 32 + l < n; ++l)
                        if (f[w * 32 + l].state == AT_WARP) f[w * 32 + l].state = RUNNING;
                    opened = true;
                }
            }
        }
        if (opened || (spinning && ticks != before) || idle >= 0) continue;
        std::snprintf(s, sizeof s, "block (%u, %u, %u): a deadlock: %d threads wait at "
                      "__syncthreads, %d at the cluster's barrier, %d at mbarriers or named "
                      "barriers that nothing will complete, %d at shuffles whose lanes wait "
                      "elsewhere", block_idx.x, block_idx.y, block_idx.z, at_block, at_cluster,
                      spinning, live - at_block - at_cluster - spinning);
        failure = s;
        return false;
    }
}

inline sigjmp_buf escape;

// Ends the launch: `what`, and where (a kernel broke a rule the emulator checks).
[[noreturn]] inline void fail(const std::string& what) {
    failure = what + " at " + where();
    siglongjmp(escape, 1);
}

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

// The grid, cluster by cluster (block by block, with clusters of 1). 0, or 1 with
// `failure` saying why.
inline int run_grid(const unsigned* grid, const unsigned* block, unsigned seconds) {
    const int n = static_cast<int>(block[0] * block[1] * block[2]), cl = cluster_size;
    if (n < 1 || n > 1024) {
        failure = "a block of " + std::to_string(n) + " threads";
        return 1;
    }
    if (cl < 1 || cl > MAX_CLUSTER || grid[0] % cl) {
        failure = "a cluster of " + std::to_string(cl) + " blocks for a grid of " +
                  std::to_string(grid[0]) + " along x";
        return 1;
    }
    static std::vector<Fiber> fibers;
    if (fibers.size() < static_cast<size_t>(n * cl)) fibers.resize(n * cl);
    for (int i = 0; i < n * cl; ++i) {
        const int t = i % n;  // (the thread's place in its block)
        fibers[i].stack.resize(1 << 18);
        fibers[i].linear = t;
        fibers[i].tid = {t % block[0], t / block[0] % block[1], t / (block[0] * block[1])};
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
                for (unsigned x = 0; x < grid[0] && rc == 0; x += cl) {
                    block_idx = blocks_reversed
                                    ? uint3{grid[0] - cl - x, grid[1] - 1 - y, grid[2] - 1 - z}
                                    : uint3{x, y, z};
                    // (what a block finds there: NaN, -1 and so on, not zeros)
                    for (int b = 0; b < cl; ++b) std::memset(dyn[b], 0xFF, dynamic_size);
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
// `cluster`: blocks a cluster (along x), which run together.
template <class... P>
int launch(void (*f)(P...), const unsigned* grid, const unsigned* block, unsigned smem,
           void** args, const unsigned* sizes, int count, unsigned seconds, int cluster) {
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
    for (auto*& d : dyn) {
        if (d) release(d, dynamic_size);
        d = nullptr;
    }
    cluster_size = cluster;
    for (int b = 0; b < cluster && b < MAX_CLUSTER; ++b)
        dyn[b] = static_cast<unsigned char*>(alloc(smem));
    dynamic_size = smem;
    body = [&] { call(f, args, std::index_sequence_for<P...>{}); };
    return run_grid(grid, block, seconds);
}

}  // namespace emu

template <class T>
T* dynamic_smem() {
    return reinterpret_cast<T*>(emu::dyn[emu::cur->slot]);
}

#define threadIdx (emu::cur->tid)
#define blockIdx (emu::cur->bidx)
#define blockDim (emu::block_dim)
#define gridDim (emu::grid_dim)

inline void emu_syncthreads(int line) {
    emu::cur->line = line;
    emu::yield(emu::AT_BLOCK);
}
#define __syncthreads() emu_syncthreads(__LINE__)
inline void __threadfence() {}
// (blocks of two launches never run at once here: a launch ends before the next begins)
inline void griddep_wait() {}
inline void griddep_launch_dependents() {}
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

inline unsigned __umulhi(unsigned a, unsigned b) {
    return static_cast<unsigned>((static_cast<unsigned long long>(a) * b) >> 32);
}
// byte n of the result: byte (s >> 4n) & 7 of the eight bytes y:x (x the low four)
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const unsigned long long both = (static_cast<unsigned long long>(y) << 32) | x;
    unsigned out = 0u;
    for (int n = 0; n < 4; ++n)
        out |= static_cast<unsigned>((both >> (8 * ((s >> (4 * n)) & 7u))) & 0xFFu) << (8 * n);
    return out;
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

// --- Hopper's pieces (hopper/wgmma.cuh and rung 26 leave theirs out under the emulator) ----
namespace emu {

// A shared-memory address is an offset into the launch's dynamic shared memory, from a base
// that is not 1024-aligned: a kernel must align its swizzled tiles itself, as on a GPU.
constexpr unsigned SHARED_BASE = 16;

// Whether every thread of block `slot` of the cluster has returned: its shared memory is
// gone, and a copy or an arrival from another block into it is an error.
inline bool exited(int slot) {
    for (int i = 0; i < block_threads; ++i)
        if (running[slot * block_threads + i].state != DONE) return false;
    return true;
}

// The bytes at shared address `addr` of block `slot` of the cluster.
inline unsigned char* shared_in(int slot, unsigned addr, unsigned bytes) {
    if (exited(slot)) fail("a write into the shared memory of a block that has returned");
    if (addr < SHARED_BASE || addr - SHARED_BASE + bytes > dynamic_size) {
        char s[160];
        std::snprintf(s, sizeof s, "shared address %#x (%u bytes) outside the block's %zu "
                      "bytes of dynamic shared memory", addr, bytes, dynamic_size);
        fail(s);
    }
    return dyn[slot] + (addr - SHARED_BASE);
}
inline unsigned char* shared_at(unsigned addr, unsigned bytes) {  // (the running thread's)
    return shared_in(cur->slot, addr, bytes);
}

// An mbarrier: the arrivals a phase waits for, those still missing, the copy engine's bytes
// still expected, and the phase's parity.
struct Mbar {
    int expected = 0, remaining = 0;
    long long tx = 0;
    unsigned phase = 0;
};
inline std::vector<std::pair<unsigned, Mbar>> mbars[MAX_CLUSTER];  // a block's, by address

inline Mbar& mbar_in(int slot, unsigned addr) {
    for (auto& [a, m] : mbars[slot])
        if (a == addr) return m;
    char s[120];
    std::snprintf(s, sizeof s, "the mbarrier at shared address %#x is used before its init",
                  addr);
    fail(s);
}

inline Mbar& mbar(unsigned addr) { return mbar_in(cur->slot, addr); }

inline void mbar_complete(Mbar& m) {
    if (m.remaining == 0 && m.tx == 0) m.phase ^= 1u, m.remaining = m.expected;
}

// A named barrier (bar.sync / bar.arrive with an id and a thread count).
struct Named {
    int arrived = 0;
    unsigned long long generation = 0;
};
inline Named named[MAX_CLUSTER][16];

// How many copies have landed in each 128-byte row of shared memory: a wgmma whose operands'
// rows changed between its issue and its retirement read a stage released too early.
inline std::vector<unsigned long long> landed[MAX_CLUSTER];

inline void start_block() {
    copies.clear();
    for (int b = 0; b < MAX_CLUSTER; ++b) {
        mbars[b].clear();
        for (auto& x : named[b]) x = Named{};
        landed[b].assign((SHARED_BASE + dynamic_size) / 128 + 1, 0);  // (by address / 128)
    }
}

inline void finish_block() {
    for (auto& block : named)
        for (auto& b : block)
            if (b.arrived) failure = "a named barrier was left with arrivals at the block's end";
}

// A stand-in tensor map (tests/cuda_cpu.py writes it in the map's 128 bytes).
struct FakeMap {
    long long base, rows, cols, ld, planes, plane_ld, box_rows, box_cols, swizzle, elem;
};

// The box at column x, row y of plane z to shared address `dst` of each block of the cluster
// in `blocks` (a mask; 0: the running thread's own), its bytes counted on each one's barrier
// at `bar`.
template <class Map>
void tma_box(unsigned dst, const Map& map, long long x, long long y, long long z, unsigned bar,
             unsigned blocks = 0) {
    static_assert(sizeof(Map) >= sizeof(FakeMap), "a tensor map holds the stand-in");
    if (blocks == 0) blocks = 1u << cur->slot;
    if (blocks >> cluster_size) fail("a multicast to a block outside the cluster");
    FakeMap m;
    std::memcpy(&m, &map, sizeof m);
    const long long inner = m.box_cols * m.elem, bytes = inner * m.box_rows;
    if (m.swizzle != 128 || inner != 128)
        fail("a tensor map other than 128-byte rows in the 128-byte swizzle (not emulated)");
    if (dst % 128) fail("a copy-engine box to shared memory not 128-byte aligned");
    for (int b = 0; b < cluster_size; ++b)
        if (blocks >> b & 1) {
            shared_in(b, dst, static_cast<unsigned>(bytes));
            mbar_in(b, bar);  // (initialised now)
        }
    // the box lands after this round, from what global memory holds then
    copies.push_back([=] {
        for (int b = 0; b < cluster_size; ++b) {
            if (!(blocks >> b & 1)) continue;
            for (long long r = 0; r < m.box_rows; ++r)
                for (long long c = 0; c < inner; ++c) {
                    const long long gr = y + r, gc = x * m.elem + c;
                    unsigned char v = 0;
                    if (gr >= 0 && gr < m.rows && gc >= 0 && gc < m.cols * m.elem && z >= 0 &&
                        z < m.planes)
                        v = reinterpret_cast<const unsigned char*>(m.base)[
                            z * m.plane_ld * m.elem + gr * m.ld * m.elem + gc];
                    const unsigned at = dst + static_cast<unsigned>(r * 128 + c);
                    *shared_in(b, at ^ (((at >> 7) & 7u) << 4), 1) = v;
                }
            for (long long r = 0; r < m.box_rows; ++r)
                ++landed[b][(dst + r * 128) / 128];
            Mbar& mb = mbar_in(b, bar);
            mb.tx -= bytes;
            mbar_complete(mb);
        }
        ++ticks;
    });
}

// A K-major operand's byte (row, k) through a wgmma descriptor (128-byte swizzle).
inline signed char operand(unsigned long long desc, int row, int k) {
    if ((desc >> 62) != 1 || ((desc >> 49) & 7))
        fail("a wgmma descriptor other than the 128-byte swizzle with base offset 0");
    const unsigned start = static_cast<unsigned>(desc & 0x3FFF) << 4;
    const unsigned stride = static_cast<unsigned>((desc >> 32) & 0x3FFF) << 4;
    const unsigned at = start + (row / 8) * stride + (row % 8) * 128 + k;
    return static_cast<signed char>(*shared_at(at ^ (((at >> 7) & 7u) << 4), 1));
}

// The copies landed so far in the `rows` rows of 128 bytes a descriptor reads.
inline unsigned long long stamp(unsigned long long desc, int rows) {
    const unsigned start = static_cast<unsigned>(desc & 0x3FFF) << 4;
    const unsigned stride = static_cast<unsigned>((desc >> 32) & 0x3FFF) << 4;
    unsigned long long sum = 0;
    for (int row = 0; row < rows; ++row) {
        const unsigned at = start + (row / 8) * stride + (row % 8) * 128;
        shared_at(at, 1);
        sum += landed[cur->slot][at / 128];
    }
    return sum;
}

// A thread's share of one m64nNk32 INT8 wgmma (PTX ISA: the accumulator fragment of a
// warpgroup's thread: d[4i + j] at row 16 warp + lane / 4 + 8 (j / 2), column 8i + 2 (lane %
// 4) + j % 2), from what shared memory holds now.
inline void retire(const WgOp& op) {
    if (stamp(op.a, 64) + stamp(op.b, 2 * op.n) != op.stamp)
        fail("a wgmma's operands were overwritten before its group retired (a stage "
             "released before wgmma_wait)");
    const int t = cur->linear % 128, w = t / 32, lane = t % 32;
    for (int i = 0; i < op.n / 4; ++i)
        for (int j = 0; j < 4; ++j) {
            const int row = 16 * w + lane / 4 + 8 * (j / 2), col = 8 * i + 2 * (lane % 4) + j % 2;
            unsigned sum = op.accumulate ? static_cast<unsigned>(op.d[4 * i + j]) : 0u;
            for (int k = 0; k < 32; ++k)
                sum += static_cast<unsigned>(operand(op.a, row, k) * operand(op.b, col, k));
            op.d[4 * i + j] = static_cast<int>(sum);
        }
}

inline void spin() { yield(AT_SPIN); }

}  // namespace emu

inline unsigned long long __cvta_generic_to_shared(const void* p) {
    const auto* c = static_cast<const unsigned char*>(p);
    const unsigned char* d = emu::dyn[emu::cur->slot];
    if (c < d || c >= d + emu::dynamic_size)
        emu::fail("__cvta_generic_to_shared of an address outside dynamic shared memory");
    return static_cast<unsigned long long>(c - d) + emu::SHARED_BASE;
}

inline void mbar_init(unsigned bar, unsigned count) {
    if (bar % 8) emu::fail("an mbarrier not 8-byte aligned");
    emu::shared_at(bar, 8);
    auto& mine = emu::mbars[emu::cur->slot];
    for (auto& [a, m] : mine)
        if (a == bar) emu::fail("an mbarrier initialised twice");
    emu::Mbar m;
    m.expected = m.remaining = static_cast<int>(count);
    mine.emplace_back(bar, m);
    ++emu::ticks;
}
// An arrival sits out the next round, in which the other threads run and the copies they
// issue land: what it released (a stage of a ring) may be overwritten before this thread's
// next step, as on a GPU.
namespace emu {
inline void arrive(unsigned bar, int slot) {
    if (exited(slot)) fail("an arrival on the barrier of a block that has returned");
    Mbar& m = mbar_in(slot, bar);
    if (m.remaining == 0) fail("an mbarrier arrival past its count");
    --m.remaining;
    mbar_complete(m);
    ++ticks;
}
}  // namespace emu
inline void mbar_arrive(unsigned bar) {
    emu::arrive(bar, emu::cur->slot);
    emu::yield(emu::AT_PAUSE);
}
// (the producer's arrival, which releases nothing: it goes straight on to its copies)
inline void mbar_expect_tx(unsigned bar, unsigned bytes) {
    emu::mbar(bar).tx += bytes;
    emu::arrive(bar, emu::cur->slot);
}
inline bool mbar_test(unsigned bar, unsigned parity) {
    return emu::mbar(bar).phase != (parity & 1u);
}
inline void mbar_wait(unsigned bar, unsigned parity) {
    while (!mbar_test(bar, parity)) emu::spin();
}
inline void mbar_init_fence() {}
template <int R>
void setmaxnreg_dec() {}
template <int R>
void setmaxnreg_inc() {}

template <class Map>
void tma_load(unsigned dst, const Map& map, int x, int y, unsigned bar) {
    emu::tma_box(dst, map, x, y, 0, bar);
}
template <class Map>
void tma_load3(unsigned dst, const Map& map, int x, int y, int z, unsigned bar) {
    emu::tma_box(dst, map, x, y, z, bar);
}
template <class Map>
void tma_prefetch(const Map&) {}

inline void wgmma_fence() {}
inline void wgmma_commit() {
    emu::cur->groups.push_back(std::move(emu::cur->open));
    emu::cur->open.clear();
}
// Retires every committed group but the newest N, oldest first.
template <int N>
void wgmma_wait() {
    auto& g = emu::cur->groups;
    while (g.size() > static_cast<size_t>(N)) {
        for (const auto& op : g.front()) emu::retire(op);
        g.erase(g.begin());
    }
}
template <int R>
void pin(float (&)[R]) {}
template <int R>
void pin(int (&)[R]) {}

// rung 26's d (+)= A (64 x 32 bytes) * B (32 x 2R bytes), INT8 into INT32
template <int R>
void wgmma_s8(int (&d)[R], unsigned long long a, unsigned long long b, int accumulate) {
    emu::cur->open.push_back({d, R, a, b, accumulate, emu::stamp(a, 64) + emu::stamp(b, 2 * R)});
}

// bar.sync id, count: waits until `count` threads have arrived at barrier `id` (with
// bar.arrive's); bar.arrive: arrives and goes on.
inline void named_bar_arrive(int id, int count) {
    if (id < 1 || id > 15 || count < 32 || count % 32 || count > 1024)
        emu::fail("a named barrier's id is not 1 to 15, or its count not a multiple of 32");
    emu::Named& b = emu::named[emu::cur->slot][id];
    if (++b.arrived == count) b.arrived = 0, ++b.generation;
    ++emu::ticks;
}
inline void named_bar_sync(int id, int count) {
    const unsigned long long g = emu::named[emu::cur->slot][id].generation;
    named_bar_arrive(id, count);
    while (emu::named[emu::cur->slot][id].generation == g) emu::spin();
}

// -- clusters (rung 26's CLUSTER 2) --
#define __cluster_dims__(...)
inline unsigned cluster_rank() { return static_cast<unsigned>(emu::cur->slot); }
// barrier.cluster: every thread of the cluster's blocks arrives, then all go on
inline void cluster_sync() { emu::yield(emu::AT_CLUSTER); }
// One arrival on the barrier at the same place in block `rank` of the cluster (a release:
// the arriving thread sits out a round, as mbar_arrive's)
inline void mbar_arrive_remote(unsigned bar, unsigned rank) {
    if (rank >= static_cast<unsigned>(emu::cluster_size))
        emu::fail("an arrival on a block outside the cluster");
    emu::arrive(bar, static_cast<int>(rank));
    emu::yield(emu::AT_PAUSE);
}
// the box to `dst` in every block of the cluster in `mask`, each one's barrier at `bar`
// counting its bytes
template <class Map>
void tma_load3_multicast(unsigned dst, const Map& map, int x, int y, int z, unsigned bar,
                         unsigned short mask) {
    if (mask == 0) emu::fail("a multicast to no block");
    emu::tma_box(dst, map, x, y, z, bar, mask);
}
// __syncwarp: the lanes of `mask` wait for each other (a shuffle without values)
inline void __syncwarp(unsigned mask = 0xFFFFFFFFu) {
    emu::cur->mask = mask;
    emu::yield(emu::AT_WARP);
}
