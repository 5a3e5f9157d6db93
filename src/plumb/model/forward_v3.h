#pragma once
// The DeepSeek-V3 forward pass (MODEL-SPEC 7), written against the Backend op interface, in two
// numerics profiles:
//   reference: HF transformers' DeepseekV3ForCausalLM in fp32;
//   faithful:  DeepSeek's released inference/model.py with its defaults (gemm_impl "bf16",
//              attn_impl "absorb", default dtype bf16): every FP8 weight dequantized to bf16,
//              every activation a bf16 tensor, softmax in f32 (the list, with the release's line
//              numbers, is in forward_v3.cpp and docs/CORRECTNESS.md).
// Like the V4 forward it takes a ragged batch: several sequences, each continuing from its own
// state, so prefill, chunked prefill and 1-token decode are one code path. Attention runs in the
// absorbed MLA form for every token: the cache holds only the normalized latent (kv_lora_rank)
// and the rotated shared rope key per token.
#include <span>
#include <vector>

#include "plumb/backend/backend.h"
#include "plumb/format/config.h"
#include "plumb/model/kv_pool.h"
#include "plumb/model/model.h"
#include "plumb/model/numerics.h"
#include "plumb/model/taps.h"
#include "plumb/model/weights_v3.h"

namespace plumb::v3 {

// Per-sequence state: nothing beyond plumb::SequenceState's position and KV blocks; the latent
// and rope key caches of every layer are paged in the forward's KvPool.
struct SequenceState final : plumb::SequenceState {};

// A copy of `s`'s fixed state (Model::fork_sequence; none besides the position: the latent and
// rope-key caches are the KvPool's to copy).
SequenceState copy_state(backend::Backend& be, const SequenceState& s);

// YaRN as HF applies it to V3 (modeling_rope_utils._compute_yarn_parameters, yarn_apply_mscale).
struct RopeV3 {
  std::vector<float> inv_freq;  // [qk_rope_head_dim / 2]
  float rope_scale = 1.f;       // cos/sin factor: mscale(f, mscale) / mscale(f, mscale_all_dim)
  float softmax_scale = 0.f;    // qk_head_dim^-0.5 * mscale(f, mscale_all_dim)^2
};
RopeV3 rope_v3(const ModelConfig& cfg);
// The release's YaRN (inference/model.py precompute_freqs_cis and MLA.__init__): the same
// frequency blend written as the release computes it, no cos/sin factor (rope_scale 1), and
// softmax_scale = qk_head_dim^-0.5 * (0.1 * mscale * ln(factor) + 1)^2 with the release's single
// `mscale` taken from rope_scaling.mscale_all_dim (HF's softmax-scale mscale; the real V3 config
// has mscale = mscale_all_dim = 1). YaRN applies whenever rope_scaling is set, i.e. the runtime
// max_seq_len exceeds original_max_position_embeddings as the release requires.
RopeV3 rope_v3_release(const ModelConfig& cfg);

class ForwardV3 {
 public:
  // `cfg` and `weights` must outlive this object.
  // `par`: the multi-process layout (dist/parallel.h; null: one process), outliving this object.
  ForwardV3(backend::Backend& be, const ModelConfig& cfg, const ModelWeights& weights,
            Numerics numerics = Numerics::Reference, dist::Parallel* par = nullptr);

  SequenceState new_sequence() const;

  // Model::forward: logits [logit_rows.size(), vocab] (f32) of the batch rows `logit_rows`; the
  // states must be v3::SequenceStates. Taps, when enabled, receive embed, layer.L.{attn_in,
  // attn.out, ffn_in, ffn.out, residual} (rows in batch order), final_norm and logits (the
  // `logit_rows` only).
  backend::Tensor forward(std::span<const SequenceStep> batch, std::span<const int64_t> logit_rows,
                          const Taps& taps = {});
  // Logits of every row of the batch.
  backend::Tensor forward(std::span<const SequenceStep> batch, const Taps& taps = {});

  // The paged latent and rope key caches of every sequence.
  KvPool& kv_pool() { return pool_; }

 private:
  struct Absorbed {  // kv_b split per head, decoded to f32 (grouped linears, groups = heads; the
                     // faithful profile rounds them to bf16 in the linear, as weight_dequant does)
    std::vector<float> k_t, v;  // [H * R, nope] (K_h transposed) and [H * v, R]
    WeightView k_t_view, v_view;
    WeightView k_t_heads, v_heads;  // --tp: this rank's heads' rows of the two views
  };
  backend::Tensor attention(int64_t layer, const backend::Tensor& x, const backend::Batch& b,
                            const backend::Tensor& positions, const backend::BlockTables& tables);
  backend::Tensor ffn(int64_t layer, const backend::Tensor& x);

  backend::Backend& be_;
  const ModelConfig& cfg_;
  const ModelWeights& w_;
  bool faithful_ = false;
  backend::Round R_ = backend::Round::None;  // BF16 in faithful: every activation a bf16 tensor
  RopeV3 rope_;
  backend::Tensor inv_freq_;
  std::vector<Absorbed> absorbed_;  // per layer
  KvPool pool_;
  std::vector<int> latent_cache_, k_pe_cache_;  // per layer: the pool's cache indices
  dist::Parallel* par_ = nullptr;
  dist::Range heads_;  // this rank's attention heads (all of them without --tp)
};

}  // namespace plumb::v3
