#include "plumb/format/npy.h"

#include <cstring>
#include <fstream>
#include <regex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "plumb/util/error.h"
#include "plumb/util/mapped_file.h"

namespace plumb {
namespace {

constexpr char kMagic[] = "\x93NUMPY";

struct DescrMap {
  const char* descr;
  DType dtype;
};
constexpr DescrMap kDescr[] = {
    {"<f4", DType::F32}, {"<f8", DType::F64}, {"<f2", DType::F16}, {"<i8", DType::I64}, {"<i4", DType::I32},
    {"<i2", DType::I16}, {"|i1", DType::I8},  {"|u1", DType::U8},  {"<u2", DType::U16}, {"<u4", DType::U32},
    {"<u8", DType::U64}, {"|b1", DType::BOOL},
};

DType dtype_from_descr(const std::string& d, const std::string& path) {
  for (const auto& m : kDescr)
    if (d == m.descr) return m.dtype;
  fail("{}: unsupported .npy dtype '{}' (expected little-endian numeric, e.g. '<f4', '<i8')", path, d);
}

const char* descr_of(DType t) {
  for (const auto& m : kDescr)
    if (m.dtype == t) return m.descr;
  fail("write_npy: dtype {} has no .npy descriptor", dtype_name(t));
}

// The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
void parse_header(const std::string& h, const std::string& path, NpyArray& a) {
  std::smatch m;
  if (!std::regex_search(h, m, std::regex(R"('descr'\s*:\s*'([^']*)')")))
    fail("{}: .npy header has no 'descr': {}", path, h);
  a.dtype = dtype_from_descr(m[1], path);
  if (std::regex_search(h, m, std::regex(R"('fortran_order'\s*:\s*True)")))
    fail("{}: Fortran-ordered .npy arrays are not supported (save with C order)", path);
  if (!std::regex_search(h, m, std::regex(R"('shape'\s*:\s*\(([^)]*)\))"))) fail("{}: .npy header has no 'shape': {}", path, h);
  std::string dims = m[1];
  std::regex num(R"(\d+)");
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), num); it != std::sregex_iterator(); ++it)
    a.shape.push_back(std::stoll(it->str()));
}

}  // namespace

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

NpyArray read_npy(const std::string& path) {
  MappedFile f(path);
  const auto* p = reinterpret_cast<const char*>(f.data());
  if (f.size() < 10 || std::memcmp(p, kMagic, 6) != 0) fail("{}: not a .npy file (bad magic)", path);
  const int major = static_cast<unsigned char>(p[6]);
  std::size_t hlen, hstart;
  if (major == 1) {
    hlen = static_cast<unsigned char>(p[8]) | (static_cast<std::size_t>(static_cast<unsigned char>(p[9])) << 8);
    hstart = 10;
  } else if (major == 2 || major == 3) {
    if (f.size() < 12) fail("{}: truncated .npy header", path);
    uint32_t l;
    std::memcpy(&l, p + 8, 4);
    hlen = l;
    hstart = 12;
  } else {
    fail("{}: unsupported .npy version {}", path, major);
  }
  if (hstart + hlen > f.size()) fail("{}: .npy header length {} runs past the end of the file", path, hlen);
  NpyArray a;
  parse_header(std::string(p + hstart, hlen), path, a);
  const std::size_t bytes = static_cast<std::size_t>(a.numel()) * dtype_size(a.dtype);
  const std::size_t have = f.size() - hstart - hlen;
  if (have != bytes)
    fail("{}: .npy data is {} bytes, expected {} for shape [{}] {}", path, have, bytes, fmt::join(a.shape, ", "),
         dtype_name(a.dtype));
  a.data.resize(bytes);
  if (bytes) std::memcpy(a.data.data(), p + hstart + hlen, bytes);
  return a;
}

void write_npy(const std::string& path, DType dtype, const std::vector<int64_t>& shape, const void* data) {
  std::string dims;
  for (auto d : shape) dims += fmt::format("{}, ", d);
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // (3, 4) but (3,) for 1-D
  if (shape.size() == 1) dims.pop_back();
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr_of(dtype), dims);
  const std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  int64_t n = 1;
  for (auto d : shape) n *= d;
  std::ofstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open for writing", path);
  f.write(kMagic, 6);
  const char ver[2] = {1, 0};
  f.write(ver, 2);
  const uint16_t hl = static_cast<uint16_t>(header.size());
  f.write(reinterpret_cast<const char*>(&hl), 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n * dtype_size(dtype)));
  if (!f) fail("{}: write failed", path);
}

std::vector<TokenId> read_token_ids(const std::string& path) {
  NpyArray a = read_npy(path);
  const bool shape_ok = a.shape.size() == 1 || (a.shape.size() == 2 && a.shape[0] == 1);
  if (!shape_ok) fail("{}: token ids must have shape [T] or [1, T], got [{}]", path, fmt::join(a.shape, ", "));
  std::vector<TokenId> ids(static_cast<std::size_t>(a.numel()));
  for (std::size_t i = 0; i < ids.size(); ++i) {
    int64_t v;
    if (a.dtype == DType::I64) {
      std::memcpy(&v, a.data.data() + i * 8, 8);
    } else if (a.dtype == DType::I32) {
      int32_t w;
      std::memcpy(&w, a.data.data() + i * 4, 4);
      v = w;
    } else {
      fail("{}: token ids must be int32 or int64, got {}", path, dtype_name(a.dtype));
    }
    if (v < 0 || v > INT32_MAX) fail("{}: token id {} at position {} is negative or too large", path, v, i);
    ids[i] = static_cast<TokenId>(v);
  }
  return ids;
}

}  // namespace plumb
