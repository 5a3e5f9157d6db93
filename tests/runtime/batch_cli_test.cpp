// `plumb batch` end to end on models/tiny-kjv: results in input order with the documented fields,
// token_ids equal to what `plumb generate --greedy --out-ids` writes for the same prompt, one
// error record per bad line while the others still run, and usage errors.
#include <sys/wait.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "../format/safetensors_corpus.h"
#include "plumb/format/npy.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
const fs::path kModel = fs::path(PLUMB_SOURCE_DIR) / "models" / "tiny-kjv";

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Cli {
  int status;
  std::string err;
};

Cli plumb_cli(const std::string& args, const fs::path& dir) {
  const fs::path err = dir / "stderr.txt";
  const std::string cmd = std::string(PLUMB_BINARY) + " " + args + " > /dev/null 2> " + err.string();
  const int rc = std::system(cmd.c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, slurp(err)};
}

std::vector<json> read_jsonl(const fs::path& p) {
  std::vector<json> out;
  std::istringstream in(slurp(p));
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

TEST(BatchCli, RunsEveryGoodLineAndReportsTheBadOnes) {
  test::TempDir tmp;
  const std::vector<std::int32_t> ids = {0, 560, 33, 1207, 9, 88, 400};
  write_npy((tmp.path() / "ids.npy").string(), DType::I32, {static_cast<std::int64_t>(ids.size())}, ids.data());
  const Cli gen = plumb_cli("generate --model " + kModel.string() + " --threads 2 --greedy --max-new-tokens 12 --ids " +
                                (tmp.path() / "ids.npy").string() + " --out-ids " + (tmp.path() / "out.npy").string(),
                            tmp.path());
  ASSERT_EQ(gen.status, 0) << gen.err;
  const std::vector<TokenId> want = read_token_ids((tmp.path() / "out.npy").string());

  const std::string input =
      json({{"id", "ids"}, {"prompt_ids", ids}, {"max_tokens", 12}, {"greedy", true}}).dump() + "\n" +
      "\n{not json\n" +  // a blank line is skipped but counted
      json({{"id", 7}, {"prompt", "In the beginning"}, {"max_tokens", 5}, {"temperature", 0.8}, {"seed", 3}}).dump() +
      "\n" + json({{"id", "typo"}, {"prompt", "x"}, {"max_tokns", 5}}).dump() + "\n" +
      json({{"id", "chat"}, {"messages", {{{"role", "user"}, {"content", "Who made the heaven?"}}}}, {"max_tokens", 6}})
          .dump() +
      "\n" + json({{"id", "vocab"}, {"prompt_ids", {1, 999999}}}).dump() + "\n" +
      json({{"id", "both"}, {"prompt", "a"}, {"prompt_ids", {1}}}).dump() + "\n";
  test::write_file(tmp.path() / "in.jsonl", input);
  const Cli r = plumb_cli("batch --model " + kModel.string() + " --threads 2 --max-seqs 4 --kv-cache-mb 64 --input " +
                              (tmp.path() / "in.jsonl").string() + " --output " + (tmp.path() / "out.jsonl").string(),
                          tmp.path());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("memory: KV pool"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("7/7 requests"), std::string::npos) << r.err;  // the progress bar's last line
  const std::vector<json> out = read_jsonl(tmp.path() / "out.jsonl");
  ASSERT_EQ(out.size(), 7u);

  EXPECT_EQ(out[0]["id"], "ids");
  EXPECT_EQ(out[0]["token_ids"].get<std::vector<TokenId>>(), want);
  EXPECT_EQ(out[0]["usage"]["prompt_tokens"], ids.size());
  EXPECT_EQ(out[0]["usage"]["completion_tokens"], want.size());
  EXPECT_EQ(out[0]["usage"]["total_tokens"], ids.size() + want.size());
  EXPECT_TRUE(out[0]["finish_reason"] == "length" || out[0]["finish_reason"] == "stop") << out[0];

  EXPECT_TRUE(out[1]["id"].is_null());
  EXPECT_NE(out[1]["error"].get<std::string>().find("line 3:"), std::string::npos) << out[1];

  EXPECT_EQ(out[2]["id"], 7);
  EXPECT_FALSE(out[2].contains("error")) << out[2];
  EXPECT_LE(out[2]["token_ids"].size(), 5u);
  EXPECT_EQ(out[2]["text"].get<std::string>().empty(), out[2]["token_ids"].empty());

  EXPECT_NE(out[3]["error"].get<std::string>().find("unknown field 'max_tokns'"), std::string::npos) << out[3];
  EXPECT_FALSE(out[4].contains("error")) << out[4];
  EXPECT_GE(out[4]["token_ids"].size(), 1u);
  EXPECT_NE(out[5]["error"].get<std::string>().find("outside the vocabulary"), std::string::npos) << out[5];
  EXPECT_NE(out[6]["error"].get<std::string>().find("exactly one of"), std::string::npos) << out[6];
}

TEST(BatchCli, SameSeedSameTokensAcrossRunsAndBatchings) {
  test::TempDir tmp;
  std::string input;
  for (int i = 0; i < 5; ++i)
    input += json({{"id", i}, {"prompt", "And God said " + std::to_string(i)}, {"max_tokens", 8}, {"temperature", 1.0},
                   {"seed", 100 + i}, {"ignore_eos", true}})
                 .dump() +
             "\n";
  test::write_file(tmp.path() / "in.jsonl", input);
  std::vector<std::vector<json>> runs;
  for (const char* flags : {"--max-seqs 1", "--max-seqs 5 --max-batch-tokens 9 --scheduler srpt"}) {
    const fs::path out = tmp.path() / "out.jsonl";
    const Cli r = plumb_cli("batch --quiet --model " + kModel.string() + " --threads 2 --kv-cache-mb 64 " + flags +
                                " --input " + (tmp.path() / "in.jsonl").string() + " --output " + out.string(),
                            tmp.path());
    ASSERT_EQ(r.status, 0) << r.err;
    runs.push_back(read_jsonl(out));
  }
  ASSERT_EQ(runs[0].size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(runs[0][i]["token_ids"], runs[1][i]["token_ids"]) << i;
    EXPECT_EQ(runs[0][i]["token_ids"].size(), 8u);
  }
}

TEST(BatchCli, UsageErrors) {
  test::TempDir tmp;
  Cli r = plumb_cli("batch --model " + kModel.string() + " --input " + (tmp.path() / "missing.jsonl").string() +
                        " --output " + (tmp.path() / "o.jsonl").string(),
                    tmp.path());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("cannot open input file: No such file"), std::string::npos) << r.err;
  test::write_file(tmp.path() / "in.jsonl", "{\"prompt\": \"a\"}\n");
  r = plumb_cli("batch --model " + kModel.string() + " --kv-block-size 200 --input " + (tmp.path() / "in.jsonl").string() +
                    " --output " + (tmp.path() / "o.jsonl").string(),
                tmp.path());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("multiple of 128"), std::string::npos) << r.err;
  r = plumb_cli("batch --model " + kModel.string() + " --scheduler lifo --input " + (tmp.path() / "in.jsonl").string() +
                    " --output " + (tmp.path() / "o.jsonl").string(),
                tmp.path());
  EXPECT_EQ(r.status, 2);
}

}  // namespace
}  // namespace plumb
