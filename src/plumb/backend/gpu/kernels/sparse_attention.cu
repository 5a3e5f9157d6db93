// Sparse attention with sink (MODEL-SPEC 3.6) over a query row's window positions and compressed
// entries, bitwise the CPU's (cpu_attention.cpp): q.k in cpu::dot's order (cpu_order.h), the
// softmax denominator summed in candidate order, P.V products and sums with __fmul_rn/__fadd_rn
// (no FMA contraction) in candidate order per output dim; with prob_block the release kernel's
// online softmax is replayed from the stored scores block by block (running block maxima first).
//
// Batches whose rows' candidates fit the P.V kernel's shared memory (sparse_attention_split())
// take the two-launch form of sparse_attention_split.cu instead, same values; this kernel serves
// the rest (long contexts without a selection) and PLUMB_GPU_ATTN=one-kernel.
// Shape (why): one block per (query row, group of G heads). The candidates are walked in tiles of
// kTile rows, staged in shared memory decoded to f32 by the whole block, and the G heads of the
// block share each staged row (V4 has one KV head for all its query heads). Two passes over the
// tiles: scores (8 lanes per (head, candidate) dot, as cpu_order_sum8), then P.V (each thread
// owns up to kMaxAcc (head, dim) outputs and keeps their sums in registers across tiles). A tile
// whose slots are all skipped (selection -1: most of a CSA row's 512 at short contexts) loads
// nothing. G = 2 once the launch has enough blocks without it (batches), 1 below, so a decode
// step of one token still spreads its 64 heads over 64 SMs. Neither G nor the tiling changes any
// sum's order. Measured (docs/PERF.md v6, B = 1, context 64): 111 us per SWA / HCA layer, as the
// one-walk-per-thread kernel it replaced (107), and 763 us for CSA before the empty-tile skip;
// B = 32 not isolated. The staging loop's per-value branch between f32 and encoded rows lets a
// batch's loads wait on one another; docs/perf/attn-branch-free.patch is a measured alternative
// that trades that for registers.
#include "plumb/backend/gpu/kernels/attention.h"
#include "plumb/backend/gpu/kernels/cpu_order.h"
#include "plumb/backend/gpu/kernels/sparse_attention_common.h"
#include "plumb/backend/gpu/kernels/launch.h"

namespace plumb::gpu::k {
namespace {
using namespace attn;

constexpr int kThreads = 256;
constexpr int kMaxWarps = kThreads / 32;  // kWarp is 32 or 64
constexpr int kTile = 16;            // candidate rows staged at a time
constexpr int kMaxGroup = 2;         // heads per block
constexpr int kMaxAcc = 4;           // P.V outputs per thread: G * Dh <= kMaxAcc * kThreads
constexpr int kStageLoads = 16;      // values a thread loads before it stores any (loads in flight)
static_assert(kTile % (64 / 8) == 0, "a warp's 8-lane groups all take part in a tile's dots");

// Dynamic shared memory floats before the scores: q [G][Dp], the tile [kTile][Dp].
PLUMB_HD int64_t staged_floats(int64_t G, int64_t Dh) { return (G + kTile) * padded_dim(Dh); }

// Static shared memory of the kernel (block maxima, reductions, the tile's row pointers, the
// heads' score pointers and denominators), with room for alignment.
constexpr std::size_t kStaticBytes = sizeof(float) * (kMaxGroup * kMaxProbBlocks + kMaxWarps) + sizeof(BlockedParts) +
                                     kTile * (sizeof(float*) + sizeof(uint8_t*)) +
                                     kMaxGroup * (sizeof(float*) + sizeof(float)) + 64;

// Every thread's (head, dim) outputs: o = threadIdx.x + u * blockDim.x < G * Dh.
struct PvSlots {
  int g[kMaxAcc];
  int d[kMaxAcc];
  bool live[kMaxAcc];
};

__device__ PvSlots pv_slots(int G, int64_t Dh) {
  PvSlots s;
#pragma unroll
  for (int u = 0; u < kMaxAcc; ++u) {
    const int64_t o = threadIdx.x + static_cast<int64_t>(u) * blockDim.x;
    s.live[u] = o < G * Dh;
    s.g[u] = s.live[u] ? static_cast<int>(o / Dh) : 0;
    s.d[u] = s.live[u] ? static_cast<int>(o % Dh) : 0;
  }
  return s;
}

// Stages candidates [j0, j0 + n) of the row: one thread per candidate finds its row (tf / te, both
// null for a skipped or invisible one, which `report` sends to a.err), then the block decodes the
// rows into tile [n][Dp], kStageLoads loads per thread in flight before their stores. Ends with a
// barrier: the tile is ready. Begins with one: the previous tile is no longer read. Returns
// whether any of the n candidates is live; when none is (selection slots past the visible
// entries, -1, at short contexts: most of a CSA row's 512), nothing is loaded.
__device__ bool stage_tile(const SparseAttnArgs& a, const RowCtx& c, int64_t j0, int n, bool report, float* tile,
                           const float** tf, const uint8_t** te) {
  __syncthreads();
  if (static_cast<int>(threadIdx.x) < n) {
    int64_t bad = -1;
    const Cand cj = candidate(a, c, j0 + threadIdx.x, report ? &bad : nullptr);
    tf[threadIdx.x] = cj.f;
    te[threadIdx.x] = cj.enc;
    report_invisible(a, c, bad);
  }
  const int me = threadIdx.x;
  if (!__syncthreads_or(me < n && (tf[me] || te[me]))) return false;  // (also the barrier after the pointers)
  const int Dh = static_cast<int>(a.Dh), Dp = static_cast<int>(padded_dim(a.Dh)), total = n * Dh;
  const int step = static_cast<int>(blockDim.x);
  for (int base = threadIdx.x; base < total; base += kStageLoads * step) {
    // value i = base + u * step is row t, dim d of the tile; (t, d) advance without a division
    const int t0 = base / Dh, d0 = base - t0 * Dh;
    float v[kStageLoads];
    int t = t0, d = d0;
#pragma unroll
    for (int u = 0; u < kStageLoads; ++u) {
      v[u] = 0.f;
      if (t < n) {
        if (tf[t]) v[u] = tf[t][d];
        else if (te[t]) v[u] = backend::kv_value(a.comp.spec, te[t], d);
      }
      for (d += step; d >= Dh; d -= Dh) ++t;
    }
    t = t0, d = d0;
#pragma unroll
    for (int u = 0; u < kStageLoads; ++u) {
      if (t < n) tile[t * Dp + d] = v[u];
      for (d += step; d >= Dh; d -= Dh) ++t;
    }
  }
  __syncthreads();
  return true;
}

// Pass 1: sc(g)[j] = scale * q_g . k_j for every candidate (-inf for a skipped one), each dot by a
// group of 8 lanes in exactly the CPU's order, so the scores (and the faithful bf16
// probabilities after them) are bitwise the CPU's.
template <class Scores>
__device__ void score_pass(const SparseAttnArgs& a, const RowCtx& c, int G, const float* qs, float* tile,
                           const float** tf, const uint8_t** te, const Scores& sc) {
  const int64_t Dh = a.Dh, Dp = padded_dim(Dh);
  const int grp = threadIdx.x / 8, sub = threadIdx.x % 8, groups = blockDim.x / 8;
  for (int64_t j0 = 0; j0 < c.nc; j0 += kTile) {
    const int n = c.nc - j0 < kTile ? static_cast<int>(c.nc - j0) : kTile;
    if (!stage_tile(a, c, j0, n, true, tile, tf, te)) {  // no live candidate: every score -inf
      for (int i = threadIdx.x; i < G * n; i += blockDim.x) sc(i / n)[j0 + i % n] = -INFINITY;
      continue;
    }
    // G * kTile pairs: a whole number of every warp's groups (static_assert), so the shuffles of
    // cpu_order_sum8 see full warps; pairs past n compute zeros and are dropped.
    for (int p = grp; p < G * kTile; p += groups) {
      const int g = p / kTile, t = p % kTile;
      const bool live = t < n && (tf[t] || te[t]);
      const float* q = qs + g * Dp;
      const float* k = tile + t * Dp;
      const float v = cpu_order_sum8([&](int64_t d) { return live ? __fmul_rn(q[d], k[d]) : 0.f; }, Dh, sub);
      if (sub == 0 && t < n) sc(g)[j0 + t] = live ? __fmul_rn(v, a.scale) : -INFINITY;
    }
  }
  __syncthreads();  // every score is written
}

// Pass 2: o = sum_j p_j v_j per (head, dim), candidate order; with prob_block (nb > 0) the
// release's online form: acc = acc * alpha_b + (sum over block b), block after block.
template <class Scores>
__device__ void pv_pass(const SparseAttnArgs& a, const RowCtx& c, int G, int64_t h0, int64_t nb, const float* l,
                        const float (*bmax)[kMaxProbBlocks], float* tile, const float** tf, const uint8_t** te,
                        const Scores& sc) {
  const int64_t Dh = a.Dh, Dp = padded_dim(Dh);
  const PvSlots s = pv_slots(G, Dh);
  PvSum o[kMaxAcc];
  int64_t b = 0, end = nb > 0 ? first_cand(a, c, 1) : c.nc;
  auto flush = [&] {  // block b is complete
#pragma unroll
    for (int u = 0; u < kMaxAcc; ++u) o[u].close_block(bmax[s.g[u]][b]);
    ++b;
    end = first_cand(a, c, b + 1);
  };
  for (int64_t j0 = 0; j0 < c.nc; j0 += kTile) {
    const int n = c.nc - j0 < kTile ? static_cast<int>(c.nc - j0) : kTile;
    stage_tile(a, c, j0, n, false, tile, tf, te);  // an empty tile loads nothing: its slots are skipped below
    for (int t = 0; t < n; ++t) {
      const int64_t j = j0 + t;
      if (nb > 0)
        while (j >= end) flush();
      if (!tf[t] && !te[t]) continue;
      const float* v = tile + t * Dp;
#pragma unroll
      for (int u = 0; u < kMaxAcc; ++u)
        if (s.live[u]) o[u].add(__fmul_rn(sc(s.g[u])[j], v[s.d[u]]), nb > 0);
    }
  }
  if (nb > 0)
    while (b < nb) flush();
#pragma unroll
  for (int u = 0; u < kMaxAcc; ++u)
    if (s.live[u]) {
      const float y = o[u].acc / l[s.g[u]];
      a.out[(c.row * a.H + h0 + s.g[u]) * Dh + s.d[u]] = a.round_out ? round_bf16(y) : y;
    }
}

__global__ void __launch_bounds__(kThreads) sparse_attention_kernel(SparseAttnArgs a) {
  pdl_begin();
  PLUMB_DYNAMIC_SHARED(float, smem);  // q [G][Dp], the tile [kTile][Dp], then the scores [G][max_cand] unless a.scratch
  __shared__ float red[kMaxWarps];
  __shared__ float bmax[kMaxGroup][kMaxProbBlocks];
  __shared__ BlockedParts parts;  // blocked_softmax's, one head at a time
  __shared__ const float* tf[kTile];
  __shared__ const uint8_t* te[kTile];
  __shared__ float* scp[kMaxGroup];  // each head's scores (shared or scratch memory)
  __shared__ float lsum[kMaxGroup];  // each head's softmax denominator
  const int G = static_cast<int>(a.heads_per_block);
  const int64_t groups = a.H / G, bg = a.row0 * groups + blockIdx.x, row = bg / groups, h0 = (bg % groups) * G;
  const int64_t Dh = a.Dh, Dp = padded_dim(Dh);
  if (a.row_seq[row] < 0) {  // a row no sequence covers: zeros, as the CPU leaves it
    for (int64_t i = threadIdx.x; i < G * Dh; i += blockDim.x) a.out[(row * a.H + h0) * Dh + i] = 0.f;
    return;
  }
  const RowCtx c = row_ctx(a, row);
  float* qs = smem;
  float* tile = smem + G * Dp;
  float* local = smem + staged_floats(G, Dh);
  if (static_cast<int>(threadIdx.x) < G)
    scp[threadIdx.x] = a.scratch ? a.scratch + ((row - a.row0) * a.H + h0 + threadIdx.x) * a.head_stride
                                 : local + threadIdx.x * a.max_cand;
  const auto sc = [](int g) { return scp[g]; };
  for (int64_t i = threadIdx.x; i < G * Dh; i += blockDim.x) qs[(i / Dh) * Dp + i % Dh] = a.q[(row * a.H + h0) * Dh + i];
  // (stage_tile's first barrier orders these stores, and scp's, before their first use)
  score_pass(a, c, G, qs, tile, tf, te, sc);

  const int64_t nb = prob_blocks(a, c);
  for (int g = 0; g < G; ++g) {
    const int64_t h = h0 + g;
    const float sink = weight_at(a.sink, h / a.sink.cols, h % a.sink.cols);
    const float l = nb > 0 ? blocked_softmax(a, c, sink, sc(g), bmax[g], nb, parts) : plain_softmax(a, c, sink, sc(g), red);
    if (threadIdx.x == 0) lsum[g] = l;  // every thread has the same l
  }
  // (pv_pass's first stage_tile barrier orders the probabilities and maxima before their use)
  pv_pass(a, c, G, h0, nb, lsum, bmax, tile, tf, te, sc);
}

}  // namespace

namespace {
// The most heads a block may take for head dim Dh (its P.V outputs fit the threads' kMaxAcc).
int64_t max_group(int64_t Dh) { return kMaxGroup * Dh <= static_cast<int64_t>(kMaxAcc) * kThreads ? kMaxGroup : 1; }
}  // namespace

int64_t sparse_attention_smem_cands(int64_t Dh) {
  if (Dh <= 0 || Dh > static_cast<int64_t>(kMaxAcc) * kThreads) return -1;
  const int64_t G = max_group(Dh);
  const int64_t free_floats = static_cast<int64_t>((kSmemBytes - kStaticBytes) / sizeof(float)) - staged_floats(G, Dh);
  return free_floats < 0 ? -1 : free_floats / G;
}

int64_t sparse_attention_max_prob_blocks() { return kMaxProbBlocks; }

gpuError_t sparse_attention(const SparseAttnArgs& a, gpuStream_t s) {
  if (a.split) return attn::split_attention(a, s);
  if (a.rows * a.H <= 0) return gpuGetLastError();
  SparseAttnArgs b = a;
  // Two heads per block once there are blocks enough without it (batches of rows); a decode
  // step of one token keeps one head per block so that its heads spread over the SMs.
  b.heads_per_block = max_group(a.Dh) == 2 && a.H % 2 == 0 && a.rows * a.H >= 1024 ? 2 : 1;
  const int64_t G = b.heads_per_block;
  const std::size_t smem = static_cast<std::size_t>(staged_floats(G, a.Dh) + (a.scratch ? 0 : G * a.max_cand)) * sizeof(float);
  return launch(sparse_attention_kernel, static_cast<unsigned>(a.rows * a.H / G), kThreads, smem, s, b);
}

}  // namespace plumb::gpu::k
