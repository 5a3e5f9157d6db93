#pragma once
// The DeepSeek-V4 forward pass (MODEL-SPEC 3), written once against the Backend op interface.
// A call takes a ragged batch: several sequences, each continuing from its own state with any
// number of new tokens, so prefill of any length, chunked prefill and 1-token decode are the same
// code path and give the same logits.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "plumb/backend/backend.h"
#include "plumb/format/config.h"
#include "plumb/model/kv_pool.h"
#include "plumb/model/model.h"
#include "plumb/model/numerics.h"
#include "plumb/model/state_v4.h"
#include "plumb/model/taps.h"
#include "plumb/model/weights_v4.h"

namespace plumb::v4 {

class ForwardV4 {
 public:
  // `cfg` and `weights` must outlive this object.
  // `par`: the multi-process layout (dist/parallel.h; null: one process), outliving this object.
  ForwardV4(backend::Backend& be, const ModelConfig& cfg, const ModelWeights& weights, Numerics numerics,
            dist::Parallel* par = nullptr);

  // A fresh sequence at position 0 (compressor state kv = 0, score = -inf).
  SequenceState new_sequence() const;

  // Model::forward: logits [logit_rows.size(), vocab] (f32) of the batch rows `logit_rows`; the
  // states must be v4::SequenceStates. Taps, when enabled, receive the batch's intermediates
  // (rows in batch order; final_norm and logits only for `logit_rows`).
  backend::Tensor forward(std::span<const SequenceStep> batch, std::span<const int64_t> logit_rows,
                          const Taps& taps = {});
  // Logits of every row of the batch.
  backend::Tensor forward(std::span<const SequenceStep> batch, const Taps& taps = {});

  // The paged compressed entries and indexer keys of every sequence.
  KvPool& kv_pool() { return pool_; }

 private:
  struct Step;  // per-call context (forward_v4.cpp)
  backend::Tensor attention(int64_t layer, const backend::Tensor& x, Step& st);
  backend::Tensor ffn(int64_t layer, const backend::Tensor& x, Step& st);
  // Returns the entries it wrote (as computed, before the storage format; 0 rows when none).
  backend::Tensor compress(int64_t layer, const backend::Tensor& x, Step& st, bool indexer);
  backend::Tensor indexer_weights(int64_t layer, const backend::Tensor& x, Step& st);
  backend::Tensor indexer_select(int64_t layer, const backend::Tensor& q_proj, const backend::Tensor& w, Step& st);
  void tap(const Step& st, const std::string& name, const backend::Tensor& t) const;
  // rms_norm, RoPE at `positions` and, when quant_cols > 0, the FP8 round trip of the first
  // quant_cols (64-column blocks) as one backend op (norm_rope). When the taps want data, the
  // stages `stage`.normed and (tap_roped) `stage`.roped come from the separate ops beside it.
  backend::Tensor norm_rope(const backend::Tensor& x, const WeightView* weight, backend::NormMath math,
                            const backend::Tensor& positions, const backend::Tensor& inv_freq, int64_t quant_cols,
                            Step& st, const std::string& stage, bool tap_roped);

  backend::Backend& be_;
  const ModelConfig& cfg_;
  const ModelWeights& w_;
  Numerics numerics_;
  std::vector<backend::Tensor> inv_freq_;  // per layer [rope_dim / 2]
  KvPool pool_;
  std::vector<int> compressed_cache_, index_cache_;  // per layer: the pool's cache index, -1 none
  dist::Parallel* par_ = nullptr;
  struct HeadSlices {  // --tp: this rank's rows of the head-split attention weights
    WeightView wq_b, attn_sink, wo_a, wo_b;
  };
  std::vector<HeadSlices> heads_;  // per layer; empty without head splitting
  int64_t local_heads_ = 0, local_groups_ = 0;
};

}  // namespace plumb::v4
