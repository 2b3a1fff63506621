// Rung 15 — skinny M: C = alpha A B + beta C for M <= 16, B streamed from DRAM once.
//
// Why: at 1x4096x4096 (a vector times a matrix) or 8..16 x N x K (a decode step) the bill is
// B's bytes, and rung 13 spends 723 us on one 256 x 128 tile walking all of K where the HBM
// floor is 15.9 us. Here a block covers RM rows (all of M when M <= RM) by BN columns, and
// K is split inside the block, so N = 4096 in 32-column blocks still fills 128 SMs.
// How B lies picks the structure (compile time, SGEMM_TB): row-major B runs along n, so lanes
// own columns and loop over k (membound/axpy.cuh); column-major B (a weight stored N x K)
// runs along k, so each output is a dot product (membound/dot.cuh). A (row- or column-major,
// SGEMM_TA) is the small operand T, staged in shared memory. One launch, no atomics: the
// partial sums meet in a fixed order (bit-identical run to run).
// Split-K (SPLIT, host-only; runtime/decompose.py plans it): when C's tiles are fewer than the
// GPU's block slots (1 x 2125 x 9240: 67 tiles of 32 columns for 132 SMs), K is cut into
// parts of whole quanta of KQ = 128 k (every part starts 16-byte aligned), one per
// blockIdx.z; each part runs the same structure on its range and stores raw sums in its own
// workspace slot, and the last part to arrive adds the slots in part order (splitk.cuh):
// still bit-identical run to run. SPLIT = 0 chooses the parts per shape, 1 never splits.
//
// The bill: B once from DRAM (4KN bytes), C once (4MN, read too when beta != 0), A once per
// block from L2: RM/BN bytes per byte of B (1/32 at RM = 1, 1/2 at RM = 16, BN = 32). In
// flight: THREADS * UNROLL * 16 B per block (axpy), THREADS * NC * DU * 16 B (dot). Seed
// RM=8 BN=32 WARPS=16 UNROLL=4 (`sgemmlab build -k 15`, sm_90): axpy 126 registers, one
// 512-thread block and 32 KB in flight per SM; dot (NC = DU = 2) 64 registers, two blocks,
// 64 KB; 33 KB of shared memory in both; no spills in any variant.
//
// Prediction, against the floor = bytes of A, B, C / 4.23 TB/s (RM >= M, the tuned BN):
//   1x4096x4096    floor 15.9 us: ~18 us (88 %; 128 blocks on 132 SMs)
//   8x4096x4096    floor 15.9 us: ~19 us (84 %; A from L2 adds 1/4 of B's bytes)
//   16x11008x4096  floor 42.9 us: ~55 us (78 %; FFMA at half of peak, 2.6 waves of blocks)
//   4096x1x4096, 4096x4096x8: not served (rungs 16 and 17).
// Split-K (session 6; one part: 67 blocks, measured 68 us through matmul at 52 % of
// torch.matmul): 1x2125x9240, floor 18.6 us: parts for two waves of blocks: ~22 us (85 %).
//
// <measured>
// H200, paired with cuBLAS (docs/worklog.md, sessions 4 and 6): 1x1024x16384 split 41.3 us,
// 96.2 % (unsplit 65.6 us, 69.7 %: results/nvidia-h200/table/grid-20261201T150405Z.json.xz);
// the vector and decode suites: bench/vector-decode-tinyk-20261201T100213Z.json.xz.
// </measured>
#include "membound/skinny.cuh"

SKINNY_RULES(RM, BN, "rows", "columns");
constexpr int SMEM_FLOATS = Skinny<RM, BN>::SMEM_FLOATS;

SGEMM_KERNEL __launch_bounds__(THREADS)
sgemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
      const float* __restrict__ B, int ldb, float beta, float* __restrict__ C,
      int ldc SGEMM_SOURCE_PARAMS, int split, float* __restrict__ partials,
      int* __restrict__ counters) {
    __shared__ __align__(16) float smem[SMEM_FLOATS];  // the same size in both structures
    const int m0 = blockIdx.y * RM, n0 = blockIdx.x * BN;
    long long k0;  // the block's part of K (blockIdx.z of split), whole quanta
    int Kp;
    split_k_range<KQ>(K, blockIdx.z, split, k0, Kp);
    const float* T = SGEMM_TA ? A + m0 + k0 * lda : row_ptr(A, m0, lda) + k0;  // A's rows
    // one part: C itself; several: the part's slot of the workspace, raw sums (alpha 1,
    // beta 0), laid out as the tile of C (splitk.cuh)
    const int tile = blockIdx.y * gridDim.x + blockIdx.x;
    float* slots = partials + static_cast<long long>(tile) * split * (RM * BN);
    float* O = split == 1 ? row_ptr(C, m0, ldc) + n0 : slots + blockIdx.z * (RM * BN);
    const int ldo = split == 1 ? ldc : BN;
    const float a = split == 1 ? alpha : 1.0f, b = split == 1 ? beta : 0.0f;
    const Source src = SGEMM_SOURCE_ARG.at(m0, n0);  // read by the sum into C alone
#if SGEMM_TB  // B's columns run along k: dot products of A's rows with B's columns
    dot_tile<RM, BN, WARPS, UNROLL, !SGEMM_TA, false>(row_ptr(B, n0, ldb) + k0, ldb, T, lda, O,
                                                      ldo, M - m0, N - n0, Kp, a, b, smem,
                                                      src);
#else  // B's rows run along n: lanes own columns, loop over k
    axpy_tile<RM, BN, WARPS, UNROLL, !SGEMM_TA, false>(B + n0 + k0 * ldb, ldb, T, lda, O, ldo,
                                                       M - m0, N - n0, Kp, a, b, smem, src);
#endif
    if (split > 1 && split_arrive_last(counters + tile, split)) {
        split_sum_tile<RM, BN, false, THREADS>(slots, split, row_ptr(C, m0, ldc) + n0, ldc,
                                               M - m0, N - n0, alpha, beta, src);
        split_done(counters + tile);
    }
}
