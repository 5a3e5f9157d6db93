#pragma once
// Next-token selection from logits, with the knobs users know from HF transformers and OpenAI-style
// APIs. Order of operations (as in HF generate): repetition penalty, presence/frequency
// penalties, then temperature, top-k, top-p, min-p, and a draw from the remaining distribution
// (or argmax when greedy). Draws use a seeded 64-bit Mersenne Twister and only its raw output, so
// a seed gives the same tokens on every platform.
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace plumb {

struct SamplingParams {
  bool greedy = false;       // argmax; also implied by temperature == 0
  float temperature = 1.0f;  // divides the logits; must be >= 0
  int top_k = 0;             // keep the k most likely tokens (ties at the k-th kept); 0 = off
  float top_p = 1.0f;        // keep the most likely tokens until their mass reaches top_p; 1 = off
  float min_p = 0.0f;        // drop tokens less likely than min_p * the top probability; 0 = off
  // HF: the logit of every token seen so far (prompt and output) is divided by the penalty when
  // positive and multiplied by it when negative. 1 = off.
  float repetition_penalty = 1.0f;
  // OpenAI / vLLM: subtract presence_penalty once, and frequency_penalty per occurrence, from the
  // logits of tokens generated so far (the prompt does not count). 0 = off.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::uint64_t seed = 0;
};

// Throws plumb::Error naming the first parameter out of range.
void validate(const SamplingParams& params);

// The defaults a model directory's generation_config.json sets (do_sample, temperature, top_k,
// top_p, min_p, repetition_penalty); SamplingParams{} where the file or a field is absent.
SamplingParams sampling_defaults_for(const std::string& model_dir);

class Sampler {
 public:
  Sampler(const SamplingParams& params, std::size_t vocab_size);

  // Records prompt tokens (repetition penalty only) and generated tokens (all penalties).
  void observe_prompt(std::span<const std::uint32_t> tokens);
  void observe_generated(std::uint32_t token);

  // Picks the next token. `logits` must have vocab_size entries; the ids in `excluded` (ascending)
  // are never picked, as if their logits were -inf (without a masked copy of the vocabulary).
  std::uint32_t sample(std::span<const float> logits, std::span<const std::uint32_t> excluded = {});

  // The distribution sample() draws from for these logits (zeros where filtered out); greedy
  // gives a one-hot vector. For tests and diagnostics.
  std::vector<double> distribution(std::span<const float> logits, std::span<const std::uint32_t> excluded = {}) const;

 private:
  // The tokens left after temperature and the filters, in index order, and their probabilities.
  struct Draw {
    std::vector<std::uint32_t> ids;
    std::vector<double> p;
  };
  Draw filtered(std::span<const float> logits, std::span<const std::uint32_t> excluded) const;
  std::uint32_t greedy_pick(std::span<const float> logits, std::span<const std::uint32_t> excluded) const;
  bool penalties_apply() const;
  std::vector<float> penalized(std::span<const float> logits) const;
  std::span<const float> scores(std::span<const float> logits, std::vector<float>& copy) const;
  bool is_greedy() const { return params_.greedy || params_.temperature == 0.0f; }
  double uniform();  // in [0, 1)

  SamplingParams params_;
  std::size_t vocab_size_;
  std::vector<bool> seen_;                 // in prompt or output
  std::vector<std::uint32_t> generated_;   // per token: times generated
  std::vector<std::uint32_t> touched_;     // tokens with seen_ or generated_ set, for sparse updates
  std::mt19937_64 rng_;
};

}  // namespace plumb
