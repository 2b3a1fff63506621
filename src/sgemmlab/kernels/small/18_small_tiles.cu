// Rung 18 — small tiles: a 16- to 64-row block tile, batches in one launch, and split-K with
// a fixed-order fix-up, for products too small to fill 132 SMs with rung 13's tiles.
//
// Why: at 127x129x131 rung 13's 128 x 256 tile is one block on one SM of 132; at 29x32x3635
// one block walks all of K; a batch of 32 products of 128^3 is 32 blocks (issue 13's table).
// The cure for all three: more, smaller blocks and, when the tiles are still too few, K cut
// into SPLIT parts (blockIdx.z carries batch and part) that meet in a workspace.
//
// The kernel. THREADS = (BM/TM) x (BN/TN) threads; thread (ty, tx) owns rows ty + i*(BM/TM)
// and columns tx + j*(BN/TN) of the tile (strided: a warp's shared-memory reads of B are 32
// consecutive words, its reads of A one or two broadcasts, its stores of C coalesced). Each
// k-tile (BK deep) of A and B is staged in shared memory, A as [k][m] and B as [k][n], one
// word of padding per row (a row-major A and a column-major B are written across k: the pad
// spreads those stores over the banks). Two buffers: while the block multiplies one k-tile,
// each thread holds its share of the next in registers (loaded before the math, stored after
// it), so one barrier per k-tile and the loads' latency hides behind BK x TM x TN FFMA.
// Global loads are scalar, along each operand's contiguous dimension (SGEMM_TA / SGEMM_TB
// pick it): coalesced in every layout, and no alignment needed (tiny products come in any).
//
// Split-K (SPLIT parts, host-chosen: runtime/decompose.py). Part p takes k-tiles
// [KT p / SPLIT, KT (p+1) / SPLIT). With SPLIT > 1 every part stores its raw partial tile in
// its own workspace slot, then counts itself in on the tile's counter; the last to arrive
// sums the slots in the order p = 0, 1, ..., SPLIT-1 (whichever block is last, the same
// additions in the same order: bit-reproducible), applies alpha and beta once, and puts the
// counter back to zero (the workspace's zeroed region stays zero between launches). The
// counting is splitk.cuh's, shared with rungs 15 and 16.
//
// Prediction (H200, paired with cuBLAS): ~100 % at 127x129x131 (20 tiles of 32 x 32 in 4
// parts: 80 blocks) and 29x32x3635 (one tile in 28 parts); at or above cuBLAS at 32 x 128^3
// (512 blocks); far below rung 13 on large squares (scalar loads, small thread tiles).
//
// <measured>
// H200, through dispatch, isolated calls (host work inside): 127x129x131 14.1 us, 163 % of
// cuBLAS; 32 x 128^3 214 %; cubes 17..257 154-195 %, 511^3 77 % (the blend's miss: rung 14
// at 512^3 126 %) (results/nvidia-h200/bench/square-ragged-skinny-small-vector-d5eae6-20261201T113555Z.json.xz);
// 29x32x3635 179 % (tune-18_small_tiles-...-20261201T112352Z.json). docs/worklog.md, session 5.
// </measured>
#include "splitk.cuh"

constexpr int TX = BN / TN;  // threads across the tile
constexpr int TY = BM / TM;  // threads down the tile
constexpr int LA = BM * BK / THREADS;  // elements of the A tile each thread loads
constexpr int LB = BK * BN / THREADS;  // ... of the B tile
constexpr int SA = BM + 1;  // shared-memory row lengths (one word of padding)
constexpr int SB = BN + 1;

static_assert(BM > 0 && BN > 0 && BK > 0 && TM > 0 && TN > 0,
              "every constant is positive (PAD and PREFETCH may be 0)");
static_assert(BM % TM == 0 && BN % TN == 0, "BM is a multiple of TM and BN of TN");
static_assert(THREADS == TX * TY, "THREADS is (BM/TM) x (BN/TN)");
static_assert(THREADS <= 1024, "threads per block <= 1024");
static_assert(THREADS <= 512, "at most 512 threads (a small tile needs no more; at 1024 ptxas "
              "spills the fix-up)");
static_assert(THREADS % 32 == 0, "threads per block is a multiple of 32 (whole warps)");
static_assert((BM * BK) % THREADS == 0 && (BK * BN) % THREADS == 0,
              "the threads divide the A tile (BM*BK) and the B tile (BK*BN) evenly");
static_assert(LA + LB <= 32,
              "a thread holds at most 32 values of the next k-tile ((BM+BN)*BK/threads: "
              "beyond it their addresses spill)");
constexpr int LIVE = TM * TN + TM + TN + LA + LB + 24;
static_assert(LIVE <= (65536 / THREADS < 255 ? 65536 / THREADS : 255),
              "TM*TN accumulators, TM+TN fragment values, the next k-tile's share "
              "((BM+BN)*BK/threads) and 24 for indices fit a thread's registers: "
              "min(255, 65536 / threads per block)");
static_assert(2 * BK * (SA + SB) * sizeof(float) <= 48 * 1024,
              "static shared memory <= 49152 bytes");

// Element e of the block's share of a tile: (row, k) of A, (k, col) of B, laid out so that
// consecutive e walk the operand's contiguous dimension.
__device__ __forceinline__ void a_coord(int e, int& r, int& k) {
    if (SGEMM_TA) { r = e % BM; k = e / BM; } else { r = e / BK; k = e % BK; }
}
__device__ __forceinline__ void b_coord(int e, int& k, int& c) {
    if (SGEMM_TB) { c = e / BK; k = e % BK; } else { k = e / BN; c = e % BN; }
}

// The thread's share of k-tile [k0, k0 + BK), zero past M, N and the part's end kend.
__device__ __forceinline__ void fetch(const float* __restrict__ A, int lda,
                                      const float* __restrict__ B, int ldb, int M, int N,
                                      int m0, int n0, int k0, int kend, int tid, float (&ra)[LA],
                                      float (&rb)[LB]) {
#pragma unroll
    for (int i = 0; i < LA; ++i) {
        int r, k;
        a_coord(tid + i * THREADS, r, k);
        const int m = m0 + r, kk = k0 + k;
        const bool in = m < M && kk < kend;
        const long long at = SGEMM_TA ? static_cast<long long>(kk) * lda + m
                                      : static_cast<long long>(m) * lda + kk;
        ra[i] = in ? A[at] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < LB; ++i) {
        int k, c;
        b_coord(tid + i * THREADS, k, c);
        const int n = n0 + c, kk = k0 + k;
        const bool in = n < N && kk < kend;
        const long long at = SGEMM_TB ? static_cast<long long>(n) * ldb + kk
                                      : static_cast<long long>(kk) * ldb + n;
        rb[i] = in ? B[at] : 0.0f;
    }
}

__device__ __forceinline__ void stage(float* As, float* Bs, int tid, const float (&ra)[LA],
                                      const float (&rb)[LB]) {
#pragma unroll
    for (int i = 0; i < LA; ++i) {
        int r, k;
        a_coord(tid + i * THREADS, r, k);
        As[k * SA + r] = ra[i];
    }
#pragma unroll
    for (int i = 0; i < LB; ++i) {
        int k, c;
        b_coord(tid + i * THREADS, k, c);
        Bs[k * SB + c] = rb[i];
    }
}

SGEMM_KERNEL __launch_bounds__(THREADS)
sgemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
      const float* __restrict__ B, int ldb, float beta, float* __restrict__ C,
      int ldc SGEMM_SOURCE_PARAMS, long long stride_a, long long stride_b,
      long long stride_c, int split,
      float* __restrict__ partials, int* __restrict__ counters) {
    __shared__ float As[2][BK * SA];
    __shared__ float Bs[2][BK * SB];
    const int tid = threadIdx.x;
    const int tx = tid % TX, ty = tid / TX;
    const int part = blockIdx.z % split;
    const long long z = blockIdx.z / split;  // the product of the batch
    A += z * stride_a;
    B += z * stride_b;
    C += z * stride_c;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    // this part's k-tiles
    const int kt = ceil_div(K, BK);
    const int t0 = split_first(kt, part, split), t1 = split_first(kt, part + 1, split);
    const int kend = min(K, t1 * BK);

    float acc[TM][TN] = {};
    float ra[LA], rb[LB];
    int buf = 0;
    if (t0 < t1) {
        fetch(A, lda, B, ldb, M, N, m0, n0, t0 * BK, kend, tid, ra, rb);
        stage(As[0], Bs[0], tid, ra, rb);
    }
    __syncthreads();
    for (int t = t0; t < t1; ++t) {
        const bool more = t + 1 < t1;
        if (more) fetch(A, lda, B, ldb, M, N, m0, n0, (t + 1) * BK, kend, tid, ra, rb);
        const float* as = As[buf];
        const float* bs = Bs[buf];
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = as[k * SA + ty + i * TY];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = bs[k * SB + tx + j * TX];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        if (more) stage(As[buf ^ 1], Bs[buf ^ 1], tid, ra, rb);
        __syncthreads();
        buf ^= 1;
    }

    if (split > 1) {
        // the partial tile into this part's slot, then count in; the last part sums all
        // (a split launch has fewer than 2^31 tiles: its workspace is capped, runtime/decompose.py)
        const int tile = (static_cast<int>(z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
        float* slots = partials + static_cast<long long>(tile) * split * (BM * BN);
        float* mine = slots + static_cast<long long>(part) * (BM * BN);
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) mine[(ty + i * TY) * BN + tx + j * TX] = acc[i][j];
        if (!split_arrive_last(counters + tile, split)) return;
        // the sum in the order p = 0, 1, ..., its own slot read back like the others
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
        const float* slot = slots + ty * BN + tx;  // this thread's first element, part 0
        for (int p = 0; p < split; ++p, slot += BM * BN) {
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += __ldcg(slot + i * TY * BN + j * TX);
        }
        split_done(counters + tile);
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
            store_c(C, ldc, m0 + ty + i * TY, n0 + tx + j * TX, M, N, acc[i][j], alpha, beta,
                    SGEMM_SOURCE_ARG);  // C's origin, as X's: a batch repeats X
}
