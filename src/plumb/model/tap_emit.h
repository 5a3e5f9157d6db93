#pragma once
// Emits one tap from a forward pass: marks it (timing), and when the taps want data copies the
// tensor to the host (i32 tensors as floats) and hands it over; and takes a residual stream from
// the taps in its place (plumb verify --isolate-layers). Shared by the V4 and V3 forwards.
#include <string>
#include <vector>

#include "plumb/backend/backend.h"
#include "plumb/util/error.h"
#include "plumb/model/taps.h"

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

// x, or the taps' replacement for tap `name` (same shape) when they hold one.
inline backend::Tensor replaced_by_tap(backend::Backend& be, const Taps* taps, const std::string& name,
                                       backend::Tensor x) {
  const std::vector<float>* r = taps ? taps->replacement(name) : nullptr;
  if (!r) return x;
  if (static_cast<int64_t>(r->size()) != x.numel())
    fail("forward: replacement for {} has {} values, expected {}", name, r->size(), x.numel());
  return be.from_host(r->data(), x.shape());
}

}  // namespace plumb
