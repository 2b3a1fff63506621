// Rung 6 — vectorized memory access: float4 global loads, A transposed in shared memory.
//
// What changed from rung 5: the copies move four floats per instruction. A is read as float4
// along k and B as float4 along n (load4_or_zero: one 16-byte load when the launcher has
// proven alignment and the four lie inside the matrix, scalar at an edge). A is stored
// transposed, As[BK][BM], so a thread's column fragment is contiguous and read as TM/4
// explicit float4 loads, like the TN/4 of Bs. C is written as float4 too (store4_c).
//
// The bill (`sgemmlab inspect 6 --gpu h200 [--seed]`, per warp per tile of BK):
//   seed BM=BN=128 BK=8 TM=TN=8: 1024 B for 32768 FLOPs, as rung 5; 2 LDG per thread per tile
//   (rung 5: 8); 0.25 shared words in 0.0625 LDS.128 per FFMA; the transpose costs 4 STS per
//   thread per tile, 2-way conflicted (rung 8); Bs reads 2-way at TN = 8 (rung 7); 109
//   registers (rung 5: 172), 2 blocks/SM.
//   H200 default BM=64 BN=128 BK=32 TM=8 TN=4: 3072 B for 65536 FLOPs (21.33 FLOP/B); 6 LDG
//   and 12 STS per thread per tile; 0.375 words in 0.094 LDS.128 per FFMA; Bs reads 1-way
//   (TN = 4), As stores 8-way (BK = 32); 63 registers, 4 blocks/SM.
//
// Prediction: fewer load and address instructions leave more issue slots for FFMA: 10-25 %
// over rung 5, about 60-65 % of cuBLAS.
//
// Measured: the generated block below; the longer story: docs/worklog.md, rung notes.
// <measured>
// NVIDIA H200 4096x4096x4096: 5864.4 us, 23436 GFLOP/s, 46.9 % of cuBLAS, 64 registers
//   BK=32,BM=64,BN=128,TM=4,TN=8
//   (results/nvidia-h200/ladder/4096x4096x4096-20261201T195205Z.json)
// NVIDIA H200 4092x4092x4092: 5929.3 us, 23112 GFLOP/s, 50.3 % of cuBLAS, 64 registers
//   BK=32,BM=64,BN=128,TM=4,TN=8
//   (results/nvidia-h200/ladder/4092x4092x4092-20261201T195227Z.json)
// </measured>
#include "common.cuh"

static_assert(BM > 0 && BN > 0 && BK > 0 && TM > 0 && TN > 0,
              "every constant is positive (PAD and PREFETCH may be 0)");

static_assert(BM % TM == 0, "BM is a multiple of TM");
static_assert(BN % TN == 0, "BN is a multiple of TN");
static_assert(BK % 4 == 0, "BK is a multiple of 4 (float4 loads of A along k)");
static_assert(BN % 4 == 0, "BN is a multiple of 4 (float4 loads of B)");
static_assert(TM % 4 == 0 && TN % 4 == 0,
              "TM and TN are multiples of 4 (float4 shared-memory reads)");
static_assert(THREADS == (BM / TM) * (BN / TN), "THREADS is (BM/TM)*(BN/TN): one per patch");
// __launch_bounds__(THREADS) leaves a thread min(255, 65536 / THREADS) registers
static_assert(TM * TN + TM + TN + 16 <= (65536 / THREADS < 255 ? 65536 / THREADS : 255),
              "TM*TN accumulators, TM+TN fragment values and 16 for indices fit a thread's "
              "registers: min(255, 65536 / threads per block)");
static_assert(THREADS <= 1024, "threads per block <= 1024");
static_assert(THREADS % 32 == 0, "threads per block is a multiple of 32 (whole warps)");
static_assert((BK * BM + BK * BN) * sizeof(float) <= 48 * 1024,
              "static shared memory <= 49152 bytes");

SGEMM_KERNEL __launch_bounds__(THREADS)
sgemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
      const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    __shared__ __align__(16) float As[BK][BM];  // transposed: k-major
    __shared__ __align__(16) float Bs[BK][BN];

    const int tid = threadIdx.x;
    __builtin_assume(tid < THREADS);  // lets the compiler count the copy loops' trips
    const int tc = tid % (BN / TN);
    const int tr = tid / (BN / TN);

    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    A = row_ptr(A, row0, lda);
    B += col0;
    C = row_ptr(C, row0, ldc) + col0;
    const int rows = M - row0, cols = N - col0;

    float acc[TM][TN] = {};
    float regM[TM], regN[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = tid; i < BM * BK / 4; i += THREADS) {
            const int r = i / (BK / 4), c = i % (BK / 4) * 4;
            const float4 v = load4_or_zero(row_ptr(A, r, lda), k0 + c, K, r < rows);
            // transpose A while storing it
            As[c + 0][r] = v.x;
            As[c + 1][r] = v.y;
            As[c + 2][r] = v.z;
            As[c + 3][r] = v.w;
        }
        for (int i = tid; i < BK * BN / 4; i += THREADS) {
            const int r = i / (BN / 4), c = i % (BN / 4) * 4;
            *reinterpret_cast<float4*>(&Bs[r][c]) =
                load4_or_zero(row_ptr(B, k0 + r, ldb), c, cols, k0 + r < K);
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; i += 4) {
                const float4 a = *reinterpret_cast<const float4*>(&As[k][tr * TM + i]);
                regM[i] = a.x, regM[i + 1] = a.y, regM[i + 2] = a.z, regM[i + 3] = a.w;
            }
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                const float4 b = *reinterpret_cast<const float4*>(&Bs[k][tc * TN + j]);
                regN[j] = b.x, regN[j + 1] = b.y, regN[j + 2] = b.z, regN[j + 3] = b.w;
            }
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
        for (int j = 0; j < TN; j += 4)
            store4_c(C, ldc, tr * TM + i, tc * TN + j, rows, cols,
                     make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]),
                     alpha, beta);
}
