// epilogue.cuh — the epilogue's hook: where beta's term is read (the rungs with the
// "source" feature: 13-18, their twins 22-25, and the tensor-core rungs 19-20 through
// hopper/wgmma.cuh's store2; sgemmlab.registry).
//
// SGEMM_SOURCE = 1: beta's term comes from a matrix X of its own instead of from C:
// C = alpha * A @ B + beta * X, X(row, col) at X[row * ldx + col]. ldx = 0 repeats one row down
// C: a bias, as F.linear and addmm add it, in the same pass that writes C (C is then written
// and never read). X and ldx follow ldc among the kernel's parameters (SGEMM_SOURCE_PARAMS);
// a batch repeats X for every product. Without it, nothing changes: the cubins are the ones
// built before the hook existed, byte for byte (checked when it was added).
// SGEMM_SOURCE = 2: the bias alone (the launcher's choice when ldx = 0): X(row, col) at
// X[col], ldx passed and unread. Its epilogue has no row arithmetic, and that is not only
// fewer instructions: with the general source, ptxas scheduled the k-loop of rung 25 at
// 128 x 32 warp tiles 5.6 % slower by its own stall counts (1225 cycles a pass against
// 1160 without a source); with the bias alone the loop is the one without a source, cycle
// for cycle. On the H200 at 8192 x 3072 x 1024 (x @ W^T + b): 0.938 of cuBLAS with the
// general source, 1.007 with the bias variant, 1.011 with no source at all
// (results/nvidia-h200/pairs/source-20261203T090517Z.json).
#pragma once
#include "common.cuh"

#ifndef SGEMM_SOURCE
#define SGEMM_SOURCE 0
#endif
#if SGEMM_SOURCE
#define SGEMM_SOURCE_PARAMS , const float* __restrict__ X, long long ldx
#define SGEMM_SOURCE_ARG (Source{X, ldx})
#else
#define SGEMM_SOURCE_PARAMS
#define SGEMM_SOURCE_ARG (Source{})
#endif

// The epilogue's hook: where beta's term is read. Placed like C: `at(row0, col0)` moves it to
// a block's tile as C's pointer moves there; `of(c, row, col)` is the term's address for C's
// element c at (row, col) from that origin: c itself, or with SGEMM_SOURCE X's element. Every
// rung with the "source" feature reads beta's term through one, so a bias costs no pass of
// its own. (Without SGEMM_SOURCE it is empty and compiles to what `epilogue` alone does.)
struct Source {
#if SGEMM_SOURCE == 2
    const float* x;
    long long ld;  // 0, unread
    __device__ __forceinline__ Source at(int, int col) const { return {x + col, 0}; }
    __device__ __forceinline__ const float* of(const float*, int, int col) const {
        return x + col;
    }
#elif SGEMM_SOURCE
    const float* x;
    long long ld;
    __device__ __forceinline__ Source at(int row, int col) const {
        return {x + row * ld + col, ld};
    }
    __device__ __forceinline__ const float* of(const float*, int row, int col) const {
        return x + row * ld + col;
    }
#else
    __device__ __forceinline__ Source at(int, int) const { return *this; }
    __device__ __forceinline__ const float* of(const float* c, int, int) const { return c; }
#endif
};

// common.cuh's store_c and store4_c with beta's term from `src` (row, col from C's origin, as
// src's are). Without SGEMM_SOURCE they are common.cuh's own: the source-aware bodies are
// kept apart rather than made the only ones, since a hook-generic store4_c compiled rung 10
// to other machine code.
#if SGEMM_SOURCE
__device__ __forceinline__ void store_c(float* C, int ldc, int row, int col, int M, int N,
                                        float acc, float alpha, float beta, Source src) {
    if (row < M && col < N) {
        float* c = row_ptr(C, row, ldc) + col;
        *c = epilogue(acc, alpha, beta, src.of(c, row, col));
    }
}

// (a source is aligned where C is: the launcher checks X and ldx as it checks C and ldc)
__device__ __forceinline__ void store4_c(float* C, int ldc, int row, int col, int M, int N,
                                         float4 acc, float alpha, float beta, Source src) {
    if (row >= M) return;
    float* c = row_ptr(C, row, ldc) + col;
    const float* x = src.of(c, row, col);
#if SGEMM_STORE4
    if (col + 3 < N) {
        float4 out;
        if (beta == 0.0f) {
            out = make_float4(alpha * acc.x, alpha * acc.y, alpha * acc.z, alpha * acc.w);
        } else {
            const float4 old = *reinterpret_cast<const float4*>(x);
            out = make_float4(alpha * acc.x + beta * old.x, alpha * acc.y + beta * old.y,
                              alpha * acc.z + beta * old.z, alpha * acc.w + beta * old.w);
        }
        *reinterpret_cast<float4*>(c) = out;
        return;
    }
#endif
    const float v[4] = {acc.x, acc.y, acc.z, acc.w};
#pragma unroll
    for (int i = 0; i < 4; ++i)
        if (col + i < N) c[i] = epilogue(v[i], alpha, beta, x + i);
}
#else
__device__ __forceinline__ void store_c(float* C, int ldc, int row, int col, int M, int N,
                                        float acc, float alpha, float beta, Source) {
    store_c(C, ldc, row, col, M, N, acc, alpha, beta);
}
__device__ __forceinline__ void store4_c(float* C, int ldc, int row, int col, int M, int N,
                                         float4 acc, float alpha, float beta, Source) {
    store4_c(C, ldc, row, col, M, N, acc, alpha, beta);
}
#endif
