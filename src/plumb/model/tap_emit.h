#pragma once
// Emits one tap from a forward pass: marks it (timing), and when the taps want data copies the
// tensor to the host (i32 tensors as floats) and hands it over. Shared by the V4 and V3 forwards.
#include <string>
#include <vector>

#include "plumb/backend/backend.h"
#include "plumb/verify/taps.h"

namespace plumb {

inline void emit_tap(backend::Backend& be, const Taps* taps, const std::string& name, const backend::Tensor& t) {
  if (!taps) return;
  taps->mark(name);
  if (!taps->enabled()) return;
  std::vector<float> host(static_cast<std::size_t>(t.numel()));
  if (t.type() == backend::ElemType::F32) {
    be.to_host(t, host.data());
  } else {
    std::vector<int32_t> ints(host.size());
    be.to_host(t, ints.data());
    for (std::size_t i = 0; i < ints.size(); ++i) host[i] = static_cast<float>(ints[i]);
  }
  taps->emit(name, host.data(), t.shape());
}

}  // namespace plumb
