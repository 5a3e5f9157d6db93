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
// Receives only a tap's name, when the forward passes it, without copying its data to the host
// (benchmarks use it to time the stretch between taps).
using MarkFn = std::function<void(const std::string& name)>;
// Asked at the residual-stream taps ("layer.L.hc"): values to continue from instead of the
// computed ones, or null. `plumb verify --isolate-layers` feeds every layer of the tested backend
// the reference's input this way, so each layer is judged on its own, without the error the
// layers before it passed on.
using ReplaceFn = std::function<const std::vector<float>*(const std::string& name)>;

class Taps {
 public:
  Taps() = default;
  explicit Taps(TapFn fn) : fn_(std::move(fn)) {}
  static Taps marks(MarkFn fn) {
    Taps t;
    t.mark_ = std::move(fn);
    return t;
  }
  Taps& with_replacement(ReplaceFn fn) {
    replace_ = std::move(fn);
    return *this;
  }
  bool enabled() const { return static_cast<bool>(fn_); }  // wants the data
  bool marking() const { return static_cast<bool>(mark_); }
  bool replacing() const { return static_cast<bool>(replace_); }
  bool any() const { return enabled() || marking() || replacing(); }
  void emit(const std::string& name, const float* data, const std::vector<int64_t>& shape) const {
    if (fn_) fn_(name, data, shape);
  }
  void mark(const std::string& name) const {
    if (mark_) mark_(name);
  }
  const std::vector<float>* replacement(const std::string& name) const { return replace_ ? replace_(name) : nullptr; }

 private:
  TapFn fn_;
  MarkFn mark_;
  ReplaceFn replace_;
};

}  // namespace plumb
