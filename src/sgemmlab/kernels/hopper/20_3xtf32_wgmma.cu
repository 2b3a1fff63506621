// Rung 20 — 3xTF32 on the tensor cores: FP32's accuracy at three tensor products a step.
//   x = big + small, big = rna(x) (TF32, round to nearest), small = rna(x - big); per k8
//   small_a*big_b, big_a*small_b, big_a*big_b. Dropped: small_a*small_b and the rounding of
//   small (each 2^-22 of a product at most); the analysis and its bound: docs/worklog.md.
//
// What changed from rung 19: B arrives split (hopper/prep.cu writes B_big and B_small, N x K,
// once per call; a third tensor map), A is split in registers as its fragments are read
// from the swizzled tile, and the products go through wgmma with A from registers. The
// tensor core truncates as it accumulates (arXiv:2512.07004), so its sum `run` holds
// PROMOTE k-tiles only and FADD (round to nearest) adds it into a register `sum`, as
// DeepSeek-V3 promotes FP8. INFLIGHT: a k-tile's wgmmas run while the next is split (A
// fragments double-buffered). TAIL: the tiles of the last partial wave are split along K,
// their parts summed in a fixed order by the last to arrive (bit-reproducible).
//
// The bill (BM = BN = 128): 0.073 + 0.031 B of shared memory per tensor FMA; per k-tile and
// thread 16 LDS, 32 roundings, 16 FADD, 64 FADD every PROMOTE k-tiles; 230 of 232 registers.
// Prediction: 2.65x cuBLAS SGEMM at 4096^3, 2.5x at 8192^3, error ~0.2x SGEMM's.
// <measured> (results/nvidia-h200/probe/hopper-20261201T152016Z.json.xz, ...171158Z.json;
// bench/square-ragged-skinny-20261201T165801Z.json.xz; accuracy/20261201T165754Z.json.xz)
// probe: 4096^3 2.75x SGEMM, err/SGEMM 0.18; 8192^3 2.33x (power-capped). matmul: 2.43x at
// 4096^3, 2.26x at 8192^3, 2.11x at 2048^3; error below cuBLAS's on normal and uniform
// inputs, 1.76x its median on positive ones (truncation: docs/worklog.md, session 7).
// </measured>
#ifndef BN
#define BN 128
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef PROMOTE
#define PROMOTE 1  // P >= 1: the wgmma sum of P k-tiles is FADDed into a register sum
#endif
#ifndef INFLIGHT
#define INFLIGHT 1  // A fragments double-buffered, one k-tile's wgmmas in flight
#endif
#ifndef TAIL
#define TAIL 1  // split the tiles of the last partial wave along K (work, counters)
#endif
#ifndef ORDER
#define ORDER 0  // the products of a k-tile: 0 the 8 small ones first, 1 the 4 big ones first,
                 // 2 k8 by k8 (its two small ones, then its big one)
#endif
#include "hopper/wgmma.cuh"

constexpr int STAGE_BYTES = A_BYTES + 2 * B_BYTES;  // A, B_big, B_small: what one "full" awaits
// tiles, then a full and an empty barrier per stage, plus slack to align the tiles to 1024
constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 2 * 8 * STAGES + 1024;
static_assert(STAGES >= 2 && STAGES <= 8, "2 to 8 stages");
static_assert(BN == 128, "BN = 128 (a sum and a run of BN / 2 registers each)");
static_assert(PROMOTE >= 1, "PROMOTE >= 1");
static_assert(INFLIGHT == 0 || INFLIGHT == 1, "INFLIGHT is 0 or 1");
static_assert(TAIL == 0 || TAIL == 1, "TAIL is 0 or 1");
static_assert(ORDER >= 0 && ORDER <= 2, "ORDER is 0, 1 or 2");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory per block <= 227 KB");
#ifdef SMEM_EXPECT  // the host's formula for the launch's dynamic shared memory
static_assert(SMEM_BYTES == SMEM_EXPECT, "the host's shared-memory size matches the kernel's");
#endif

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
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    mbar_arrive(bar);
}

// tma_b is B_big, tma_b_small B_small (both N x K, from hopper/prep.cu).
// TAIL: `work` holds splits * (tiles % gridDim.x) partial tiles, `counters` 256 zeros per
// leftover tile (they are left zero); splits = 1 (or TAIL = 0): neither is touched.
SGEMM_KERNEL __launch_bounds__(THREADS_PER_BLOCK, 1)
sgemm(const __grid_constant__ TensorMap tma_a, const __grid_constant__ TensorMap tma_b,
      const __grid_constant__ TensorMap tma_b_small, int M, int N, int K, float alpha,
      float beta, float* __restrict__ C, int ldc SGEMM_SOURCE_PARAMS,
      float* __restrict__ work, unsigned* __restrict__ counters, int splits) {
    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (smem_addr(smem_raw) + 1023u) & ~1023u;  // the swizzle's period
    const unsigned a_tiles = base, b_tiles = base + STAGES * A_BYTES;
    const unsigned b2_tiles = b_tiles + STAGES * B_BYTES;  // B_small
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
        tma_prefetch(tma_b_small);
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
                mbar_wait(empty(stage), phase ^ 1);
                mbar_expect_tx(full(stage), STAGE_BYTES);  // whole boxes, zeros included
                tma_load(a_tiles + stage * A_BYTES, tma_a, kt * BK, tm * BM, full(stage));
                tma_load(b_tiles + stage * B_BYTES, tma_b, kt * BK, tn * BN, full(stage));
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
    const bool vec2 = pairs_ok(C, ldc, SGEMM_SOURCE_ARG);
    int stage = 0;
    unsigned phase = 0;
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
        // One k-tile into fragments (hi, lo); (ohi, olo) are the k-tile before's.
        auto step = [&](unsigned (&hi)[BK / 8][4], unsigned (&lo)[BK / 8][4],
                        unsigned (&ohi)[BK / 8][4], unsigned (&olo)[BK / 8][4], int kt) {
            mbar_wait(full(stage), phase);
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
#if ORDER == 0
#pragma unroll
            for (int kk = 0; kk < BK / 8; ++kk)  // small_a * big_b; a fresh run starts at zero
                wgmma_rs(run, lo[kk], smem_desc(b + 32 * kk), !fresh || kk > 0);
#pragma unroll
            for (int kk = 0; kk < BK / 8; ++kk)  // big_a * small_b
                wgmma_rs(run, hi[kk], smem_desc(b2 + 32 * kk), 1);
#pragma unroll
            for (int kk = 0; kk < BK / 8; ++kk)  // big_a * big_b
                wgmma_rs(run, hi[kk], smem_desc(b + 32 * kk), 1);
#elif ORDER == 1
#pragma unroll
            for (int kk = 0; kk < BK / 8; ++kk)  // big_a * big_b first
                wgmma_rs(run, hi[kk], smem_desc(b + 32 * kk), !fresh || kk > 0);
#pragma unroll
            for (int kk = 0; kk < BK / 8; ++kk)
                wgmma_rs(run, hi[kk], smem_desc(b2 + 32 * kk), 1);
#pragma unroll
            for (int kk = 0; kk < BK / 8; ++kk)
                wgmma_rs(run, lo[kk], smem_desc(b + 32 * kk), 1);
#else
#pragma unroll
            for (int kk = 0; kk < BK / 8; ++kk) {  // a k8's small products, then its big one
                wgmma_rs(run, lo[kk], smem_desc(b + 32 * kk), !fresh || kk > 0);
                wgmma_rs(run, hi[kk], smem_desc(b2 + 32 * kk), 1);
                wgmma_rs(run, hi[kk], smem_desc(b + 32 * kk), 1);
            }
#endif
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
        };
        for (int kt = wk.k0; kt < wk.k1; kt += 2) {
#if INFLIGHT
            step(hi0, lo0, hi1, lo1, kt);
            if (kt + 1 < wk.k1) step(hi1, lo1, hi0, lo0, kt + 1);
#else
            step(hi0, lo0, hi0, lo0, kt);
            if (kt + 1 < wk.k1) step(hi0, lo0, hi0, lo0, kt + 1);
#endif
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
        store_tile(C, ldc, M, N, tm, tn, cw, warp, lane, sum, alpha, beta, vec2,
                   SGEMM_SOURCE_ARG);
    }
}
