// The operands' way in to rungs 19 and 20: a K-major copy, and 3xTF32's split of B.
//
// wgmma's tf32 reads K-major operands only, and the copy engine wants each row to start on a
// 16-byte boundary. `prep` writes dst (rows x cols, row-major, ld_dst a multiple of 4) from
// src, whose element (r, c) lies at src[r * ld + c] (trans = 0) or src[c * ld + r]
// (trans = 1: a transpose, through a 64 x 65 tile of shared memory so that both the reads
// and the writes are coalesced, float4 where the tile allows). split = 1 writes two arrays instead of a copy:
// big = rna(x) (TF32, to nearest) and small = rna(x - big) (x - big is exact in FP32).
// Rows past `rows` and columns past `cols` are neither read nor written (the tensor map's
// box stops at `cols`; the padding of a row is never read).
//
// The bill: 4 bytes read and 4 (copy) or 8 (split) written per element, at HBM speed:
// 4096 x 4096 split in ~40 us, 4 % of a 3xTF32 4096^3.
#include "common.cuh"

__device__ __forceinline__ unsigned to_tf32(float x) {
    unsigned y;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ void put(float x, float* big, float* small, long long at,
                                    int split) {
    if (!split) {
        big[at] = x;
        return;
    }
    const float hi = __uint_as_float(to_tf32(x));
    big[at] = hi;
    small[at] = __uint_as_float(to_tf32(x - hi));
}

// The split of four floats at once (the float4 paths).
__device__ __forceinline__ void split4(const float4& x, float4& hi, float4& lo) {
    hi = make_float4(__uint_as_float(to_tf32(x.x)), __uint_as_float(to_tf32(x.y)),
                     __uint_as_float(to_tf32(x.z)), __uint_as_float(to_tf32(x.w)));
    lo = make_float4(__uint_as_float(to_tf32(x.x - hi.x)), __uint_as_float(to_tf32(x.y - hi.y)),
                     __uint_as_float(to_tf32(x.z - hi.z)), __uint_as_float(to_tf32(x.w - hi.w)));
}

constexpr int T = 64;  // the transpose's tile side; blocks are 32 x 8 threads

SGEMM_KERNEL prep(const float* __restrict__ src, long long ld, int rows, int cols, int trans,
                  float* __restrict__ big, float* __restrict__ small, long long ld_dst,
                  int split) {
    if (!trans) {
        // row by row; float4 when every row of all three starts 16-byte aligned
        const bool vec = ((ld | ld_dst) & 3) == 0 &&
                         ((reinterpret_cast<unsigned long long>(src) |
                           reinterpret_cast<unsigned long long>(big) |
                           (split ? reinterpret_cast<unsigned long long>(small) : 0ull)) & 15) ==
                             0;
        const int quads = vec ? cols / 4 : 0;
        const int tid = threadIdx.y * 32 + threadIdx.x, nt = 256;
        for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
            const float* s = src + r * ld;
            const long long o = r * ld_dst;
            for (int q = tid; q < quads; q += nt) {
                const float4 x = reinterpret_cast<const float4*>(s)[q];
                if (!split) {
                    reinterpret_cast<float4*>(big + o)[q] = x;
                    continue;
                }
                float4 hi, lo;
                split4(x, hi, lo);
                reinterpret_cast<float4*>(big + o)[q] = hi;
                reinterpret_cast<float4*>(small + o)[q] = lo;
            }
            for (int c = 4 * quads + tid; c < cols; c += nt) put(s[c], big, small, o + c, split);
        }
        return;
    }
    // the transpose: tiles of T x T, read along r (src's contiguous index) into shared
    // memory as they lie, written along c (dst's); float4 in global memory where the whole
    // tile is inside and every row of it 16-byte aligned, single floats at the edges
    __shared__ float tile[T][T + 1];  // [c][r] of the tile; +1: the column reads spread out
    const int tid = threadIdx.y * 32 + threadIdx.x;  // 256 threads
    const bool aligned = ((ld | ld_dst) & 3) == 0 &&
                         ((reinterpret_cast<unsigned long long>(src) |
                           reinterpret_cast<unsigned long long>(big) |
                           (split ? reinterpret_cast<unsigned long long>(small) : 0ull)) & 15) ==
                             0;
    const long long tiles_c = (cols + T - 1) / T, tiles = (rows + T - 1) / T * tiles_c;
    for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
        const long long r0 = t / tiles_c * T, c0 = t % tiles_c * T;
        if (aligned && r0 + T <= rows && c0 + T <= cols) {
            const int q = tid % (T / 4), sub = tid / (T / 4);  // float4 q of row sub
#pragma unroll
            for (int i = sub; i < T; i += 256 / (T / 4)) {  // i: c of the tile
                const float4 x = *reinterpret_cast<const float4*>(src + (c0 + i) * ld + r0 + 4 * q);
                tile[i][4 * q] = x.x;
                tile[i][4 * q + 1] = x.y;
                tile[i][4 * q + 2] = x.z;
                tile[i][4 * q + 3] = x.w;
            }
            __syncthreads();
#pragma unroll
            for (int i = sub; i < T; i += 256 / (T / 4)) {  // i: r of the tile
                const float4 x = make_float4(tile[4 * q][i], tile[4 * q + 1][i],
                                             tile[4 * q + 2][i], tile[4 * q + 3][i]);
                const long long at = (r0 + i) * ld_dst + c0 + 4 * q;
                if (!split) {
                    *reinterpret_cast<float4*>(big + at) = x;
                    continue;
                }
                float4 hi, lo;
                split4(x, hi, lo);
                *reinterpret_cast<float4*>(big + at) = hi;
                *reinterpret_cast<float4*>(small + at) = lo;
            }
        } else {
            for (int i = threadIdx.y; i < T; i += 8)  // lanes walk r
                for (int j = threadIdx.x; j < T; j += 32) {
                    const long long r = r0 + j, c = c0 + i;
                    if (r < rows && c < cols) tile[i][j] = src[c * ld + r];
                }
            __syncthreads();
            for (int i = threadIdx.y; i < T; i += 8)  // lanes walk c
                for (int j = threadIdx.x; j < T; j += 32) {
                    const long long r = r0 + i, c = c0 + j;
                    if (r < rows && c < cols) put(tile[j][i], big, small, r * ld_dst + c, split);
                }
        }
        __syncthreads();
    }
}
