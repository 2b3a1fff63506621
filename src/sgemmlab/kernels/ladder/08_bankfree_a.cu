// Rung 8 — padded transposed A tile: conflict-free transposing stores into shared memory.
//
// What changed from rung 7: the transposed A tile gets PAD extra floats at the end of each of
// its BK rows, As[BK][BM + PAD]. Nothing else moves; PAD = 0 is rung 7.
// Why: the copy turns a float4 of A (four k of row r, k-group q) into four STS down a column
// of As, at word (4q + j) * (BM + PAD) + r. One STS of a warp covers 128/BK rows and all BK/4
// groups; with BM a multiple of 32 its bank is (4q*PAD + j*PAD + r) mod 32. PAD = 0: the
// groups of a row collide, BK/4-way. PAD = 4: group q moves 16 banks, so only q and q+2
// collide: conflict-free at BK = 8, 2-way at 16, 4-way at 32. PAD stays a multiple of 4 so
// the rows stay 16-byte aligned for the float4 fragment reads (broadcasts, unaffected).
//
// The bill (`sgemmlab inspect 8 --gpu h200 [--seed]`): rung 7's plus BK*PAD*4 bytes of shared
// memory, except the As stores. At the seed (BK = 8) they take 4 wavefronts per warp per tile
// (rung 7: 8), 1-way; 109 registers. At the H200 default BM=BN=128 BK=32 TM=8 TN=4 PAD=4 (512
// threads): 32 wavefronts, 4-way (PAD = 0: 64, 8-way); 2048 B for 65536 FLOPs (32 FLOP/B);
// 0.375 shared words in 0.094 LDS.128 per FFMA; 63 registers, 2 blocks/SM.
//
// Prediction: within a few % of rung 7 (at the seed the stores save 4 passes per warp per tile
// where rung 7 saved 64 on the Bs reads, and the copy is off the critical path once other
// warps compute): 62-70 % of cuBLAS. The gain grows with BK.
//
// Measured: the generated block below; the longer story: docs/worklog.md, rung notes.
// <measured>
// NVIDIA H200 4096x4096x4096: 3843.6 us, 35758 GFLOP/s, 71.3 % of cuBLAS, 64 registers
//   BK=32,BM=64,BN=128,PAD=4,TM=4,TN=8
//   (results/nvidia-h200/ladder/4096x4096x4096-20261201T195205Z.json)
// NVIDIA H200 4092x4092x4092: 3886.9 us, 35256 GFLOP/s, 76.5 % of cuBLAS, 64 registers
//   BK=32,BM=64,BN=128,PAD=4,TM=4,TN=8
//   (results/nvidia-h200/ladder/4092x4092x4092-20261201T195227Z.json)
// </measured>
#include "common.cuh"

static_assert(BM > 0 && BN > 0 && BK > 0 && TM > 0 && TN > 0 && PAD >= 0,
              "every constant is positive (PAD and PREFETCH may be 0)");

static_assert(BM % TM == 0, "BM is a multiple of TM");
static_assert(BN % TN == 0, "BN is a multiple of TN");
static_assert(BK % 4 == 0, "BK is a multiple of 4 (float4 loads of A along k)");
static_assert(BN % 4 == 0, "BN is a multiple of 4 (float4 loads of B)");
static_assert(TM % 4 == 0 && TN % 4 == 0,
              "TM and TN are multiples of 4 (float4 shared-memory reads)");
static_assert(PAD % 4 == 0, "PAD is a multiple of 4 (keeps float4 reads of the A tile aligned)");
static_assert(THREADS == (BM / TM) * (BN / TN), "THREADS is (BM/TM)*(BN/TN): one per patch");
// __launch_bounds__(THREADS) leaves a thread min(255, 65536 / THREADS) registers
static_assert(TM * TN + TM + TN + 16 <= (65536 / THREADS < 255 ? 65536 / THREADS : 255),
              "TM*TN accumulators, TM+TN fragment values and 16 for indices fit a thread's "
              "registers: min(255, 65536 / threads per block)");
static_assert(THREADS <= 1024, "threads per block <= 1024");
static_assert(THREADS % 32 == 0, "threads per block is a multiple of 32 (whole warps)");
static_assert((BK * (BM + PAD) + BK * BN) * sizeof(float) <= 48 * 1024,
              "static shared memory <= 49152 bytes");

SGEMM_KERNEL __launch_bounds__(THREADS)
sgemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
      const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    __shared__ __align__(16) float As[BK][BM + PAD];  // transposed, rows padded: see above
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
