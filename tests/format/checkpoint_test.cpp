// Checkpoint: sharded / directory / single-file modes, laziness, and the bad-input corpus, both
// through the library (plumb::Error) and through the CLI (exit status 2, one-line message).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

#include "plumb/format/safetensors.h"
#include "plumb/util/error.h"
#include "safetensors_corpus.h"

namespace plumb {
namespace {

using test::fs::path;
using test::TempDir;
using test::TensorSpec;

bool holds_pattern(const TensorView& v) {
  auto want = test::pattern_bytes(v.info->name, v.info->nbytes);
  return v.bytes.size() == want.size() && (want.empty() || std::memcmp(v.bytes.data(), want.data(), want.size()) == 0);
}

// Three shards plus an index, like a (tiny) Hugging Face repo. One shard is a symlink, as in the
// HF cache; a stray consolidated file not named by the index is ignored.
path make_sharded(const path& dir) {
  const std::string s1 = "model-00001-of-00003.safetensors", s2 = "model-00002-of-00003.safetensors",
                    s3 = "model-00003-of-00003.safetensors";
  test::write_shard(dir / s1, {{"embed.weight", DType::BF16, {8, 4}}});
  test::write_shard(dir / "blob", {{"layers.0.attn.wq_a.weight", DType::F8_E4M3, {4, 4}},
                                   {"layers.0.attn.wq_a.scale", DType::F8_E8M0, {1, 1}},
                                   {"layers.0.ffn.experts.0.w1.weight", DType::I8, {4, 2}}});
  test::fs::create_symlink(dir / "blob", dir / s2);
  test::write_shard(dir / s3, {{"norm.weight", DType::BF16, {4}}, {"hc_head_scale", DType::F32, {1}}});
  test::write_shard(dir / "consolidated.safetensors", {{"embed.weight", DType::BF16, {8, 4}}});
  test::write_index(dir, {{"embed.weight", s1},
                          {"layers.0.attn.wq_a.weight", s2},
                          {"layers.0.attn.wq_a.scale", s2},
                          {"layers.0.ffn.experts.0.w1.weight", s2},
                          {"norm.weight", s3},
                          {"hc_head_scale", s3}});
  return dir;
}

TEST(Checkpoint, ShardedWithIndex) {
  TempDir dir;
  auto ck = Checkpoint::open(make_sharded(dir.path()).string());
  EXPECT_EQ(ck.root(), dir.path().string());
  ASSERT_EQ(ck.shards().size(), 3u);
  EXPECT_EQ(ck.tensor_count(), 6u);
  std::vector<std::string> names;
  for (const auto* t : ck.tensors()) names.push_back(t->name);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(names.front(), "embed.weight");

  const auto& scale = ck.at("layers.0.attn.wq_a.scale");
  EXPECT_EQ(scale.dtype, DType::F8_E8M0);
  EXPECT_EQ(ck.shards()[scale.shard]->path(), (dir.path() / "model-00002-of-00003.safetensors").string());
  EXPECT_EQ(ck.at("embed.weight").shard, 0u);
  EXPECT_EQ(ck.at("norm.weight").shard, 2u);
  for (const auto* t : ck.tensors()) EXPECT_TRUE(holds_pattern(ck.view(*t))) << t->name;
  EXPECT_EQ(ck.total_bytes(), 64u + 16 + 1 + 8 + 8 + 4);
  EXPECT_EQ(ck.find("head.weight"), nullptr);
}

TEST(Checkpoint, IndexFilePathOpensItsDirectory) {
  TempDir dir;
  make_sharded(dir.path());
  auto ck = Checkpoint::open((dir.path() / Checkpoint::kIndexName).string());
  EXPECT_EQ(ck.tensor_count(), 6u);
  EXPECT_EQ(ck.root(), dir.path().string());
}

TEST(Checkpoint, DirectoryWithoutIndexOpensAllFilesSorted) {
  TempDir dir;
  test::write_shard(dir.path() / "b.safetensors", {{"y", DType::F16, {3}}});
  test::write_shard(dir.path() / "a.safetensors", {{"x", DType::I32, {2}}, {"z", DType::U16, {0}}});
  test::write_file(dir.path() / "README.md", "not a shard");
  auto ck = Checkpoint::open(dir.path().string());
  ASSERT_EQ(ck.shards().size(), 2u);
  EXPECT_EQ(ck.shards()[0]->path(), (dir.path() / "a.safetensors").string());
  EXPECT_EQ(ck.at("y").shard, 1u);
  EXPECT_TRUE(holds_pattern(ck.view("y")));
  EXPECT_TRUE(holds_pattern(ck.view("x")));
}

TEST(Checkpoint, SingleFile) {
  TempDir dir;
  test::write_shard(dir.path() / "one.safetensors", {{"w", DType::F32, {2, 2}}});
  test::write_shard(dir.path() / "other.safetensors", {{"w", DType::F32, {2, 2}}});  // not opened
  auto ck = Checkpoint::open((dir.path() / "one.safetensors").string());
  EXPECT_EQ(ck.shards().size(), 1u);
  EXPECT_EQ(ck.root(), dir.path().string());
  EXPECT_TRUE(holds_pattern(ck.view("w")));
}

TEST(Checkpoint, AtNamesTheMissingTensor) {
  TempDir dir;
  test::write_shard(dir.path() / "one.safetensors", {{"w", DType::F32, {1}}});
  auto ck = Checkpoint::open(dir.path().string());
  try {
    ck.view("layers.0.missing");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no tensor 'layers.0.missing'"), std::string::npos) << e.what();
  }
}

long max_rss_kb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

// Opening a 4 GiB sparse shard must read nothing but its header: fast, no RSS growth, and no
// data page in the page cache afterwards.
TEST(Checkpoint, OpenIsLazy) {
  TempDir dir;
  constexpr uint64_t kElems = 1ull << 30, kBytes = kElems * 4;
  std::string header = fmt::format(R"({{"big":{{"dtype":"F32","shape":[{}],"data_offsets":[0,{}]}}}})", kElems, kBytes);
  header.append((8 - header.size() % 8) % 8, ' ');
  auto file = dir.path() / "big.safetensors";
  test::write_file(file, test::le64(header.size()) + header);
  ASSERT_EQ(::truncate(file.c_str(), static_cast<off_t>(8 + header.size() + kBytes)), 0);

  long rss_before = max_rss_kb();
  auto t0 = std::chrono::steady_clock::now();
  auto ck = Checkpoint::open(dir.path().string());
  auto v = ck.view("big");
  auto elapsed = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(elapsed, std::chrono::seconds(2));
  EXPECT_LT(max_rss_kb() - rss_before, 50 * 1024);
  ASSERT_EQ(v.bytes.size(), kBytes);

  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  auto begin = (reinterpret_cast<uintptr_t>(v.bytes.data()) + page - 1) / page * page;
  auto end = reinterpret_cast<uintptr_t>(v.bytes.data() + v.bytes.size()) / page * page;
  std::vector<unsigned char> resident((end - begin) / page);
  ASSERT_EQ(::mincore(reinterpret_cast<void*>(begin), end - begin, resident.data()), 0) << std::strerror(errno);
  std::size_t touched = 0;
  for (unsigned char r : resident) touched += r & 1;
  EXPECT_EQ(touched, 0u) << "data pages resident after open";
}

// ---- bad-input corpus

std::vector<test::BadCase> all_bad_cases() {
  auto cases = test::bad_file_corpus();
  for (auto& c : test::bad_checkpoint_corpus()) cases.push_back(std::move(c));
  return cases;
}

class BadInput : public ::testing::TestWithParam<test::BadCase> {};

void expect_mentions(const std::string& message, const std::vector<std::string>& expect) {
  for (const auto& want : expect) EXPECT_NE(message.find(want), std::string::npos) << "missing '" << want << "' in: " << message;
}

TEST_P(BadInput, OpenThrowsPlumbErrorNamingFileAndExpectation) {
  TempDir dir;
  auto target = GetParam().build(dir.path());
  try {
    Checkpoint::open(target.string());
    FAIL() << "opened without error";
  } catch (const Error& e) {
    std::string message = e.what();
    expect_mentions(message, GetParam().expect);
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST_P(BadInput, CliInspectExitsTwoWithOneLineError) {
  TempDir dir, scratch;
  auto target = GetParam().build(dir.path());
  auto err_file = scratch.path() / "stderr";
  auto cmd = fmt::format("'{}' inspect '{}' >/dev/null 2>'{}'", PLUMB_BINARY, target.string(), err_file.string());
  int status = std::system(cmd.c_str());
  std::ifstream in(err_file);
  std::string err{std::istreambuf_iterator<char>(in), {}};
  ASSERT_TRUE(WIFEXITED(status)) << "crashed: " << err;
  EXPECT_EQ(WEXITSTATUS(status), 2) << err;
  EXPECT_TRUE(err.starts_with("plumb: error: ")) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  expect_mentions(err, GetParam().expect);
}

INSTANTIATE_TEST_SUITE_P(Corpus, BadInput, ::testing::ValuesIn(all_bad_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace plumb
