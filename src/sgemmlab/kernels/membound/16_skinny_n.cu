// Rung 16 — skinny N: C = alpha A B + beta C for N <= 16, A streamed from DRAM once.
//
// Why: 4096x1x4096 (a matrix times a vector) takes rung 13 808 us against a 15.9 us floor.
// This is rung 15 transposed: C^T = B^T A^T, so A is the streamed operand and B^T the small
// one, and the same two structures serve: row-major A runs along k, so each output is a dot
// product of a row of A with a column of B (membound/dot.cuh: a warp per NC rows of A,
// lanes along k); column-major A runs along m, so lanes own rows of C and loop over k
// (membound/axpy.cuh, K split inside the block). B (either layout, SGEMM_TB) is staged in
// shared memory; C is written transposed from the structures' point of view. A block covers
// BM rows by RN columns of C; rows go on blockIdx.x (2^31 - 1 blocks), N on blockIdx.y.
// One launch, no atomics, sums in a fixed order: bit-identical run to run. Split-K as in
// rung 15 (SPLIT; parts of whole quanta of 128 k on blockIdx.z, slots added in part order).
//
// The bill: A once from DRAM (4MK bytes), C once (4MN), B once per block from L2: RN/BM
// bytes per byte of A (1/32 at RN = 1, BM = 32). In flight per lane: NC * DU float4 (dot,
// NC = BM/WARPS rows of A per warp) or UNROLL (axpy). Seed RN=8 BM=32 WARPS=16 UNROLL=4,
// rung 15's transposed (`sgemmlab build -k 16`, sm_90): dot (NC = DU = 2) 64 registers, two
// 512-thread blocks and 64 KB in flight per SM; axpy 102-126 registers, one block, 32 KB;
// 33 KB of shared memory in both; no spills in any variant.
//
// Prediction, against the floor = bytes of A, B, C / 4.23 TB/s (RN >= N, the tuned BM):
//   4096x1x4096   floor 15.9 us: ~18 us (88 %; 128 blocks of 32 rows, 2 rows per warp)
//   1x4096x4096, 8x4096x4096, 16x11008x4096, 4096x4096x8: not served (rungs 15 and 17;
//   their transposes, 4096x8x4096 and 11008x16x4096, predict as rung 15's 19 and 55 us).
// Split-K (session 6; one part: 19 blocks, 66.7 us through matmul): 592x1x13251, floor
// 7.4 us: parts for two waves of blocks: ~10 us (75 %; the last part's fix-up is serial).
//
// <measured>
// H200, paired with cuBLAS (docs/worklog.md, sessions 4 and 6): 1024x1x16384 split 46.8 us,
// 94.1 % (results/nvidia-h200/table/grid-20261201T150405Z.json.xz); the vector suite:
// results/nvidia-h200/bench/vector-decode-tinyk-20261201T100213Z.json.xz.
// </measured>
#include "membound/skinny.cuh"

SKINNY_RULES(RN, BM, "columns", "rows");
constexpr int SMEM_FLOATS = Skinny<RN, BM>::SMEM_FLOATS;

SGEMM_KERNEL __launch_bounds__(THREADS)
sgemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
      const float* __restrict__ B, int ldb, float beta, float* __restrict__ C,
      int ldc SGEMM_SOURCE_PARAMS, int split, float* __restrict__ partials,
      int* __restrict__ counters) {
    __shared__ __align__(16) float smem[SMEM_FLOATS];  // the same size in both structures
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * RN;
    long long k0;  // the block's part of K (blockIdx.z of split), whole quanta
    int Kp;
    split_k_range<KQ>(K, blockIdx.z, split, k0, Kp);
    // B^T's rows (B's columns), from k0 on
    const float* T = SGEMM_TB ? row_ptr(B, n0, ldb) + k0 : B + n0 + k0 * ldb;
    // one part: C itself (O(n, m) = C(m, n)); several: the part's slot of the workspace,
    // raw sums (alpha 1, beta 0), laid out as the tile of C (splitk.cuh)
    const int tile = blockIdx.y * gridDim.x + blockIdx.x;
    float* slots = partials + static_cast<long long>(tile) * split * (RN * BM);
    float* O = split == 1 ? row_ptr(C, m0, ldc) + n0 : slots + blockIdx.z * (RN * BM);
    const int ldo = split == 1 ? ldc : RN;
    const float a = split == 1 ? alpha : 1.0f, b = split == 1 ? beta : 0.0f;
    const Source src = SGEMM_SOURCE_ARG.at(m0, n0);  // read by the sum into C alone
#if SGEMM_TA  // A's columns run along m: lanes own rows of C, loop over k
    axpy_tile<RN, BM, WARPS, UNROLL, SGEMM_TB != 0, true>(A + m0 + k0 * lda, lda, T, ldb, O, ldo,
                                                          N - n0, M - m0, Kp, a, b, smem,
                                                          src);
#else  // A's rows run along k: dot products of A's rows with B's columns
    dot_tile<RN, BM, WARPS, UNROLL, SGEMM_TB != 0, true>(row_ptr(A, m0, lda) + k0, lda, T, ldb,
                                                         O, ldo, N - n0, M - m0, Kp, a, b, smem,
                                                         src);
#endif
    if (split > 1 && split_arrive_last(counters + tile, split)) {
        split_sum_tile<RN, BM, true, THREADS>(slots, split, row_ptr(C, m0, ldc) + n0, ldc,
                                              N - n0, M - m0, alpha, beta, src);
        split_done(counters + tile);
    }
}
