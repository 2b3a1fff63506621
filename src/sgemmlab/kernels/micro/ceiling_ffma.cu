// The FP32 FFMA ceiling: how many fused multiply-adds per second this GPU really issues.
//
// Not a rung: it computes nothing useful. It is the roof every rung is measured under
// (`sgemmlab ceilings`), because a datasheet peak assumes a clock the chip may not hold.
//
// Each thread runs CHAINS independent chains x = x * a + b. One chain alone would stall on
// the FFMA latency (4 cycles) at every step; CHAINS independent ones let the scheduler issue
// a new FFMA every cycle. a and b are kernel arguments, so the compiler cannot fold the
// chains; every thread stores its sum, so it cannot drop them. The host reads the SASS and
// checks that the loop body holds CHAINS x UNROLL FFMA instructions.
//
// FLOPs per launch: 2 * CHAINS * UNROLL * iters * threads.

#ifndef CHAINS
#define CHAINS 16
#endif
#ifndef UNROLL
#define UNROLL 32
#endif

extern "C" __global__ void __launch_bounds__(256)
    ffma_peak(float* __restrict__ out, float a, float b, int iters) {
    float x[CHAINS];
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) x[c] = threadIdx.x * 1e-3f + c;

    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
            for (int c = 0; c < CHAINS; ++c) x[c] = fmaf(x[c], a, b);
        }
    }

    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) sum += x[c];
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}
