// Rung 10 — warptiling: block tile, warp tile, thread tile; the copy split in two.
//
// What changed from rung 8/9: a level between the block and the thread. The BM x BN block
// tile is cut into (BM/WM) x (BN/WN) warp tiles, one per warp; a warp computes its tile as
// WMITER x WNITER sub-tiles of (WM/WMITER) x (WN/WNITER), in each of which every lane owns the
// same TM x TN piece, so the words a warp reads per step of k are few and shared. Per step of
// k a lane loads WMITER*TM values of A and WNITER*TN of B and does their outer product. The
// copy is split into fetch (global -> registers) and stash (registers -> shared); PREFETCH = 1
// fetches tile k+1 right after the barrier that publishes tile k, so its loads fly while tile
// k's FFMAs issue.
//
// The bill (`sgemmlab inspect 10 --gpu h200 [--seed]`, per warp per tile of BK = 16): H200
// default BM=64 BN=256 WM=32 WN=64 WNITER=1 TM=TN=4 PREFETCH=1 (WMITER = 4, 256 threads, 64
// outputs per lane): 2560 B for 65536 FLOPs (25.6 FLOP/B); 0.3125 shared words in 0.078
// LDS.128 per FFMA, conflict-free; 4 transposing STS per thread per tile (the seed, BM = 128:
// 8), 2-way (PAD = 4, BK = 16); 127 registers, 2 blocks/SM. At most 64 accumulators per
// thread: 79 to 225 registers over the space (tune-10_warptiling-*-20261129T121738Z.json).
//
// Prediction: the copy latency exposed at rungs 6-9's plateau, mostly hidden by PREFETCH = 1:
// +10-20 %, to 80-90 % of cuBLAS at 4096^3.
//
// Measured: the generated block below; the longer story: docs/worklog.md, rung notes.
// <measured>
// NVIDIA H200 4096x4096x4096: 3144.0 us, 43715 GFLOP/s, 87.1 % of cuBLAS, 127 registers
//   BK=16,BM=64,BN=256,PAD=4,PREFETCH=1,TM=4,TN=4,WM=32,WN=64,WNITER=1
//   (results/nvidia-h200/ladder/4096x4096x4096-20261201T195205Z.json)
// NVIDIA H200 4092x4092x4092: 3180.2 us, 43091 GFLOP/s, 93.8 % of cuBLAS, 127 registers
//   BK=16,BM=64,BN=256,PAD=4,PREFETCH=1,TM=4,TN=4,WM=32,WN=64,WNITER=1
//   (results/nvidia-h200/ladder/4092x4092x4092-20261201T195227Z.json)
// </measured>
#include "common.cuh"

static_assert(BM > 0 && BN > 0 && BK > 0 && WM > 0 && WN > 0 && WNITER > 0 && TM > 0 && TN > 0 &&
              PAD >= 0 && PREFETCH >= 0,
              "every constant is positive (PAD and PREFETCH may be 0)");

static_assert(BM % WM == 0 && BN % WN == 0, "BM is a multiple of WM and BN of WN");
static_assert((WM * WN) % (32 * TM * TN * WNITER) == 0 && WM * WN >= 32 * TM * TN * WNITER,
              "a warp's 32 lanes times TM x TN times WNITER divides the warp tile WM x WN "
              "(WMITER = WM*WN / (32*TM*TN*WNITER) is a whole number >= 1)");
static_assert(WMITER == WM * WN / (32 * TM * TN * WNITER),
              "WMITER is WM*WN / (32*TM*TN*WNITER), as the registry derives it");
static_assert(WM % WMITER == 0 && WN % WNITER == 0,
              "WM is a multiple of WMITER and WN of WNITER");
static_assert((WM / WMITER) % TM == 0 && (WN / WNITER) % TN == 0 &&
                  ((WM / WMITER) / TM) * ((WN / WNITER) / TN) == 32,
              "the warp sub-tile (WM/WMITER) x (WN/WNITER) is 32 lanes of TM x TN");
static_assert(BK % 4 == 0 && BN % 4 == 0 && BM % 4 == 0,
              "BK is a multiple of 4 and BN, BM of 4 (float4 copies)");
static_assert(TM % 4 == 0 && TN % 4 == 0,
              "TM and TN are multiples of 4 (float4 shared-memory reads)");
static_assert(PAD % 4 == 0, "PAD is a multiple of 4 (keeps float4 reads of the A tile aligned)");
static_assert(PREFETCH == 0 || PREFETCH == 1, "PREFETCH is 0 or 1");
static_assert((BM / WM) * (BN / WN) == 4 || (BM / WM) * (BN / WN) == 8,
              "4 or 8 warps per block (128 or 256 threads)");
static_assert(THREADS == (BM / WM) * (BN / WN) * 32, "THREADS is 32 lanes per warp tile");
static_assert(BM * BN / THREADS <= 64,
              "at most 64 accumulators per thread (register budget: with the copy registers, "
              "128 outputs spill past 255 registers)");
static_assert(THREADS <= 1024, "threads per block <= 1024");
static_assert(THREADS % 32 == 0, "threads per block is a multiple of 32 (whole warps)");
static_assert((BK * (BM + PAD) + BK * BN) * sizeof(float) <= 48 * 1024,
              "static shared memory <= 49152 bytes");

SGEMM_KERNEL __launch_bounds__(THREADS)
sgemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
      const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    constexpr int WSUBM = WM / WMITER, WSUBN = WN / WNITER;  // the warp's sub-tile
    __shared__ __align__(16) float As[BK][BM + PAD];  // transposed, rows padded (rung 8)
    __shared__ __align__(16) float Bs[BK][BN];

    const int tid = threadIdx.x;
    __builtin_assume(tid < THREADS);  // lets the compiler count the copy loops' trips
    const int warp = tid / 32, lane = tid % 32;
    const int wr = warp / (BN / WN), wc = warp % (BN / WN);  // the warp's tile in the block's
    const int lr = lane / (WSUBN / TN), lc = lane % (WSUBN / TN);  // the lane's piece
    // the lane's first output, (sub-tile 0, 0), in the block tile; the others are
    // WSUBM rows and WSUBN columns apart
    const int trow = wr * WM + lr * TM, tcol = wc * WN + lc * TN;

    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    A = row_ptr(A, row0, lda);
    B += col0;
    C = row_ptr(C, row0, ldc) + col0;
    const int rows = M - row0, cols = N - col0;

    float acc[WMITER * TM][WNITER * TN] = {};
    float regM[WMITER * TM], regN[WNITER * TN];

    // The copy in two halves: fetch (global -> registers) and stash (registers -> shared,
    // A transposed). PREFETCH only moves the fetch: after the math (0: the copy and the
    // math of a block alternate, as in rungs 3-9) or before it (1: the next tile's loads
    // are in flight while this tile's FFMAs issue).
    constexpr int A_LOADS = ceil_div(BM * BK / 4, THREADS);  // float4 per thread per tile
    constexpr int B_LOADS = ceil_div(BK * BN / 4, THREADS);
    float4 ra[A_LOADS], rb[B_LOADS];
    auto fetch = [&](int k0) {
#pragma unroll
        for (int t = 0; t < A_LOADS; ++t) {
            const int i = tid + t * THREADS, r = i / (BK / 4), c = i % (BK / 4) * 4;
            if (i < BM * BK / 4)
                ra[t] = load4_or_zero(row_ptr(A, r, lda), k0 + c, K, r < rows);
        }
#pragma unroll
        for (int t = 0; t < B_LOADS; ++t) {
            const int i = tid + t * THREADS, r = i / (BN / 4), c = i % (BN / 4) * 4;
            if (i < BK * BN / 4)
                rb[t] = load4_or_zero(row_ptr(B, k0 + r, ldb), c, cols, k0 + r < K);
        }
    };
    auto stash = [&]() {
#pragma unroll
        for (int t = 0; t < A_LOADS; ++t) {
            const int i = tid + t * THREADS, r = i / (BK / 4), c = i % (BK / 4) * 4;
            if (i < BM * BK / 4) {  // transpose A while storing it
                As[c + 0][r] = ra[t].x;
                As[c + 1][r] = ra[t].y;
                As[c + 2][r] = ra[t].z;
                As[c + 3][r] = ra[t].w;
            }
        }
#pragma unroll
        for (int t = 0; t < B_LOADS; ++t) {
            const int i = tid + t * THREADS, r = i / (BN / 4), c = i % (BN / 4) * 4;
            if (i < BK * BN / 4) *reinterpret_cast<float4*>(&Bs[r][c]) = rb[t];
        }
    };

    fetch(0);
    for (int k0 = 0; k0 < K; k0 += BK) {
        stash();
        __syncthreads();
        if (PREFETCH && k0 + BK < K) fetch(k0 + BK);
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            // the lane's column of A and row of B across all its sub-tiles
#pragma unroll
            for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
                for (int i = 0; i < TM; i += 4) {
                    const float4 a =
                        *reinterpret_cast<const float4*>(&As[k][trow + wm * WSUBM + i]);
                    float* m = &regM[wm * TM + i];
                    m[0] = a.x, m[1] = a.y, m[2] = a.z, m[3] = a.w;
                }
#pragma unroll
            for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
                for (int j = 0; j < TN; j += 4) {
                    const float4 b =
                        *reinterpret_cast<const float4*>(&Bs[k][tcol + wn * WSUBN + j]);
                    float* n = &regN[wn * TN + j];
                    n[0] = b.x, n[1] = b.y, n[2] = b.z, n[3] = b.w;
                }
#pragma unroll
            for (int i = 0; i < WMITER * TM; ++i)
#pragma unroll
                for (int j = 0; j < WNITER * TN; ++j) acc[i][j] += regM[i] * regN[j];
        }
        __syncthreads();  // the next stash must not overwrite tiles still being read
        if (!PREFETCH && k0 + BK < K) fetch(k0 + BK);
    }
#pragma unroll
    for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
                for (int j = 0; j < TN; j += 4) {
                    const float* a = &acc[wm * TM + i][wn * TN + j];
                    store4_c(C, ldc, trow + wm * WSUBM + i, tcol + wn * WSUBN + j, rows, cols,
                             make_float4(a[0], a[1], a[2], a[3]), alpha, beta);
                }
}
