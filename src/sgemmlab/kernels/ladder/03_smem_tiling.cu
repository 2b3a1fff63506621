// Rung 3 — shared-memory cache blocking: stage BS x BS tiles of A and B, reuse them BS times.
//
// What changed from rung 2: the block cooperatively copies a BS x BS tile of A and one of B
// into shared memory, waits at a barrier, and every thread then runs BS steps of k out of
// shared memory; a second barrier keeps the next copy from overwriting a tile still in use.
//
// The bill (`sgemmlab inspect 3 --gpu h200`, BS = 32, per warp per tile of 32 k): A+B global
// 256 B for 2048 FLOPs (8 FLOP/B; rung 2: 0.25): each element is fetched once per block tile
// instead of once per thread. But every FFMA still reads a word of As and one of Bs: 2 shared
// loads per FFMA, conflict-free (ptxas fuses the As reads along k: 32 LDS.32 + 8 LDS.128 per
// 32 FFMA in the SASS). Shared memory serves 32 words per cycle per SM against 128 FFMA
// lanes, so at 2 words per FFMA it feeds an eighth of the FFMA peak: inspect's shared-memory
// bound at 4096^3 is 16.95 ms. 32 registers, 2 blocks of 1024 threads per SM.
//
// Prediction: faster than rung 2 by about 1.5x, held under ~15 % of cuBLAS by that
// shared-memory ceiling (the profiler calls it "MIO throttle").
//
// Measured: the generated block below; the longer story: docs/worklog.md, rung notes.
// <measured>
// NVIDIA H200 4096x4096x4096: 16134.0 us, 8519 GFLOP/s, 17.3 % of cuBLAS, 32 registers
//   BS=32
//   (results/nvidia-h200/ladder/4096x4096x4096-20261201T195205Z.json)
// NVIDIA H200 4092x4092x4092: 16231.1 us, 8443 GFLOP/s, 18.4 % of cuBLAS, 32 registers
//   BS=32
//   (results/nvidia-h200/ladder/4092x4092x4092-20261201T195227Z.json)
// </measured>
#include "common.cuh"

static_assert(BS > 0, "every constant is positive (PAD and PREFETCH may be 0)");
static_assert(BS * BS <= 1024, "threads per block <= 1024");
static_assert(BS * BS % 32 == 0, "threads per block is a multiple of 32 (whole warps)");
static_assert(2 * BS * BS * sizeof(float) <= 48 * 1024, "static shared memory <= 49152 bytes");

SGEMM_KERNEL sgemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
                   const float* __restrict__ B, int ldb, float beta, float* __restrict__ C,
                   int ldc) {
    __shared__ float As[BS][BS];
    __shared__ float Bs[BS][BS];

    const int tx = threadIdx.x, ty = threadIdx.y;  // tx: column inside the tile
    const int row = blockIdx.y * BS + ty;
    const int col = blockIdx.x * BS + tx;
    const float* a = row_ptr(A, row, lda);

    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += BS) {
        // each thread copies one element of each tile, zero past the edges
        As[ty][tx] = load_or_zero(a, k0 + tx, K, row < M);
        Bs[ty][tx] = load_or_zero(row_ptr(B, k0 + ty, ldb), col, N, k0 + ty < K);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BS; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();  // the next copy must not overwrite tiles still being read
    }
    store_c(C, ldc, row, col, M, N, acc, alpha, beta);
}
