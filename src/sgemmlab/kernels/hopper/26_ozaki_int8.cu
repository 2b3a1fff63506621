// Rung 26 — FP32 products from INT8 ones: Ozaki scheme II's GEMM, exact integers on the tensor
// cores.
//
// What it computes: for each modulus m_l of the scheme (sgemmlab/ozaki/reference.py), the
// product of two INT8 residue matrices, A_l (M x K) and B_l (N x K, i.e. B^T), exact in INT32,
// reduced modulo m_l and stored as one INT8 residue per output: R_l = (A_l B_l^T) mod m_l,
// symmetric. hopper/ozaki.cu makes A_l and B_l from the FP32 operands (scaled per row and
// column, rounded to integers; B's residues times y_l, so that R_l is already the CRT's
// term) and recombines the R_l by the Chinese remainder theorem.
// Exact: a sum of K < 2^17 terms of at most 2^14 stays inside INT32, and nothing rounds.
//
// What changed from rung 19: the operands are bytes, wgmma is m64nBNk32.s32.s8.s8, and a
// k-tile holds 128 of them (still one 128-byte swizzle row: the ring, the tensor maps and the
// descriptors of hopper/wgmma.cuh serve unchanged). Both operands come from 3-D tensor maps,
// one plane per modulus, and the persistent grid walks (modulus, tile) pairs. The epilogue
// reduces each INT32 sum modulo m_l with one multiply-high (no division, no conversion) and
// stores bytes.
//
// The bill (BM=128, BN=256, BK=128 bytes): 170.7 integer operations per byte of L2 (rung 19's
// 42.7 FLOP/B, with four times the operations per byte); wgmma reads 80 KB of shared memory
// per k-tile for 4.2 M multiply-adds: 80 B/clk at the INT8 peak (4096 per clock per SM), as
// rung 19's TF32. The epilogue: about 7 integer operations per output (about 5 % of a tile
// at K = 8192), during which this block's tensor cores wait.
// Prediction: as rung 19 in operations per clock, four times its rate: about 1,500 TOPS at
// 8192^3 if the clock holds (rung 19: 382 TFLOP/s at 4096^3), i.e. about 0.73 ms per modulus.
// Measured (tools/ozaki_probe.py, 8 moduli, results/nvidia-h200/probe/ozaki-count8-
// 20261204T1820Z.json): 1,391-1,484 TOPS at 8192^3, 1,355 at 4096^3, 977 at 2048^3. The
// bound is the board's 700 W: 1,500 MHz under this load (…/ozaki-count7-smi-20261204T1830Z
// .json), about 1,620 TOPS at most. The whole products: docs/worklog.md, "Ozaki scheme II".
//
// Two switches for the epilogue, which the tensor cores wait through: at K = 2048 a tile has
// 16 k-tiles, about 16,000 clocks of products at the peak, beside an epilogue of 64 2-byte
// stores and about 900 integer operations a thread (hence 977 TOPS there). The seed takes
// STORE16 (registry.tensor), which the H200 timed faster; PINGPONG stays a switch:
//   - STORE16: a quad's residues trade places in two shuffles, so each thread stores 16
//     consecutive bytes of one row (8 stores a thread instead of 64, whole sectors instead
//     of quarters).
//   - PINGPONG: each consumer warpgroup takes its own work items, 64 x 256 (or 128 x 128 with
//     BN 128: two wgmmas a k-step), and the two main loops take turns (named barriers), so
//     one warpgroup's epilogue runs under the other's products. The price is bytes: a 64 x
//     256 item reads 80 bytes of L2 a clock an SM at the INT8 peak, against 48 for 128 x 256;
//     128 x 128 reads 64, and its wgmmas 96 bytes of shared memory a clock, against 80.
// Predicted (written before any measurement; tools/ozaki_probe.py --gemm times them paired):
// STORE16 takes 10-20 µs off the 2048^3 products' 145 (8 moduli, …/ozaki-count8-crt-
// 20261204T2027Z.json), a few % at 4096^3, nothing measurable at 8192^3. PINGPONG, where L2
// keeps up, takes 30-40 µs off at 2048^3 and about 80 µs of 820 at 4096^3; where it does
// not, it is slower, and 128 x 128 is then the better of its two shapes.
// Measured, paired (…/ozaki-count8-levers-20261205T0354Z.json): STORE16 took 26 µs off 141
// at 2048^3 and 68 off 807 at 4096^3, more than predicted: the quarter-sector stores had
// also been spending L2's write bandwidth under the next item's copies. PINGPONG gave
// nothing more at 2048^3 and lost 76 µs at 4096^3 (64 x 256): with STORE16 the epilogue is
// short, and the extra bytes from L2 cost more than it hides. CLUSTER 2 lost under bursts of
// 40 calls (…/ozaki-count8-burst40-20261205T0406Z.json).
// GROUP_M under the 700 W cap: a modulus's plane of B is read from HBM once for each group of
// GROUP_M row tiles (A's slab of the group stays in L2). At 8192^3 that is 64 MB eight times
// a modulus with GROUP_M 8, about 4 GB a product; 16 halves it, 32 halves it again if A's
// slab (32 MB) still stays in L2 beside the rest. Predicted, before any measurement: under
// bursts at 8192^3, GROUP_M 16 is 1-2 % faster (some 2 GB of HBM reads, 10-15 W, given back
// to the clock); 32 as much again or, if A's slab falls out of L2, slower. At 4096^3 B's
// plane (16 MB) stays in L2: nothing.
// EXACT_DIV (a switch, off until timed): the epilogue's residues by an exact division, a
// multiply-high and a shift, with no correction steps (residue_exact). Exact for K < 2^16
// (runtime/ozaki.EXACT_K; past it the host builds without it). The seed's SASS: 2,480
// instructions; with EXACT_DIV, 1,768: 712 fewer, over 128 residues a thread an item (four
// instructions a residue, against about ten).
// Predicted, before any measurement: the epilogue runs while this block's tensor cores wait,
// two consumer warps a scheduler issuing 712 instructions fewer each an item, so about 1,400
// clocks an item an SM: 8 items an SM at 2048^3, about 6 us (of the products' 114); 31 at
// 4096^3, about 22 us (of 734); 124 at 8192^3, about 0.12 ms (of 6), a little more under the
// 700 W cap, where fewer instructions also draw less power.
// Every launch of the scheme starts with griddep_wait (hopper/wgmma.cuh): with
// runtime/ozaki.OVERLAP this kernel may start while the split before it finishes.
#ifndef BN
#define BN 256
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef CLUSTER
#define CLUSTER 1  // 2: two blocks of neighbouring row-tiles share B's tile (TMA multicast)
#endif
#ifndef STORE16
#define STORE16 0  // 1: a thread's residues leave as 16-byte rows, after two exchanges in its quad
#endif
#ifndef PINGPONG
#define PINGPONG 0  // 1: each consumer warpgroup its own tile, their main loops in turn
#endif
#ifndef EXACT_DIV
#define EXACT_DIV 0  // 1: the epilogue's residues by an exact division (K < 2^16: the host)
#endif
#include "hopper/wgmma.cuh"

constexpr int KB = 128;  // int8 per k-tile (= BK floats' 128 bytes)
// A work item's rows: both warpgroups' 128, or (PINGPONG) one warpgroup's 64 x RM, with RM
// wgmmas of 64 rows a k-step (RM x BN / 2 accumulators a thread: 128 either way)
constexpr int RM = PINGPONG ? 256 / BN : 1;
constexpr int TM = PINGPONG ? 64 * RM : BM;
constexpr int A_STAGE = TM * KB;  // bytes of A a stage
static_assert(!PINGPONG || CLUSTER == 1, "PINGPONG with CLUSTER 1");
constexpr int STAGE_BYTES = A_STAGE + B_BYTES;
constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 2 * 8 * STAGES + 1024;
constexpr int MAX_MODULI = 20;
static_assert(STAGES >= 2 && STAGES <= 8, "2 to 8 stages");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory per block <= 227 KB");
#ifdef SMEM_EXPECT
static_assert(SMEM_BYTES == SMEM_EXPECT, "the host's shared-memory size matches the kernel's");
#endif

// The moduli and what reducing by them needs (runtime/ozaki.py fills it): for an INT32 sum
// s, u = s + offset is positive (offset: a multiple of m at or above 2^31) and below 2^32;
// q = umulhi(u, magic), magic = ceil(2^32 / m), is floor(u / m) or one more, so u - q m is
// in [-m, m), and one correction puts it in [0, m).
// EXACT_DIV's, after them: magic39 = ceil(2^39 / m); half = lift + m / 2 and base = -128 lift / m
// (mod 2^32), with lift the least multiple of m at or above 2^14 (2^16 - 1), the largest |s|
// of K < 2^16 terms.
struct Moduli {
    int m[MAX_MODULI];
    unsigned magic[MAX_MODULI];
    unsigned offset[MAX_MODULI];
    unsigned magic39[MAX_MODULI];
    unsigned half[MAX_MODULI];
    unsigned base[MAX_MODULI];
};

// s mod m, symmetric: in [-(m / 2), m - 1 - m / 2] (what reference.residues returns).
__device__ __forceinline__ int residue(int s, int m, unsigned magic, unsigned offset) {
    const unsigned u = static_cast<unsigned>(s) + offset;
    int r = static_cast<int>(u - __umulhi(u, magic) * static_cast<unsigned>(m));
    if (r < 0) r += m;
    return r > m - 1 - m / 2 ? r - m : r;
}

// EXACT_DIV: the same residue with no correction. a = s + half = s + lift + m / 2 lies in
// [0, 2^31), where umulhi(a, magic39) >> 7 is q = floor(a / m) exactly (magic39's excess over
// 2^39 / m, times a, stays below 2^39 / m: runtime/ozaki.exact_division checks it for every
// modulus). Adding base before the (arithmetic) shift takes lift / m off q, so
// s - (q - lift / m) m = (a - q m) - m / 2, in [-(m / 2), m - 1 - m / 2]. Four instructions:
// an add, the multiply-high with base as its addend, a shift, a multiply-add by -m.
__device__ __forceinline__ int residue_exact(int s, int minus_m, unsigned magic39,
                                             unsigned half, unsigned base) {
    const unsigned a = static_cast<unsigned>(s) + half;
    const int q = static_cast<int>(__umulhi(a, magic39) + base) >> 7;
    return q * minus_m + s;
}

// Modulus l's reduction, as the epilogue applies it to a work item's sums.
struct Reduce {
    int m;
    unsigned magic, offset, magic39, half, base;
    __device__ __forceinline__ Reduce(const Moduli& mods, int l)
        : m(mods.m[l]), magic(mods.magic[l]), offset(mods.offset[l]),
          magic39(EXACT_DIV ? mods.magic39[l] : 0u), half(EXACT_DIV ? mods.half[l] : 0u),
          base(EXACT_DIV ? mods.base[l] : 0u) {}
    __device__ __forceinline__ int operator()(int s) const {
#if EXACT_DIV
        return residue_exact(s, -m, magic39, half, base);
#else
        return residue(s, m, magic, offset);
#endif
    }
};

#ifndef SGEMM_CPU_EMULATOR  // (tests/cuda_cpu.h has its own of these)
// hopper/wgmma.cuh's tma_load3, multicast: the box lands at `dst` in every block of the
// cluster in `mask`, and each one's barrier at `bar` counts its bytes.
__device__ __forceinline__ void tma_load3_multicast(unsigned dst, const TensorMap& map, int x,
                                                    int y, int z, unsigned bar,
                                                    unsigned short mask) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
        ".multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(&map)), "r"(x), "r"(y), "r"(z), "r"(bar),
        "h"(mask)
        : "memory");
}

// One arrival on the barrier at the same place in block `rank` of the cluster.
__device__ __forceinline__ void mbar_arrive_remote(unsigned bar, unsigned rank) {
    asm volatile(
        "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
        "r"(rank)
        : "memory");
}

// Every thread of the cluster arrives, then waits for all (barrier.cluster).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}

#if BN == 128
#define IG_SHAPE "m64n128k32"
#define IG_ACC(d) ACCS64("+r", d, 0)
#define IG_OPS "%64, %65, p;\n"
#define IG_SCALE "%66"
#else
#define IG_SHAPE "m64n256k32"
#define IG_ACC(d) ACCS64("+r", d, 0), ACCS64("+r", d, 64)
#define IG_OPS "%128, %129, p;\n"
#define IG_SCALE "%130"
#endif

// d (+)= A (64 x 32 bytes, shared) * B (32 x BN bytes, shared), signed bytes, INT32 sums.
__device__ __forceinline__ void wgmma_s8(int (&d)[BN / 2], unsigned long long a,
                                         unsigned long long b, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " IG_SCALE ", 0;\n"
                 "wgmma.mma_async.sync.aligned." IG_SHAPE ".s32.s8.s8 {" WG_D "}, " IG_OPS
                 "}\n"
                 : IG_ACC(d)
                 : "l"(a), "l"(b), "r"(accumulate));
}

#endif  // SGEMM_CPU_EMULATOR

// Two neighbouring residues (row, col), (row, col + 1) of plane R: one 2-byte store when both
// lie inside (ldr is even, so the pair is aligned).
__device__ __forceinline__ void store_pair(signed char* R, long long ldr, int row, int col,
                                           int M, int N, int r0, int r1) {
    if (row >= M) return;
    signed char* p = R + row * ldr + col;
    if (col + 1 < N) {
        *reinterpret_cast<unsigned short*>(p) =
            static_cast<unsigned short>((r0 & 0xFF) | ((r1 & 0xFF) << 8));
    } else if (col < N) {
        *p = static_cast<signed char>(r0);
    }
}

// STORE16: the residues of 32 columns (i = 4j .. 4j + 3 of the fragment) as whole rows. A
// quad (lanes 4g .. 4g + 3) holds rows r0 and r0 + 8 of them, two bytes a lane and row for
// each i; w[t] packs lane q's: row r0's pair in its low half, row r0 + 8's in its high half.
// Two exchanges leave each lane 16 consecutive bytes of one row:
//   - with lane q ^ 1, the halves: an even lane keeps row r0 and takes its partner's pair of
//     it, an odd lane keeps row r0 + 8 (u[t]: 4 bytes of row r0 + 8 (q & 1) at column
//     8i + 4 (q >> 1 & 1));
//   - with lane q ^ 2, the words: lane x = q >> 1 & 1 keeps i = 4j + 2x and 4j + 2x + 1 and
//     takes its partner's half of them.
// So a warp stores 16 rows x 32 bytes: whole sectors, one 16-byte store a thread, where the
// pairs took eight 2-byte stores a thread in quarter sectors.
__device__ __forceinline__ unsigned pack4(int r0a, int r0b, int r8a, int r8b) {
    return (r0a & 0xFF) | (r0b & 0xFF) << 8 | (r8a & 0xFF) << 16 |
           static_cast<unsigned>(r8b & 0xFF) << 24;
}

// Lane `lane`'s 16 bytes (rows r0 and r0 + 8, columns c32 .. c32 + 31 among its quad) from
// its w[4], stored where they lie inside (ldr, plane and R a multiple of 16 bytes).
__device__ __forceinline__ void store16(signed char* R, long long ldr, int r0, int c32, int M,
                                        int N, int lane, const unsigned (&w)[4]) {
    const bool odd = lane & 1, x = lane & 2;
    unsigned u[4];
#pragma unroll
    for (int t = 0; t < 4; t += 2) {
        const unsigned send = odd ? (w[t] & 0xFFFFu) | w[t + 1] << 16
                                  : w[t] >> 16 | (w[t + 1] & 0xFFFF0000u);
        const unsigned got = __shfl_xor_sync(0xFFFFFFFFu, send, 1);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const unsigned half = h ? got >> 16 : got & 0xFFFFu;  // the partner's, for t + h
            u[t + h] = odd ? half | (w[t + h] & 0xFFFF0000u) : (w[t + h] & 0xFFFFu) | half << 16;
        }
    }
    const unsigned g0 = __shfl_xor_sync(0xFFFFFFFFu, x ? u[0] : u[2], 2);
    const unsigned g1 = __shfl_xor_sync(0xFFFFFFFFu, x ? u[1] : u[3], 2);
    const uint4 v = x ? make_uint4(g0, u[2], g1, u[3]) : make_uint4(u[0], g0, u[1], g1);
    const int row = r0 + (odd ? 8 : 0), col = c32 + (x ? 16 : 0);
    if (row >= M || col >= N) return;
    signed char* at = R + row * ldr + col;
    if (col + 16 <= N) {
        *reinterpret_cast<uint4*>(at) = v;
        return;
    }
    // the last columns of the matrix, byte by byte
    unsigned long long lo = v.x | static_cast<unsigned long long>(v.y) << 32;
    unsigned long long hi = v.z | static_cast<unsigned long long>(v.w) << 32;
#pragma unroll 1
    for (int b = 0; b < N - col; ++b) {
        at[b] = static_cast<signed char>(lo);
        lo = lo >> 8 | hi << 56;
        hi >>= 8;
    }
}

// tma_a: planes of M x K bytes; tma_b: planes of N x K; R: planes of M x ldr bytes, plane l at
// R + l * plane. count moduli, planes in the maps' third dimension.
static_assert(CLUSTER == 1 || CLUSTER == 2, "CLUSTER is 1 or 2");
#if CLUSTER == 2
#define OZ_CLUSTER __cluster_dims__(2, 1, 1)
#else
#define OZ_CLUSTER
#endif

SGEMM_KERNEL __launch_bounds__(THREADS_PER_BLOCK, 1) OZ_CLUSTER
sgemm(const __grid_constant__ TensorMap tma_a, const __grid_constant__ TensorMap tma_b, int M,
      int N, int K, int count, const __grid_constant__ Moduli mods,
      signed char* __restrict__ R, long long ldr, long long plane) {
    griddep_wait();
    griddep_launch_dependents();
    const unsigned base = (smem_addr(dynamic_smem<unsigned char>()) + 1023u) & ~1023u;
    const unsigned a_tiles = base, b_tiles = base + STAGES * A_STAGE;
    const unsigned bars = base + STAGES * STAGE_BYTES;
    auto full = [&](int s) { return bars + 8 * s; };
    auto empty = [&](int s) { return bars + 8 * (STAGES + s); };

    // a cluster of CLUSTER blocks takes CLUSTER neighbouring row-tiles (a "group") at a time:
    // block `rank` computes row-tile CLUSTER * gm + rank (past the last one with zeros, and
    // stores nothing), and loads 1 / CLUSTER of B's tile for all of them
    const int tiles_m = ceil_div(M, TM), tiles_n = ceil_div(N, BN);
    const int groups_m = ceil_div(tiles_m, CLUSTER);
    const int tiles = groups_m * tiles_n, ktiles = ceil_div(K, KB);
    const int work = tiles * count;  // (modulus, group) pairs, a modulus's groups together
    const int first = blockIdx.x / CLUSTER, step = gridDim.x / CLUSTER;
#if CLUSTER == 2
    const unsigned rank = cluster_rank(), peer = rank ^ 1u;
#else
    const unsigned rank = 0;
#endif
    // work item w: modulus l, and this block's row-tile tm and column-tile tn
    auto item = [&](int w, int& l, int& tm, int& tn) {
        l = w / tiles;
        int gm;
        tile_of(w - l * tiles, groups_m, tiles_n, gm, tn);
        tm = gm * CLUSTER + static_cast<int>(rank);
    };

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full(s), 1);
            // the stage's consumer threads (both warpgroups, or with PINGPONG the one whose
            // tile it holds), and one arrival per warp of the peer's
            mbar_init(empty(s), (PINGPONG ? 1 : CONSUMERS) * 128 + (CLUSTER - 1) * CONSUMERS * 4);
        }
        mbar_init_fence();
        tma_prefetch(tma_a);
        tma_prefetch(tma_b);
    }
#if CLUSTER == 2
    cluster_sync();  // the peer's barriers exist before anything lands in them
#else
    __syncthreads();
#endif

    if (threadIdx.x < 128) {
        setmaxnreg_dec<40>();
        if (threadIdx.x == 0) {
            int stage = 0;
            unsigned phase = 0;
            for (int w = first; w < work; w += step) {
                int l, tm, tn;
                item(w, l, tm, tn);
                for (int kt = 0; kt < ktiles; ++kt) {
                    mbar_wait(empty(stage), phase ^ 1);
                    mbar_expect_tx(full(stage), STAGE_BYTES);
                    tma_load3(a_tiles + stage * A_STAGE, tma_a, kt * KB, tm * TM, l,
                              full(stage));
#if CLUSTER == 2
                    tma_load3_multicast(b_tiles + stage * B_BYTES + rank * (B_BYTES / 2),
                                        tma_b, kt * KB, tn * BN + rank * (BN / 2), l,
                                        full(stage), 0x3);
#else
                    tma_load3(b_tiles + stage * B_BYTES, tma_b, kt * KB, tn * BN, l,
                              full(stage));
#endif
                    if (++stage == STAGES) stage = 0, phase ^= 1;
                }
            }
        }
#if CLUSTER == 2
        __syncwarp();
        cluster_sync();  // no block leaves while its peer may still write to it
#endif
        return;
    }
    setmaxnreg_inc<232>();
    const int ct = threadIdx.x - 128, cw = ct / 128;
    const int warp = ct % 128 / 32, lane = ct % 32;
    // a stage is free once every consumer of both blocks is done with it (the peer's
    // multicast writes into it too)
    auto release = [&](int s) {
        mbar_arrive(empty(s));
#if CLUSTER == 2
        __syncwarp();
        if (lane == 0) mbar_arrive_remote(empty(s), peer);
#endif
    };
    // PINGPONG: warpgroup cw takes the block's items n = cw, cw + 2, ..., and the two main
    // loops take turns: named barrier 1 + c opens warpgroup c's, once the other has waited
    // for its last stage. That keeps the ring's stages in the order the producer fills them
    // (a stage's full barrier is never waited on two phases ahead, where its parity would
    // read as complete), and lets one warpgroup's epilogue run under the other's products.
    const int items = first < work ? (work - 1 - first) / step + 1 : 0;
    int acc[RM][BN / 2];
    for (int n = PINGPONG ? cw : 0; n < items; n += PINGPONG ? 2 : 1) {
        int l, tm, tn;
        item(first + n * step, l, tm, tn);
        // item n's stages follow the ring from n x ktiles on
        int stage = n * ktiles % STAGES, prev = stage;
        unsigned phase = n * ktiles / STAGES & 1;
#if PINGPONG
        if (n > 0) named_bar_sync(1 + cw, 256);
#endif
        for (int kt = 0; kt < ktiles; ++kt) {
            mbar_wait(full(stage), phase);
            const unsigned a = a_tiles + stage * A_STAGE + (PINGPONG ? 0 : cw * 64 * 128);
            const unsigned b = b_tiles + stage * B_BYTES;
#pragma unroll
            for (int r = 0; r < RM; ++r) pin(acc[r]);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < KB / 32; ++kk)
#pragma unroll
                for (int r = 0; r < RM; ++r)
                    wgmma_s8(acc[r], smem_desc(a + r * 64 * 128 + 32 * kk),
                             smem_desc(b + 32 * kk), kt > 0 || kk > 0);
            wgmma_commit();
            wgmma_wait<1>();
#pragma unroll
            for (int r = 0; r < RM; ++r) pin(acc[r]);
            if (kt > 0) release(prev);
            prev = stage;
            if (++stage == STAGES) stage = 0, phase ^= 1;
        }
#if PINGPONG
        if (n + 1 < items) named_bar_arrive(1 + (cw ^ 1), 256);  // the other's turn
#endif
        wgmma_wait<0>();
#pragma unroll
        for (int r = 0; r < RM; ++r) pin(acc[r]);
        release(prev);
        // the residues (accumulator fragment: hopper/wgmma.cuh, store_tile)
        const Reduce reduce(mods, l);
        signed char* out = R + l * plane;
#pragma unroll
        for (int r = 0; r < RM; ++r) {
            const int r0 = tm * TM + (PINGPONG ? r : cw) * 64 + warp * 16 + lane / 4;
#if STORE16
#pragma unroll
            for (int j = 0; j < BN / 32; ++j) {
                unsigned w[4];
#pragma unroll
                for (int t = 0; t < 4; ++t) {
                    const int i = 4 * j + t;
                    w[t] = pack4(reduce(acc[r][4 * i]),
                                 reduce(acc[r][4 * i + 1]),
                                 reduce(acc[r][4 * i + 2]),
                                 reduce(acc[r][4 * i + 3]));
                }
                store16(out, ldr, r0, tn * BN + 32 * j, M, N, lane, w);
            }
#else
            const int c0 = tn * BN + 2 * (lane % 4);
#pragma unroll
            for (int i = 0; i < BN / 8; ++i) {
                store_pair(out, ldr, r0, c0 + 8 * i, M, N,
                           reduce(acc[r][4 * i]),
                           reduce(acc[r][4 * i + 1]));
                store_pair(out, ldr, r0 + 8, c0 + 8 * i, M, N,
                           reduce(acc[r][4 * i + 2]),
                           reduce(acc[r][4 * i + 3]));
            }
#endif
        }
    }
#if CLUSTER == 2
    cluster_sync();
#endif
}
