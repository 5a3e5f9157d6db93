#include "plumb/format/scan.h"

#include <cmath>

#include <fmt/format.h>

#include "plumb/format/codecs.h"
#include "plumb/util/progress.h"

namespace plumb {
namespace {

constexpr float kMinScale = 0x1p-80f;
constexpr float kMaxScale = 0x1p40f;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

struct Counter {
  int64_t count = 0, first = -1;
  void hit(int64_t i) {
    if (count++ == 0) first = i;
  }
};

void scan_tensor(const TensorInfo& t, std::span<const std::byte> bytes, bool scale, std::vector<ScanFinding>& out) {
  Counter nan, inf, range;
  const std::size_t es = dtype_size(t.dtype);
  const int64_t n = static_cast<int64_t>(bytes.size() / es);
  for (int64_t i = 0; i < n; ++i) {
    const float v = decode_float(t.dtype, bytes.data() + i * es);
    if (std::isnan(v))
      nan.hit(i);
    else if (std::isinf(v))
      inf.hit(i);
    else if (scale && !(v >= kMinScale && v <= kMaxScale))
      range.hit(i);
  }
  auto report = [&](const Counter& c, const char* what) {
    if (c.count) out.push_back({t.name, fmt::format("{} {} value(s) (first at element {})", c.count, what, c.first)});
  };
  report(nan, "NaN");
  report(inf, "Inf");
  report(range, "out-of-range scale (outside [2^-80, 2^40] or <= 0)");
}

}  // namespace

bool is_scale_tensor(const std::string& name) { return ends_with(name, ".scale") || ends_with(name, "_scale_inv"); }

ScanResult scan_checkpoint(const Checkpoint& ckpt, bool show_progress) {
  std::vector<const TensorInfo*> todo;
  uint64_t total = 0;
  for (const TensorInfo* t : ckpt.tensors()) {
    const bool wanted = t->dtype == DType::BF16 || t->dtype == DType::F16 || t->dtype == DType::F32 ||
                        (is_scale_tensor(t->name) && dtype_is_float(t->dtype));
    if (!wanted) continue;
    todo.push_back(t);
    total += t->nbytes;
  }
  ScanResult r;
  Progress progress("scan", total, show_progress);
  for (const TensorInfo* t : todo) {
    scan_tensor(*t, ckpt.view(*t).bytes, is_scale_tensor(t->name), r.findings);
    ++r.tensors_scanned;
    r.bytes_scanned += t->nbytes;
    progress.advance(t->nbytes);
  }
  progress.finish();
  return r;
}

}  // namespace plumb
