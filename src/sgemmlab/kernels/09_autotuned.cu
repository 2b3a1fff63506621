// Rung 9 — autotuned: rung 8's kernel, its configuration searched on this GPU.
//
// What changed from rung 8: no code. The kernel is 08_bankfree_a.cu, included as it is;
// what changes is the space of constants it is compiled with, measured on the GPU at hand
// rather than reasoned about. The ladder's seeds (BM = BN = 128, BK = 8, TM = TN = 8) came
// from an A6000, and the best tile depends on the chip and the shape. The space
// (sgemmlab.registry): BM, BN in {64, 128, 256}, BK in {8, 16, 32}, TM, TN in {4, 8},
// PAD = 4, rung 8's rules (the register budget now bites: 64 accumulators cannot live in the
// 64 registers a 1024-thread block leaves a thread) and at least 64 threads per block.
// `sgemmlab tune --write-defaults` keeps the fastest in src/sgemmlab/data/defaults.json.
//
// The bill (`sgemmlab inspect 9 --gpu h200 [--seed]`): rung 8's at the tile the search picks.
// Seed BM=BN=128 BK=16 TM=TN=8: 2048 B for 65536 FLOPs (32 FLOP/B), 0.25 shared words per
// FFMA, As stores 2-way, 109 registers, 2 blocks/SM. The H200 winner BM=BN=128 BK=32 TM=8
// TN=4 is inside rung 8's own space, so its bill is rung 8's at that tile: 0.375 shared
// words per FFMA, As stores 4-way, 63 registers, 2 blocks/SM.
//
// Prediction: 5-15 % over rung 8 with its seed, about 70-75 % of cuBLAS; the winner will
// likely have BK = 16 (fewer barriers per FLOP) and 8 x 8 thread tiles.
//
// Measured: the generated block below; the longer story: docs/worklog.md, rung notes.
// <measured>
// NVIDIA H200 4096x4096x4096: 3716.0 us, 36986 GFLOP/s, 73.8 % of cuBLAS, 63 registers
//   BK=32,BM=128,BN=128,PAD=4,TM=8,TN=4
//   (results/nvidia-h200/ladder-4096x4096x4096-20261201T195205Z.json)
// NVIDIA H200 4092x4092x4092: 3745.8 us, 36584 GFLOP/s, 79.5 % of cuBLAS, 63 registers
//   BK=32,BM=128,BN=128,PAD=4,TM=8,TN=4
//   (results/nvidia-h200/ladder-4092x4092x4092-20261201T195227Z.json)
// </measured>
#include "08_bankfree_a.cu"

static_assert(THREADS >= 64, "at least 64 threads per block");
