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
// table's slack rows show), nothing: the loop's 1175 even reads already fit its 1195 issue
// slots. The 0.23 dispatch stalls per instruction ncu counts at 4096^3 say the truth lies
// between; tools/order_probe.py measured +1.0 to +1.2 % over 2048^3 to 8192^3, paired.
//
// Measured: the generated block below; the story: docs/worklog.md, session 10.
// <measured>
// </measured>
#include "14_streamk.cu"
