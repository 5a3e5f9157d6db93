#include "plumb/format/npy.h"

#include <cstring>
#include <fstream>
#include <cctype>
#include <string_view>

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
// read by a small scanner (one pass, no backtracking, no recursion: a regex engine overflowed its
// stack on a long header). Keys may come in any order; each must appear once.
class HeaderParser {
 public:
  HeaderParser(std::string_view h, const std::string& path) : h_(h), path_(path) {}

  void parse(NpyArray& a) {
    bool have_descr = false, have_order = false, have_shape = false;
    expect('{');
    while (!eat('}')) {
      const std::string_view key = quoted();
      expect(':');
      if (key == "descr" && !have_descr) {
        a.dtype = dtype_from_descr(std::string(quoted()), path_);
        have_descr = true;
      } else if (key == "fortran_order" && !have_order) {
        if (word() != "False") fail("{}: Fortran-ordered .npy arrays are not supported (save with C order)", path_);
        have_order = true;
      } else if (key == "shape" && !have_shape) {
        a.shape = shape();
        have_shape = true;
      } else {
        bad(fmt::format("unexpected or repeated key '{}'", key));
      }
      if (!eat(',')) {
        expect('}');
        break;
      }
    }
    skip_space();
    if (pos_ != h_.size()) bad("text after the closing '}'");
    if (!have_descr) bad("no 'descr'");
    if (!have_shape) bad("no 'shape'");
  }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    fail("{}: malformed .npy header ({} at byte {} of {})", path_, what, pos_, h_.size());
  }
  void skip_space() {
    while (pos_ < h_.size() && (h_[pos_] == ' ' || h_[pos_] == '\n' || h_[pos_] == '\t' || h_[pos_] == '\r')) ++pos_;
  }
  bool eat(char c) {
    skip_space();
    if (pos_ < h_.size() && h_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) bad(fmt::format("expected '{}'", c));
  }
  std::string_view quoted() {
    skip_space();
    if (pos_ >= h_.size() || (h_[pos_] != '\'' && h_[pos_] != '"')) bad("expected a quoted string");
    const char q = h_[pos_++];
    const std::size_t end = h_.find(q, pos_);
    if (end == std::string_view::npos) bad("unterminated string");
    const std::string_view s = h_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }
  std::string_view word() {
    skip_space();
    const std::size_t begin = pos_;
    while (pos_ < h_.size() && std::isalpha(static_cast<unsigned char>(h_[pos_]))) ++pos_;
    return h_.substr(begin, pos_ - begin);
  }
  // (d0, d1, ...) with an optional trailing comma; each d a non-negative integer below 2^63.
  std::vector<int64_t> shape() {
    std::vector<int64_t> dims;
    expect('(');
    while (!eat(')')) {
      skip_space();
      if (pos_ >= h_.size() || !std::isdigit(static_cast<unsigned char>(h_[pos_])))
        bad(pos_ < h_.size() && h_[pos_] == '-' ? "a negative dimension" : "expected a dimension");
      uint64_t d = 0;
      while (pos_ < h_.size() && std::isdigit(static_cast<unsigned char>(h_[pos_]))) {
        const unsigned digit = static_cast<unsigned>(h_[pos_++] - '0');
        if (d > (static_cast<uint64_t>(INT64_MAX) - digit) / 10) bad("a dimension beyond int64");
        d = d * 10 + digit;
      }
      if (dims.size() >= kMaxDims) bad(fmt::format("more than {} dimensions", kMaxDims));
      dims.push_back(static_cast<int64_t>(d));
      if (!eat(',')) {
        expect(')');
        break;
      }
    }
    return dims;
  }

  static constexpr std::size_t kMaxDims = 32;  // NumPy's own limit (NPY_MAXDIMS)
  std::string_view h_;
  const std::string& path_;
  std::size_t pos_ = 0;
};

// Element count and byte size of a shape, refusing any product that overflows 64 bits.
uint64_t checked_bytes(const NpyArray& a, const std::string& path) {
  uint64_t n = 1;
  for (int64_t d : a.shape)
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n) || n > static_cast<uint64_t>(INT64_MAX))
      fail("{}: .npy shape [{}] has more elements than fit in 64 bits", path, fmt::join(a.shape, ", "));
  uint64_t bytes;
  if (__builtin_mul_overflow(n, static_cast<uint64_t>(dtype_size(a.dtype)), &bytes))
    fail("{}: .npy shape [{}] {} is more bytes than fit in 64 bits", path, fmt::join(a.shape, ", "),
         dtype_name(a.dtype));
  return bytes;
}

}  // namespace

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

NpyArray parse_npy(std::span<const std::byte> file, const std::string& path) {
  const auto* p = reinterpret_cast<const char*>(file.data());
  if (file.size() < 10 || std::memcmp(p, kMagic, 6) != 0) fail("{}: not a .npy file (bad magic)", path);
  const int major = static_cast<unsigned char>(p[6]);
  std::size_t hlen, hstart;
  if (major == 1) {
    hlen = static_cast<unsigned char>(p[8]) | (static_cast<std::size_t>(static_cast<unsigned char>(p[9])) << 8);
    hstart = 10;
  } else if (major == 2 || major == 3) {
    if (file.size() < 12) fail("{}: truncated .npy header", path);
    uint32_t l;
    std::memcpy(&l, p + 8, 4);
    hlen = l;
    hstart = 12;
  } else {
    fail("{}: unsupported .npy version {}", path, major);
  }
  if (hstart + hlen > file.size()) fail("{}: .npy header length {} runs past the end of the file", path, hlen);
  NpyArray a;
  HeaderParser(std::string_view(p + hstart, hlen), path).parse(a);
  const uint64_t bytes = checked_bytes(a, path);  // before anything is allocated
  const std::size_t have = file.size() - hstart - hlen;
  if (have != bytes)
    fail("{}: .npy data is {} bytes, expected {} for shape [{}] {}", path, have, bytes, fmt::join(a.shape, ", "),
         dtype_name(a.dtype));
  a.data.resize(static_cast<std::size_t>(bytes));
  if (bytes) std::memcpy(a.data.data(), p + hstart + hlen, bytes);
  return a;
}

NpyArray read_npy(const std::string& path) {
  const MappedFile f(path);
  return parse_npy(f.bytes(), path);
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
