// Rung 24 — Stream-K whose steady-state k-loop has no branch: ptxas covers its waits.
//
// What changed from rung 22: the k-loop is split in two (the walk below, which
// ladder/13_hoisted.cu takes when the registry compiles it with STEADY=1),
// and A is copied by 4-byte cp.async instead of through registers (H200 default
// REG_TRANSPOSE=0). Each step of rung 22's loop tests two things before it copies the next
// k-tile in (is there one; is it whole), and a branch ends ptxas's scheduling block: the
// copy's address arithmetic and A's STS.32 sat between branches, their latencies waits
// with nothing to fill them (ncu at 4096^3: 0.12 "wait" stalls per instruction, cuBLAS
// 0.01). Here the steps whose copy is a whole k-tile run first, in a loop whose body is one
// block of straight-line code; the last few run the old loop. Same FFMAs, same order: the
// result is bit-identical to rungs 14 and 22. Then rung 22's operand-order pass.
//
// The bill (`sgemmlab inspect 24 --gpu h200`): rung 14's FFMAs and bytes; the hot loop 1117
// instructions (rung 22: 1195 with its edge path), 0.099 -> 0.033 non-FFMA per FFMA, stall
// counts 1402 -> 1154 cycles a warp, bank cycles 1245 -> 1181.
//
// Prediction: +1.5-3 % over rung 22. Measured, three builds (docs/worklog.md, session 11):
// with A still through registers ptxas sank the LDG next to its STS (long-scoreboard stalls
// 0.05 -> 0.13) and the rung lost 1-5 points to 22; with the fetch a step ahead the STS
// crowded the fragment loads (short scoreboard 0.07 -> 0.24); with A by cp.async nothing is
// staged and it passed cuBLAS at 4096^3-8192^3 and 8192 x 8192 x 512. Still short: 2048^3
// (97 %), 256 x 4096 x 4096 (97 %) and K = 256 at this decomposition (91 %; SPLIT=1: 99 %).
//
// Measured: the generated block below; the story: docs/worklog.md, session 11.
// <measured>
// NVIDIA H200 4096x4096x4096: 2713.2 us, 50656 GFLOP/s, 101.2 % of cuBLAS, 255 registers
//   BK=8,BM=128,BN=256,FIXUP=2,PAD=4,REG_TRANSPOSE=0,SPLIT=0,STAGES=3,TM=16,TN=8,WM=32,WN=128
//   (results/nvidia-h200/bench/2048x2048x2048-3072x3072x3072-6d360f-20261202T025914Z.json.xz)
// NVIDIA H200 8192x8192x8192: 21342.2 us, 51518 GFLOP/s, 101.6 % of cuBLAS, 255 registers
//   BK=8,BM=128,BN=256,FIXUP=2,PAD=4,REG_TRANSPOSE=0,SPLIT=0,STAGES=3,TM=16,TN=8,WM=32,WN=128
//   (results/nvidia-h200/bench/2048x2048x2048-3072x3072x3072-6d360f-20261202T025914Z.json.xz)
// </measured>
#pragma once
// Step t of tile_product (ladder/13_hoisted.cu) multiplies k-tile t while it copies in
// k-tile t + STAGES - 1; steady = true tells it that tile exists and is whole, so the step
// tests nothing, and that at its end it fetches the next step's k-tile into the registers
// it has just stored; fetched = true, that its own k-tile is in the registers already.
// The steps whose copy is whole (and, through registers, whose next step's is too) run
// first, in a loop whose body has no branch; the last few run one by one as in rung 14.
// The register fetch sits at the end of the step before: in the step that stores it,
// ptxas sinks the load next to its STS (this rung's first build: the STS then waited on
// the load, ncu's long-scoreboard stalls 0.05 -> 0.13).
template <bool REGS, class Step, class Fetch>
__device__ __forceinline__ void walk_k_tiles(Step& step, Fetch&& fetch, int tiles,
                                             bool partial) {
    const int steady = tiles - (STAGES - 1) - partial - REGS;
    if (REGS && steady > 0) fetch();
    int t = 0;
    for (; t < steady; ++t) step(t, true, true);
    bool fetched = REGS && steady > 0;
    for (; t < tiles; ++t, fetched = false) step(t, false, fetched);
}
