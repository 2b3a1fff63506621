// Rung 7 — conflict-free B fragment reads: each thread's TN columns split into float4 groups.
//
// What changed from rung 6: only which columns of the tile a thread owns. In rung 6 thread tc
// owned the TN adjacent columns tc*TN .. tc*TN+TN-1. Here it owns TN/4 groups of four,
// GROUP_STRIDE = BN*4/TN columns apart: g*GROUP_STRIDE + tc*4 + 0..3, g = 0 .. TN/4-1. Its
// reads of Bs and its stores to C follow that mapping; nothing else moves.
// Why: an LDS.128 is served in quarter-warp phases of 8 lanes, one pass when they touch 32
// distinct banks. In rung 6 at TN = 8, lanes tc = 0..7 start at words 0, 8, ..., 56: tc and
// tc+4 are 32 words apart, in the same banks: two passes. Here the 8 lanes read 32
// consecutive words. At TN = 4 there is one group: the mapping, and the kernel, are rung 6's.
//
// The bill (`sgemmlab inspect 7 --gpu h200 [--seed]`): rung 6's except the B side. At the
// seed (TN = 8) the Bs reads take 64 wavefronts per warp per tile (rung 6: 128), 1-way, and
// the C stores 256 sectors (rung 6: 512); 109 registers. At the H200 default (BM=64 BN=128
// BK=32 TM=8 TN=4) the bill is rung 6's line for line, 63 registers.
//
// Prediction: a few % to 10 % over rung 6 at TN = 8, identical at TN = 4: 62-70 % of cuBLAS.
// The hardware's count at the seed, 4096^3: 268.9 M shared-load bank conflicts in rung 6,
// 0.43 M here (results/nvidia-h200/profile/ncu-bank-conflicts-4096.txt).
//
// Measured: the generated block below; the longer story: docs/worklog.md, rung notes.
// <measured>
// NVIDIA H200 4096x4096x4096: 4034.2 us, 34069 GFLOP/s, 68.0 % of cuBLAS, 64 registers
//   BK=32,BM=64,BN=128,TM=4,TN=8
//   (results/nvidia-h200/ladder/4096x4096x4096-20261201T195205Z.json)
// NVIDIA H200 4092x4092x4092: 4091.3 us, 33494 GFLOP/s, 72.8 % of cuBLAS, 64 registers
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

    // a thread's columns: TN/4 float4 groups, GROUP_STRIDE apart, group g at
    // g*GROUP_STRIDE + tc*4, so 8 lanes of a phase read 32 consecutive words of Bs
    constexpr int GROUP_STRIDE = BN / (TN / 4);
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
                const float4 b =
                    *reinterpret_cast<const float4*>(&Bs[k][j / 4 * GROUP_STRIDE + tc * 4]);
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
            store4_c(C, ldc, tr * TM + i, j / 4 * GROUP_STRIDE + tc * 4, rows, cols,
                     make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]),
                     alpha, beta);
}
