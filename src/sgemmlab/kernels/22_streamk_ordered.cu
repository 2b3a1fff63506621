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
// Prediction: one FFMA at a time, up to 5.6 % (77 of 1384 cycles); reads pooled freely, 0
// (the loop's 1175 even reads fit its 1195 slots). Measured: +0.8 to +1.9 points of cuBLAS
// over rung 14 on the squares 2048^3-8192^3, paired; ncu at 4096^3 dispatch stalls 0.18 ->
// 0.15 per instruction (ncu-stalls-4096-20261202T0033Z.txt). The rule found after it (reads
// go one instruction early) gives 1318 -> 1245 cycles over a 1195 floor, and no better
// order nor free choice of c's bank (1227) is left: the banks are nearly spent here.
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
