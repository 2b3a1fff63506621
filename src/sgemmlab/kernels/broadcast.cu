// broadcast.cu — not a rung: the input of torch's addmm and baddbmm (the bias of a linear
// layer, most often) spread over the output before the product is added to it, for the
// drop-in switch (sgemmlab/dropin/): out = X broadcast, then out = alpha A @ B + beta out.
//
//   out[z][i][j] = x[z * sz + i * si + j * sj]     z < batch, i < rows, j < cols
//
// out is contiguous (batch x rows x cols); a stride of 0 repeats x along its dimension (a
// row vector of biases: sz = si = 0, sj = 1). One thread per element, grid-strided; a pass
// over the output that is memory-bound, like torch's own copy of the bias.
extern "C" __global__ void broadcast(float* __restrict__ out, const float* __restrict__ x,
                                     long long rows, long long cols, long long total,
                                     long long sz, long long si, long long sj) {
    const long long plane = rows * cols;
    const long long step = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long e = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
         e < total; e += step) {
        const long long z = e / plane, r = e - z * plane;
        const long long i = r / cols, j = r - i * cols;
        out[e] = x[z * sz + i * si + j * sj];
    }
}
