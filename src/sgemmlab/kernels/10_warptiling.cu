// Rung 10 — warptiling: block tile, warp tile, thread tile.
//
// What changed from rung 8/9: a level between the block and the thread. The block tile
// BM x BN is cut into (BM/WM) x (BN/WN) warp tiles, one per warp. A warp computes its WM x WN
// tile as WMITER x WNITER sub-tiles of WSUBM x WSUBN (WSUBM = WM/WMITER, WSUBN = WN/WNITER),
// and in every sub-tile each lane owns the same TM x TN piece: the 32 lanes form
// (WSUBM/TM) rows x (WSUBN/TN) columns of pieces. So a lane's outputs are WMITER x WNITER
// pieces spaced WSUBM rows and WSUBN columns apart, and per step of k it loads WMITER*TM
// values of A and WNITER*TN of B (regM, regN) and does all (WMITER*TM) x (WNITER*TN) FFMAs
// of their outer product. The copies into shared memory, the padded transposed As and the
// float4 accesses are rung 8's.
//
// Why: the warp is what the hardware schedules and what touches shared memory at once. In
// rung 8 the 32 lanes of a warp covered a thin strip of the block tile (one or two rows of
// patches); here they cover a compact WSUBM x WSUBN sub-tile, so the As and Bs words a warp
// reads per step of k are few and reused by several lanes, and the spacing of the pieces
// keeps 8 lanes of a phase on 32 consecutive words of Bs (TN = 4: 16-byte pieces side by
// side, no conflict; lanes of other rows of the sub-tile read the same words, a broadcast).
// The As reads of a phase touch at most 4 rows of pieces, TM words apart: no conflict for
// any configuration of the space (it would take 8 rows of lanes in a phase at TM = 8,
// i.e. WSUBN = TN, WSUBM = 256). Each thread also owns more outputs (WM*WN/32, up to 128),
// so more independent FFMAs per load and per barrier.
//
// The bill (seed BM=128 BN=128 BK=16 WM=64 WN=64 WNITER=4 TM=8 TN=4: WMITER=1, sub-tiles
// 64 x 16, 128 threads, 128 outputs per thread): global bytes per FLOP 2 * (BM + BN) /
// (BM * BN) = 0.031 B/FLOP; shared words per FFMA (WMITER*TM + WNITER*TN) / (WMITER*TM *
// WNITER*TN) = 24 / 128 = 0.19 (rung 8: 0.25), in 2 + 4 = 6 LDS.128 per k for 128 FFMA:
// 0.047 LDS per FFMA (rung 8: 0.0625). Transposing stores: BM*BK/THREADS = 16 STS per thread
// per tile, 2-way at BK = 16 with PAD = 4 (see rung 8).
//
// Registers (seed, 128 threads, sm_90): 175 with SGEMM_VEC4=1, 179 with the scalar fallback;
// no spills: 128 accumulators + 8 + 16 fragment values + indices. Two blocks (8 warps) per SM.
//
// Prediction: 10-20 % over rung 9 (the original ladder on the H200: +16 %), about 75-85 % of
// cuBLAS (~51 TFLOP/s at 4096^3 on the H200, FFMA peak ~64) once tuned.
//
// Measured: see the generated block at the end of this header.
// <measured>
// </measured>
#include "common.cuh"

static_assert(BM % WM == 0 && BN % WN == 0, "BM is a multiple of WM and BN of WN");
static_assert((WM * WN) % (32 * TM * TN * WNITER) == 0 && WM * WN >= 32 * TM * TN * WNITER,
              "a warp's 32 lanes times TM x TN times WNITER divides the warp tile WM x WN "
              "(WMITER = WM*WN / (32*TM*TN*WNITER) is a whole number >= 1)");
static_assert(WMITER == WM * WN / (32 * TM * TN * WNITER),
              "WMITER is WM*WN / (32*TM*TN*WNITER), as the registry derives it");
static_assert(WM % WMITER == 0 && WN % WNITER == 0,
              "WM is a multiple of WMITER and WN of WNITER");
static_assert((WM / WMITER) % TM == 0 && (WN / WNITER) % TN == 0 &&
                  ((WM / WMITER) / TM) * ((WN / WNITER) / TN) == 32,
              "the warp sub-tile (WM/WMITER) x (WN/WNITER) is 32 lanes of TM x TN");
static_assert(BK % 4 == 0 && BN % 4 == 0 && BM % 4 == 0,
              "BK is a multiple of 4 and BN, BM of 4 (float4 copies)");
static_assert(TM % 4 == 0 && TN % 4 == 0,
              "TM and TN are multiples of 4 (float4 shared-memory reads)");
static_assert(PAD % 4 == 0, "PAD is a multiple of 4 (keeps float4 reads of the A tile aligned)");
static_assert((BM / WM) * (BN / WN) == 4 || (BM / WM) * (BN / WN) == 8,
              "4 or 8 warps per block (128 or 256 threads)");
static_assert(THREADS == (BM / WM) * (BN / WN) * 32, "THREADS is 32 lanes per warp tile");
static_assert(BM * BN / THREADS <= 128,
              "at most 128 accumulators per thread (register budget: 255 registers)");
static_assert(THREADS <= 1024, "threads per block <= 1024");
static_assert(THREADS % 32 == 0, "threads per block is a multiple of 32 (whole warps)");
static_assert((BK * (BM + PAD) + BK * BN) * sizeof(float) <= 48 * 1024,
              "static shared memory <= 49152 bytes");

SGEMM_KERNEL __launch_bounds__(THREADS)
sgemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
      const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    constexpr int WSUBM = WM / WMITER, WSUBN = WN / WNITER;  // the warp's sub-tile
    __shared__ __align__(16) float As[BK][BM + PAD];  // transposed, rows padded (rung 8)
    __shared__ __align__(16) float Bs[BK][BN];

    const int tid = threadIdx.x;
    __builtin_assume(tid < THREADS);  // lets the compiler count the copy loops' trips
    const int warp = tid / 32, lane = tid % 32;
    const int wr = warp / (BN / WN), wc = warp % (BN / WN);  // the warp's tile in the block's
    const int lr = lane / (WSUBN / TN), lc = lane % (WSUBN / TN);  // the lane's piece
    // the lane's first output, (sub-tile 0, 0), in the block tile; the others are
    // WSUBM rows and WSUBN columns apart
    const int trow = wr * WM + lr * TM, tcol = wc * WN + lc * TN;

    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    A = row_ptr(A, row0, lda);
    B += col0;
    C = row_ptr(C, row0, ldc) + col0;
    const int rows = M - row0, cols = N - col0;

    float acc[WMITER * TM][WNITER * TN] = {};
    float regM[WMITER * TM], regN[WNITER * TN];
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
            // the lane's column of A and row of B across all its sub-tiles
#pragma unroll
            for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
                for (int i = 0; i < TM; i += 4) {
                    const float4 a =
                        *reinterpret_cast<const float4*>(&As[k][trow + wm * WSUBM + i]);
                    float* m = &regM[wm * TM + i];
                    m[0] = a.x, m[1] = a.y, m[2] = a.z, m[3] = a.w;
                }
#pragma unroll
            for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
                for (int j = 0; j < TN; j += 4) {
                    const float4 b =
                        *reinterpret_cast<const float4*>(&Bs[k][tcol + wn * WSUBN + j]);
                    float* n = &regN[wn * TN + j];
                    n[0] = b.x, n[1] = b.y, n[2] = b.z, n[3] = b.w;
                }
#pragma unroll
            for (int i = 0; i < WMITER * TM; ++i)
#pragma unroll
                for (int j = 0; j < WNITER * TN; ++j) acc[i][j] += regM[i] * regN[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
                for (int j = 0; j < TN; j += 4) {
                    const float* a = &acc[wm * TM + i][wn * TN + j];
                    store4_c(C, ldc, trow + wm * WSUBM + i, tcol + wn * WSUBN + j, rows, cols,
                             make_float4(a[0], a[1], a[2], a[3]), alpha, beta);
                }
}
