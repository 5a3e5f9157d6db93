// SafetensorsStreamWriter writes the same bytes as the in-memory writer, in pieces, and refuses
// any deviation from its declaration; nothing appears at the path until finish().
#include "plumb/format/safetensors_stream_writer.h"

#include <gtest/gtest.h>

#include "plumb/util/error.h"
#include "safetensors_corpus.h"

namespace plumb::test {
namespace {

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

const std::vector<TensorSpec> kSpecs = {
    {"embed.weight", DType::BF16, {300, 7}},
    {"norm.weight", DType::F32, {5}},
    {"empty", DType::U8, {0}},
    {"layers.0.big", DType::F8_E4M3, {1500, 1000}}};  // larger than the write buffer

TEST(SafetensorsStreamWriter, SameBytesAsTheInMemoryWriter) {
  TempDir tmp;
  SafetensorsWriter mem;
  std::vector<SafetensorsEntry> entries;
  for (const auto& s : kSpecs) {
    mem.add(s.name, s.dtype, s.shape, pattern_bytes(s.name, s.nbytes()));
    entries.push_back({s.name, s.dtype, s.shape});
  }
  mem.set_metadata("format", "pt");
  mem.write((tmp.path() / "mem.safetensors").string());

  SafetensorsStreamWriter w((tmp.path() / "stream.safetensors").string(), entries, {{"format", "pt"}});
  for (const auto& s : kSpecs) {
    w.begin_tensor(s.name);
    const auto data = pattern_bytes(s.name, s.nbytes());
    for (std::size_t off = 0; off < data.size(); off += 777)  // odd pieces, some spanning the buffer
      w.write(std::span(data).subspan(off, std::min<std::size_t>(777, data.size() - off)));
  }
  w.finish();
  EXPECT_EQ(w.file_size(), fs::file_size(tmp.path() / "stream.safetensors"));
  EXPECT_EQ(slurp(tmp.path() / "stream.safetensors"), slurp(tmp.path() / "mem.safetensors"));
  EXPECT_FALSE(fs::exists(tmp.path() / "stream.safetensors.tmp"));
}

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    FAIL() << "expected an error containing " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(SafetensorsStreamWriter, RefusesDeviationsAndLeavesNoFile) {
  TempDir tmp;
  const std::string path = (tmp.path() / "x.safetensors").string();
  const std::vector<SafetensorsEntry> two = {{"a", DType::F32, {2}}, {"b", DType::U8, {3}}};
  const std::vector<std::byte> four(4), eight(8), nine(9);
  {
    SafetensorsStreamWriter w(path, two);
    expect_error([&] { w.begin_tensor("b"); }, "tensor 'b' written where 'a' was declared next");
    w.begin_tensor("a");
    expect_error([&] { w.write(nine); }, "would get 9 bytes, declared 8");
    w.write(four);
    expect_error([&] { w.begin_tensor("b"); }, "tensor 'a' got 4 of its 8 bytes");
    w.write(four);
    expect_error([&] { w.finish(); }, "finished after 1 of 2 declared tensors");
    EXPECT_TRUE(fs::exists(path + ".tmp"));
  }
  EXPECT_FALSE(fs::exists(path + ".tmp"));  // an unfinished writer removes its partial file
  EXPECT_FALSE(fs::exists(path));
  expect_error(
      [&] {
        SafetensorsStreamWriter(path, {{"a", DType::F32, {1}}, {"a", DType::F32, {1}}});
      },
      "tensor 'a' declared twice");
  expect_error([&] { SafetensorsStreamWriter(path, {{"__metadata__", DType::F32, {1}}}); }, "reserved");
}

}  // namespace
}  // namespace plumb::test
