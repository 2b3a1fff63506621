// Rung 9 — autotuned: rung 8's kernel, its configuration searched on this GPU.
//
// What changed from rung 8: no code. The kernel below is 08_bankfree_a.cu, included as it
// is; what changes is which constants it is compiled with. The ladder's seeds (BM = BN = 128,
// BK = 8, TM = TN = 8) were chosen on an A6000; the best tile depends on the chip (register
// file, shared memory, SM count, scheduler count) and on the shape, so here the configuration
// is measured rather than reasoned about.
//
// The space (sgemmlab.registry, rung 9): BM, BN in {64, 128, 256}, BK in {8, 16, 32}, TM, TN
// in {4, 8}, PAD = 4. Rung 8's rules apply (including the register budget, which now bites:
// 64 accumulators cannot live in the 64 registers a 1024-thread block leaves a thread), plus
// at least 64 threads per block (fewer starve the schedulers of warps to switch between).
// The search: compile every legal configuration, time each on the GPU at hand, keep the
// fastest. Its results, once measured, ship in sgemmlab/data/defaults.json (per GPU, per
// rung), where Rung.default(gpu) finds them; until then the registry's seed is used.
//
// The bill: as rung 8, with the tile sizes the search picks. Global bytes per FLOP are
// 2 * (BM + BN) / (BM * BN): 0.031 B/FLOP at 128 x 128, 0.016 at 256 x 256; shared words per
// FFMA (TM + TN) / (TM * TN): 0.25 at 8 x 8, 0.5 at 4 x 4.
//
// Registers (seed BM=128 BN=128 BK=16 TM=8 TN=8 PAD=4, 256 threads, sm_90): 109 with
// SGEMM_VEC4=1, 119 with the scalar fallback; no spills.
//
// Prediction: 5-15 % over rung 8 with its seed, about 70-75 % of cuBLAS (~51 TFLOP/s at
// 4096^3 on the H200, FFMA peak ~64); the winner will likely have BK = 16 (fewer barriers
// per FLOP) and 8 x 8 thread tiles.
//
// What the H200 said (tune-09_autotuned-*.json): the winner is BM = BN = 128, BK = 32,
// TM = 8, TN = 4, which is inside rung 8's own space, and rung 8's search found it too
// (tune-08_bankfree_a-*.json). Every rung here is searched on the GPU, so rung 9 cannot beat
// rung 8 unless its wider space holds a better tile, and on the H200 it does not: 256-wide
// tiles and 8 x 8 thread tiles (64 registers of accumulators at 256 threads cap the blocks
// per SM) all lose to 128 x 128 with 32 outputs per thread. In the ladder the two tie; the
// lesson of this rung is the search itself, and that the A6000's seed was wrong for the H200:
// in rung 8's search (paired ratios) the seed (BM = BN = 128, BK = 8, TM = TN = 8) reaches
// 64 % of cuBLAS, the winner 72 %.
//
// Measured: see the generated block at the end of this header.
// <measured>
// NVIDIA H200 4096x4096x4096: 3684.5 us, 37302 GFLOP/s, 72.7 % of cuBLAS, 63 registers
//   BK=32,BM=128,BN=128,PAD=4,TM=8,TN=4
//   (results/nvidia-h200/ladder-4096x4096x4096-20261129T152429Z.json)
// NVIDIA H200 4092x4092x4092: 3690.3 us, 37134 GFLOP/s, 77.5 % of cuBLAS, 63 registers
//   BK=32,BM=128,BN=128,PAD=4,TM=8,TN=4
//   (results/nvidia-h200/ladder-4092x4092x4092-20261129T125824Z.json)
// </measured>
#include "08_bankfree_a.cu"

static_assert(THREADS >= 64, "at least 64 threads per block");
