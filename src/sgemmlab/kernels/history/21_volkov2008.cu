// Rung 21 — Volkov & Demmel 2008 (SC'08): C's tile in registers, one operand in shared.
//
// History, not the climb: the SGEMM that ran at 58-60 % of 2008 GPUs' peak (CUBLAS 1.1:
// 36-44 %) against the day's advice to maximise occupancy. Between rungs 4 and 5 in ideas:
// rung 4 with B never staged. Ours is row-major, so C^T = B^T A^T swaps Volkov's roles: a
// block computes TM rows by BN columns, thread t owns column t; B(k, t) goes from global
// memory into a register (one 128-byte line per warp), four k at a time with the next four
// in flight; A's TM x BK tile is stored k-major and read as float4 broadcasts.
//
// The bill (`sgemmlab inspect 21 --gpu h200`, default BK=8 BN=256 TM=32): one LDS.128 per
// four FFMA; hot loop 70 % FFMA (paper 82 %, CUBLAS 1.1 56 %: a GT200 MAD read its shared
// operand itself); 84 registers, 25 % occupancy (the paper's 25 %), limited by registers.
// Predicted at the seed (BN=64 TM=16 BK=16): shared-bound, ~8.7 ms. Measured: 6.08 ms (a
// broadcast costs less than modelled); the 36 configurations searched, 31.6-49.3 % of cuBLAS.
// Against the paper: 36.7 % of the H200's FFMA peak (24.3 of 66.2 TFLOP/s), not 58-60 %.
// Why (`sgemmlab profile -k 21`): latency, not a pipe: issue active 54.5 %, 0.82 eligible
// warps of 3.9 per scheduler, waiting on the LDS.128 before each four FFMAs (short
// scoreboard), the tile's barriers and B (long scoreboard): the ILP that hid a GT200's
// latency does not hide an H200's (tune-21_volkov2008-...-20261201T195159Z.json,
// profile-21_volkov2008-...-20261201T201835Z.txt; docs/worklog.md, session 8 and notes).
// <measured>
// NVIDIA H200 4096x4096x4096: 5652.6 us, 24314 GFLOP/s, 49.3 % of cuBLAS, 84 registers
//   BK=8,BN=256,TM=32
//   (results/nvidia-h200/ladder/4096x4096x4096-20261201T195205Z.json)
// NVIDIA H200 4092x4092x4092: 5690.1 us, 24083 GFLOP/s, 52.5 % of cuBLAS, 84 registers
//   BK=8,BN=256,TM=32
//   (results/nvidia-h200/ladder/4092x4092x4092-20261201T195227Z.json)
// </measured>
#include "common.cuh"

static_assert(BN > 0 && TM > 0 && BK > 0,
              "every constant is positive (PAD and PREFETCH may be 0)");

static_assert(THREADS == BN, "THREADS is BN: one thread per column of the tile");
static_assert(TM % 4 == 0, "TM is a multiple of 4 (float4 reads of the A tile)");
static_assert(BK % 4 == 0, "BK is a multiple of 4 (B four k at a time, float4 copies of A)");
// __launch_bounds__(THREADS) leaves a thread min(255, 65536 / THREADS) registers
static_assert(2 * TM + 8 + 24 <= (65536 / THREADS < 255 ? 65536 / THREADS : 255),
              "TM accumulators, TM values of A, 8 of B (four and the next four) and 24 for "
              "indices fit a thread's registers: min(255, 65536 / threads per block)");
static_assert(THREADS <= 1024, "threads per block <= 1024");
static_assert(THREADS % 32 == 0, "threads per block is a multiple of 32 (whole warps)");
static_assert(BK * TM * sizeof(float) <= 48 * 1024, "static shared memory <= 49152 bytes");

// B(k, column) where `inside` (else zero), then b_col moves one row of B down.
__device__ __forceinline__ float next_b(const float*& b_col, int ldb, bool inside) {
    const float v = inside ? *b_col : 0.0f;
    b_col += ldb;
    return v;
}

// One tile of the K loop, k0 .. k0+BK-1: A's TM x BK tile into shared memory, then BK
// saxpys acc += As[k][:] * b[k], the next four values of B in flight during each four.
// EDGE: one of the last tiles, whose loads (the prefetch too) may pass K: zero there.
template <bool EDGE>
__device__ __forceinline__ void tile(float (&acc)[TM], float (&b)[4], float (&As)[BK][TM],
                                     const float* A, int lda, int rows, int k0,
                                     const float*& b_col, int ldb, int K) {
    // A's tile: float4 along a row of A (coalesced), stored down a column of As; rows
    // past M read A's last row (their sums are never stored)
#pragma unroll
    for (int s = 0; s < ceil_div(TM * BK / 4, THREADS); ++s) {
        const int i = threadIdx.x + s * THREADS;
        const int r = i / (BK / 4), c = i % (BK / 4) * 4;
        if (i < TM * BK / 4) {
            const float* a_row = row_ptr(A, min(r, rows - 1), lda) + k0;
            const float4 v = load4_or_zero(a_row, c, EDGE ? K - k0 : BK, true);
            As[c + 0][r] = v.x;
            As[c + 1][r] = v.y;
            As[c + 2][r] = v.z;
            As[c + 3][r] = v.w;
        }
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; k += 4) {
        float next[4];  // B at k+4 .. k+7 (at the tile's end, the next tile's first four)
#pragma unroll
        for (int q = 0; q < 4; ++q) next[q] = next_b(b_col, ldb, !EDGE || k0 + k + 4 + q < K);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
#pragma unroll
            for (int i = 0; i < TM; i += 4) {  // one address for every thread: a broadcast
                const float4 a = *reinterpret_cast<const float4*>(&As[k + q][i]);
                acc[i + 0] += a.x * b[q];
                acc[i + 1] += a.y * b[q];
                acc[i + 2] += a.z * b[q];
                acc[i + 3] += a.w * b[q];
            }
        }
#pragma unroll
        for (int q = 0; q < 4; ++q) b[q] = next[q];
    }
    __syncthreads();  // the next copy must not overwrite the tile still being read
}

SGEMM_KERNEL __launch_bounds__(THREADS)
sgemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
      const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    __shared__ __align__(16) float As[BK][TM];  // A's tile, k-major: As[k][i] = A(i, k)

    const int tid = threadIdx.x;  // the column of the tile this thread owns
    const int row0 = blockIdx.y * TM, col0 = blockIdx.x * BN;
    A = row_ptr(A, row0, lda);
    C = row_ptr(C, row0, ldc) + col0;
    const int rows = M - row0, cols = N - col0;
    // the thread's column of B, walked down a row per k; past the right edge a thread
    // reads the last column instead (its sums are never stored)
    const float* b_col = B + col0 + min(tid, cols - 1);

    float acc[TM] = {};  // rows 0 .. TM-1 of the thread's column of C
    float b[4];          // B(k .. k+3, column), straight from global memory
#pragma unroll
    for (int q = 0; q < 4; ++q) b[q] = next_b(b_col, ldb, q < K);
    int k0 = 0;
    for (; k0 + BK + 4 <= K; k0 += BK)  // every load of these tiles lies inside K
        tile<false>(acc, b, As, A, lda, rows, k0, b_col, ldb, K);
    for (; k0 < K; k0 += BK)  // the last one or two
        tile<true>(acc, b, As, A, lda, rows, k0, b_col, ldb, K);
#pragma unroll
    for (int i = 0; i < TM; ++i) store_c(C, ldc, i, tid, rows, cols, acc[i], alpha, beta);
}
