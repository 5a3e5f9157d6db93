#pragma once
// A loaded DeepSeek-V3 model ready to run (checkpoint, config, bound weights, a backend and the
// forward), for `plumb logits` / `plumb generate` / `plumb verify` and the tests, in the
// reference numerics (f32, what HF computes) or the faithful ones (the release's bf16
// inference/model.py; CPU backend only for now).
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "plumb/model/forward_v3.h"
#include "plumb/model/runner_v4.h"

namespace plumb::v3 {

class ModelV3 {
 public:
  static std::unique_ptr<ModelV3> load(const std::string& dir, const v4::RunOptions& opt);

  const ModelConfig& config() const { return cfg_; }
  ForwardV3& forward() { return *fwd_; }
  backend::Backend& backend() { return *be_; }

  // Logits [T, vocab] for every position of one prompt (one prefill).
  std::vector<float> prompt_logits(std::span<const int32_t> ids, const Taps& taps = {});
  // Prefill then 1-token decode steps on the latent cache; returns the new ids.
  std::vector<int32_t> generate(std::span<const int32_t> prompt, const v4::ModelV4::GenerateOptions& g);

 private:
  ModelV3() = default;
  std::vector<float> run(SequenceState& s, std::span<const int32_t> ids, const Taps& taps = {});
  Checkpoint ckpt_;
  ModelConfig cfg_;
  ModelWeights weights_;
  std::unique_ptr<backend::Backend> be_;
  std::unique_ptr<ForwardV3> fwd_;
};

}  // namespace plumb::v3
