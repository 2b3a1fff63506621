// Rung 13 — 16 x 8 patches with hoisted addressing (and any layout, and batches).
//
// What changed from rung 12: three things, all about doing less around the FFMAs.
// 1. Bigger patches: a lane owns TM x TN outputs, up to 128 (16 x 8 or 8 x 16), built of 4 x 4
//    pieces WM/(TM/4) rows and WN/(TN/4) columns apart: TM/4 + TN/4 LDS.128 per k.
// 2. Hoisted addressing: each thread works out once, before the loop, where its copies come
//    from (one pointer each) and land (one shared offset); every tile adds a fixed step. Rows
//    and columns past the edge read the last valid row or are zero-filled by a byte count
//    computed once; only the last, partial k-tile takes the checking path.
// 3. Register prefetch across tiles: the next tile's first fragments load during this tile's
//    last k. REG_TRANSPOSE = 1 moves A through registers (LDG.128, 4 STS.32 a k-tile later)
//    instead of 4-byte cp.async. SGEMM_TA/SGEMM_TB compile the layouts; blockIdx.z batches.
//    With two k-major operands (A row-major and B column-major, x @ W^T), REG_TRANSPOSE = 1
//    moves both through registers, 2 only A and 3 only B; 0 neither.
//
// The bill (`sgemmlab inspect 13 --gpu h200`, H200 default BM=256 BN=128 BK=8 WM=WN=64 TM=16
// TN=8 REG_TRANSPOSE=1 STAGES=3, 256 threads, per warp per tile): A+B global 1536 B for 65536
// FLOPs (42.67 FLOP/B; rung 12: 21.33); 0.1875 shared words in 0.047 LDS.128 per FFMA (rung
// 12: 0.3125 words), every shared access 1-way; per thread per tile 2 LDG, 8 STS and 1
// cp.async; 233 registers, 1 block (8 warps) per SM; SASS hot loop 0.076 non-FFMA
// instructions per FFMA (rung 12: 0.137).
//
// Prediction: overhead down to ~0.1 per FFMA and 40 % fewer shared words per FFMA than rung
// 12: within 5 % of cuBLAS at 4096^3 or better; at 1024^3 (64 tiles of 128 x 128 on 132 SMs)
// no better than ~60 %: that is rung 14's.
//
// Measured: the generated block below; the longer story: docs/worklog.md, rung notes.
// <measured>
// NVIDIA H200 4096x4096x4096: 2824.3 us, 48663 GFLOP/s, 98.5 % of cuBLAS, 241 registers
//   BK=8,BM=128,BN=256,PAD=4,REG_TRANSPOSE=1,STAGES=2,TM=8,TN=16,WM=32,WN=128
//   (results/nvidia-h200/ladder/4096x4096x4096-20261201T195205Z.json)
// NVIDIA H200 4092x4092x4092: 2828.0 us, 48457 GFLOP/s, 105.4 % of cuBLAS, 241 registers
//   BK=8,BM=128,BN=256,PAD=4,REG_TRANSPOSE=1,STAGES=2,TM=8,TN=16,WM=32,WN=128
//   (results/nvidia-h200/ladder/4092x4092x4092-20261201T195227Z.json)
// </measured>
#include "async_copy.cuh"
#include "epilogue.cuh"

#ifndef REG_TRANSPOSE
#define REG_TRANSPOSE 0
#endif
#ifndef STEADY  // 1: rung 24's walk of the k-tiles (postcompile/24_streamk_steady.cuh)
#define STEADY 0
#endif

static_assert(BM > 0 && BN > 0 && BK > 0 && WM > 0 && WN > 0 && TM > 0 && TN > 0 && STAGES > 0 &&
                  PAD >= 0 && REG_TRANSPOSE >= 0,
              "every constant is positive (PAD and REG_TRANSPOSE may be 0)");
static_assert(BM % WM == 0 && BN % WN == 0, "BM is a multiple of WM and BN of WN");
static_assert(TM % 4 == 0 && TN % 4 == 0,
              "TM and TN are multiples of 4 (pieces of 4 x 4, float4 shared-memory reads)");
static_assert(WM % TM == 0 && WN % TN == 0 && (WM / TM) * (WN / TN) == 32,
              "the warp tile is 32 lanes of TM x TN: (WM/TM) x (WN/TN) == 32");
static_assert(TM * TN <= 128, "at most 128 accumulators per thread (TM * TN <= 128)");
static_assert(BK % 4 == 0 && BK <= 32 && BM % 4 == 0 && BN % 4 == 0,
              "BK is a multiple of 4 and at most 32, BM and BN multiples of 4");
static_assert((BM / WM) * (BN / WN) == 4 || (BM / WM) * (BN / WN) == 8,
              "4 or 8 warps per block (128 or 256 threads)");
static_assert(PAD % 4 == 0, "PAD is a multiple of 4 (keeps 16-byte copies and reads aligned)");
static_assert(STAGES >= 2 && STAGES <= 8, "2 to 8 stages");
static_assert(REG_TRANSPOSE >= 0 && REG_TRANSPOSE <= 3,
              "REG_TRANSPOSE is 0 (no operand), 1 (every k-major one), 2 (A) or 3 (B)");
static_assert(TM * TN + 2 * (TM + TN) + 32 <= (65536 / THREADS < 255 ? 65536 / THREADS : 255),
              "TM*TN accumulators, two sets of TM+TN fragment values and 32 for pointers and "
              "indices fit a thread's registers: min(255, 65536 / threads per block)");
static_assert(THREADS == (BM / WM) * (BN / WN) * 32, "THREADS is 32 lanes per warp tile");
static_assert(THREADS <= 1024, "threads per block <= 1024");
static_assert(THREADS % 32 == 0, "threads per block is a multiple of 32 (whole warps)");
static_assert(STAGES * BK * (BM + BN + 2 * PAD) * sizeof(float) <= 48 * 1024,
              "static shared memory <= 49152 bytes");

constexpr int A_LD = BM + PAD, B_LD = BN + PAD;  // As[k][m], Bs[k][n], rows padded
constexpr int A_STAGE = BK * A_LD, B_STAGE = BK * B_LD;
constexpr int SMEM_FLOATS = STAGES * (A_STAGE + B_STAGE);

// One operand's share of a k-tile, global -> shared [BK][EXT] (rows of LD floats), with its
// addresses worked out once. K_MAJOR: the operand's memory runs along k (row-major A,
// column-major B), so each granule is 4 consecutive k of one row, scattered by 4-byte copies
// into a column of the tile; otherwise it runs along the tile's extent and a granule is 4
// consecutive floats of one row of k, one 16-byte copy (4 of 4 bytes without alignment).
template <int EXT, int LD, bool K_MAJOR, bool VIA_REGS>
struct TileCopy {
    static constexpr bool STAGED = VIA_REGS && K_MAJOR;  // through registers (fetch, stash)
    static constexpr int PER_ROW = K_MAJOR ? BK / 4 : EXT / 4;  // granules per source row
    static constexpr int GRANULES = EXT * BK / 4;
    static constexpr int COPIES = ceil_div(GRANULES, THREADS);  // granules per thread
    static constexpr int PASS = THREADS / PER_ROW;  // source rows one pass of the block covers
    static constexpr bool EVEN = GRANULES % THREADS == 0;
    // distance in shared memory from one of a thread's granules to the next (compile time)
    static constexpr int DST_STEP = K_MAJOR ? PASS : PASS * LD;
    static_assert(THREADS % PER_ROW == 0, "a pass of the block covers whole source rows");

    const float* src[COPIES];  // the thread's granules in the next k-tile to copy
    const float* origin;       // a valid, aligned address for copies of zero bytes
    long long step;            // elements from one k-tile to the next
    int dst;                   // shared offset of the thread's first granule
    int lead;                  // K_MAJOR: k of the granule in the tile; else its row (k)
    int fill;                  // !K_MAJOR: bytes of the granule inside the matrix (0-16)
    bool live;                 // the thread's last granule exists (always, when EVEN)

    // base: the operand at the tile's first row/column and k = 0; ext_valid: rows (K_MAJOR)
    // or columns of the tile inside the matrix (>= 1); kt: the first k-tile to copy.
    __device__ __forceinline__ void init(const float* base, int ld, int ext_valid, int kt,
                                         int tid) {
        const int row = tid / PER_ROW, q = tid % PER_ROW * 4;
        origin = base;
        live = EVEN || tid + (COPIES - 1) * THREADS < GRANULES;
        if (K_MAJOR) {
            step = BK;
            dst = q * LD + row;
            lead = q;
            fill = 16;
#pragma unroll
            for (int t = 0; t < COPIES; ++t)  // rows past the edge read the last valid row
                src[t] = row_ptr(base, min(row + t * PASS, ext_valid - 1), ld) + kt * BK + q;
        } else {
            step = static_cast<long long>(BK) * ld;
            dst = row * LD + q;
            lead = row;
            fill = 4 * max(0, min(4, ext_valid - q));
            // a granule wholly past the edge reads nothing from column 0 of its row: every
            // full k-tile's copy is then `cp.async src, fill` with no choice left to make
#pragma unroll
            for (int t = 0; t < COPIES; ++t)
                src[t] = row_ptr(base, kt * BK + row + t * PASS, ld) + (fill ? q : 0);
        }
    }

    __device__ __forceinline__ void advance() {
#pragma unroll
        for (int t = 0; t < COPIES; ++t) src[t] += step;
    }

    // Copy the k-tile into `stage`; k_left < BK marks the last, partial k-tile.
    template <bool EDGE>
    __device__ __forceinline__ void copy(float* stage, int k_left) const {
#pragma unroll
        for (int t = 0; t < COPIES; ++t) {
            if (t == COPIES - 1 && !live) break;
            float* d = stage + dst + t * DST_STEP;
            if (K_MAJOR) {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const bool ok = !EDGE || lead + j < k_left;
                    cp_async4(d + j * LD, ok ? src[t] + j : origin, ok ? 4 : 0);
                }
            } else {
                const int bytes = !EDGE || lead + t * PASS < k_left ? fill : 0;
                if (SGEMM_VEC4 && !EDGE) {
                    cp_async16(d, src[t], fill);
                } else if (SGEMM_VEC4) {
                    cp_async16(d, bytes ? src[t] : origin, bytes);
                } else {
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        const bool ok = 4 * j < bytes;
                        cp_async4(d + j, ok ? src[t] + j : origin, ok ? 4 : 0);
                    }
                }
            }
        }
    }

    // STAGED (REG_TRANSPOSE, K_MAJOR): the k-tile through registers instead. fetch() issues
    // one 16-byte global load per granule (4 scalar ones without alignment) into `staged`;
    // stash() later scatters the registers into the stage's columns. Between the two the
    // loads fly while the FFMAs of a whole k-tile issue.
    float4 staged[STAGED ? COPIES : 1];

    template <bool EDGE>
    __device__ __forceinline__ void fetch(int k_left) {
#pragma unroll
        for (int t = 0; t < COPIES; ++t) {
            if (t == COPIES - 1 && !live) break;
            if (SGEMM_VEC4 && (!EDGE || lead + 4 <= k_left)) {
                staged[t] = *reinterpret_cast<const float4*>(src[t]);
            } else {
                const float* p = src[t];
                staged[t].x = !EDGE || lead + 0 < k_left ? p[0] : 0.0f;
                staged[t].y = !EDGE || lead + 1 < k_left ? p[1] : 0.0f;
                staged[t].z = !EDGE || lead + 2 < k_left ? p[2] : 0.0f;
                staged[t].w = !EDGE || lead + 3 < k_left ? p[3] : 0.0f;
            }
        }
    }

    __device__ __forceinline__ void stash(float* stage) const {
#pragma unroll
        for (int t = 0; t < COPIES; ++t) {
            if (t == COPIES - 1 && !live) break;
            float* d = stage + dst + t * DST_STEP;
            d[0] = staged[t].x, d[LD] = staged[t].y, d[2 * LD] = staged[t].z,
            d[3 * LD] = staged[t].w;
        }
    }
};

using CopyA = TileCopy<BM, A_LD, !SGEMM_TA, REG_TRANSPOSE == 1 || REG_TRANSPOSE == 2>;
using CopyB = TileCopy<BN, B_LD, SGEMM_TB != 0, REG_TRANSPOSE == 1 || REG_TRANSPOSE == 3>;

// Where a lane's patch sits in the block tile: its first piece's row and column; the others
// are WM/(TM/4) rows and WN/(TN/4) columns further.
struct Patch {
    int row, col;
    __device__ __forceinline__ Patch(int tid) {
        const int warp = tid / 32, lane = tid % 32;
        const int wr = warp / (BN / WN), wc = warp % (BN / WN);
        const int lr = lane / (WN / TN), lc = lane % (WN / TN);
        row = wr * WM + lr * 4;
        col = wc * WN + lc * 4;
    }
};
constexpr int PIECE_ROWS = WM / (TM / 4), PIECE_COLS = WN / (TN / 4);

#if STEADY
#include "postcompile/24_streamk_steady.cuh"
#else
// How tile_product walks its k-tiles: step(t, steady, fetched) once for each, in order.
// (Rung 24 brings its own walk: postcompile/24_streamk_steady.cuh.)
template <bool REGS, class Step, class Fetch>
__device__ __forceinline__ void walk_k_tiles(Step& step, Fetch&&, int tiles, bool) {
    for (int t = 0; t < tiles; ++t) step(t, false, false);
}
#endif

// acc = A[row0 .., k-tiles kt_begin .. kt_end) @ B[.., col0 ..]: the pipelined main loop.
// A and B are the (batch's) matrices at their origin.
__device__ __forceinline__ void tile_product(float (&acc)[TM][TN], float* smem, const float* A,
                                             int lda, const float* B, int ldb, int M, int N,
                                             int K, int row0, int col0, int kt_begin,
                                             int kt_end, const Patch& p, int tid) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    __syncthreads();  // the ring is free: nobody still reads a previous tile's stages

    float* As = smem;
    float* Bs = smem + STAGES * A_STAGE;
    CopyA ca;
    CopyB cb;
    ca.init(SGEMM_TA ? A + row0 : row_ptr(A, row0, lda), lda, M - row0, kt_begin, tid);
    cb.init(SGEMM_TB ? row_ptr(B, col0, ldb) : B + col0, ldb, N - col0, kt_begin, tid);
    const int tiles = kt_end - kt_begin;
    int k_left = K - kt_begin * BK;  // k still to copy, from the next k-tile on

    // A k-major operand goes through registers when REG_TRANSPOSE says: fetched when its
    // tile is issued, stashed at the end of that step (its stage is free since the barrier
    // that ended the step before, and it is not read before STAGES-2 more barriers).
    constexpr bool A_REGS = CopyA::STAGED, B_REGS = CopyB::STAGED;
    // whole: the caller knows k_left >= BK; fetch: false when the registers already hold
    // the k-tile (rung 24's steady steps fetch the next step's one at their end)
    auto issue = [&](int stage, bool whole, bool fetch) {
        if (whole || k_left >= BK) {
            if (A_REGS) { if (fetch) ca.fetch<false>(BK); } else ca.copy<false>(As + stage * A_STAGE, BK);
            if (B_REGS) { if (fetch) cb.fetch<false>(BK); } else cb.copy<false>(Bs + stage * B_STAGE, BK);
        } else {
            if (A_REGS) ca.fetch<true>(k_left); else ca.copy<true>(As + stage * A_STAGE, k_left);
            if (B_REGS) cb.fetch<true>(k_left); else cb.copy<true>(Bs + stage * B_STAGE, k_left);
        }
        ca.advance();
        cb.advance();
        k_left -= BK;
    };
    auto stash = [&](int stage) {
        if (A_REGS) ca.stash(As + stage * A_STAGE);
        if (B_REGS) cb.stash(Bs + stage * B_STAGE);
    };

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < tiles) {
            issue(s, false, true);
            stash(s);
        }
        cp_async_commit();  // empty past the end: the group count stays uniform
    }
    cp_async_wait<STAGES - 2>();
    __syncthreads();

    // as and bs below point at the lane's own fragments in the stage being read: every
    // fragment load is that register plus a compile-time offset
    float fa[2][TM], fb[2][TN];
    auto load = [&](int set, const float* as, const float* bs, int k) {
#pragma unroll
        for (int i = 0; i < TM / 4; ++i) {
            const float4 v =
                *reinterpret_cast<const float4*>(as + k * A_LD + i * PIECE_ROWS);
            fa[set][4 * i] = v.x, fa[set][4 * i + 1] = v.y, fa[set][4 * i + 2] = v.z,
                         fa[set][4 * i + 3] = v.w;
        }
#pragma unroll
        for (int j = 0; j < TN / 4; ++j) {
            const float4 v =
                *reinterpret_cast<const float4*>(bs + k * B_LD + j * PIECE_COLS);
            fb[set][4 * j] = v.x, fb[set][4 * j + 1] = v.y, fb[set][4 * j + 2] = v.z,
                         fb[set][4 * j + 3] = v.w;
        }
    };

    int read = 0, write = STAGES - 1;
    const float* as = As + p.row;
    const float* bs = Bs + p.col;
    load(0, as, bs, 0);
    // step t multiplies k-tile t while tile t + STAGES - 1 is copied in (more: it exists);
    // steady: the caller knows it exists and is whole, so the step tests nothing, and at
    // its end it fetches the next step's k-tile into the registers it has just stored
    // (fetched: this step's is there already)
    constexpr bool REGS = A_REGS || B_REGS;
    auto step = [&](int t, bool steady, bool fetched) {
        const bool more = steady || t + STAGES - 1 < tiles;
        if (more) issue(write, steady, !fetched);  // the stage read in step t-1
        cp_async_commit();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            if (k == BK - 1) {  // publish the next tile, then prefetch its first k
                if (REGS && more) stash(write);
                if (REGS && steady) {  // at the block's end: nothing below waits for it
                    if (A_REGS) ca.fetch<false>(BK);
                    if (B_REGS) cb.fetch<false>(BK);
                }
                cp_async_wait<STAGES - 2>();
                __syncthreads();
                read = read + 1 == STAGES ? 0 : read + 1;
                as = As + read * A_STAGE + p.row;
                bs = Bs + read * B_STAGE + p.col;
            }
            load((k + 1) % 2, as, bs, (k + 1) % BK);  // after the last tile: unused
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += fa[k % 2][i] * fb[k % 2][j];
        }
        write = write + 1 == STAGES ? 0 : write + 1;
    };
    // the k-tiles one step each; rung 24 walks the whole ones first, in a branch-free loop
    walk_k_tiles<REGS>(step, [&] {
        if (A_REGS) ca.fetch<false>(BK);
        if (B_REGS) cb.fetch<false>(BK);
    }, tiles, kt_end == ceil_div(K, BK) && K % BK != 0);
    cp_async_wait<0>();
}

// C[row0 .., col0 ..] = alpha * acc + beta * (C, or the source) inside the matrix only; C
// and src at the tile's origin.
__device__ __forceinline__ void store_patch(const float (&acc)[TM][TN], float* C, int ldc,
                                            int rows, int cols, float alpha, float beta,
                                            const Patch& p, const Source& src) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; j += 4)
            store4_c(C, ldc, p.row + i / 4 * PIECE_ROWS + i % 4, p.col + j / 4 * PIECE_COLS,
                     rows, cols, make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2],
                                             acc[i][j + 3]),
                     alpha, beta, src);
}

#ifndef SGEMM_NO_ENTRY  // rung 14 reuses everything above with its own entry point
SGEMM_KERNEL __launch_bounds__(THREADS)
sgemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
      const float* __restrict__ B, int ldb, float beta, float* __restrict__ C,
      int ldc SGEMM_SOURCE_PARAMS, long long stride_a, long long stride_b,
      long long stride_c) {
    __shared__ __align__(16) float smem[SMEM_FLOATS];
    const int tid = threadIdx.x;
    __builtin_assume(tid < THREADS);
    const long long z = blockIdx.z;
    A += z * stride_a;
    B += z * stride_b;
    C += z * stride_c;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const Patch p(tid);
    float acc[TM][TN];
    tile_product(acc, smem, A, lda, B, ldb, M, N, K, row0, col0, 0, ceil_div(K, BK), p, tid);
    store_patch(acc, row_ptr(C, row0, ldc) + col0, ldc, M - row0, N - col0, alpha, beta, p,
                SGEMM_SOURCE_ARG.at(row0, col0));
}
#endif
