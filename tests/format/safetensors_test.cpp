// Single-file safetensors: writer/reader round trips, header layout, and parser details.
#include "plumb/format/safetensors.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

#include "plumb/util/error.h"
#include "safetensors_corpus.h"

namespace plumb {
namespace {

using test::pattern_bytes;
using test::TempDir;

std::vector<DType> all_dtypes() {
  std::vector<DType> out;
  for (int i = 0; i <= static_cast<int>(DType::F8_E8M0); ++i) out.push_back(static_cast<DType>(i));
  return out;
}

std::string read_all(const test::fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::span<const std::byte> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

bool same_bytes(std::span<const std::byte> a, const std::vector<std::byte>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

TEST(SafetensorsRoundTrip, EveryDType) {
  TempDir dir;
  SafetensorsWriter w;
  for (DType t : all_dtypes()) {
    std::string name = "t." + std::string(dtype_name(t));
    w.add(name, t, {2, 3}, pattern_bytes(name, 6 * dtype_size(t)));
  }
  auto path = (dir.path() / "all.safetensors").string();
  w.write(path);

  SafetensorsFile f(path);
  ASSERT_EQ(f.tensors().size(), all_dtypes().size());
  for (std::size_t i = 0; i < f.tensors().size(); ++i) {
    const auto& t = f.tensors()[i];  // sorted by offset == insertion order
    DType want = all_dtypes()[i];
    EXPECT_EQ(t.name, "t." + std::string(dtype_name(want)));
    EXPECT_EQ(t.dtype, want);
    EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(t.numel(), 6);
    EXPECT_EQ(t.shape_str(), "[2, 3]");
    EXPECT_EQ(t.nbytes, 6 * dtype_size(want));
    EXPECT_TRUE(same_bytes(f.bytes(t), pattern_bytes(t.name, t.nbytes))) << t.name;
  }
}

TEST(SafetensorsRoundTrip, MetadataAndAlignedHeader) {
  TempDir dir;
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  w.set_metadata("note", "x\ny \"quoted\"");
  w.add("w", DType::BF16, {3}, pattern_bytes("w", 6));
  auto path = dir.path() / "m.safetensors";
  w.write(path.string());

  SafetensorsFile f(path.string());
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "x\ny \"quoted\""}}));
  std::string raw = read_all(path);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u) << "data section must start 8-byte aligned";
  EXPECT_EQ(raw.substr(8, 15), R"({"__metadata__")") << "metadata comes first, as in the reference";
  EXPECT_EQ(f.tensors()[0].data_begin, 8 + n);
  EXPECT_EQ(raw.size(), 8 + n + 6);
  EXPECT_FALSE(test::fs::exists(path.string() + ".tmp"));
}

TEST(SafetensorsRoundTrip, ZeroElementAndScalarTensors) {
  TempDir dir;
  SafetensorsWriter w;
  w.add("empty0", DType::F32, {0}, {});
  w.add("mid", DType::I64, {2}, pattern_bytes("mid", 16));
  w.add("empty2", DType::BF16, {3, 0, 5}, {});
  w.add("scalar", DType::F64, {}, pattern_bytes("scalar", 8));  // rank 0 holds one element
  auto path = (dir.path() / "z.safetensors").string();
  w.write(path);

  auto ck = Checkpoint::open(path);
  EXPECT_EQ(ck.tensor_count(), 4u);
  EXPECT_EQ(ck.at("empty0").nbytes, 0u);
  EXPECT_EQ(ck.at("empty2").numel(), 0);
  EXPECT_EQ(ck.at("empty2").shape_str(), "[3, 0, 5]");
  EXPECT_EQ(ck.view("empty2").bytes.size(), 0u);
  EXPECT_EQ(ck.at("scalar").numel(), 1);
  EXPECT_EQ(ck.at("scalar").shape_str(), "[]");
  EXPECT_TRUE(same_bytes(ck.view("scalar").bytes, pattern_bytes("scalar", 8)));
  EXPECT_TRUE(same_bytes(ck.view("mid").bytes, pattern_bytes("mid", 16)));
  EXPECT_EQ(ck.total_bytes(), 24u);
}

TEST(SafetensorsRoundTrip, NoTensors) {
  TempDir dir;
  auto path = (dir.path() / "none.safetensors").string();
  SafetensorsWriter().write(path);
  EXPECT_EQ(read_all(path), test::le64(8) + "{}      ");
  EXPECT_TRUE(SafetensorsFile(path).tensors().empty());
}

// Bytes the reference implementation writes for
// safetensors.numpy.save({"a": float32 [1, 2], "b": uint8 [[7], [9]]}, metadata={"format": "np"}):
// compact JSON, __metadata__ first, space padding to 8 bytes.
TEST(SafetensorsHeader, ReadsReferenceLayout) {
  const std::string header =
      R"({"__metadata__":{"format":"np"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"U8","shape":[2,1],"data_offsets":[8,10]}})";
  std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  std::string image = test::le64(padded.size()) + padded + std::string("\0\0\x80\x3f\0\0\0\x40\x07\x09", 10);

  std::map<std::string, std::string> meta;
  auto tensors = parse_safetensors_image(as_bytes(image), "ref", &meta);
  ASSERT_EQ(tensors.size(), 2u);
  EXPECT_EQ(meta.at("format"), "np");
  float a[2];
  std::memcpy(a, image.data() + tensors[0].data_begin, 8);
  EXPECT_EQ(a[0], 1.0f);
  EXPECT_EQ(a[1], 2.0f);
  EXPECT_EQ(tensors[1].shape, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(image[tensors[1].data_begin + 1], 9);

  TempDir dir;
  SafetensorsWriter w;  // our writer produces the same bytes
  w.set_metadata("format", "np");
  w.add("a", DType::F32, {2}, std::vector<std::byte>(as_bytes(image).begin() + 8 + padded.size(), as_bytes(image).end() - 2));
  w.add("b", DType::U8, {2, 1}, {std::byte{7}, std::byte{9}});
  w.write((dir.path() / "ours.safetensors").string());
  EXPECT_EQ(read_all(dir.path() / "ours.safetensors"), image);
}

TEST(SafetensorsHeader, SortsByOffsetAndAllowsGapsAndEmptyAtSameOffset) {
  const std::string header =
      R"({"z":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"a":{"dtype":"U8","shape":[2],"data_offsets":[8,10]},)"
      R"("m":{"dtype":"U8","shape":[0],"data_offsets":[4,4]},"n":{"dtype":"U8","shape":[0],"data_offsets":[2,2]}})";
  auto tensors = parse_safetensors_header(header, 100, 10, "mem", nullptr);
  std::vector<std::string> names;
  for (const auto& t : tensors) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"z", "n", "m", "a"}));
  EXPECT_EQ(tensors[0].data_begin, 100u);
  EXPECT_EQ(tensors[3].data_begin, 108u);
}

TEST(SafetensorsHeader, OverlapWithEarlierLongTensorIsFound) {
  // c overlaps a, which ends after b: a check of adjacent pairs only would miss it.
  const std::string header =
      R"({"a":{"dtype":"U8","shape":[10],"data_offsets":[0,10]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]},)"
      R"("c":{"dtype":"U8","shape":[2],"data_offsets":[5,7]}})";
  try {
    parse_safetensors_header(header, 8, 10, "mem", nullptr);
    FAIL() << "expected an overlap error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'b' (data_offsets [1, 3]) overlaps tensor 'a'"), std::string::npos)
        << e.what();
  }
}

// A V4 shard header has ~1.5k entries and the whole model ~69k; parsing must stay linear (a
// quadratic JSON pass once took minutes here).
TEST(SafetensorsHeader, LargeHeaderParsesQuickly) {
  std::string header = "{";
  constexpr uint64_t kCount = 30000, kBytes = 2048 * 1024;
  for (uint64_t i = 0; i < kCount; ++i)
    header += fmt::format(R"({}"layers.{}.ffn.experts.{}.w1.weight":{{"dtype":"I8","shape":[2048,1024],"data_offsets":[{},{}]}})",
                          i ? "," : "", i / 256, i % 256, i * kBytes, (i + 1) * kBytes);
  header += "}";
  auto t0 = std::chrono::steady_clock::now();
  auto tensors = parse_safetensors_header(header, 8 + header.size(), kCount * kBytes, "big", nullptr);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  EXPECT_EQ(tensors.size(), kCount);
}

TEST(SafetensorsWriter, RejectsBadTensorsAndNamesThem) {
  SafetensorsWriter w;
  w.add("w", DType::F32, {2}, pattern_bytes("w", 8));
  auto message = [&](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(message([&] { w.add("w", DType::F32, {2}, pattern_bytes("w", 8)); }), "safetensors writer: tensor 'w' added twice");
  EXPECT_EQ(message([&] { w.add("x", DType::F32, {2, 2}, pattern_bytes("x", 8)); }),
            "safetensors writer: tensor 'x': shape [2, 2] of F32 needs 16 bytes, got 8");
  EXPECT_NE(message([&] { w.add("__metadata__", DType::U8, {0}, {}); }).find("reserved"), std::string::npos);
  EXPECT_NE(message([&] { w.add("neg", DType::U8, {-1}, {}); }).find("invalid shape [-1]"), std::string::npos);
}

TEST(SafetensorsWriter, IoFailureNamesPathAndLeavesNoFile) {
  TempDir dir;
  auto path = (dir.path() / "no-such-dir" / "x.safetensors").string();
  try {
    SafetensorsWriter().write(path);
    FAIL() << "expected an I/O error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ".tmp: cannot create"), std::string::npos) << e.what();
  }
}

TEST(SafetensorsWriter, ReplacesExistingFile) {
  TempDir dir;
  auto path = (dir.path() / "r.safetensors").string();
  test::write_file(path, "old contents");
  SafetensorsWriter w;
  w.add("w", DType::U8, {1}, {std::byte{42}});
  w.write(path);
  EXPECT_EQ(SafetensorsFile(path).tensors().at(0).name, "w");
}

}  // namespace
}  // namespace plumb
