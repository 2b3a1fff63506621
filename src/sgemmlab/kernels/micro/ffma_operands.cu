// How Hopper feeds FFMA its operands (issue 19): the body the operand microbenchmarks patch.
//
// Not a rung. Each thread holds NOPS operand registers and NACC accumulators, and its loop
// runs STEPS x NACC multiply-adds per trip, every accumulator once a step. ptxas compiles it
// into a straight run of FFMAs; bench/probes/operands.py then rewrites the registers each FFMA
// reads, its reuse flags and (for the dependent patterns) which accumulator it updates, in
// the cubin itself (anatomy/sasspatch.py), and times the result with the SM's own clock.
// The values computed are meaningless once patched; only the issue rate is measured.
//
// LDS = 1 adds one 128-bit shared load per step into four of the operand registers, as the
// GEMM hot loop does (a fragment refill beside the FFMAs that read the previous one).
//
// Per warp that runs, the kernel stores the SM clock before and after the timed loop. The host
// takes each block's span (first start to last stop: one block per SM, so the SM's time) over
// the FFMAs one warp issued: cycles per FFMA per warp when all warps overlap, which with W
// warps on each of the SM's four schedulers is W at the full rate. (Each warp's own duration
// alone undercounts when warps do not overlap entirely.)

#ifndef NOPS
#define NOPS 16
#endif
#ifndef NACC
#define NACC 32
#endif
#ifndef STEPS
#define STEPS 8
#endif
#ifndef LDS
#define LDS 0
#endif

extern "C" __global__ void __launch_bounds__(1024)
    ffma_operands(const float* __restrict__ in, float* __restrict__ out,
                  long long* __restrict__ cycles, int iters, unsigned active) {
    // `active`: bit w set = warp w of the block runs (the others leave at once, after their
    // registers were allocated): which warp slots share a scheduler's register file
    if (!((active >> (threadIdx.x >> 5)) & 1u)) return;
    const int lane = threadIdx.x & 31;
    float op[NOPS], acc[NACC];
#pragma unroll
    for (int i = 0; i < NOPS; ++i) op[i] = in[i * 32 + lane];
#pragma unroll
    for (int j = 0; j < NACC; ++j) acc[j] = in[(NOPS + j) * 32 + lane];
#if LDS
    __shared__ float4 ring[256];
    ring[threadIdx.x & 255] = make_float4(op[0], op[1], op[2], op[3]);
    __syncthreads();
#endif

    long long start = clock64();
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int s = 0; s < STEPS; ++s) {
#if LDS
            float4 v = ring[(it * STEPS + s + threadIdx.x) & 255];
            op[(4 * s) % NOPS] = v.x;
            op[(4 * s + 1) % NOPS] = v.y;
            op[(4 * s + 2) % NOPS] = v.z;
            op[(4 * s + 3) % NOPS] = v.w;
#endif
#pragma unroll
            for (int j = 0; j < NACC; ++j)
                acc[j] = fmaf(op[(s + j) % NOPS], op[(3 * s + j + 1) % NOPS], acc[j]);
        }
    }
    long long stop = clock64();

    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < NACC; ++j) sum += acc[j];
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
    if (lane == 0) {  // both ends: the host also takes the block's span, first start to last stop
        const int w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
        cycles[2 * w] = start;
        cycles[2 * w + 1] = stop;
    }
}
