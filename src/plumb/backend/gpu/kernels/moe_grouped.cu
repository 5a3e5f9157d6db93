// Routed experts for few tokens (decode) with the routing left on the device: every (token, k)
// slot is a grid row, whose block reads its expert id from the routing tensor and the expert's
// weights from a device-resident table, so a layer's experts cost three launches and no host
// round trip. Up: h = swiglu(w1 x, w3 x); down: ys = w2 h; combine: each token's slots summed in
// the CPU's order (expert id, then k), plus the shared expert. Same function as GpuBackend::moe's
// per-expert path; only the dot products' order differs (the fast order).
//
// Memory-bound streams (each selected expert's bytes read once per slot, coalesced, decoded in
// registers). V4-Flash decode, one token: up reads w1 and w3 of 6 experts, 6 x 2 x 2048 x 4096 FP4
// = 50 MB (12 us at 4.2 TB/s), down w2, 25 MB (6 us). Little's law: 4.2 TB/s x ~1 us of loaded
// latency is ~4 MB in flight, ~32 KB per SM. So:
// - A lane loads 16-byte chunks (FP4: 32 elements and their one ue8m0 scale; FP8 16, bf16 8, f32
//   4 elements), chunks lane, lane + kWarp, ... of a row (512 coalesced bytes per warp load), and
//   keeps them raw (5 registers per chunk) until its math.
// - A warp streams steps of P rows x U chunks (up: w1 and w3 of one row, U = 2; down: 4 rows of
//   w2, U = 1; 64 B per lane either way) over several row groups, and issues the next step's
//   loads before the current step's math (double buffer, 40 registers of raw chunks): 64-128 B in
//   flight per lane at all times, across groups too, ~48 KB per SM at 3 blocks of 8 warps.
// - Blocks: up 32 rows (4 groups per warp), down 64 rows (2 groups of 4 per warp): at one token
//   both grids are (64, 6) = 384 blocks, one wave at 3 blocks per SM (__launch_bounds__: <= 80
//   registers); x (16 KB) / h (8 KB) staged once per block in shared memory while the first step
//   is in flight, 6 MB / 3 MB from L2 in all.
// - Math: wdecode16's exact fast decode element by element (shift, shift, mask, multiply by the
//   chunk's scale factor, fma: ~5 instructions per weight), one staged float4 feeding all P rows.
//   That makes the issue rate, not DRAM, the bound: ~5.6 instructions per FP4 weight (PTX count,
//   with loads and loop) over 528 schedulers at ~1.9 GHz is ~17 us for up's 100.7 M weights and
//   ~8.5 us for down's 50 M. Predicted, with ~1 us of start (routing id, table, first weights:
//   three dependent loads): up ~18-20 us (was 91), down ~9-10 us (was 53).
// Summation: each row's lane sum runs over its chunks in column order, element by element (fmaf),
// then warp_sum: it depends on the row length, the format and kWarp only, never on the step shape,
// the group, the slot or the number of tokens. Rows whose length is not a whole number of chunks
// take the element-by-element path (wload) in the same order.
#include "plumb/backend/gpu/gpu_numerics.h"
#include "plumb/backend/gpu/kernels/act_quant.h"
#include "plumb/backend/gpu/kernels/elementwise.h"
#include "plumb/backend/gpu/kernels/linear_common.h"
#include "plumb/backend/gpu/kernels/moe_grouped.h"
#include "plumb/backend/gpu/kernels/launch.h"
#include "plumb/backend/gpu/kernels/moe_epilogue.h"

namespace plumb::gpu::k {
namespace {

constexpr int kThreads = 256;            // 8 warps of 32, 4 wavefronts of 64
constexpr int kWarps = kThreads / kWarp;
constexpr int kMinBlocks = 3;            // per SM: caps registers at 80 (65536 / 768)

// ---- chunks: what a lane loads at once, 16 bytes of one weight row (FP4 32 elements and their one
// ue8m0 scale, FP8 16 elements, bf16 8, f32 4) at a 16-byte aligned address.
constexpr int chunk_elems(WFormat f) {
  return f == WFormat::F32 ? 4 : f == WFormat::BF16 ? 8 : f == WFormat::FP8 ? 16 : 32;
}
// Staged vectors (x, h) in shared memory: chunk by chunk, each followed by 4 floats of padding so
// that the lanes' float4 reads of consecutive chunks fall into distinct banks (f32 chunks are one
// float4, conflict-free unpadded).
constexpr int chunk_pad(WFormat f) { return f == WFormat::F32 ? 0 : 4; }
constexpr int chunk_stride(WFormat f) { return chunk_elems(f) + chunk_pad(f); }

// Floats of shared memory a staged vector of n elements takes (whole chunks, padded).
constexpr int64_t staged_floats(WFormat f, int64_t n) {
  return (n + chunk_elems(f) - 1) / chunk_elems(f) * chunk_stride(f);
}
static_assert(staged_floats(WFormat::BF16, kGroupedMoeMaxVector) * 4 <= 48 * 1024 &&
                  staged_floats(WFormat::FP8, kGroupedMoeMaxVector) * 4 <= 48 * 1024,
              "the largest staged vector fits the default 48 KB of dynamic shared memory");

// Rows of n elements take the chunk loads: every row start stays 16-byte aligned (the device
// allocation is); else the element-by-element path.
inline bool chunk_vec(WFormat f, int64_t n) { return n % chunk_elems(f) == 0; }

// Stages v[0, n) chunk by chunk (padded), zeros up to the last chunk's end; the caller synchronizes.
// quant: with act_fp8's round trip applied (1x128 blocks; act_quant.h), as quant_blocks would have
// written it: thread t one 16-element segment (whole float4s of a chunk), 8 threads per 128-block.
template <WFormat F>
__device__ void stage(float* vs, const float* v, int n, bool quant) {
  constexpr unsigned C = chunk_elems(F), S = chunk_stride(F);
  const unsigned cn = (static_cast<unsigned>(n) + C - 1) / C * C;
  if (!quant) {
    for (unsigned i = threadIdx.x; i < cn; i += blockDim.x) vs[i / C * S + i % C] = i < static_cast<unsigned>(n) ? v[i] : 0.f;
    return;
  }
  const int segs = static_cast<int>(quant_segments(n));  // a multiple of 8, as blockDim.x
  const bool vec4 = reinterpret_cast<uintptr_t>(v) % 16 == 0;
  for (int u0 = 0; u0 < segs; u0 += static_cast<int>(blockDim.x)) {  // the same trip count in every thread
    const int j = u0 + static_cast<int>(threadIdx.x);
    const bool live = j < segs;
    float x[kQuantSeg];
    load_segment(v, live ? n : 0, j, vec4, x);
    quant_segment_fp8(x);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const unsigned i = static_cast<unsigned>(j) * kQuantSeg + 4u * q;  // C and S are multiples of 4
      if (live && i < cn)
        *reinterpret_cast<float4*>(vs + i / C * S + i % C) = make_float4(x[4 * q], x[4 * q + 1], x[4 * q + 2], x[4 * q + 3]);
    }
  }
}

template <WFormat F>
struct Chunk {
  uint4 v;     // the 16 bytes
  uint32_t s;  // FP4: the ue8m0 scale code; FP8: the scale's f32 bits (weight_scale); else unused
};

// Chunk gi (elements gi * C ..) of row r of w; n = w.cols, a multiple of C. Offsets in 32 bits:
// a weight of at most kGroupedMoeMaxVector^2 f32 elements (the launcher's bound) is 256 MiB.
template <WFormat F>
__device__ __forceinline__ Chunk<F> chunk_load(const WeightRef& w, int64_t r, int n, int gi) {
  constexpr int C = chunk_elems(F);
  const uint32_t row_bytes = static_cast<uint32_t>(n) / C * 16u;
  Chunk<F> ch;
  ch.v = *reinterpret_cast<const uint4*>(w.data + (static_cast<uint32_t>(r) * row_bytes + static_cast<uint32_t>(gi) * 16u));
  if constexpr (F == WFormat::FP4)  // weight_scale's code: c0 >> 5 = gi
    ch.s = w.scale[static_cast<uint32_t>(r) * static_cast<uint32_t>(w.scale_cols) + static_cast<uint32_t>(gi)];
  else if constexpr (F == WFormat::FP8)
    ch.s = f32_bits(weight_scale(w, r, static_cast<int64_t>(gi) * C));
  else
    ch.s = 0;
  return ch;
}

// Whether wdecode16 takes its fast path for the chunk's segments, and that path's multiplier k.
// FP4: wdecode16 tests fabsf(s * 2^126) < 2^127 with s = ue8m0_to_f32(code) = 2^(code - 127)
// (code 0: 2^-127), i.e. code <= 127, where s * 2^126 = 2^(code - 1), bits (code + 126) << 23.
template <WFormat F>
__device__ __forceinline__ bool chunk_fast(const Chunk<F>& ch, float& k) {
  if constexpr (F == WFormat::FP4) {
    k = bits_f32((ch.s + 126u) << 23);
    return ch.s <= 127u;
  } else if constexpr (F == WFormat::FP8) {  // wdecode16's test: no NaN code (magnitude 0x7F), s * 2^120 finite
    uint32_t nan = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) nan |= ((word_of(ch.v, j) & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u;
    k = bits_f32(ch.s) * 0x1p120f;
    return nan == 0 && fabsf(k) < 0x1p127f;
  } else {
    k = 1.f;
    return true;
  }
}

// Elements 4h .. 4h + 3 of a chunk, wdecode16's fast path (chunk_fast true), element by element.
template <WFormat F>
__device__ __forceinline__ void decode4(const Chunk<F>& ch, int h, float k, float (&a)[4]) {
  if constexpr (F == WFormat::F32) {
    a[0] = bits_f32(ch.v.x), a[1] = bits_f32(ch.v.y), a[2] = bits_f32(ch.v.z), a[3] = bits_f32(ch.v.w);
  } else if constexpr (F == WFormat::BF16) {  // element 2j in the low half of word j
    const uint32_t lo = word_of(ch.v, 2 * h), hi = word_of(ch.v, 2 * h + 1);
    a[0] = bits_f32(lo << 16), a[1] = bits_f32(lo & 0xFFFF0000u);
    a[2] = bits_f32(hi << 16), a[3] = bits_f32(hi & 0xFFFF0000u);
  } else if constexpr (F == WFormat::FP8) {  // byte i of word h
    const uint32_t u = word_of(ch.v, h);
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = fp8_top_to_f32(u << (24 - 8 * i), k);
  } else {  // FP4: nibble (4h + i) % 8 of word (4h + i) / 8
    const uint32_t u = word_of(ch.v, h / 2);
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = fp4_top_to_f32(u << (28 - 4 * (4 * (h % 2) + i)), k);
  }
}

// Element j of an FP8 / FP4 chunk as wload (weight_at) gives it: the slow path, for chunks with a
// NaN code or a scale past wdecode16's fast range.
template <WFormat F>
__device__ __forceinline__ float decode1_exact(const Chunk<F>& ch, int j) {
  if constexpr (F == WFormat::FP4) {
    return fp4_value(word_of(ch.v, j / 8) >> (4 * (j % 8))) * ue8m0_to_f32(static_cast<uint8_t>(ch.s));
  } else {
    return e4m3_to_f32(static_cast<uint8_t>(word_of(ch.v, j / 4) >> (8 * (j % 4)))) * bits_f32(ch.s);
  }
}

__device__ __forceinline__ float fma4(const float (&w)[4], float4 x, float acc) {
  return fmaf(w[3], x.w, fmaf(w[2], x.z, fmaf(w[1], x.y, fmaf(w[0], x.x, acc))));
}

// One step of a warp: for each of its P rows, the lane's chunks g0, g0 + kWarp, ..., (U of them,
// those below nch) against the staged vector, in that order and element by element within a
// chunk. A staged float4 of x feeds all P rows.
template <WFormat F, bool RW, int P, int U>
__device__ __forceinline__ void step_dots(const Chunk<F> (&c)[P][U], const float* vs, int g0, int nch,
                                          float (&acc)[P]) {
  constexpr int C = chunk_elems(F), S = chunk_stride(F);
  float k[P][U];
  bool fast = true;
#pragma unroll
  for (int p = 0; p < P; ++p)
#pragma unroll
    for (int u = 0; u < U; ++u) fast = chunk_fast<F>(c[p][u], k[p][u]) && fast;
  if (fast) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int gi = g0 + kWarp * u;
      if (gi >= nch) break;
      const float* xc = vs + gi * S;
#pragma unroll
      for (int h = 0; h < C / 4; ++h) {
        const float4 x = *reinterpret_cast<const float4*>(xc + 4 * h);
#pragma unroll
        for (int p = 0; p < P; ++p) {
          float a[4];
          decode4<F>(c[p][u], h, k[p][u], a);
          if constexpr (RW) {
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = round_bf16(a[i]);
          }
          acc[p] = fma4(a, x, acc[p]);
        }
      }
    }
  } else if constexpr (F == WFormat::FP8 || F == WFormat::FP4) {  // same products, same order
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int gi = g0 + kWarp * u;
      if (gi >= nch) break;
      const float* xc = vs + gi * S;
#pragma unroll
      for (int p = 0; p < P; ++p)
#pragma unroll 4
        for (int j = 0; j < C; ++j) {
          float wv = decode1_exact<F>(c[p][u], j);
          if constexpr (RW) wv = round_bf16(wv);
          acc[p] = fmaf(wv, xc[j], acc[p]);
        }
    }
  }
}

// A weight row of a warp's group: row r of w, or none (live false: dot product never stored).
struct RowRef {
  WeightRef w;
  int64_t r;
  bool live;
};

// One warp's dot products of `groups` groups of P rows (rows(g, p) -> RowRef) with the vector
// v[0, n) (after act_fp8's round trip if quant), which the whole block stages in vs (every warp
// of the block calls this exactly once:
// its barrier is the block's); done(g, sums) gets group g's P sums (in every lane). Each row's sum: the lane's
// chunks g = lane, lane + kWarp, ... in order, element by element (fmaf), then warp_sum; it
// depends on n and the format only, never on P, U, the group or the slot.
// Chunk path: a step is U chunks of each of the P rows (16 P U bytes per lane), and the next
// step's loads are issued before the current one's math, so a lane always has one step in flight
// (two while it waits), also across groups; the first step is in flight while v is staged.
template <WFormat F, bool RW, int P, int U, class Rows, class Done>
__device__ __forceinline__ void warp_dots(int groups, bool vec, const float* v, int n, bool quant, float* vs, Rows rows,
                                          Done done) {
  constexpr int C = chunk_elems(F), S = chunk_stride(F);
  const int lane = threadIdx.x % kWarp;
  if (!vec) {  // element by element (wload), the same order with chunks of C elements
    stage<F>(vs, v, n, quant);
    __syncthreads();
#pragma unroll 1
    for (int g = 0; g < groups; ++g) {
      float acc[P];
#pragma unroll
      for (int p = 0; p < P; ++p) acc[p] = 0.f;
#pragma unroll 1
      for (int c0 = lane * C; c0 < n; c0 += kWarp * C)
#pragma unroll 1
        for (int e = 0; e < C && c0 + e < n; ++e) {
          const int c = c0 + e;
          const float x = vs[c / C * S + e];
#pragma unroll
          for (int p = 0; p < P; ++p) {
            const RowRef rr = rows(g, p);
            if (!rr.live) continue;
            float wv = wload<F>(rr.w, rr.r, c);
            if constexpr (RW) wv = round_bf16(wv);
            acc[p] = fmaf(wv, x, acc[p]);
          }
        }
#pragma unroll
      for (int p = 0; p < P; ++p) acc[p] = warp_sum(acc[p]);
      done(g, acc);
    }
    return;
  }
  const int nch = n / C;
  const int Q = (nch + kWarp * U - 1) / (kWarp * U);  // steps per group
  const int steps = groups * Q;
  int lg = 0, lq = 0;  // the next step to load: group, step within the group
  int cg = 0, cq = 0;  // the next step to compute
  float acc[P];
  auto load = [&](Chunk<F> (&c)[P][U]) {
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const RowRef rr = rows(lg, p);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int gi = lane + kWarp * (lq * U + u);
        Chunk<F> ch{};
        if (rr.live && gi < nch) ch = chunk_load<F>(rr.w, rr.r, n, gi);
        c[p][u] = ch;
      }
    }
    if (++lq == Q) lq = 0, ++lg;
  };
  auto run = [&](const Chunk<F> (&c)[P][U]) {
    if (cq == 0) {
#pragma unroll
      for (int p = 0; p < P; ++p) acc[p] = 0.f;
    }
    step_dots<F, RW, P, U>(c, vs, lane + kWarp * U * cq, nch, acc);
    if (++cq == Q) {
#pragma unroll
      for (int p = 0; p < P; ++p) acc[p] = warp_sum(acc[p]);
      done(cg, acc);
      cq = 0, ++cg;
    }
  };
  Chunk<F> a[P][U], b[P][U];
  if (steps > 0) load(a);
  stage<F>(vs, v, n, quant);
  __syncthreads();
#pragma unroll 1
  for (int k = 0; k < steps; k += 2) {
    if (k + 1 < steps) load(b);
    run(a);
    if (k + 1 >= steps) break;
    if (k + 2 < steps) load(a);
    run(b);
  }
}

// Up: a warp's groups are rows r0, r0 + kWarps, ... (kUpGroups of them) of w1 and w3 together
// (P = 2: one staged x float4 feeds both), U = 2 chunks of each per step (64 B per lane).
// Down: groups of kDownP consecutive rows of w2 (one staged h float4 feeds 4 rows), one chunk
// of each per step (64 B per lane), kDownGroups groups per warp.
constexpr int kUpGroups = 4, kUpU = 2;
constexpr int kDownP = 4, kDownGroups = 2, kDownU = 1;
constexpr int kUpBlockRows = kWarps * kUpGroups;                // 32 (16 on HIP)
constexpr int kDownBlockRows = kWarps * kDownP * kDownGroups;   // 64 (32 on HIP)

template <WFormat F, bool RW>
__global__ void __launch_bounds__(kThreads, kMinBlocks) up_kernel(GroupedMoeArgs a) {
  pdl_begin();
  PLUMB_DYNAMIC_SHARED(float, xs);
  const int64_t s = blockIdx.y, n = s / a.K, I = a.I;
  const int64_t rb = static_cast<int64_t>(blockIdx.x) * kUpBlockRows;
  const int32_t e = a.experts[s];
  if (!live_expert(e, a.E)) {  // skipped by the combine, as the CPU skips ids outside [0, E)
    for (int i = threadIdx.x; i < kUpBlockRows; i += kThreads)
      if (rb + i < I) a.h[s * I + rb + i] = 0.f;
    return;
  }
  const int lane = threadIdx.x % kWarp;
  const int64_t r0 = rb + threadIdx.x / kWarp;  // group g: row r0 + g * kWarps
  const int64_t left = r0 < I ? (I - r0 + kWarps - 1) / kWarps : 0;
  const int groups = static_cast<int>(left < kUpGroups ? left : kUpGroups);
  const WeightRef w1 = a.table[3 * e], w3 = a.table[3 * e + 1];
  auto rows = [&](int g, int p) { return RowRef{p == 0 ? w1 : w3, r0 + g * kWarps, true}; };
  // Group g's gate and up sums end in lanes 2g and 2g + 1 (one register whatever the groups); the
  // SwiGLU epilogue runs after the stream, in lanes 2g, so no weight load waits on it.
  float mine = 0.f;
  auto done = [&](int g, const float (&gu)[2]) {
    if (lane == 2 * g) mine = gu[0];
    if (lane == 2 * g + 1) mine = gu[1];
  };
  warp_dots<F, RW, 2, kUpU>(groups, a.vec_up, a.x + n * a.D, static_cast<int>(a.D), a.quant_x, xs, rows, done);
  const float other = shfl_xor(mine, 1);
  if (lane % 2 != 0 || lane / 2 >= groups) return;
  const int64_t r = r0 + lane / 2 * kWarps;
  a.h[s * I + r] = grouped_swiglu(a, s, mine, other);
}

template <WFormat F, bool RW>
__global__ void __launch_bounds__(kThreads, kMinBlocks) down_kernel(GroupedMoeArgs a) {
  pdl_begin();
  PLUMB_DYNAMIC_SHARED(float, hs);
  const int64_t s = blockIdx.y, D = a.D;
  const int32_t e = a.experts[s];
  if (!live_expert(e, a.E)) return;
  const int lane = threadIdx.x % kWarp;
  // group g: rows d0 + g * kWarps * kDownP + p, p < kDownP
  const int64_t d0 = static_cast<int64_t>(blockIdx.x) * kDownBlockRows + threadIdx.x / kWarp * kDownP;
  const int64_t left = d0 < D ? (D - d0 + kWarps * kDownP - 1) / (kWarps * kDownP) : 0;
  const int groups = static_cast<int>(left < kDownGroups ? left : kDownGroups);
  const WeightRef w2 = a.table[3 * e + 2];
  auto rows = [&](int g, int p) {
    const int64_t d = d0 + static_cast<int64_t>(g) * (kWarps * kDownP) + p;
    return RowRef{w2, d, d < D};
  };
  auto done = [&](int g, const float (&y)[kDownP]) {  // lane 0 stores the group's rows
    const int64_t d = d0 + static_cast<int64_t>(g) * (kWarps * kDownP);
    if (lane != 0) return;
#pragma unroll
    for (int p = 0; p < kDownP; ++p)
      if (d + p < D) a.ys[s * D + d + p] = a.round_bf16 ? round_bf16(y[p]) : y[p];
  };
  warp_dots<F, RW, kDownP, kDownU>(groups, a.vec_down, a.h + s * a.I, static_cast<int>(a.I),
                                   a.quant_h && !a.quant_h_launch, hs, rows, done);
}

// combine_kernel's sum for up to kCombineK slots a token: the slot ids first, then every live
// slot's ys (and weight) loaded at once (a dead slot, whose ys row was never written, loads a live
// one's instead: clamped, always valid and initialized), then added in (expert id, k) order, which
// each slot's rank gives. (The kernel's loop form loads each slot's value only once it has found
// the slot: K dependent loads in a row.)
constexpr int kCombineK = 8;  // V3's top 8, V4-Flash's 6

__device__ __forceinline__ float add_slot(const GroupedMoeArgs& a, float acc, float y, float w) {
  const float t = a.weight_after ? __fmul_rn(y, w) : y;
  return a.accumulate_bf16 ? round_bf16(__fadd_rn(acc, round_bf16(t))) : __fadd_rn(acc, t);
}

__device__ __forceinline__ float combine_registers(const GroupedMoeArgs& a, int64_t n, int64_t d) {
  const int K = static_cast<int>(a.K);
  int32_t ex[kCombineK];
#pragma unroll
  for (int k = 0; k < kCombineK; ++k) ex[k] = a.experts[n * a.K + (k < K ? k : K - 1)];
  bool live[kCombineK];
  int any = -1;  // a live slot, if the token has one
#pragma unroll
  for (int k = kCombineK - 1; k >= 0; --k) {
    live[k] = k < K && live_expert(ex[k], a.E);
    if (live[k]) any = k;
  }
  if (any < 0) return 0.f;
  float yv[kCombineK], wv[kCombineK];
#pragma unroll
  for (int k = 0; k < kCombineK; ++k) {
    const int64_t s = n * a.K + (live[k] ? k : any);
    yv[k] = a.ys[s * a.D + d];
    wv[k] = a.weight_after ? a.weights[s] : 0.f;
  }
  int rank[kCombineK];  // slot k's place: the slots of a lower id, or of its id and a lower k
#pragma unroll
  for (int k = 0; k < kCombineK; ++k) {
    rank[k] = 0;
#pragma unroll
    for (int j = 0; j < kCombineK; ++j) rank[k] += j < K && (ex[j] < ex[k] || (ex[j] == ex[k] && j < k));
  }
  float acc = 0.f;
#pragma unroll
  for (int r = 0; r < kCombineK; ++r)  // (dead slots hold ranks too, so the live ones' ranks have gaps)
#pragma unroll
    for (int k = 0; k < kCombineK; ++k)
      if (live[k] && rank[k] == r) acc = add_slot(a, acc, yv[k], wv[k]);
  return acc;
}

// y[n] = bf16?(acc + shared[n]), acc the token's slots in (expert id, k) order from zero: the CPU
// loops over experts in id order and, within one, over (token, k) ascending.
__global__ void combine_kernel(GroupedMoeArgs a, const float* shared, float* y) {
  pdl_begin();
  const int64_t total = a.N * a.D;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / a.D, d = i % a.D;
    float acc = 0.f;
    if (a.K <= kCombineK) {
      acc = combine_registers(a, n, d);
    } else {
      const int32_t* ex = a.experts + n * a.K;
      int32_t last = -1;  // the expert id added last; next: the smallest id above it, all its k in order
      for (int64_t done = 0; done < a.K;) {
        int32_t next = INT32_MAX;
        for (int64_t k = 0; k < a.K; ++k)
          if (ex[k] > last && ex[k] < next) next = ex[k];
        if (next == INT32_MAX) break;
        for (int64_t k = 0; k < a.K; ++k) {
          if (ex[k] != next) continue;
          ++done;
          if (!live_expert(next, a.E)) continue;
          const int64_t s = n * a.K + k;
          acc = add_slot(a, acc, a.ys[s * a.D + d], a.weight_after ? a.weights[s] : 0.f);
        }
        last = next;
      }
    }
    const float v = __fadd_rn(acc, shared[i]);
    y[i] = a.round_bf16 ? round_bf16(v) : v;
  }
}

}  // namespace

gpuError_t grouped_moe_experts(const GroupedMoeArgs& a, gpuStream_t s) {
  const int64_t S = a.N * a.K;
  if (S <= 0 || a.D <= 0 || a.I <= 0) return gpuGetLastError();
  const std::size_t up_smem = static_cast<std::size_t>(staged_floats(a.format, a.D)) * sizeof(float);
  const std::size_t down_smem = static_cast<std::size_t>(staged_floats(a.format, a.I)) * sizeof(float);
  const dim3 up(static_cast<unsigned>((a.I + kUpBlockRows - 1) / kUpBlockRows), static_cast<unsigned>(S));
  const dim3 down(static_cast<unsigned>((a.D + kDownBlockRows - 1) / kDownBlockRows), static_cast<unsigned>(S));
  GroupedMoeArgs b = a;
  b.vec_up = chunk_vec(a.format, a.D);
  b.vec_down = chunk_vec(a.format, a.I);
  auto up_down = [&]<WFormat F, bool RW>() {
    const gpuError_t e = launch(up_kernel<F, RW>, up, kThreads, up_smem, s, b);
    if (e != gpuSuccess) return e;
    if (a.quant_h && a.quant_h_launch) {
      const gpuError_t q = quant_blocks(a.h, a.h, S, a.I, a.I, 128, false, s);
      if (q != gpuSuccess) return q;
    }
    return launch(down_kernel<F, RW>, down, kThreads, down_smem, s, b);
  };
  return dispatch_format(a.format, [&]<WFormat F>() {
    return a.round_w ? up_down.template operator()<F, true>() : up_down.template operator()<F, false>();
  });
}

gpuError_t grouped_moe_combine(const GroupedMoeArgs& a, const float* shared, float* y, gpuStream_t s) {
  const int64_t total = a.N * a.D;
  if (total <= 0) return gpuGetLastError();
  const int64_t b = (total + kThreads - 1) / kThreads;
  return launch(combine_kernel, static_cast<unsigned>(b < 65536 ? b : 65536), kThreads, 0, s, a, shared, y);
}

}  // namespace plumb::gpu::k
