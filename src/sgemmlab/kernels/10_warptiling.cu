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
// The bill (BM=128 BN=128 BK=16 WM=64 WN=32 WNITER=2 TM=8 TN=4: WMITER=1, sub-tiles
// 64 x 16, 256 threads, 64 outputs per thread): global bytes per FLOP 2 * (BM + BN) /
// (BM * BN) = 0.031 B/FLOP; shared words per FFMA (WMITER*TM + WNITER*TN) / (WMITER*TM *
// WNITER*TN) = 16 / 64 = 0.25 (rung 8 at 8x8: 0.25), in 2 + 2 = 4 LDS.128 per k for 64 FFMA:
// 0.0625 LDS per FFMA (rung 8: 0.0625). Transposing stores: BM*BK/THREADS = 16 STS per thread
// per tile, 2-way at BK = 16 with PAD = 4 (see rung 8).
//
// Registers: 64 to about 200 over the space (sm_90, no spills); at most 64 accumulators per
// thread, since 128 outputs plus the copy registers spill.
//
// PREFETCH, the H200 retune. The first search of this rung on the H200 (BK 8/16, warp tiles
// up to 128, the copy inline as in rungs 3-9: results/nvidia-h200/tune-10_warptiling-*)
// plateaued at 71 % of cuBLAS, like rungs 6-9 (69-73 %): the best configurations were the
// small ones (32 outputs per thread, 64 registers, 4 blocks per SM) and the 128-output ones
// fell to 37 %. What separates them is occupancy, and occupancy matters here only because
// each block stops for a whole global-memory round trip (~1 us on a busy H200) every BK steps
// of k, with nothing of its own to issue: the more other blocks an SM holds, the more of
// that wait they fill. So the copy is split into fetch (global -> registers) and stash
// (registers -> shared): PREFETCH = 1 fetches tile k+1 right after the barrier that publishes
// tile k, so its loads fly while tile k's FFMAs issue; one set of copy registers (A_LOADS +
// B_LOADS float4 per thread), one shared buffer, the same two barriers. PREFETCH = 0 keeps
// the alternating copy and math of the rungs before.
// Prediction for PREFETCH = 1: the exposed copy latency, about a quarter of the time at the
// plateau, mostly hidden: +10-20 %, to 80-90 % of cuBLAS at 4096^3, with the larger
// thread tiles (64 outputs, 2 blocks per SM) winning now that occupancy matters less.
//
// What the second search said (tune-10_warptiling-4096x4096x4096-20261129T121738Z.json; the
// first: ...T120027Z.json; ratios to cuBLAS are paired within each run): the winner is a
// 64-output tile (BM=64 BN=256 BK=16 WM=32 WN=64 TM=TN=4, 127 registers) at 86 % of cuBLAS
// with PREFETCH = 1, as predicted. But most of the gain came before the prefetch: the same
// configuration with PREFETCH = 0 reaches 82 %, where the first search's inline copy
// gave it 65 %. Splitting the copy made each thread issue all its global loads of a tile
// back to back before its first shared store (A_LOADS + B_LOADS loads in flight, not one),
// so a block's copy costs about one memory round trip instead of several. Moving the fetch
// in front of the math then added 4 % (paired, same run); over all 118 configuration pairs
// PREFETCH = 1 is 0.87x to 1.45x PREFETCH = 0, 1.11x at the median.
//
// Measured: see the generated block at the end of this header.
// <measured>
// NVIDIA H200 4096x4096x4096: 3110.4 us, 44187 GFLOP/s, 86.2 % of cuBLAS, 127 registers
//   BK=16,BM=64,BN=256,PAD=4,PREFETCH=1,TM=4,TN=4,WM=32,WN=64,WNITER=1
//   (results/nvidia-h200/ladder-4096x4096x4096-20261129T152429Z.json)
// NVIDIA H200 4092x4092x4092: 3147.9 us, 43533 GFLOP/s, 90.8 % of cuBLAS, 127 registers
//   BK=16,BM=64,BN=256,PAD=4,PREFETCH=1,TM=4,TN=4,WM=32,WN=64,WNITER=1
//   (results/nvidia-h200/ladder-4092x4092x4092-20261129T125824Z.json)
// </measured>
#include "common.cuh"

static_assert(BM > 0 && BN > 0 && BK > 0 && WM > 0 && WN > 0 && WNITER > 0 && TM > 0 && TN > 0 &&
              PAD >= 0 && PREFETCH >= 0,
              "every constant is positive (PAD and PREFETCH may be 0)");

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
static_assert(PREFETCH == 0 || PREFETCH == 1, "PREFETCH is 0 or 1");
static_assert((BM / WM) * (BN / WN) == 4 || (BM / WM) * (BN / WN) == 8,
              "4 or 8 warps per block (128 or 256 threads)");
static_assert(THREADS == (BM / WM) * (BN / WN) * 32, "THREADS is 32 lanes per warp tile");
static_assert(BM * BN / THREADS <= 64,
              "at most 64 accumulators per thread (register budget: with the copy registers, "
              "128 outputs spill past 255 registers)");
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

    // The copy in two halves: fetch (global -> registers) and stash (registers -> shared,
    // A transposed). PREFETCH only moves the fetch: after the math (0: the copy and the
    // math of a block alternate, as in rungs 3-9) or before it (1: the next tile's loads
    // are in flight while this tile's FFMAs issue).
    constexpr int A_LOADS = ceil_div(BM * BK / 4, THREADS);  // float4 per thread per tile
    constexpr int B_LOADS = ceil_div(BK * BN / 4, THREADS);
    float4 ra[A_LOADS], rb[B_LOADS];
    auto fetch = [&](int k0) {
#pragma unroll
        for (int t = 0; t < A_LOADS; ++t) {
            const int i = tid + t * THREADS, r = i / (BK / 4), c = i % (BK / 4) * 4;
            if (i < BM * BK / 4)
                ra[t] = load4_or_zero(row_ptr(A, r, lda), k0 + c, K, r < rows);
        }
#pragma unroll
        for (int t = 0; t < B_LOADS; ++t) {
            const int i = tid + t * THREADS, r = i / (BN / 4), c = i % (BN / 4) * 4;
            if (i < BK * BN / 4)
                rb[t] = load4_or_zero(row_ptr(B, k0 + r, ldb), c, cols, k0 + r < K);
        }
    };
    auto stash = [&]() {
#pragma unroll
        for (int t = 0; t < A_LOADS; ++t) {
            const int i = tid + t * THREADS, r = i / (BK / 4), c = i % (BK / 4) * 4;
            if (i < BM * BK / 4) {  // transpose A while storing it
                As[c + 0][r] = ra[t].x;
                As[c + 1][r] = ra[t].y;
                As[c + 2][r] = ra[t].z;
                As[c + 3][r] = ra[t].w;
            }
        }
#pragma unroll
        for (int t = 0; t < B_LOADS; ++t) {
            const int i = tid + t * THREADS, r = i / (BN / 4), c = i % (BN / 4) * 4;
            if (i < BK * BN / 4) *reinterpret_cast<float4*>(&Bs[r][c]) = rb[t];
        }
    };

    fetch(0);
    for (int k0 = 0; k0 < K; k0 += BK) {
        stash();
        __syncthreads();
        if (PREFETCH && k0 + BK < K) fetch(k0 + BK);
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
        __syncthreads();  // the next stash must not overwrite tiles still being read
        if (!PREFETCH && k0 + BK < K) fetch(k0 + BK);
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
