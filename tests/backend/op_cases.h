#pragma once
// The op cases, as data: one list per op of printable parameters, with the tolerance each
// precision gets against the CPU reference. Two consumers run the same lists, as llama.cpp's
// test-backend-ops runs its cases in eval and perf modes:
//   eval: the GPU op harness (tests/backend/gpu_*_test.cpp) runs each case on random inputs
//         through the CPU reference and the GPU backend and compares within the tolerance;
//   perf: `plumb_bench --ops` (bench/op_bench.cpp) times each case on one backend.
// Shapes: the real V4-Flash / V3 dims plus odd edge sizes. No gtest here (the bench links none).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "plumb/backend/backend.h"

namespace plumb::test {

// ---- tolerances on max|got - ref| / max|ref| (GpuOps::expect_close)
inline constexpr double kF32 = 1e-5;      // f32 op, short reductions (<= ~1k terms)
inline constexpr double kF32Long = 1e-4;  // f32, long reductions (K = 4096+, attention over
                                          // hundreds of keys): summation order differs between a
                                          // sequential CPU loop and a tree / warp reduction, and
                                          // f32 rounding error grows ~ sqrt(K) * 2^-24 * |terms|
inline constexpr double kBf16Ulp = 8e-3;  // Round::BF16 outputs: a last-bit difference before
                                          // rounding can flip one bf16 ulp, which is up to 2^-7
                                          // of the value (at the bottom of a binade), so of max|ref|
inline constexpr double kBf16Mma = 1e-2;  // bf16 tensor-core path fed arbitrary f32 activations

inline double f32_tol(int64_t reduction) { return reduction > 1024 ? kF32Long : kF32; }

// A comparison's bar (GpuOps::expect_close): every element within `tol` of max|ref|, except that
// up to `flip_rows` rows (the shape's last dimension is a row) may reach `flip_tol`: the room an
// FP8-quantized intermediate needs (moe_tolerance). A plain double is a bar without that room.
struct Bar {
  Bar(double t) : tol(t), flip_tol(t) {}  // NOLINT(google-explicit-constructor): every bar is a double
  Bar(double t, double ft, int64_t rows) : tol(t), flip_tol(ft), flip_rows(rows) {}
  double tol, flip_tol;
  int64_t flip_rows = 0;
};
inline double with_round(double tol, backend::Round r) { return r == backend::Round::BF16 ? tol + kBf16Ulp : tol; }

// ---- projections
struct LinearCase {  // x [N, G*K], w [G*R, K]
  int64_t N, R, K, G;
  const char* what;
  std::string name() const {
    return "N=" + std::to_string(N) + " R=" + std::to_string(R) + " K=" + std::to_string(K) + " G=" + std::to_string(G) +
           " (" + what + ")";
  }
};
// Every weight format, option and path (GpuOps.LinearEveryFormatOptionAndPath).
inline std::vector<LinearCase> linear_cases() {
  return {
      {1, 4096, 4096, 1, "decode row, hidden x hidden"},
      {5, 1024, 4096, 1, "q_lora from hidden"},
      {3, 2 * 1024, 4096, 2, "grouped o projection (2 of V4-Flash's 8 groups of 4096 -> 1024)"},
      {7, 37, 200, 1, "K not a multiple of 128 or 32"},
      // 16 rows, not 1: with a single output max|ref| is one dot product, which cancels to
      // ~1% of its terms in ~2% of draws and then fails f32's bar on rounding alone (seen on an
      // H100 and replayed on the emulator: PLUMB_TEST_SEED=4007946697157670052, score 2.8e-5).
      {16, 1, 64, 1, "one output column"},
      {33, 130, 416, 2, "grouped, odd rows"},
  };
}
// LinearOpts::bf16_weight, the V3 release's weight dequantisation to bf16.
inline std::vector<LinearCase> linear_bf16_weight_cases() {
  return {{1, 512, 7168, 1, "V3 decode row"}, {3, 130, 200, 1, "odd"}, {70, 96, 416, 1, "GEMM rows"}};
}
// The FP8 tensor-core path (sm_90: act_fp8 FP8 weights, K % 128 == 0, R % 64 == 0).
inline std::vector<LinearCase> linear_fp8_cases() {
  return {
      {16, 1024, 4096, 1, "q_lora from hidden, 16 rows"},
      {1, 4096, 1024, 1, "1 row (forced: Auto takes the GEMV)"},
      {8, 8192, 1024, 1, "8 rows (a batch-8 decode step)"},
      {200, 512, 1024, 1, "200 rows (partial row tile)"},
      {33, 2 * 1024, 4096, 2, "grouped o projection"},
      {64, 3 * 64, 256, 3, "three groups of 64 rows"},
  };
}

// ---- elementwise, norms, RoPE, quantization
inline std::string shape_name(const backend::Shape& s) { return backend::Tensor(nullptr, backend::ElemType::F32, s).shape_str(); }
// rms_norm, scale, add (the last dim is normalised).
inline std::vector<backend::Shape> norm_shapes() {
  return {{1, 4096}, {7, 4096}, {5, 80}, {3, 64, 512}, {2, 4, 1024}};
}

struct RopeCase {  // x [N, H, Dh], F frequencies rotate the last 2F dims
  int64_t N, H, Dh, F;
  std::string name() const {
    return std::to_string(N) + "x" + std::to_string(H) + "x" + std::to_string(Dh) + " F=" + std::to_string(F);
  }
};
inline std::vector<RopeCase> rope_cases() { return {{4, 64, 512, 32}, {1, 1, 512, 32}, {5, 64, 128, 32}, {3, 2, 12, 4}, {6, 1, 64, 32}}; }

struct QuantFp8Case {  // x [N, D], the first `cols` columns in blocks of `block`
  int64_t N, D, cols, block;
  std::string name() const {
    return std::to_string(D) + " cols " + std::to_string(cols) + " block " + std::to_string(block) + " N=" +
           std::to_string(N);
  }
};
inline std::vector<QuantFp8Case> quant_fp8_cases() {
  return {{4, 576, 512, 64}, {3, 4096, 4096, 128}, {2, 200, 200, 128}, {1, 80, 64, 64}, {5, 1024, 1000, 128}};
}
inline std::vector<backend::Shape> quant_fp4_shapes() { return {{4, 64, 128}, {1, 128}, {3, 80}, {2, 512}}; }  // block 32
inline std::vector<backend::Shape> hadamard_shapes() { return {{4, 64, 128}, {1, 128}, {3, 512}, {2, 4096}, {5, 2}}; }

// ---- mHC: hc = 4 streams of D (V4-Flash: 4 x 4096, 20 Sinkhorn iterations)
struct HcCase {
  int64_t N, D;
  std::string name() const { return "N=" + std::to_string(N) + " D=" + std::to_string(D); }
};
inline std::vector<HcCase> hc_cases() { return {{1, 4096}, {5, 4096}, {3, 16}, {2, 200}}; }

// ---- ragged batches: sequence s has lens[s] new tokens from position starts[s], stacked in order
inline backend::Batch make_batch(const std::vector<int64_t>& starts, const std::vector<int64_t>& lens) {
  backend::Batch b;
  for (std::size_t s = 0; s < starts.size(); ++s) {
    b.seqs.push_back({b.rows, lens[s], starts[s]});
    b.rows += lens[s];
  }
  return b;
}

// ---- compressor and indexer
struct CompressCase {  // ratio 4 overlaps (c = 2); V4-Flash: ratio 4 and 128 at 512, indexer keys ratio 4 at 128
  int64_t ratio, d;
  std::string name() const { return "ratio " + std::to_string(ratio) + " d " + std::to_string(d); }
};
inline std::vector<CompressCase> compress_cases() { return {{4, 512}, {128, 512}, {4, 128}, {16, 64}, {4, 6}}; }

struct IndexerCase {
  int64_t H, di, top_k, ratio;
  std::vector<int64_t> starts, lens;  // one sequence each
  bool integer;                       // small integer values: exact scores, many ties
  backend::Round round;
  const char* what;
  int64_t per_block = 64;  // keys per block of the paged cache (a 256-position block of a CSA layer)
  std::string name() const { return what; }
};
inline std::vector<IndexerCase> indexer_cases() {
  using backend::Round;
  return {
      // V4-Flash: 64 heads x 128, top 512; queries with fewer and with more than 512 entries.
      {64, 128, 512, 4, {0, 1500, 2600}, {7, 1, 4}, true, Round::None, "real dims, integer-valued (exact scores, many ties)"},
      {64, 128, 512, 4, {2040, 3}, {3, 2}, true, Round::BF16, "real dims, bf16 scores"},
      {64, 128, 512, 4, {700, 2900}, {2, 3}, false, Round::None, "real dims, random f32"},
      {64, 128, 512, 4, {0, 1500}, {3, 2}, true, Round::None, "real dims, blocks of 32 keys (128 positions)", 32},
      {3, 8, 3, 4, {2}, {12}, true, Round::None, "small, blocks of one key", 1},
      {4, 32, 4, 4, {0, 9, 30}, {5, 1, 3}, true, Round::BF16, "tiny-model dims, ragged, bf16, blocks of 3", 3},
      {4, 32, 4, 4, {0, 9, 30}, {5, 1, 3}, false, Round::None, "tiny-model dims, ragged, random f32", 2},
      // longer than the GPU kernel decodes once per key (kMaxKeyDims): encoded keys decoded per head
      {4, 160, 4, 4, {0, 9}, {5, 3}, true, Round::None, "keys of 160 dims, integer-valued", 2},
      // 400 query rows (a prefill chunk): the GPU's blocks each walk several groups of entries.
      {8, 32, 16, 4, {300}, {400}, true, Round::None, "400 rows, integer-valued", 16},
  };
}

// ---- attention
struct AttentionCase {
  int64_t H, Dh, W, ratio;
  std::vector<int64_t> starts, lens;
  int sel_k;         // selected entries per query (0: none; all visible compressed entries when ratio > 0)
  bool sink, bf16p;  // sink: a real sink logit (else one far below every score); bf16 probabilities
  backend::Round out;
  const char* what;
  int64_t prob_block = 0;  // AttentionParams::prob_block (the release's softmax blocks)
  int64_t per_block = 64;  // compressed entries per block of the paged cache
  // Not empty: the only selection slots that hold an entry (while visible entries last), instead
  // of the first visible ones with a gap every 7 slots.
  std::vector<int> sel_slots = {};
  std::vector<int64_t> prefill = {};  // AttentionParams::prefill (empty: implied by the slices)
  std::string name() const { return what; }
};
// The P.V on the matrix unit against the CPU (GpuOps.SparseAttentionPvMmaWithinTheOrderFloor):
// just above the floor of the order alone (the CPU's attention sums reversed; docs/CORRECTNESS.md).
inline constexpr double kPvMmaBar = 4e-6;
// The scores (and P.V) on the matrix unit against the CPU (GpuOps.SparseAttentionMmaWithinTheOrderFloor):
// just above the floor of the attn site's order (its scores' dots and sums reversed on the CPU),
// f32 outputs; with bf16 probabilities a score's last bit can flip bf16(e), hence the larger bar.
// Floors (the CUDA emulator, 7 seeds, every case; an H100, 5): f32 probabilities 1.7e-6, bf16
// 1.25e-3. kAttnMmaPartsBar: f32 probabilities with f32 (not bf16-exact) q and KV, which go in as
// three bf16 parts each (9 products a term): the H100 measured 4.0e-6 to 8.5e-6 there (the
// emulator, whose adder rounds each step exactly, 1.5e-6): the matrix unit's own accumulation
// (its adder keeps fewer bits than an f32 add of each product), a floor the CPU's reversed order
// does not model. docs/CORRECTNESS.md, "The scores on the matrix unit".
inline constexpr double kAttnMmaBar = 3e-6, kAttnMmaBf16pBar = 2e-3, kAttnMmaPartsBar = 1.2e-5;
inline std::vector<AttentionCase> sparse_attention_cases() {
  using backend::Round;
  return {
      {64, 512, 128, 0, {0, 300, 1000}, {3, 1, 5}, 0, true, false, Round::None, "window only, ragged with rings"},
      {64, 512, 128, 4, {5, 700}, {2, 3}, 512, true, true, Round::BF16, "release softmax blocks of 64", 64},
      {64, 512, 128, 4, {512}, {1}, 512, true, true, Round::BF16, "one decode row at 512 (a B = 1 CSA step)", 64},
      {4, 192, 128, 4, {0, 300}, {150, 1}, 40, true, true, Round::BF16, "release blocks: prefill > 64, decode", 64},
      // chunks of prefills given their lengths (index_row.h): a chunk inside a 100-token prefill,
      // one straddling the end of a 40-token one (its later rows laid out as decode steps)
      {4, 192, 128, 4, {35, 30}, {20, 20}, 40, true, true, Round::BF16, "release blocks: chunks of given prefills", 64,
       64, {}, {100, 40}},
      {2, 6, 8, 2, {0, 9}, {9, 1}, 0, true, true, Round::None, "release blocks of 2, all compressed", 2},
      {64, 512, 128, 4, {0, 300, 2100}, {3, 1, 4}, 512, true, false, Round::None, "compressed, top-512 selected"},
      {64, 512, 128, 128, {0, 300, 2100}, {3, 1, 4}, 0, true, false, Round::None, "compressed all, ratio 128"},
      {64, 512, 128, 4, {5, 700}, {2, 3}, 512, true, true, Round::BF16, "bf16 probs, bf16 out"},
      {64, 512, 128, 4, {130}, {1}, 0, false, false, Round::None, "negligible sink, one row, all compressed"},
      {64, 512, 128, 4, {0, 300, 2100}, {3, 1, 4}, 512, true, false, Round::None, "top-512, blocks of 32", 0, 32},
      {64, 512, 128, 128, {0, 2100}, {3, 4}, 0, true, false, Round::None, "ratio 128, blocks of 1 (B = 128)", 0, 1},
      {2, 6, 8, 4, {0, 20, 3}, {5, 3, 1}, 3, true, false, Round::None, "small, selected, blocks of 2", 0, 2},
      {2, 6, 8, 2, {0, 9}, {9, 1}, 0, true, true, Round::None, "release blocks of 2, blocks of 3", 2, 3},
      {2, 6, 8, 0, {0, 9}, {9, 1}, 0, true, true, Round::None, "small, window over len > W"},
      // A few live selection slots scattered over the index row (a block's first and last slot,
      // neighbours, the row's last slot) with empty softmax blocks between them: at W 128 the
      // decode rows' slots 128, 191 | 192 | 328, 329 | 578 | 639 fill blocks 2, 3, 5 and 9 of 64,
      // and the rows at 5 and 6 (one entry visible) leave block 1 and all but one slot empty
      {64, 512, 128, 4, {5, 700, 0}, {2, 3, 40}, 512, true, true, Round::BF16, "release blocks, scattered selection", 64,
       64, {0, 63, 64, 200, 201, 450, 511}},
      {64, 512, 128, 4, {5, 700, 0}, {2, 3, 40}, 512, true, false, Round::None, "scattered selection, one softmax", 0, 64,
       {0, 63, 64, 200, 201, 450, 511}},
      // from 128 rows the split form's scores take their row form (q in registers)
      {64, 512, 128, 4, {0, 700}, {129, 1}, 512, true, false, Round::None, "top-512, 130 rows: the scores' row form"},
      // rows * H >= 1024: still the split kernels up to 4096 (sparse_attention_split.cu)
      {64, 512, 128, 4, {0, 40, 300, 2100}, {9, 1, 4, 3}, 512, true, false, Round::None, "top-512, 1088 rows x heads"},
      {4, 192, 128, 4, {0, 300}, {300, 1}, 40, true, true, Round::BF16, "release blocks, 1204 rows x heads", 64},
      // rows * H > 4096: two heads a block in the one-kernel form (sparse_attention.cu), or one for odd H
      {64, 512, 128, 4, {0, 300}, {70, 1}, 512, true, false, Round::None, "top-512, one-kernel form, two heads a block"},
      {4, 192, 128, 4, {0, 300}, {1100, 1}, 40, true, true, Round::BF16, "release blocks, one-kernel form", 64},
      {3, 6, 8, 2, {0, 9}, {1400, 1}, 0, true, false, Round::None, "all compressed, one-kernel form, one head a block"},
  };
}

// MLA: V3's 128 heads, latent 512, rope 64, ragged with a decode row and a prefill from 0, and
// small odd ones.
struct MlaCase {
  int64_t H, R, P;
  std::vector<int64_t> starts, lens;
  int64_t per_block = 256;  // positions per block of the paged caches
  std::string name() const {
    return "H " + std::to_string(H) + " R " + std::to_string(R) + " blocks of " + std::to_string(per_block);
  }
  // bf16 (the V3 release's einsums): a last-bit difference in a score sum can flip its bf16
  // rounding, a 2^-8 change of one logit: a few bf16 ulps of the output.
  double tolerance(backend::Round r) const { return r == backend::Round::BF16 ? 4 * kBf16Ulp : f32_tol(R * 8); }
};
inline std::vector<MlaCase> mla_cases() {
  return {{128, 512, 64, {0, 17, 200}, {5, 1, 3}},
          {16, 512, 64, {0}, {40}},
          {16, 512, 64, {0, 130}, {200, 1}, 128},
          {3, 10, 4, {5, 0}, {3, 6}, 2},
          {3, 10, 4, {5, 0}, {3, 6}, 1}};
}

// ---- mixture of experts
struct RouteCase {
  int64_t N, D, E, K, groups, topk_groups;
  backend::Scoring scoring;
  bool bias, hash, exact;  // exact: bf16-exact small values, so every backend sees identical logits
  float scale;
  const char* what;
  std::string name() const { return what; }
};
inline std::vector<RouteCase> route_cases() {
  using backend::Scoring;
  return {
      {9, 4096, 256, 6, 1, 1, Scoring::SqrtSoftplus, true, false, true, 1.5f, "V4-Flash sqrt-softplus + bias"},
      {4, 4096, 256, 6, 1, 1, Scoring::SqrtSoftplus, false, true, true, 1.5f, "V4-Flash hash routing"},
      {6, 4096, 256, 8, 8, 4, Scoring::Sigmoid, true, false, true, 2.5f, "V3 sigmoid, 8 groups keep 4"},
      {1, 200, 8, 2, 1, 1, Scoring::SqrtSoftplus, true, false, true, 1.f, "one row, odd D"},
      {33, 192, 16, 4, 4, 2, Scoring::Sigmoid, false, false, true, 1.f, "groups, no bias"},
      {17, 512, 64, 6, 1, 1, Scoring::SqrtSoftplus, true, false, false, 1.5f, "random f32 logits"},
  };
}

// A MoE layer: N rows of D, E experts of inter I, top K; `distinct` weight sets shared
// round-robin by the E experts (the real 256 experts at full size would need ~25 GB). format:
// "fp4", "fp8" (ue8m0 scales, V4), "fp8f32" (f32 scales, V3) or "bf16".
struct MoeCase {
  int64_t N, D, I, E, K, distinct;
  const char* format;
  const char* what;
  std::string name() const { return what; }
};
inline std::vector<MoeCase> moe_small_cases() {  // every MoeParams option
  return {{9, 200, 96, 8, 2, 8, "bf16", "moe small bf16"},
          {5, 256, 64, 8, 3, 4, "fp4", "moe small fp4"},
          {1, 192, 96, 8, 2, 2, "fp8", "moe one row fp8"},
          {7, 144, 64, 16, 4, 5, "fp8f32", "moe V3 small fp8 f32-scale"},
          // more token slots than the GPU's grouped expert kernels take: its per-expert path
          {40, 128, 64, 8, 2, 8, "fp4", "moe 80 slots fp4"}};
}
inline std::vector<MoeCase> moe_real_cases() {  // V4-Flash: 256 FP4 experts of 2048, top 6; V3: 7168, top 8
  return {{3, 4096, 2048, 256, 6, 6, "fp4", "moe V4-Flash dims"},
          {1, 4096, 2048, 256, 6, 3, "fp8", "moe V4-Flash dims, one row, fp8"},
          {3, 7168, 2048, 256, 8, 3, "fp8f32", "moe V3 dims, fp8 f32-scale"}};
}
// FP8-quantized activations are exact bf16 inputs: tight. Otherwise a GPU may feed its tensor
// cores bf16 activations: the bf16 tolerance. Sums of 2048..4096 terms: kF32Long. A bf16
// accumulation over K experts can move each of its K roundings by an ulp.
// act_fp8 also quantizes the SwiGLU output h (I values a slot) from sums each backend adds in its
// own order: an h within an f32 rounding of the midpoint of two FP8 values can land on either,
// one FP8 step (<= 2^-3 of |h|) apart. That moves one term wt * h_i * w2[d, i] of a row's sum of
// K * I such terms (random signs) by <= 2^-3 of itself. Against max|ref| (~4.5 sigma of the
// outputs), a flip of an h at 4x its rms, at the bottom of its binade, times its column's largest
// weight (sqrt(3) sigma for these uniform weights) is ~0.19 / sqrt(K * I); a typical flip is ~10x
// less. Flips are rare (PLUMB_TEST_SEED=15851235288770292697 has one in MoeGroupedGemmIsPerExpert's
// bf16 case, on the emulator: 1.5e-4 against the 1e-5 bar, K 4, I 160, room 9.9e-3), so they get
// a few rows at 0.25 / sqrt(K * I), not the whole output: the other rows keep the tight bar.
inline Bar moe_tolerance(const backend::MoeParams& p, int64_t N, int64_t D, int64_t I, int64_t K) {
  double tol = with_round(p.act_fp8 ? f32_tol(std::max(D, I)) : kBf16Mma, p.round);
  if (p.accumulate == backend::Round::BF16) tol += static_cast<double>(K) * kBf16Ulp;
  if (!p.act_fp8) return tol;
  const double flip = std::min(kBf16Mma, 0.25 / std::sqrt(static_cast<double>(K * I)));
  return {tol, tol + flip, std::max<int64_t>(1, N / 32)};
}

}  // namespace plumb::test
