// libFuzzer target for config.json: strict JSON parsing, then the model config's validation. The
// pair must accept the input or throw plumb::Error; an accepted config must satisfy what the rest
// of plumb relies on (positive sizes, a ratio for every layer, token ids inside the vocabulary).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "plumb/format/config.h"
#include "plumb/format/json_util.h"
#include "plumb/util/error.h"

namespace {

void check_invariants(const plumb::ModelConfig& c) {
  const bool sizes_ok = c.vocab_size > 0 && c.hidden_size > 0 && c.num_hidden_layers > 0 && c.num_attention_heads > 0 &&
                        c.max_position_embeddings > 0 && c.bos_token_id < c.vocab_size && c.eos_token_id < c.vocab_size &&
                        c.num_experts_per_tok <= c.n_routed_experts;
  if (!sizes_ok) std::abort();
  const int64_t layers = c.num_hidden_layers + c.num_nextn_predict_layers;
  for (int64_t l = 0; l < layers; ++l) {
    const int64_t r = c.compress_ratio(l);  // must not throw for a layer in range
    if (r < 0 || r > c.max_position_embeddings) std::abort();
    if (c.arch == plumb::Arch::DeepseekV4) c.attn_type(l);
  }
  if (c.arch == plumb::Arch::DeepseekV4 &&
      (c.sliding_window > c.max_position_embeddings || c.index_topk > c.max_position_embeddings ||
       c.num_attention_heads % c.o_groups != 0))
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    check_invariants(plumb::parse_model_config(plumb::parse_json_strict(text, "fuzz.json"), "fuzz.json"));
  } catch (const plumb::Error&) {
    // Rejected input: the expected outcome for most mutations.
  }
  return 0;
}
