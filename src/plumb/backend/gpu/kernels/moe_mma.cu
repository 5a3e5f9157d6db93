// Routed experts for few tokens (decode) on the bf16 tensor cores (mma.sync m16n8k16): the
// grouped experts of moe_grouped.cu (up: h = swiglu(w1 x, w3 x); down: ys = w2 h) for FP4
// weights under act_fp8, the faithful profile's decode. Same function, another order of the sums
// (the fast order; GpuCpuOrder never comes here).
//
// Why (PERF.md v17): moe_grouped.cu decodes each FP4 weight to f32 and multiplies it in an fmaf,
// ~5.6 instructions a weight, issue-bound (B = 32: up + down 3.5 of 8.85 ms), and reads an
// expert's weights once for every slot that chose it (192 slots over ~135 distinct experts at
// B = 32). Here one block serves all the slots of an expert (the MMA's 8 columns, more in turns),
// so each selected expert's bytes are read once, and a lane turns FP4 into bf16 pairs with ~2.5
// instructions a weight; the products and sums are the tensor cores'.
//
// Operands are exact: an FP4 weight times its ue8m0 scale has at most 2 significant bits, and x
// and h after act_fp8's round trip are e4m3 values times a power of two (4 bits, at least 2^-31
// in magnitude: ue8m0_scale_for's amax floor), so bf16 (f32's exponent range) holds each as it is,
// and every product is the f32 product the SIMT kernels form.
//
// Decode of nibbles j and j + 4 of a 32-bit FP4 word (element i in bits 4i..4i+3) into one bf16
// pair: v = word << (12 - 4j) puts the two nibbles at the top of the two halves (signs at bits 15
// and 31); (v >> 6) & 0x01C001C0 moves each magnitude (e2m1: 2 exponent bits, 1 mantissa bit) to
// bf16 bits 6..8, where it reads as its value times 2^-126 (code 1, 0.5, as the subnormal
// 2^-127); OR the signs, and one bf16x2 multiply by 2^(c - 1) = 2^126 times the scale 2^(c - 127)
// gives the weights. A scale code above 128 (2^(c - 1) beyond bf16) decodes through f32 instead.
//
// Fragments (linear_common.h, mma_bf16): lane (g = lane / 4, t = lane % 4) of a warp's 16-row tile
// loads 16 bytes (32 weights, one scale block) of rows g and g + 8 at columns c0 + 32t of a round
// of 128 columns. Word w of them (columns c0 + 32t + 8w ..) gives pairs (j, j + 4), j = 0..3;
// pairs 0 and 1 feed one MMA (a0 a2 from row g, a1 a3 from row g + 8), pairs 2 and 3 the next.
// An MMA sums its k slots whatever columns they stand for, so x (and h) are staged with the same
// permutation: each 8 columns as bf16 [0 4 1 5 2 6 3 7], where word j is pair j, and a lane's B
// fragments for a word (column g = its slot) are one 16-byte load.
//
// Launches: prep (x staged as bf16 by N blocks, its act_fp8 round trip applied as stage() does in
// moe_grouped.cu, and the slots grouped by expert in one more block), up, prep of h, down; the
// combine is moe_grouped.cu's. A warp takes every 4th round of its rows' K columns (4 warps a
// tile, summed in a fixed order through shared memory): up's tile is 16 rows of w1 (warps 0-3) and
// w3 (warps 4-7), down's 32 rows of w2. A block walks Tiles such tiles of its expert (1, 2, 4 or 8,
// GroupedMoeArgs::mma_tiles; fewer where they do not divide the rows: the most that do), each
// warp's loads running on from one tile into the next, so that fewer, longer blocks pay the chain
// of dependent loads before their first weights (groups, expert, table, data) and the drain of
// the pipeline at their end less often. The weights go through registers, Depth rounds (32 bytes
// a lane each) in flight (mma_depth: 2, while the previous two are decoded; or 4, a ring). Every
// shape sums each output in the same order, so all give the same bits. (A block's whole tile
// copied into shared memory with cp.async from its start bought 3% of up's time on the H100, lost
// at B <= 16, and was removed: PERF.md v20.)
#include "plumb/backend/gpu/gpu_numerics.h"
#include "plumb/backend/gpu/kernels/act_quant.h"
#include "plumb/backend/gpu/kernels/launch.h"
#include "plumb/backend/gpu/kernels/linear_common.h"
#include "plumb/backend/gpu/kernels/moe_epilogue.h"
#include "plumb/backend/gpu/kernels/moe_grouped.h"

namespace plumb::gpu::k {
namespace {

constexpr int kThreads = 256;                      // 8 warps of 32 (the MMA fragments are 32 lanes')
constexpr int kRound = 128;                        // columns of a round: 4 lanes x one 32-weight chunk
constexpr int kCols = 8;                           // the MMA's n: slots a turn
constexpr int kUpRows = 16;       // up: rows of w1 and of w3 a tile
constexpr int kDownRows = 32;     // down: rows of w2 a tile

// The partial tiles of a block's 8 warps for one row tile: [warp][row][column], padded.
using Partials = float[8][kUpRows][kCols + 1];

// GroupedMoeArgs::groups (gmax = min(slots, E)): [0] the number of groups G; [1, 1 + gmax) each
// group's expert, ascending; [1 + gmax, 2 + gmax + G) each group's first entry in the list, then
// its end; from 2 + 2 gmax the list: each group's slots, ascending.
struct Groups {
  const int32_t* base;
  int64_t gmax;
  __device__ int32_t count() const { return base[0]; }
  __device__ int32_t expert(int64_t g) const { return base[1 + g]; }
  __device__ int32_t begin(int64_t g) const { return base[1 + gmax + g]; }
  __device__ int32_t slot(int64_t i) const { return base[2 + 2 * gmax + i]; }
};

__device__ __forceinline__ int64_t group_max(const GroupedMoeArgs& a) { return a.N * a.K < a.E ? a.N * a.K : a.E; }

// The grouping, by one block: each thread counts the slots of a contiguous range of experts,
// a block scan places its groups and slots, then it lists each of its experts' slots in order.
__device__ void group_slots(const GroupedMoeArgs& a) {
  __shared__ int32_t ex[kGroupedMoeMaxSlots];
  __shared__ int32_t count[kGroupedMoeMmaMaxExperts];
  __shared__ int32_t scan_g[kThreads], scan_s[kThreads];
  const int tid = static_cast<int>(threadIdx.x);
  const int S = static_cast<int>(a.N * a.K), E = static_cast<int>(a.E);
  const int64_t gmax = group_max(a);
  for (int i = tid; i < S; i += kThreads) ex[i] = live_expert(a.experts[i], E) ? a.experts[i] : -1;
  __syncthreads();
  const int per = (E + kThreads - 1) / kThreads, e0 = tid * per < E ? tid * per : E, e1 = e0 + per < E ? e0 + per : E;
  int ng = 0, ns = 0;
  for (int e = e0; e < e1; ++e) {
    int c = 0;
    for (int i = 0; i < S; ++i) c += ex[i] == e;
    count[e] = c;
    ng += c > 0, ns += c;
  }
  scan_g[tid] = ng, scan_s[tid] = ns;
  __syncthreads();
  for (int off = 1; off < kThreads; off <<= 1) {  // inclusive scan (Hillis-Steele)
    const int g = tid >= off ? scan_g[tid - off] : 0, s = tid >= off ? scan_s[tid - off] : 0;
    __syncthreads();
    scan_g[tid] += g, scan_s[tid] += s;
    __syncthreads();
  }
  int32_t* out = a.groups;
  int gi = scan_g[tid] - ng, si = scan_s[tid] - ns;
  for (int e = e0; e < e1; ++e) {
    if (count[e] == 0) continue;
    out[1 + gi] = e;
    out[1 + gmax + gi] = si;
    for (int i = 0; i < S; ++i)
      if (ex[i] == e) out[2 + 2 * gmax + si++] = i;
    ++gi;
  }
  if (tid == kThreads - 1) out[0] = scan_g[tid], out[1 + gmax + scan_g[tid]] = scan_s[tid];
}

// bf16 bits of a value bf16 holds exactly (a NaN as the quiet NaN).
__device__ __forceinline__ uint32_t bf16_exact(float v) { return v != v ? 0x7FC0u : f32_bits(v) >> 16; }

// A row of n floats (a multiple of 128) into dst as bf16, each 8 columns permuted, after
// act_fp8's round trip when quant (quant_segment_fp8: a thread per 16-column segment, 8 per
// 128-block, the same values as moe_grouped.cu's stage()).
__device__ void stage_row(const float* src, int n, bool quant, uint16_t* dst) {
  const int segs = static_cast<int>(quant_segments(n));
  const bool vec4 = reinterpret_cast<uintptr_t>(src) % 16 == 0;
  for (int u0 = 0; u0 < segs; u0 += kThreads) {  // the same trip count in every thread (shuffles)
    const int j = u0 + static_cast<int>(threadIdx.x);
    const bool live = j < segs;
    float x[kQuantSeg];
    load_segment(src, live ? n : 0, j, vec4, x);
    if (quant) quant_segment_fp8(x);
    if (!live) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float* v = x + 8 * h;
      uint4 o;
      o.x = bf16_exact(v[0]) | bf16_exact(v[4]) << 16, o.y = bf16_exact(v[1]) | bf16_exact(v[5]) << 16;
      o.z = bf16_exact(v[2]) | bf16_exact(v[6]) << 16, o.w = bf16_exact(v[3]) | bf16_exact(v[7]) << 16;
      *reinterpret_cast<uint4*>(dst + static_cast<int64_t>(j) * kQuantSeg + 8 * h) = o;
    }
  }
}

// grid (rows, or rows + 1 with group): block b < rows stages row b of src [rows, n] into dst
// (skipped when slots and row b's slot routes nowhere: its h was never written); the last block
// of a grouping launch groups the slots.
__global__ void __launch_bounds__(kThreads) prep_kernel(GroupedMoeArgs a, const float* src, int64_t rows, int64_t n,
                                                        bool quant, bool slots, uint16_t* dst) {
  pdl_begin();
  const int64_t b = blockIdx.x;
  if (b >= rows) {
    group_slots(a);
    return;
  }
  if (slots && !live_expert(a.experts[b], a.E)) return;
  stage_row(src + b * n, static_cast<int>(n), quant, dst + b * n);
}

#ifdef PLUMB_MMA_BF16
constexpr int kQuarters = 4;  // warps sharing a tile, each every 4th round

// How many of K's rounds of 128 columns warp quarter q takes (q, q + 4, ...).
constexpr int warp_rounds(int64_t K, int q) {
  const int rounds = static_cast<int>(K / kRound);
  return q < rounds ? (rounds - q + kQuarters - 1) / kQuarters : 0;
}

struct Fp4Chunk {
  uint4 v;        // 32 weights, element i in bits 4i..4i+3 of the words in order
  uint32_t code;  // their ue8m0 scale
};

// Pair (j, j + 4) of a word of the chunk as bf16x2 (module comment): scale code <= 128.
__device__ __forceinline__ uint32_t fp4_pair_fast(const Fp4Chunk& ch, uint32_t word, int j) {
  const uint32_t v = word << (12 - 4 * j), k = (ch.code + 126u) << 7;
  return bf16x2_mul(((v >> 6) & 0x01C001C0u) | (v & 0x80008000u), k | k << 16);
}
// The same through f32, any scale code: a product of at most 2 significant bits is exact in bf16
// (or infinite, as in f32; code 255 gives NaN).
__device__ __forceinline__ uint32_t fp4_pair_exact(const Fp4Chunk& ch, uint32_t word, int j) {
  const float s = ue8m0_to_f32(static_cast<uint8_t>(ch.code));
  return bf16_exact(fp4_value(word >> (4 * j)) * s) | bf16_exact(fp4_value(word >> (4 * j + 16)) * s) << 16;
}

// The 8 MMAs of one round: chunks a (row g) and b (row g + 8), B words xq (column g's 32 k of the
// round). Each lane picks its decode (fast: both scale codes <= 128); the MMAs run after the
// branch, where the warp has reconverged (mma.sync is a warp-wide instruction).
__device__ __forceinline__ void mma_round(const Fp4Chunk& a, const Fp4Chunk& b, const uint4 (&xq)[4], float (&c)[4]) {
  const bool fast = a.code <= 128u && b.code <= 128u;
#pragma unroll
  for (int wd = 0; wd < 4; ++wd) {
    const uint32_t wa = word_of(a.v, wd), wb = word_of(b.v, wd);
    uint32_t pa[4], pb[4];  // pairs j = 0..3 of rows g and g + 8
    if (fast) {
#pragma unroll
      for (int j = 0; j < 4; ++j) pa[j] = fp4_pair_fast(a, wa, j), pb[j] = fp4_pair_fast(b, wb, j);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) pa[j] = fp4_pair_exact(a, wa, j), pb[j] = fp4_pair_exact(b, wb, j);
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const uint32_t af[4] = {pa[2 * hh], pb[2 * hh], pa[2 * hh + 1], pb[2 * hh + 1]};
      const uint32_t bf[2] = {word_of(xq[wd], 2 * hh), word_of(xq[wd], 2 * hh + 1)};
      mma_bf16(c, af, bf);
    }
  }
}

// B words of a round: column g's 32 k at xr (the staged row's round offset), zeros without a column.
__device__ __forceinline__ void load_b(const uint16_t* xr, uint4 (&xq)[4]) {
#pragma unroll
  for (int wd = 0; wd < 4; ++wd) xq[wd] = xr ? *reinterpret_cast<const uint4*>(xr + 8 * wd) : make_uint4(0u, 0u, 0u, 0u);
}

// A warp's place in its walk of rounds: round `round` (of nr) of its tile `tile`.
struct Step {
  int tile = 0, round = 0;
  __device__ __forceinline__ bool next(int nr) {  // true: on to the next tile
    if (++round < nr) return false;
    round = 0, ++tile;
    return true;
  }
};

// The warp's Tiles tiles of 16 x 8, tile k rows row0 + k stride + g and + g + 8 of w, each over
// rounds q, q + 4, ... of K: one walk of Tiles x nr rounds, tile by tile, through one pipeline, so
// the loads of a tile's first rounds are in flight while the previous tile's last are decoded.
// Depth rounds in flight a lane: Depth 2 two buffers of 2 rounds, one decoded while the other
// loads; Depth 4 a ring of 5 single rounds (three buffers of 2 rounds spilled at the 128 registers
// of 2 blocks an SM; two of 4 would hold more). B column g from the staged row col (null: zeros, a
// column with no slot). At a tile's last round the accumulators (rows g, g + 8; columns 2t,
// 2t + 1) go to red[k][warp] and restart from zero: each tile's sums are those of a one-tile walk,
// whatever Tiles and Depth. Tiles are whole: w's rows (I or D) are multiples of 128.
template <int Tiles, int Depth>
__device__ void warp_tiles(const WeightRef& w, int64_t row0, int64_t stride, int K, int q, const uint16_t* col,
                           Partials (&red)[Tiles]) {
  constexpr int kBufRounds = Depth == 2 ? 2 : 1, kBufs = Depth / kBufRounds + 1;  // rounds a buffer, buffers
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32, g = lane / 4,
            t = lane % 4, nr = warp_rounds(K, q);
  float c[4] = {0.f, 0.f, 0.f, 0.f};
  auto flush = [&](int k) {
    red[k][warp][g][2 * t] = c[0], red[k][warp][g][2 * t + 1] = c[1];
    red[k][warp][g + 8][2 * t] = c[2], red[k][warp][g + 8][2 * t + 1] = c[3];
    c[0] = c[1] = c[2] = c[3] = 0.f;
  };
  if (nr == 0) {  // a quarter past K's rounds: zero partials
    for (int k = 0; k < Tiles; ++k) flush(k);
    return;
  }
  const int64_t row_bytes = K / 2;
  Step ls, rs;  // the next round to load, to run
  const uint8_t *data = w.data + (row0 + g) * row_bytes, *scale = w.scale + (row0 + g) * w.scale_cols;  // ls's row g
  auto load = [&](Fp4Chunk (&b)[kBufRounds][2]) {
#pragma unroll
    for (int rr = 0; rr < kBufRounds; ++rr) {
      const int64_t gi = static_cast<int64_t>(q + kQuarters * ls.round) * 4 + t;  // the lane's chunk
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // rows g, g + 8
        Fp4Chunk ch{make_uint4(0u, 0u, 0u, 0u), 127u};
        if (ls.tile < Tiles) {
          ch.v = load_stream(data + 8 * h * row_bytes + gi * 16);
          ch.code = scale[8 * h * w.scale_cols + gi];
        }
        b[rr][h] = ch;
      }
      if (ls.next(nr)) data += stride * row_bytes, scale += stride * w.scale_cols;
    }
  };
  auto run = [&](const Fp4Chunk (&b)[kBufRounds][2]) {
#pragma unroll
    for (int rr = 0; rr < kBufRounds; ++rr) {
      if (rs.tile >= Tiles) break;
      uint4 xq[4];
      load_b(col ? col + static_cast<int64_t>(q + kQuarters * rs.round) * kRound + 32 * t : nullptr, xq);
      mma_round(b[rr][0], b[rr][1], xq, c);
      const int k = rs.tile;
      if (rs.next(nr)) flush(k);
    }
  };
  Fp4Chunk buf[kBufs][kBufRounds][2];
#pragma unroll
  for (int i = 0; i + 1 < kBufs; ++i) load(buf[i]);
  const int n = Tiles * nr;
#pragma unroll 1
  for (int i = 0; i < n; i += kBufs * kBufRounds) {
#pragma unroll
    for (int j = 0; j < kBufs; ++j) {  // load into the buffer the previous step decoded, decode buffer j
      if (i + kBufRounds * j >= n) break;
      load(buf[(j + kBufs - 1) % kBufs]);
      run(buf[j]);
    }
  }
}

// Sum of the 4 quarters' partial tiles w0 .. w0 + 3 at (i, j), in that order.
__device__ __forceinline__ float quarter_sum(const Partials& red, int w0, int i, int j) {
  return ((red[w0][i][j] + red[w0 + 1][i][j]) + red[w0 + 2][i][j]) + red[w0 + 3][i][j];
}

// The loop both projections run in block (x, y) for the warp's Tiles tiles of 16 rows: rows
// row0 + k stride + g and + g + 8 of weight(expert) in tile k, every 4th round of K from the
// warp's quarter; group y's slots go in turns of up to 8. Per turn, every warp walks its tiles (B
// column g from col(slot) of its lane's column's slot, zeros without one) into red, and after the
// barrier store(k, i, j, slot) runs in threads (i, j) = (tid / 8, tid % 8) for each tile k and
// the turn's slots (i < rows).
template <int Tiles, int Depth, class Weight, class Col, class Store>
__device__ __forceinline__ void group_turns(const GroupedMoeArgs& a, Partials (&red)[Tiles], int rows, int64_t row0,
                                            int64_t stride, int K, Weight weight, Col col, Store store) {
  const Groups gr{a.groups, group_max(a)};
  const int64_t y = blockIdx.y;
  if (y >= gr.count()) return;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32, q = warp % kQuarters;
  const WeightRef& w = weight(gr.expert(y));
  const int64_t begin = gr.begin(y), end = gr.begin(y + 1);
  for (int64_t c0 = begin; c0 < end; c0 += kCols) {
    const int64_t ncols = end - c0 < kCols ? end - c0 : kCols;
    const uint16_t* b = lane / 4 < ncols ? col(gr.slot(c0 + lane / 4)) : nullptr;
    warp_tiles<Tiles, Depth>(w, row0, stride, K, q, b, red);
    __syncthreads();
    const int i = static_cast<int>(threadIdx.x) / kCols, j = static_cast<int>(threadIdx.x) % kCols;
    if (i < rows && j < ncols)
      for (int k = 0; k < Tiles; ++k) store(k, i, j, gr.slot(c0 + j));
    __syncthreads();
  }
}
#endif

// grid (I / (16 Tiles), gmax): block (x, y) is rows 16 Tiles x .. (Tiles tiles of 16) of w1 (warps
// 0-3) and w3 (warps 4-7) of group y's expert, Depth rounds in flight a lane.
template <int Tiles, int Depth>
__global__ void __launch_bounds__(kThreads, 2) up_mma_kernel(GroupedMoeArgs a) {
  pdl_begin();
#ifdef PLUMB_MMA_BF16
  __shared__ Partials red[Tiles];
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kUpRows * Tiles;
  group_turns<Tiles, Depth>(
      a, red, kUpRows, row0, kUpRows, static_cast<int>(a.D),
      [&](int32_t e) -> const WeightRef& { return a.table[3 * e + warp / kQuarters]; },
      [&](int64_t slot) { return a.xb + slot / a.K * a.D; },
      [&](int k, int i, int j, int64_t s) {
        a.h[s * a.I + row0 + kUpRows * k + i] =
            grouped_swiglu(a, s, quarter_sum(red[k], 0, i, j), quarter_sum(red[k], 4, i, j));
      });
#endif
}

// grid (D / (32 Tiles), gmax): block (x, y) is rows 32 Tiles x .. (Tiles tiles of 32) of w2 of
// group y's expert (warps 0-3 the first 16 of a tile, 4-7 the next), Depth rounds in flight a lane.
template <int Tiles, int Depth>
__global__ void __launch_bounds__(kThreads, 2) down_mma_kernel(GroupedMoeArgs a) {
  pdl_begin();
#ifdef PLUMB_MMA_BF16
  __shared__ Partials red[Tiles];
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kDownRows * Tiles;
  group_turns<Tiles, Depth>(
      a, red, kDownRows, row0 + kUpRows * (warp / kQuarters), kDownRows, static_cast<int>(a.I),
      [&](int32_t e) -> const WeightRef& { return a.table[3 * e + 2]; },
      [&](int64_t slot) { return a.hb + slot * a.I; },
      [&](int k, int i, int j, int64_t s) {
        const float v = quarter_sum(red[k], kQuarters * (i / kUpRows), i % kUpRows, j);
        a.ys[s * a.D + row0 + kDownRows * k + i] = a.round_bf16 ? round_bf16(v) : v;
      });
#endif
}

// The up (or down) kernel's instance for Tiles tiles (1, 2, 4 or 8) and depth (2 or 4).
using MmaKernel = void (*)(GroupedMoeArgs);
template <int Tiles>
MmaKernel mma_kernel(bool up, int depth) {
  if (up) return depth == 4 ? up_mma_kernel<Tiles, 4> : up_mma_kernel<Tiles, 2>;
  return depth == 4 ? down_mma_kernel<Tiles, 4> : down_mma_kernel<Tiles, 2>;
}
MmaKernel mma_kernel(bool up, int tiles, int depth) {
  switch (tiles) {
    case 8: return mma_kernel<8>(up, depth);
    case 4: return mma_kernel<4>(up, depth);
    case 2: return mma_kernel<2>(up, depth);
    default: return mma_kernel<1>(up, depth);
  }
}

// The tiles a block of a launch of `row_tiles` tiles takes: the most, up to `want`, that divide
// them (a power of two; every block a whole walk).
int block_tiles(int64_t row_tiles, int want) {
  int t = want;
  while (row_tiles % t != 0) t /= 2;
  return t;
}

}  // namespace

bool grouped_moe_mma_ok(const GroupedMoeArgs& a) {
  // Not on HIP: the fragments are CUDA's 32-lane mma.sync ones (gfx90a keeps moe_grouped.cu).
#ifdef PLUMB_CUDA
  constexpr bool cuda = true;
#else
  constexpr bool cuda = false;
#endif
  // (D and I multiples of 128: whole row tiles, whole rounds, 16-byte aligned rows)
  return cuda && a.format == WFormat::FP4 && a.quant_h && a.D > 0 && a.I > 0 && a.D % kRound == 0 &&
         a.I % kRound == 0 && a.E > 0 && a.E <= kGroupedMoeMmaMaxExperts && a.N * a.K <= kGroupedMoeMaxSlots;
}

int64_t grouped_moe_mma_group_ints(int64_t slots, int64_t E) { return 2 + 2 * (slots < E ? slots : E) + slots; }

gpuError_t grouped_moe_mma_experts(const GroupedMoeArgs& a, gpuStream_t s) {
  const int64_t S = a.N * a.K;
  if (S <= 0) return gpuGetLastError();
  const bool shape = (a.mma_tiles == 1 || a.mma_tiles == 2 || a.mma_tiles == 4 || a.mma_tiles == 8) &&
                     (a.mma_depth == 2 || a.mma_depth == 4);
  if (!grouped_moe_mma_ok(a) || !shape || !a.xb || !a.hb || !a.groups) return gpuErrorNotSupported;
  const unsigned gmax = static_cast<unsigned>(S < a.E ? S : a.E);
  const int up = block_tiles(a.I / kUpRows, a.mma_tiles), down = block_tiles(a.D / kDownRows, a.mma_tiles);
  gpuError_t e = launch(prep_kernel, static_cast<unsigned>(a.N + 1), kThreads, 0, s, a, a.x, a.N, a.D, a.quant_x,
                        false, a.xb);
  if (e == gpuSuccess)
    e = launch(mma_kernel(true, up, a.mma_depth), dim3(static_cast<unsigned>(a.I / (kUpRows * up)), gmax), kThreads, 0,
               s, a);
  if (e == gpuSuccess)
    e = launch(prep_kernel, static_cast<unsigned>(S), kThreads, 0, s, a, a.h, S, a.I, true, true, a.hb);
  if (e == gpuSuccess)
    e = launch(mma_kernel(false, down, a.mma_depth), dim3(static_cast<unsigned>(a.D / (kDownRows * down)), gmax),
               kThreads, 0, s, a);
  return e;
}

}  // namespace plumb::gpu::k
