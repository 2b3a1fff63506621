// The Hopper pipeline of rungs 19 and 20: tensor maps, mbarriers, the copy engine, wgmma, the
// persistent tile order and the epilogue. A rung defines BN (128 or 256) and GROUP_M,
// then includes this; what each piece is, the PTX ISA section it comes from:
//   mbarrier          "Parallel synchronization: mbarrier" (expect-tx arrive, phase parity)
//   cp.async.bulk.tensor, prefetch.tensormap   "Data movement: tensor copy" (TMA)
//   wgmma.mma_async   "Asynchronous warpgroup level matrix multiply-accumulate"
#pragma once
#include "async_copy.cuh"
#include "epilogue.cuh"  // common.cuh, and the epilogue's Source (SGEMM_SOURCE: a bias)
#include "hopper/entry.cuh"  // dynamic_smem, griddep_wait (rung 26)

#ifndef BN
#error "define BN (128 or 256) before including hopper/wgmma.cuh"
#endif
#ifndef GROUP_M
#define GROUP_M 8  // row-tiles walked together by consecutive tile numbers (L2 reuse)
#endif

#if !defined(TILE_M) || !defined(TILE_K)
#error "the registry sets TILE_M and TILE_K (sgemmlab/registry/tensor.py)"
#endif
constexpr int BM = TILE_M;  // two consumer warpgroups of 64 rows
constexpr int BK = TILE_K;  // floats per k-tile: 128 bytes, one row of the 128-byte swizzle
static_assert(BM == 128 && BK == 32, "the warpgroups' rows and the swizzle's row, as written");
constexpr int CONSUMERS = 2;  // consumer warpgroups; warpgroup 0 produces
constexpr int THREADS_PER_BLOCK = 128 * (1 + CONSUMERS);
constexpr int A_BYTES = BM * BK * 4, B_BYTES = BN * BK * 4;

static_assert(BN == 128 || BN == 256, "BN is 128 or 256 (one wgmma m64nBNk8 per k8)");
static_assert(GROUP_M >= 1, "GROUP_M >= 1");

// A tensor map (the driver's CUtensorMap: 128 opaque bytes, 64-byte aligned).
struct __align__(64) TensorMap {
    unsigned long long opaque[16];
};

// -- mbarrier (PTX ISA "Parallel synchronization: mbarrier") ---------------------------------
// (Under tests/cuda_cpu.h, SGEMM_CPU_EMULATOR, that header's own versions of the pieces in PTX
// stand in for them: the same operations on the CPU.)
#ifndef SGEMM_CPU_EMULATOR
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

// Wait for the phase of parity `parity` of barrier `bar`.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    while (!mbar_test(bar, parity)) {
    }
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

// The same from a 3-D map: plane z's box at column x, row y (rung 26: a plane per modulus).
__device__ __forceinline__ void tma_load3(unsigned dst, const TensorMap& map, int x, int y, int z,
                                          unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(&map)), "r"(x), "r"(y), "r"(z), "r"(bar)
        : "memory");
}

__device__ __forceinline__ void tma_prefetch(const TensorMap& map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(&map))
                 : "memory");
}

// Makes the barriers' initialisation visible to the copy engine (and a cluster's blocks).
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// A warpgroup gives registers up (the producer) or takes them (the consumers): setmaxnreg.
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}

// Named barrier `id` (1 to 15; 0 is __syncthreads'), for `count` threads (a multiple of 32):
// sync waits until `count` have arrived, itself included; arrive counts and goes on.
__device__ __forceinline__ void named_bar_sync(int id, int count) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int count) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
#endif  // SGEMM_CPU_EMULATOR

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

#ifndef SGEMM_CPU_EMULATOR
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
template <int R>
__device__ __forceinline__ void pin(int (&d)[R]) {  // INT32 accumulators (rung 26)
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

#endif  // SGEMM_CPU_EMULATOR

// The accumulators d[i .. i + 63] as asm operands of constraint c: "+f" (FP32 sums), "+r"
// (INT32 sums, rung 26).
#define ACCS8(c, d, i)                                                                     \
    c(d[i]), c(d[i + 1]), c(d[i + 2]), c(d[i + 3]), c(d[i + 4]), c(d[i + 5]), c(d[i + 6]),  \
        c(d[i + 7])
#define ACCS64(c, d, i)                                                                    \
    ACCS8(c, d, i), ACCS8(c, d, i + 8), ACCS8(c, d, i + 16), ACCS8(c, d, i + 24),           \
        ACCS8(c, d, i + 32), ACCS8(c, d, i + 40), ACCS8(c, d, i + 48), ACCS8(c, d, i + 56)
#define ACC64(d, i) ACCS64("+f", d, i)
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

#ifndef SGEMM_CPU_EMULATOR
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

#endif  // SGEMM_CPU_EMULATOR

// -- the tile order and the epilogue ----------------------------------------------------
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
// and C allows it. beta's term is read through `src` (kernels/epilogue.cuh: C itself, or with
// SGEMM_SOURCE a matrix or bias of its own; row and col count from C's origin).
__device__ __forceinline__ void store2(float* C, int ldc, int row, int col, int M, int N,
                                       float v0, float v1, float alpha, float beta, bool vec2,
                                       Source src) {
    if (row >= M) return;
    float* c = row_ptr(C, row, ldc) + col;
    const float* x = src.of(c, row, col);
    if (vec2 && col + 1 < N) {
        float2 out = make_float2(alpha * v0, alpha * v1);
        if (beta != 0.0f) {
            const float2 old = *reinterpret_cast<const float2*>(x);
            out.x += beta * old.x;
            out.y += beta * old.y;
        }
        *reinterpret_cast<float2*>(c) = out;
        return;
    }
    if (col < N) *c = epilogue(v0, alpha, beta, x);
    if (col + 1 < N) c[1] = epilogue(v1, alpha, beta, x + 1);
}

// vec2 for store2: C's rows (and with SGEMM_SOURCE, X's) allow 8-byte accesses.
__device__ __forceinline__ bool pairs_ok(const float* C, int ldc, Source src) {
    bool ok = ldc % 2 == 0 && reinterpret_cast<unsigned long long>(C) % 8 == 0;
#if SGEMM_SOURCE
    ok = ok && src.ld % 2 == 0 && reinterpret_cast<unsigned long long>(src.x) % 8 == 0;
#endif
    return ok;
}

// A warpgroup's 64 rows of tile (tm, tn). Accumulator fragment (PTX ISA: wgmma .m64nNk8 D):
// d[4i], d[4i + 1] at row lane / 4 of the warp's 16, columns 8i + 2 (lane % 4) and one more;
// d[4i + 2], d[4i + 3] 8 rows down.
__device__ __forceinline__ void store_tile(float* C, int ldc, int M, int N, int tm, int tn,
                                           int cw, int warp, int lane, const float (&acc)[BN / 2],
                                           float alpha, float beta, bool vec2, Source src) {
    const int r0 = tm * BM + cw * 64 + warp * 16 + lane / 4;
    const int c0 = tn * BN + 2 * (lane % 4);
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) {
        store2(C, ldc, r0, c0 + 8 * i, M, N, acc[4 * i], acc[4 * i + 1], alpha, beta, vec2,
               src);
        store2(C, ldc, r0 + 8, c0 + 8 * i, M, N, acc[4 * i + 2], acc[4 * i + 3], alpha, beta,
               vec2, src);
    }
}

// Element (row, k) of a tile of 128-byte rows as the 128-byte swizzle placed it: the 16-byte
// chunk k / 4 of a row moves to chunk (k / 4) ^ (row % 8).
__device__ __forceinline__ unsigned swizzled(int row, int k) {
    return row * 128 + ((((k >> 2) ^ row) & 7) << 4) + (k & 3) * 4;
}

#ifndef SGEMM_CPU_EMULATOR
__device__ __forceinline__ float lds(unsigned addr) {
    float x;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(x) : "r"(addr) : "memory");
    return x;
}
#endif  // SGEMM_CPU_EMULATOR
