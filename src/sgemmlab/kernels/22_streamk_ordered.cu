// Rung 22 — Stream-K with its FFMAs put in an order the register file can feed.
//
// What changed from rung 14: no line of CUDA. Rung 14 compiles as it is; then a pass over the
// cubin (runtime/sassedit.reorder, asked for by the SGEMM_POST_ORDER macro) reorders the hot
// loop's FFMAs. It rests on a table measured on the H200 with SASS the project wrote
// (docs/operands-h200.md): two register banks, even and odd, one operand a cycle each; a
// register named twice is read once; a `.reuse`d operand is free. ptxas walks each k-step's
// 128 FFMAs along a row of the thread tile: a holds, b and c change, and at each row change
// all three are read. The pass list-schedules every run of FFMAs between other instructions
// so each reads the fewest registers from the busier bank after the one before, keeping
// every dependence at ptxas's distance, each run's first FFMA (it may wait on a load) and
// any FFMA a neighbour relies on; control bits stay with their places, reuse flags follow.
//
// The bill (`sgemmlab inspect 22 --gpu h200`): rung 14's, instruction for instruction; even
// reads per FFMA in the hot loop 1.15 -> 1.08; bank cycles 1384 -> 1307 one at a time.
//
// Prediction: two models bracket it. Per instruction (each FFMA waits for its own reads), the
// pass saves 77 of 1384 cycles: up to 5.6 %. Pooled (reads move into any free slot), nothing:
// the loop's 1175 even reads already fit its 1195 slots. Measured: +0.8 to +1.9 points of
// cuBLAS over rung 14 on the five squares 2048^3-8192^3 (-0.9 to +0.7 on the three thin
// target shapes), paired in one run; ncu at 4096^3: dispatch stalls 0.18 -> 0.15 per
// instruction (cuBLAS 0.10), issue 83.2 -> 84.0 % (ncu-stalls-4096-20261202T0033Z.txt).
// The table's window rows, measured after, give the rule: reads go one instruction early,
// no further. By it the loop needs 1318 cycles as ptxas ordered it and 1245 after the pass
// (of a 1195 floor); a greedy pass on that model finds no better order, and even a free
// choice of every c's bank would leave 1227: the banks are nearly spent for this loop.
//
// The generated block below; the story: docs/worklog.md, session 10.
// <measured>
// NVIDIA H200 4096x4096x4096: 2781.0 us, 49421 GFLOP/s, 99.6 % of cuBLAS, 255 registers
//   BK=8,BM=128,BN=256,FIXUP=2,PAD=4,REG_TRANSPOSE=1,SPLIT=0,STAGES=3,TM=16,TN=8,WM=32,WN=128
//   (results/nvidia-h200/bench-2048x2048x2048-3072x3072x3072-4096x4096x4096-6144x6144x6144-8192x8192x8192-8192x-20261202T003023Z.json)
// NVIDIA H200 8192x8192x8192: 21774.6 us, 50495 GFLOP/s, 99.6 % of cuBLAS, 255 registers
//   BK=8,BM=128,BN=256,FIXUP=2,PAD=4,REG_TRANSPOSE=1,SPLIT=0,STAGES=3,TM=16,TN=8,WM=32,WN=128
//   (results/nvidia-h200/bench-2048x2048x2048-3072x3072x3072-4096x4096x4096-6144x6144x6144-8192x8192x8192-8192x-20261202T003023Z.json)
// </measured>
#include "14_streamk.cu"
