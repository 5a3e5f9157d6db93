// Sparse attention in three launches, for every batch size (decode and prefill), bitwise the CPU's
// like sparse_attention.cu (same candidates, same dot order, the same softmax functions, P.V
// summed in candidate order per output):
//   1. scores: one block per (query row, 1 or 4 tiles of 8 candidates, 8 heads). The block stages
//      the 8 heads' q once and, tile by tile, the 8 candidate rows (decoded to f32); each 8-lane
//      group computes 2 of a tile's 64 (head, candidate) dots as cpu_order_sum8 does; scores go
//      to the host's scratch. A tile whose candidates are all skipped selection slots only writes
//      -inf. (Prefill chunks in the fast order: the matrix unit's, sparse_attention_scores_mma.cu.)
//   2. softmax: one block per (query row, head), in place in the scratch, with the block maxima
//      and the denominator written beside the scores.
//   3. P.V: one block per (query row, 1-8 heads, 256 output dims). It lists the live candidates
//      (not a skipped selection slot) in candidate order with their row pointers and each head's
//      e_j, and each thread sums p_j v_j[d] over the live candidates in order for its own d and
//      every head, decoding v_j[d] once, 16 rows' loads issued before their sums. A skipped slot's
//      e is +0 and adds nothing, so walking the live list gives bitwise the walk over every slot.
// Why: the one-kernel form spends a block per head (G = 1 at decode) that walks every candidate
// with 256 threads for one dot at a time: at B = 1 its 64 blocks left half the SMs idle and each
// re-staged the same KV rows (ncu, docs/PERF.md v7: 109 us per SWA layer for 65 candidates, 307
// us for CSA, 12% issue-slot use). Here a staged KV row serves 8 heads in the scores, a decoded
// KV element up to 8 heads in P.V (one KV row serves all 64 heads; PERF.md v16), and the
// launches have rows x candidates / 8 x H / 8, rows x H and rows x H / HG x Dh / 256 blocks.
// The live list: a CSA row has 512 selection slots, most of them -1 at short contexts (16 entries
// exist at position 64), and a P.V thread that walked all 577 slots spent 175 us of the layer's
// 194 (ncu, PERF.md v7).
// Prefill too (PERF.md v8): the one-kernel form's block per (row, 2 heads) re-stages every
// candidate row for 2 heads only, 315 ms per layer for 4,096 rows (ncu, 2026-12-03); it now
// serves only rows whose candidates overflow the P.V kernel's shared memory.
#include <algorithm>

#include "plumb/backend/gpu/kernels/attention.h"
#include "plumb/backend/gpu/kernels/cpu_order.h"
#include "plumb/backend/gpu/kernels/sparse_attention_common.h"
#include "plumb/backend/gpu/kernels/launch.h"

namespace plumb::gpu::k {
namespace attn {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;  // kWarp is 32 or 64: room for either
constexpr int kCands = 8;              // candidates per scores tile
constexpr int kScoresSpan = 4;         // tiles a scores block takes when there are plenty of blocks:
constexpr int64_t kScoresSpanFrom = 4096;  // from this many one-tile blocks (~31 a multiprocessor)
constexpr int kHeads = 8;              // heads per scores block
constexpr int kDims = kThreads;        // output dims per P.V block
// Candidate rows whose values a thread loads before summing: a P.V walk is a chain of these
// batches' DRAM round trips (B = 1: one block per head and 256 dims; PERF.md v19: ~32 us a
// layer), so 16, not 8, halves them (PERF.md v21; ptxas: <= 128 registers, <= 28 bytes spilled).
constexpr int kPvLoads = 16;
static_assert(kHeads * kCands == 2 * (kThreads / 8), "every 8-lane group computes two dots");

// Scores kernel shared memory: q [kHeads][Dp] and the candidates [kCands][Dp].
std::size_t scores_smem(int64_t Dh) { return static_cast<std::size_t>((kHeads + kCands) * padded_dim(Dh)) * sizeof(float); }

// P.V kernel shared memory per candidate: its row pointer, each of the block's heads' e_j and its
// live-list entry (its index, and kEncodedRow when the pointer is an encoded pool row); and the
// static part.
constexpr int kMaxPvHeads = 8;
constexpr int64_t kMinPvBlocks = 256;  // about two blocks a multiprocessor on an H200 (132)
constexpr std::size_t kPvStaticBytes = sizeof(int) * (kMaxProbBlocks + kWarps) + 64;
constexpr std::size_t pv_smem_bytes(int64_t max_cand, int heads) {
  return static_cast<std::size_t>(max_cand) * (sizeof(const void*) + heads * sizeof(float) + sizeof(uint16_t)) +
         kPvStaticBytes;
}
constexpr uint16_t kEncodedRow = 0x8000, kCandIndex = 0x7fff;
static_assert(kSmemBytes / pv_smem_bytes(1, 1) <= kCandIndex, "a candidate index fits a live-list entry");
constexpr int kSoftmaxThreads = 64;  // one head's softmax: a wavefront of 64, two warps of 32
// The most candidates whose scores a softmax block stages in shared memory (beside block_max's
// floats): the rest of what a kernel may use without an opt-in.
constexpr int64_t kSoftmaxStagedMax =
    (kSmemBytes - (kSoftmaxThreads / 32) * sizeof(float) - sizeof(BlockedParts)) / sizeof(float);

// Both scores kernels' tile step: after a barrier (the previous tile's dots are done with tf, te
// and the staged rows), candidates j0 .. j0 + n - 1 of the row into tf / te (shared), the first
// invisible one reported. When every one is a skipped slot, the block's nh heads from h0 get -inf
// scores and the answer is false (block-uniform: the tile is done).
__device__ bool list_tile(const SparseAttnArgs& a, const RowCtx& c, int64_t row, int64_t j0, int n, int64_t h0, int nh,
                          const float** tf, const uint8_t** te) {
  const int me = threadIdx.x;
  __syncthreads();
  if (me < n) {
    int64_t bad = -1;
    const Cand cj = candidate(a, c, j0 + me, &bad);
    tf[me] = cj.f;
    te[me] = cj.enc;
    report_invisible(a, c, bad);
  }
  if (__syncthreads_or(me < n && (tf[me] || te[me]))) return true;
  for (int i = me; i < nh * n; i += blockDim.x) head_scores(a, row, h0 + i / n)[j0 + i % n] = -INFINITY;
  return false;
}

// Value d of a listed candidate's row (0 for a skipped slot, whose dots are not kept).
__device__ float tile_value(const SparseAttnArgs& a, const float* f, const uint8_t* e, int d) {
  return f ? f[d] : (e ? backend::kv_value(a.comp.spec, e, d) : 0.f);
}

// grid (rows * ceil(tiles / per_block), ceil(H / kHeads)); tiles = ceil(max_cand / kCands). A
// block takes per_block consecutive tiles of its row, one after another, and stages its heads'
// q once for all of them (per_block 1 at small batches, where more blocks fill the device; 4 at
// large ones, where re-staging q for every 8 candidates was half of every block's staging).
__global__ void __launch_bounds__(kThreads) scores_kernel(SparseAttnArgs a, int64_t tiles, int per_block) {
  pdl_begin();
  PLUMB_DYNAMIC_SHARED(float, smem);  // q [kHeads][Dp], then the candidates [kCands][Dp]
  __shared__ const float* tf[kCands];
  __shared__ const uint8_t* te[kCands];
  const int64_t spans = (tiles + per_block - 1) / per_block;
  const int64_t row = a.row0 + blockIdx.x / spans, tile0 = blockIdx.x % spans * per_block, h0 = blockIdx.y * kHeads;
  if (a.row_seq[row] < 0) return;  // the P.V kernel writes this row's zeros
  const RowCtx c = row_ctx(a, row);
  const int nh = a.H - h0 < kHeads ? static_cast<int>(a.H - h0) : kHeads;
  const int me = threadIdx.x;
  const int Dh = static_cast<int>(a.Dh), Dp = static_cast<int>(padded_dim(a.Dh));
  float* qs = smem;
  float* ks = smem + kHeads * Dp;
  bool q_staged = false;  // (block-uniform, as every branch below)
  for (int64_t tile = tile0; tile < tile0 + per_block && tile < tiles; ++tile) {
    const int64_t j0 = tile * kCands;
    if (j0 >= c.nc) return;
    const int n = c.nc - j0 < kCands ? static_cast<int>(c.nc - j0) : kCands;
    if (!list_tile(a, c, row, j0, n, h0, nh, tf, te)) continue;
    if (!q_staged)
      for (int i = me; i < nh * Dh; i += kThreads) qs[(i / Dh) * Dp + i % Dh] = a.q[(row * a.H + h0) * Dh + i];
    q_staged = true;
    for (int i = me; i < n * Dh; i += kThreads) {
      const int t = i / Dh, d = i % Dh;
      ks[t * Dp + d] = tile_value(a, tf[t], te[t], d);
    }
    __syncthreads();
    const int grp = me / 8, sub = me % 8;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int p = grp + i * (kThreads / 8), g = p / kCands, t = p % kCands;
      const bool live = g < nh && t < n && (tf[t] || te[t]);
      const float* q = qs + g * Dp;
      const float* k = ks + t * Dp;
      const float v = cpu_order_sum8([&](int64_t d) { return live ? __fmul_rn(q[d], k[d]) : 0.f; }, Dh, sub);
      if (sub == 0 && g < nh && t < n) head_scores(a, row, h0 + g)[j0 + t] = live ? __fmul_rn(v, a.scale) : -INFINITY;
    }
  }
}

// The scores of many query rows (a prefill chunk: from kRowsScoresFrom rows): a block holds 32
// heads' q in registers, the 8 lanes of a head's group each the dims d = sub + 8 i of cpu_order_sum8's
// lane (kPer = Dh / 8 of them), and walks per_block tiles of the row's candidates, each staged once
// in shared memory for its 32 heads with a lane's dims contiguous ([t][sub][i], rows of kPer + 4
// floats: a group's 16-byte reads hit 32 banks, the warp's other groups read the same bytes). A
// lane forms its partial sum in d order, one __fadd_rn(__fmul_rn) a term, and the group combines
// the partials with cpu_order_sum8's shuffles: the same bits. The tile form stages q for 8 heads in
// shared memory and reads both operands there, two loads a product, each candidate row decoded for
// every 8 heads: 106 of a 4,096-token prefill's 590 ms of kernels (ncu, PERF.md v22).
constexpr int kRowHeads = kThreads / 8;       // heads a row-scores block takes: one 8-lane group each
constexpr int64_t kRowsScoresFrom = 128;      // query rows from which the row form scores (prefill chunks)
constexpr int64_t kRowScoresTargetBlocks = 1024;  // rows x head blocks x spans that keep the device busy

// grid (rows * spans, ceil(H / kRowHeads)); spans = ceil(tiles / per_block).
template <int kPer>
__global__ void __launch_bounds__(kThreads, 2) scores_rows_kernel(SparseAttnArgs a, int64_t tiles, int64_t per_block) {
  pdl_begin();
  PLUMB_DYNAMIC_SHARED(float, ks);  // the tile's candidates, dim d of candidate t at [t][d % 8][d / 8]
  __shared__ const float* tf[kCands];
  __shared__ const uint8_t* te[kCands];
  constexpr int kLd = kPer + 4;
  const int64_t spans = (tiles + per_block - 1) / per_block;
  const int64_t row = a.row0 + blockIdx.x / spans, tile0 = blockIdx.x % spans * per_block;
  if (a.row_seq[row] < 0) return;  // the P.V kernel writes this row's zeros
  const RowCtx c = row_ctx(a, row);
  const int me = threadIdx.x, sub = me % 8;
  const int64_t h0 = static_cast<int64_t>(blockIdx.y) * kRowHeads, h = h0 + me / 8;
  const int nh = a.H - h0 < kRowHeads ? static_cast<int>(a.H - h0) : kRowHeads;
  const int Dh = kPer * 8;
  float qr[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) qr[i] = h < a.H ? a.q[(row * a.H + h) * Dh + sub + 8 * i] : 0.f;
  for (int64_t tile = tile0; tile < tile0 + per_block && tile < tiles; ++tile) {
    const int64_t j0 = tile * kCands;
    if (j0 >= c.nc) return;
    const int n = c.nc - j0 < kCands ? static_cast<int>(c.nc - j0) : kCands;
    if (!list_tile(a, c, row, j0, n, h0, nh, tf, te)) continue;
    for (int i = me; i < n * Dh; i += kThreads) {
      const int t = i / Dh, d = i % Dh;
      ks[(t * 8 + d % 8) * kLd + d / 8] = tile_value(a, tf[t], te[t], d);
    }
    __syncthreads();
    for (int t = 0; t < n; ++t) {
      const float* kr = ks + (t * 8 + sub) * kLd;
      float p = 0.f;
#pragma unroll
      for (int i = 0; i < kPer; i += 4) {
        const float4 k4 = *reinterpret_cast<const float4*>(kr + i);
        p = __fadd_rn(p, __fmul_rn(qr[i], k4.x));
        p = __fadd_rn(p, __fmul_rn(qr[i + 1], k4.y));
        p = __fadd_rn(p, __fmul_rn(qr[i + 2], k4.z));
        p = __fadd_rn(p, __fmul_rn(qr[i + 3], k4.w));
      }
      p = __fadd_rn(p, shfl_xor(p, 4));  // cpu_order_sum8's combine
      p = __fadd_rn(p, shfl_xor(p, 1));
      p = __fadd_rn(p, shfl_xor(p, 2));
      if (sub == 0 && h < a.H) head_scores(a, row, h)[j0 + t] = tf[t] || te[t] ? __fmul_rn(p, a.scale) : -INFINITY;
    }
  }
}

// The row form's instance for a head size (Dh = 8 kPer), null where there is none.
using RowScoresKernel = void (*)(SparseAttnArgs, int64_t, int64_t);
RowScoresKernel row_scores_kernel(int64_t Dh) {
  switch (Dh) {
    case 512: return scores_rows_kernel<64>;  // V4
    case 192: return scores_rows_kernel<24>;  // (the tests' small heads)
    case 64: return scores_rows_kernel<8>;
    default: return nullptr;
  }
}
std::size_t row_scores_smem(int64_t Dh) { return static_cast<std::size_t>(kCands) * 8 * (Dh / 8 + 4) * sizeof(float); }

// grid (rows * H), kSoftmaxThreads: one head of one row. The CPU's softmax of the head's scores in
// place (sparse_attention_common.h: the plain or the release's blocked form), then the softmax's
// results for the P.V launch beside them in the head's scratch: the block maxima and the
// denominator (SoftmaxTail). The denominators sum every slot: a skipped slot's score is -inf, its
// e = exp_cr(-inf - m) = +0 (the running max is finite: the window's candidates come first), and
// adding +0 to a sum of non-negative terms leaves its bits, so this is the live-only sum's result.
// Up to kSoftmaxStagedMax candidates (the launch's max_cand floats of dynamic shared memory), the
// serial loops read a copy of the head's scores there (blocked_softmax's es).
__global__ void __launch_bounds__(kSoftmaxThreads) softmax_kernel(SparseAttnArgs a) {
  pdl_begin();
  __shared__ float red[kSoftmaxThreads / 32];  // block_max: a float a warp (32 or 64 lanes)
  __shared__ BlockedParts parts;
  PLUMB_DYNAMIC_SHARED(float, es);
  const int64_t row = a.row0 + blockIdx.x / a.H, h = blockIdx.x % a.H;
  if (a.row_seq[row] < 0) return;
  const RowCtx c = row_ctx(a, row);
  float* sc = head_scores(a, row, h);
  const SoftmaxTail t = softmax_tail(a, row, h);
  const int64_t nb = prob_blocks(a, c);
  const float sink = weight_at(a.sink, h / a.sink.cols, h % a.sink.cols);
  float* e = a.max_cand <= kSoftmaxStagedMax ? es : nullptr;
  const float l = nb > 0 ? blocked_softmax(a, c, sink, sc, t.bmax, nb, parts, e) : plain_softmax(a, c, sink, sc, red, e);
  if (threadIdx.x == 0) *t.l = l;
}

// grid (rows * H / HG, ceil(Dh / kDims)): HG heads of one row, kDims output dims. The block lists
// the row's live candidates (not a skipped selection slot) in candidate order, with each head's
// e_j beside them; then each thread walks the list once for its d: it decodes v_j[d] once and adds
// e_j v_j[d] to each head's sum. With blocks (the release's form) each head's sum is closed at
// every block end with that head's running max, as sparse_attention.cu's pv_pass. Every head's
// sum has the additions, closes and final division of the walk over every slot, in the same
// order: bitwise the CPU's. (The closes sit between the walks of whole blocks, not in the per-row
// loop: one copy of their exp_cr per head instead of one per unrolled row, PERF v15's lesson.)
template <int HG>
__global__ void __launch_bounds__(kThreads) pv_kernel(SparseAttnArgs a) {
  pdl_begin();
  PLUMB_DYNAMIC_SHARED(float4, pv_smem);  // the live rows [max_cand], e [HG][max_cand], lv [max_cand]
  __shared__ int lend[kMaxProbBlocks];  // softmax block b's live candidates end before list entry lend[b]
  __shared__ int wlive[kWarps];
  const int64_t groups = a.H / HG;
  const int64_t row = a.row0 + blockIdx.x / groups, h0 = blockIdx.x % groups * HG;
  const int64_t d = static_cast<int64_t>(blockIdx.y) * kDims + threadIdx.x;
  float* out = a.out + (row * a.H + h0) * a.Dh + d;
  if (a.row_seq[row] < 0) {  // a row no sequence covers: zeros, as the CPU leaves it
    if (d < a.Dh)
      for (int h = 0; h < HG; ++h) out[h * a.Dh] = 0.f;
    return;
  }
  const RowCtx c = row_ctx(a, row);
  const void** rows = reinterpret_cast<const void**>(pv_smem);
  float* pe = reinterpret_cast<float*>(rows + a.max_cand);
  uint16_t* lv = reinterpret_cast<uint16_t*>(pe + HG * a.max_cand);
  // The live candidates in order: rows[i] and lv[i] for i < nlive. kThreads candidates a round
  // (every thread takes every round: barriers); a live one's place is the live lanes up to it in
  // its warp (an inclusive count by shuffles, exact in f32) plus those of the warps before.
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  int nlive = 0;
  for (int64_t j0 = 0; j0 < c.nc; j0 += kThreads) {
    const int64_t j = j0 + threadIdx.x;
    Cand cj;
    if (j < c.nc) cj = candidate(a, c, j, nullptr);  // (the scores kernel reported invisible ones)
    const bool live = cj.f || cj.enc;
    float n = live ? 1.f : 0.f;
#pragma unroll
    for (int o = 1; o < kWarp; o *= 2) {
      const float x = shfl_from(n, lane >= o ? lane - o : lane);
      if (lane >= o) n += x;
    }
    if (lane == kWarp - 1) wlive[warp] = static_cast<int>(n);
    __syncthreads();
    int at = nlive + static_cast<int>(n) - 1;
#pragma unroll
    for (int w = 0; w < kThreads / kWarp; ++w) {
      if (w < warp) at += wlive[w];
      nlive += wlive[w];
    }
    if (live) {
      rows[at] = cj.f ? static_cast<const void*>(cj.f) : static_cast<const void*>(cj.enc);
      lv[at] = static_cast<uint16_t>(j | (cj.f ? 0 : kEncodedRow));
    }
    __syncthreads();  // wlive is rewritten next round; after the last, every candidate is listed
  }
  const int nb = static_cast<int>(prob_blocks(a, c));
  for (int i = threadIdx.x; i < HG * nlive; i += kThreads) {
    const int h = i / nlive, k = i % nlive;
    pe[h * a.max_cand + k] = head_scores(a, row, h0 + h)[lv[k] & kCandIndex];
  }
  // Softmax block b's live candidates are list entries [lend[b - 1], lend[b]) (lend[-1] = 0): the
  // first entry at or past the block's end, by bisection (the list is in candidate order).
  for (int b = threadIdx.x; b < nb; b += kThreads) {
    const int64_t end = first_cand(a, c, b + 1);
    int lo = 0, hi = nlive;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if ((lv[mid] & kCandIndex) < end) lo = mid + 1;
      else hi = mid;
    }
    lend[b] = lo;
  }
  __syncthreads();
  if (d >= a.Dh) return;  // (after the barriers)
  // Block after block (one block of every live candidate in the plain form): its candidates' p v
  // added to each head's sum, kPvLoads rows' loads issued before their sums, then (blocked form)
  // each head's sum closed with its running max; an empty block is still closed.
  PvSum o[HG];
  auto value = [&](int i) {
    return (lv[i] & kEncodedRow) ? backend::kv_value(a.comp.spec, static_cast<const uint8_t*>(rows[i]), d)
                                 : static_cast<const float*>(rows[i])[d];
  };
  auto add = [&](int i, float v) {
#pragma unroll
    for (int h = 0; h < HG; ++h) o[h].add(__fmul_rn(pe[h * a.max_cand + i], v), nb > 0);
  };
  int i = 0;
  for (int b = 0; b < (nb > 0 ? nb : 1); ++b) {
    const int i_end = nb > 0 ? lend[b] : nlive;
    for (; i + kPvLoads <= i_end; i += kPvLoads) {
      float v[kPvLoads];
#pragma unroll
      for (int u = 0; u < kPvLoads; ++u) v[u] = value(i + u);
#pragma unroll
      for (int u = 0; u < kPvLoads; ++u) add(i + u, v[u]);
    }
    for (; i < i_end; ++i) add(i, value(i));
    if (nb > 0) {
#pragma unroll
      for (int h = 0; h < HG; ++h) o[h].close_block(softmax_tail(a, row, h0 + h).bmax[b]);
    }
  }
#pragma unroll
  for (int h = 0; h < HG; ++h) {
    const float y = o[h].acc / *softmax_tail(a, row, h0 + h).l;
    out[h * a.Dh] = a.round_out ? round_bf16(y) : y;
  }
}

// Heads per P.V block: the most (up to a.pv_heads when set) that divide H and whose shared memory
// fits (1 always does: split_attention's condition). More heads a block decode each KV row once
// for more of them; fewer blocks fill the SMs less, so by default a block takes HG heads only
// while the launch keeps kMinPvBlocks blocks.
int pv_heads(const SparseAttnArgs& a) {
  const int64_t dim_blocks = (a.Dh + kDims - 1) / kDims;
  int hg = 1;
  for (int g = 2; g <= kMaxPvHeads; g *= 2) {
    const bool wanted = a.pv_heads > 0 ? g <= a.pv_heads : a.rows * a.H / g * dim_blocks >= kMinPvBlocks;
    if (wanted && a.H % g == 0 && pv_smem_bytes(a.max_cand, g) <= kSmemBytes) hg = g;
  }
  return hg;
}

template <int HG>
gpuError_t launch_pv(const SparseAttnArgs& a, gpuStream_t s) {
  const dim3 grid(static_cast<unsigned>(a.rows * a.H / HG), static_cast<unsigned>((a.Dh + kDims - 1) / kDims));
  return launch(pv_kernel<HG>, grid, kThreads, pv_smem_bytes(a.max_cand, HG) - kPvStaticBytes, s, a);
}

}  // namespace

gpuError_t split_attention(const SparseAttnArgs& a, gpuStream_t s) {
  if (a.rows * a.H == 0) return gpuGetLastError();
  const int64_t tiles = (a.max_cand + kCands - 1) / kCands, head_blocks = (a.H + kHeads - 1) / kHeads;
  gpuError_t e;
  if (a.scores_mma) {
    e = scores_mma(a, s);
  } else if (const RowScoresKernel rk = a.rows >= kRowsScoresFrom ? row_scores_kernel(a.Dh) : nullptr) {
    const int64_t row_heads = (a.H + kRowHeads - 1) / kRowHeads;
    const int64_t spans = std::clamp<int64_t>(kRowScoresTargetBlocks / (a.rows * row_heads), 1, tiles);
    const int64_t per_block = (tiles + spans - 1) / spans;
    const dim3 grid(static_cast<unsigned>(a.rows * ((tiles + per_block - 1) / per_block)), static_cast<unsigned>(row_heads));
    e = launch(rk, grid, kThreads, row_scores_smem(a.Dh), s, a, tiles, per_block);
  } else {
    const int per_block = a.scores_span > 0 ? static_cast<int>(std::min<int64_t>(a.scores_span, kScoresSpan))
                          : a.rows * tiles * head_blocks >= kScoresSpanFrom ? kScoresSpan : 1;
    const dim3 sgrid(static_cast<unsigned>(a.rows * ((tiles + per_block - 1) / per_block)),
                     static_cast<unsigned>(head_blocks));
    e = launch(scores_kernel, sgrid, kThreads, scores_smem(a.Dh), s, a, tiles, per_block);
  }
  if (e == gpuSuccess)
    e = launch(softmax_kernel, static_cast<unsigned>(a.rows * a.H), kSoftmaxThreads,
               a.max_cand <= kSoftmaxStagedMax ? static_cast<size_t>(a.max_cand) * sizeof(float) : 0, s, a);
  if (e != gpuSuccess) return e;
  if (a.pv_mma) return pv_mma(a, s);
  switch (pv_heads(a)) {
    case 8: return launch_pv<8>(a, s);
    case 4: return launch_pv<4>(a, s);
    case 2: return launch_pv<2>(a, s);
    default: return launch_pv<1>(a, s);
  }
}

}  // namespace attn

bool sparse_attention_split(int64_t Dh, int64_t max_cand) {
  using namespace attn;
  return Dh > 0 && scores_smem(Dh) <= kSmemBytes && pv_smem_bytes(max_cand, 1) <= kSmemBytes;
}

}  // namespace plumb::gpu::k
