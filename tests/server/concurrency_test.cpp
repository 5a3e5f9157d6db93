// Thread and lifecycle tests of the server (ctest label "concurrency": the TSan run picks them
// up): disconnects cancel, many concurrent streams complete, idle streams hold no thread each,
// shutdown ends streams with an error event.
#include <dirent.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "plumb/server/serve.h"
#include "server_fixture.h"

#include <csignal>
#include <future>
#include <sstream>
#include <unistd.h>

namespace plumb::test {
namespace {

using nlohmann::json;

const std::string kStream = R"({"messages": [{"role": "user", "content": "In the beginning"}], "stream": true})";

std::string request(const std::string& body) { return request_text("POST", "/v1/chat/completions", body); }

int thread_count() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

long rss_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

using ServerConcurrency = ServerTest;

TEST_F(ServerConcurrency, ClientDisconnectCancelsTheRequest) {
  engine_.script = [](const runtime::Request&) { return Script{{"And"}, runtime::FinishReason::kStop, {}, /*hold=*/true}; };
  {
    Socket s(port_);
    s.send_all(request(kStream));
    ASSERT_TRUE(s.read_until("And"));  // the stream is running
    EXPECT_EQ(engine_.cancels.load(), 0);
  }  // the client goes away
  EXPECT_TRUE(eventually([&] { return engine_.cancels.load() == 1 && engine_.running() == 0; }));
  // Non-streamed too: the disconnect is seen while the answer is pending.
  {
    Socket s(port_);
    s.send_all(request(R"({"messages": [{"role": "user", "content": "x"}], "n": 2})"));
    EXPECT_TRUE(eventually([&] { return engine_.running() == 2; }));
  }
  EXPECT_TRUE(eventually([&] { return engine_.cancels.load() == 3 && engine_.running() == 0; }));
  EXPECT_EQ(get("/health").status, 200);
}

TEST_F(ServerConcurrency, SixtyFourConcurrentStreamsAllComplete) {
  engine_.script = [](const runtime::Request& r) {
    Script s;
    s.pieces = {"a", "b", "c", std::to_string(r.prompt.size())};
    s.step = std::chrono::milliseconds(2);
    return s;
  };
  constexpr int kClients = 64, kRequestsEach = 3;
  std::vector<std::thread> clients;
  std::atomic<int> complete{0};
  std::vector<std::string> failures(kClients);
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      for (int k = 0; k < kRequestsEach; ++k) {
        std::string words(static_cast<std::size_t>(c % 7 + 1), 'x');
        std::string body = R"({"messages": [{"role": "user", "content": ")" + words + R"("}], "stream": true})";
        HttpResponse r = http(port_, "POST", "/v1/chat/completions", body);
        std::string text;
        auto payloads = sse_payloads(r.body);
        for (std::size_t i = 0; i + 1 < payloads.size(); ++i)
          text += json::parse(payloads[i])["choices"][0]["delta"].value("content", "");
        std::size_t prompt = tiny_kjv_tokenizer().encode(render_conversation({{{ChatMessage::Role::kUser, words}}})).size();
        if (r.status == 200 && payloads.back() == "[DONE]" && text == "abc" + std::to_string(prompt)) ++complete;
        else failures[c] = r.body.substr(0, 200);
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(complete.load(), kClients * kRequestsEach);
  for (const auto& f : failures) EXPECT_EQ(f, "");
  EXPECT_EQ(engine_.cancels.load(), 0);
}

// The measurement behind the choice of Boost.Beast/Asio (docs/PERF.md): 1,000 idle SSE
// streams on the server's 2 I/O threads; the process gains no thread per stream.
TEST_F(ServerConcurrency, ThousandIdleStreamsHoldNoThreadEach) {
  engine_.script = [](const runtime::Request&) { return Script{{"."}, runtime::FinishReason::kStop, {}, /*hold=*/true}; };
  const int threads_before = thread_count();
  const long rss_before = rss_kib();
  constexpr int kStreams = 1000;
  std::vector<std::unique_ptr<Socket>> streams;
  for (int i = 0; i < kStreams; ++i) {
    streams.push_back(std::make_unique<Socket>(port_));
    streams.back()->send_all(request(kStream));
  }
  int open = 0;
  for (auto& s : streams) open += s->read_until("data: ");
  EXPECT_EQ(open, kStreams);
  const int threads_during = thread_count();
  const long rss_during = rss_kib();
  std::printf("[ measurement ] %d idle SSE streams: threads %d -> %d, RSS %ld -> %ld KiB (%.1f KiB per stream, client sockets included)\n",
              kStreams, threads_before, threads_during, rss_before, rss_during,
              static_cast<double>(rss_during - rss_before) / kStreams);
  EXPECT_EQ(threads_during, threads_before);
  EXPECT_EQ(server_->open_connections(), static_cast<std::size_t>(kStreams));
  EXPECT_EQ(get("/health").status, 200);  // still answering
  streams.clear();
  EXPECT_TRUE(eventually([&] { return engine_.cancels.load() == kStreams && engine_.running() == 0; }));
}

TEST_F(ServerConcurrency, ShutdownAfterTheDrainEndsStreamsWithAnErrorEvent) {
  engine_.script = [](const runtime::Request&) { return Script{{"And"}, runtime::FinishReason::kStop, {}, /*hold=*/true}; };
  Socket s(port_);
  s.send_all(request(kStream));
  ASSERT_TRUE(s.read_until("And"));
  api_->begin_drain();
  EXPECT_EQ(api_->active_generations(), 1u);
  EXPECT_EQ(post("/v1/chat/completions", kStream).status, 503);
  api_->cancel_all();
  s.read_to_end();
  HttpResponse r = parse_response(s.data());
  auto payloads = sse_payloads(r.body);
  ASSERT_GE(payloads.size(), 3u);
  json error = json::parse(payloads[payloads.size() - 2]);
  EXPECT_EQ(error["error"]["type"], "service_unavailable");
  EXPECT_EQ(payloads.back(), "[DONE]");
  EXPECT_TRUE(eventually([&] { return api_->active_generations() == 0; }));
}

// serve(): SIGTERM stops accepting, lets a running stream go on for the drain timeout, then ends
// it with an error event and returns with the engine shut down.
TEST_F(ServerConcurrency, SigtermDrainsThenCancels) {
  engine_.script = [](const runtime::Request&) { return Script{{"And"}, runtime::FinishReason::kStop, {}, /*hold=*/true}; };
  server::ServeOptions options;
  options.http.port = 0;
  options.api.model_name = "tiny-kjv";
  options.drain_timeout_s = 0.3;
  std::promise<std::uint16_t> ready;
  std::ostringstream log;
  std::thread serving([&] { server::serve(engine_, tiny_kjv_tokenizer(), options, log, [&](std::uint16_t p) { ready.set_value(p); }); });
  const int port = ready.get_future().get();
  Socket s(port);
  s.send_all(request(kStream));
  ASSERT_TRUE(s.read_until("And"));
  auto t0 = std::chrono::steady_clock::now();
  ::kill(::getpid(), SIGTERM);
  s.read_to_end();
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  serving.join();
  EXPECT_GE(waited, 0.3);  // the stream was given the drain timeout
  auto payloads = sse_payloads(parse_response(s.data()).body);
  ASSERT_GE(payloads.size(), 3u);
  EXPECT_EQ(json::parse(payloads[payloads.size() - 2])["error"]["type"], "service_unavailable");
  EXPECT_EQ(payloads.back(), "[DONE]");
  EXPECT_EQ(engine_.cancels.load(), 1);
  EXPECT_NE(log.str().find("ready on http://127.0.0.1:"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("drain timeout"), std::string::npos) << log.str();
}

}  // namespace
}  // namespace plumb::test
