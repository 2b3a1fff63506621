// Rung 2 — global-memory coalescing: the same work, lanes of a warp along a row of C.
//
// What changed from rung 1: threadIdx.x now picks the *column*. One line moved, nothing else.
//
// The bill: a warp's step of k reads one float of A (the same address for all 32 lanes: one
// 32-byte sector, broadcast) and 32 consecutive floats of B (128 bytes: four sectors, one
// transaction). 160 B per 64 FLOPs instead of 1056 B: 6.6x fewer bytes requested, and the
// stores to C are one 128-byte line per warp. Still 0 shared-memory loads per FFMA and still
// one global load per FFMA per lane, so the kernel is bound by L1 load issue and L2
// bandwidth, not by arithmetic.
//
// Prediction: about 6-8x rung 1 (the seed measured 6.4x on the A6000), around 10 % of cuBLAS.
//
// Measured: see the generated block at the end of this header.
// <measured>
// NVIDIA H200 4096x4096x4096: 21260.9 us, 6464 GFLOP/s, 12.6 % of cuBLAS, 32 registers
//   BS=32
//   (results/nvidia-h200/ladder-4096x4096x4096-20261129T152429Z.json)
// NVIDIA H200 4092x4092x4092: 21272.9 us, 6442 GFLOP/s, 13.4 % of cuBLAS, 32 registers
//   BS=32
//   (results/nvidia-h200/ladder-4092x4092x4092-20261129T125824Z.json)
// </measured>
#include "common.cuh"

static_assert(BS > 0, "every constant is positive (PAD and PREFETCH may be 0)");
static_assert(BS * BS <= 1024, "threads per block <= 1024");
static_assert(BS * BS % 32 == 0, "threads per block is a multiple of 32 (whole warps)");

SGEMM_KERNEL sgemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
                   const float* __restrict__ B, int ldb, float beta, float* __restrict__ C,
                   int ldc) {
    const int col = blockIdx.x * BS + threadIdx.x;  // lanes of a warp: consecutive columns
    const int row = blockIdx.y * BS + threadIdx.y;
    if (row >= M || col >= N) return;

    const float* a = row_ptr(A, row, lda);
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += a[k] * row_ptr(B, k, ldb)[col];
    store_c(C, ldc, row, col, M, N, acc, alpha, beta);
}
