// async_copy.cuh — cp.async, the Ampere-and-later copy from global straight into shared memory
// (PTX ISA, "Data Movement and Conversion Instructions: cp.async"). Rungs 11-14 use it.
//
// A thread issues copies, groups the ones issued so far with commit(), and later waits until
// at most N of its own groups are still in flight with wait<N>(). Waiting covers only the
// thread's own copies: a __syncthreads() after the wait is what makes every thread's copies
// visible to the whole block.
//
// `src_bytes` below cp-size zero-fills the rest of the destination: that is how a tile is
// padded with zeros past the edge of a matrix without a branch. With src_bytes == 0 nothing
// is read, but the address is still formed, so callers pass a valid one.
#pragma once

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes (4 floats); both addresses 16-byte aligned. .cg: cached in L2 only, not L1.
__device__ __forceinline__ void cp_async16(float* dst, const float* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)),
                 "l"(src), "r"(src_bytes)
                 : "memory");
}

// 16 bytes, all of them read: the form without a byte count, which needs no zero-fill
// arithmetic on the address.
__device__ __forceinline__ void cp_async16(float* dst, const float* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src)
                 : "memory");
}

// 4 bytes (one float); the only size that can scatter a row into a transposed tile.
__device__ __forceinline__ void cp_async4(float* dst, const float* src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)),
                 "l"(src), "r"(src_bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
