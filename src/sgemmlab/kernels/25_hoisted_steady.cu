// Rung 25 — rung 13 with rung 24's branch-free steady-state loop and the operand-order pass.
//
// What changed from rung 23: the k-loop is split as in rung 24 (read its header:
// kernels/24_streamk_steady.cu): the steps whose copy is a whole k-tile run first, in a loop
// whose body has no branch, so ptxas interleaves the copy's address arithmetic with the
// FFMAs instead of leaving their latencies uncovered between branches. Bit-identical to
// rung 13. Its default is rung 13's (REG_TRANSPOSE=1, A through registers, fetched a step
// ahead); the dispatch table runs it with REG_TRANSPOSE=0 where that was measured fastest.
//
// The bill (`sgemmlab inspect 25 --gpu h200`): rung 13's FFMAs and bytes; hot loop 1117
// instructions (rung 23: 1177), stall counts 1378 -> 1212, bank cycles 1230 -> 1209; with
// REG_TRANSPOSE=0: 1119, 1137 and 1217.
//
// Prediction: as rung 24 over rung 22, +1.5-3 % where the loop is issue-bound. Measured
// (docs/worklog.md, session 11): at its default 93-95 % of cuBLAS at 4096^3-8192^3 (below
// rung 24: likely the data-parallel last wave); with REG_TRANSPOSE=0 100.8 % at 4096 x
// 4096 x 256 and 97.3 % at 2048^3, where dispatch runs it.
//
// Measured: the generated block below; the story: docs/worklog.md, session 11.
// <measured>
// NVIDIA H200 4096x4096x4096: 2903.7 us, 47332 GFLOP/s, 93.8 % of cuBLAS, 239 registers
//   BK=8,BM=128,BN=256,PAD=4,REG_TRANSPOSE=1,STAGES=2,TM=8,TN=16,WM=32,WN=128
//   (results/nvidia-h200/bench-2048x2048x2048-3072x3072x3072-4096x4096x4096-6144x6144x6144-8192x8192x8192-8192x-20261202T023739Z.json.gz)
// NVIDIA H200 8192x8192x8192: 23031.2 us, 47740 GFLOP/s, 93.7 % of cuBLAS, 239 registers
//   BK=8,BM=128,BN=256,PAD=4,REG_TRANSPOSE=1,STAGES=2,TM=8,TN=16,WM=32,WN=128
//   (results/nvidia-h200/bench-2048x2048x2048-3072x3072x3072-4096x4096x4096-6144x6144x6144-8192x8192x8192-8192x-20261202T023739Z.json.gz)
// </measured>
#define STEADY 1
#include "13_hoisted.cu"
