// Rung 5 — 2D blocktiling: each thread computes a TM x TN patch of C as outer products.
//
// What changed from rung 4: the thread's TM x 1 strip becomes a TM x TN patch, so
// (BM/TM) * (BN/TN) threads cover the block tile. At each step of k a thread copies the TM
// values of As it needs into regM and the TN values of Bs into regN, then does the TM * TN
// multiply-adds of their outer product from registers: each value of A is reused TN times.
//
// The bill (`sgemmlab inspect 5 --gpu h200 [--seed]`, per warp per tile of BK):
//   seed BM=BN=128 BK=8 TM=TN=8 (256 threads): A+B global 1024 B for 32768 FLOPs (32 FLOP/B;
//   rung 4's seed: 16); (TM + TN)/(TM*TN) = 0.25 shared loads per FFMA (rung 4: 1.125); 172
//   registers, 1 block (8 warps) per SM.
//   H200 default BM=BN=64 BK=16 TM=8 TN=4 (128 threads): 2048 B for 32768 FLOPs (16 FLOP/B);
//   0.375 shared loads per FFMA; 96 registers, 5 blocks/SM.
// The bill counts the source's scalar reads (at the seed As 2-way, Bs 4-way); ptxas fuses
// them along k and n into LDS.128 (32 per tile for 512 FFMA at the seed, 48 at the default),
// served in quarter-warp phases: As broadcasts, and Bs 2-way at TN = 8 (lanes tc and tc + 4
// 32 words apart: rung 6's float4 bill counts it, rung 7 removes it).
//
// Prediction: the shared-memory ceiling is gone; issue and the Bs conflicts limit it. About
// 1.6-2x rung 4: 50-60 % of cuBLAS.
//
// Measured: the generated block below; the longer story: docs/worklog.md, rung notes.
// <measured>
// NVIDIA H200 4096x4096x4096: 6212.8 us, 22122 GFLOP/s, 44.3 % of cuBLAS, 96 registers
//   BK=16,BM=64,BN=64,TM=8,TN=4
//   (results/nvidia-h200/ladder/4096x4096x4096-20261201T195205Z.json)
// NVIDIA H200 4092x4092x4092: 6225.7 us, 22012 GFLOP/s, 47.5 % of cuBLAS, 96 registers
//   BK=16,BM=64,BN=64,TM=8,TN=4
//   (results/nvidia-h200/ladder/4092x4092x4092-20261201T195227Z.json)
// </measured>
#include "common.cuh"

static_assert(BM > 0 && BN > 0 && BK > 0 && TM > 0 && TN > 0,
              "every constant is positive (PAD and PREFETCH may be 0)");

static_assert(BM % TM == 0, "BM is a multiple of TM");
static_assert(BN % TN == 0, "BN is a multiple of TN");
static_assert(THREADS == (BM / TM) * (BN / TN), "THREADS is (BM/TM)*(BN/TN): one per patch");
// __launch_bounds__(THREADS) leaves a thread min(255, 65536 / THREADS) registers
static_assert(TM * TN + TM + TN + 16 <= (65536 / THREADS < 255 ? 65536 / THREADS : 255),
              "TM*TN accumulators, TM+TN fragment values and 16 for indices fit a thread's "
              "registers: min(255, 65536 / threads per block)");
static_assert(THREADS <= 1024, "threads per block <= 1024");
static_assert(THREADS % 32 == 0, "threads per block is a multiple of 32 (whole warps)");
static_assert((BM * BK + BK * BN) * sizeof(float) <= 48 * 1024,
              "static shared memory <= 49152 bytes");

SGEMM_KERNEL __launch_bounds__(THREADS)
sgemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
      const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    __shared__ float As[BM][BK];
    __shared__ float Bs[BK][BN];

    const int tid = threadIdx.x;
    __builtin_assume(tid < THREADS);  // lets the compiler count the copy loops' trips
    const int tc = tid % (BN / TN);  // columns tc*TN .. tc*TN+TN-1 of the tile
    const int tr = tid / (BN / TN);  // rows tr*TM .. tr*TM+TM-1

    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    A = row_ptr(A, row0, lda);
    B += col0;
    C = row_ptr(C, row0, ldc) + col0;
    const int rows = M - row0, cols = N - col0;

    float acc[TM][TN] = {};
    float regM[TM], regN[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = tid; i < BM * BK; i += THREADS) {
            const int r = i / BK, c = i % BK;
            As[r][c] = load_or_zero(row_ptr(A, r, lda), k0 + c, K, r < rows);
        }
        for (int i = tid; i < BK * BN; i += THREADS) {
            const int r = i / BN, c = i % BN;
            Bs[r][c] = load_or_zero(row_ptr(B, k0 + r, ldb), c, cols, k0 + r < K);
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            // stage the two fragments in registers: TM + TN loads feed TM * TN FFMAs
#pragma unroll
            for (int i = 0; i < TM; ++i) regM[i] = As[tr * TM + i][k];
#pragma unroll
            for (int j = 0; j < TN; ++j) regN[j] = Bs[k][tc * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += regM[i] * regN[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
            store_c(C, ldc, tr * TM + i, tc * TN + j, rows, cols, acc[i][j], alpha, beta);
}
