// Rung 17 — tiny K: C = alpha A B + beta C for K <= 64 (outer products and their sums).
//
// Why: up to K = 64 the bill is mostly C's bytes (97 % at 4093x4093x64), written once (read
// again when beta != 0); the big-tile rungs pipeline k-tiles where there is little to pipeline
// (4096x4096x1, rung 13: 58.9 us, cuBLAS 30.1; 4093x4093x64, the best: 145.8 us, cuBLAS ~85).
// K <= 16: a block stages its BM x K rows of A and K x BN columns of B in shared memory once
// (either layout, SGEMM_TA / SGEMM_TB; zero past K and the edges); each thread keeps its four
// columns of B for every k in registers and walks TM rows, BM/TM apart, four at a time (with
// beta != 0 their old C in flight together; beta == 0 never reads C), k unrolled for K
// rounded up to 1, 2, 4, 8 or 16. K > 16: its rows go TP = 8 at a time (4 where 8 does not
// divide TM), each pass over a band of BM TP/TM rows walking K in chunks of 16 staged alike
// (the last zero-padded to a multiple of 4), 4 TP sums in registers; per 4 k one float4 of A
// per row (a broadcast: a warp is one row of threads) and four of B. Passes, not 4 TM live
// sums, keep every configuration within 128 registers: the K <= 16 path keeps its occupancy.
// A warp stores 128 consecutive columns of a row: one STG.128 under SGEMM_VEC4, four coalesced
// STG.32 without. Rows on blockIdx.x (2^31 - 1 blocks), column tiles on blockIdx.y.
//
// The bill: C once (4MN bytes written, twice with beta != 0); from L2 A once per column of
// blocks, B once per band: K(1/BN + 1/band) bytes per byte of C (0.19 at K = 16 for the seed,
// 1.5 at K = 64: band 64). K > 16, under SGEMM_VEC4: 12 shared loads in 146 instructions per
// 128 FFMA, ~200 more per chunk staged (seed): ~60 % of issue slots are FFMA, so issue (132
// SMs x 4 a clock) binds first. Seed BM=256 BN=128 TM=32: 256 threads, 119 registers (to 124
// by variant; 2 blocks per SM), 24 KB of shared memory (`sgemmlab build -k 17`, sm_90); every
// legal configuration 114-126 registers, no spills, in every variant.
//
// Prediction, against the floor = bytes of A, B, C / 4.23 TB/s (FFMA: 2MNK at 66.2 TFLOP/s):
//   4096x4096x8   floor 15.9 us: ~18 us (88 %; 512 blocks of 256 x 128, stores only)
//   4096x4096x1   floor 15.9 us: ~18 us; with beta != 0 twice the bytes, ~35 us
//   6662x3191x22  floor 20.3 us, FFMA 14.1: ~33 us (62 %; issue-bound, 2.6 waves of blocks)
//   4823x1154x40  floor 5.5 us, FFMA 6.7: ~19 us (29 %; 190 blocks: under a wave; BM=64 TM=8 ~13)
//   4093x4093x64  floor 16.3 us, FFMA 32.4: ~53 us (31 %; issue-bound; ~160 % of cuBLAS)
//   1x4096x4096, 4096x1x4096, 8x4096x4096, 16x11008x4096: not served (K > 64).
//
// <measured>
// H200 (docs/worklog.md, sessions 4 and 6): 4093x4093x64 97.5 us, 86.4 % of cuBLAS (grid:
// results/nvidia-h200/table/grid-20261201T150405Z.json.xz); K <= 16: bench-vector-...-100213Z.
// </measured>
#include "epilogue.cuh"

constexpr int KMAX = 16;                     // k staged at once: all of K up to 16, then chunks
constexpr int CX = BN / 4 > 0 ? BN / 4 : 1;  // threads across a row of the tile
constexpr int RY = TM > 0 ? BM / TM : 1;     // rows of threads: a thread's rows are RY apart
constexpr int G = 4;                         // rows a thread finishes together
constexpr int TP = TM % 8 == 0 ? 8 : 4;      // K > 16: rows of its TM a thread sums per pass
constexpr int BAND = RY * TP;                // K > 16: rows of the tile per pass
constexpr int LIVE_TINY = 4 * KMAX + 4 * G + 28;
constexpr int LIVE_DEEP = 4 * 8 + 4 * 4 + 4 + 28;  // TP <= 8
constexpr int LIVE = LIVE_TINY > LIVE_DEEP ? LIVE_TINY : LIVE_DEEP;

static_assert(BM > 0 && BN > 0 && TM > 0, "every constant is positive (PAD and PREFETCH may be 0)");
static_assert(BN % 128 == 0,
              "BN is a multiple of 128 (a warp stores 128 consecutive columns of a row)");
static_assert(BM % TM == 0, "BM is a multiple of TM");
static_assert(TM % G == 0, "TM is a multiple of 4 (a thread's rows go four at a time)");
static_assert(LIVE <= (65536 / THREADS < 255 ? 65536 / THREADS : 255),
              "the larger path's live values (K <= 16: 4*16 of B, 4*4 of C and 28 for the "
              "sums, pointers and indices; K > 16: 4*8 sums, 4*4 of B or C, 4 of A and 28) fit "
              "a thread's registers: min(255, 65536 / threads per block)");
static_assert(THREADS == CX * RY, "THREADS is BN/4 x BM/TM");
static_assert(THREADS <= 1024, "threads per block <= 1024");
static_assert(THREADS % 32 == 0, "threads per block is a multiple of 32 (whole warps)");
static_assert((BM + BN) * KMAX * sizeof(float) <= 48 * 1024,
              "static shared memory <= 49152 bytes");

// A thread's four columns of the tile: col, col + STEP, col + 2 STEP, col + 3 STEP. Under
// SGEMM_VEC4 they are consecutive (one float4); without it a warp's lanes take consecutive
// columns (32 apart for one lane), so every scalar store of a warp fills 128 bytes.
constexpr int STEP = SGEMM_VEC4 ? 1 : 32;

// The block's tile: A, B, C and beta's source moved to its first row and column; its extent
// inside C (>= 1).
struct Tile {
    const float* A;
    int lda;
    const float* B;
    int ldb;
    float* C;
    int ldc, rows, cols;
    Source src;
};

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

// Old C of the G rows r, r + RY, ...: loaded together, so their latencies overlap; zero
// (never read) where beta == 0 or past the edge.
__device__ __forceinline__ void old_c(const Tile& t, int r, int col, float beta,
                                      float4 (&old)[G]) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
        const int rg = r + g * RY;
        old[g] = beta != 0.0f && rg < t.rows
                     ? load4_c(t.src.of(row_ptr(t.C, rg, t.ldc), rg, 0), col, t.cols)
                     : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

__device__ __forceinline__ float4 blend(float4 acc, float4 old, float alpha, float beta) {
    if (beta == 0.0f)
        return make_float4(alpha * acc.x, alpha * acc.y, alpha * acc.z, alpha * acc.w);
    return make_float4(alpha * acc.x + beta * old.x, alpha * acc.y + beta * old.y,
                       alpha * acc.z + beta * old.z, alpha * acc.w + beta * old.w);
}

__device__ __forceinline__ void fma4(float a, float4 b, float4& acc) {
    acc.x = fmaf(a, b.x, acc.x);
    acc.y = fmaf(a, b.y, acc.y);
    acc.z = fmaf(a, b.z, acc.z);
    acc.w = fmaf(a, b.w, acc.w);
}

// The thread's four columns of row k of Bs.
__device__ __forceinline__ float4 b4(const float (&Bs)[KMAX][BN], int k, int col) {
    return STEP == 1 ? *reinterpret_cast<const float4*>(&Bs[k][col])
                     : make_float4(Bs[k][col], Bs[k][col + STEP], Bs[k][col + 2 * STEP],
                                   Bs[k][col + 3 * STEP]);
}

// Rows r0 .. r0 + R of the tile's A (into As[0 .. R)) and its BN columns of B, for k0 ..
// k0 + KMAX: zero past kn and the edges; consecutive threads read consecutive addresses.
// Eight loads in flight a trip: unrolled whole, a 64-thread block's 48 would cost registers.
template <int R>
__device__ __forceinline__ void stage(float (&As)[BM][KMAX], float (&Bs)[KMAX][BN],
                                      const Tile& t, int r0, int k0, int kn) {
#pragma unroll 8
    for (int j = 0; j < ceil_div(R * KMAX, THREADS); ++j) {
        const int i = threadIdx.x + j * THREADS;
        if (R * KMAX % THREADS != 0 && i >= R * KMAX) break;
        const int r = SGEMM_TA ? i % R : i / KMAX, k = SGEMM_TA ? i / R : i % KMAX;
        float v = 0.0f;
        if (r0 + r < t.rows && k < kn)
            v = SGEMM_TA ? row_ptr(t.A, k0 + k, t.lda)[r0 + r]
                         : row_ptr(t.A, r0 + r, t.lda)[k0 + k];
        As[r][k] = v;
    }
#pragma unroll 8
    for (int j = 0; j < ceil_div(KMAX * BN, THREADS); ++j) {
        const int i = threadIdx.x + j * THREADS;
        if (KMAX * BN % THREADS != 0 && i >= KMAX * BN) break;
        const int c = SGEMM_TB ? i / KMAX : i % BN, k = SGEMM_TB ? i % KMAX : i / BN;
        float v = 0.0f;
        if (c < t.cols && k < kn)
            v = SGEMM_TB ? row_ptr(t.B, c, t.ldb)[k0 + k] : row_ptr(t.B, k0 + k, t.ldb)[c];
        Bs[k][c] = v;
    }
}

// K <= 16: the thread's TM rows (ty, ty + RY, ...) by its four columns, K rounded up to KK.
template <int KK>
__device__ __forceinline__ void outer(const float (&As)[BM][KMAX], const float (&Bs)[KMAX][BN],
                                      const Tile& t, float alpha, float beta, int ty, int col) {
    float4 b[KK];
#pragma unroll
    for (int k = 0; k < KK; ++k) b[k] = b4(Bs, k, col);
#pragma unroll 1
    for (int i0 = 0; i0 < TM; i0 += G) {
        if (ty + i0 * RY >= t.rows) break;  // rows only grow with i
        float4 old[G];
        old_c(t, ty + i0 * RY, col, beta, old);
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const int r = ty + (i0 + g) * RY;
            if (r >= t.rows) break;
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
            for (int k = 0; k < KK; ++k) fma4(a[k], b[k], acc);
            store4(row_ptr(t.C, r, t.ldc), col, t.cols, blend(acc, old[g], alpha, beta));
        }
    }
}

// K > 16: the thread's TM rows TP at a time (a pass: a band of BAND rows of the tile), each
// pass walking K in chunks of KMAX with its 4 TP sums in registers.
__device__ __forceinline__ void deep(float (&As)[BM][KMAX], float (&Bs)[KMAX][BN],
                                     const Tile& t, int K, float alpha, float beta, int ty,
                                     int col) {
#pragma unroll 1
    for (int p = 0; p < TM; p += TP) {
        const int r0 = p * RY;    // the band's first row
        if (r0 >= t.rows) break;  // the same for every thread: the barriers stay uniform
        float4 acc[TP];
#pragma unroll
        for (int i = 0; i < TP; ++i) acc[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 1
        for (int k0 = 0; k0 < K; k0 += KMAX) {
            const int kn = min(KMAX, K - k0);
            __syncthreads();  // every thread is done with the chunk before
            stage<BAND>(As, Bs, t, r0, k0, kn);
            __syncthreads();
            // four k a step, the last chunk's zeros padding it to a multiple of 4: one float4
            // of A per row (a broadcast: a warp is one row of threads) and four of B
#pragma unroll 1
            for (int k = 0; k < kn; k += 4) {
                float4 b[4];
#pragma unroll
                for (int j = 0; j < 4; ++j) b[j] = b4(Bs, k + j, col);
#pragma unroll
                for (int i = 0; i < TP; ++i) {
                    const float4 a = *reinterpret_cast<const float4*>(&As[ty + i * RY][k]);
                    fma4(a.x, b[0], acc[i]);
                    fma4(a.y, b[1], acc[i]);
                    fma4(a.z, b[2], acc[i]);
                    fma4(a.w, b[3], acc[i]);
                }
            }
        }
#pragma unroll
        for (int i0 = 0; i0 < TP; i0 += G) {
            float4 old[G];
            old_c(t, r0 + ty + i0 * RY, col, beta, old);
#pragma unroll
            for (int g = 0; g < G; ++g) {
                const int r = r0 + ty + (i0 + g) * RY;
                if (r < t.rows)
                    store4(row_ptr(t.C, r, t.ldc), col, t.cols,
                           blend(acc[i0 + g], old[g], alpha, beta));
            }
        }
    }
}

SGEMM_KERNEL __launch_bounds__(THREADS)
sgemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
      const float* __restrict__ B, int ldb, float beta, float* __restrict__ C,
      int ldc SGEMM_SOURCE_PARAMS) {
    __shared__ __align__(16) float As[BM][KMAX];  // the block's rows of A, [m][k]
    __shared__ __align__(16) float Bs[KMAX][BN];  // the block's columns of B, [k][n]
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const Tile t = {SGEMM_TA ? A + m0 : row_ptr(A, m0, lda), lda,
                    SGEMM_TB ? row_ptr(B, n0, ldb) : B + n0, ldb,
                    row_ptr(C, m0, ldc) + n0, ldc, M - m0, N - n0,
                    SGEMM_SOURCE_ARG.at(m0, n0)};
    const int ty = threadIdx.x / CX, tx = threadIdx.x % CX;
    const int col = STEP == 1 ? 4 * tx : tx / 32 * 128 + tx % 32;  // the first of its four
    if (K > KMAX) {
        deep(As, Bs, t, K, alpha, beta, ty, col);
        return;
    }
    stage<BM>(As, Bs, t, 0, 0, K);  // all of K, once
    __syncthreads();
    if (K <= 1)
        outer<1>(As, Bs, t, alpha, beta, ty, col);
    else if (K <= 2)
        outer<2>(As, Bs, t, alpha, beta, ty, col);
    else if (K <= 4)
        outer<4>(As, Bs, t, alpha, beta, ty, col);
    else if (K <= 8)
        outer<8>(As, Bs, t, alpha, beta, ty, col);
    else
        outer<16>(As, Bs, t, alpha, beta, ty, col);
}
