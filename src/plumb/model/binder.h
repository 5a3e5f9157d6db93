#pragma once
// Binding of checkpoint tensors to typed WeightViews, shared by the V4 and V3 layouts: a layout
// walk (layout_v4.h, layout_v3.h) asks for each tensor it expects; the Binder looks it up, checks
// dtype and shape, and records what is missing, mismatched or left over. Nothing is copied.
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "plumb/format/safetensors.h"
#include "plumb/format/weight_view.h"

namespace plumb {

struct BindReport {
  std::vector<std::string> missing;     // expected by the config, absent
  std::vector<std::string> unexpected;  // present, not part of the layout
  std::vector<std::string> mismatched;  // present with the wrong dtype or shape (message each)
  bool ok() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
  std::string summary(std::size_t max_items = 5) const;  // one line, first few names of each
};

// Where a block-quantized linear keeps its scales: V4 "x.scale" next to "x.weight", V3
// "x.weight_scale_inv".
enum class ScaleNaming { DotScale, WeightScaleInv };

class Binder {
 public:
  using Shape = std::vector<int64_t>;
  Binder(const Checkpoint& ckpt, BindReport& report, ScaleNaming naming)
      : ckpt_(ckpt), report_(report), naming_(naming) {}

  // A float tensor stored densely (bf16/f16/f32), of the given shape.
  WeightView dense(const std::string& name, const Shape& shape);
  // An integer table (tid2eid): I64 or I32.
  WeightView ints(const std::string& name, const Shape& shape);
  // A linear weight [rows, cols]: FP8 e4m3 + 128x128 scales (E8M0 or F32), FP4 packed + 1x32
  // scales (only where allow_fp4), or dense float without scales (e.g. after `convert cast`).
  WeightView linear(const std::string& name, int64_t rows, int64_t cols, bool allow_fp4);
  // Everything in the checkpoint nobody asked for, except names `skip` accepts (e.g. MTP layers
  // the forward does not use); returns how many were skipped.
  int64_t collect_unexpected(const std::function<bool(const std::string&)>& skip = {});

 private:
  const TensorInfo* lookup(const std::string& name);
  WeightView view_of(const TensorInfo& t, WeightFormat f, Shape logical);
  WeightView with_scale(WeightView w, const std::string& scale_name, const Shape& scale_shape);
  WeightView mismatch(const TensorInfo& t, const char* expected);
  WeightView mismatch_shape(const TensorInfo& t, const Shape& expected, const std::string& why = "");

  const Checkpoint& ckpt_;
  BindReport& report_;
  ScaleNaming naming_;
  std::set<std::string> consumed_;
};

}  // namespace plumb
