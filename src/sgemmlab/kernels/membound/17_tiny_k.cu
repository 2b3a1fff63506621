// Rung 17 — tiny K: C = alpha A B + beta C for K <= 16 (outer products and their sums).
//
// Why: at 4096x4096x8 the bill is C's bytes, written once (read once more when beta != 0);
// A and B are 1/256 of them. Rung 13 pipelines k-tiles where there is nothing to pipeline
// (4096x4096x1: 58.9 us; cuBLAS 30.1, floor 15.9). Here a block stages its BM x K rows of A
// and K x BN columns of B in shared memory once (either layout, SGEMM_TA / SGEMM_TB; zero
// past K and the edges); each thread keeps its four columns of B for every k in registers
// and walks TM rows, BM/TM apart, four at a time (with beta != 0 their old C in flight
// together; beta == 0 never reads C). A warp stores 128 consecutive columns of a row: one
// 512-byte STG.128 under SGEMM_VEC4, four coalesced STG.32 without. The k loop is compiled
// for K rounded up to 1, 2, 4, 8 or 16 (zeros pad the rest): no predicate inside it. Rows go
// on blockIdx.x (2^31 - 1 blocks), column tiles of 128 or more on blockIdx.y (N <= 65535*128).
//
// The bill: C once (4MN bytes written, twice with beta != 0); A from L2 once per column of
// blocks, B once per row of blocks: K(1/BN + 1/BM) bytes per byte of C (0.19 at K = 16 for
// the seed, 0.09 at K = 8); 4K FFMA per float4 stored (half the SM's rate at K = 16 at the
// floor's pace). Seed BM=256 BN=128 TM=32: 256 threads, 118 registers (2 blocks per SM),
// 24 KB of shared memory (`sgemmlab build -k 17`, sm_90); no spills in any variant.
//
// Prediction, against the floor = bytes of A, B, C / 4.23 TB/s:
//   4096x4096x8   floor 15.9 us: ~18 us (88 %; 512 blocks of 256 x 128, stores only)
//   4096x4096x1   floor 15.9 us: ~18 us; with beta != 0 twice the bytes, ~35 us
//   1x4096x4096, 4096x1x4096, 8x4096x4096, 16x11008x4096: not served (K > 16).
//
// <measured>
// Measured on the H200 through dispatch (`sgemmlab bench -k auto`, at the H200
// default): results/nvidia-h200/bench-vector-decode-tinyk-20261201T100213Z.json;
// against the prediction: docs/worklog.md, session 4, the memory-bound family.
// </measured>
#include "common.cuh"

constexpr int KMAX = 16;                   // the largest K served
constexpr int CX = BN / 4 > 0 ? BN / 4 : 1;  // threads across a row of the tile
constexpr int RY = TM > 0 ? BM / TM : 1;     // rows of threads: a thread's rows are RY apart
constexpr int G = 4;                       // rows a thread finishes together
constexpr int LIVE = 4 * KMAX + 4 * G + 4 + 24;

static_assert(BM > 0 && BN > 0 && TM > 0, "every constant is positive (PAD and PREFETCH may be 0)");
static_assert(BN % 128 == 0,
              "BN is a multiple of 128 (a warp stores 128 consecutive columns of a row)");
static_assert(BM % TM == 0, "BM is a multiple of TM");
static_assert(TM % G == 0, "TM is a multiple of 4 (a thread's rows go four at a time)");
static_assert(LIVE <= (65536 / THREADS < 255 ? 65536 / THREADS : 255),
              "4*16 values of B, 4*4 of C and 28 for the sums, pointers and indices fit a "
              "thread's registers: min(255, 65536 / threads per block)");
static_assert(THREADS == CX * RY, "THREADS is BN/4 x BM/TM");
static_assert(THREADS <= 1024, "threads per block <= 1024");
static_assert(THREADS % 32 == 0, "threads per block is a multiple of 32 (whole warps)");
static_assert((BM + BN) * KMAX * sizeof(float) <= 48 * 1024,
              "static shared memory <= 49152 bytes");

// A thread's four columns of the tile: col, col + STEP, col + 2 STEP, col + 3 STEP. Under
// SGEMM_VEC4 they are consecutive (one float4); without it a warp's lanes take consecutive
// columns (32 apart for one lane), so every scalar store of a warp fills 128 bytes.
constexpr int STEP = SGEMM_VEC4 ? 1 : 32;

__device__ __forceinline__ float4 load4_c(const float* c, int col, int cols) {
    if (STEP == 1) return load4_or_zero(c, col, cols, true);
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (col + 0 * STEP < cols) v.x = c[col + 0 * STEP];
    if (col + 1 * STEP < cols) v.y = c[col + 1 * STEP];
    if (col + 2 * STEP < cols) v.z = c[col + 2 * STEP];
    if (col + 3 * STEP < cols) v.w = c[col + 3 * STEP];
    return v;
}

// Store the four; one 16-byte store when aligned and all four inside.
__device__ __forceinline__ void store4(float* c, int col, int cols, float4 v) {
#if SGEMM_VEC4
    if (col + 3 < cols) {
        *reinterpret_cast<float4*>(c + col) = v;
        return;
    }
#endif
    if (col + 0 * STEP < cols) c[col + 0 * STEP] = v.x;
    if (col + 1 * STEP < cols) c[col + 1 * STEP] = v.y;
    if (col + 2 * STEP < cols) c[col + 2 * STEP] = v.z;
    if (col + 3 * STEP < cols) c[col + 3 * STEP] = v.w;
}

// The thread's TM rows (ty, ty + RY, ...) by its four columns, K rounded up to KK.
template <int KK>
__device__ __forceinline__ void outer(const float (&As)[BM][KMAX], const float (&Bs)[KMAX][BN],
                                      float* C, int ldc, int rows, int cols, float alpha,
                                      float beta, int ty, int col) {
    float4 b[KK];
#pragma unroll
    for (int k = 0; k < KK; ++k)
        b[k] = STEP == 1 ? *reinterpret_cast<const float4*>(&Bs[k][col])
                         : make_float4(Bs[k][col], Bs[k][col + STEP], Bs[k][col + 2 * STEP],
                                       Bs[k][col + 3 * STEP]);
    // rows go G at a time: with beta != 0 their old values of C are in flight together
#pragma unroll 1
    for (int i0 = 0; i0 < TM; i0 += G) {
        if (ty + i0 * RY >= rows) break;  // rows only grow with i
        float4 old[G];
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const int r = ty + (i0 + g) * RY;
            old[g] = beta != 0.0f && r < rows ? load4_c(row_ptr(C, r, ldc), col, cols)
                                              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const int r = ty + (i0 + g) * RY;
            if (r >= rows) break;
            float a[KK];
            if constexpr (KK >= 4) {
#pragma unroll
                for (int k = 0; k < KK; k += 4) {
                    const float4 q = *reinterpret_cast<const float4*>(&As[r][k]);
                    a[k] = q.x, a[k + 1] = q.y, a[k + 2] = q.z, a[k + 3] = q.w;
                }
            } else {
#pragma unroll
                for (int k = 0; k < KK; ++k) a[k] = As[r][k];
            }
            float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int k = 0; k < KK; ++k) {
                acc.x = fmaf(a[k], b[k].x, acc.x);
                acc.y = fmaf(a[k], b[k].y, acc.y);
                acc.z = fmaf(a[k], b[k].z, acc.z);
                acc.w = fmaf(a[k], b[k].w, acc.w);
            }
            float4 out;
            if (beta == 0.0f) {
                out = make_float4(alpha * acc.x, alpha * acc.y, alpha * acc.z, alpha * acc.w);
            } else {
                out = make_float4(
                    alpha * acc.x + beta * old[g].x, alpha * acc.y + beta * old[g].y,
                    alpha * acc.z + beta * old[g].z, alpha * acc.w + beta * old[g].w);
            }
            store4(row_ptr(C, r, ldc), col, cols, out);
        }
    }
}

SGEMM_KERNEL __launch_bounds__(THREADS)
sgemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
      const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    __shared__ __align__(16) float As[BM][KMAX];  // the block's rows of A, [m][k]
    __shared__ __align__(16) float Bs[KMAX][BN];  // the block's columns of B, [k][n]
    const int tid = threadIdx.x;
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int rows = M - m0, cols = N - n0;  // of the tile, inside C (>= 1)
    // staged once, zero past K and the edges; consecutive threads read consecutive addresses
#pragma unroll
    for (int i = tid; i < BM * KMAX; i += THREADS) {
        const int r = SGEMM_TA ? i % BM : i / KMAX, k = SGEMM_TA ? i / BM : i % KMAX;
        float v = 0.0f;
        if (r < rows && k < K)
            v = SGEMM_TA ? row_ptr(A, k, lda)[m0 + r] : row_ptr(A, m0 + r, lda)[k];
        As[r][k] = v;
    }
#pragma unroll
    for (int i = tid; i < KMAX * BN; i += THREADS) {
        const int c = SGEMM_TB ? i / KMAX : i % BN, k = SGEMM_TB ? i % KMAX : i / BN;
        float v = 0.0f;
        if (c < cols && k < K)
            v = SGEMM_TB ? row_ptr(B, n0 + c, ldb)[k] : row_ptr(B, k, ldb)[n0 + c];
        Bs[k][c] = v;
    }
    __syncthreads();
    const int ty = tid / CX, tx = tid % CX;
    const int col = STEP == 1 ? 4 * tx : tx / 32 * 128 + tx % 32;  // the first of its four
    float* Ct = row_ptr(C, m0, ldc) + n0;
    if (K <= 1)
        outer<1>(As, Bs, Ct, ldc, rows, cols, alpha, beta, ty, col);
    else if (K <= 2)
        outer<2>(As, Bs, Ct, ldc, rows, cols, alpha, beta, ty, col);
    else if (K <= 4)
        outer<4>(As, Bs, Ct, ldc, rows, cols, alpha, beta, ty, col);
    else if (K <= 8)
        outer<8>(As, Bs, Ct, ldc, rows, cols, alpha, beta, ty, col);
    else
        outer<16>(As, Bs, Ct, ldc, rows, cols, alpha, beta, ty, col);
}
