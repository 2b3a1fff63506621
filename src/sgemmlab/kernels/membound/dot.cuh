// membound/dot.cuh — the second structure of rungs 15 and 16: the streamed operand's rows
// run along k, so every output is a dot product of one streamed row with one row of T.
//
//     O(r, l) = sum_k T(r, k) * S(l, k)     r < Rows (the small side), l < Span (the long one)
//
// S(l, k) = S[l * lds + k] is streamed once; T, Rows x K, is small. Rung 15 uses it for
// M <= 16 with B column-major (S = B^T: a weight stored N x K, as nn.Linear keeps it; Rows,
// Span, Warps, Unroll = RM, BN, WARPS, UNROLL), rung 16 for N <= 16 with A row-major (S = A,
// T = B^T, O = C^T).
//
// Each warp owns NC = Span/Warps rows of S; its lanes stride along k, a float4 each (128 k,
// 512 contiguous bytes per warp-wide load), DU = max(1, Unroll/NC) per row per step: NC*DU
// loads in flight per lane. T goes through shared memory in phases of KPH k (Rows x KPH
// floats, rows padded by 4), two stages: the block copies phase p+1 with cp.async while it
// computes phase p, one barrier per phase. A lane reads its float4 of each T row (LDS.128,
// consecutive lanes, no conflict) and reuses it for its NC rows of S. Rows of S past the
// edge read the last valid row (never stored), so full steps have no predicates; the last,
// partial step checks k. The end: a shuffle butterfly over the 32 lanes, the same additions
// in every lane: bit-identical run to run.
#pragma once
#include "async_copy.cuh"
#include "epilogue.cuh"

template <int Rows, int Span, int Warps, int Unroll>
struct DotShape {
    static constexpr int NC = Span / Warps > 0 ? Span / Warps : 1;         // S rows per warp
    static constexpr int DU = Unroll / NC > 1 ? Unroll / NC : 1;       // float4 per row per step
    static constexpr int KSTEP = 128 * DU;                             // k per step
    static constexpr int KPH = 4096 / Rows > KSTEP ? 4096 / Rows : KSTEP;  // k per phase of T
    static constexpr int TLD = KPH + 4;                                // floats per row of a stage
    static constexpr int SMEM_FLOATS = 2 * Rows * TLD;
    static constexpr int LIVE = Rows * NC + 4 * NC * DU + 2 * NC + 28;   // registers, estimated
};

// Four consecutive elements that all lie inside: one 16-byte load under SGEMM_VEC4.
__device__ __forceinline__ float4 dot_load4(const float* p) {
#if SGEMM_VEC4
    return *reinterpret_cast<const float4*>(p);
#else
    return make_float4(p[0], p[1], p[2], p[3]);
#endif
}

// S: the streamed operand at (the tile's first row l, k = 0), rows lds floats apart.
// T: the small operand at (the tile's first row r, k = 0): T(r, k) = T[r * ldt + k] when
//    T_K (k contiguous), else T[k * ldt + r].
// O: the output at the tile's origin: O(r, l) = O[r * ldo + l], or O[l * ldo + r] when O_T.
// rows, lrows: the tile's rows of T and of S that lie inside the matrices (>= 1).
// src: beta's term, at O's origin in C's terms (C's row is l and its column r when O_T).
template <int Rows, int Span, int Warps, int Unroll, bool T_K, bool O_T>
__device__ __forceinline__ void dot_tile(const float* __restrict__ S, int lds,
                                         const float* __restrict__ T, int ldt,
                                         float* __restrict__ O, int ldo, int rows, int lrows,
                                         int K, float alpha, float beta, float* smem,
                                         const Source& src) {
    using Sh = DotShape<Rows, Span, Warps, Unroll>;
    constexpr int NC = Sh::NC, DU = Sh::DU, KSTEP = Sh::KSTEP, KPH = Sh::KPH, TLD = Sh::TLD;
    constexpr int THREADS_ = Warps * 32;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const float* srow[NC];  // the warp's rows of S; past the edge, the last valid one
#pragma unroll
    for (int c = 0; c < NC; ++c)
        srow[c] = S + static_cast<long long>(min(warp * NC + c, lrows - 1)) * lds;

    // T(0 .. RM, kp .. kp + KPH) -> stage[r][kk], zero past the matrix
    auto stage = [&](int kp, float* dst) {
        const int left = K - kp;
#pragma unroll 4
        for (int t = 0; t < ceil_div(Rows * KPH, THREADS_); ++t) {
            const int i = t * THREADS_ + threadIdx.x;
            if (Rows * KPH % THREADS_ != 0 && i >= Rows * KPH) break;
            const int r = T_K ? i / KPH : i % Rows, kk = T_K ? i % KPH : i / Rows;
            const bool ok = r < rows && kk < left;
            const float* src = T;  // a valid address for a copy of zero bytes
            if (ok)
                src = T_K ? T + static_cast<long long>(r) * ldt + kp + kk
                          : T + (static_cast<long long>(kp) + kk) * ldt + r;
            cp_async4(dst + r * TLD + kk, src, ok ? 4 : 0);
        }
        cp_async_commit();
    };

    float acc[Rows][NC];
#pragma unroll
    for (int r = 0; r < Rows; ++r)
#pragma unroll
        for (int c = 0; c < NC; ++c) acc[r][c] = 0.0f;

    stage(0, smem);
    for (int ks = 0;; ks += KSTEP) {
        const int left = K - ks;  // >= 1: no overflow
        float4 s[NC][DU];
        if (left >= KSTEP) {  // a full step: every load inside
#pragma unroll
            for (int c = 0; c < NC; ++c)
#pragma unroll
                for (int u = 0; u < DU; ++u)
                    s[c][u] = dot_load4(srow[c] + ks + 128 * u + 4 * lane);
        } else {
#pragma unroll
            for (int c = 0; c < NC; ++c)
#pragma unroll
                for (int u = 0; u < DU; ++u)
                    s[c][u] = load4_or_zero(srow[c] + ks, 128 * u + 4 * lane, left, true);
        }
        const int phase = ks / KPH, kin = ks % KPH;
        if (kin == 0) {  // a new phase: its T was copied during the last one
            cp_async_wait<0>();
            __syncthreads();  // ... and everyone is done with the stage the next copy fills
            if (left > KPH) stage(ks + KPH, smem + (phase + 1) % 2 * Rows * TLD);
        }
        const float* ts = smem + phase % 2 * Rows * TLD + kin + 4 * lane;
#pragma unroll
        for (int u = 0; u < DU; ++u)
#pragma unroll
            for (int r = 0; r < Rows; ++r) {
                const float4 t = *reinterpret_cast<const float4*>(ts + r * TLD + 128 * u);
#pragma unroll
                for (int c = 0; c < NC; ++c) {
                    float a = acc[r][c];
                    a = fmaf(t.x, s[c][u].x, a);
                    a = fmaf(t.y, s[c][u].y, a);
                    a = fmaf(t.z, s[c][u].z, a);
                    acc[r][c] = fmaf(t.w, s[c][u].w, a);
                }
            }
        if (left <= KSTEP) break;
    }

    // the 32 lanes' partial sums: a butterfly, the same additions in every lane
#pragma unroll
    for (int off = 16; off > 0; off /= 2)
#pragma unroll
        for (int r = 0; r < Rows; ++r)
#pragma unroll
            for (int c = 0; c < NC; ++c) acc[r][c] += __shfl_xor_sync(0xffffffffu, acc[r][c], off);
#pragma unroll
    for (int r = 0; r < Rows; ++r)
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            const int l = warp * NC + c;
            if (lane == (r * NC + c) % 32 && r < rows && l < lrows) {
                float* o = O_T ? O + static_cast<long long>(l) * ldo + r
                               : O + static_cast<long long>(r) * ldo + l;
                *o = epilogue(acc[r][c], alpha, beta,
                              O_T ? src.of(o, l, r) : src.of(o, r, l));
            }
        }
}
