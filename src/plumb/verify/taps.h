#pragma once
// Taps: named intermediates ("layer.7.attn.q", "layer.7.ffn.out", "logits") that the forward
// can report through a callback. When no callback is installed a tap costs one branch.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace plumb {

// Receives a tap's name, its values (f32, row-major) and shape. Called synchronously; the data
// pointer is valid only during the call.
using TapFn = std::function<void(const std::string& name, const float* data, const std::vector<int64_t>& shape)>;

class Taps {
 public:
  Taps() = default;
  explicit Taps(TapFn fn) : fn_(std::move(fn)) {}
  bool enabled() const { return static_cast<bool>(fn_); }
  void emit(const std::string& name, const float* data, const std::vector<int64_t>& shape) const {
    if (fn_) fn_(name, data, shape);
  }

 private:
  TapFn fn_;
};

}  // namespace plumb
