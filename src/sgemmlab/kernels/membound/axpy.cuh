// membound/axpy.cuh — the first structure of rungs 15 and 16: the streamed operand's rows run
// along the long side, so lanes own columns and loop over k (an axpy per k).
//
//     O(r, j) = sum_k T(r, k) * S(k, j)     r < Rows (the small side), j < Span (the long one)
//
// S(k, j) = S[k * lds + j] is streamed once; T, Rows x K, is small. Rung 15 uses it for
// M <= 16 with B row-major (S = B, T = A; Rows, Span, Warps, Unroll = RM, BN, WARPS, UNROLL),
// rung 16 for N <= 16 with A column-major (S = A read as K rows of M, T = B^T, O = C^T).
//
// A lane owns four consecutive j (one float4 under SGEMM_VEC4); CG = Span/4 lanes span the
// block's columns, and the other KL = 32/CG lanes of the warp, and the other warps, take
// other k: K is split 32*Warps/CG ways inside the block, so even a few blocks (N = 4096 in
// 32 columns is 128 of them) keep every SM's loads in flight. A warp walks chunks of
// KCW = KL * Unroll consecutive k, Warps chunks apart: it issues its Unroll loads of S,
// copies the chunk of T (Rows x KCW floats, L2-resident) into its own corner of shared
// memory as [k][r] (a lane reads its k's values with LDS.128, broadcast to the CG lanes
// that share that k), then does the FFMAs. No block barrier inside the loop. At the end a
// shuffle butterfly adds the KL lanes that share columns and the warps' sums meet in
// shared memory, added in warp order: the same order on every run, no atomics.
#pragma once
#include "epilogue.cuh"

template <int Rows, int Span, int Warps, int Unroll>
struct AxpyShape {
    static constexpr int CG = Span / 4 > 0 ? Span / 4 : 1;     // lanes across the columns
    static constexpr int KL = 32 / CG > 0 ? 32 / CG : 1;   // lanes across k, per warp
    static constexpr int KCW = KL * Unroll;                 // k per warp per chunk
    static constexpr int RMP = Rows >= 4 ? Rows + 4 : Rows;       // floats per k in a T chunk
    static constexpr int CHUNKS = Warps * KCW * RMP;        // the warps' T chunks
    static constexpr int SUMS = Warps * Rows * Span;            // the warps' partial sums
    static constexpr int SMEM_FLOATS = CHUNKS > SUMS ? CHUNKS : SUMS;
    static constexpr int LIVE = 5 * Rows + 4 * Unroll + 24;   // registers, estimated
};

namespace axpy_detail {
// Four consecutive elements p[0..3], zero where ok is false or past `valid` (0-4). FULL: all
// four lie inside, one 16-byte load under SGEMM_VEC4.
template <bool FULL>
__device__ __forceinline__ float4 load4(const float* p, bool ok, int valid) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if constexpr (FULL && SGEMM_VEC4) {
        if (ok) v = *reinterpret_cast<const float4*>(p);
    } else {
        if (ok && 0 < valid) v.x = p[0];
        if (ok && 1 < valid) v.y = p[1];
        if (ok && 2 < valid) v.z = p[2];
        if (ok && 3 < valid) v.w = p[3];
    }
    return v;
}
}  // namespace axpy_detail

// The main loop, for one warp: acc += its chunks of T x S. FULL: the lane's four columns
// all lie inside (one float4 per k under SGEMM_VEC4); else the tile's last lanes, checked.
template <bool FULL, int Rows, int Span, int Warps, int Unroll, bool T_K>
__device__ __forceinline__ void axpy_walk(float (&acc)[Rows][4], const float* __restrict__ S,
                                          int lds, const float* __restrict__ T, int ldt,
                                          int rows, int K, int valid, float* ts, int warp,
                                          int lane) {
    using Sh = AxpyShape<Rows, Span, Warps, Unroll>;
    constexpr int KL = Sh::KL, KCW = Sh::KCW, RMP = Sh::RMP;
    constexpr int STRIDE = Warps * KCW;  // k from one of a warp's chunks to its next
    constexpr int TLOADS = ceil_div(Rows * KCW, 32);  // a lane's share of a chunk of T
    const int kl = lane / Sh::CG;
    const long long s_step = static_cast<long long>(KL) * lds;  // from u to u + 1
    for (int k0 = warp * KCW; k0 < K;) {
        const int left = K - k0;  // k from the chunk's first on (>= 1): no overflow
        const float* p = S + (static_cast<long long>(k0) + kl) * lds;
        float4 s[Unroll];
#pragma unroll
        for (int u = 0; u < Unroll; ++u)  // first: the stream's loads take flight
            s[u] = axpy_detail::load4<FULL>(p + u * s_step, u * KL + kl < left, valid);
        // then the chunk of T, all of a lane's loads at once (zero past rows and K)
        float v[TLOADS];
#pragma unroll
        for (int t = 0; t < TLOADS; ++t) {
            const int i = t * 32 + lane;
            const int r = T_K ? i / KCW : i % Rows, kk = T_K ? i % KCW : i / Rows;
            v[t] = 0.0f;
            if (i < Rows * KCW && r < rows && kk < left)
                v[t] = T_K ? T[static_cast<long long>(r) * ldt + k0 + kk]
                           : T[(static_cast<long long>(k0) + kk) * ldt + r];
        }
        __syncwarp();  // every lane is done reading the previous chunk of T
#pragma unroll
        for (int t = 0; t < TLOADS; ++t) {
            const int i = t * 32 + lane;
            const int r = T_K ? i / KCW : i % Rows, kk = T_K ? i % KCW : i / Rows;
            if (i < Rows * KCW) ts[kk * RMP + r] = v[t];
        }
        __syncwarp();
#pragma unroll
        for (int u = 0; u < Unroll; ++u) {
            const float* t = ts + (u * KL + kl) * RMP;
            float tv[Rows];
            if constexpr (Rows % 4 == 0) {
#pragma unroll
                for (int r = 0; r < Rows; r += 4) {
                    const float4 q = *reinterpret_cast<const float4*>(t + r);
                    tv[r] = q.x, tv[r + 1] = q.y, tv[r + 2] = q.z, tv[r + 3] = q.w;
                }
            } else {
#pragma unroll
                for (int r = 0; r < Rows; ++r) tv[r] = t[r];
            }
#pragma unroll
            for (int r = 0; r < Rows; ++r) {
                acc[r][0] = fmaf(tv[r], s[u].x, acc[r][0]);
                acc[r][1] = fmaf(tv[r], s[u].y, acc[r][1]);
                acc[r][2] = fmaf(tv[r], s[u].z, acc[r][2]);
                acc[r][3] = fmaf(tv[r], s[u].w, acc[r][3]);
            }
        }
        if (left <= STRIDE) break;
        k0 += STRIDE;
    }
}

// S: the streamed operand at (k = 0, the tile's first column j), rows lds floats apart.
// T: the small operand at (the tile's first row r, k = 0): T(r, k) = T[r * ldt + k] when
//    T_K (k contiguous), else T[k * ldt + r].
// O: the output at the tile's origin: O(r, j) = O[r * ldo + j], or O[j * ldo + r] when O_T.
// rows, cols: the tile's rows and columns that lie inside the matrices (>= 1).
// src: beta's term, at O's origin in C's terms (C's row is c and its column r when O_T).
template <int Rows, int Span, int Warps, int Unroll, bool T_K, bool O_T>
__device__ __forceinline__ void axpy_tile(const float* __restrict__ S, int lds,
                                          const float* __restrict__ T, int ldt,
                                          float* __restrict__ O, int ldo, int rows, int cols,
                                          int K, float alpha, float beta, float* smem,
                                          const Source& src) {
    using Sh = AxpyShape<Rows, Span, Warps, Unroll>;
    constexpr int CG = Sh::CG, KCW = Sh::KCW, RMP = Sh::RMP;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int kl = lane / CG, j = lane % CG * 4;  // the lane's k in a row group; its columns
    const int valid = min(max(cols - j, 0), 4);   // of those four, the ones inside
    float* ts = smem + warp * KCW * RMP;          // the warp's chunk of T, [KCW][RMP]

    float acc[Rows][4];
#pragma unroll
    for (int r = 0; r < Rows; ++r) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0.0f;
    if (valid == 4)
        axpy_walk<true, Rows, Span, Warps, Unroll, T_K>(acc, S + j, lds, T, ldt, rows, K, valid,
                                                        ts, warp, lane);
    else
        axpy_walk<false, Rows, Span, Warps, Unroll, T_K>(acc, S + j, lds, T, ldt, rows, K,
                                                         valid, ts, warp, lane);

    // the KL lanes that share columns: a butterfly, the same additions in every lane
#pragma unroll
    for (int off = CG; off < 32; off *= 2)
#pragma unroll
        for (int r = 0; r < Rows; ++r)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[r][q] += __shfl_xor_sync(0xffffffffu, acc[r][q], off);
    __syncthreads();  // every warp is done with its chunk of T: the sums overlay them
    float* sums = smem;  // [Warps][Rows][Span]
    if (kl == 0) {
#pragma unroll
        for (int r = 0; r < Rows; ++r)
#pragma unroll
            for (int q = 0; q < 4; ++q) sums[(warp * Rows + r) * Span + j + q] = acc[r][q];
    }
    __syncthreads();
    // consecutive threads take consecutive addresses of O; each adds the warps in order
    for (int i = threadIdx.x; i < Rows * Span; i += Warps * 32) {
        const int r = O_T ? i % Rows : i / Span, c = O_T ? i / Rows : i % Span;
        if (r < rows && c < cols) {
            float v = sums[r * Span + c];
#pragma unroll
            for (int w = 1; w < Warps; ++w) v += sums[(w * Rows + r) * Span + c];
            float* o = O_T ? O + static_cast<long long>(c) * ldo + r
                           : O + static_cast<long long>(r) * ldo + c;
            *o = epilogue(v, alpha, beta, O_T ? src.of(o, c, r) : src.of(o, r, c));
        }
    }
}
