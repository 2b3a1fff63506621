// splitk.cuh — split-K's three steps, shared by rungs 15, 16 and 18: which part of K a block
// takes, how the parts of one output tile learn which of them arrived last, and how that
// last one adds the parts up.
//
// The workspace (runtime/decompose.py sizes it, runtime/workspace.py owns it): one counter per
// output tile in a region that is zero before the launch and zero after it, and one slot
// per (tile, part) for the raw partial sums. Every part stores its slot, then counts itself
// in; the block that brings the count to `split` adds the slots in the order p = 0, 1, ...
// (whichever block is last, the same additions in the same order: bit-reproducible) and
// puts the counter back to zero.
#pragma once
#include "epilogue.cuh"

// Part `part` of `split` over `units` units of K (k-tiles, or the quanta a rung steps by):
// units [units * part / split, units * (part + 1) / split). 64-bit products: no overflow.
__device__ __forceinline__ int split_first(int units, int part, int split) {
    return static_cast<int>(static_cast<long long>(units) * part / split);
}

// This block's part of K (part `part` of `split`) in whole quanta of Q k: [k0, k0 + kp),
// kp >= 1 (the host cuts at most ceil(K / Q) parts); k0 a multiple of Q, so a part of a
// float4-aligned operand starts aligned. 64-bit: K near 2^31 does not wrap.
template <int Q>
__device__ __forceinline__ void split_k_range(int K, int part, int split, long long& k0,
                                              int& kp) {
    const int units = static_cast<int>((static_cast<long long>(K) + Q - 1) / Q);
    k0 = static_cast<long long>(Q) * split_first(units, part, split);
    const long long k1 = static_cast<long long>(Q) * split_first(units, part + 1, split);
    kp = static_cast<int>((k1 < K ? k1 : K) - k0);
}

// Count this block's part in on its tile's counter, after its slot is stored. True, in
// every thread of the block, when this block arrived last (and then sees every other part's
// slot); that block puts the counter back to zero once it has summed (split_done: no other
// block touches the counter again in this launch).
__device__ __forceinline__ bool split_arrive_last(int* __restrict__ counter, int split) {
    __threadfence();  // this thread's slot stores are visible before the count says so
    __syncthreads();  // ... every thread's
    if (!__syncthreads_or(threadIdx.x == 0 && atomicAdd(counter, 1) == split - 1)) return false;
    __threadfence();  // the others' slots: their fences preceded their counts
    return true;
}

// The last part's sum of one tile whose slots hold Rows x Span values each, element e of a
// slot being the tile's (r, l) at e = r * Span + l, or e = l * Rows + r when O_T (the layout
// the output takes, so that consecutive threads read consecutive words of the slots and
// write consecutive words of O). O(r, l) = O[r * ldo + l], or O[l * ldo + r] when O_T;
// rows, lrows: the tile's r and l that lie inside the matrix; src: beta's term, at O's
// origin in C's terms (C's row is l and its column r when O_T). __ldcg: the slots were
// written by other SMs, so they are read from L2, past this SM's L1.
template <int Rows, int Span, bool O_T, int THREADS_>
__device__ __forceinline__ void split_sum_tile(const float* __restrict__ slots, int split,
                                               float* __restrict__ O, int ldo, int rows,
                                               int lrows, float alpha, float beta,
                                               const Source& src) {
    constexpr int TILE = Rows * Span;
    for (int e = threadIdx.x; e < TILE; e += THREADS_) {
        const int r = O_T ? e % Rows : e / Span, l = O_T ? e / Rows : e % Span;
        if (r >= rows || l >= lrows) continue;
        float v = 0.0f;
        for (int p = 0; p < split; ++p) v += __ldcg(slots + static_cast<long long>(p) * TILE + e);
        float* o = O_T ? O + static_cast<long long>(l) * ldo + r
                       : O + static_cast<long long>(r) * ldo + l;
        *o = epilogue(v, alpha, beta, O_T ? src.of(o, l, r) : src.of(o, r, l));
    }
}

// The last part, after its sum: the tile's counter back to zero for the next launch. (After
// the sum, not before: ptxas spills rung 18's fix-up when the store comes first.)
__device__ __forceinline__ void split_done(int* __restrict__ counter) {
    if (threadIdx.x == 0) *counter = 0;
}
