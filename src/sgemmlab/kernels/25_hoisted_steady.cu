// Rung 25 — rung 13 with rung 24's branch-free steady-state loop and the operand-order pass.
//
// What changed from rung 23: the k-loop is split as in rung 24 (read its header:
// kernels/24_streamk_steady.cu): the steps whose copy is a whole k-tile run first, in a loop
// whose body has no branch, so ptxas interleaves the copy's address arithmetic and the A
// tile's STS with the FFMAs instead of leaving their latencies uncovered between branches.
// Rung 13 is what dispatch runs where whole tiles fill the GPU; rung 25 stands in for it on
// sm_90, bit-identical to it.
//
// The bill (`sgemmlab inspect 25 --gpu h200`): rung 13's FFMAs and bytes, fewer instructions
// and fewer stall cycles a step in the hot loop (the figures: docs/worklog.md, session 11).
//
// Prediction: as rung 24 over rung 22, +1.5-3 % where the loop is issue-bound.
//
// Measured: the generated block below; the story: docs/worklog.md, session 11.
// <measured>
// (not yet measured)
// </measured>
#define STEADY 1
#include "13_hoisted.cu"
