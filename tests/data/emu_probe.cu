// Kernels for tests/test_cuda_cpu.py: what the CPU emulator (tests/cuda_cpu.h) must run, and
// what it must refuse.
#include "common.cuh"

// out[i] = the sum of in over its warp (a butterfly), and a block-wide sum through shared
// memory: shuffles and barriers as the scheme's passes use them.
SGEMM_KERNEL sums(const float* __restrict__ in, float* __restrict__ out, int n) {
    __shared__ float part[32];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? in[i] : 0.0f;
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int w = 0; w < static_cast<int>(blockDim.x) / 32; ++w) s += part[w];
        out[blockIdx.x] = s;
    }
}

// One element past the end of `out`.
SGEMM_KERNEL past_the_end(float* out, int n) {
    if (threadIdx.x == 0) out[n] = 1.0f;
}

// Half the block returns before a barrier the other half waits at.
SGEMM_KERNEL barrier_after_return(float* out) {
    if (threadIdx.x >= 64) return;
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}

// The two halves of the block wait at two different barriers.
SGEMM_KERNEL two_barriers(float* out) {
    if (threadIdx.x < 64) {
        __syncthreads();
        out[threadIdx.x] = 1.0f;
    } else {
        __syncthreads();
        out[threadIdx.x] = 2.0f;
    }
}

// Lanes 16 and up return; the rest shuffle with a full mask.
SGEMM_KERNEL shuffle_after_return(float* out) {
    if (threadIdx.x % 32 >= 16) return;
    out[threadIdx.x] = __shfl_xor_sync(0xFFFFFFFFu, 1.0f, 1);
}

// Never ends.
SGEMM_KERNEL forever(volatile int* flag) {
    while (*flag == 0) {
    }
}

// Each thread writes its slot, and (no barrier) reads its neighbour's: what it reads depends
// on which thread ran first.
SGEMM_KERNEL missing_barrier(float* out) {
    __shared__ float slot[64];
    slot[threadIdx.x] = static_cast<float>(threadIdx.x);
    __syncthreads();
    slot[threadIdx.x] = 100.0f + threadIdx.x;
    out[threadIdx.x] = slot[(threadIdx.x + 1) % 64];  // (a __syncthreads belongs above)
}
