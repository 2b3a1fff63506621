// Ozaki scheme II's steps around rung 26's INT8 products (sgemmlab/ozaki/reference.py is the
// same scheme in NumPy, and the specification these kernels are checked against):
//
//   oz_norms  per row of an operand X, partial sums over chunks of K: sum x^2, sum |x| and
//             the nonzero count (FP64, a fixed order: the same inputs give the same
//             exponents every run); the last block of a tile of rows to finish then adds
//             the chunks' sums, in order, into each row's exponent e, the largest with
//             2^e |X_r|_2 <= R (exactly, by frexp; the host's R leaves room for rounding);
//             SPECIAL for a row holding Inf or NaN, or one the scheme refuses: its
//             flatness |x|_1 / (sqrt(n) |x|_2) below the host's floor (reference.FLAT)
//             (and per k, the sum of x^2 over each tile of rows, for oz_balance)
//   oz_scale  oz_norms and oz_split in one pass, where an operand's rows (all of K) fit in
//             shared memory: each row read once from memory, its exponent, its residues
//   oz_ksums  where oz_scale ran and refused something: each k's sums of squares, for
//             oz_balance (oz_norms writes them as it goes; oz_scale keeps none)
//   oz_balance where the norms refused a row or column: d_k, the power of two that balances
//             column k of A against row k of B (reference.balance); oz_norms then runs
//             again on A D and D^-1 B, and the steps after it take whichever of the two
//             refuses fewer outputs (`balanced`; nothing refused: both return at once)
//   oz_split  rint(2^e x), an integer of at most 33 bits, and its symmetric residue modulo
//             each m_l, written as planes of INT8, K-major (what rung 26's tensor maps read)
//   oz_crt    each output's residues R_l -> the integer X = (A'B')_ij by the Chinese
//             remainder theorem -> 2^-(mu_i + nu_j) X -> alpha, beta -> C; it leaves the
//             outputs of a SPECIAL row or column alone
//   oz_fallback  those outputs: the dot products of the FP32 inputs, summed in FP64, in
//             tiles of the rows and columns oz_norms listed as SPECIAL (nothing listed: the
//             launch ends at once)
//
// oz_scale_ab, oz_norms_ab and oz_split_ab (runtime/ozaki.MERGED) run a pass for both operands
// in one grid, and oz_ksums can do oz_balance's work at its end: with nothing refused, seven
// launches a product instead of eleven. Predicted, before any measurement (the single-call
// probe at 2048^3 took about 207 us, of which about 20 us were the seven launches that find
// nothing refused and a launch gap between oz_scale's two): about 8-12 us less at 2048^3
// (three launches with nothing to do, 2-3 us each inside a product, and B's blocks filling
// the SMs that A's last wave leaves idle), 1.84x to about 1.93x cuBLAS in single calls; a
// few us at 4096^3 (under 1 %), nothing measurable at 8192^3. With FALLBACK_EARLY too,
// oz_fallback's wave runs inside oz_split_ab's launch (six launches): another 2-3 us at
// 2048^3.
//
// An operand is read as X(r, k) = x[r sr + k sk]: A is X with r = i; B is read as B^T, r = j.
// The pass picks its threads' order from the strides, so that a warp reads consecutive words
// whichever of r and k is the contiguous one.
//
// The bill per element of an operand: 4 bytes read twice (norms, split) and count bytes
// written; per output, count bytes read and 4 written (8 with beta). At 8192^3 with 8 moduli
// that is about 1.5 GB: about 0.4 ms at the H200's HBM rate, against about 6 ms of products.
#include "common.cuh"
#include "hopper/entry.cuh"  // dynamic_smem, griddep_wait

constexpr int T = 64;        // a tile's rows (and, in oz_split, its k)
constexpr int CHUNK = 256;   // k per partial sum of oz_norms
constexpr int THREADS = 256;
constexpr int MAX_MODULI = 20;
constexpr int SPECIAL = -2147483647 - 1;  // the exponent of a row with Inf or NaN

// counts[0], counts[1]: the rows of A and of B the first norms refused; counts[3],
// counts[4]: those the second (balanced) norms refused (0 when it did not run). True when
// the balanced scaling is the one taken: it ran, and it refuses fewer outputs.
__device__ __forceinline__ bool balanced(const unsigned* counts, int M, int N) {
    const long long r1 = counts[0], c1 = counts[1], r2 = counts[3], c2 = counts[4];
    const long long out1 = r1 * N + c1 * M - r1 * c1, out2 = r2 * N + c2 * M - r2 * c2;
    return r1 + c1 > 0 && out2 < out1;
}

// 2^e as a double, from its bits (|e| <= 1022: the exponents here stay within a few hundred).
__device__ __forceinline__ double pow2(int e) { return __hiloint2double((e + 1023) << 20, 0); }

__device__ __forceinline__ float load_x(const float* x, long long sr, long long sk, long long r,
                                        long long k) {
    return x[r * sr + k * sk];
}

// A row's running sums, in FP64, in the order the elements come: x^2 (an FMA), |x|, and the
// count of nonzeros; `warp_total` adds a warp's by a fixed butterfly (every lane ends with
// the same total).
struct Sums {
    double sq = 0.0, ab = 0.0, nz = 0.0;
    __device__ __forceinline__ void add(double v) {
        sq = fma(v, v, sq);
        ab += fabs(v);
        nz += v != 0.0 ? 1.0 : 0.0;
    }
    __device__ __forceinline__ void warp_total() {
#pragma unroll
        for (int o = 16; o > 0; o /= 2) {
            sq += __shfl_xor_sync(0xFFFFFFFFu, sq, o);
            ab += __shfl_xor_sync(0xFFFFFFFFu, ab, o);
            nz += __shfl_xor_sync(0xFFFFFFFFu, nz, o);
        }
    }
};

// e[r]: the largest e with 2^e |X_r|_2 <= radius (0 for a zero row); SPECIAL for one whose
// sum is not finite, or whose flatness |x|_1 / (sqrt(n) |x|_2) is below flat_min. The chunks'
// sums are read from L2 (__ldcg: other blocks wrote them), in order.
__device__ int exponent_of(double sq, double ab, double nz, double radius, double flat_min) {
    if (!isfinite(sq)) return SPECIAL;
    if (sq == 0.0) return 0;
    const double norm = sqrt(sq);
    if (ab / (sqrt(nz) * norm) < flat_min) return SPECIAL;
    int en, eg;
    const double f = frexp(norm, &en), g = frexp(radius, &eg);
    return f <= g ? eg - en : eg - en - 1;
}

__device__ int exponent(const double* part, int rows, int chunks, int r, double radius,
                        double flat_min) {
    double sq = 0.0, ab = 0.0, nz = 0.0;
    for (int c = 0; c < chunks; ++c) {
        const double* in = part + (static_cast<long long>(c) * rows + r) * 3;
        sq += __ldcg(in), ab += __ldcg(in + 1), nz += __ldcg(in + 2);
    }
    return exponent_of(sq, ab, nz, radius, flat_min);
}

// part[(c * rows + r) * 3 + 0 | 1 | 2]: sum of x^2 | |x| | (x != 0) over k in chunk c of row r
// (a block a chunk: blockIdx.y; the gated second norms launch fewer, which walk the chunks).
// Then the block that finishes a tile's chunks last (`done[blockIdx.x]` counts them, and is
// left 0 again for the next launch: the workspace's zeroed region) writes the tile's
// exponents e[r] (`exponent`): one launch fewer than a pass of its own, and no wait on it.
// A SPECIAL row's index goes into `listed` (at *refused, counted up: in the zeroed region,
// oz_fallback leaves it 0 again), in no fixed order: each listed row's outputs are the same
// whatever its place.
//
// The first norms (`gate` null) also write, for oz_balance, each k's sum of x^2 over the tile's
// rows (kpart[blockIdx.x * K + k], in the order of the rows). The second (`gate`: the first's
// refusal counts; nothing refused, it returns at once) reads x 2^(dsign d_k) instead of x.
// (bx stands for the block's x: oz_norms_ab runs two operands' tiles in one grid.)
__device__ __forceinline__ void norms_tile(
    unsigned bx, const float* __restrict__ x, long long sr, long long sk, int rows, int K,
    double* __restrict__ part, unsigned* __restrict__ done, double radius, double flat_min,
    int* __restrict__ e, unsigned* __restrict__ refused, int* __restrict__ listed,
    double* __restrict__ kpart, const unsigned* __restrict__ gate, const int* __restrict__ d,
    int dsign) {
    __shared__ double sums[4][T][3];
    __shared__ bool last;
    if (gate != nullptr && gate[0] + gate[1] == 0u) return;
    // x(r, k) as this pass reads it
    auto at = [&](long long r, long long k) -> double {
        const double v = load_x(x, sr, sk, r, k);
        return gate != nullptr ? v * pow2(dsign * d[k]) : v;
    };
    const int r0 = bx * T, chunks = (K + CHUNK - 1) / CHUNK;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    for (int c = blockIdx.y; c < chunks; c += gridDim.y) {  // (one chunk a block, but gated)
        const int k0 = c * CHUNK, kend = min(K, k0 + CHUNK);
        if (sk == 1) {
            // k contiguous: a warp per row, lanes along k (two float4 a lane where the rows
            // allow: the whole chunk in flight at once), a fixed butterfly to finish
            const bool vec = gate == nullptr && (sr & 3) == 0 &&
                             (reinterpret_cast<unsigned long long>(x) & 15) == 0;
            for (int i = warp; i < T; i += THREADS / 32) {
                const int r = r0 + i;
                if (r >= rows) break;
                Sums acc;
                if (vec && kend - k0 == CHUNK) {
                    const float4* row = reinterpret_cast<const float4*>(x + r * sr + k0);
                    float4 q[CHUNK / 128];
    #pragma unroll
                    for (int h = 0; h < CHUNK / 128; ++h) q[h] = row[lane + 32 * h];
    #pragma unroll
                    for (int h = 0; h < CHUNK / 128; ++h) {
                        const float f[4] = {q[h].x, q[h].y, q[h].z, q[h].w};
    #pragma unroll
                        for (int t = 0; t < 4; ++t) acc.add(f[t]);
                    }
                } else {
                    for (int k = k0 + lane; k < kend; k += 32) acc.add(at(r, k));
                }
                acc.warp_total();
                if (lane == 0) {
                    double* out = part + (static_cast<long long>(c) * rows + r) * 3;
                    out[0] = acc.sq, out[1] = acc.ab, out[2] = acc.nz;
                }
            }
        } else {
            // r contiguous (or neither): a thread per row and quarter of the chunk, then the
            // quarters
            const int i = tid % T, q = tid / T, r = r0 + i;
            Sums acc;
            if (r < rows) {
                const int kq = k0 + q * (CHUNK / 4), kqe = min(kend, kq + CHUNK / 4);
    #pragma unroll 8
                for (int k = kq; k < kqe; ++k) acc.add(at(r, k));
            }
            sums[q][i][0] = acc.sq, sums[q][i][1] = acc.ab, sums[q][i][2] = acc.nz;
            __syncthreads();
            if (q == 0 && r < rows) {
                for (int p = 1; p < 4; ++p)
                    acc.sq += sums[p][i][0], acc.ab += sums[p][i][1], acc.nz += sums[p][i][2];
                double* out = part + (static_cast<long long>(c) * rows + r) * 3;
                out[0] = acc.sq, out[1] = acc.ab, out[2] = acc.nz;
            }
        }
        if (kpart != nullptr && k0 + tid < kend) {  // (CHUNK == THREADS: a thread a k)
            double sq = 0.0;
            for (int i = 0; i < T && r0 + i < rows; ++i) {
                const double v = load_x(x, sr, sk, r0 + i, k0 + tid);
                sq = fma(v, v, sq);
            }
            kpart[static_cast<long long>(bx) * K + k0 + tid] = sq;
        }
        __syncthreads();  // (sums is read before the next chunk writes it)
    }
    // the last of the tile's gridDim.y blocks: every other one's sums are in memory (each
    // fenced its writes before counting itself), so this one adds them up
    __threadfence();
    __syncthreads();
    if (tid == 0) {
        last = atomicAdd(done + bx, 1u) == gridDim.y - 1;
        if (last) done[bx] = 0u;  // no other block of this launch touches it again
    }
    __syncthreads();
    if (last) {
        __threadfence();
        for (int i = tid; i < T && r0 + i < rows; i += THREADS) {
            const int ex = exponent(part, rows, chunks, r0 + i, radius, flat_min);
            e[r0 + i] = ex;
            if (ex == SPECIAL) {  // for oz_fallback (never past the list: see there)
                const unsigned slot = atomicAdd(refused, 1u);
                if (slot < static_cast<unsigned>(rows)) listed[slot] = r0 + i;
            }
        }
    }
}

SGEMM_KERNEL oz_norms(const float* __restrict__ x, long long sr, long long sk, int rows, int K,
                      double* __restrict__ part, unsigned* __restrict__ done, double radius,
                      double flat_min, int* __restrict__ e, unsigned* __restrict__ refused,
                      int* __restrict__ listed, double* __restrict__ kpart,
                      const unsigned* __restrict__ gate, const int* __restrict__ d, int dsign) {
    griddep_wait();
    griddep_launch_dependents();
    norms_tile(blockIdx.x, x, sr, sk, rows, K, part, done, radius, flat_min, e, refused, listed,
               kpart, gate, d, dsign);
}

// oz_norms for A and B in one launch (runtime/ozaki.MERGED): blockIdx.z picks the operand (0:
// A, its rows; 1: B read as B^T), blockIdx.x its tile (a block past the operand's tiles
// returns at once). `second` 0: the first norms (exponents at exps, refusals counted in
// counts[0] and counts[1], each k's sums into kpart_a and kpart_b); 1: the second, gated,
// on A D and D^-1 B (exponents at exps + M + N, counts[3] and counts[4]). Each operand's
// tiles count their chunks in `done` (A's tiles first) and list their rows in the operand's
// own list, as two oz_norms launches do.
SGEMM_KERNEL oz_norms_ab(const float* __restrict__ a, long long a_sr, long long a_sk, int M,
                         const float* __restrict__ b, long long b_sr, long long b_sk, int N,
                         int K, double* __restrict__ part_a, double* __restrict__ part_b,
                         unsigned* __restrict__ done, double radius, double flat_min,
                         int* __restrict__ exps, unsigned* __restrict__ counts,
                         int* __restrict__ list_a, int* __restrict__ list_b,
                         double* __restrict__ kpart_a, double* __restrict__ kpart_b,
                         const int* __restrict__ d, int second) {
    griddep_wait();
    griddep_launch_dependents();
    const bool first = blockIdx.z == 0;
    const int rows = first ? M : N, tiles_a = (M + T - 1) / T;
    if (static_cast<long long>(blockIdx.x) * T >= rows) return;
    norms_tile(blockIdx.x, first ? a : b, first ? a_sr : b_sr, first ? a_sk : b_sk, rows, K,
               first ? part_a : part_b, done + (first ? 0 : tiles_a), radius, flat_min,
               exps + (second ? M + N : 0) + (first ? 0 : M),
               counts + (second ? 3 : 0) + (first ? 0 : 1), first ? list_a : list_b,
               second ? nullptr : first ? kpart_a : kpart_b, second ? counts : nullptr, d,
               first ? 1 : -1);
}

// d_k = floor((ilogb s_B - ilogb s_A) / 4), s_A the sum of column k of A squared (kpart_a's
// groups of rows added in order), s_B that of row k of B (0 where either is 0 or not finite),
// as reference.balance: A D and D^-1 B, D = diag(2^d), have the product of A and B, and
// column k of one a 2-norm within a few times row k's of the other. (__ldcg: oz_ksums's last
// block reads what the other blocks of its launch wrote.)
__device__ __forceinline__ void balance_at(int k, const double* __restrict__ kpart_a,
                                           int groups_a, const double* __restrict__ kpart_b,
                                           int groups_b, int K, int* __restrict__ d) {
    double sa = 0.0, sb = 0.0;
    for (int t = 0; t < groups_a; ++t) sa += __ldcg(kpart_a + static_cast<long long>(t) * K + k);
    for (int t = 0; t < groups_b; ++t) sb += __ldcg(kpart_b + static_cast<long long>(t) * K + k);
    const bool ok = sa > 0.0 && sb > 0.0 && isfinite(sa) && isfinite(sb);
    d[k] = ok ? (ilogb(sb) - ilogb(sa)) >> 2 : 0;  // (>> 2 of a negative: floor, as //)
}

// What oz_balance reads when oz_scale, not oz_norms, ran first (oz_scale keeps no sums over
// k): kpart[g * K + k], the sum of x^2 over the rows of group g (rows / gridDim.y of them,
// rounded up) for each k, in the order of the rows; z0 + blockIdx.z picks the operand (0:
// A, 1: B read as B^T). Only where the first scaling refused something; a thread a k.
// With `done` (runtime/ozaki.MERGED) it is oz_balance too: the last of the blocks of a range
// of k to finish (done[blockIdx.x] counts them, and is left 0 again) writes their d
// (balance_at, over groups_a and groups_b groups of rows: this launch's, or the first
// oz_norms' tiles for an operand it did not take), one launch fewer.
SGEMM_KERNEL oz_ksums(const float* __restrict__ a, long long a_sr, long long a_sk, int M,
                      const float* __restrict__ b, long long b_sr, long long b_sk, int N, int K,
                      const unsigned* __restrict__ counts, double* __restrict__ kpart_a,
                      double* __restrict__ kpart_b, int z0, int groups_a, int groups_b,
                      unsigned* __restrict__ done, int* __restrict__ d) {
    griddep_wait();
    griddep_launch_dependents();
    __shared__ bool last;
    if (counts[0] + counts[1] == 0u) return;
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < K) {
        const bool first = z0 + blockIdx.z == 0;
        const float* x = first ? a : b;
        const long long sr = first ? a_sr : b_sr, sk = first ? a_sk : b_sk;
        const int rows = first ? M : N, per = (rows + gridDim.y - 1) / gridDim.y;
        const int r0 = blockIdx.y * per, r1 = min(rows, r0 + per);
        double sq = 0.0;
        for (int r = r0; r < r1; ++r) {
            const double v = load_x(x, sr, sk, r, k);
            sq = fma(v, v, sq);
        }
        (first ? kpart_a : kpart_b)[static_cast<long long>(blockIdx.y) * K + k] = sq;
    }
    if (done == nullptr) return;  // (oz_balance follows)
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(done + blockIdx.x, 1u) == gridDim.y * gridDim.z - 1;
        if (last) done[blockIdx.x] = 0u;  // no other block of this launch touches it again
    }
    __syncthreads();
    if (last && k < K) {
        __threadfence();
        balance_at(k, kpart_a, groups_a, kpart_b, groups_b, K, d);
    }
}

// balance_at for every k, where the first norms refused a row or column (counts[0] +
// counts[1] > 0); a thread a k. (Not launched where oz_ksums writes d.)
SGEMM_KERNEL oz_balance(const double* __restrict__ kpart_a, int tiles_a,
                        const double* __restrict__ kpart_b, int tiles_b, int K,
                        const unsigned* __restrict__ counts, int* __restrict__ d) {
    griddep_wait();
    griddep_launch_dependents();
    if (counts[0] + counts[1] == 0u) return;
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= K) return;
    balance_at(k, kpart_a, tiles_a, kpart_b, tiles_b, K, d);
}

// What the split needs of each modulus: its value m_l, the factor y_l the residue is
// multiplied by (1 for A; for B, y_l = (M / m_l)^-1 mod m_l: then (A_l B_l) mod m_l is already
// the s_l oz_crt sums) and y_l / m_l in FP64. Every m_l is odd, or 256 (runtime/ozaki.py's
// split_moduli checks it): see residue_words for why that matters.
struct SplitModuli {
    int m[MAX_MODULI];
    int factor[MAX_MODULI];
    double ratio[MAX_MODULI];  // y_l / m_l, rounded to FP64
    int scaled;                // factor is not all ones (B's)
};

// The integer in a double's low word after adding 1.5 * 2^52 (|v| < 2^51, v an integer):
// rounding to an integer and reading it back without a conversion instruction.
constexpr double MAGIC52 = 6755399441055744.0;
constexpr double MAGIC_S = 6755401588539392.0;  // 1.5 2^52 + 2^31
constexpr int SPAN = 16;  // k per thread in oz_split: 16 residues, one 16-byte store a plane
constexpr int MAX_COUNT = 8;  // the recombination's exact FP64 sums hold M up to 8 moduli

// The residues modulo m of v_j y (v_j integers in doubles, |v_j| < 2^34; low_j: their low 32
// bits; y = factor, 1 unless SCALED), symmetric, packed four bytes to a word. Per residue one
// FMA, one or two integer multiply-adds and three quarters of a byte permute:
//   q = v y / m to the nearest integer, from one FMA against ratio = fl(y / m) (the exact
//       product, rounded once by the addition of 1.5 2^52). It is off from v y / m by at most
//       |v| (y / m) 2^-53 < 2^-19, while v y / m, a multiple of 1 / m, is either a half-integer
//       or at least 1 / (2m) >= 2^-9 from one: so q is the nearest integer, either one at a
//       tie;
//   r = v y - q m in wrapping 32-bit arithmetic (low y - q m), exact since the true value is
//       small: in [-(m - 1) / 2, (m - 1) / 2] for an odd m, the symmetric residue; a tie
//       needs an even m, and the only even m_l is 256, whose ties give +-128: one byte, 0x80.
// So the bytes are reference.residues' without a correction step.
template <bool SCALED, int N>
__device__ __forceinline__ void residue_words(const double (&v)[N], const int (&low)[N],
                                              double ratio, int factor, int m,
                                              unsigned (&w)[N / 4]) {
#pragma unroll
    for (int j = 0; j < N; j += 4) {
        int r[4];
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const int q = __double2loint(fma(v[j + t], ratio, MAGIC52));
            r[t] = (SCALED ? low[j + t] * factor : low[j + t]) - q * m;
        }
        w[j / 4] = __byte_perm(__byte_perm(r[0], r[1], 0x0040), __byte_perm(r[2], r[3], 0x0040),
                               0x5410);
    }
}

// For each modulus l < count (at most MAX_COUNT: the loop unrolled, so that each modulus's
// constants are operands from the parameter bank, not loads), the N residues' words, handed
// to store(l, words).
template <bool SCALED, int N, class Store>
__device__ __forceinline__ void each_plane(const double (&v)[N], const int (&low)[N],
                                           const SplitModuli& mods, int count, Store store) {
#pragma unroll
    for (int l = 0; l < MAX_COUNT; ++l) {
        if (l >= count) break;
        unsigned w[N / 4];
        residue_words<SCALED, N>(v, low, mods.ratio[l], mods.factor[l], mods.m[l], w);
        store(l, w);
    }
}

// each_plane for A's residues or (mods.scaled) B's.
template <int N, class Store>
__device__ __forceinline__ void split_planes(const double (&v)[N], const int (&low)[N],
                                             const SplitModuli& mods, int count, Store store) {
    if (mods.scaled)
        each_plane<true>(v, low, mods, count, store);
    else
        each_plane<false>(v, low, mods, count, store);
}

// rint(2^e x) for N values x (v on entry; scale = 2^e): v becomes the integers, as doubles,
// and low their low words.
template <int N>
__device__ __forceinline__ void to_integers(double (&v)[N], double scale, int (&low)[N]) {
#pragma unroll
    for (int j = 0; j < N; ++j) {
        // x 2^e (exact) rounded to the nearest integer by the addition of 1.5 2^52
        const double biased = fma(v[j], scale, MAGIC52);
        low[j] = __double2loint(biased);
        v[j] = biased - MAGIC52;
    }
}

// out + l * plane: the residues of X modulo m_l (times factor_l), row r at r * ldk, K-major
// (ldk a multiple of 16; the row's bytes past K, up to a multiple of 16, are residues of 0).
// A thread takes SPAN consecutive k of one row, so its 16 residues of a plane are one 16-byte
// store. Blocks of 32 x 8 threads; threadIdx.x runs along X's contiguous index, so a warp's
// loads are coalesced: along k (sk == 1: a warp stores 512 consecutive bytes of a row), or
// along r (a warp's 16-byte pieces would land in 32 rows: they go through shared memory, and
// leave as 128-byte rows).
//
// `e` and x, or (`balanced`) the second norms' `e2` and x 2^(dsign d_k). After oz_scale (which
// split X with the first scaling already) `after_scale` is 1: only the balanced scaling's
// split, else it returns at once; or 2 (B's, whose oz_scale wrote nothing where A's rows
// were refused, counts[0] > 0): also the first scaling's then.
// (bx stands for the block's x: oz_split_ab runs two operands' blocks in one grid.)
__device__ __forceinline__ void split_block(
    unsigned bx, const float* __restrict__ x, long long sr, long long sk, int rows, int K,
    const int* __restrict__ e, int count, const SplitModuli& mods, signed char* __restrict__ out,
    long long ldk, long long plane, const int* __restrict__ e2, const int* __restrict__ d,
    int dsign, const unsigned* __restrict__ counts, int M, int N, int after_scale) {
    const bool second = balanced(counts, M, N);
    if (after_scale && !second && !(after_scale == 2 && counts[0] > 0u)) return;
    constexpr int ROW = 8 * SPAN + 16;  // a staged row: 8 threads' 16 bytes, +16 for the banks
    __shared__ __align__(16) unsigned char stage[32 * ROW];
    const bool kfast = sk == 1;
    const int groups = (K + SPAN - 1) / SPAN;
    const int fast = kfast ? groups : rows, slow = kfast ? rows : groups;
    const int f = bx * 32 + threadIdx.x;
    const bool vec = kfast && ((sr & 3) == 0) && (reinterpret_cast<unsigned long long>(x) & 15) == 0;
    for (int sb = blockIdx.y; sb * 8 < slow; sb += gridDim.y) {
        const int sl = sb * 8 + threadIdx.y;
        const bool live = f < fast && sl < slow;  // (every thread reaches the barriers)
        const int r = kfast ? sl : f, g = kfast ? f : sl, k0 = g * SPAN;
        double v[SPAN] = {};
        int low[SPAN] = {};
        if (live) {
            const int ex = second ? e2[r] : e[r];
            const double scale = ex == SPECIAL ? 0.0 : pow2(ex);
            const float* row = x + r * sr;
            if (vec && k0 + SPAN <= K) {
#pragma unroll
                for (int q = 0; q < SPAN / 4; ++q) {
                    const float4 t = reinterpret_cast<const float4*>(row + k0)[q];
                    v[4 * q] = t.x, v[4 * q + 1] = t.y, v[4 * q + 2] = t.z, v[4 * q + 3] = t.w;
                }
            } else {
#pragma unroll
                for (int j = 0; j < SPAN; ++j) v[j] = k0 + j < K ? row[(k0 + j) * sk] : 0.0f;
            }
            if (second && ex != SPECIAL) {
#pragma unroll
                for (int j = 0; j < SPAN; ++j)  // x 2^(dsign d_k) (exact), 0 past K
                    v[j] = k0 + j < K ? v[j] * pow2(dsign * d[k0 + j]) : 0.0;
            }
            to_integers(v, scale, low);
        }
        if (kfast) {
            if (!live) continue;
            signed char* dst = out + r * ldk + k0;
            auto put = [&](int l, const unsigned (&w)[SPAN / 4]) {
                *reinterpret_cast<uint4*>(dst + l * plane) = make_uint4(w[0], w[1], w[2], w[3]);
            };
            split_planes(v, low, mods, count, put);
            continue;
        }
        // r fast: the block's 32 rows x 8 groups, staged as 32 rows of 128 bytes; then
        // thread t stores row t / 8's bytes (t % 8) * 16 (a warp: 4 rows of 128 bytes)
        const int t = threadIdx.y * 32 + threadIdx.x, sr_ = t / 8, sg = sb * 8 + t % 8;
        const int srow = bx * 32 + sr_;
        auto put = [&](int l, const unsigned (&w)[SPAN / 4]) {
            if (live)
                *reinterpret_cast<uint4*>(stage + threadIdx.x * ROW + threadIdx.y * SPAN) =
                    make_uint4(w[0], w[1], w[2], w[3]);
            __syncthreads();
            if (srow < rows && sg < groups)
                *reinterpret_cast<uint4*>(out + l * plane + srow * ldk + sg * SPAN) =
                    *reinterpret_cast<const uint4*>(stage + sr_ * ROW + (t % 8) * SPAN);
            __syncthreads();
        };
        split_planes(v, low, mods, count, put);
    }
}

SGEMM_KERNEL oz_split(const float* __restrict__ x, long long sr, long long sk, int rows, int K,
                      const int* __restrict__ e, int count,
                      const __grid_constant__ SplitModuli mods, signed char* __restrict__ out,
                      long long ldk, long long plane, const int* __restrict__ e2,
                      const int* __restrict__ d, int dsign, const unsigned* __restrict__ counts,
                      int M, int N, int after_scale) {
    griddep_wait();
    griddep_launch_dependents();
    split_block(blockIdx.x, x, sr, sk, rows, K, e, count, mods, out, ldk, plane, e2, d, dsign,
                counts, M, N, after_scale);
}

// oz_norms and oz_split in one pass, for a K that fits on chip: a block stages `R` rows of X,
// the whole of K, in shared memory (FP32, rows `kst` floats apart, zeros from K to kpad),
// reading X once; sums each row in FP64 in a fixed order (256 / R threads a row, each over
// k = p, p + 256 / R, ..., then a butterfly and the warps in order); writes its exponent
// (a SPECIAL row listed as oz_norms lists it); and splits the staged row into the residue
// planes as oz_split does (four k a thread: one 4-byte store a plane, a warp's 128 bytes
// consecutive). Nothing is summed over partial chunks, and nothing waits on another block.
//
// R is 4 where k is contiguous (a row is its own 16-byte loads). Where r is, R is 4 or 8: a k
// of 4 rows is 16 bytes, half a sector, whose other half the next block reads at about the
// same time (from L2, if it stays there); of 8 rows, one sector, but twice the shared memory
// (at K = 4096, 131 KB: one block an SM, whose loads then wait for its split). The host
// takes this pass where R * kst floats fit the SM's shared memory (oz_norms and oz_split
// otherwise), one block an SM at the largest.
//
// Built with SCALE_ROWS2 (runtime/ozaki.SCALE_ROWS_K, _R), R may be 2 in either layout: half
// the shared memory, so that at K = 8192 (65 KB) three blocks share an SM instead of one,
// each one's loads under another's sums and residues; where r is contiguous, a k of the two
// rows is 8 bytes, a quarter sector (the neighbouring blocks read the rest, from L2).
// Predicted, before any measurement, at 8192^3 (with SCALE_BLOCKS 3, whose registers allow
// the three): oz_scale A from 0.33 ms (70 % of the 3.3 TB/s its 768 MB would take) to
// about 0.26, B from 0.42 to about 0.30; about 0.2 ms of 6.9, 3 %. At 4096^3 (33 KB, 4 or
// more blocks) a little; at 2048^3 nothing beyond SCALE_BLOCKS's own.
//
// The bill: X's 4 bytes read once, count bytes written, an element; the two passes it
// replaces read X twice and write (and read back) each row's partial sums a chunk.
//
// Predicted at 4096^3 with 8 moduli (A row-major, B row-major: B^T's r contiguous): each
// operand 64 MB read and 128 MB written, about 55 us at 3.5 TB/s, 65 at the 3 TB/s the
// passes reach (R = 4: 66 KB staged, three blocks an SM). Together about 0.13 ms, against
// 0.28 for oz_norms and oz_split in the last probe: the product from 1.15 ms to about 1.0,
// 2.4x cuBLAS to about 2.75x. At 8192^3 (131 KB staged, one block an SM) about 0.55 ms
// against 0.9: 2.64x to about 2.8x.
constexpr int SCALE_BATCH = 8;  // 16-byte loads a thread has in flight while staging
// oz_scale's blocks an SM that its registers must allow (runtime/ozaki.SCALE_BLOCKS): 1 (no
// limit: 98 registers, two blocks an SM), 3 (80) or 4 (64); shared memory allows 6 at K = 2048,
// 3 at 4096, 1 at 8192. None spills (tests/test_hopper_compile.py).
#ifndef SCALE_ROWS2
#define SCALE_ROWS2 0  // 1: oz_scale also stages 2 rows a block (runtime/ozaki.SCALE_ROWS_K, _R)
#endif
#if !defined(SCALE_BLOCKS) || SCALE_BLOCKS == 1
#define SCALE_BOUNDS __launch_bounds__(256)  // (not (256, 1): a hint that changes the code)
#else
#define SCALE_BOUNDS __launch_bounds__(256, SCALE_BLOCKS)
#endif

// oz_scale's staging where k is contiguous: thread t stages row t / PER, k = 4 (t % PER) +
// 4 PER i, float4 loads (PER threads a row: 64 for 4 rows a block, 128 for 2).
template <int PER>
__device__ __forceinline__ void stage_rows_k(float* stage, const float* __restrict__ x,
                                             long long sr, long long r0, int live, int K,
                                             int kst, int kpad, bool aligned) {
    const int tid = threadIdx.x, i = tid / PER, q = tid % PER;
    const bool vec = aligned && (sr & 3) == 0;
    const float* row = x + (r0 + i) * sr;
    for (int k0 = 4 * q; k0 < kpad; k0 += 4 * PER * SCALE_BATCH) {
        float4 v[SCALE_BATCH];
#pragma unroll
        for (int h = 0; h < SCALE_BATCH; ++h) {
            const int k = k0 + 4 * PER * h;
            if (i < live && vec && k + 4 <= K) {
                v[h] = *reinterpret_cast<const float4*>(row + k);
            } else {
                float f[4];
#pragma unroll
                for (int j = 0; j < 4; ++j) f[j] = i < live && k + j < K ? row[k + j] : 0.0f;
                v[h] = make_float4(f[0], f[1], f[2], f[3]);
            }
        }
#pragma unroll
        for (int h = 0; h < SCALE_BATCH; ++h)
            if (k0 + 4 * PER * h < kpad)
                *reinterpret_cast<float4*>(stage + i * kst + k0 + 4 * PER * h) = v[h];
    }
}

// oz_scale's staging of 2 rows where r is contiguous: thread t stages both rows at
// k = t + 256 i, a float2 of the two where they are aligned (8 bytes of a sector: the rest
// is the neighbouring blocks', from L2).
__device__ __forceinline__ void stage_rows_r2(float* stage, const float* __restrict__ x,
                                              long long sr, long long sk, long long r0,
                                              int live, int K, int kst, int kpad,
                                              bool aligned) {
    const bool vec = aligned && sr == 1 && (sk & 1) == 0 && (r0 & 1) == 0;
    for (int k0 = threadIdx.x; k0 < kpad; k0 += 256 * SCALE_BATCH) {
        float2 v[SCALE_BATCH];
#pragma unroll
        for (int h = 0; h < SCALE_BATCH; ++h) {
            const int k = k0 + 256 * h;
            if (vec && live == 2 && k < K) {
                v[h] = *reinterpret_cast<const float2*>(x + r0 + k * sk);
            } else {
                v[h].x = live > 0 && k < K ? load_x(x, sr, sk, r0, k) : 0.0f;
                v[h].y = live > 1 && k < K ? load_x(x, sr, sk, r0 + 1, k) : 0.0f;
            }
        }
#pragma unroll
        for (int h = 0; h < SCALE_BATCH; ++h) {
            const int k = k0 + 256 * h;
            if (k < kpad) stage[k] = v[h].x, stage[kst + k] = v[h].y;
        }
    }
}

// oz_scale's last step: the residues of the staged rows (`live` of them, their exponents in
// ex), SCALE_K consecutive k of a row a thread at a time (one 8-byte store a plane: a warp's
// 256 bytes of a plane consecutive), the block's threads along k, then down the rows. A
// SPECIAL row's are not written.
constexpr int SCALE_K = 8;

template <bool SCALED>
__device__ __forceinline__ void scale_residues(const float* stage, int kst, int kpad, int live,
                                               const int* ex, long long r0,
                                               signed char* __restrict__ out, long long ldk,
                                               long long plane, const SplitModuli& mods,
                                               int count) {
    const int groups = kpad / SCALE_K, tid = threadIdx.x;
    const int di = 256 / groups, dg = 256 % groups;  // a step of 256 (k, row) pairs
    for (int i = tid / groups, g = tid % groups; i < live; i += di, g += dg) {
        if (g >= groups) g -= groups, ++i;
        if (i >= live) break;
        const int xe = ex[i];
        if (xe == SPECIAL) continue;
        const int k = SCALE_K * g;
        const float4 f0 = *reinterpret_cast<const float4*>(stage + i * kst + k);
        const float4 f1 = *reinterpret_cast<const float4*>(stage + i * kst + k + 4);
        double v[SCALE_K] = {f0.x, f0.y, f0.z, f0.w, f1.x, f1.y, f1.z, f1.w};
        int low[SCALE_K];
        to_integers(v, pow2(xe), low);
        signed char* dst = out + (r0 + i) * ldk + k;
        each_plane<SCALED>(v, low, mods, count, [&](int l, const unsigned (&w)[SCALE_K / 4]) {
            *reinterpret_cast<uint2*>(dst + l * plane) = make_uint2(w[0], w[1]);
        });
    }
}

// (block stands for the block's x, and skip() says whether to leave the residues unwritten:
// oz_scale_ab runs two operands' blocks in one grid.)
template <class Skip>
__device__ __forceinline__ void scale_block(
    long long block, const float* __restrict__ x, long long sr, long long sk, int rows, int K,
    int R, int kst, int kpad, double radius, double flat_min, int* __restrict__ e,
    unsigned* __restrict__ refused, int* __restrict__ listed, int count, const SplitModuli& mods,
    signed char* __restrict__ out, long long ldk, long long plane, Skip skip) {
    float* stage = dynamic_smem<float>();
    __shared__ double sums[8][3];  // a warp's
    __shared__ int ex[8];          // the block's rows' exponents
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const long long r0 = block * R;
    const int live = static_cast<int>(min(static_cast<long long>(R), rows - r0));
    const bool aligned = (reinterpret_cast<unsigned long long>(x) & 15) == 0;
    // 1. stage X's rows r0 .. r0 + R - 1, k < kpad (0 past K and past the last row)
    if (sk == 1) {
        if (SCALE_ROWS2 && R == 2)
            stage_rows_k<128>(stage, x, sr, r0, live, K, kst, kpad, aligned);
        else
            stage_rows_k<64>(stage, x, sr, r0, live, K, kst, kpad, aligned);
    } else if (SCALE_ROWS2 && R == 2) {
        stage_rows_r2(stage, x, sr, sk, r0, live, K, kst, kpad, aligned);
    } else {
        // thread t: rows 4 (t % g) .. + 3 of k = t / g + (256 / g) i, g = R / 4 (a float4 of
        // four rows where r is contiguous and aligned)
        const int g = R / 4, half = tid % g, kq = tid / g, i0 = 4 * half, step = 256 / g;
        const bool vec = aligned && sr == 1 && (sk & 3) == 0 && (r0 & 3) == 0;
        for (int k0 = kq; k0 < kpad; k0 += step * SCALE_BATCH) {
            float4 v[SCALE_BATCH];
#pragma unroll
            for (int h = 0; h < SCALE_BATCH; ++h) {
                const int k = k0 + step * h;
                if (vec && i0 + 4 <= live && k < K) {
                    v[h] = *reinterpret_cast<const float4*>(x + r0 + i0 + k * sk);
                } else {
                    float f[4];
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        f[j] = i0 + j < live && k < K ? load_x(x, sr, sk, r0 + i0 + j, k) : 0.0f;
                    v[h] = make_float4(f[0], f[1], f[2], f[3]);
                }
            }
#pragma unroll
            for (int h = 0; h < SCALE_BATCH; ++h) {
                const int k = k0 + step * h;
                if (k < kpad) {
                    stage[(i0 + 0) * kst + k] = v[h].x, stage[(i0 + 1) * kst + k] = v[h].y;
                    stage[(i0 + 2) * kst + k] = v[h].z, stage[(i0 + 3) * kst + k] = v[h].w;
                }
            }
        }
    }
    __syncthreads();
    // 2. each row's sums: 256 / R threads a row, whole warps (R <= 8)
    {
        const int per = 256 / R, i = tid / per, p = tid % per;
        Sums acc;
        for (int k = p; k < K; k += per) acc.add(stage[i * kst + k]);
        acc.warp_total();
        if (lane == 0) sums[warp][0] = acc.sq, sums[warp][1] = acc.ab, sums[warp][2] = acc.nz;
    }
    __syncthreads();
    if (tid < live) {
        const int warps = 256 / R / 32;  // a row's
        double sq = 0.0, ab = 0.0, nz = 0.0;
        for (int w = tid * warps; w < (tid + 1) * warps; ++w)
            sq += sums[w][0], ab += sums[w][1], nz += sums[w][2];
        const int v = exponent_of(sq, ab, nz, radius, flat_min);
        ex[tid] = v;
        e[r0 + tid] = v;
        if (v == SPECIAL) {  // for oz_fallback (never past the list: see there)
            const unsigned slot = atomicAdd(refused, 1u);
            if (slot < static_cast<unsigned>(rows)) listed[slot] = static_cast<int>(r0 + tid);
        }
    }
    __syncthreads();
    // 3. the residues (scale_residues). A SPECIAL row's are not written: rung 26's products
    // over them are never read (oz_crt leaves a refused row's or column's outputs to
    // oz_fallback), so a row refused here costs a read and no writes (activations with
    // outlier features: every row, before the balanced scaling splits them again). Nor are
    // any where *skip_if (B's: A's refusals, counted by A's pass before this one) is not 0:
    // the balanced scaling will be tried, and oz_split then writes B's residues with
    // whichever scaling is taken.
    if (skip()) return;
    if (mods.scaled)
        scale_residues<true>(stage, kst, kpad, live, ex, r0, out, ldk, plane, mods, count);
    else
        scale_residues<false>(stage, kst, kpad, live, ex, r0, out, ldk, plane, mods, count);
}

SGEMM_KERNEL SCALE_BOUNDS
oz_scale(const float* __restrict__ x, long long sr, long long sk, int rows, int K, int R,
         int kst, int kpad, double radius, double flat_min, int* __restrict__ e,
         unsigned* __restrict__ refused, int* __restrict__ listed, int count,
         const __grid_constant__ SplitModuli mods, signed char* __restrict__ out,
         long long ldk, long long plane, const unsigned* __restrict__ skip_if) {
    griddep_wait();
    griddep_launch_dependents();
    scale_block(blockIdx.x, x, sr, sk, rows, K, R, kst, kpad, radius, flat_min, e, refused,
                listed, count, mods, out, ldk, plane,
                [&] { return skip_if != nullptr && *skip_if != 0u; });
}

// oz_scale for A and B in one launch (runtime/ozaki.MERGED): A's blocks first (R_a rows
// each), then B's (R_b rows of B^T), their shared memory the larger of the two. B's blocks
// leave their residues unwritten where A's refusals are already counted when they get there
// (read from L2: A's blocks of this launch count them): in a grid that runs A's blocks
// first, almost always so where A refuses whole sets of rows. Where one is not yet counted,
// B's residues are written with the first scaling, and oz_split (B's `after_scale` 2, where
// counts[0] > 0 in the end) writes them again with the scaling taken: right either way.
SGEMM_KERNEL SCALE_BOUNDS
oz_scale_ab(const float* __restrict__ a, long long a_sr, long long a_sk, int M, int R_a,
            const float* __restrict__ b, long long b_sr, long long b_sk, int N, int R_b, int K,
            int kst, int kpad, double radius, double flat_min, int* __restrict__ exps,
            unsigned* __restrict__ counts, int* __restrict__ list_a, int* __restrict__ list_b,
            int count, const __grid_constant__ SplitModuli mods_a,
            const __grid_constant__ SplitModuli mods_b, signed char* __restrict__ res_a,
            signed char* __restrict__ res_b, long long ldk) {
    griddep_wait();
    griddep_launch_dependents();
    const long long blocks_a = (M + R_a - 1) / R_a;
    if (blockIdx.x < blocks_a)
        scale_block(blockIdx.x, a, a_sr, a_sk, M, K, R_a, kst, kpad, radius, flat_min, exps,
                    counts, list_a, count, mods_a, res_a, ldk, M * ldk, [] { return false; });
    else
        scale_block(blockIdx.x - blocks_a, b, b_sr, b_sk, N, K, R_b, kst, kpad, radius,
                    flat_min, exps + M, counts + 1, list_b, count, mods_b, res_b, ldk, N * ldk,
                    [&] { return __ldcg(counts) != 0u; });
}

// What the recombination needs: X = S - k M with S = sum_l s_l W_l, W_l = M / m_l, s_l the
// planes' bytes (B's residues were multiplied by y_l = W_l^-1 mod m_l, so (A_l B_l) mod m_l
// is s_l, X's residue times y_l) and k the integer nearest S / M. In FP64, exactly:
// W_l = w_hi + w_lo with w_hi a multiple of 2^13 (at most 43 significant bits) and
// w_lo < 2^13, so s_l w_hi is exact (51 bits) and so is their sum S_hi (|S| < 2^66: at most
// 53 bits in units of 2^13); S_lo = sum_l s_l w_lo < 2^23 is an int. M = m_hi + m_lo, m_hi a
// multiple of 2^14 (50 bits: k m_hi exact for |k| <= 7), m_lo < 2^14. k from S / M;
// X = (S_hi - k m_hi) + (S_lo - k m_lo), both parts exact, their sum rounded once: X as
// FP64 gives it, as the reference's int64 -> float64 does.
struct CrtModuli {
    double w_hi[MAX_MODULI];
    int w_lo[MAX_MODULI];
    double m_hi;
    int m_lo;
    double inverse;  // 1 / M
    // oz_crt_int's: M itself (below 2^64), and W_l in three pieces of 19 bits (W_l < 2^57)
    unsigned long long m;
    int piece[3][MAX_MODULI];
};

// Byte Q of w, sign-extended: one byte permute (PTX prmt with the sign-replicating selector).
template <int Q>
__device__ __forceinline__ int signed_byte(unsigned w) {
#ifdef SGEMM_CPU_EMULATOR
    return static_cast<signed char>(w >> (8 * Q));
#else
    int r;
    asm("prmt.b32 %0, %1, 0, %2;" : "=r"(r) : "r"(w), "n"(Q | (0x888 | Q * 0x111) << 4));
    return r;
#endif
}

constexpr int QUAD = 8;  // outputs per thread in oz_crt: one 8-byte load a plane
// C = alpha 2^-(mu_i + nu_j) X_ij + beta C: QUAD neighbouring outputs of a row per thread
// (ldr a multiple of 16: the 8-byte loads are aligned and stay inside the row), threads along
// the row (blockIdx.x), rows along blockIdx.y and beyond, in steps of gridDim.y (the host
// makes the grid one wave): the next row's residues are loaded before this row's are
// recombined, so a thread always has a row's loads in flight. The outputs of a SPECIAL row or
// column are oz_fallback's: not written here.
// INT_SUMS (oz_crt_int): S from integer sums instead. S = T2 2^38 + T1 2^19 + T0, T_c the sum
// of s_l times W_l's 19-bit piece c: each term below 2^26 in magnitude, 8 of them below 2^29,
// exact in INT32; a byte's sign extension and three multiply-adds a residue, against a
// conversion through a magic number, an FP64 and an integer sum. k from S in FP64 (rounded
// twice: off by about 2^-52 S, far inside the radius's margin), then X = S - k M exactly in
// 64-bit wrapping arithmetic (|X| < M / 2 < 2^63), converted to FP64 once.
template <bool INT_SUMS>
__device__ __forceinline__ void crt_rows(const signed char* __restrict__ R, long long ldr,
                                         long long plane, int M, int N, int count,
                                         const CrtModuli& mods, const int* __restrict__ exps,
                                         float alpha, float beta, float* __restrict__ C,
                                         long long ldc, const unsigned* __restrict__ counts) {
    // exps: mu (M), nu (N), then the second norms' mu and nu, taken when `balanced`
    const int* mu = exps + (balanced(counts, M, N) ? M + N : 0);
    const int* nu = mu + M;
    const int j0 = (blockIdx.x * blockDim.x + threadIdx.x) * QUAD;
    if (j0 >= N) return;
    const bool vec = j0 + QUAD <= N && (ldc & 3) == 0 &&
                     (reinterpret_cast<unsigned long long>(C) & 15) == 0;
    int ej[QUAD];
    bool mine = true;  // none of the thread's columns is SPECIAL
#pragma unroll
    for (int q = 0; q < QUAD; ++q) {
        ej[q] = j0 + q < N ? nu[j0 + q] : 0;
        mine = mine && ej[q] != SPECIAL;
    }
    // every plane's bytes of a row loaded before any is used (unrolled to the most moduli
    // the recombination takes): one memory latency a row, not one a plane
    uint2 words[MAX_COUNT];
    auto load_row = [&](uint2 (&w)[MAX_COUNT], int i) {
        const signed char* p = R + i * ldr + j0;
#pragma unroll
        for (int l = 0; l < MAX_COUNT; ++l)
            w[l] = l < count && i < M ? *reinterpret_cast<const uint2*>(p + l * plane)
                                      : make_uint2(0u, 0u);
    };
    const int step = static_cast<int>(gridDim.y);
    load_row(words, blockIdx.y);
    for (int i = blockIdx.y, next; i < M; i = next) {
        next = M - i > step ? i + step : M;  // (M - i: no overflow near 2^31)
        uint2 ahead[MAX_COUNT];
        load_row(ahead, next);
        float out[QUAD];
        int ei;
        if (INT_SUMS) {
            ei = mu[i];
#pragma unroll
            for (int h = 0; h < 2; ++h) {  // four outputs at a time: 12 sums in registers
                int t[3][4] = {};
#pragma unroll
                for (int l = 0; l < MAX_COUNT; ++l) {
                    const unsigned word = h ? words[l].y : words[l].x;
                    const int s[4] = {signed_byte<0>(word), signed_byte<1>(word),
                                      signed_byte<2>(word), signed_byte<3>(word)};
#pragma unroll
                    for (int c = 0; c < 3; ++c)
#pragma unroll
                        for (int q = 0; q < 4; ++q)
                            t[c][q] += s[q] * mods.piece[c][l];  // (0 past count)
                }
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const double sd = fma(static_cast<double>(t[2][q]), 274877906944.0,  // 2^38
                                          fma(static_cast<double>(t[1][q]), 524288.0,    // 2^19
                                              static_cast<double>(t[0][q])));
                    const long long k = __double2loint(fma(sd, mods.inverse, MAGIC52));
                    const unsigned long long S =
                        (static_cast<unsigned long long>(static_cast<long long>(t[2][q])) << 38) +
                        (static_cast<unsigned long long>(static_cast<long long>(t[1][q])) << 19) +
                        static_cast<unsigned long long>(static_cast<long long>(t[0][q]));
                    const long long X = static_cast<long long>(
                        S - static_cast<unsigned long long>(k) * mods.m);
                    out[4 * h + q] =
                        static_cast<float>(static_cast<double>(X) * pow2(-(ei + ej[4 * h + q])));
                }
            }
        } else {
            double hi[QUAD];
            int lo[QUAD];
#pragma unroll
            for (int q = 0; q < QUAD; ++q) hi[q] = 0.0, lo[q] = 0;
#pragma unroll
            for (int l = 0; l < MAX_COUNT; ++l) {
                const int wl = mods.w_lo[l];  // 0 past count
                const double wh = mods.w_hi[l];
#pragma unroll
                for (int q = 0; q < QUAD; ++q) {
                    const unsigned word = q < 4 ? words[l].x : words[l].y;
                    const int s = static_cast<signed char>(word >> (8 * (q % 4)));
                    // s as a double without a conversion: 1.5 2^52 + 2^31 + s, less the constant
                    const double sd = __hiloint2double(0x43380000, s ^ 0x80000000) - MAGIC_S;
                    hi[q] = fma(sd, wh, hi[q]);
                    lo[q] += s * wl;
                }
            }
            ei = mu[i];
#pragma unroll
            for (int q = 0; q < QUAD; ++q) {
                // k: S / M to the nearest integer (|S / M| < 5; S_hi + S_lo rounded is close
                // enough, the radius leaving a margin of 2^-13), by the addition of 1.5 2^52
                const double near = fma(hi[q] + static_cast<double>(lo[q]), mods.inverse, MAGIC52);
                const int k = __double2loint(near);
                const double X = fma(-(near - MAGIC52), mods.m_hi, hi[q]) +
                                 static_cast<double>(lo[q] - k * mods.m_lo);
                // X (rounded once, in the sum above) times a power of two (exact), to FP32
                out[q] = static_cast<float>(X * pow2(-(ei + ej[q])));
            }
        }
        float* c = C + i * ldc + j0;
        if (ei == SPECIAL) {
            // oz_fallback's row
        } else if (vec && mine) {
#pragma unroll
            for (int h = 0; h < QUAD; h += 4) {
                float4 v = make_float4(alpha * out[h], alpha * out[h + 1], alpha * out[h + 2],
                                       alpha * out[h + 3]);
                if (beta != 0.0f) {
                    const float4 old = *reinterpret_cast<const float4*>(c + h);
                    v.x = fmaf(beta, old.x, v.x), v.y = fmaf(beta, old.y, v.y);
                    v.z = fmaf(beta, old.z, v.z), v.w = fmaf(beta, old.w, v.w);
                }
                *reinterpret_cast<float4*>(c + h) = v;
            }
        } else {
#pragma unroll
            for (int q = 0; q < QUAD; ++q)
                if (j0 + q < N && ej[q] != SPECIAL) c[q] = epilogue(out[q], alpha, beta, c + q);
        }
#pragma unroll
        for (int l = 0; l < MAX_COUNT; ++l) words[l] = ahead[l];
    }
}

SGEMM_KERNEL __launch_bounds__(256, 3)  // 80 registers: three blocks an SM (four spill)
oz_crt(const signed char* __restrict__ R, long long ldr, long long plane, int M, int N,
       int count, const __grid_constant__ CrtModuli mods, const int* __restrict__ exps,
       float alpha, float beta, float* __restrict__ C, long long ldc,
       const unsigned* __restrict__ counts) {
    griddep_wait();
    griddep_launch_dependents();
    crt_rows<false>(R, ldr, plane, M, N, count, mods, exps, alpha, beta, C, ldc, counts);
}

// oz_crt with integer sums (runtime/ozaki.CRT_INT): the same outputs, bit for bit. Within 80
// registers it spilled (the 12 sums, the row ahead's 16 words and the 64-bit arithmetic):
// two blocks an SM, up to 128.
SGEMM_KERNEL __launch_bounds__(256, 2)
oz_crt_int(const signed char* __restrict__ R, long long ldr, long long plane, int M, int N,
           int count, const __grid_constant__ CrtModuli mods, const int* __restrict__ exps,
           float alpha, float beta, float* __restrict__ C, long long ldc,
           const unsigned* __restrict__ counts) {
    griddep_wait();
    griddep_launch_dependents();
    crt_rows<true>(R, ldr, plane, M, N, count, mods, exps, alpha, beta, C, ldc, counts);
}

// The outputs of the rows and columns oz_norms refused (SPECIAL: Inf or NaN, or too little
// flatness), listed there in `rows` (counts[0] of them) and `cols` (counts[1]):
// C = alpha (A B)_ij + beta C_ij, the FP32 products summed in FP64 (each is exact there;
// IEEE's specials come out as an FP32 product gives them). Work, in tiles of FT x FT
// outputs: the listed rows against every column, then every row but the listed ones against
// the listed columns (so an output whose row and column are both listed is written once).
// A block of 16 x 16 threads, each 4 x 4 outputs in FP64, stages FK k at a time of its
// tile's rows of A and of B^T in shared memory as FP64, and loads the next FK into registers
// while it multiplies these. The grid is one wave that walks the tiles; with nothing listed
// every block returns at once.
//
// Few tiles (a few refused rows: 32 tiles at 2048 columns, on 132 SMs) would leave most SMs
// idle while each block walked all of K, so the tiles' K is cut into `slices` when the wave
// has blocks to spare (as many as fit, each at least SLICE_MIN long): each slice's FP64 sums
// go to `partial`, and the last slice of a tile to finish (`done[t]` counts them, left 0
// again) adds them up in the order of the slices, so the outputs are the same every run.
// Its last block sets counts back to 0 (the workspace's zeroed region): its own (counts[2],
// the blocks finished) and both norms' refusal counts.
//
// The bill: an FP64 FMA per output and k, where an exact FP32 product spends one FP32 FMA,
// and the H200 issues half as many FP64 FMA a clock: a refused output costs at least twice
// what exact FP32 spends on it, on top of the scheme's own work.
constexpr int FT = 64;          // a fallback tile's rows and columns
constexpr int FK = 16;          // the k staged at a time
constexpr int SLICE_MIN = 128;  // the shortest slice of K worth a block of its own

// (tid, bx and gx stand for the thread's index in the block, the block's in the wave and the
// wave's blocks: oz_split_ab runs it in blocks of 32 x 8 beside its splits, where `reset` is
// false and that launch sets the counts back itself.)
__device__ __forceinline__ void fallback_tiles(
    unsigned tid_, unsigned bx, unsigned gx, const float* __restrict__ a, long long a_sr,
    long long a_sk, const float* __restrict__ b, long long b_sr, long long b_sk, int M, int N,
    int K, float alpha, float beta, float* __restrict__ C, long long ldc,
    const int* __restrict__ mu, unsigned* __restrict__ counts, const int* __restrict__ rows,
    const int* __restrict__ cols, double* __restrict__ partial, unsigned* __restrict__ done,
    const int* __restrict__ mu2, const int* __restrict__ rows2, const int* __restrict__ cols2,
    bool reset) {
    __shared__ double As[FK][FT + 1], Bs[FK][FT + 1];  // (+1: no bank conflict on the stores)
    __shared__ int ri[FT], cj[FT];  // the tile's rows and columns; -1: none
    __shared__ bool last;
    // (at most M and N: a norms launch run again without this one, as a probe timing the
    // launches one by one does, counts its rows again, and only this launch sets them back)
    if (counts[0] + counts[1] + counts[3] + counts[4] == 0u) return;  // (nothing to set back)
    const bool second = balanced(counts, M, N);  // the second norms' lists and exponents
    if (second) mu = mu2, rows = rows2, cols = cols2;
    const long long nr = min(counts[second ? 3 : 0], static_cast<unsigned>(M));
    const long long nc = min(counts[second ? 4 : 1], static_cast<unsigned>(N));
    const int tid = static_cast<int>(tid_), tx = tid % 16, ty = tid / 16;
    const long long across = (N + FT - 1) / FT, down = (M + FT - 1) / FT;
    const long long first = (nr + FT - 1) / FT * across;  // the listed rows' tiles
    const long long tiles = first + down * ((nc + FT - 1) / FT);
    // slices of K a tile: as many as the wave has blocks for, none shorter than SLICE_MIN
    // (no tiles: the balanced scaling refused nothing, and this block only counts itself)
    const int slices = tiles == 0 || tiles >= gx ? 1 : static_cast<int>(
        min(static_cast<long long>(gx) / tiles,
            static_cast<long long>((K + SLICE_MIN - 1) / SLICE_MIN)));
    const int span = ((K + slices - 1) / slices + FK - 1) / FK * FK;  // k a slice
    // what this thread stages: element e = tid + 256 h of each operand's FT x FK, along k
    // where k is contiguous (a warp reads 2 rows of 16 words), else along the rows
    int ia[4], ka[4], ib[4], kb[4];
#pragma unroll
    for (int h = 0; h < 4; ++h) {
        const int e = tid + 256 * h;
        ia[h] = a_sk == 1 ? e / FK : e % FT, ka[h] = a_sk == 1 ? e % FK : e / FT;
        ib[h] = b_sk == 1 ? e / FK : e % FT, kb[h] = b_sk == 1 ? e % FK : e / FT;
    }
    for (long long item = bx; item < tiles * slices; item += gx) {
        const long long t = item / slices;
        const int slice = static_cast<int>(item % slices);
        const int kbeg = slice * span, kend = min(K, kbeg + span);
        __syncthreads();  // the last item's ri, cj and stages are read
        if (tid < FT) {
            if (t < first) {
                const long long p = t / across * FT + tid, j = t % across * FT + tid;
                ri[tid] = p < nr ? rows[p] : -1;
                cj[tid] = j < N ? static_cast<int>(j) : -1;
            } else {
                const long long u = t - first;
                const long long i = u % down * FT + tid, p = u / down * FT + tid;
                ri[tid] = i < M && mu[i] != SPECIAL ? static_cast<int>(i) : -1;
                cj[tid] = p < nc ? cols[p] : -1;
            }
        }
        __syncthreads();
        int r[4], j[4];
#pragma unroll
        for (int h = 0; h < 4; ++h) r[h] = ri[ia[h]], j[h] = cj[ib[h]];
        float xa[4], xb[4];  // the next FK's elements, in flight while these are multiplied
        auto fetch = [&](int k0) {
#pragma unroll
            for (int h = 0; h < 4; ++h) {
                xa[h] = r[h] >= 0 && k0 + ka[h] < kend ? load_x(a, a_sr, a_sk, r[h], k0 + ka[h])
                                                       : 0.0f;
                xb[h] = j[h] >= 0 && k0 + kb[h] < kend ? load_x(b, b_sr, b_sk, j[h], k0 + kb[h])
                                                       : 0.0f;
            }
        };
        double acc[4][4];
#pragma unroll
        for (int p = 0; p < 4; ++p)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[p][q] = 0.0;
        fetch(kbeg);
        for (int k0 = kbeg; k0 < kend; k0 += FK) {
            __syncthreads();  // the last step's stages are read
#pragma unroll
            for (int h = 0; h < 4; ++h) As[ka[h]][ia[h]] = xa[h], Bs[kb[h]][ib[h]] = xb[h];
            __syncthreads();
            if (k0 + FK < kend) fetch(k0 + FK);
#pragma unroll
            for (int kk = 0; kk < FK; ++kk) {
                double x[4], y[4];
#pragma unroll
                for (int p = 0; p < 4; ++p) x[p] = As[kk][ty + 16 * p], y[p] = Bs[kk][tx + 16 * p];
#pragma unroll
                for (int p = 0; p < 4; ++p)
#pragma unroll
                    for (int q = 0; q < 4; ++q) acc[p][q] = fma(x[p], y[q], acc[p][q]);
            }
        }
        if (slices > 1) {
            // this slice's sums, then the tile's last slice adds all of them, in order
            double* mine = partial + item * (FT * FT);
#pragma unroll
            for (int p = 0; p < 4; ++p)
#pragma unroll
                for (int q = 0; q < 4; ++q) mine[(p * 4 + q) * 256 + tid] = acc[p][q];
            __threadfence();
            __syncthreads();
            if (tid == 0) {
                last = atomicAdd(done + t, 1u) == static_cast<unsigned>(slices) - 1;
                if (last) done[t] = 0u;
            }
            __syncthreads();
            if (!last) continue;
            __threadfence();
#pragma unroll
            for (int p = 0; p < 4; ++p)
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    double sum = 0.0;
                    for (int sl = 0; sl < slices; ++sl)
                        sum += __ldcg(partial + (t * slices + sl) * (FT * FT) + (p * 4 + q) * 256 +
                                      tid);
                    acc[p][q] = sum;
                }
        }
#pragma unroll
        for (int p = 0; p < 4; ++p)
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int i = ri[ty + 16 * p], jj = cj[tx + 16 * q];
                if (i >= 0 && jj >= 0) {
                    float* c = C + i * ldc + jj;
                    *c = epilogue(static_cast<float>(acc[p][q]), alpha, beta, c);
                }
            }
    }
    if (!reset) return;
    // the last block out: every block has read the counts, so they go back to 0
    __syncthreads();
    if (tid == 0) {
        __threadfence();
        if (atomicAdd(counts + 2, 1u) == gx - 1)
            counts[0] = counts[1] = counts[2] = counts[3] = counts[4] = 0u;
    }
}

SGEMM_KERNEL __launch_bounds__(256)
oz_fallback(const float* __restrict__ a, long long a_sr, long long a_sk,
            const float* __restrict__ b, long long b_sr, long long b_sk, int M, int N, int K,
            float alpha, float beta, float* __restrict__ C, long long ldc,
            const int* __restrict__ mu, unsigned* __restrict__ counts,
            const int* __restrict__ rows, const int* __restrict__ cols,
            double* __restrict__ partial, unsigned* __restrict__ done,
            const int* __restrict__ mu2, const int* __restrict__ rows2,
            const int* __restrict__ cols2) {
    griddep_wait();
    griddep_launch_dependents();
    fallback_tiles(threadIdx.x, blockIdx.x, gridDim.x, a, a_sr, a_sk, b, b_sr, b_sk, M, N, K,
                   alpha, beta, C, ldc, mu, counts, rows, cols, partial, done, mu2, rows2,
                   cols2, true);
}

// oz_split for A and B in one launch (runtime/ozaki.MERGED): blockIdx.z picks the operand (0:
// A; 1: B read as B^T, with its own moduli: its factors y_l), blockIdx.x its blocks along the
// contiguous index (a block past them has nothing to split), blockIdx.y walks the other as
// in oz_split. exps holds mu (M), nu (N), then the second norms' mu and nu; each operand's
// `after_scale` as oz_split's (gate_a, gate_b).
//
// With `fallback_blocks` (runtime/ozaki.FALLBACK_EARLY) the blocks of z = 2 are oz_fallback's
// wave too (the first fallback_blocks of them, in blocks of 32 x 8 threads), one launch fewer
// a product. oz_fallback needs nothing of the products: it runs before them. oz_crt, after
// them, reads the counts that oz_fallback would have set back to 0; so here every block of
// the launch counts itself out where something was refused (every one has read the counts
// by then), and the last one copies them into `snapshot`, which oz_crt reads instead, and
// sets them back; with nothing refused, the launch's first block writes a snapshot of zeros.
SGEMM_KERNEL __launch_bounds__(256)
oz_split_ab(const float* __restrict__ a, long long a_sr, long long a_sk, int M,
            const float* __restrict__ b, long long b_sr, long long b_sk, int N, int K,
            const int* __restrict__ exps, int count, const __grid_constant__ SplitModuli mods_a,
            const __grid_constant__ SplitModuli mods_b, signed char* __restrict__ res_a,
            signed char* __restrict__ res_b, long long ldk, const int* __restrict__ d,
            unsigned* __restrict__ counts, int gate_a, int gate_b, int fallback_blocks,
            float alpha, float beta, float* __restrict__ C, long long ldc,
            const int* __restrict__ list_a, const int* __restrict__ list_b,
            const int* __restrict__ list2_a, const int* __restrict__ list2_b,
            double* __restrict__ partial, unsigned* __restrict__ sliced,
            unsigned* __restrict__ snapshot) {
    griddep_wait();
    griddep_launch_dependents();
    const unsigned r1 = counts[0], c1 = counts[1], r2 = counts[3], c2 = counts[4];
    const bool refused = (r1 | c1 | r2 | c2) != 0u;
    const int tid = threadIdx.y * 32 + threadIdx.x;
    // (two calls, not one on a chosen operand: each operand's moduli stay operands from the
    // parameter bank)
    const int groups = (K + SPAN - 1) / SPAN;
    if (blockIdx.z == 0) {
        if (static_cast<long long>(blockIdx.x) * 32 < (a_sk == 1 ? groups : M))
            split_block(blockIdx.x, a, a_sr, a_sk, M, K, exps, count, mods_a, res_a, ldk,
                        M * ldk, exps + M + N, d, 1, counts, M, N, gate_a);
    } else if (blockIdx.z == 1) {
        if (static_cast<long long>(blockIdx.x) * 32 < (b_sk == 1 ? groups : N))
            split_block(blockIdx.x, b, b_sr, b_sk, N, K, exps + M, count, mods_b, res_b, ldk,
                        N * ldk, exps + 2 * M + N, d, -1, counts, M, N, gate_b);
    } else {
        const unsigned w = blockIdx.y * gridDim.x + blockIdx.x;
        if (w < static_cast<unsigned>(fallback_blocks))
            fallback_tiles(tid, w, fallback_blocks, a, a_sr, a_sk, b, b_sr, b_sk, M, N, K,
                           alpha, beta, C, ldc, exps, counts, list_a, list_b, partial, sliced,
                           exps + M + N, list2_a, list2_b, false);
    }
    if (fallback_blocks == 0) return;  // (oz_fallback follows oz_crt, and sets them back)
    if (!refused) {
        if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && tid == 0)
            snapshot[0] = snapshot[1] = snapshot[2] = snapshot[3] = snapshot[4] = 0u;
        return;
    }
    __syncthreads();  // (every thread of the block has read the counts)
    if (tid == 0) {
        __threadfence();
        if (atomicAdd(counts + 2, 1u) == gridDim.x * gridDim.y * gridDim.z - 1) {
            snapshot[0] = r1, snapshot[1] = c1, snapshot[2] = 0u, snapshot[3] = r2;
            snapshot[4] = c2;
            counts[0] = counts[1] = counts[2] = counts[3] = counts[4] = 0u;
        }
    }
}
