// What rungs 15 and 16 share (rung 16 is rung 15 transposed): the two structures a block
// may take, sized for its small side S (rung 15: RM rows of C; rung 16: RN columns) and its
// long side L (BN columns; BM rows), and the rules of a configuration, which the registry
// states too (registry/family.py: _skinny_rules; tests/test_compile.py holds them equal by
// compiling the illegal ones). A block holds both structures' shared memory: the larger.
#pragma once
#include "membound/axpy.cuh"
#include "membound/dot.cuh"
#include "splitk.cuh"

// K is split in whole quanta of this many, so every part starts 16-byte aligned (the
// registry's k_unit; tests/test_splitk_skinny.py holds the two equal)
constexpr int KQ = 128;

template <int S, int L>
struct Skinny {
    using Axpy = AxpyShape<S, L, WARPS, UNROLL>;
    using Dot = DotShape<S, L, WARPS, UNROLL>;
    static constexpr int SMEM_FLOATS =
        Axpy::SMEM_FLOATS > Dot::SMEM_FLOATS ? Axpy::SMEM_FLOATS : Dot::SMEM_FLOATS;
    static constexpr int LIVE = Axpy::LIVE > Dot::LIVE ? Axpy::LIVE : Dot::LIVE;
};

// The rules, for S and L named by the rung (RM and BN, or RN and BM); WHAT is what S counts
// ("rows", "columns"), SIDE what L's lanes span.
#define SKINNY_RULES(S, L, WHAT, SIDE)                                                      \
    static_assert(S > 0 && L > 0 && WARPS > 0 && UNROLL > 0, "every constant is positive");  \
    static_assert(S == 1 || S == 2 || S == 4 || S == 8 || S == 16,                          \
                  #S " is 1, 2, 4, 8 or 16 (" WHAT " of C per block)");                      \
    static_assert(L % 4 == 0 && L / 4 > 0 && 32 % (L / 4) == 0,                             \
                  #L " is a multiple of 4 and " #L "/4 divides 32 (axpy: " #L "/4 lanes "    \
                  "span the " SIDE ")");                                                    \
    static_assert(L % WARPS == 0 && L <= 16 * WARPS,                                        \
                  #L " is a multiple of WARPS, at most 16 times it (dot: " #L "/WARPS "      \
                  SIDE " per warp)");                                                       \
    static_assert(UNROLL == 1 || UNROLL == 2 || UNROLL == 4 || UNROLL == 8,                 \
                  "UNROLL is 1, 2, 4 or 8");                                                \
    static_assert(Skinny<S, L>::LIVE <= (65536 / THREADS < 255 ? 65536 / THREADS : 255),    \
                  "the larger variant's live values (axpy 5*" #S " + 4*UNROLL + 24; dot "   \
                  #S "*NC + 4*NC*DU + 2*NC + 28) fit a thread's registers: min(255, 65536 / " \
                  "threads per block)");                                                    \
    static_assert(THREADS == WARPS * 32, "THREADS is 32 lanes per warp");                   \
    static_assert(THREADS <= 1024, "threads per block <= 1024");                            \
    static_assert(Skinny<S, L>::SMEM_FLOATS * sizeof(float) <= 48 * 1024,                  \
                  "static shared memory <= 49152 bytes")
