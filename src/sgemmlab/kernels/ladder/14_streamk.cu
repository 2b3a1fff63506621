// Rung 14 — Stream-K: a persistent grid that shares out (tile, k-range) work evenly.
//
// What changed from rung 13: who computes what. Rung 13 launches one block per output tile,
// and a shape with few tiles leaves SMs idle (1024^3 in 128 x 128 tiles: 64 tiles for 264
// block slots). Here the grid is persistent and the work is a stream of k-tiles: whole tiles
// first, in full waves (dp_tiles), then the k-tiles of the other sk_tiles cut into sk_blocks
// equal ranges, one per block, which may start and end inside tiles. The blocks that share a
// tile combine it by FIXUP: 0, each writes its partial to its own workspace slot and the last
// adds them in block order (bit-reproducible); 1, vector atomics into one workspace tile,
// which the last reads and zeroes; 2, the first to finish stores into C and the others wait
// for it, then add with vector atomics (1 and 2 are not bit-reproducible). The counters reset
// themselves. SPLIT = s is split-K, SPLIT = 1 data-parallel; runtime/decompose.py plans.
//
// The bill (`sgemmlab inspect 14 --gpu h200 [--shape 1024,1024,1024]`, H200 default BM=128
// BN=256 BK=8 TM=16 TN=8 FIXUP=2 SPLIT=0, 256 threads): rung 13's FFMAs and shared traffic
// (42.67 FLOP/B, 0.1875 shared words per FFMA); 255 registers, 1 block per SM. 4096^3: 512
// tiles on 132 resident blocks, planned as 264 whole tiles, then 248 tiles streamed over 132
// blocks: 128 split tiles, 256 partials, 16.8 MB written into C. 1024^3: 32 tiles streamed
// over 132 blocks, 160 partials, 16.8 MB written.
//
// Prediction: at 1024^3 the grid goes from 64 busy blocks to all of them: from ~60 % of
// cuBLAS to 105-115 %. At 4096^3 (512 tiles on 132 slots: 3.9 waves) the last partial wave
// is shared out: +0-3 %.
//
// Measured: the generated block below; the longer story: docs/worklog.md, rung notes.
// <measured>
// NVIDIA H200 4096x4096x4096: 2805.4 us, 48990 GFLOP/s, 99.6 % of cuBLAS, 255 registers
//   BK=8,BM=128,BN=256,FIXUP=2,PAD=4,REG_TRANSPOSE=1,SPLIT=0,STAGES=3,TM=16,TN=8,WM=32,WN=128
//   (results/nvidia-h200/ladder/4096x4096x4096-20261201T195205Z.json)
// NVIDIA H200 4092x4092x4092: 2811.0 us, 48750 GFLOP/s, 106.0 % of cuBLAS, 255 registers
//   BK=8,BM=128,BN=256,FIXUP=2,PAD=4,REG_TRANSPOSE=1,SPLIT=0,STAGES=3,TM=16,TN=8,WM=32,WN=128
//   (results/nvidia-h200/ladder/4092x4092x4092-20261201T195227Z.json)
// </measured>
#define SGEMM_NO_ENTRY
#include "ladder/13_hoisted.cu"

static_assert(FIXUP >= 0 && FIXUP <= 2, "FIXUP is 0 (fixed order), 1 (atomic) or 2 (into C)");

// The stream of k-tiles of the split tiles, cut into `blocks` equal ranges: block b owns
// [first(b), first(b + 1)); owner(x) is the block whose range holds k-tile x.
struct Stream {
    long long total;  // k-tiles in the stream
    int blocks;
    __device__ __forceinline__ long long first(int b) const { return total * b / blocks; }
    __device__ __forceinline__ int owner(long long x) const {
        return static_cast<int>(((x + 1) * blocks + total - 1) / total) - 1;
    }
};

// One partial tile, in the workspace, laid out as the threads hold it: float4 number q of
// thread tid at q * THREADS + tid (each warp's stores are contiguous).
constexpr int QUADS = TM * TN / 4;
constexpr long long SLOT = static_cast<long long>(BM) * BN;

__device__ __forceinline__ float4 quad(const float (&acc)[TM][TN], int q) {
    const int i = q / (TN / 4), j = q % (TN / 4) * 4;
    return make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
}
__device__ __forceinline__ void set_quad(float (&acc)[TM][TN], int q, float4 v) {
    const int i = q / (TN / 4), j = q % (TN / 4) * 4;
    acc[i][j] = v.x, acc[i][j + 1] = v.y, acc[i][j + 2] = v.z, acc[i][j + 3] = v.w;
}

// The float atomic add (red/atom.add.f32) flushes subnormal inputs and results to zero
// (PTX ISA, atom). A partial p with |p| >= 2^-100 loses at most 2^-126 that way, under 2^-26
// of |p|: below half an FP32 step of the terms it was summed from. A smaller nonzero partial
// is added by compare-and-swap, an IEEE add in registers, which keeps subnormals; a zero is
// not added at all (x + 0 is x, but for -0, whose sign is not kept anyway). Data whose
// partials all lie in the normal range pays four compares per quad.
__device__ __forceinline__ bool red_safe(float v) { return !(fabsf(v) < 0x1p-100f); }

__device__ __forceinline__ void add_by_cas(float* p, float v) {
    unsigned* word = reinterpret_cast<unsigned*>(p);
    unsigned seen = *word, before;  // a guess: the CAS reads the truth
    do {
        before = seen;
        seen = atomicCAS(word, before, __float_as_uint(__uint_as_float(before) + v));
    } while (seen != before);
}

__device__ __forceinline__ void add_exact(float* p, float v) {
    if (red_safe(v))
        atomicAdd(p, v);
    else if (v != 0.0f)
        add_by_cas(p, v);
}

// Four neighbours; p is 16-byte aligned when `vector` (one red.global.add.v4.f32).
__device__ __forceinline__ void add_exact4(float* p, float4 v, bool vector) {
#if __CUDA_ARCH__ >= 900
    if (vector && red_safe(v.x) && red_safe(v.y) && red_safe(v.z) && red_safe(v.w)) {
        atomicAdd(reinterpret_cast<float4*>(p), v);
        return;
    }
#endif
    add_exact(p, v.x), add_exact(p + 1, v.y), add_exact(p + 2, v.z), add_exact(p + 3, v.w);
}

// A block finished its part of split tile `t` (numbered within the stream): leave the
// partial sum in the workspace; returns true in the one block that arrives last, with the
// tile's whole sum in acc.
__device__ __forceinline__ bool fix_up(float (&acc)[TM][TN], const Stream& s, int t, int KT,
                                       float* __restrict__ ws, int* __restrict__ flags,
                                       int tid) {
    __shared__ int last;
    const long long t0 = static_cast<long long>(t) * KT;
    const int lo = s.owner(t0), hi = s.owner(t0 + KT - 1), me = blockIdx.x;
    // the slot of block b's partial of this tile: b + t. No two (block, tile) pairs share
    // one: if block b-1 reached tile t+1, block b starts after that and never sees tile t.
    auto slot = [&](int b) { return ws + (static_cast<long long>(b) + t) * SLOT; };

    float4* mine = reinterpret_cast<float4*>(FIXUP == 1 ? ws + t * SLOT : slot(me));
#pragma unroll
    for (int q = 0; q < QUADS; ++q) {
        if (FIXUP == 1)
            add_exact4(reinterpret_cast<float*>(mine + q * THREADS + tid), quad(acc, q), true);
        else
            __stcg(mine + q * THREADS + tid, quad(acc, q));
    }
    __threadfence();  // the partial is visible GPU-wide before the counter says so
    __syncthreads();
    if (tid == 0) {
        last = atomicAdd(&flags[t], 1) == hi - lo;
        if (last) flags[t] = 0;  // every contributor has counted: ready for the next launch
    }
    __syncthreads();
    if (!last) return false;
    __threadfence();

    if (FIXUP == 1) {
#pragma unroll
        for (int q = 0; q < QUADS; ++q) {
            set_quad(acc, q, __ldcg(mine + q * THREADS + tid));
            __stcg(mine + q * THREADS + tid, make_float4(0.0f, 0.0f, 0.0f, 0.0f));
        }
        return true;
    }
    // fixed order: block lo's partial, + block lo+1's, ... read back from the slots (this
    // block's own too, so that who arrives last changes nothing), CHUNK float4 per thread in
    // flight per pass (all QUADS at once would need 128 more registers and spill)
    constexpr int CHUNK = QUADS < 8 ? QUADS : 8;
#pragma unroll
    for (int q0 = 0; q0 < QUADS; q0 += CHUNK) {
#pragma unroll 1
        for (int b = lo; b <= hi; ++b) {
            const float4* part = reinterpret_cast<const float4*>(slot(b));
#pragma unroll
            for (int q = q0; q < q0 + CHUNK; ++q) {
                const float4 v = __ldcg(part + q * THREADS + tid);
                float4 u = b == lo ? make_float4(0.0f, 0.0f, 0.0f, 0.0f) : quad(acc, q);
                if (b == lo) {
                    u = v;
                } else {
                    u.x += v.x, u.y += v.y, u.z += v.z, u.w += v.w;
                }
                set_quad(acc, q, u);
            }
        }
    }
    return true;
}

// FIXUP = 2: the partial sums meet in C itself, with no workspace tile. The first block to
// finish its part of split tile t stores alpha * acc + beta * C like a whole tile; the others
// wait until it has, then add alpha * acc with vector atomics. Three counters per tile:
// tickets (the order of finishing), ready (the first store is visible), done (adders
// finished); the last adder sets all three back to zero for the next launch. A waiting block
// waits on one that is already running (it took ticket 0), so the wait always ends.
__device__ __forceinline__ void add_patch(const float (&acc)[TM][TN], float* C, int ldc,
                                          int rows, int cols, float alpha, const Patch& p) {
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int r = p.row + i / 4 * PIECE_ROWS + i % 4;
        if (r >= rows) continue;
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
            const int c0 = p.col + j / 4 * PIECE_COLS;
            float* c = row_ptr(C, r, ldc) + c0;
            const float4 v = make_float4(alpha * acc[i][j], alpha * acc[i][j + 1],
                                         alpha * acc[i][j + 2], alpha * acc[i][j + 3]);
            if (c0 + 3 < cols) {
                add_exact4(c, v, SGEMM_STORE4);
                continue;
            }
            if (c0 < cols) add_exact(c, v.x);
            if (c0 + 1 < cols) add_exact(c + 1, v.y);
            if (c0 + 2 < cols) add_exact(c + 2, v.z);
        }
    }
}

__device__ __forceinline__ void fix_up_into_c(const float (&acc)[TM][TN], const Stream& s,
                                              int t, int KT, float* C, int ldc, int rows,
                                              int cols, float alpha, float beta,
                                              const Patch& p, const Source& src,
                                              int* __restrict__ flags, int tid) {
    __shared__ int ticket;
    const long long t0 = static_cast<long long>(t) * KT;
    const int parts = s.owner(t0 + KT - 1) - s.owner(t0) + 1;
    int* tickets = flags + 3 * t;
    volatile int* ready = tickets + 1;
    int* done = tickets + 2;
    __syncthreads();  // `ticket` is free: every thread has read the previous tile's
    if (tid == 0) ticket = atomicAdd(tickets, 1);
    __syncthreads();
    if (ticket == 0) {
        store_patch(acc, C, ldc, rows, cols, alpha, beta, p, src);
        __threadfence();  // the stores are visible GPU-wide before `ready` says so
        __syncthreads();
        if (tid == 0) *ready = 1;
        return;
    }
    if (tid == 0)
        while (*ready == 0) __nanosleep(64);
    __syncthreads();
    __threadfence();
    add_patch(acc, C, ldc, rows, cols, alpha, p);
    __syncthreads();  // every adder of this block has finished reading `ready`
    if (tid == 0 && atomicAdd(done, 1) == parts - 2) {  // the last of parts - 1 adders
        *tickets = 0;
        *ready = 0;
        *done = 0;
    }
}

SGEMM_KERNEL __launch_bounds__(THREADS)
sgemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
      const float* __restrict__ B, int ldb, float beta, float* __restrict__ C,
      int ldc SGEMM_SOURCE_PARAMS, long long stride_a, long long stride_b,
      long long stride_c, int tiles_n, int tiles_mn,
      int dp_tiles, int sk_tiles, int sk_blocks, float* __restrict__ ws,
      int* __restrict__ flags) {
    __shared__ __align__(16) float smem[SMEM_FLOATS];
    const int tid = threadIdx.x;
    __builtin_assume(tid < THREADS);
    const Patch p(tid);
    const int KT = ceil_div(K, BK);
    float acc[TM][TN];

    // One call site for the tile body (two would inline it twice): whole tiles first, in
    // full waves, then this block's equal range of the stream of k-tiles of the rest.
    const Stream s{static_cast<long long>(sk_tiles) * KT, sk_blocks};
    int tile = blockIdx.x;
    long long x = 0, end = 0;  // the block's range of the stream, once it gets there
    bool streaming = tile >= dp_tiles;
    if (streaming && blockIdx.x < sk_blocks) x = s.first(blockIdx.x), end = s.first(blockIdx.x + 1);
    for (;;) {
        int kt_begin = 0, kt_end = KT, t = 0;
        if (!streaming) {
            // tile is a whole tile
        } else {
            if (x >= end) break;
            t = static_cast<int>(x / KT);
            kt_begin = static_cast<int>(x % KT);
            kt_end = static_cast<int>(min(static_cast<long long>(KT), kt_begin + end - x));
            tile = dp_tiles + t;
            x += kt_end - kt_begin;
        }
        const int z = tile / tiles_mn, rest = tile % tiles_mn;
        const int row0 = rest / tiles_n * BM, col0 = rest % tiles_n * BN;
        const float* a = A + z * stride_a;
        const float* b = B + z * stride_b;
        float* c = C + z * stride_c;
        tile_product(acc, smem, a, lda, b, ldb, M, N, K, row0, col0, kt_begin, kt_end, p, tid);
        float* c_tile = row_ptr(c, row0, ldc) + col0;
        const Source src = SGEMM_SOURCE_ARG.at(row0, col0);  // a batch repeats the source
        if (kt_begin == 0 && kt_end == KT)
            store_patch(acc, c_tile, ldc, M - row0, N - col0, alpha, beta, p, src);
        else if (FIXUP == 2)
            fix_up_into_c(acc, s, t, KT, c_tile, ldc, M - row0, N - col0, alpha, beta, p, src,
                          flags, tid);
        else if (fix_up(acc, s, t, KT, ws, flags, tid))
            store_patch(acc, c_tile, ldc, M - row0, N - col0, alpha, beta, p, src);
        if (!streaming) {
            tile += gridDim.x;
            if (tile >= dp_tiles) {
                streaming = true;
                if (blockIdx.x < sk_blocks)
                    x = s.first(blockIdx.x), end = s.first(blockIdx.x + 1);
            }
        }
    }
}
