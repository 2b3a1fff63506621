// Rung 12 — register prefetch, with A transposed in shared memory.
//
// What changed from rung 11: two switches, both in the search space so all four
// combinations are measured (the original worklog found each alone mixed on an H100 and only
// the pair clearly faster). The code is rung 11's file, where the switches live.
//
// TRANSPOSE_A = 1: A is scattered into As[k][m] (rows of BM + PAD) by 4-byte cp.async copies
// (a 16-byte copy writes 4 consecutive floats and cannot transpose). A lane's TM values of A
// at one k are then TM/4 float4 loads (LDS.128) instead of TM scalar loads, and they are
// conflict-free: lanes that read different values read consecutive 16-byte pieces. The price
// is 4x the copy instructions for A (BM*BK/THREADS cp.async.4 per thread per tile).
//
// REGPF = 1: two sets of fragment registers. While the FFMAs of step k use one set, the
// shared loads of step k+1 fill the other, so a load has a whole step of FFMAs (WMITER*TM x
// WNITER*TN of them) to land in before anything waits on it. It costs WMITER*TM + WNITER*TN
// registers. The first step of a tile still loads after the barrier (rung 13 carries the
// prefetch across tiles).
//
// The bill (rung 11's example, BM=BN=128 BK=16 TM=8 TN=4 WNITER=2): shared reads per k per
// thread go from 8 LDS.32 + 2 LDS.128 to 2 + 2 LDS.128 (0.156 -> 0.0625 per FFMA); copies
// of A per tile per thread from 2 cp.async.16 to 8 cp.async.4.
//
// Prediction: TRANSPOSE_A alone removes 6 of 10 shared loads per k and their conflicts:
// +5-10 %. REGPF alone barely moves a kernel whose loads are scalar and conflicting (the
// loads it moves earlier are still as many and as slow): +-3 %. Both: the loads are few and
// early, and the FFMA stream runs without waiting: +10-15 % over rung 11, near rung 10 or
// above it at 4096^3.
//
// What the H200 said (results/nvidia-h200/probe-rungs-10-14-1024-4096-20261129T1346Z.json, rung 11's seed tile, 4096^3 / 1024^3,
// % of cuBLAS): TRANSPOSE_A=0 REGPF=0 76.3 / 85.3; REGPF=1 alone 78.5 / 85.4; TRANSPOSE_A=1
// alone 66.0 / 80.6; both 59.6 / 77.0. The prediction was wrong on TRANSPOSE_A, for the
// reason rung 11's header now gives: the compiler had already turned the row-major A reads
// into LDS.128 along k, so the transpose saves no shared load and only adds copies: 16
// cp.async.4 instead of 4 cp.async.16 per thread per tile, each a separate L1/L2 request
// that moves 4 bytes. REGPF alone gives +2 points at 4096^3, as predicted (+-3 %). The pair
// that the H100 worklog found best is the worst here: its transposed A was read as scalars
// before (the Numba kernels), ours was not. Rung 13 keeps the transpose (its 16 x 8 patch
// needs float4 reads of 16 rows) but moves it off cp.async (REG_TRANSPOSE).
//
// Measured: see the generated block at the end of this header.
// <measured>
// NVIDIA H200 4096x4096x4096: 3541.7 us, 38806 GFLOP/s, 75.6 % of cuBLAS, 189 registers
//   BK=16,BM=128,BN=64,PAD=4,REGPF=1,STAGES=3,TM=8,TN=4,TRANSPOSE_A=0,WM=64,WN=32,WNITER=1
//   (results/nvidia-h200/ladder-4096x4096x4096-20261129T152429Z.json)
// </measured>
#include "11_cp_async.cu"
