// Safetensors header parsing and single-file access. The file layout is: u64 little-endian header
// length N, N bytes of JSON, then the data section; data_offsets are relative to that section.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <limits>

#include "plumb/format/json_util.h"
#include "plumb/format/safetensors.h"
#include "plumb/util/error.h"

namespace plumb {
namespace {

using nlohmann::json;

constexpr std::array<DType, 16> kAllDTypes{
    DType::BOOL, DType::U8,  DType::I8,  DType::I16,  DType::U16,     DType::I32,
    DType::U32,  DType::I64, DType::U64, DType::F16,  DType::BF16,    DType::F32,
    DType::F64,  DType::F8_E4M3, DType::F8_E5M2, DType::F8_E8M0,
};

std::string known_dtypes() {
  std::string out;
  for (DType t : kAllDTypes) out += (out.empty() ? "" : ", ") + std::string(dtype_name(t));
  return out;
}

// Everything an entry check needs to say where it failed.
struct EntryContext {
  const std::string& file;
  const std::string& name;
  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    plumb::fail("{}: tensor {}: {}", file, quote(name), fmt::format(f, std::forward<Args>(args)...));
  }
};

void check_fields(const json& entry, const EntryContext& ctx) {
  static constexpr std::array<std::string_view, 3> kFields{"dtype", "shape", "data_offsets"};
  if (!entry.is_object())
    ctx.fail("entry must be an object with dtype, shape, data_offsets; got {}", json_brief(entry));
  for (const auto& [key, _] : entry.items())
    if (std::find(kFields.begin(), kFields.end(), key) == kFields.end())
      ctx.fail("unexpected field {} (expected only dtype, shape, data_offsets)", quote(key));
  for (std::string_view f : kFields)
    if (!entry.contains(f)) ctx.fail("missing field '{}'", f);
}

DType parse_dtype(const json& v, const EntryContext& ctx) {
  if (!v.is_string()) ctx.fail("dtype must be a string, got {}", json_brief(v));
  auto t = dtype_from_name(v.get_ref<const std::string&>());
  if (!t) ctx.fail("unknown dtype {} (expected one of {})", quote(v.get_ref<const std::string&>()), known_dtypes());
  return *t;
}

std::vector<int64_t> parse_shape(const json& v, const EntryContext& ctx) {
  constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (!v.is_array()) ctx.fail("shape must be an array of non-negative integers, got {}", json_brief(v));
  std::vector<int64_t> shape;
  for (const auto& d : v) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > kMax)
      ctx.fail("shape must be an array of non-negative integers, got {}", json_brief(v));
    shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
  }
  return shape;
}

// numel * dtype size, or an error if it does not fit in 63 bits (numel() returns int64).
uint64_t expected_nbytes(const std::vector<int64_t>& shape, DType dtype, const EntryContext& ctx) {
  uint64_t n = 1;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) n = UINT64_MAX;
  uint64_t bytes = 0;
  bool overflow = n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
                  __builtin_mul_overflow(n, dtype_size(dtype), &bytes);
  if (overflow) ctx.fail("shape [{}] of {} overflows 64 bits (numel * dtype size)", fmt::join(shape, ", "), dtype_name(dtype));
  return bytes;
}

std::pair<uint64_t, uint64_t> parse_offsets(const json& v, const EntryContext& ctx) {
  if (!v.is_array() || v.size() != 2 || !v[0].is_number_unsigned() || !v[1].is_number_unsigned())
    ctx.fail("data_offsets must be [begin, end] with non-negative integers, got {}", json_brief(v));
  return {v[0].get<uint64_t>(), v[1].get<uint64_t>()};
}

TensorInfo parse_entry(const std::string& name, const json& entry, uint64_t data_start,
                       uint64_t data_size, const std::string& file) {
  EntryContext ctx{file, name};
  check_fields(entry, ctx);
  TensorInfo t;
  t.name = name;
  t.dtype = parse_dtype(entry["dtype"], ctx);
  t.shape = parse_shape(entry["shape"], ctx);
  uint64_t want = expected_nbytes(t.shape, t.dtype, ctx);
  auto [begin, end] = parse_offsets(entry["data_offsets"], ctx);
  if (begin > end) ctx.fail("data_offsets [{}, {}]: begin > end", begin, end);
  if (end > data_size)
    ctx.fail("data_offsets [{}, {}] end past the data section ({} bytes); file truncated?", begin, end, data_size);
  if (end - begin != want)
    ctx.fail("byte size mismatch: expected numel * dtype size = {} * {} = {} bytes for shape {} {}, got {} bytes",
             want / dtype_size(t.dtype), dtype_size(t.dtype), want, t.shape_str(), dtype_name(t.dtype), end - begin);
  t.data_begin = data_start + begin;
  t.nbytes = want;
  return t;
}

void parse_metadata(const json& v, const std::string& file, std::map<std::string, std::string>* out) {
  if (!v.is_object()) fail("{}: __metadata__ must be an object of strings, got {}", file, json_brief(v));
  for (const auto& [key, value] : v.items()) {
    if (!value.is_string())
      fail("{}: __metadata__ entry {} must be a string, got {}", file, quote(key), json_brief(value));
    if (out) (*out)[key] = value.get<std::string>();
  }
}

// `sorted` is ordered by data_begin. Empty tensors occupy no bytes and cannot overlap.
void check_overlaps(const std::vector<TensorInfo>& sorted, uint64_t data_start, const std::string& file) {
  const TensorInfo* furthest = nullptr;  // the nonempty tensor reaching furthest so far
  for (const auto& t : sorted) {
    if (t.nbytes == 0) continue;
    if (furthest && furthest->data_begin + furthest->nbytes > t.data_begin)
      fail("{}: tensor {} (data_offsets [{}, {}]) overlaps tensor {} (data_offsets [{}, {}])", file,
           quote(t.name), t.data_begin - data_start, t.data_begin - data_start + t.nbytes,
           quote(furthest->name), furthest->data_begin - data_start,
           furthest->data_begin - data_start + furthest->nbytes);
    if (!furthest || t.data_begin + t.nbytes > furthest->data_begin + furthest->nbytes) furthest = &t;
  }
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorInfo::shape_str() const { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::vector<TensorInfo> parse_safetensors_header(std::string_view header_json, uint64_t data_start,
                                                 uint64_t data_size, const std::string& file_label,
                                                 std::map<std::string, std::string>* metadata) {
  json root = parse_json_strict(header_json, file_label + ": header");
  if (!root.is_object()) fail("{}: header must be a JSON object, got {}", file_label, json_brief(root));
  std::vector<TensorInfo> tensors;
  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__")
      parse_metadata(entry, file_label, metadata);
    else
      tensors.push_back(parse_entry(name, entry, data_start, data_size, file_label));
  }
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.data_begin, a.nbytes, a.name) < std::tie(b.data_begin, b.nbytes, b.name);
  });
  check_overlaps(tensors, data_start, file_label);
  return tensors;
}

std::vector<TensorInfo> parse_safetensors_image(std::span<const std::byte> image, const std::string& file_label,
                                                std::map<std::string, std::string>* metadata) {
  if (image.size() < 8)
    fail("{}: truncated: {} bytes, but a safetensors file starts with an 8-byte header length", file_label,
         image.size());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(image[i]);
  if (n > kMaxSafetensorsHeaderBytes)
    fail("{}: header length {} is absurd (limit {} bytes); not a safetensors file?", file_label, n,
         kMaxSafetensorsHeaderBytes);
  if (n > image.size() - 8)
    fail("{}: header length {} runs past the end of the file ({} bytes); file truncated?", file_label, n,
         image.size());
  std::string_view header(reinterpret_cast<const char*>(image.data()) + 8, n);
  return parse_safetensors_header(header, 8 + n, image.size() - 8 - n, file_label, metadata);
}

SafetensorsFile::SafetensorsFile(const std::string& path, std::size_t shard_index) : file_(path) {
  tensors_ = parse_safetensors_image(file_.bytes(), path, &metadata_);
  for (auto& t : tensors_) t.shard = shard_index;
}

std::span<const std::byte> SafetensorsFile::bytes(const TensorInfo& t) const {
  if (t.data_begin > file_.size() || t.nbytes > file_.size() - t.data_begin)
    fail("{}: tensor {} [{}, +{}) lies outside this file ({} bytes)", path(), quote(t.name), t.data_begin,
         t.nbytes, file_.size());
  return file_.bytes().subspan(t.data_begin, t.nbytes);
}

}  // namespace plumb
