// The split sparse attention's P.V on the matrix unit (SparseAttnArgs::pv_mma; the fast order, for
// prefill chunks and decode batches of 16 rows and more). Per query row this is a dense product
// O[H x Dh] = P[H x nc] V[nc x Dh] (64 heads share one KV row set: MODEL-SPEC 3.6), which
// pv_kernel (sparse_attention_split.cu) sums one f32 product at a time in the CPU's order: 65 ms
// of a 4,096-token prefill's 3 layers (PERF.md v22).
// Here a block of kMThreads takes (query row, 64 output dims, 64 heads) and runs mma_tile.h's
// 64x64 tile with heads as its x rows, dims as its weight rows and candidates as k: per 32
// candidates it stages P (the softmax's e_j, bf16 already: bf16_probs) and V transposed into shared
// memory as bf16 tiles, V from f32 rows only (the window's, an f32 pool's, or the entries of an
// encoded pool, which the host has decode_attention_entries decode once a call: decoding them here
// at every read was most of this kernel's instructions, PERF.md v26). The release casts P to bf16
// and multiplies it by the bf16 cache; V is staged as hi + mid + lo, three bf16 values whose sum
// is the f32 value exactly (each the rounding of what the previous ones leave, 8 significant bits
// at most), and the k-tile runs once more for each part that is not zero anywhere in it
// (bf16-exact V, the faithful profile's, needs one run).
// So every product is exact; only the adder's order differs from the CPU's (the fast order's
// tolerance, GpuOps.SparseAttentionPvMmaWithinTheOrderFloor).
// The release's blocked softmax (prob_block) closes each block with acc = acc * exp(m - m_b) +
// part; here the accumulators are scaled by that factor before the block's products are added
// (mathematically the same; the part is not rounded separately).
#include <type_traits>

#include "plumb/backend/gpu/kernels/attention.h"
#include "plumb/backend/gpu/kernels/launch.h"
#include "plumb/backend/gpu/kernels/mma_tile.h"
#include "plumb/backend/gpu/kernels/sparse_attention_common.h"

namespace plumb::gpu::k::attn {
namespace {

constexpr int kParts = 3;  // hi, mid, lo
static_assert(kMBK % 2 == 0 && kMThreads % kMBN == 0, "V staging: a thread takes candidate pairs of one dim");

// The bf16 bits of v's parts: hi = bf16(v), mid = bf16(v - hi), lo = v - hi - mid (exact: v - hi
// has at most 16 significant bits, v - hi - mid at most 8). Returns whether mid or lo is nonzero.
__device__ __forceinline__ bool split_bf16(float v, uint32_t* bits) {
  const float hi = round_bf16(v), r = __fsub_rn(v, hi), mid = round_bf16(r), lo = __fsub_rn(r, mid);
  bits[0] = f32_bits(hi) >> 16;
  bits[1] = f32_bits(mid) >> 16;
  bits[2] = f32_bits(lo) >> 16;
  return mid != 0.f || lo != 0.f;
}

// A k-tile of candidates k0 .. k0 + kMBK - 1 (rows[kk]: candidate k0 + kk's f32 row, null for none)
// into the shared tiles: load_k_tile takes this thread's P (the heads' e_j) and V values into
// registers, store_k_tile writes P into ps and V's parts into vs and returns whether this thread's
// values had a nonzero mid or lo part. The kernel issues a k-tile's loads before the barrier that
// waits for the previous k-tile's steps (through generic pointers the compiler may not move a load
// past a store to shared memory: loads and stores interleaved were a round trip each, PERF.md v24).
// P: consecutive threads read consecutive candidates of a head's e_j (0 past the block, or
// skipped); V: a thread takes dim d of candidate pairs (kk, kk + 1), consecutive threads
// consecutive dims.
constexpr int kPLoads = kMBM * kMBK / kMThreads, kVPairs = kMBK / 2 / (kMThreads / kMBN);
struct KTileValues {
  float p[kPLoads], v[2 * kVPairs];
};

__device__ __forceinline__ void load_k_tile(const SparseAttnArgs& a, int64_t row, int64_t h0, int64_t d0, int64_t k0,
                                            const float* const* rows, KTileValues& x) {
  const int t = threadIdx.x;
#pragma unroll
  for (int u = 0; u < kPLoads; ++u) {
    const int i = t + u * kMThreads, n = i / kMBK, kk = i % kMBK;
    x.p[u] = h0 + n < a.H && rows[kk] ? head_scores(a, row, h0 + n)[k0 + kk] : 0.f;
  }
  const int d = t % kMBN, kk0 = 2 * (t / kMBN);
  auto value = [&](int kk) { return rows[kk] ? rows[kk][d0 + d] : 0.f; };
#pragma unroll
  for (int u = 0; u < kVPairs; ++u) {
    const int kk = kk0 + u * 2 * (kMThreads / kMBN);
    x.v[2 * u] = value(kk);
    x.v[2 * u + 1] = value(kk + 1);
  }
}

__device__ __forceinline__ bool store_k_tile(const KTileValues& x, BTile* ps, BTile (*vs)[kMBN]) {
  const int t = threadIdx.x;
#pragma unroll
  for (int u = 0; u < kPLoads; ++u) {
    const int i = t + u * kMThreads;
    ps[i / kMBK][i % kMBK] = static_cast<uint16_t>(f32_bits(x.p[u]) >> 16);  // bf16 already (bf16_probs)
  }
  const int d = t % kMBN, kk0 = 2 * (t / kMBN);
  bool inexact = false;
#pragma unroll
  for (int u = 0; u < kVPairs; ++u) {
    const int kk = kk0 + u * 2 * (kMThreads / kMBN);
    uint32_t first[kParts], second[kParts];
    inexact |= split_bf16(x.v[2 * u], first);
    inexact |= split_bf16(x.v[2 * u + 1], second);
#pragma unroll
    for (int p = 0; p < kParts; ++p) *reinterpret_cast<uint32_t*>(&vs[p][d][kk]) = first[p] | second[p] << 16;
  }
  return inexact;
}

// grid (rows, Dh / kMBN, ceil(H / kMBM)), kMThreads threads; 3 blocks a multiprocessor (ptxas, sm_90a:
// 168 registers and 28-48 bytes of spills, against 189 registers and 2 blocks unbounded: PERF.md v31).
template <bool kMatrix>
__global__ void __launch_bounds__(kMThreads, 3) pv_mma_kernel(SparseAttnArgs a) {
  pdl_begin();
  using Tile = std::conditional_t<kMatrix, MatrixTile, SimtTile>;
  __shared__ __align__(16) BTile ps[kMBM];          // P [head][candidate]
  __shared__ __align__(16) BTile vs[kParts][kMBN];  // V's parts [dim][candidate]
  __shared__ const float* rows[2][kMBK];  // two k-tiles' candidates (null: skipped): this one's, the next's
  __shared__ float rs[kMBM];  // a head's rescale factor, then its denominator
  const int t = threadIdx.x;
  const int64_t row = a.row0 + blockIdx.x, d0 = static_cast<int64_t>(blockIdx.y) * kMBN,
                h0 = static_cast<int64_t>(blockIdx.z) * kMBM;
  auto out = [&](int64_t n, int64_t r) -> float& { return a.out[(row * a.H + h0 + n) * a.Dh + d0 + r]; };
  if (a.row_seq[row] < 0) {  // a row no sequence covers: zeros, as the CPU leaves it
    for (int i = t; i < kMBM * kMBN; i += kMThreads)
      if (h0 + i / kMBN < a.H) out(i / kMBN, i % kMBN) = 0.f;
    return;
  }
  const RowCtx c = row_ctx(a, row);
  const int64_t nb = prob_blocks(a, c), nblk = nb > 0 ? nb : 1;
  // The k-tiles in order: candidates [k0, min(k0 + kMBK, block_hi(b))) of softmax block b, empty
  // blocks skipped (b = nblk past the last tile).
  auto block_hi = [&](int64_t b) { return nb > 0 ? first_cand(a, c, b + 1) : c.nc; };
  auto settle = [&](int64_t& b, int64_t& k0) {
    while (b < nblk && k0 >= block_hi(b))
      if (++b < nblk) k0 = first_cand(a, c, b);
  };
  auto look_up = [&](int64_t b, int64_t k0, const float** dst) {
    if (b < nblk && t < kMBK)  // (f32 rows only: the host decodes an encoded pool's entries first;
                               // the scores kernel reported invisible ones)
      dst[t] = k0 + t < block_hi(b) ? candidate(a, c, k0 + t, nullptr).f : nullptr;
  };
  // The blocked form: when block b's products come, the running max moves from block b - 1's to
  // block b's (every block in order, empty ones too, as the CPU's loop does).
  Tile tile(t);
  int64_t scaled = 0;  // the last block whose factor the accumulators have had
  auto rescale_to = [&](int64_t b) {
    for (; scaled < b; ++scaled) {
      __syncthreads();  // (every thread has scaled by the previous factor)
      if (t < kMBM) {
        const int64_t h = h0 + t;
        const float* bmax = h < a.H ? softmax_tail(a, row, h).bmax : nullptr;
        rs[t] = bmax ? exp_cr(bmax[scaled] - bmax[scaled + 1]) : 1.f;
      }
      __syncthreads();
      tile.scale_rows(rs);
    }
  };
  int64_t b = 0, k0 = 0;
  settle(b, k0);
  int buf = 0;
  look_up(b, k0, rows[0]);
  __syncthreads();
  while (b < nblk) {
    rescale_to(b);
    KTileValues x;
    load_k_tile(a, row, h0, d0, k0, rows[buf], x);
    int64_t next_b = b, next_k0 = k0 + kMBK;
    settle(next_b, next_k0);
    look_up(next_b, next_k0, rows[buf ^ 1]);  // (read in the k-tile before this one's, behind its barriers)
    __syncthreads();  // the previous k-tile's steps are done with the tiles
    const bool parts = __syncthreads_or(store_k_tile(x, ps, vs));  // (and the next candidates are in)
    tile.step(ps, vs[0]);
    if (parts) {
      tile.step(ps, vs[1]);
      tile.step(ps, vs[2]);
    }
    b = next_b, k0 = next_k0, buf ^= 1;
  }
  rescale_to(nblk - 1);
  __syncthreads();  // (every thread has scaled by the last block's rs)
  if (t < kMBM) rs[t] = h0 + t < a.H ? *softmax_tail(a, row, h0 + t).l : 1.f;
  __syncthreads();
  tile.store(0, 0, [&](int64_t n, int64_t r, float v) {
    if (h0 + n >= a.H) return;
    const float y = v / rs[n];
    out(n, r) = a.round_out ? round_bf16(y) : y;
  });
}

}  // namespace

gpuError_t pv_mma(const SparseAttnArgs& a, gpuStream_t s) {
  const dim3 grid(static_cast<unsigned>(a.rows), static_cast<unsigned>(a.Dh / kMBN),
                  static_cast<unsigned>((a.H + kMBM - 1) / kMBM));
  return a.mma_matrix ? launch(pv_mma_kernel<true>, grid, kMThreads, 0, s, a)
                      : launch(pv_mma_kernel<false>, grid, kMThreads, 0, s, a);
}

}  // namespace plumb::gpu::k::attn

namespace plumb::gpu::k {
bool sparse_attention_mma(int64_t Dh) { return Dh > 0 && Dh % kMBN == 0; }
}  // namespace plumb::gpu::k
