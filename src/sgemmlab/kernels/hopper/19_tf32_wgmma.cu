// Rung 19 — TF32 on the tensor cores: TMA, an mbarrier ring, warp specialization, wgmma.
//   NOT FP32: wgmma's tf32 drops the low 13 bits of every input (PTX ISA, wgmma.mma_async).
//   SPLIT3=1 is 3xTF32, meant to be as accurate as FP32.
//
// What changed from rung 13: the tensor cores multiply. The copy engine brings A and B into
// shared memory (cp.async.bulk.tensor, tensor maps made on the host, 128-byte swizzle, zeros
// past every edge: no bounds check in the k loop) through a ring of STAGES k-tiles of BK = 32
// floats (one swizzle row). mbarriers guard it: "full" completes when a tile's bytes have
// landed (arrive.expect_tx), "empty" when both consumers are done with it. Warp 0 produces;
// two consumer warpgroups of 64 rows issue wgmma.m64nBNk8 (FP32 accumulators in registers),
// one k-tile in flight while the next is issued; setmaxnreg gives them the producer's
// registers. Persistent grid; tiles walked GROUP_M row-tiles at a time (L2 reuse).
// Operands: wgmma's tf32 reads only K-major operands, so A is M x K row-major and B comes as
// B^T, N x K row-major (B column-major). The entry takes three tensor maps by value
// (__grid_constant__) where the rung contract (common.cuh) has the A and B pointers.
// SPLIT3=1: x = big + small, big = rna(x), small = rna(x - big). A is split in registers
// (wgmma takes A from registers); B_big, B_small come from a pre-pass (SPLIT_PASS=1) writing
// two N x K arrays: 12 bytes moved per element of B. Per k8 small_a*big_b, big_a*small_b,
// then big_a*big_b (ACC2=1: the small products in their own accumulator, added at the end).
//
// The bill (per SM at the tensor peak, 1024 TF32 FMA/clk), BM=128 BN=256: 48 KB of A and B
// per k-tile from L2 (42.7 FLOP/B, as rung 13's tile); wgmma reads 0.078 B of shared memory
// per FMA (each warpgroup reads all of B), TMA writes 0.047: 128 B/clk, all the SM has.
// 3xTF32, BN=128: 0.073 + 0.031 B per tensor FMA; per k-tile a thread also does 16 LDS and
// 32 roundings. Registers (tests/test_hopper_compile.py): 168 at entry, 40 / 232 after
// setmaxnreg; no spills.
//
// Prediction (H200, L2 flushed): TF32 ~270 TFLOP/s at 4096^3, ~300 at 8192^3 (75 % of
// cuBLAS TF32: near the shared-memory limit above); 3xTF32 ~120 (2.3x cuBLAS SGEMM; its
// ceiling is 495 / 3 = 165), with an error within 2x of cuBLAS SGEMM's.
// <measured>
// not measured yet: tools/hopper_probe.py
// </measured>
#include "async_copy.cuh"
#include "common.cuh"

#ifndef BN
#define BN 256
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef GROUP_M
#define GROUP_M 8  // row-tiles walked together by consecutive tile numbers (L2 reuse)
#endif
#ifndef SPLIT3
#define SPLIT3 0  // 1: 3xTF32
#endif
#ifndef ACC2
#define ACC2 0  // 1 (with SPLIT3): the small products in a second accumulator
#endif
#ifndef SPLIT_PASS
#define SPLIT_PASS 0  // 1: compile the B_big / B_small pre-pass instead of the GEMM
#endif
#ifndef PROXY_FENCE
#define PROXY_FENCE 1  // SPLIT3: fence this thread's reads of a stage before releasing it
#endif
#ifndef WATCHDOG
#define WATCHDOG 0  // 1: a barrier wait that lasts a second ends the launch (see watchdog)
#endif

constexpr int BM = 128;        // two consumer warpgroups of 64 rows
constexpr int BK = 32;         // floats per k-tile: 128 bytes, one row of the 128-byte swizzle
constexpr int CONSUMERS = 2;   // consumer warpgroups; warpgroup 0 is the producer
constexpr int A_BYTES = BM * BK * 4, B_BYTES = BN * BK * 4;
constexpr int STAGE_BYTES = A_BYTES + B_BYTES * (SPLIT3 ? 2 : 1);  // what one "full" awaits
// tiles, then a full and an empty barrier per stage, plus slack to align the tiles to 1024
constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 2 * 8 * STAGES + 1024;

static_assert(BN == 128 || BN == 256, "BN is 128 or 256 (one wgmma m64nBNk8 per k8)");
static_assert(STAGES >= 2 && STAGES <= 8, "2 to 8 stages");
static_assert(GROUP_M >= 1, "GROUP_M >= 1");
static_assert(SPLIT3 == 0 || SPLIT3 == 1, "SPLIT3 is 0 or 1");
static_assert(PROXY_FENCE == 0 || PROXY_FENCE == 1, "PROXY_FENCE is 0 or 1");
static_assert(ACC2 == 0 || (SPLIT3 == 1 && BN == 128),
              "ACC2 needs SPLIT3 and BN = 128 (two accumulators of BN / 2 registers)");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory per block <= 227 KB");
#ifdef SMEM_EXPECT  // the host's formula for the launch's dynamic shared memory (hopper_probe)
static_assert(SMEM_BYTES == SMEM_EXPECT, "the host's shared-memory size matches the kernel's");
#endif

// A tensor map (the driver's CUtensorMap: 128 opaque bytes, 64-byte aligned).
struct __align__(64) TensorMap {
    unsigned long long opaque[16];
};

// -- mbarrier (PTX ISA "Parallel synchronization: mbarrier") ---------------------------------
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// One arrival that also tells the barrier to expect `bytes` more from the copy engine.
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                 "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// True once the phase of parity `parity` has completed. A barrier starts in phase 0, and
// parity 1 then names the phase before it, complete: the producer's first pass over "empty"
// waits for nothing.
__device__ __forceinline__ bool mbar_test(unsigned bar, unsigned parity) {
    unsigned done;
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    return done != 0;
}

#if WATCHDOG
__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
    return t;
}

// The first barrier wait of a launch that gave up (WATCHDOG_NS without the phase completing):
// [0] 1 once written, [1] block, [2] thread, [3] barrier (s: full[s], STAGES + s: empty[s]),
// [4] the parity awaited, [5] tile, [6] k-tile, [7] the barrier's 64 bits (opaque state).
// The waiting thread then leaves the kernel, and so, one wait later, does every thread
// waiting on it: the launch ends (wrong) instead of hanging, and the host reads this
// (cuModuleGetGlobal "watchdog") and zeroes it for the next launch.
extern "C" {
__device__ unsigned long long watchdog[8];
}
#ifndef WATCHDOG_NS
#define WATCHDOG_NS 1000000000ull  // one second: a healthy wait takes microseconds
#endif
#endif

// Wait for the phase of parity `parity` of barrier `bar` (which is barrier number `which`,
// working on tile t, k-tile kt: what the watchdog reports). False: the watchdog gave up.
__device__ __forceinline__ bool mbar_wait(unsigned bar, unsigned parity, int which, int t,
                                          int kt) {
#if WATCHDOG
    if (mbar_test(bar, parity)) return true;
    const unsigned long long start = global_ns();
    while (!mbar_test(bar, parity)) {
        if (global_ns() - start > WATCHDOG_NS) {
            if (atomicCAS(&watchdog[0], 0ull, 1ull) == 0ull) {
                unsigned long long state;
                asm volatile("ld.shared.b64 %0, [%1];\n" : "=l"(state) : "r"(bar));
                watchdog[1] = blockIdx.x;
                watchdog[2] = threadIdx.x;
                watchdog[3] = which;
                watchdog[4] = parity;
                watchdog[5] = t;
                watchdog[6] = kt;
                watchdog[7] = state;
                __threadfence_system();
            }
            return false;
        }
    }
#else
    (void)which, (void)t, (void)kt;
    while (!mbar_test(bar, parity)) {
    }
#endif
    return true;
}

// -- the copy engine -------------------------------------------------------------------------
// The box at column x (k), row y of the map's matrix into shared memory at `dst`; its bytes
// count against barrier `bar`. Rows and columns outside the matrix arrive as zeros.
__device__ __forceinline__ void tma_load(unsigned dst, const TensorMap& map, int x, int y,
                                         unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(&map)), "r"(x), "r"(y), "r"(bar)
        : "memory");
}

__device__ __forceinline__ void tma_prefetch(const TensorMap& map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(&map))
                 : "memory");
}

// -- wgmma (PTX ISA "Asynchronous warpgroup level matrix multiply-accumulate") -----------
// Descriptor of a K-major tile in 128-byte swizzle: rows of 128 bytes, groups of 8 rows 1024
// bytes apart (the stride byte offset); the leading byte offset is unused for swizzled
// K-major layouts (encoded 1). Tiles start on 1024-byte boundaries, so the base offset is 0;
// the next k8 of a row is the same descriptor 32 bytes on (the swizzle is a function of the
// address, as the copy engine wrote it).
__device__ __forceinline__ unsigned long long smem_desc(unsigned addr) {
    return static_cast<unsigned long long>((addr & 0x3FFFF) >> 4) | (1ull << 16) |
           (static_cast<unsigned long long>(1024 >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// An empty asm that "changes" every accumulator: ordinary reads and writes of `d` stay on
// their side of the (volatile) wgmma fence and wait around it.
template <int R>
__device__ __forceinline__ void pin(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#define ACC8(d, i)                                                                         \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
        "+f"(d[i + 6]), "+f"(d[i + 7])
#define ACC64(d, i)                                                                        \
    ACC8(d, i), ACC8(d, i + 8), ACC8(d, i + 16), ACC8(d, i + 24), ACC8(d, i + 32),            \
        ACC8(d, i + 40), ACC8(d, i + 48), ACC8(d, i + 56)
#define REGS64                                                                             \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "    \
    "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "    \
    "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, "    \
    "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define REGS128_HI                                                                         \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, "    \
    "%81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, "    \
    "%98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "       \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, "     \
    "%126, %127"

// The accumulators d[BN / 2] of one thread, and the operands that follow them.
#if BN == 128
#define WG_SHAPE "m64n128k8"
#define WG_D REGS64
#define WG_ACC(d) ACC64(d, 0)
#define WG_SS "%64, %65, p, 1, 1;\n"  // a-desc, b-desc, scale-d (from %66), scale-a, scale-b
#define WG_SS_SCALE "%66"
#define WG_RS "{%64, %65, %66, %67}, %68, p, 1, 1;\n"  // a registers, b-desc, ...
#define WG_RS_SCALE "%69"
#else
#define WG_SHAPE "m64n256k8"
#define WG_D REGS64 ", " REGS128_HI
#define WG_ACC(d) ACC64(d, 0), ACC64(d, 64)
#define WG_SS "%128, %129, p, 1, 1;\n"
#define WG_SS_SCALE "%130"
#define WG_RS "{%128, %129, %130, %131}, %132, p, 1, 1;\n"
#define WG_RS_SCALE "%133"
#endif

// d (+)= A (64 x 8, shared, descriptor) * B (8 x BN, shared); accumulate = 0 overwrites d.
__device__ __forceinline__ void wgmma_ss(float (&d)[BN / 2], unsigned long long a,
                                         unsigned long long b, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " WG_SS_SCALE ", 0;\n"
                 "wgmma.mma_async.sync.aligned." WG_SHAPE ".f32.tf32.tf32 {" WG_D "}, " WG_SS
                 "}\n"
                 : WG_ACC(d)
                 : "l"(a), "l"(b), "r"(accumulate));
}

// d (+)= A (64 x 8, registers: a[4] of each thread) * B (8 x BN, shared).
__device__ __forceinline__ void wgmma_rs(float (&d)[BN / 2], const unsigned (&a)[4],
                                         unsigned long long b, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " WG_RS_SCALE ", 0;\n"
                 "wgmma.mma_async.sync.aligned." WG_SHAPE ".f32.tf32.tf32 {" WG_D "}, " WG_RS
                 "}\n"
                 : WG_ACC(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}

// x rounded to the nearest TF32 (ties away from zero), as a 32-bit pattern with 13 zero bits.
__device__ __forceinline__ unsigned tf32_rna(float x) {
    unsigned y;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(y) : "f"(x));
    return y;
}

#if SPLIT_PASS
// -- the 3xTF32 pre-pass: B^T (rows x cols, row-major, ld) -> big, small (ld_out) ----------
SGEMM_KERNEL split_tf32(const float* __restrict__ src, int ld, int rows, int cols,
                        float* __restrict__ big, float* __restrict__ small, int ld_out) {
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* s = row_ptr(src, r, ld);
        float* b = row_ptr(big, r, ld_out);
        float* t = row_ptr(small, r, ld_out);
        for (int c = threadIdx.x; c < cols; c += blockDim.x) {
            const float x = s[c];
            const float hi = __uint_as_float(tf32_rna(x));
            b[c] = hi;
            t[c] = __uint_as_float(tf32_rna(x - hi));  // x - hi is exact in FP32
        }
    }
}
#else
// -- the GEMM --------------------------------------------------------------------------------
// Tile number t -> (row-tile tm, column-tile tn): GROUP_M row-tiles at a time, down the
// column of tiles first, so that the blocks running together share their A and B panels.
__device__ __forceinline__ void tile_of(int t, int tiles_m, int tiles_n, int& tm, int& tn) {
    const int span = GROUP_M * tiles_n;
    const int first = t / span * GROUP_M;
    const int rows = min(tiles_m - first, GROUP_M);
    const int in = t - t / span * span;
    tm = first + in % rows;
    tn = in / rows;
}

// Two neighbouring outputs (row, col), (row, col + 1): one 8-byte store when both lie inside
// and C allows it.
__device__ __forceinline__ void store2(float* C, int ldc, int row, int col, int M, int N,
                                       float v0, float v1, float alpha, float beta, bool vec2) {
    if (row >= M) return;
    float* c = row_ptr(C, row, ldc) + col;
    if (vec2 && col + 1 < N) {
        float2 out = make_float2(alpha * v0, alpha * v1);
        if (beta != 0.0f) {
            const float2 old = *reinterpret_cast<const float2*>(c);
            out.x += beta * old.x;
            out.y += beta * old.y;
        }
        *reinterpret_cast<float2*>(c) = out;
        return;
    }
    if (col < N) *c = epilogue(v0, alpha, beta, c);
    if (col + 1 < N) c[1] = epilogue(v1, alpha, beta, c + 1);
}

// Element (row, k) of a tile of 128-byte rows as the 128-byte swizzle placed it: the 16-byte
// chunk k / 4 of a row moves to chunk (k / 4) ^ (row % 8).
__device__ __forceinline__ unsigned swizzled(int row, int k) {
    return row * 128 + ((((k >> 2) ^ row) & 7) << 4) + (k & 3) * 4;
}

__device__ __forceinline__ float lds(unsigned addr) {
    float x;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(x) : "r"(addr) : "memory");
    return x;
}

constexpr int THREADS = 128 * (1 + CONSUMERS);

// tma_b is B^T (B_big with SPLIT3); tma_b_small is read only with SPLIT3 (pass any map).
SGEMM_KERNEL __launch_bounds__(THREADS, 1)
sgemm(const __grid_constant__ TensorMap tma_a, const __grid_constant__ TensorMap tma_b,
      const __grid_constant__ TensorMap tma_b_small, int M, int N, int K, float alpha,
      float beta, float* __restrict__ C, int ldc) {
    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (smem_addr(smem_raw) + 1023u) & ~1023u;  // the swizzle's period
    const unsigned a_tiles = base, b_tiles = base + STAGES * A_BYTES;
    const unsigned b2_tiles = b_tiles + STAGES * B_BYTES;  // SPLIT3: B_small
    const unsigned bars = base + STAGES * STAGE_BYTES;
    auto full = [&](int s) { return bars + 8 * s; };
    auto empty = [&](int s) { return bars + 8 * (STAGES + s); };

    const int tiles_m = ceil_div(M, BM), tiles_n = ceil_div(N, BN);
    const int tiles = tiles_m * tiles_n, ktiles = ceil_div(K, BK);

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full(s), 1);                // the producer's arrive.expect_tx
            mbar_init(empty(s), CONSUMERS * 128);  // every consumer thread
        }
        // make the initialized barriers visible to the copy engine (the async proxy)
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        tma_prefetch(tma_a);
        tma_prefetch(tma_b);
        if (SPLIT3) tma_prefetch(tma_b_small);
    }
    __syncthreads();

    if (threadIdx.x < 128) {
        // -- producer: one thread issues every copy ------------------------------------------
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (threadIdx.x != 0) return;
        int stage = 0;
        unsigned phase = 0;
        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            int tm, tn;
            tile_of(t, tiles_m, tiles_n, tm, tn);
            for (int kt = 0; kt < ktiles; ++kt) {
                if (!mbar_wait(empty(stage), phase ^ 1, STAGES + stage, t, kt)) return;
                mbar_expect_tx(full(stage), STAGE_BYTES);  // whole boxes, zeros included
                tma_load(a_tiles + stage * A_BYTES, tma_a, kt * BK, tm * BM, full(stage));
                tma_load(b_tiles + stage * B_BYTES, tma_b, kt * BK, tn * BN, full(stage));
                if (SPLIT3)
                    tma_load(b2_tiles + stage * B_BYTES, tma_b_small, kt * BK, tn * BN,
                             full(stage));
                if (++stage == STAGES) stage = 0, phase ^= 1;
            }
        }
    } else {
        // -- consumers: warpgroup cw computes rows 64 cw .. 64 cw + 63 of each tile -----------
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
        const int ct = threadIdx.x - 128, cw = ct / 128;
        const int warp = ct % 128 / 32, lane = ct % 32;
        const bool vec2 = ldc % 2 == 0 && reinterpret_cast<unsigned long long>(C) % 8 == 0;
        float acc[BN / 2];
#if ACC2
        float acc_small[BN / 2];
#endif
        int stage = 0;
        unsigned phase = 0;
#if !SPLIT3
        int prev = 0;  // the stage whose products are still in flight
#endif
        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            int tm, tn;
            tile_of(t, tiles_m, tiles_n, tm, tn);
            for (int kt = 0; kt < ktiles; ++kt) {
                if (!mbar_wait(full(stage), phase, stage, t, kt)) {
                    wgmma_wait<0>();  // leave nothing in flight
                    return;
                }
                const unsigned a = a_tiles + stage * A_BYTES + cw * 64 * 128;
                const unsigned b = b_tiles + stage * B_BYTES;
#if SPLIT3
                // this thread's A fragments (PTX ISA: wgmma .m64nNk8 A in registers): a0 at
                // row lane / 4, k lane % 4 of its warp's 16 rows; a1 8 rows down; a2, a3 k + 4
                unsigned hi[BK / 8][4], lo[BK / 8][4];
                const int row = warp * 16 + lane / 4;
#pragma unroll
                for (int kk = 0; kk < BK / 8; ++kk)
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        const float x = lds(a + swizzled(row + (j & 1) * 8,
                                                         kk * 8 + lane % 4 + (j >> 1) * 4));
                        hi[kk][j] = tf32_rna(x);
                        lo[kk][j] = tf32_rna(x - __uint_as_float(hi[kk][j]));
                    }
                const unsigned b2 = b2_tiles + stage * B_BYTES;
                pin(acc);
#if ACC2
                pin(acc_small);
#endif
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < BK / 8; ++kk) {
                    const int more = kt > 0 || kk > 0;
#if ACC2
                    wgmma_rs(acc_small, lo[kk], smem_desc(b + 32 * kk), more);
                    wgmma_rs(acc_small, hi[kk], smem_desc(b2 + 32 * kk), 1);
#else
                    wgmma_rs(acc, lo[kk], smem_desc(b + 32 * kk), more);
                    wgmma_rs(acc, hi[kk], smem_desc(b2 + 32 * kk), 1);
#endif
                    wgmma_rs(acc, hi[kk], smem_desc(b + 32 * kk), ACC2 ? more : 1);
                }
                wgmma_commit();
                // the A registers are rewritten next k-tile: nothing may stay in flight
                wgmma_wait<0>();
                pin(acc);
#if ACC2
                pin(acc_small);
#endif
                // this thread's generic reads of the stage before the copy engine rewrites it
                if (PROXY_FENCE) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
                mbar_arrive(empty(stage));
#else
                pin(acc);
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < BK / 8; ++kk)
                    wgmma_ss(acc, smem_desc(a + 32 * kk), smem_desc(b + 32 * kk),
                             kt > 0 || kk > 0);
                wgmma_commit();
                // keep this k-tile in flight; the one before it is done: release its stage
                wgmma_wait<1>();
                pin(acc);
                if (kt > 0) mbar_arrive(empty(prev));
                prev = stage;
#endif
                if (++stage == STAGES) stage = 0, phase ^= 1;
            }
#if !SPLIT3
            wgmma_wait<0>();
            pin(acc);
            mbar_arrive(empty(prev));
#endif
#if ACC2
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) acc[i] += acc_small[i];
#endif
            // accumulator fragment (PTX ISA: wgmma .m64nNk8 D): d[4i], d[4i + 1] at row
            // lane / 4 of the warp's 16, columns 8i + 2 (lane % 4) and one more; d[4i + 2],
            // d[4i + 3] 8 rows down
            const int r0 = tm * BM + cw * 64 + warp * 16 + lane / 4;
            const int c0 = tn * BN + 2 * (lane % 4);
#pragma unroll
            for (int i = 0; i < BN / 8; ++i) {
                store2(C, ldc, r0, c0 + 8 * i, M, N, acc[4 * i], acc[4 * i + 1], alpha, beta,
                       vec2);
                store2(C, ldc, r0 + 8, c0 + 8 * i, M, N, acc[4 * i + 2], acc[4 * i + 3], alpha,
                       beta, vec2);
            }
        }
    }
}
#endif
