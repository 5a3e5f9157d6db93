// Binding of a DeepSeek-V4 checkpoint (native names) to typed weight views. Every expected name
// is derived from the config; whatever the checkpoint holds beyond that is "unexpected".
#include "plumb/model/weights_v4.h"

#include "plumb/model/layout_v4.h"

#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "plumb/util/error.h"

namespace plumb::v4 {
namespace {

using Shape = std::vector<int64_t>;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool is_dense_float(DType t) { return t == DType::BF16 || t == DType::F16 || t == DType::F32; }

class Binder {
 public:
  Binder(const Checkpoint& ckpt, BindReport& report) : ckpt_(ckpt), report_(report) {}

  // A float tensor stored densely (bf16/f16/f32), of the given shape.
  WeightView dense(const std::string& name, const Shape& shape) {
    const TensorInfo* t = lookup(name);
    if (!t) return {};
    if (!is_dense_float(t->dtype)) return mismatch(*t, "BF16, F16 or F32");
    if (t->shape != shape) return mismatch_shape(*t, shape);
    return view_of(*t, WeightFormat::Dense, shape);
  }

  // An integer table (tid2eid): I64 or I32.
  WeightView ints(const std::string& name, const Shape& shape) {
    const TensorInfo* t = lookup(name);
    if (!t) return {};
    if (t->dtype != DType::I64 && t->dtype != DType::I32) return mismatch(*t, "I64 or I32");
    if (t->shape != shape) return mismatch_shape(*t, shape);
    return view_of(*t, WeightFormat::Dense, shape);
  }

  // A linear weight [rows, cols]: FP8 e4m3 + 128x128 scales, FP4 packed + 1x32 scales
  // (only where allow_fp4), or dense float without scales (e.g. after `convert cast`).
  WeightView linear(const std::string& name, int64_t rows, int64_t cols, bool allow_fp4) {
    const TensorInfo* t = lookup(name);
    if (!t) return {};
    const std::string base = name.substr(0, name.size() - std::string(".weight").size());
    if (is_dense_float(t->dtype)) {
      if (t->shape != Shape{rows, cols}) return mismatch_shape(*t, {rows, cols});
      return view_of(*t, WeightFormat::Dense, {rows, cols});
    }
    if (t->dtype == DType::F8_E4M3) {
      if (t->shape != Shape{rows, cols}) return mismatch_shape(*t, {rows, cols});
      WeightView w = view_of(*t, WeightFormat::FP8Block128, {rows, cols});
      return with_scale(w, base + ".scale", {ceil_div(rows, 128), ceil_div(cols, 128)});
    }
    if (t->dtype == DType::I8 && allow_fp4) {
      if (cols % 2 != 0 || t->shape != Shape{rows, cols / 2}) return mismatch_shape(*t, {rows, cols / 2});
      WeightView w = view_of(*t, WeightFormat::FP4Block32, {rows, cols});
      return with_scale(w, base + ".scale", {rows, ceil_div(cols, 32)});
    }
    return mismatch(*t, allow_fp4 ? "F8_E4M3, I8 (packed FP4) or BF16/F16/F32" : "F8_E4M3 or BF16/F16/F32");
  }

  // Everything in the checkpoint nobody asked for.
  void collect_unexpected() {
    for (const TensorInfo* t : ckpt_.tensors())
      if (!consumed_.count(t->name)) report_.unexpected.push_back(t->name);
  }

 private:
  const TensorInfo* lookup(const std::string& name) {
    const TensorInfo* t = ckpt_.find(name);
    if (!t) {
      report_.missing.push_back(name);
      return nullptr;
    }
    consumed_.insert(name);
    return t;
  }

  WeightView view_of(const TensorInfo& t, WeightFormat f, Shape logical) {
    WeightView w;
    w.name = t.name;
    w.format = f;
    w.dtype = t.dtype;
    w.shape = std::move(logical);
    w.data = ckpt_.view(t).bytes.data();
    return w;
  }

  WeightView with_scale(WeightView w, const std::string& scale_name, const Shape& scale_shape) {
    const TensorInfo* s = lookup(scale_name);
    if (!s) return {};
    if (s->dtype != DType::F8_E8M0 && s->dtype != DType::F32) return mismatch(*s, "F8_E8M0 or F32 scales");
    if (s->shape != scale_shape)
      return mismatch_shape(*s, scale_shape, fmt::format(" for {} {}", w.name, fmt::join(w.shape, "x")));
    w.scale = ckpt_.view(*s).bytes.data();
    w.scale_dtype = s->dtype;
    w.scale_shape = scale_shape;
    return w;
  }

  WeightView mismatch(const TensorInfo& t, const char* expected) {
    report_.mismatched.push_back(fmt::format("{}: dtype {}, expected {}", t.name, dtype_name(t.dtype), expected));
    return {};
  }
  WeightView mismatch_shape(const TensorInfo& t, const Shape& expected, const std::string& why = "") {
    report_.mismatched.push_back(
        fmt::format("{}: shape {}, expected [{}]{}", t.name, t.shape_str(), fmt::join(expected, ", "), why));
    return {};
  }

  const Checkpoint& ckpt_;
  BindReport& report_;
  std::set<std::string> consumed_;
};

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

std::string BindReport::summary(std::size_t max_items) const {
  auto part = [&](const char* what, const std::vector<std::string>& v) -> std::string {
    if (v.empty()) return "";
    std::vector<std::string> head(v.begin(), v.begin() + std::min(max_items, v.size()));
    return fmt::format("{} {} tensor(s): {}{}; ", v.size(), what, fmt::join(head, ", "),
                       v.size() > max_items ? ", ..." : "");
  };
  std::string s = part("missing", missing) + part("mismatched", mismatched) + part("unexpected", unexpected);
  if (s.size() >= 2) s.resize(s.size() - 2);
  return s;
}

ModelWeights bind_weights(const Checkpoint& ckpt, const ModelConfig& c, BindReport* report_out) {
  if (c.arch != Arch::DeepseekV4) fail("bind_weights: {} is not a deepseek_v4 checkpoint", c.model_type);
  BindReport local;
  BindReport& report = report_out ? *report_out : local;
  Binder b(ckpt, report);
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
