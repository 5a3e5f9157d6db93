#pragma once
// Tensor-parallel split rules (MODEL-SPEC 4.6; DeepSeek's convert.py) and the layout of a split
// checkpoint: one file per rank, model{rank}-mp{tp}.safetensors, names unchanged.
//   V4 (native names): wq_b (attention and indexer), wo_a, head, embed, weights_proj and
//     attn_sink are split on dim 0, wo_b on dim 1; routed expert e goes to rank e / (E / tp);
//     everything else (shared experts included) is replicated.
//   V3 (HF names, the same model-parallel layout as DeepSeek-V3's convert.py): embed_tokens,
//     q_proj, q_b_proj, kv_b_proj, gate_proj, up_proj, lm_head and the MTP shared_head.head on
//     dim 0; o_proj and down_proj on dim 1 (dense and shared MLPs); routed experts by id.
// A scale tensor follows its weight: split on the same dim, which must cut whole scale blocks.
#include <cstdint>
#include <string>

#include "plumb/format/config.h"

namespace plumb::convert {

struct SplitRule {
  enum Kind { Replicate, Split, Expert } kind = Replicate;
  int dim = 0;         // Split
  int64_t expert = 0;  // Expert: routed expert id
};

// The rule for a tensor name; for a scale tensor, the rule of its weight.
SplitRule split_rule(Arch arch, const std::string& name);

// "model{rank}-mp{tp}.safetensors"
std::string tp_file_name(int64_t rank, int64_t tp);

}  // namespace plumb::convert
