// pack.cu — not a rung: an operand copied, before the product's own launch, into a layout
// the product reads faster (sgemmlab/plan.py's packed plans; the copy lives in the stream's
// workspace, runtime/workspace.py).
//
//   dst[r * ldd + c] = src[r * sr + c * sc]     r < rows, c < cols
//   dst[r * ldd + c] = 0                         r < rows, cols <= c < pcols
//
// dst is row-major. With sr == 1 (src runs down its columns: a column-major operand, x @
// W^T's weight) the copy is a transpose. 32 x 32 tiles pass through shared memory, 32 x 8
// threads: the reads run along whichever dimension of src is contiguous and the writes
// along dst's rows, so both are coalesced; the tile's rows are 33 floats apart, so the
// column-wise side meets 32 different banks. Row tiles are grid-strided (gridDim.y is at
// most 65535). The columns past `cols` up to `pcols` (a row padded to whole chunks of 4)
// are written as zeros, so a float4 that reads past the last column reads zeros from
// memory that is the copy's own. Memory-bound: one read and one write of the operand.
extern "C" __global__ void pack(float* __restrict__ dst, long long ldd,
                                const float* __restrict__ src, int rows, int cols,
                                long long sr, long long sc, int pcols) {
    __shared__ float tile[32][33];
    const bool down = sr == 1 && sc != 1;  // src's contiguous dimension is the row index
    const int c0 = blockIdx.x * 32;
    for (long long r0 = blockIdx.y * 32LL; r0 < rows; r0 += gridDim.y * 32LL) {
        for (int i = threadIdx.y; i < 32; i += 8) {
            const int r = down ? threadIdx.x : i, c = down ? i : threadIdx.x;
            if (r0 + r < rows && c0 + c < cols) tile[r][c] = src[(r0 + r) * sr + (c0 + c) * sc];
        }
        __syncthreads();
        for (int i = threadIdx.y; i < 32; i += 8) {
            const int c = c0 + threadIdx.x;
            if (r0 + i < rows && c < pcols)
                dst[(r0 + i) * ldd + c] = c < cols ? tile[i][threadIdx.x] : 0.0f;
        }
        __syncthreads();  // the tile is free for the next row tile
    }
}
