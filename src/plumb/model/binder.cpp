// The shared Binder (binder.h): lookups, dtype / shape checks, and the binding report.
#include "plumb/model/binder.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace plumb {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool is_dense_float(DType t) { return t == DType::BF16 || t == DType::F16 || t == DType::F32; }

}  // namespace

WeightView Binder::dense(const std::string& name, const Shape& shape) {
  const TensorInfo* t = lookup(name);
  if (!t) return {};
  if (!is_dense_float(t->dtype)) return mismatch(*t, "BF16, F16 or F32");
  if (t->shape != shape) return mismatch_shape(*t, shape);
  return view_of(*t, WeightFormat::Dense, shape);
}

WeightView Binder::ints(const std::string& name, const Shape& shape) {
  const TensorInfo* t = lookup(name);
  if (!t) return {};
  if (t->dtype != DType::I64 && t->dtype != DType::I32) return mismatch(*t, "I64 or I32");
  if (t->shape != shape) return mismatch_shape(*t, shape);
  return view_of(*t, WeightFormat::Dense, shape);
}

WeightView Binder::linear(const std::string& name, int64_t rows, int64_t cols, bool allow_fp4) {
  const TensorInfo* t = lookup(name);
  if (!t) return {};
  const std::string scale = naming_ == ScaleNaming::WeightScaleInv
                                ? name + "_scale_inv"
                                : name.substr(0, name.size() - std::string(".weight").size()) + ".scale";
  if (is_dense_float(t->dtype)) {
    if (t->shape != Shape{rows, cols}) return mismatch_shape(*t, {rows, cols});
    return view_of(*t, WeightFormat::Dense, {rows, cols});
  }
  if (t->dtype == DType::F8_E4M3) {
    if (t->shape != Shape{rows, cols}) return mismatch_shape(*t, {rows, cols});
    WeightView w = view_of(*t, WeightFormat::FP8Block128, {rows, cols});
    return with_scale(w, scale, {ceil_div(rows, 128), ceil_div(cols, 128)});
  }
  if (t->dtype == DType::I8 && allow_fp4) {
    if (cols % 2 != 0 || t->shape != Shape{rows, cols / 2}) return mismatch_shape(*t, {rows, cols / 2});
    WeightView w = view_of(*t, WeightFormat::FP4Block32, {rows, cols});
    return with_scale(w, scale, {rows, ceil_div(cols, 32)});
  }
  return mismatch(*t, allow_fp4 ? "F8_E4M3, I8 (packed FP4) or BF16/F16/F32" : "F8_E4M3 or BF16/F16/F32");
}

int64_t Binder::collect_unexpected(const std::function<bool(const std::string&)>& skip) {
  int64_t skipped = 0;
  for (const TensorInfo* t : ckpt_.tensors()) {
    if (consumed_.count(t->name)) continue;
    if (skip && skip(t->name))
      ++skipped;
    else
      report_.unexpected.push_back(t->name);
  }
  return skipped;
}

const TensorInfo* Binder::lookup(const std::string& name) {
  const TensorInfo* t = ckpt_.find(name);
  if (!t) {
    report_.missing.push_back(name);
    return nullptr;
  }
  consumed_.insert(name);
  return t;
}

WeightView Binder::view_of(const TensorInfo& t, WeightFormat f, Shape logical) {
  WeightView w;
  w.name = t.name;
  w.format = f;
  w.dtype = t.dtype;
  w.shape = std::move(logical);
  w.data = ckpt_.view(t).bytes.data();
  return w;
}

WeightView Binder::with_scale(WeightView w, const std::string& scale_name, const Shape& scale_shape) {
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

WeightView Binder::mismatch(const TensorInfo& t, const char* expected) {
  report_.mismatched.push_back(fmt::format("{}: dtype {}, expected {}", t.name, dtype_name(t.dtype), expected));
  return {};
}

WeightView Binder::mismatch_shape(const TensorInfo& t, const Shape& expected, const std::string& why) {
  report_.mismatched.push_back(
      fmt::format("{}: shape {}, expected [{}]{}", t.name, t.shape_str(), fmt::join(expected, ", "), why));
  return {};
}

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

}  // namespace plumb
