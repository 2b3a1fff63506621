// Rung 5 — 2D blocktiling: each thread computes a TM x TN patch of C as outer products.
//
// What changed from rung 4: the thread's strip of TM x 1 outputs becomes a TM x TN patch, so
// (BM/TM) * (BN/TN) threads cover the block tile. At each step of k a thread copies the TM
// values of As it needs (a column fragment) into regM and the TN values of Bs (a row
// fragment) into regN, then does the TM * TN multiply-adds of their outer product out of
// registers alone. Rung 4 reused the value of B TM times; now every value of A is also reused
// TN times.
//
// The bill: global bytes per FLOP 2 * (BM + BN) / (BM * BN) = 0.031 B/FLOP for the seed's
// 128 x 128 tile (rung 4's 64 x 64: 0.0625). Shared-memory loads per FFMA: (TM + TN) /
// (TM * TN) = 16 / 64 = 0.25 at 8 x 8 (rung 4: 1.125). Both fragments are contiguous in
// shared memory (a row of As along k, a row of Bs along n), so with the k loop unrolled the
// compiler already fuses them into LDS.128: the seed issues 16 + 16 LDS.128 per tile of
// BK = 8 for 512 FFMA, 0.0625 LDS instructions per FFMA. A 128-bit shared load is served in
// quarter-warp phases of 8 lanes; lanes tc = 0..7 read Bs at words 0, 8, ..., 56, so lanes 0
// and 4 share banks: every Bs read conflicts 2-way at TN = 8 (rung 7 removes that). The As
// reads are broadcasts: the 8 lanes of a phase share one row group (BN/TN >= 8).
//
// Registers (seed BM=128 BN=128 BK=8 TM=8 TN=8, 256 threads, sm_90): 172, no spills. The 64
// accumulators and 16 fragment values would need about 100; the rest is the price of the
// fused As reads (four steps of k of TM rows live at once). At 172 x 256 registers one block
// fits per SM: 8 warps.
//
// Prediction: the shared-memory ceiling is gone; issue and the Bs conflicts limit it. About
// 1.6-2x rung 4: 50-60 % of cuBLAS (~51 TFLOP/s at 4096^3 on the H200, FFMA peak ~64).
//
// Measured: see the generated block at the end of this header.
// <measured>
// NVIDIA H200 4096x4096x4096: 6151.3 us, 22343 GFLOP/s, 43.5 % of cuBLAS, 96 registers
//   BK=16,BM=64,BN=64,TM=8,TN=4
//   (results/nvidia-h200/ladder-4096x4096x4096-20261129T152429Z.json)
// NVIDIA H200 4092x4092x4092: 6171.2 us, 22206 GFLOP/s, 46.3 % of cuBLAS, 96 registers
//   BK=16,BM=64,BN=64,TM=8,TN=4
//   (results/nvidia-h200/ladder-4092x4092x4092-20261129T125824Z.json)
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
