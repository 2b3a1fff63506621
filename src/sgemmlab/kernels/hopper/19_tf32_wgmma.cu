// Rung 19 — TF32 on the tensor cores: TMA, an mbarrier ring, warp specialization, wgmma.
//   NOT FP32: wgmma's tf32 reads 10 of every input's 23 mantissa bits (PTX ISA, wgmma).
//
// What changed from rung 13: the tensor cores multiply. The copy engine brings A and B into
// shared memory (cp.async.bulk.tensor, host-made tensor maps, 128-byte swizzle, zeros past
// every edge) through a ring of STAGES k-tiles of BK = 32 floats; mbarriers guard it ("full":
// the tile's bytes landed, arrive.expect_tx; "empty": both consumers are done). Warp 0
// produces; two consumer warpgroups of 64 rows issue wgmma.m64nBNk8 into FP32 accumulators,
// one k-tile left in flight; setmaxnreg gives them the producer's registers. Persistent grid,
// GROUP_M row-tiles at a time (hopper/wgmma.cuh holds the pipeline's pieces). wgmma's tf32
// reads K-major operands only: A is M x K, B comes as B^T (N x K); the host hands over the
// caller's arrays as they lie where they fit, else copies (runtime/hopper.py, hopper/prep.cu).
//
// The bill (BM=128, BN=256): 42.7 FLOP per byte of L2 (rung 13's tile); wgmma reads 0.078 B
// of shared memory per FMA, TMA writes 0.047: 128 B/clk at the tensor peak, all the SM has.
// Prediction: ~270 TFLOP/s at 4096^3 (the shared-memory bill binds).
// <measured> (results/nvidia-h200/probe/hopper-20261201T142210Z.json.xz; bench-4096x4096x4096-
// 8192x8192x8192-20261201T170115Z.json, through the API, B transposed by prep.cu)
// 381.9 TFLOP/s at 4096^3 (probe: 1.04x cuBLAS TF32); API 96.2 % of cuBLAS TF32 at 4096^3,
// 93.0 % at 8192^3. The shared-memory bill did not bind; why: docs/worklog.md, rung 19.
// </measured>
#ifndef BN
#define BN 256
#endif
#ifndef STAGES
#define STAGES 4
#endif
#include "hopper/wgmma.cuh"

constexpr int STAGE_BYTES = A_BYTES + B_BYTES;  // what one "full" awaits
// tiles, then a full and an empty barrier per stage, plus slack to align the tiles to 1024
constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 2 * 8 * STAGES + 1024;
static_assert(STAGES >= 2 && STAGES <= 8, "2 to 8 stages");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory per block <= 227 KB");
#ifdef SMEM_EXPECT  // the host's formula for the launch's dynamic shared memory
static_assert(SMEM_BYTES == SMEM_EXPECT, "the host's shared-memory size matches the kernel's");
#endif

SGEMM_KERNEL __launch_bounds__(THREADS_PER_BLOCK, 1)
sgemm(const __grid_constant__ TensorMap tma_a, const __grid_constant__ TensorMap tma_b, int M,
      int N, int K, float alpha, float beta, float* __restrict__ C,
      int ldc SGEMM_SOURCE_PARAMS) {
    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (smem_addr(smem_raw) + 1023u) & ~1023u;  // the swizzle's period
    const unsigned a_tiles = base, b_tiles = base + STAGES * A_BYTES;
    const unsigned bars = base + STAGES * STAGE_BYTES;
    auto full = [&](int s) { return bars + 8 * s; };
    auto empty = [&](int s) { return bars + 8 * (STAGES + s); };

    const int tiles_m = ceil_div(M, BM), tiles_n = ceil_div(N, BN);
    const int tiles = tiles_m * tiles_n, ktiles = ceil_div(K, BK);

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full(s), 1);                 // the producer's arrive.expect_tx
            mbar_init(empty(s), CONSUMERS * 128);  // every consumer thread
        }
        // make the initialized barriers visible to the copy engine (the async proxy)
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        tma_prefetch(tma_a);
        tma_prefetch(tma_b);
    }
    __syncthreads();

    int stage = 0;
    unsigned phase = 0;
    if (threadIdx.x < 128) {
        // -- producer: one thread issues every copy ------------------------------------------
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (threadIdx.x != 0) return;
        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            int tm, tn;
            tile_of(t, tiles_m, tiles_n, tm, tn);
            for (int kt = 0; kt < ktiles; ++kt) {
                mbar_wait(empty(stage), phase ^ 1);
                mbar_expect_tx(full(stage), STAGE_BYTES);  // whole boxes, zeros included
                tma_load(a_tiles + stage * A_BYTES, tma_a, kt * BK, tm * BM, full(stage));
                tma_load(b_tiles + stage * B_BYTES, tma_b, kt * BK, tn * BN, full(stage));
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
    float acc[BN / 2];
    int prev = 0;  // the stage whose products are still in flight
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int tm, tn;
        tile_of(t, tiles_m, tiles_n, tm, tn);
        for (int kt = 0; kt < ktiles; ++kt) {
            mbar_wait(full(stage), phase);
            const unsigned a = a_tiles + stage * A_BYTES + cw * 64 * 128;
            const unsigned b = b_tiles + stage * B_BYTES;
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
            if (++stage == STAGES) stage = 0, phase ^= 1;
        }
        wgmma_wait<0>();
        pin(acc);
        mbar_arrive(empty(prev));
        store_tile(C, ldc, M, N, tm, tn, cw, warp, lane, acc, alpha, beta, vec2,
                   SGEMM_SOURCE_ARG);
    }
}
