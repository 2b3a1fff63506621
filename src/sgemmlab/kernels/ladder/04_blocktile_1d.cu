// Rung 4 — 1D blocktiling: each thread computes TM outputs of one column of C.
//
// What changed from rung 3: a thread owns TM consecutive rows of one column of the block's
// BM x BN tile, so the block is one-dimensional (BM/TM*BN threads) and the tiles are
// rectangles, As BM x BK and Bs BK x BN, copied by loops that stride by THREADS. In the
// inner loop one value of Bs, held in a register, serves TM multiply-adds.
//
// The bill (`sgemmlab inspect 4 --gpu h200 [--seed]`, per warp per tile of BK):
//   seed BM=BN=64 BK=8 TM=8 (512 threads): A+B global 256 B for 4096 FLOPs (16 FLOP/B; rung
//   3: 8); (TM + 1)/TM = 1.125 shared loads per FFMA (rung 3: 2), no conflicts (a warp's As
//   reads are one broadcast address, its Bs reads 32 consecutive words); 44 registers.
//   H200 default BM=64 BN=32 BK=16 TM=16 (128 threads): 1536 B for 16384 FLOPs (10.67
//   FLOP/B); 1.062 shared loads per FFMA, no conflicts; 95 registers, 5 blocks/SM.
// ptxas fuses four steps of k of a row of As into one LDS.128 (the k loop is unrolled): per
// tile the seed issues 16 LDS.128 + 8 LDS.32 for 64 FFMA, the default 64 + 16 for 256 FFMA,
// at the price of 4*TM values of A live in registers (the registry's register rule).
//
// Prediction: at 1.125 shared loads per FFMA the shared-memory ceiling would sit near a fifth
// of the FFMA peak; the fused loads lift it, so issue and latency decide. With the block
// tile's global traffic halved as well: about 2x rung 3, 30-35 % of cuBLAS.
//
// Measured: the generated block below; the longer story: docs/worklog.md, rung notes.
// <measured>
// NVIDIA H200 4096x4096x4096: 8500.9 us, 16168 GFLOP/s, 32.5 % of cuBLAS, 95 registers
//   BK=16,BM=64,BN=32,TM=16
//   (results/nvidia-h200/ladder/4096x4096x4096-20261201T195205Z.json)
// NVIDIA H200 4092x4092x4092: 8553.2 us, 16022 GFLOP/s, 34.3 % of cuBLAS, 95 registers
//   BK=16,BM=64,BN=32,TM=16
//   (results/nvidia-h200/ladder/4092x4092x4092-20261201T195227Z.json)
// </measured>
#include "common.cuh"

static_assert(BM > 0 && BN > 0 && BK > 0 && TM > 0,
              "every constant is positive (PAD and PREFETCH may be 0)");

static_assert(BM % TM == 0, "BM is a multiple of TM");
static_assert(THREADS == BM / TM * BN, "THREADS is BM/TM*BN: one thread per TM x 1 strip");
// __launch_bounds__(THREADS) leaves a thread min(255, 65536 / THREADS) registers
static_assert(5 * TM + 16 <= (65536 / THREADS < 255 ? 65536 / THREADS : 255),
              "TM accumulators, 4*TM values of A (read four k at a time) and 16 for indices "
              "fit a thread's registers: min(255, 65536 / threads per block)");
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
    const int tc = tid % BN;  // lanes of a warp: consecutive columns
    const int tr = tid / BN;  // rows tr*TM .. tr*TM+TM-1 of the tile

    // move to the block's tile once; below, rows and columns are local to it
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    A = row_ptr(A, row0, lda);
    B += col0;
    C = row_ptr(C, row0, ldc) + col0;
    const int rows = M - row0, cols = N - col0;  // what is left of C from the tile's corner

    float acc[TM] = {};
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
            const float b = Bs[k][tc];  // one load, reused TM times
#pragma unroll
            for (int i = 0; i < TM; ++i) acc[i] += As[tr * TM + i][k] * b;
        }
        __syncthreads();  // the next copy must not overwrite tiles still being read
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
        store_c(C, ldc, tr * TM + i, tc, rows, cols, acc[i], alpha, beta);
}
