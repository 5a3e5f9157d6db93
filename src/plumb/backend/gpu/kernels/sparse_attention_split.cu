// Sparse attention in two launches, for every batch size (decode and prefill), bitwise the CPU's like
// sparse_attention.cu (same candidates, same dot order, the same softmax functions, P.V summed in
// candidate order per output):
//   1. scores: one block per (query row, 8 candidates, 8 heads). The block stages the 8 candidate
//      rows (decoded to f32) and the 8 heads' q once, then each 8-lane group computes 2 of the 64
//      (head, candidate) dots as cpu_order_sum8 does; scores go to the host's scratch. A block
//      whose candidates are all skipped selection slots only writes -inf.
//   2. softmax and P.V: one block per (query row, head, 256 output dims). It copies the head's
//      scores and the candidates' row pointers into shared memory with the list of the live
//      candidates (not a skipped selection slot) in candidate order, runs the plain or the
//      release's blocked softmax (every thread gets the denominator, summed over the live list),
//      and each thread sums p_j v_j[d] over the live candidates in order for its own d, 8 rows'
//      loads issued before their sums. A skipped slot's score is -inf: its e = +0 adds nothing
//      to any sum, so walking the live list gives bitwise the walk over every slot.
// Why: the one-kernel form spends a block per head (G = 1 at decode) that walks every candidate
// with 256 threads for one dot at a time: at B = 1 its 64 blocks left half the SMs idle and each
// re-staged the same KV rows (ncu, docs/PERF.md v7: 109 us per SWA layer for 65 candidates, 307
// us for CSA, 12% issue-slot use). Here a staged KV row serves 8 heads, and the launches have
// rows x candidates / 8 x H / 8 and rows x H x Dh / 256 blocks. The live list: a CSA row has 512
// selection slots, most of them -1 at short contexts (16 entries exist at position 64), and a
// P.V thread that walked all 577 slots spent 175 us of the layer's 194 (ncu, PERF.md v7).
// Prefill too (PERF.md v8): the one-kernel form's block per (row, 2 heads) re-stages every
// candidate row for 2 heads only, 315 ms per layer for 4,096 rows (ncu, 2026-12-03); it now
// serves only rows whose candidates overflow the P.V kernel's shared memory.
#include "plumb/backend/gpu/kernels/attention.h"
#include "plumb/backend/gpu/kernels/cpu_order.h"
#include "plumb/backend/gpu/kernels/sparse_attention_common.h"
#include "plumb/backend/gpu/kernels/launch.h"

namespace plumb::gpu::k {
namespace attn {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;  // kWarp is 32 or 64: room for either
constexpr int kCands = 8;              // candidates per scores block
constexpr int kHeads = 8;              // heads per scores block
constexpr int kDims = kThreads;        // output dims per P.V block
constexpr int kPvLoads = 8;            // candidate rows whose values a thread loads before summing
static_assert(kHeads * kCands == 2 * (kThreads / 8), "every 8-lane group computes two dots");

// Scores kernel shared memory: q [kHeads][Dp] and the candidates [kCands][Dp].
std::size_t scores_smem(int64_t Dh) { return static_cast<std::size_t>((kHeads + kCands) * padded_dim(Dh)) * sizeof(float); }

// P.V kernel shared memory per candidate: its score, and for a live one its row pointer and its
// live-list entry (its index, and kEncodedRow when the pointer is an encoded pool row).
constexpr std::size_t kPvBytesPerCand = sizeof(float) + sizeof(const void*) + sizeof(uint16_t);
constexpr std::size_t kPvStaticBytes = (sizeof(float) + sizeof(int)) * (kMaxProbBlocks + kWarps) + 64;
constexpr uint16_t kEncodedRow = 0x8000, kCandIndex = 0x7fff;
static_assert(kSmemBytes / kPvBytesPerCand <= kCandIndex, "a candidate index fits a live-list entry");

__device__ float* head_scores(const SparseAttnArgs& a, int64_t row, int64_t h) {
  return a.scratch + ((row - a.row0) * a.H + h) * a.max_cand;
}

// grid (rows * tiles, ceil(H / kHeads)); tiles = ceil(max_cand / kCands).
__global__ void __launch_bounds__(kThreads) scores_kernel(SparseAttnArgs a, int64_t tiles) {
  pdl_begin();
  extern __shared__ float smem[];  // q [kHeads][Dp], then the candidates [kCands][Dp]
  __shared__ const float* tf[kCands];
  __shared__ const uint8_t* te[kCands];
  const int64_t row = a.row0 + blockIdx.x / tiles, j0 = (blockIdx.x % tiles) * kCands, h0 = blockIdx.y * kHeads;
  if (a.row_seq[row] < 0) return;  // the P.V kernel writes this row's zeros
  const RowCtx c = row_ctx(a, row);
  if (j0 >= c.nc) return;
  const int n = c.nc - j0 < kCands ? static_cast<int>(c.nc - j0) : kCands;
  const int nh = a.H - h0 < kHeads ? static_cast<int>(a.H - h0) : kHeads;
  const int me = threadIdx.x;
  if (me < n) {
    int64_t bad = -1;
    const Cand cj = candidate(a, c, j0 + me, &bad);
    tf[me] = cj.f;
    te[me] = cj.enc;
    report_invisible(a, c, bad);
  }
  if (!__syncthreads_or(me < n && (tf[me] || te[me]))) {  // every slot skipped: -inf scores
    if (me < nh * n) head_scores(a, row, h0 + me / n)[j0 + me % n] = -INFINITY;
    return;
  }
  const int Dh = static_cast<int>(a.Dh), Dp = static_cast<int>(padded_dim(a.Dh));
  float* qs = smem;
  float* ks = smem + kHeads * Dp;
  for (int i = me; i < nh * Dh; i += kThreads) qs[(i / Dh) * Dp + i % Dh] = a.q[(row * a.H + h0) * Dh + i];
  for (int i = me; i < n * Dh; i += kThreads) {
    const int t = i / Dh, d = i % Dh;
    ks[t * Dp + d] = tf[t] ? tf[t][d] : (te[t] ? backend::kv_value(a.comp.spec, te[t], d) : 0.f);
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

// ---- the softmax forms of sparse_attention_common.h with the denominator summed over the live
// candidates lv[0, nlive) (candidate order) instead of every slot. A skipped slot's score is -inf
// and the running max is finite (the window's candidates are live and come first, in block 0), so
// its e = exp_cr(-inf) = +0 and a sum that adds it is bitwise the sum that leaves it out. The max
// and exp passes are theirs unchanged (parallel over slots, not the serial part).

// blocked_softmax: block maxima over the slots, then l = sum over blocks of l * alpha_b + (the
// block's live e_j in order), block after block (an empty block keeps m and adds 0, as before).
__device__ float blocked_softmax_live(const SparseAttnArgs& a, const RowCtx& c, float sink, float* sc, float* bmax,
                                      int* bend, int64_t nb, const uint16_t* lv, int nlive) {
  for (int64_t b = threadIdx.x; b < nb; b += blockDim.x) {
    float mx = -INFINITY;
    for (int64_t j = first_cand(a, c, b); j < first_cand(a, c, b + 1); ++j) mx = fmaxf(mx, sc[j]);
    bmax[b] = mx;
    bend[b] = static_cast<int>(first_cand(a, c, b + 1));
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int64_t b = 1; b < nb; ++b) bmax[b] = fmaxf(bmax[b - 1], bmax[b]);
  __syncthreads();
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t j = first_cand(a, c, b) + threadIdx.x; j < first_cand(a, c, b + 1); j += blockDim.x)
      sc[j] = exp_cr(sc[j] - bmax[b]);
  __syncthreads();
  float l = 0.f, m = -INFINITY;
  int i = 0;
  for (int64_t b = 0; b < nb; ++b) {
    const int end = bend[b];
    float bs = 0.f;
    for (; i < nlive && (lv[i] & kCandIndex) < end; ++i) bs = __fadd_rn(bs, sc[lv[i] & kCandIndex]);
    l = __fadd_rn(__fmul_rn(l, exp_cr(m - bmax[b])), bs);
    m = bmax[b];
  }
  l = __fadd_rn(l, exp_cr(sink - m));
  if (a.bf16_probs) {
    __syncthreads();  // every thread has summed the unrounded values
    for (int64_t j = threadIdx.x; j < c.nc; j += blockDim.x) sc[j] = round_bf16(sc[j]);
    __syncthreads();
  }
  return l;
}

// plain_softmax: exp(s - max) over the slots, the denominator (with the sink) over the live list.
__device__ float plain_softmax_live(const SparseAttnArgs& a, const RowCtx& c, float sink, float* sc, float* red,
                                    const uint16_t* lv, int nlive) {
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < c.nc; j += blockDim.x) mx = fmaxf(mx, sc[j]);
  mx = block_max(mx, red);  // also a barrier: every score is written
  for (int64_t j = threadIdx.x; j < c.nc; j += blockDim.x) sc[j] = exp_cr(sc[j] - mx);
  __syncthreads();
  float sum = 0.f;
  for (int i = 0; i < nlive; ++i) sum = __fadd_rn(sum, sc[lv[i] & kCandIndex]);
  sum = __fadd_rn(sum, exp_cr(sink - mx));  // the sink: a logit with a zero value
  __syncthreads();  // every thread has summed the unrounded values
  if (a.bf16_probs)
    for (int64_t j = threadIdx.x; j < c.nc; j += blockDim.x) sc[j] = round_bf16(sc[j]);
  __syncthreads();
  return sum;
}

// grid (rows * H, ceil(Dh / kDims)).
__global__ void __launch_bounds__(kThreads) pv_kernel(SparseAttnArgs a) {
  pdl_begin();
  extern __shared__ float4 pv_smem[];  // the live rows [max_cand], the scores [max_cand], lv [max_cand]
  __shared__ float bmax[kMaxProbBlocks];
  __shared__ int bend[kMaxProbBlocks];  // block b's candidates end before bend[b]
  __shared__ float red[kWarps];
  __shared__ int wlive[kWarps];
  const int64_t row = a.row0 + blockIdx.x / a.H, h = blockIdx.x % a.H;
  const int64_t d = static_cast<int64_t>(blockIdx.y) * kDims + threadIdx.x;
  float* out = a.out + (row * a.H + h) * a.Dh + d;
  if (a.row_seq[row] < 0) {  // a row no sequence covers: zeros, as the CPU leaves it
    if (d < a.Dh) *out = 0.f;
    return;
  }
  const RowCtx c = row_ctx(a, row);
  const void** rows = reinterpret_cast<const void**>(pv_smem);
  float* sc = reinterpret_cast<float*>(rows + a.max_cand);
  uint16_t* lv = reinterpret_cast<uint16_t*>(sc + a.max_cand);
  const float* src = head_scores(a, row, h);
  // The live candidates in order: rows[i] and lv[i] for i < nlive. kThreads candidates a round
  // (every thread takes every round: barriers); a live one's place is the live lanes up to it in
  // its warp (an inclusive count by shuffles, exact in f32) plus those of the warps before.
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  int nlive = 0;
  for (int64_t j0 = 0; j0 < c.nc; j0 += kThreads) {
    const int64_t j = j0 + threadIdx.x;
    Cand cj;
    if (j < c.nc) {
      sc[j] = src[j];
      cj = candidate(a, c, j, nullptr);  // (the scores kernel reported invisible ones)
    }
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
    __syncthreads();  // wlive is rewritten next round; after the last, every candidate is staged
  }
  const int nb = static_cast<int>(prob_blocks(a, c));
  const float sink = weight_at(a.sink, h / a.sink.cols, h % a.sink.cols);
  const float l = nb > 0 ? blocked_softmax_live(a, c, sink, sc, bmax, bend, nb, lv, nlive)
                         : plain_softmax_live(a, c, sink, sc, red, lv, nlive);
  if (d >= a.Dh) return;  // (after the softmax's barriers)
  // o = sum_j p_j v_j[d] over the live candidates in order; with blocks (nb > 0): acc = acc *
  // alpha_b + (block b's sum), block after block, as sparse_attention.cu's pv_pass. A block
  // without a live candidate is still closed: the same additions and closes in the same order as
  // the walk over every slot, which added nothing for a skipped one.
  PvSum o;
  int b = 0, end = nb > 0 ? bend[0] : static_cast<int>(c.nc);
  auto flush = [&] {
    o.close_block(bmax[b]);
    ++b;
    end = b < nb ? bend[b] : static_cast<int>(c.nc);
  };
  auto value = [&](int i) {
    return (lv[i] & kEncodedRow) ? backend::kv_value(a.comp.spec, static_cast<const uint8_t*>(rows[i]), d)
                                 : static_cast<const float*>(rows[i])[d];
  };
  auto add = [&](int i, float v) {
    const int j = lv[i] & kCandIndex;
    if (nb > 0)
      while (j >= end) flush();
    o.add(__fmul_rn(sc[j], v), nb > 0);
  };
  int i = 0;
  for (; i + kPvLoads <= nlive; i += kPvLoads) {  // kPvLoads rows' loads issued before their sums
    float v[kPvLoads];
#pragma unroll
    for (int u = 0; u < kPvLoads; ++u) v[u] = value(i + u);
#pragma unroll
    for (int u = 0; u < kPvLoads; ++u) add(i + u, v[u]);
  }
  for (; i < nlive; ++i) add(i, value(i));
  if (nb > 0)
    while (b < nb) flush();
  const float y = o.acc / l;
  *out = a.round_out ? round_bf16(y) : y;
}

}  // namespace

gpuError_t split_attention(const SparseAttnArgs& a, gpuStream_t s) {
  if (a.rows * a.H == 0) return gpuGetLastError();
  const int64_t tiles = (a.max_cand + kCands - 1) / kCands;
  const dim3 sgrid(static_cast<unsigned>(a.rows * tiles), static_cast<unsigned>((a.H + kHeads - 1) / kHeads));
  const gpuError_t e = launch(scores_kernel, sgrid, kThreads, scores_smem(a.Dh), s, a, tiles);
  if (e != gpuSuccess) return e;
  const dim3 pgrid(static_cast<unsigned>(a.rows * a.H), static_cast<unsigned>((a.Dh + kDims - 1) / kDims));
  return launch(pv_kernel, pgrid, kThreads, static_cast<std::size_t>(a.max_cand) * kPvBytesPerCand, s, a);
}

}  // namespace attn

bool sparse_attention_split(int64_t Dh, int64_t max_cand) {
  using namespace attn;
  return Dh > 0 && scores_smem(Dh) <= kSmemBytes &&
         static_cast<std::size_t>(max_cand) * kPvBytesPerCand + kPvStaticBytes <= kSmemBytes;
}

}  // namespace plumb::gpu::k
