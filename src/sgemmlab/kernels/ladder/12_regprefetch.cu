// Rung 12 — register prefetch, with A transposed in shared memory.
//
// What changed from rung 11: two switches, both in the search space so all four combinations
// are measured. The file is rung 11's with the switches added: `diff ladder/11_cp_async.cu
// ladder/12_regprefetch.cu` shows exactly what they take.
// TRANSPOSE_A = 1: A is scattered into As[k][m] (rows of BM + PAD) by 4-byte cp.async copies
// (a 16-byte copy cannot transpose); a lane's TM values of A at one k are then TM/4 LDS.128,
// conflict-free, for 4x the copy instructions of A.
// REGPF = 1: two sets of fragment registers; while the FFMAs of step k use one, the shared
// loads of step k+1 fill the other. The first step of a tile still loads after the barrier.
//
// The bill (`sgemmlab inspect 12 --gpu h200 [--seed]`, BM=128 BN=64 BK=16 WM=64 WN=32 WNITER=1
// TM=8 TN=4 STAGES=3, 128 threads, per warp per tile):
//   seed (TRANSPOSE_A = REGPF = 1): 0.3125 shared words in 0.078 LDS.128 per FFMA (rung 11:
//   0.2656 loads), As reads 1-way; A copied by 16 cp.async.4 per thread (rung 11: 4
//   cp.async.16), 8192 B of sectors moved for 2048 B requested; 167 registers, 3 blocks/SM.
//   H200 default (TRANSPOSE_A = 0, REGPF = 1): rung 11's bill; 189 registers, 2 blocks/SM.
// REGPF changes no count: the same loads, issued a step earlier.
//
// Prediction: TRANSPOSE_A alone (17 shared loads per k -> 5 at this tile) +5-10 %; REGPF alone
// barely moves a kernel whose loads are scalar and conflicting: +-3 %; both: the loads few and
// early, +10-15 % over rung 11, near rung 10 or above it at 4096^3.
//
// Measured: the generated block below; the longer story: docs/worklog.md, rung notes.
// <measured>
// NVIDIA H200 4096x4096x4096: 3583.7 us, 38351 GFLOP/s, 77.9 % of cuBLAS, 189 registers
//   BK=16,BM=128,BN=64,PAD=4,REGPF=1,STAGES=3,TM=8,TN=4,TRANSPOSE_A=0,WM=64,WN=32,WNITER=1
//   (results/nvidia-h200/ladder/4096x4096x4096-20261201T195205Z.json)
// NVIDIA H200 4092x4092x4092: 3603.2 us, 38032 GFLOP/s, 82.9 % of cuBLAS, 189 registers
//   BK=16,BM=128,BN=64,PAD=4,REGPF=1,STAGES=3,TM=8,TN=4,TRANSPOSE_A=0,WM=64,WN=32,WNITER=1
//   (results/nvidia-h200/ladder/4092x4092x4092-20261201T195227Z.json)
// </measured>
#include "async_copy.cuh"
#include "common.cuh"

#ifndef TRANSPOSE_A
#define TRANSPOSE_A 0
#endif
#ifndef REGPF
#define REGPF 0
#endif

static_assert(BM > 0 && BN > 0 && BK > 0 && WM > 0 && WN > 0 && WNITER > 0 && TM > 0 && TN > 0 &&
                  STAGES > 0 && PAD >= 0 && TRANSPOSE_A >= 0 && REGPF >= 0,
              "every constant is positive (PAD, TRANSPOSE_A and REGPF may be 0)");
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
static_assert(TRANSPOSE_A <= 1 && REGPF <= 1, "TRANSPOSE_A and REGPF are 0 or 1");
static_assert((BM / WM) * (BN / WN) == 4 || (BM / WM) * (BN / WN) == 8,
              "4 or 8 warps per block (128 or 256 threads)");
static_assert(THREADS == (BM / WM) * (BN / WN) * 32, "THREADS is 32 lanes per warp tile");
static_assert(BM * BN / THREADS <= 64,
              "at most 64 accumulators per thread (rung 13 takes 128, with hoisted addressing)");
static_assert(THREADS <= 1024, "threads per block <= 1024");
static_assert(THREADS % 32 == 0, "threads per block is a multiple of 32 (whole warps)");

// Shared layout of one stage of A: As[m][k] with rows of BK + PAD, or As[k][m] with rows
// of BM + PAD when transposed.
constexpr int A_LD = TRANSPOSE_A ? BM + PAD : BK + PAD;
constexpr int A_STAGE = TRANSPOSE_A ? BK * (BM + PAD) : BM * (BK + PAD);
static_assert(STAGES * (A_STAGE + BK * BN) * sizeof(float) <= 48 * 1024,
              "static shared memory <= 49152 bytes");
__device__ __forceinline__ int a_at(int m, int k) { return TRANSPOSE_A ? k * A_LD + m : m * A_LD + k; }

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
        if (SGEMM_VEC4 && !TRANSPOSE_A) {
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
    // fragments: one set (REGPF = 0) or two, the next k's loading while this k's FFMAs issue
    float regM[1 + REGPF][WMITER * TM], regN[1 + REGPF][WNITER * TN];

    auto load_fragments = [&](int s, int k, int set) {
#pragma unroll
        for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
            for (int i = 0; i < TM; i += 4) {
                float* m = &regM[set][wm * TM + i];
                const int r = trow + wm * WSUBM + i;
                if (TRANSPOSE_A) {
                    const float4 a = *reinterpret_cast<const float4*>(&As[s][a_at(r, k)]);
                    m[0] = a.x, m[1] = a.y, m[2] = a.z, m[3] = a.w;
                } else {
#pragma unroll
                    for (int q = 0; q < 4; ++q) m[q] = As[s][a_at(r + q, k)];
                }
            }
#pragma unroll
        for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                const float4 b =
                    *reinterpret_cast<const float4*>(&Bs[s][k * BN + tcol + wn * WSUBN + j]);
                float* n = &regN[set][wn * TN + j];
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

        if (REGPF) load_fragments(read, 0, 0);
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const int cur = REGPF ? k % 2 : 0;
            if (REGPF) {
                if (k + 1 < BK) load_fragments(read, k + 1, (k + 1) % 2);
            } else {
                load_fragments(read, k, 0);
            }
#pragma unroll
            for (int i = 0; i < WMITER * TM; ++i)
#pragma unroll
                for (int j = 0; j < WNITER * TN; ++j) acc[i][j] += regM[cur][i] * regN[cur][j];
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
