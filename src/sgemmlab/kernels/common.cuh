// common.cuh — the few helpers every rung shares.
//
// The contract every rung keeps (sgemmlab.registry describes the rest):
//   extern "C" __global__ void sgemm(int M, int N, int K, float alpha,
//                                    const float* A, int lda, const float* B, int ldb,
//                                    float beta, float* C, int ldc)
//   computes C = alpha * A @ B + beta * C for row-major A (M x K), B (K x N), C (M x N)
//   with leading dimensions lda >= K, ldb >= N, ldc >= N (elements from one row to the next).
//   Every M, N, K >= 1 is legal: tiles are zero-filled past the edges and stores are
//   predicated, so no rung needs tile-multiple sizes.
//   beta == 0 never reads C (BLAS semantics: C may hold NaN then).
//   Configuration values (BM, BN, ...) arrive as -D macros from the registry.
//   SGEMM_VEC4 = 1 when the launcher has checked that A, B and C are 16-byte aligned
//   and lda, ldb, ldc are multiples of 4, so float4 global accesses are legal.
//   SGEMM_STORE4 (SGEMM_VEC4 unless set): C's float4 accesses. 0 with SGEMM_VEC4 = 1 (the
//   rungs with the "store4" feature) reads A and B by float4 and C element by element:
//   a packed plan's aligned copies of A and B into a C whose rows are not (plan.py).
#pragma once

#ifndef SGEMM_VEC4
#define SGEMM_VEC4 0
#endif
#ifndef SGEMM_STORE4
#define SGEMM_STORE4 SGEMM_VEC4
#endif
// Rungs with the "layouts" feature read A and/or B column-major when the launcher asks:
#ifndef SGEMM_TA
#define SGEMM_TA 0  // 1: A is column-major, A(m, k) at A[k * lda + m]
#endif
#ifndef SGEMM_TB
#define SGEMM_TB 0  // 1: B is column-major, B(k, n) at B[n * ldb + k]
#endif

#define SGEMM_KERNEL extern "C" __global__ void

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Row `row` of a row-major matrix, in 64-bit arithmetic: row * ld can pass 2^31.
__device__ __forceinline__ const float* row_ptr(const float* base, int row, int ld) {
    return base + static_cast<long long>(row) * ld;
}
__device__ __forceinline__ float* row_ptr(float* base, int row, int ld) {
    return base + static_cast<long long>(row) * ld;
}

// One element, zero past the edge (row_ok is the row's bound, col < cols the column's).
__device__ __forceinline__ float load_or_zero(const float* row, int col, int cols, bool row_ok) {
    return (row_ok && col < cols) ? row[col] : 0.0f;
}

// Four consecutive elements row[col .. col+3], zero past the edge. One 16-byte load when the
// launcher has proven alignment and all four lie inside; element by element otherwise.
__device__ __forceinline__ float4 load4_or_zero(const float* row, int col, int cols, bool row_ok) {
#if SGEMM_VEC4
    if (row_ok && col + 3 < cols) return *reinterpret_cast<const float4*>(row + col);
#endif
    float4 v;
    v.x = load_or_zero(row, col + 0, cols, row_ok);
    v.y = load_or_zero(row, col + 1, cols, row_ok);
    v.z = load_or_zero(row, col + 2, cols, row_ok);
    v.w = load_or_zero(row, col + 3, cols, row_ok);
    return v;
}

// The epilogue: C = alpha * acc + beta * C, and C is not read when beta == 0.
__device__ __forceinline__ float epilogue(float acc, float alpha, float beta, const float* c) {
    return beta == 0.0f ? alpha * acc : alpha * acc + beta * *c;
}

// Store one element if it lies inside C.
__device__ __forceinline__ void store_c(float* C, int ldc, int row, int col, int M, int N,
                                        float acc, float alpha, float beta) {
    if (row < M && col < N) {
        float* c = row_ptr(C, row, ldc) + col;
        *c = epilogue(acc, alpha, beta, c);
    }
}

// Store four consecutive elements row, col .. col+3: one 16-byte access when aligned and inside.
__device__ __forceinline__ void store4_c(float* C, int ldc, int row, int col, int M, int N,
                                         float4 acc, float alpha, float beta) {
    if (row >= M) return;
    float* c = row_ptr(C, row, ldc) + col;
#if SGEMM_STORE4
    if (col + 3 < N) {
        float4 out;
        if (beta == 0.0f) {
            out = make_float4(alpha * acc.x, alpha * acc.y, alpha * acc.z, alpha * acc.w);
        } else {
            const float4 old = *reinterpret_cast<const float4*>(c);
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
        if (col + i < N) c[i] = epilogue(v[i], alpha, beta, c + i);
}
