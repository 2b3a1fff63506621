// Rung 1 — naive: one thread per element of C, operands straight from global memory.
//
// What it does: thread (x, y) of the grid owns C[row][col] with row from x and col from y,
// and walks row `row` of A and column `col` of B, one multiply-add per step of k.
//
// The bill (`sgemmlab inspect 1 --gpu h200 [--seed]`, per warp per step of k): each lane
// loads one float of A and one of B per FFMA, 256 B requested for 64 FLOPs; no shared memory;
// 32 registers. threadIdx.x (the fastest-varying index inside a warp) picks the *row*, so the
// lanes of a warp read A at different rows, one 32-byte sector each. Seed BS = 32: 32 rows,
// 1024 B of A + 32 B of B moved for 64 FLOPs, and a warp's stores to C touch 32 sectors.
// H200 default BS = 8 (a warp is 8 rows x 4 columns): 256 + 32 = 288 B moved.
//
// Prediction: bound by sectors moved through L1/L2, about 1 % of cuBLAS; the caches
// absorb some of the waste, DRAM traffic is far below the bill.
//
// Measured: the generated block below; the longer story: docs/worklog.md, rung notes.
// <measured>
// NVIDIA H200 4096x4096x4096: 74306.0 us, 1850 GFLOP/s, 3.7 % of cuBLAS, 32 registers
//   BS=8
//   (results/nvidia-h200/ladder/4096x4096x4096-20261201T195205Z.json)
// NVIDIA H200 4092x4092x4092: 37153.8 us, 3688 GFLOP/s, 7.9 % of cuBLAS, 32 registers
//   BS=8
//   (results/nvidia-h200/ladder/4092x4092x4092-20261201T195227Z.json)
// </measured>
#include "common.cuh"

// the message is the registry's rule text, shared by every rung: rung 1 has only BS
static_assert(BS > 0, "every constant is positive (PAD and PREFETCH may be 0)");
static_assert(BS * BS <= 1024, "threads per block <= 1024");
static_assert(BS * BS % 32 == 0, "threads per block is a multiple of 32 (whole warps)");

SGEMM_KERNEL sgemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
                   const float* __restrict__ B, int ldb, float beta, float* __restrict__ C,
                   int ldc) {
    const int row = blockIdx.x * BS + threadIdx.x;  // lanes of a warp: consecutive rows
    const int col = blockIdx.y * BS + threadIdx.y;
    if (row >= M || col >= N) return;

    const float* a = row_ptr(A, row, lda);
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += a[k] * row_ptr(B, k, ldb)[col];
    store_c(C, ldc, row, col, M, N, acc, alpha, beta);
}
