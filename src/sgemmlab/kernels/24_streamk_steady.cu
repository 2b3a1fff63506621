// Rung 24 — Stream-K whose steady-state k-loop has no branch: ptxas covers its waits.
//
// What changed from rung 22: the k-loop is split in two (kernels/13_hoisted.cu, STEADY).
// Every step of rung 22's loop tests two things before it copies the next k-tile in: is there
// one (the last STAGES - 1 steps copy nothing), and is it whole (a partial last k-tile takes
// the checking path). Each test is a branch, and a branch ends ptxas's scheduling block: the
// copy's address arithmetic and the A tile's four STS.32 sat between branches, alone, where
// their fixed latencies (a compare 13 cycles before its branch, a chain of dependent address
// instructions) were waits with nothing to fill them. ncu at 4096^3 counted 0.12 such
// "wait" stalls per instruction against cuBLAS's 0.01. Here the steps whose copy is a whole
// k-tile run first, in a loop of their own that tests nothing: its body is one block of
// straight-line code, and ptxas interleaves the copies with the FFMAs; the last STAGES - 1
// steps (STAGES after a partial k-tile) run the old loop. The same FFMAs in the same order:
// the result is bit-identical to rungs 14 and 22. Then rung 22's operand-order pass.
//
// The bill (`sgemmlab inspect 24 --gpu h200`): rung 14's FFMAs and bytes. The hot loop
// (H200 default, aligned, A and B row-major): 1122 instructions a step instead of 1141 on
// rung 22's path through its loop, and the stall counts ptxas wrote add up to 1194 cycles
// a warp instead of 1267 (1024 FFMA).
//
// Prediction: the 73 cycles of a warp's 1267 are 5.8 %; the second warp on each scheduler
// hid some of them already. +1.5-3 % over rung 22 where the loop is issue-bound (2048^3 to
// 8192^3), ncu's wait stalls from 0.12 to about 0.05 per instruction, no change in the
// instruction count beyond the 1.7 % fewer in the loop.
//
// Measured: the generated block below; the story: docs/worklog.md, session 11.
// <measured>
// (not yet measured)
// </measured>
#define STEADY 1
#include "14_streamk.cu"
