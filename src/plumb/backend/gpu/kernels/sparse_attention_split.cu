// Sparse attention for decode-sized batches in two launches, bitwise the CPU's like
// sparse_attention.cu (same candidates, same dot order, the same softmax functions, P.V summed in
// candidate order per output):
//   1. scores: one block per (query row, 8 candidates, 8 heads). The block stages the 8 candidate
//      rows (decoded to f32) and the 8 heads' q once, then each 8-lane group computes 2 of the 64
//      (head, candidate) dots as cpu_order_sum8 does; scores go to the host's scratch. A block
//      whose candidates are all skipped selection slots only writes -inf.
//   2. softmax and P.V: one block per (query row, head, 256 output dims). It copies the head's
//      scores and the candidates' row pointers into shared memory, runs plain_softmax or
//      blocked_softmax (every thread gets the denominator), and each thread sums p_j v_j[d] over
//      the candidates in order for its own d, 8 rows' loads issued before their sums.
// Why: the one-kernel form spends a block per head (G = 1 at decode) that walks every candidate
// with 256 threads for one dot at a time: at B = 1 its 64 blocks left half the SMs idle and each
// re-staged the same KV rows (ncu, docs/PERF.md v7: 109 us per SWA layer for 65 candidates, 307
// us for CSA, 12% issue-slot use). Here a staged KV row serves 8 heads, and the launches have
// rows x candidates / 8 x H / 8 and rows x H x Dh / 256 blocks.
#include "plumb/backend/gpu/kernels/attention.h"
#include "plumb/backend/gpu/kernels/cpu_order.h"
#include "plumb/backend/gpu/kernels/sparse_attention_common.h"

namespace plumb::gpu::k {
namespace attn {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;  // kWarp is 32 or 64: room for either
constexpr int kCands = 8;              // candidates per scores block
constexpr int kHeads = 8;              // heads per scores block
constexpr int kDims = kThreads;        // output dims per P.V block
constexpr int kPvLoads = 8;            // candidate rows whose values a thread loads before summing
constexpr int64_t kMaxRowsTimesHeads = 4096;   // decode batches up to 64 tokens of 64 heads
static_assert(kHeads * kCands == 2 * (kThreads / 8), "every 8-lane group computes two dots");

// Scores kernel shared memory: q [kHeads][Dp] and the candidates [kCands][Dp].
std::size_t scores_smem(int64_t Dh) { return static_cast<std::size_t>((kHeads + kCands) * padded_dim(Dh)) * sizeof(float); }

// P.V kernel shared memory per candidate: its two row pointers and its score.
constexpr std::size_t kPvBytesPerCand = sizeof(float*) + sizeof(uint8_t*) + sizeof(float);
constexpr std::size_t kPvStaticBytes = sizeof(float) * (kMaxProbBlocks + kWarps) + 64;

__device__ float* head_scores(const SparseAttnArgs& a, int64_t row, int64_t h) {
  return a.scratch + ((row - a.row0) * a.H + h) * a.max_cand;
}

// grid (rows * tiles, ceil(H / kHeads)); tiles = ceil(max_cand / kCands).
__global__ void __launch_bounds__(kThreads) scores_kernel(SparseAttnArgs a, int64_t tiles) {
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

// grid (rows * H, ceil(Dh / kDims)).
__global__ void __launch_bounds__(kThreads) pv_kernel(SparseAttnArgs a) {
  extern __shared__ float4 pv_smem[];  // row pointers [max_cand] x 2, then the scores [max_cand]
  __shared__ float bmax[kMaxProbBlocks];
  __shared__ float red[kWarps];
  const int64_t row = a.row0 + blockIdx.x / a.H, h = blockIdx.x % a.H;
  const int64_t d = static_cast<int64_t>(blockIdx.y) * kDims + threadIdx.x;
  float* out = a.out + (row * a.H + h) * a.Dh + d;
  if (a.row_seq[row] < 0) {  // a row no sequence covers: zeros, as the CPU leaves it
    if (d < a.Dh) *out = 0.f;
    return;
  }
  const RowCtx c = row_ctx(a, row);
  const float** cf = reinterpret_cast<const float**>(pv_smem);
  const uint8_t** ce = reinterpret_cast<const uint8_t**>(cf + a.max_cand);
  float* sc = reinterpret_cast<float*>(ce + a.max_cand);
  const float* src = head_scores(a, row, h);
  for (int64_t j = threadIdx.x; j < c.nc; j += kThreads) {
    sc[j] = src[j];
    const Cand cj = candidate(a, c, j, nullptr);  // (the scores kernel reported invisible ones)
    cf[j] = cj.f;
    ce[j] = cj.enc;
  }
  __syncthreads();
  const int64_t nb = prob_blocks(a, c);
  const float sink = weight_at(a.sink, h / a.sink.cols, h % a.sink.cols);
  const float l = nb > 0 ? blocked_softmax(a, c, sink, sc, bmax, nb) : plain_softmax(a, c, sink, sc, red);
  if (d >= a.Dh) return;  // (after the softmax's barriers)
  // o = sum_j p_j v_j[d] in candidate order; with blocks (nb > 0): acc = acc * alpha_b + (block b's
  // sum), block after block, as sparse_attention.cu's pv_pass.
  PvSum o;
  int64_t b = 0, end = nb > 0 ? first_cand(a, c, 1) : c.nc;
  auto flush = [&] {
    o.close_block(bmax[b]);
    ++b;
    end = first_cand(a, c, b + 1);
  };
  for (int64_t j0 = 0; j0 < c.nc; j0 += kPvLoads) {
    float v[kPvLoads];
#pragma unroll
    for (int u = 0; u < kPvLoads; ++u) {
      const int64_t j = j0 + u;
      v[u] = 0.f;
      if (j < c.nc) {
        if (cf[j]) v[u] = cf[j][d];
        else if (ce[j]) v[u] = backend::kv_value(a.comp.spec, ce[j], d);
      }
    }
#pragma unroll
    for (int u = 0; u < kPvLoads; ++u) {
      const int64_t j = j0 + u;
      if (j < c.nc) {
        if (nb > 0)
          while (j >= end) flush();
        if (cf[j] || ce[j]) o.add(__fmul_rn(sc[j], v[u]), nb > 0);  // a skipped slot adds nothing (as on the CPU)
      }
    }
  }
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
  scores_kernel<<<sgrid, kThreads, scores_smem(a.Dh), s>>>(a, tiles);
  const dim3 pgrid(static_cast<unsigned>(a.rows * a.H), static_cast<unsigned>((a.Dh + kDims - 1) / kDims));
  pv_kernel<<<pgrid, kThreads, static_cast<std::size_t>(a.max_cand) * kPvBytesPerCand, s>>>(a);
  return gpuGetLastError();
}

}  // namespace attn

bool sparse_attention_split(int64_t rows, int64_t H, int64_t Dh, int64_t max_cand) {
  using namespace attn;
  return rows * H <= kMaxRowsTimesHeads && Dh > 0 && scores_smem(Dh) <= kSmemBytes &&
         static_cast<std::size_t>(max_cand) * kPvBytesPerCand + kPvStaticBytes <= kSmemBytes;
}

}  // namespace plumb::gpu::k
