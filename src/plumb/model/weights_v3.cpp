// Binding of a DeepSeek-V3 checkpoint (HF names) to typed weight views (layout_v3.h).
#include "plumb/model/weights_v3.h"

#include <fmt/format.h>

#include "plumb/model/layout_v3.h"
#include "plumb/util/error.h"

namespace plumb::v3 {

ModelWeights bind_weights(const Checkpoint& ckpt, const ModelConfig& c, BindReport* report_out) {
  if (c.arch != Arch::DeepseekV3) fail("bind_weights: {} is not a deepseek_v3 checkpoint", c.model_type);
  BindReport local;
  BindReport& report = report_out ? *report_out : local;
  Binder b(ckpt, report, ScaleNaming::WeightScaleInv);
  ModelWeights mw = walk_model(b, c);
  // The MTP layers follow the main ones as model.layers.{n..n+k-1}; the forward does not use them.
  std::vector<std::string> mtp;
  for (int64_t i = 0; i < c.num_nextn_predict_layers; ++i)
    mtp.push_back(fmt::format("model.layers.{}.", c.num_hidden_layers + i));
  mw.mtp_tensors_skipped = b.collect_unexpected([&](const std::string& name) {
    for (const auto& p : mtp)
      if (name.rfind(p, 0) == 0) return true;
    return false;
  });
  // One routed-expert format for the model (all FP8, or all dense after `convert cast`).
  bool first = true;
  for (const auto& L : mw.layers)
    for (const auto& e : L.moe.experts)
      for (const WeightView* w : {&e.gate_proj, &e.up_proj, &e.down_proj}) {
        if (!w->present()) continue;
        if (first) mw.expert_format = w->format;
        if (!first && w->format != mw.expert_format)
          report.mismatched.push_back(fmt::format("{}: expert format {} differs from the model's {}", w->name,
                                                  weight_format_name(w->format),
                                                  weight_format_name(mw.expert_format)));
        first = false;
      }
  if (!report_out && !report.ok()) fail("{}: checkpoint does not match its config: {}", ckpt.root(), report.summary());
  return mw;
}

}  // namespace plumb::v3
