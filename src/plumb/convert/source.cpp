// Source-side helpers for conversions: quantized weight/scale pairing and paged access.
#include "plumb/convert/source.h"

#include <fmt/ranges.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "plumb/format/json_util.h"
#include "plumb/util/error.h"

namespace plumb::convert {
namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr std::string_view kWeight = ".weight";

}  // namespace

QuantMap::QuantMap(const Checkpoint& ckpt) {
  for (const TensorInfo* t : ckpt.tensors()) {
    if (t->dtype != DType::F8_E4M3 && t->dtype != DType::I8) continue;
    const bool fp8 = t->dtype == DType::F8_E4M3;
    if (!ends_with(t->name, kWeight)) {
      if (fp8)
        fail("{}: F8_E4M3 tensor {} is not a '.weight' with a scale tensor; its scaling is unknown", ckpt.root(),
             quote(t->name));
      continue;  // I8 data that is not a weight: copied as is
    }
    const std::string base = t->name.substr(0, t->name.size() - kWeight.size());
    const TensorInfo* v4_scale = ckpt.find(base + ".scale");
    const TensorInfo* v3_scale = fp8 ? ckpt.find(base + ".weight_scale_inv") : nullptr;
    if (v4_scale && v3_scale)
      fail("{}: {} has two scale tensors, {} and {}", ckpt.root(), quote(t->name), quote(v4_scale->name),
           quote(v3_scale->name));
    const TensorInfo* s = v4_scale ? v4_scale : v3_scale;
    if (!s) {
      if (fp8)
        fail("{}: F8_E4M3 weight {} has no scale tensor ({} or {})", ckpt.root(), quote(t->name),
             quote(base + ".scale"), quote(base + ".weight_scale_inv"));
      continue;  // I8 without a scale is not packed FP4
    }
    if (t->shape.size() != 2)
      fail("{}: quantized weight {} has shape {}, expected 2-D", ckpt.root(), quote(t->name), t->shape_str());
    QuantizedTensor q{t, s, fp8 ? QuantFormat::FP8Block128 : QuantFormat::FP4Block32, t->shape[0],
                      fp8 ? t->shape[1] : 2 * t->shape[1]};
    std::vector<int64_t> grid = fp8 ? std::vector<int64_t>{ceil_div(q.rows, 128), ceil_div(q.cols, 128)}
                                    : std::vector<int64_t>{q.rows, ceil_div(q.cols, 32)};
    const bool dtype_ok = s->dtype == DType::F8_E8M0 || (fp8 && s->dtype == DType::F32);
    if (!dtype_ok)
      fail("{}: scale {} of {} has dtype {}, expected {}", ckpt.root(), quote(s->name), quote(t->name),
           dtype_name(s->dtype), fp8 ? "F8_E8M0 or F32" : "F8_E8M0");
    if (s->shape != grid)
      fail("{}: scale {} has shape {}, expected [{}] for {} weight {} {}", ckpt.root(), quote(s->name), s->shape_str(),
           fmt::join(grid, ", "), fp8 ? "FP8 128x128" : "FP4 1x32", quote(t->name), t->shape_str());
    weight_of_scale_[s->name] = t->name;
    by_weight_.emplace(t->name, q);
  }
  for (const TensorInfo* t : ckpt.tensors())
    if ((ends_with(t->name, ".scale") || ends_with(t->name, ".weight_scale_inv")) &&
        !weight_of_scale_.contains(t->name))
      fail("{}: scale tensor {} ({} {}) belongs to no quantized weight", ckpt.root(), quote(t->name),
           dtype_name(t->dtype), t->shape_str());
}

const QuantizedTensor* QuantMap::weight(const std::string& name) const {
  auto it = by_weight_.find(name);
  return it == by_weight_.end() ? nullptr : &it->second;
}

const QuantizedTensor* QuantMap::scale_of(const std::string& scale_name) const {
  auto it = weight_of_scale_.find(scale_name);
  return it == weight_of_scale_.end() ? nullptr : weight(it->second);
}

std::size_t QuantMap::count(QuantFormat f) const {
  std::size_t n = 0;
  for (const auto& [_, q] : by_weight_) n += q.format == f;
  return n;
}

std::optional<int64_t> routed_expert_id(const std::string& name) {
  // Matches ".experts.{id}." anywhere (V4 `ffn.experts.3.w1`, V3 `mlp.experts.3.gate_proj`);
  // "shared_experts." never matches because the character before "experts" must be a dot.
  constexpr std::string_view kKey = ".experts.";
  const auto pos = name.find(kKey);
  if (pos == std::string::npos) return std::nullopt;
  const std::size_t begin = pos + kKey.size();
  std::size_t end = begin;
  while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
  if (end == begin || end == name.size() || name[end] != '.' || end - begin > 9) return std::nullopt;
  return std::strtoll(name.c_str() + begin, nullptr, 10);
}

SourceTensor::SourceTensor(const Checkpoint& ckpt, const TensorInfo& t) : bytes_(ckpt.view(t).bytes) {
  // TensorInfo::data_begin is the tensor's offset in its file, so the mapping starts that far back.
  const SafetensorsFile& file = *ckpt.shards()[t.shard];
  mapping_ = {bytes_.data() - t.data_begin, file.file_size()};
}

void SourceTensor::release(std::span<const std::byte> part) const {
  if (part.empty()) return;
  constexpr uintptr_t kLargestFolio = 2u << 20;
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto lo = reinterpret_cast<uintptr_t>(mapping_.data());
  const uintptr_t hi = (lo + mapping_.size() + page - 1) & ~(page - 1);  // the mapping ends on a page
  const auto first = reinterpret_cast<uintptr_t>(part.data());
  const uintptr_t begin = (first - lo > kLargestFolio ? first - kLargestFolio : lo) & ~(page - 1);
  const uintptr_t end = std::min(hi, (first + part.size() + kLargestFolio + page - 1) & ~(page - 1));
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);  // advisory: failure is harmless
}

void SourceTensor::for_each_piece(std::span<const std::byte> part, std::size_t piece,
                                  const std::function<void(std::span<const std::byte>)>& fn) const {
  for (std::size_t off = 0; off < part.size(); off += piece) {
    const auto p = part.subspan(off, std::min(piece, part.size() - off));
    fn(p);
    release(p);
  }
}

}  // namespace plumb::convert
