// entry.cuh — what the scheme's kernels (hopper/ozaki.cu) and rung 26 do on entry: their
// dynamic shared memory, and the wait for the launch before them in the stream.
// (tests/cuda_cpu.h, which runs these kernels on the CPU for the tests, brings its own of
// each.)
#pragma once

#ifndef SGEMM_CPU_EMULATOR
// The block's dynamic shared memory (the launch's bytes), as T.
template <class T>
__device__ __forceinline__ T* dynamic_smem() {
    extern __shared__ __align__(16) unsigned char smem_dynamic[];
    return reinterpret_cast<T*>(smem_dynamic);
}

// The stream's launch before this one: wait until it has finished and its writes are
// visible (griddepcontrol.wait), then let the launch after this one start (launch_dependents).
// Where the runtime launches with programmatic stream serialization (runtime/ozaki.OVERLAP),
// a kernel may start before the one before it ends: these are its first statements, so that
// it reads and writes nothing before. Otherwise the wait returns at once.
__device__ __forceinline__ void griddep_wait() {
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
}
__device__ __forceinline__ void griddep_launch_dependents() {
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
#endif
