// cuda_cpu.h — CUDA C++ kernels of the scheme's passes run on the CPU, for the tests
// (tests/cuda_cpu.py builds them with the host's C++ compiler, with this header included
// first). It is an emulator of the few CUDA features those kernels use, not a GPU:
//
//   - a block's threads are fibers (ucontext) on one OS thread, switched only at
//     __syncthreads and at warp shuffles, in turn first to last, then last to first (so a
//     missing barrier shows in one of the orders), or with a seed in an order drawn afresh
//     each round (emu_set_order); the blocks of a grid run one after
//     another, in order (x fastest). So `__shared__` is a `static`: one block at a time
//     owns it.
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
enum State { RUNNING, AT_BLOCK, AT_WARP, AT_SPIN, AT_PAUSE, DONE };

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
};

inline ucontext_t scheduler;
inline Fiber* cur = nullptr;
inline uint3 block_idx;
inline dim3 block_dim, grid_dim;
inline std::function<void()> body;
inline unsigned long long slots[32][32];  // a warp's shuffle values, by warp and lane
inline std::string failure;
inline unsigned long long ticks = 0;  // every change another thread could wait for
inline unsigned long long order_seed = 0;  // 0: first to last, then last to first; else drawn
inline std::vector<std::function<void()>> copies;  // the copy engine's, issued this round
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

// the launch's dynamic shared memory (guarded as `alloc`'s buffers are)
inline unsigned char* dynamic = nullptr;
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
        f.open.clear(), f.groups.clear();
        makecontext(&f.ctx, fiber_main, 0);
    }
    start_block();
    const int warps = (n + 31) / 32;
    std::vector<int> order(n);
    for (int i = 0; i < n; ++i) order[i] = i;
    for (int round = 0;; ++round) {
        // between two barriers the threads run one after another, first to last and then
        // last to first: a read of what another thread writes in the same phase (a missing
        // __syncthreads) sees it in one of the two orders and not in the other. With a seed
        // (emu_set_order), in an order drawn afresh each round instead
        if (order_seed) {
            for (int i = n - 1; i > 0; --i) {
                order_seed = order_seed * 6364136223846793005ull + 1442695040888963407ull;
                std::swap(order[i], order[(order_seed >> 33) % (i + 1)]);
            }
        }
        const unsigned long long before = ticks;
        for (int j = 0; j < n; ++j) {
            const int i = order_seed ? order[j] : round % 2 ? n - 1 - j : j;
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
        int live = 0, at_block = 0, spinning = 0;
        for (int i = 0; i < n; ++i)
            spinning += fibers[i].state == AT_SPIN || fibers[i].state == AT_PAUSE;
        for (int i = 0; i < n; ++i)
            live += fibers[i].state != DONE, at_block += fibers[i].state == AT_BLOCK;
        if (live == 0) {
            finish_block();
            return failure.empty();
        }
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
        if (!opened && spinning && ticks != before) continue;
        if (!opened) {
            char s[240];
            std::snprintf(s, sizeof s, "block (%u, %u, %u): a deadlock: %d threads wait at "
                          "__syncthreads, %d at mbarriers or named barriers that nothing will "
                          "complete, %d at shuffles whose lanes wait elsewhere",
                          block_idx.x, block_idx.y, block_idx.z, at_block, spinning,
                          live - at_block - spinning);
            failure = s;
            return false;
        }
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

inline unsigned char* shared_at(unsigned addr, unsigned bytes) {
    if (addr < SHARED_BASE || addr - SHARED_BASE + bytes > dynamic_size) {
        char s[160];
        std::snprintf(s, sizeof s, "shared address %#x (%u bytes) outside the block's %zu "
                      "bytes of dynamic shared memory", addr, bytes, dynamic_size);
        fail(s);
    }
    return dynamic + (addr - SHARED_BASE);
}

// An mbarrier: the arrivals a phase waits for, those still missing, the copy engine's bytes
// still expected, and the phase's parity.
struct Mbar {
    int expected = 0, remaining = 0;
    long long tx = 0;
    unsigned phase = 0;
};
inline std::vector<std::pair<unsigned, Mbar>> mbars;  // this block's, by address

inline Mbar& mbar(unsigned addr) {
    for (auto& [a, m] : mbars)
        if (a == addr) return m;
    char s[120];
    std::snprintf(s, sizeof s, "the mbarrier at shared address %#x is used before its init",
                  addr);
    fail(s);
}

inline void mbar_complete(Mbar& m) {
    if (m.remaining == 0 && m.tx == 0) m.phase ^= 1u, m.remaining = m.expected;
}

// A named barrier (bar.sync / bar.arrive with an id and a thread count).
struct Named {
    int arrived = 0;
    unsigned long long generation = 0;
};
inline Named named[16];

// How many copies have landed in each 128-byte row of shared memory: a wgmma whose operands'
// rows changed between its issue and its retirement read a stage released too early.
inline std::vector<unsigned long long> landed;

inline void start_block() {
    mbars.clear();
    copies.clear();
    for (auto& b : named) b = Named{};
    landed.assign((SHARED_BASE + dynamic_size) / 128 + 1, 0);  // (by address / 128)
}

inline void finish_block() {
    for (auto& b : named)
        if (b.arrived) failure = "a named barrier was left with arrivals at the block's end";
}

// A stand-in tensor map (tests/cuda_cpu.py writes it in the map's 128 bytes).
struct FakeMap {
    long long base, rows, cols, ld, planes, plane_ld, box_rows, box_cols, swizzle, elem;
};

template <class Map>
void tma_box(unsigned dst, const Map& map, long long x, long long y, long long z, unsigned bar) {
    static_assert(sizeof(Map) >= sizeof(FakeMap), "a tensor map holds the stand-in");
    FakeMap m;
    std::memcpy(&m, &map, sizeof m);
    const long long inner = m.box_cols * m.elem, bytes = inner * m.box_rows;
    if (m.swizzle != 128 || inner != 128)
        fail("a tensor map other than 128-byte rows in the 128-byte swizzle (not emulated)");
    if (dst % 128) fail("a copy-engine box to shared memory not 128-byte aligned");
    shared_at(dst, static_cast<unsigned>(bytes));
    mbar(bar);  // (initialised now)
    // the box lands after this round, from what global memory holds then
    copies.push_back([=] {
        for (long long r = 0; r < m.box_rows; ++r)
            for (long long c = 0; c < inner; ++c) {
                const long long gr = y + r, gc = x * m.elem + c;
                unsigned char v = 0;
                if (gr >= 0 && gr < m.rows && gc >= 0 && gc < m.cols * m.elem && z >= 0 &&
                    z < m.planes)
                    v = reinterpret_cast<const unsigned char*>(m.base)[
                        z * m.plane_ld * m.elem + gr * m.ld * m.elem + gc];
                const unsigned at = dst + static_cast<unsigned>(r * 128 + c);
                *shared_at(at ^ (((at >> 7) & 7u) << 4), 1) = v;
            }
        for (long long r = 0; r < m.box_rows; ++r)
            ++landed[(dst + r * 128) / 128];
        Mbar& b = mbar(bar);
        b.tx -= bytes;
        mbar_complete(b);
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
        sum += landed[at / 128];
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
    if (c < emu::dynamic || c >= emu::dynamic + emu::dynamic_size)
        emu::fail("__cvta_generic_to_shared of an address outside dynamic shared memory");
    return static_cast<unsigned long long>(c - emu::dynamic) + emu::SHARED_BASE;
}

inline void mbar_init(unsigned bar, unsigned count) {
    if (bar % 8) emu::fail("an mbarrier not 8-byte aligned");
    emu::shared_at(bar, 8);
    for (auto& [a, m] : emu::mbars)
        if (a == bar) emu::fail("an mbarrier initialised twice");
    emu::Mbar m;
    m.expected = m.remaining = static_cast<int>(count);
    emu::mbars.emplace_back(bar, m);
    ++emu::ticks;
}
// An arrival sits out the next round, in which the other threads run and the copies they
// issue land: what it released (a stage of a ring) may be overwritten before this thread's
// next step, as on a GPU.
namespace emu {
inline void arrive(unsigned bar) {
    Mbar& m = mbar(bar);
    if (m.remaining == 0) fail("an mbarrier arrival past its count");
    --m.remaining;
    mbar_complete(m);
    ++ticks;
}
}  // namespace emu
inline void mbar_arrive(unsigned bar) {
    emu::arrive(bar);
    emu::yield(emu::AT_PAUSE);
}
// (the producer's arrival, which releases nothing: it goes straight on to its copies)
inline void mbar_expect_tx(unsigned bar, unsigned bytes) {
    emu::mbar(bar).tx += bytes;
    emu::arrive(bar);
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
    emu::Named& b = emu::named[id];
    if (++b.arrived == count) b.arrived = 0, ++b.generation;
    ++emu::ticks;
}
inline void named_bar_sync(int id, int count) {
    const unsigned long long g = emu::named[id].generation;
    named_bar_arrive(id, count);
    while (emu::named[id].generation == g) emu::spin();
}
