// Rung 22 — Stream-K with its FFMAs put in an order the register file can feed.
//
// What changed from rung 14: no line of CUDA. This file compiles rung 14 as it is; then a pass
// over the cubin (runtime/sassedit.reorder, asked for by the SGEMM_POST_ORDER macro) rewrites
// the hot loop's machine code. What it rests on is a table measured on the H200 with SASS the
// project wrote (`sgemmlab operands`, docs/operands-h200.md): the register file has two banks,
// even and odd register numbers, each giving a scheduler one 32-bit operand a cycle; an FFMA
// reads up to three (a, b, c), a register read twice costs one read, and an operand the FFMA
// before flagged `.reuse` in the same slot comes from the reuse cache for free. Three reads
// from one bank take 3 cycles, two and one take 2, and the reads pool across neighbouring
// instructions. ptxas orders each k-step's 128 FFMAs along a row of the thread tile, so a
// holds (reuse) and b and c change; at every row change all three are read, and where b and
// c share a parity that bank is asked twice. The pass list-schedules every run of FFMAs
// between other instructions: each place takes the FFMA that reads the fewest registers from
// the busier bank after the one before, keeping every dependence at ptxas's distance, the
// first FFMA of a run (it may wait on a load) and any FFMA a nearby instruction relies on;
// control bits stay with their places, then every reuse flag is set to match.
//
// The bill (`sgemmlab inspect 22 --gpu h200`): rung 14's, instruction for instruction; the
// model's cycles of the busier bank over the hot loop fall from 1384 to 1307 per 1195
// instructions (1024 FFMA): the reads per FFMA from the even bank from 1.15 to 1.08.
//
// Prediction: two models bracket it. Per instruction (each FFMA waits for its own reads), the
// pass saves 77 of 1384 cycles: up to 5.6 %. Pooled (reads move into any free slot, as the
// table's slack rows show), nothing: the loop's 1175 even reads already fit its 1195 slots.
// Measured: +0.8 to +1.9 points of cuBLAS over rung 14 on the five squares 2048^3-8192^3
// (-0.9 to +0.7 on the three thin target shapes), paired in one run; ncu at 4096^3: dispatch stalls 0.18 -> 0.15 per instruction (cuBLAS 0.10), issue
// 83.2 -> 84.0 % (results/nvidia-h200/ncu-stalls-4096-20261202T0033Z.txt). Pooling is the
// better model; what remains is where reads cannot pool (rule 6) and the other stalls.
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
