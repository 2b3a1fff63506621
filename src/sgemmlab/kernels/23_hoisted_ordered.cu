// Rung 23 — rung 13 with its FFMAs put in an order the register file can feed.
//
// What changed from rung 13: no line of CUDA; the same pass over the cubin as rung 22 (read
// its header: kernels/22_streamk_ordered.cu, and docs/operands-h200.md for the measured
// table). Rung 13 is what dispatch runs where whole tiles fill the GPU (8192^3, 8192 x 8192 x
// 512 on the H200); rung 23 is it with each run of FFMAs reordered so fewer registers are read
// from one bank, the reuse flags set to match.
//
// The bill (`sgemmlab inspect 23 --gpu h200`): rung 13's, instruction for instruction; the
// bank cycles over the hot loop (1177 instructions, 1024 FFMA) fall from 1283 to 1229 as
// the H200 reads ahead (1336 to 1278 one instruction at a time).
//
// Prediction: +0.5-1.5 % where the loop is issue-bound; nothing where it waits on memory.
//
// Measured: the generated block below; the story: docs/worklog.md, session 10.
// <measured>
// (not yet measured by name: dispatch ran it inside `matmul` at 8192^3 and 8192 x 8192 x 512
//  in results/nvidia-h200/bench-2048x2048x2048-3072x3072x3072-4096x4096x4096-6144x6144...)
// </measured>
#include "13_hoisted.cu"
