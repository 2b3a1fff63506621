// Rung 11 — cp.async multistage pipeline.
//
// What changed from rung 10: the copy. Rung 10 moved each tile global -> registers -> shared
// into one buffer. Here every thread issues cp.async copies straight from global into shared
// memory, into a ring of STAGES buffers: while the block computes on tile t in stage
// t % STAGES, the copies of tiles t+1 .. t+STAGES-1 are in flight. cp.async.wait_group waits
// for the thread's own copies of a tile, and one __syncthreads() publishes everybody's and
// frees the stage read in the step before: one barrier per tile instead of two. A 16-byte
// cp.async cannot transpose, so A keeps its row-major layout (As[m][k], rows padded by PAD)
// and a lane reads its TM values of A at one k as TM scalar loads. A copy past the edge is
// zero-filled (async_copy.cuh). Rung 12 adds two switches to this file (its own copy).
//
// The bill (`sgemmlab inspect 11 --gpu h200`; H200 default = seed BM=128 BN=64 BK=16 WM=64
// WN=32 WNITER=1 TM=8 TN=4 STAGES=3, 128 threads): A+B global 3072 B for 65536 FLOPs per warp
// per tile (21.33 FLOP/B); per tile per thread 4 cp.async.16 of A and 2 of B, nothing through
// registers; 0.3125 shared words in 0.2656 loads per FFMA: per k 16 LDS.32 of A, 4-way
// (lanes TM rows = 160 words apart), and 1 LDS.128 of B; 43008 B of shared memory; 193
// registers, 2 blocks (8 warps) per SM. The SASS has 80 LDS.128 + 3 LDS.32 per tile, not the
// source's 272 loads: ptxas fuses the A reads along k.
//
// Prediction: the copy wait disappears with STAGES >= 3, but the scalar, conflicting A reads
// cost more issue slots than rung 10's float4 reads: 80-90 % of cuBLAS at 4096^3, no better
// than rung 10, the winner at TM = 4 (fewer A conflicts).
//
// Measured: the generated block below; the longer story: docs/worklog.md, rung notes.
// <measured>
// NVIDIA H200 4096x4096x4096: 3587.2 us, 38313 GFLOP/s, 77.4 % of cuBLAS, 193 registers
//   BK=16,BM=128,BN=64,PAD=4,STAGES=3,TM=8,TN=4,WM=64,WN=32,WNITER=1
//   (results/nvidia-h200/ladder/4096x4096x4096-20261201T195205Z.json)
// NVIDIA H200 4092x4092x4092: 3609.3 us, 37968 GFLOP/s, 82.8 % of cuBLAS, 193 registers
//   BK=16,BM=128,BN=64,PAD=4,STAGES=3,TM=8,TN=4,WM=64,WN=32,WNITER=1
//   (results/nvidia-h200/ladder/4092x4092x4092-20261201T195227Z.json)
// </measured>
#include "async_copy.cuh"
#include "common.cuh"

static_assert(BM > 0 && BN > 0 && BK > 0 && WM > 0 && WN > 0 && WNITER > 0 && TM > 0 && TN > 0 &&
                  STAGES > 0 && PAD >= 0,
              "every constant is positive (PAD may be 0)");
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
              "BK is a multiple of 4 and BN, BM of 4 (16-byte copies)");
static_assert(TM % 4 == 0 && TN % 4 == 0,
              "TM and TN are multiples of 4 (float4 shared-memory reads)");
static_assert(PAD % 4 == 0, "PAD is a multiple of 4 (keeps 16-byte copies and reads aligned)");
static_assert(STAGES >= 2 && STAGES <= 8, "2 to 8 stages");
static_assert((BM / WM) * (BN / WN) == 4 || (BM / WM) * (BN / WN) == 8,
              "4 or 8 warps per block (128 or 256 threads)");
static_assert(THREADS == (BM / WM) * (BN / WN) * 32, "THREADS is 32 lanes per warp tile");
static_assert(BM * BN / THREADS <= 64,
              "at most 64 accumulators per thread (rung 13 takes 128, with hoisted addressing)");
static_assert(THREADS <= 1024, "threads per block <= 1024");
static_assert(THREADS % 32 == 0, "threads per block is a multiple of 32 (whole warps)");

// Shared layout of one stage of A: As[m][k] with rows of BK + PAD.
constexpr int A_LD = BK + PAD;
constexpr int A_STAGE = BM * (BK + PAD);
static_assert(STAGES * (A_STAGE + BK * BN) * sizeof(float) <= 48 * 1024,
              "static shared memory <= 49152 bytes");
__device__ __forceinline__ int a_at(int m, int k) { return m * A_LD + k; }

// Issue the copies of tile k0 (A: rows row0.., B: columns col0..) into one stage.
__device__ __forceinline__ void copy_tile(float* As, float* Bs, const float* A, int lda,
                                          const float* B, int ldb, int rows, int cols, int K,
                                          int k0, int tid) {
    // A: BM x BK in granules of 4 consecutive k of one row
#pragma unroll
    for (int t = 0; t < ceil_div(BM * BK / 4, THREADS); ++t) {
        const int i = tid + t * THREADS, r = i / (BK / 4), c = i % (BK / 4) * 4;
        if (i >= BM * BK / 4) continue;  // only when THREADS does not divide the granules
        const float* src = row_ptr(A, r, lda) + k0 + c;
        const bool row_ok = r < rows;
        if (SGEMM_VEC4) {
            const int bytes = row_ok ? 4 * max(0, min(4, K - (k0 + c))) : 0;
            cp_async16(&As[a_at(r, c)], bytes ? src : A, bytes);
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const bool ok = row_ok && k0 + c + j < K;
                cp_async4(&As[a_at(r, c + j)], ok ? src + j : A, ok ? 4 : 0);
            }
        }
    }
    // B: BK x BN in granules of 4 consecutive columns of one row
#pragma unroll
    for (int t = 0; t < ceil_div(BK * BN / 4, THREADS); ++t) {
        const int i = tid + t * THREADS, r = i / (BN / 4), c = i % (BN / 4) * 4;
        if (i >= BK * BN / 4) continue;
        const float* src = row_ptr(B, k0 + r, ldb) + c;
        const bool row_ok = k0 + r < K;
        if (SGEMM_VEC4) {
            const int bytes = row_ok ? 4 * max(0, min(4, cols - c)) : 0;
            cp_async16(&Bs[r * BN + c], bytes ? src : B, bytes);
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const bool ok = row_ok && c + j < cols;
                cp_async4(&Bs[r * BN + c + j], ok ? src + j : B, ok ? 4 : 0);
            }
        }
    }
}

SGEMM_KERNEL __launch_bounds__(THREADS, 1)  // 1 block/SM suffices: no register cap below 255
sgemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
      const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    constexpr int WSUBM = WM / WMITER, WSUBN = WN / WNITER;
    __shared__ __align__(16) float As[STAGES][A_STAGE];
    __shared__ __align__(16) float Bs[STAGES][BK * BN];

    const int tid = threadIdx.x;
    __builtin_assume(tid < THREADS);
    const int warp = tid / 32, lane = tid % 32;
    const int wr = warp / (BN / WN), wc = warp % (BN / WN);
    const int lr = lane / (WSUBN / TN), lc = lane % (WSUBN / TN);
    const int trow = wr * WM + lr * TM, tcol = wc * WN + lc * TN;

    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    A = row_ptr(A, row0, lda);
    B += col0;
    C = row_ptr(C, row0, ldc) + col0;
    const int rows = M - row0, cols = N - col0;
    const int tiles = ceil_div(K, BK);

    float acc[WMITER * TM][WNITER * TN] = {};
    float regM[WMITER * TM], regN[WNITER * TN];  // one k's fragments

    auto load_fragments = [&](int s, int k) {
#pragma unroll
        for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
            for (int i = 0; i < TM; i += 4) {
                const int r = trow + wm * WSUBM + i;
#pragma unroll
                for (int q = 0; q < 4; ++q) regM[wm * TM + i + q] = As[s][a_at(r + q, k)];
            }
#pragma unroll
        for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                const float4 b =
                    *reinterpret_cast<const float4*>(&Bs[s][k * BN + tcol + wn * WSUBN + j]);
                float* n = &regN[wn * TN + j];
                n[0] = b.x, n[1] = b.y, n[2] = b.z, n[3] = b.w;
            }
    };

    // Prologue: tiles 0 .. STAGES-2 in flight, one commit group each (empty past the end,
    // so that "at most STAGES-2 groups pending" always means "the oldest tile has landed").
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < tiles) copy_tile(As[s], Bs[s], A, lda, B, ldb, rows, cols, K, s * BK, tid);
        cp_async_commit();
    }
    cp_async_wait<STAGES - 2>();
    __syncthreads();

    int read = 0, write = STAGES - 1;
    for (int t = 0; t < tiles; ++t) {
        // the stage `write` was read in step t-1, which every thread finished before the
        // barrier that ended it
        if (t + STAGES - 1 < tiles)
            copy_tile(As[write], Bs[write], A, lda, B, ldb, rows, cols, K,
                      (t + STAGES - 1) * BK, tid);
        cp_async_commit();

#pragma unroll
        for (int k = 0; k < BK; ++k) {
            load_fragments(read, k);
#pragma unroll
            for (int i = 0; i < WMITER * TM; ++i)
#pragma unroll
                for (int j = 0; j < WNITER * TN; ++j) acc[i][j] += regM[i] * regN[j];
        }

        cp_async_wait<STAGES - 2>();  // tile t+1 has landed (this thread's part of it) ...
        __syncthreads();              // ... everybody's, and stage `read` is free
        read = read + 1 == STAGES ? 0 : read + 1;
        write = write + 1 == STAGES ? 0 : write + 1;
    }
    cp_async_wait<0>();  // no copy may outlive the block (they are all empty groups by now)

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
