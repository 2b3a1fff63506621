// Rung 12 — register prefetch, with A transposed in shared memory.
//
// What changed from rung 11: two switches, both in the search space so all four combinations
// are measured; the code is rung 11's file, where the switches live.
// TRANSPOSE_A = 1: A is scattered into As[k][m] (rows of BM + PAD) by 4-byte cp.async copies
// (a 16-byte copy cannot transpose); a lane's TM values of A at one k are then TM/4 LDS.128,
// conflict-free, for 4x the copy instructions of A.
// REGPF = 1: two sets of fragment registers; while the FFMAs of step k use one, the shared
// loads of step k+1 fill the other. The first step of a tile still loads after the barrier.
//
// The bill (`sgemmlab inspect 12 --gpu h200 [--seed]`, BM=128 BN=64 BK=16 WM=64 WN=32 WNITER=1
// TM=8 TN=4 STAGES=3, 128 threads, per warp per tile):
//   seed (TRANSPOSE_A = REGPF = 1): 0.3125 shared words in 0.078 LDS.128 per FFMA (rung 11:
//   0.2656 loads), As reads 1-way; A copied by 16 cp.async.4 per thread (rung 11: 4
//   cp.async.16), 8192 B of sectors moved for 2048 B requested; 167 registers, 3 blocks/SM.
//   H200 default (TRANSPOSE_A = 0, REGPF = 1): rung 11's bill; 189 registers, 2 blocks/SM.
// REGPF changes no count: the same loads, issued a step earlier.
//
// Prediction: TRANSPOSE_A alone (17 shared loads per k -> 5 at this tile) +5-10 %; REGPF alone
// barely moves a kernel whose loads are scalar and conflicting: +-3 %; both: the loads few and
// early, +10-15 % over rung 11, near rung 10 or above it at 4096^3.
//
// Measured: the generated block below; the longer story: docs/worklog.md, rung notes.
// <measured>
// NVIDIA H200 4096x4096x4096: 3583.7 us, 38351 GFLOP/s, 77.9 % of cuBLAS, 189 registers
//   BK=16,BM=128,BN=64,PAD=4,REGPF=1,STAGES=3,TM=8,TN=4,TRANSPOSE_A=0,WM=64,WN=32,WNITER=1
//   (results/nvidia-h200/ladder-4096x4096x4096-20261201T195205Z.json)
// NVIDIA H200 4092x4092x4092: 3603.2 us, 38032 GFLOP/s, 82.9 % of cuBLAS, 189 registers
//   BK=16,BM=128,BN=64,PAD=4,REGPF=1,STAGES=3,TM=8,TN=4,TRANSPOSE_A=0,WM=64,WN=32,WNITER=1
//   (results/nvidia-h200/ladder-4092x4092x4092-20261201T195227Z.json)
// </measured>
#include "11_cp_async.cu"
