// Binding of a DeepSeek-V4 checkpoint (native names) to typed weight views. Every expected name
// is derived from the config; whatever the checkpoint holds beyond that is "unexpected".
#include "plumb/model/weights_v4.h"

#include "plumb/model/layout_v4.h"

#include <fmt/format.h>

#include "plumb/util/error.h"

namespace plumb::v4 {
namespace {

// One expert format for the whole model, detected from the stored tensors (not from config).
void detect_expert_format(ModelWeights& mw, BindReport& report) {
  bool first = true;
  for (auto& L : mw.layers) {
    for (auto& e : L.ffn.experts) {
      for (const WeightView* w : {&e.w1, &e.w2, &e.w3}) {
        if (!w->present()) continue;
        if (first) {
          mw.expert_format = w->format;
          first = false;
        } else if (w->format != mw.expert_format) {
          report.mismatched.push_back(fmt::format("{}: expert format {} differs from the model's {}", w->name,
                                                  weight_format_name(w->format),
                                                  weight_format_name(mw.expert_format)));
        }
      }
    }
    L.ffn.expert_format = mw.expert_format;
  }
}

}  // namespace

ModelWeights bind_weights(const Checkpoint& ckpt, const ModelConfig& c, BindReport* report_out) {
  if (c.arch != Arch::DeepseekV4) fail("bind_weights: {} is not a deepseek_v4 checkpoint", c.model_type);
  BindReport local;
  BindReport& report = report_out ? *report_out : local;
  Binder b(ckpt, report, ScaleNaming::DotScale);
  // MTP layers are optional in a checkpoint (converted checkpoints drop them): bind them only
  // when the checkpoint has any mtp.* tensor, so their absence is not reported as missing.
  bool has_mtp = false;
  for (const TensorInfo* t : ckpt.tensors()) has_mtp |= t->name.rfind("mtp.", 0) == 0;
  ModelWeights mw = walk_model(b, c, has_mtp);
  b.collect_unexpected();
  detect_expert_format(mw, report);
  if (!report_out && !report.ok()) fail("{}: checkpoint does not match its config: {}", ckpt.root(), report.summary());
  return mw;
}

}  // namespace plumb::v4
