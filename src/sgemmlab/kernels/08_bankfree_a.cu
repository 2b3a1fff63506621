// Rung 8 — padded transposed A tile: conflict-free transposing stores into shared memory.
//
// What changed from rung 7: the transposed A tile gets PAD extra floats at the end of each of
// its BK rows, As[BK][BM + PAD]. Nothing else moves; PAD = 0 is rung 7.
//
// Why: the copy turns each float4 of A (four values along k) into four scalar stores down a
// column of As: As[4q + j][r] = A[r][k0 + 4q + j] for j = 0..3, where lane i of the copy
// loop takes row r = i / (BK/4) and k-group q = i % (BK/4). One STS (fixed j) of a warp
// therefore covers 128/BK rows r and all BK/4 groups q, at word (4q + j) * (BM + PAD) + r.
// Every BM of this rung is a multiple of 32, so the bank is (4q*PAD + j*PAD + r) mod 32.
//   PAD = 0: bank = r mod 32 for every q: the BK/4 groups of one row collide,
//            BK = 8: 2-way, BK = 16: 4-way, BK = 32: 8-way.
//   PAD = 4: bank = (16q + 4j + r) mod 32: group q shifts by 16 banks, so groups q and q+1
//            no longer collide, only q and q+2:
//            BK = 8: 16 rows x 2 groups fill all 32 banks, conflict-free;
//            BK = 16: 8 rows x 4 groups, 2-way; BK = 32: 4 rows x 8 groups, 4-way.
// PAD is a multiple of 4 so each row of As still starts 16-byte aligned for the float4
// fragment reads, which are broadcasts and do not care about the padding.
//
// The bill: as rung 7 (0.031 global B/FLOP at the seed's 128 x 128 tile; 0.25 shared words
// and 0.0625 LDS.128 per FFMA), plus BK*PAD*4 bytes of shared memory (128 B at the seed).
// What PAD saves is small: the transposing stores are BM*BK/THREADS = 4 STS per thread per
// tile at the seed, one extra pass each at BK = 8, against BK*TN/4 = 16 LDS.128 of Bs per
// tile, each of which rung 7 saved 4 passes (per warp): 4 passes saved here against 64 there.
//
// Registers (seed BM=128 BN=128 BK=8 TM=8 TN=8 PAD=4, 256 threads, sm_90): 109 with
// SGEMM_VEC4=1, 119 with the scalar fallback; no spills.
//
// Prediction: within a few % of rung 7 (the stores are a sixteenth of the passes rung 7
// removed, and the copy is off the critical path once other warps compute): 62-70 % of
// cuBLAS (~51 TFLOP/s at 4096^3 on the H200, FFMA peak ~64). The gain grows with BK.
//
// Measured: see the generated block at the end of this header.
// <measured>
// NVIDIA H200 4096x4096x4096: 3685.3 us, 37294 GFLOP/s, 72.7 % of cuBLAS, 63 registers
//   BK=32,BM=128,BN=128,PAD=4,TM=8,TN=4
//   (results/nvidia-h200/ladder-4096x4096x4096-20261129T152429Z.json)
// NVIDIA H200 4092x4092x4092: 3697.0 us, 37067 GFLOP/s, 77.3 % of cuBLAS, 63 registers
//   BK=32,BM=128,BN=128,PAD=4,TM=8,TN=4
//   (results/nvidia-h200/ladder-4092x4092x4092-20261129T125824Z.json)
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
