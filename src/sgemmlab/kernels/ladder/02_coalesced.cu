// Rung 2 — global-memory coalescing: the same work, lanes of a warp along a row of C.
//
// What changed from rung 1: threadIdx.x now picks the *column*. One line moved, nothing else.
//
// The bill (`sgemmlab inspect 2 --gpu h200`, BS = 32, per warp per step of k): one float of
// A (one address for all 32 lanes: one 32-byte sector, broadcast) and 32 consecutive floats
// of B (four sectors): 160 B moved for 64 FLOPs, where rung 1 moves 1056 B at BS = 32 for the
// same 256 B requested (6.6x fewer); a warp's stores to C are 4 sectors, one 128-byte line.
// Still no shared memory and one global load per operand per FFMA, so L1 load issue and L2
// bandwidth bind, not arithmetic; 32 registers.
//
// Prediction: about 6-8x rung 1, around 10 % of cuBLAS.
//
// Measured: the generated block below; the longer story: docs/worklog.md, rung notes.
// <measured>
// NVIDIA H200 4096x4096x4096: 21567.6 us, 6372 GFLOP/s, 13.0 % of cuBLAS, 32 registers
//   BS=32
//   (results/nvidia-h200/ladder/4096x4096x4096-20261201T195205Z.json)
// NVIDIA H200 4092x4092x4092: 21540.0 us, 6362 GFLOP/s, 13.9 % of cuBLAS, 32 registers
//   BS=32
//   (results/nvidia-h200/ladder/4092x4092x4092-20261201T195227Z.json)
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
