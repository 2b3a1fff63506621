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
#ifndef BN
#define BN 256
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef CLUSTER
#define CLUSTER 1  // 2: two blocks of neighbouring row-tiles share B's tile (TMA multicast)
#endif
#include "hopper/wgmma.cuh"

constexpr int KB = 128;  // int8 per k-tile (= BK floats' 128 bytes)
constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
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
struct Moduli {
    int m[MAX_MODULI];
    unsigned magic[MAX_MODULI];
    unsigned offset[MAX_MODULI];
};

// s mod m, symmetric: in [-(m / 2), m - 1 - m / 2] (what reference.residues returns).
__device__ __forceinline__ int residue(int s, int m, unsigned magic, unsigned offset) {
    const unsigned u = static_cast<unsigned>(s) + offset;
    int r = static_cast<int>(u - __umulhi(u, magic) * static_cast<unsigned>(m));
    if (r < 0) r += m;
    return r > m - 1 - m / 2 ? r - m : r;
}

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
    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const unsigned a_tiles = base, b_tiles = base + STAGES * A_BYTES;
    const unsigned bars = base + STAGES * STAGE_BYTES;
    auto full = [&](int s) { return bars + 8 * s; };
    auto empty = [&](int s) { return bars + 8 * (STAGES + s); };

    // a cluster of CLUSTER blocks takes CLUSTER neighbouring row-tiles (a "group") at a time:
    // block `rank` computes row-tile CLUSTER * gm + rank (past the last one with zeros, and
    // stores nothing), and loads 1 / CLUSTER of B's tile for all of them
    const int tiles_m = ceil_div(M, BM), tiles_n = ceil_div(N, BN);
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
            // this block's consumer threads, and one arrival per warp of the peer's
            mbar_init(empty(s), CONSUMERS * 128 + (CLUSTER - 1) * CONSUMERS * 4);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        tma_prefetch(tma_a);
        tma_prefetch(tma_b);
    }
#if CLUSTER == 2
    cluster_sync();  // the peer's barriers exist before anything lands in them
#else
    __syncthreads();
#endif

    int stage = 0;
    unsigned phase = 0;
    if (threadIdx.x < 128) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (threadIdx.x == 0) {
            for (int w = first; w < work; w += step) {
                int l, tm, tn;
                item(w, l, tm, tn);
                for (int kt = 0; kt < ktiles; ++kt) {
                    mbar_wait(empty(stage), phase ^ 1);
                    mbar_expect_tx(full(stage), STAGE_BYTES);
                    tma_load3(a_tiles + stage * A_BYTES, tma_a, kt * KB, tm * BM, l,
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
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
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
    int acc[BN / 2];
    int prev = 0;
    for (int w = first; w < work; w += step) {
        int l, tm, tn;
        item(w, l, tm, tn);
        for (int kt = 0; kt < ktiles; ++kt) {
            mbar_wait(full(stage), phase);
            const unsigned a = a_tiles + stage * A_BYTES + cw * 64 * 128;
            const unsigned b = b_tiles + stage * B_BYTES;
            pin(acc);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < KB / 32; ++kk)
                wgmma_s8(acc, smem_desc(a + 32 * kk), smem_desc(b + 32 * kk), kt > 0 || kk > 0);
            wgmma_commit();
            wgmma_wait<1>();
            pin(acc);
            if (kt > 0) release(prev);
            prev = stage;
            if (++stage == STAGES) stage = 0, phase ^= 1;
        }
        wgmma_wait<0>();
        pin(acc);
        release(prev);
        // the residues (accumulator fragment: hopper/wgmma.cuh, store_tile)
        const int m = mods.m[l];
        const unsigned magic = mods.magic[l], offset = mods.offset[l];
        signed char* out = R + l * plane;
        const int r0 = tm * BM + cw * 64 + warp * 16 + lane / 4;
        const int c0 = tn * BN + 2 * (lane % 4);
#pragma unroll
        for (int i = 0; i < BN / 8; ++i) {
            store_pair(out, ldr, r0, c0 + 8 * i, M, N, residue(acc[4 * i], m, magic, offset),
                       residue(acc[4 * i + 1], m, magic, offset));
            store_pair(out, ldr, r0 + 8, c0 + 8 * i, M, N,
                       residue(acc[4 * i + 2], m, magic, offset),
                       residue(acc[4 * i + 3], m, magic, offset));
        }
    }
#if CLUSTER == 2
    cluster_sync();
#endif
}
