// Rung 19 — TF32 on the tensor cores: TMA, an mbarrier ring, warp specialization, wgmma.
//   NOT FP32: wgmma's tf32 drops the low 13 bits of every input (PTX ISA, wgmma.mma_async).
//   SPLIT3=1 is 3xTF32; with PROMOTE it is as accurate as cuBLAS SGEMM (measured below).
//
// What changed from rung 13: the tensor cores multiply. The copy engine brings A and B into
// shared memory (cp.async.bulk.tensor, host-made tensor maps, 128-byte swizzle, zeros past
// every edge) through a ring of STAGES k-tiles of BK = 32 floats; mbarriers guard it ("full":
// the tile's bytes landed, arrive.expect_tx; "empty": both consumers are done). Warp 0
// produces; two consumer warpgroups of 64 rows issue wgmma.m64nBNk8 into FP32 accumulators;
// setmaxnreg gives them the producer's registers. Persistent grid, GROUP_M row-tiles at a
// time. wgmma's tf32 reads K-major operands only: A is M x K, B comes as B^T (N x K). The
// entry takes three tensor maps by value where the contract (common.cuh) has A and B.
// SPLIT3=1: x = big + small, big = rna(x), small = rna(x - big); A split in registers, B by a
// pre-pass (SPLIT_PASS=1) into two N x K arrays; per k8 small*big, big*small, big*big.
// PROMOTE=P: the tensor core truncates as it accumulates (arXiv:2512.07004), so its run holds
// P k-tiles only and FADD adds it into an FP32 register sum (as DeepSeek-V3 promotes FP8).
// INFLIGHT=1: a k-tile's wgmmas overlap the next one's split. TAIL=1: the last partial wave's
// tiles split along K. The bill, the error analysis and the variants: docs/worklog.md, rung 19.
//
// The bill (BM=128, BN=256): 42.7 FLOP per byte of L2 (rung 13's tile); 128 B/clk of shared
// memory at the tensor peak, all the SM has. 3xTF32 (BN=128): 3 tensor products per k8 and,
// per k-tile and thread, 16 LDS, 32 roundings, 16 FADD, 64 FADD every P k-tiles; 230 of 232
// registers touched.
// Prediction: TF32 ~270 TFLOP/s at 4096^3; 3xTF32 ~120, error within 2x SGEMM's; PROMOTE=1
// 2.65x SGEMM at 4096^3, 2.5x at 8192^3, err/SGEMM ~0.2.
// <measured> (results/nvidia-h200/hopper-probe-20261201T142210Z.json, ...152016Z.json)
// tf32 381.9 TFLOP/s at 4096^3 (7.70x SGEMM, 1.04x cuBLAS TF32); 3xtf32 2.55x, err/SGEMM
// 9.7; PROMOTE=1: 4096^3 131.4 TFLOP/s (2.76x), err/SGEMM 0.18; 8192^3 2.31x (TAIL 2.43x).
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
#ifndef PROMOTE
#define PROMOTE 0  // P > 0 (with SPLIT3): the wgmma sum of P k-tiles is FADDed into a register sum
#endif
#ifndef INFLIGHT
#define INFLIGHT 1  // PROMOTE: A fragments double-buffered, one k-tile's wgmmas in flight
#endif
#ifndef TAIL
#define TAIL 0  // PROMOTE: split the tiles of the last partial wave along K (work, counters)
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
[[maybe_unused]] constexpr int CONSUMERS = 2;  // consumer warpgroups; warpgroup 0 produces
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
static_assert(PROMOTE == 0 || (PROMOTE >= 1 && SPLIT3 == 1 && ACC2 == 0 && BN == 128),
              "PROMOTE needs SPLIT3, BN = 128 and no ACC2 (a sum and a run of BN / 2 registers)");
static_assert(INFLIGHT == 0 || INFLIGHT == 1, "INFLIGHT is 0 or 1");
static_assert(TAIL == 0 || (TAIL == 1 && PROMOTE > 0), "TAIL is 0 or 1, and needs PROMOTE");
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
__device__ __forceinline__ void split1(float x, float& big, float& small) {
    big = __uint_as_float(tf32_rna(x));
    small = __uint_as_float(tf32_rna(x - big));  // x - big is exact in FP32
}

SGEMM_KERNEL split_tf32(const float* __restrict__ src, int ld, int rows, int cols,
                        float* __restrict__ big, float* __restrict__ small, int ld_out) {
    // float4 when every row of all three starts 16-byte aligned (the copy engine's rule for
    // big and small anyway): a quarter of the memory instructions, nearer the HBM's rate
    const bool vec = ((ld | ld_out) & 3) == 0 &&
                     ((reinterpret_cast<unsigned long long>(src) |
                       reinterpret_cast<unsigned long long>(big) |
                       reinterpret_cast<unsigned long long>(small)) & 15) == 0;
    const int quads = vec ? cols / 4 : 0;
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* s = row_ptr(src, r, ld);
        float* b = row_ptr(big, r, ld_out);
        float* t = row_ptr(small, r, ld_out);
        for (int q = threadIdx.x; q < quads; q += blockDim.x) {
            const float4 x = reinterpret_cast<const float4*>(s)[q];
            float4 hi, lo;
            split1(x.x, hi.x, lo.x);
            split1(x.y, hi.y, lo.y);
            split1(x.z, hi.z, lo.z);
            split1(x.w, hi.w, lo.w);
            reinterpret_cast<float4*>(b)[q] = hi;
            reinterpret_cast<float4*>(t)[q] = lo;
        }
        for (int c = 4 * quads + threadIdx.x; c < cols; c += blockDim.x) split1(s[c], b[c], t[c]);
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

// What a block does next: k-tiles k0 .. k1 - 1 of tile t. Item w < `whole` is tile w, all of
// it (slot -1); with TAIL the tiles after them (tiles % gridDim.x, the last partial wave) come
// as `splits` parts each: part s of leftover tile j is slot j * splits + s of the workspace.
struct Work {
    int t, k0, k1, slot;
};

__device__ __forceinline__ int whole_tiles(int tiles, int splits) {
    return TAIL && splits > 1 ? tiles - tiles % static_cast<int>(gridDim.x) : tiles;
}

__device__ __forceinline__ Work work_of(int w, int whole, int ktiles, int splits) {
    if (!TAIL || w < whole) return {w, 0, ktiles, -1};
    const int j = (w - whole) / splits, s = (w - whole) % splits;
    return {whole + j, s * ktiles / splits, (s + 1) * ktiles / splits, j * splits + s};
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

// A warpgroup's 64 rows of tile (tm, tn). Accumulator fragment (PTX ISA: wgmma .m64nNk8 D):
// d[4i], d[4i + 1] at row lane / 4 of the warp's 16, columns 8i + 2 (lane % 4) and one more;
// d[4i + 2], d[4i + 3] 8 rows down.
__device__ __forceinline__ void store_tile(float* C, int ldc, int M, int N, int tm, int tn,
                                           int cw, int warp, int lane, const float (&acc)[BN / 2],
                                           float alpha, float beta, bool vec2) {
    const int r0 = tm * BM + cw * 64 + warp * 16 + lane / 4;
    const int c0 = tn * BN + 2 * (lane % 4);
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) {
        store2(C, ldc, r0, c0 + 8 * i, M, N, acc[4 * i], acc[4 * i + 1], alpha, beta, vec2);
        store2(C, ldc, r0 + 8, c0 + 8 * i, M, N, acc[4 * i + 2], acc[4 * i + 3], alpha, beta,
               vec2);
    }
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

// This thread's A fragments of a k-tile at `a`, split (PTX ISA: wgmma .m64nNk8 A in
// registers): a0 at row lane / 4 of its warp's 16 rows, k lane % 4; a1 8 rows down; a2, a3
// k + 4.
__device__ __forceinline__ void split_a(unsigned (&hi)[BK / 8][4], unsigned (&lo)[BK / 8][4],
                                        unsigned a, int warp, int lane) {
    const int row = warp * 16 + lane / 4;
#pragma unroll
    for (int kk = 0; kk < BK / 8; ++kk)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float x =
                lds(a + swizzled(row + (j & 1) * 8, kk * 8 + lane % 4 + (j >> 1) * 4));
            hi[kk][j] = tf32_rna(x);
            lo[kk][j] = tf32_rna(x - __uint_as_float(hi[kk][j]));
        }
}

// pin for A fragments: placed after the wait that covers the wgmmas reading them, it keeps
// them live (in their registers, untouched) as long as those wgmmas may still read them.
template <int R>
__device__ __forceinline__ void pin_u(unsigned (&d)[R][4]) {
#pragma unroll
    for (int i = 0; i < R; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(d[i][j])::"memory");
}

// The release of a stage: this thread's generic reads of it, fenced from the copy engine's
// rewrite of it (the async proxy), then its arrival on "empty".
__device__ __forceinline__ void release(unsigned bar) {
    if (PROXY_FENCE) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    mbar_arrive(bar);
}

constexpr int THREADS = 128 * (1 + CONSUMERS);

// tma_b is B^T (B_big with SPLIT3); tma_b_small is read only with SPLIT3 (pass any map).
// TAIL: `work` holds splits * (tiles % gridDim.x) partial tiles, `counters` 256 zeros per
// leftover tile (they are left zero); splits = 1 (or TAIL = 0): neither is touched.
SGEMM_KERNEL __launch_bounds__(THREADS, 1)
sgemm(const __grid_constant__ TensorMap tma_a, const __grid_constant__ TensorMap tma_b,
      const __grid_constant__ TensorMap tma_b_small, int M, int N, int K, float alpha,
      float beta, float* __restrict__ C, int ldc, float* __restrict__ work,
      unsigned* __restrict__ counters, int splits) {
    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (smem_addr(smem_raw) + 1023u) & ~1023u;  // the swizzle's period
    const unsigned a_tiles = base, b_tiles = base + STAGES * A_BYTES;
    const unsigned b2_tiles = b_tiles + STAGES * B_BYTES;  // SPLIT3: B_small
    const unsigned bars = base + STAGES * STAGE_BYTES;
    auto full = [&](int s) { return bars + 8 * s; };
    auto empty = [&](int s) { return bars + 8 * (STAGES + s); };

    const int tiles_m = ceil_div(M, BM), tiles_n = ceil_div(N, BN);
    const int tiles = tiles_m * tiles_n, ktiles = ceil_div(K, BK);
    splits = TAIL ? max(1, min(splits, ktiles)) : 1;
    const int whole = whole_tiles(tiles, splits);
    const int items = whole + (tiles - whole) * splits;

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
        for (int w = blockIdx.x; w < items; w += gridDim.x) {
            const Work wk = work_of(w, whole, ktiles, splits);
            int tm, tn;
            tile_of(wk.t, tiles_m, tiles_n, tm, tn);
            for (int kt = wk.k0; kt < wk.k1; ++kt) {
                if (!mbar_wait(empty(stage), phase ^ 1, STAGES + stage, wk.t, kt)) return;
                mbar_expect_tx(full(stage), STAGE_BYTES);  // whole boxes, zeros included
                tma_load(a_tiles + stage * A_BYTES, tma_a, kt * BK, tm * BM, full(stage));
                tma_load(b_tiles + stage * B_BYTES, tma_b, kt * BK, tn * BN, full(stage));
                if (SPLIT3)
                    tma_load(b2_tiles + stage * B_BYTES, tma_b_small, kt * BK, tn * BN,
                             full(stage));
                if (++stage == STAGES) stage = 0, phase ^= 1;
            }
        }
        return;
    }
    // -- consumers: warpgroup cw computes rows 64 cw .. 64 cw + 63 of each tile ---------------
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int ct = threadIdx.x - 128, cw = ct / 128;
    const int warp = ct % 128 / 32, lane = ct % 32;
    const bool vec2 = ldc % 2 == 0 && reinterpret_cast<unsigned long long>(C) % 8 == 0;
    int stage = 0;
    unsigned phase = 0;
#if PROMOTE
    float sum[BN / 2];  // the register sum: FADD, round to nearest
    float run[BN / 2];  // the wgmma accumulator of the current run of k-tiles
    unsigned hi0[BK / 8][4], lo0[BK / 8][4];
#if INFLIGHT
    unsigned hi1[BK / 8][4], lo1[BK / 8][4];  // the k-tile in flight keeps its fragments
#endif
    const int stagger = cw * (PROMOTE / 2);  // warpgroup 1's runs end between warpgroup 0's
    for (int w = blockIdx.x; w < items; w += gridDim.x) {
        const Work wk = work_of(w, whole, ktiles, splits);
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) sum[i] = 0.0f;
        int prev = 0;  // INFLIGHT: the stage whose products may still be in flight
        // One k-tile into fragments (hi, lo); (ohi, olo) are the k-tile before's. False: the
        // watchdog ended the wait.
        auto step = [&](unsigned (&hi)[BK / 8][4], unsigned (&lo)[BK / 8][4],
                        unsigned (&ohi)[BK / 8][4], unsigned (&olo)[BK / 8][4], int kt) {
            if (!mbar_wait(full(stage), phase, stage, wk.t, kt)) return false;
            split_a(hi, lo, a_tiles + stage * A_BYTES + cw * 64 * 128, warp, lane);
            const bool fresh = kt == wk.k0 || (kt - wk.k0 + stagger) % PROMOTE == 0;
            if (fresh && kt > wk.k0) {  // the run is complete: promote it
                if (INFLIGHT) {
                    wgmma_wait<0>();
                    pin(run);
                    pin_u(ohi);
                    pin_u(olo);
                    release(empty(prev));
                }
#pragma unroll
                for (int i = 0; i < BN / 2; ++i) sum[i] += run[i];
            }
            const unsigned b = b_tiles + stage * B_BYTES, b2 = b2_tiles + stage * B_BYTES;
            pin(run);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 8; ++kk)  // small_a * big_b; a fresh run starts at zero
                wgmma_rs(run, lo[kk], smem_desc(b + 32 * kk), !fresh || kk > 0);
#pragma unroll
            for (int kk = 0; kk < BK / 8; ++kk)  // big_a * small_b
                wgmma_rs(run, hi[kk], smem_desc(b2 + 32 * kk), 1);
#pragma unroll
            for (int kk = 0; kk < BK / 8; ++kk)  // big_a * big_b
                wgmma_rs(run, hi[kk], smem_desc(b + 32 * kk), 1);
            wgmma_commit();
            if (!INFLIGHT) {  // the A registers are rewritten next k-tile: nothing in flight
                wgmma_wait<0>();
                pin(run);
                pin_u(hi);
                pin_u(lo);
                release(empty(stage));
            } else if (!fresh) {  // this k-tile stays in flight; the one before is done
                wgmma_wait<1>();
                pin(run);
                pin_u(ohi);
                pin_u(olo);
                release(empty(prev));
            }
            prev = stage;
            if (++stage == STAGES) stage = 0, phase ^= 1;
            return true;
        };
        for (int kt = wk.k0; kt < wk.k1; kt += 2) {
#if INFLIGHT
            const bool ok = step(hi0, lo0, hi1, lo1, kt) &&
                            (kt + 1 >= wk.k1 || step(hi1, lo1, hi0, lo0, kt + 1));
#else
            const bool ok = step(hi0, lo0, hi0, lo0, kt) &&
                            (kt + 1 >= wk.k1 || step(hi0, lo0, hi0, lo0, kt + 1));
#endif
            if (!ok) {
                wgmma_wait<0>();  // leave nothing in flight
                return;
            }
        }
        if (INFLIGHT) {
            wgmma_wait<0>();
            pin(run);
            pin_u(hi0);
            pin_u(lo0);
#if INFLIGHT
            pin_u(hi1);
            pin_u(lo1);
#endif
            release(empty(prev));
        }
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) sum[i] += run[i];
#if TAIL
        if (wk.slot >= 0) {
            // a part of a leftover tile: its sum to the workspace ([slot][cw][i][thread]:
            // coalesced), then the last part to arrive adds all of them in order and stores
            const int me = ct % 128, j = wk.slot / splits;
            float* mine = work + static_cast<long long>(wk.slot * 2 + cw) * (BN / 2) * 128 + me;
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) mine[i * 128] = sum[i];
            __threadfence();  // the part before the count
            unsigned* count = counters + (j * 2 + cw) * 128 + me;
            if (atomicAdd(count, 1u) != static_cast<unsigned>(splits - 1)) continue;
            __threadfence();  // the count before the parts
            *count = 0;       // ready for the next launch
            const float* part =
                work + static_cast<long long>(j * splits * 2 + cw) * (BN / 2) * 128 + me;
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) sum[i] = __ldcg(part + i * 128);  // L2: other blocks
#pragma unroll 1
            for (int s = 1; s < splits; ++s) {
                part += 2 * (BN / 2) * 128;
#pragma unroll
                for (int i = 0; i < BN / 2; ++i) sum[i] += __ldcg(part + i * 128);
            }
        }
#endif
        int tm, tn;  // only now: fewer registers live through the k loop
        tile_of(wk.t, tiles_m, tiles_n, tm, tn);
        store_tile(C, ldc, M, N, tm, tn, cw, warp, lane, sum, alpha, beta, vec2);
    }
#else
    float acc[BN / 2];
#if ACC2
    float acc_small[BN / 2];
#endif
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
            unsigned hi[BK / 8][4], lo[BK / 8][4];
            split_a(hi, lo, a, warp, lane);
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
            release(empty(stage));
#else
            pin(acc);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 8; ++kk)
                wgmma_ss(acc, smem_desc(a + 32 * kk), smem_desc(b + 32 * kk), kt > 0 || kk > 0);
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
        store_tile(C, ldc, M, N, tm, tn, cw, warp, lane, acc, alpha, beta, vec2);
    }
#endif
}
#endif
