// The split sparse attention's scores on the matrix unit (SparseAttnArgs::scores_mma; the fast
// order, for prefill chunks and decode batches of 16 rows and more). Per query row the scores are
// a dense product S[H x nc] = Q[H x Dh] K[nc x Dh]^T (the 64 heads share one KV row set:
// MODEL-SPEC 3.6), which scores_rows_kernel (sparse_attention_split.cu) sums one f32 product at
// a time in the CPU's order: 26.3 of a 4,096-token prefill's 130.7 ms of kernels on an H100
// (PERF.md v29).
// Here a block of kMThreads takes (query row, 64 candidates, 64 heads) and runs mma_tile.h's 64x64
// tile with heads as its x rows, candidates as its weight rows and dims as k: per 32 dims it
// stages q and the candidates' f32 rows (the window's, an f32 pool's, or an encoded pool's entries
// decoded once a call, as for the P.V on the matrix unit) as three bf16 parts each, hi + mid + lo
// = the value exactly (bf16_parts), and runs the k-tile once per pair of parts that are not zero
// anywhere in it: faithful's bf16-exact q and KV need one run. So every product is exact and only
// the accumulation differs from the CPU's (the matrix unit's order, and on hardware its adder's
// alignment and truncation, which three-part inputs show); the score is then scaled as the CPU
// scales it. A last-bit change of a score can flip bf16(e) of a candidate, so the bars come from
// the floor of the attn site's order (GpuOps.SparseAttentionMmaWithinTheOrderFloor,
// docs/CORRECTNESS.md "The scores on the matrix unit").
#include <type_traits>

#include "plumb/backend/gpu/kernels/attention.h"
#include "plumb/backend/gpu/kernels/launch.h"
#include "plumb/backend/gpu/kernels/mma_tile.h"
#include "plumb/backend/gpu/kernels/sparse_attention_common.h"

namespace plumb::gpu::k::attn {
namespace {

constexpr int kParts = 3;  // hi, mid, lo
// A thread stages dim pairs (2p, 2p + 1) of kPairLoads (tile row, pair) slots per operand.
constexpr int kPairsPerRow = kMBK / 2, kPairLoads = kMBM * kPairsPerRow / kMThreads;
static_assert(kMBM == kMBN && kMBM * kPairsPerRow % kMThreads == 0, "q and K tiles stage alike");

// One operand's k-tile (dims k0 .. k0 + kMBK - 1 of 64 rows; src(r) the row's f32 values or null
// for none, read as 0): load_pairs takes this thread's values into registers, store_parts splits
// them into the parts' shared tiles (PERF.md v24: loads and shared stores interleaved were a round
// trip each). The kernel issues both operands' loads before it stores either and before the barrier
// on the previous k-tile's steps; on an H100 that ran no faster than one operand after the other
// (PERF.md v31: 4 blocks a multiprocessor hide the round trips). store_parts returns whether its
// values had a nonzero mid or lo part.
using PairValues = float[2 * kPairLoads];

template <class Src>
__device__ __forceinline__ void load_pairs(Src&& src, int64_t k0, PairValues& v) {
  const int t = threadIdx.x;
#pragma unroll
  for (int u = 0; u < kPairLoads; ++u) {
    const int i = t + u * kMThreads, r = i / kPairsPerRow, d = 2 * (i % kPairsPerRow);
    const float* row = src(r);
    v[2 * u] = row ? row[k0 + d] : 0.f;
    v[2 * u + 1] = row ? row[k0 + d + 1] : 0.f;
  }
}

__device__ __forceinline__ bool store_parts(const PairValues& v, BTile (*tiles)[kMBM]) {
  const int t = threadIdx.x;
  bool inexact = false;
#pragma unroll
  for (int u = 0; u < kPairLoads; ++u) {
    const int i = t + u * kMThreads, r = i / kPairsPerRow, d = 2 * (i % kPairsPerRow);
    uint32_t first[kParts], second[kParts];
    bf16_parts(v[2 * u], first);
    bf16_parts(v[2 * u + 1], second);
    inexact |= (first[1] | first[2] | second[1] | second[2]) & 0x7fffu;  // (a -0 part is zero)
#pragma unroll
    for (int p = 0; p < kParts; ++p) *reinterpret_cast<uint32_t*>(&tiles[p][r][d]) = first[p] | second[p] << 16;
  }
  return inexact;
}

// grid (rows, ceil(max_cand / kMBN), ceil(H / kMBM)), kMThreads threads.
template <bool kMatrix>
__global__ void __launch_bounds__(kMThreads) scores_mma_kernel(SparseAttnArgs a) {
  pdl_begin();
  using Tile = std::conditional_t<kMatrix, MatrixTile, SimtTile>;
  __shared__ __align__(16) BTile qs[kParts][kMBM];  // q's parts [head][dim]
  __shared__ __align__(16) BTile ks[kParts][kMBN];  // the candidates' parts [candidate][dim]
  __shared__ const float* rows[kMBN];               // the tile's candidate rows (null: none)
  const int t = threadIdx.x;
  const int64_t row = a.row0 + blockIdx.x, j0 = static_cast<int64_t>(blockIdx.y) * kMBN,
                h0 = static_cast<int64_t>(blockIdx.z) * kMBM;
  if (a.row_seq[row] < 0) return;  // the P.V kernel writes this row's zeros
  const RowCtx c = row_ctx(a, row);
  if (j0 >= c.nc) return;
  if (t < kMBN) {
    int64_t bad = -1;
    // (f32 rows only: the host decodes an encoded pool's entries first)
    rows[t] = j0 + t < c.nc ? candidate(a, c, j0 + t, &bad).f : nullptr;
    report_invisible(a, c, bad);
  }
  auto score = [&](int64_t n, int64_t r) -> float& { return head_scores(a, row, h0 + n)[j0 + r]; };
  if (!__syncthreads_or(t < kMBN && rows[t])) {  // every candidate a skipped selection slot
    for (int i = t; i < kMBM * kMBN; i += kMThreads)
      if (h0 + i / kMBN < a.H && j0 + i % kMBN < c.nc) score(i / kMBN, i % kMBN) = -INFINITY;
    return;
  }
  const float* q = a.q + (row * a.H + h0) * a.Dh;
  auto q_row = [&](int r) { return h0 + r < a.H ? q + r * a.Dh : nullptr; };
  auto k_row = [&](int r) { return rows[r]; };
  Tile tile(t);
  for (int64_t k0 = 0; k0 < a.Dh; k0 += kMBK) {
    PairValues qv, kv;
    load_pairs(q_row, k0, qv);
    load_pairs(k_row, k0, kv);
    if (k0 > 0) __syncthreads();  // the previous k-tile's steps are done with the tiles
    const bool q_inexact = store_parts(qv, qs), k_inexact = store_parts(kv, ks);
    const bool q_parts = __syncthreads_or(q_inexact);
    const bool k_parts = __syncthreads_or(k_inexact);
    for (int qp = 0; qp < (q_parts ? kParts : 1); ++qp)
      for (int kp = 0; kp < (k_parts ? kParts : 1); ++kp) tile.step(qs[qp], ks[kp]);
  }
  tile.store(0, 0, [&](int64_t n, int64_t r, float v) {
    if (h0 + n < a.H && j0 + r < c.nc) score(n, r) = rows[r] ? __fmul_rn(v, a.scale) : -INFINITY;
  });
}

}  // namespace

gpuError_t scores_mma(const SparseAttnArgs& a, gpuStream_t s) {
  const dim3 grid(static_cast<unsigned>(a.rows), static_cast<unsigned>((a.max_cand + kMBN - 1) / kMBN),
                  static_cast<unsigned>((a.H + kMBM - 1) / kMBM));
  return a.mma_matrix ? launch(scores_mma_kernel<true>, grid, kMThreads, 0, s, a)
                      : launch(scores_mma_kernel<false>, grid, kMThreads, 0, s, a);
}

}  // namespace plumb::gpu::k::attn
