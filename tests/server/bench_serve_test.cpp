// `plumb bench serve` (the binary) against the server on the scripted engine: it sends the
// dataset it was asked for, times every stream (no request's frames faster than the engine's
// own pauses allow), counts server errors and refused connections with clear messages, and a stalled
// stream ends by its timeout instead of hanging.
#include <algorithm>
#include <netinet/in.h>
#include <sys/socket.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "../cli/cli_test_util.h"
#include "server_fixture.h"

namespace plumb::test {
namespace {

using nlohmann::json;

class BenchServe : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    scratch_ = std::filesystem::path(::testing::TempDir()) /
               ("bench_serve_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::create_directories(scratch_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  CliResult bench(const std::string& args) { return plumb("bench serve --url " + url() + " " + args, scratch_); }
  json result() const { return json::parse(read_file(scratch_ / "result.json")); }
  std::string result_flag() const { return "--result-json " + (scratch_ / "result.json").string(); }

  std::filesystem::path scratch_;
};

constexpr int kPieces = 5;
constexpr auto kStep = std::chrono::milliseconds(20);

Script five_tokens(const runtime::Request&) {
  Script s;
  s.pieces = {"a", "b", "c", "d", "e"};
  s.finish = runtime::FinishReason::kLength;
  s.step = kStep;
  return s;
}

TEST_F(BenchServe, SendsTheRandomDatasetAndTimesEveryStream) {
  engine_.script = five_tokens;
  const CliResult r = bench("--dataset random --num-prompts 6 --random-input-len 16 --random-output-len 5 --random-vocab-size 6000 "
                            "--max-concurrency 1,3 --seed 7 " + result_flag());
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("Output token throughput"), std::string::npos) << r.out;
  const json rec = result();
  ASSERT_EQ(rec["runs"].size(), 2u);
  for (const json& run : rec["runs"]) {
    const json& s = run["summary"];
    EXPECT_EQ(s["completed"], 6) << s.dump();
    EXPECT_EQ(s["failed"], 0);
    EXPECT_EQ(s["total_output_tokens"], 6 * kPieces);  // from the usage chunks
    EXPECT_EQ(s["total_input_tokens"], 6 * 16);
    EXPECT_EQ(run["requests"]["itl_ms"].size(), 6u * (kPieces - 1));
    // The engine pauses kStep before every token after the first, so a request's last text frame
    // cannot arrive sooner than (kPieces - 1) pauses after it was sent: TTFT + its ITL gaps, and
    // its E2E, are at least that. (One gap alone has no such floor: a delayed frame and the next
    // can arrive together.)
    const double floor_ms = std::chrono::duration<double, std::milli>(kStep).count() * (kPieces - 1) * 0.95;
    double last_frames_ms = 0;
    for (const json& t : run["requests"]["ttft_ms"]) last_frames_ms += t.get<double>();
    for (const json& gap : run["requests"]["itl_ms"]) last_frames_ms += gap.get<double>();
    EXPECT_GE(last_frames_ms, 6 * floor_ms);
    for (const json& e2e : run["requests"]["e2e_ms"]) EXPECT_GE(e2e.get<double>(), floor_ms);
  }
  // What reached the engine: 12 requests (and the warm-up-free run sent nothing else), prompts
  // of exactly 16 ids from [100, 6000), max_tokens 5, streamed.
  const auto received = engine_.received();
  ASSERT_EQ(received.size(), 12u);
  for (const runtime::Request& q : received) {
    EXPECT_EQ(q.prompt.size(), 16u);
    for (runtime::TokenId id : q.prompt) EXPECT_TRUE(id >= 100 && id < 6000) << id;
    EXPECT_EQ(q.max_tokens, 5);
  }
  // One dataset, sent once per run: the same six prompts in both. The second run sends three at
  // a time, so they may reach the engine in any order within a window: compare them sorted.
  auto prompts_of_run = [&](std::size_t first) {
    std::vector<std::vector<runtime::TokenId>> p;
    for (std::size_t i = first; i < first + 6; ++i) p.push_back(received[i].prompt);
    std::sort(p.begin(), p.end());
    return p;
  };
  EXPECT_EQ(prompts_of_run(0), prompts_of_run(6));
  EXPECT_NE(received[0].prompt, received[1].prompt);  // six distinct prompts, not one repeated
}

TEST_F(BenchServe, ChatEndpointWithAFileDatasetAndWarmUp) {
  engine_.script = five_tokens;
  write_file(scratch_ / "prompts.jsonl",
             "{\"prompt\": \"In the beginning\", \"max_tokens\": 3}\n\n"
             "{\"messages\": [{\"role\": \"user\", \"content\": \"And God said\"}]}\n");
  const CliResult r = bench("--endpoint /v1/chat/completions --dataset file --dataset-path " + (scratch_ / "prompts.jsonl").string() +
                            " --random-output-len 9 --warmup 1 --ignore-eos " + result_flag());
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("warm-up: 1 requests, 0 failed"), std::string::npos) << r.out;
  const json rec = result();
  const json& s = rec["runs"][0]["summary"];
  EXPECT_EQ(s["completed"], 2);
  EXPECT_EQ(s["total_output_tokens"], 2 * kPieces);
  const auto received = engine_.received();
  ASSERT_EQ(received.size(), 3u);  // the warm-up request, then the two, in either order (sent together)
  const runtime::Request& a = received[1].max_tokens <= received[2].max_tokens ? received[1] : received[2];
  const runtime::Request& b = &a == &received[1] ? received[2] : received[1];
  EXPECT_EQ(a.max_tokens, 3);
  EXPECT_EQ(b.max_tokens, 9);
  EXPECT_TRUE(a.ignore_eos && b.ignore_eos);
}

TEST_F(BenchServe, ServerErrorsAreCountedAndAllFailedExitsTwo) {
  engine_.waiting = 1000;  // every request: 429
  const CliResult r = bench("--num-prompts 4 --random-input-len 8 --random-output-len 2 " + result_flag());
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.err.find("all 4 requests failed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("HTTP 429"), std::string::npos) << r.err;
  const json rec = result();
  const json& s = rec["runs"][0]["summary"];
  EXPECT_EQ(s["failed"], 4);
  ASSERT_EQ(s["errors"].size(), 1u);
  EXPECT_EQ(s["errors"].begin().value(), 4);
}

TEST_F(BenchServe, AStalledStreamEndsByTheTimeout) {
  engine_.script = [](const runtime::Request&) { return Script{{"."}, runtime::FinishReason::kStop, {}, /*hold=*/true}; };
  const auto t0 = std::chrono::steady_clock::now();
  const CliResult r = bench("--num-prompts 2 --random-input-len 8 --random-output-len 2 --timeout 1");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("the stream stalled: no bytes for 1 s"), std::string::npos) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));  // a bound against a hang, not a timing claim
  EXPECT_TRUE(eventually([&] { return engine_.cancels.load() == 2; }));  // the client's leaving cancelled them
}

// A port that was free a moment ago: nothing listens there.
int closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST_F(BenchServe, BadUrlsAndRefusedConnectionsAreClearErrors) {
  CliResult r = plumb("bench serve --url http://127.0.0.1:" + std::to_string(closed_port()), scratch_);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("cannot connect to 127.0.0.1:"), std::string::npos) << r.err;
  for (const char* bad : {"https://127.0.0.1:8000", "127.0.0.1:8000", "http://host:99999"}) {
    r = plumb(std::string("bench serve --url ") + bad, scratch_);
    EXPECT_EQ(r.status, 2) << bad;
    EXPECT_NE(r.err.find(std::string("--url '") + bad + "'"), std::string::npos) << r.err;
  }
  r = bench("--dataset file --dataset-path " + (scratch_ / "missing.jsonl").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("missing.jsonl: cannot open --dataset-path file: No such file"), std::string::npos) << r.err;
  // A dataset that never ends a line (or a FIFO that would block) is refused, not read forever.
  r = bench("--dataset file --dataset-path /dev/zero");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("/dev/zero: the --dataset-path file is a character device"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace plumb::test
