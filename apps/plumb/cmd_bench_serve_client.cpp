#include "cmd_bench_serve_client.h"

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility> (GCC 12).
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <cmath>
#include <optional>
#include <random>
#include <regex>

#include <fmt/format.h>

#include "plumb/util/error.h"

namespace plumb::cli::bench {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;
constexpr auto kAwait = net::use_awaitable;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::chrono::steady_clock::duration timeout_of(const ClientOptions& c) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(c.timeout_s));
}

// One HTTP exchange on a fresh connection; every wait is bounded by the client's timeout.
class Connection {
 public:
  Connection(net::any_io_executor ex, const ClientOptions& c) : c_(c), stream_(ex), resolver_(ex) {}

  // Connects and sends the request; returns an error message or "".
  net::awaitable<std::string> send(http::verb verb, const std::string& target, const std::string& body) {
    beast::error_code ec;
    auto endpoints = co_await resolver_.async_resolve(c_.url.host, c_.url.port, net::redirect_error(kAwait, ec));
    if (ec) co_return fmt::format("cannot resolve {}: {}", c_.url.host, ec.message());
    stream_.expires_after(timeout_of(c_));
    co_await stream_.async_connect(endpoints, net::redirect_error(kAwait, ec));
    if (ec) co_return fmt::format("cannot connect to {}:{}: {}", c_.url.host, c_.url.port, ec.message());
    http::request<http::string_body> req{verb, target, 11};
    req.set(http::field::host, c_.url.host);
    req.set(http::field::connection, "close");
    if (!c_.api_key.empty()) req.set(http::field::authorization, "Bearer " + c_.api_key);
    if (verb == http::verb::post) {
      req.set(http::field::content_type, "application/json");
      req.body() = body;
      req.prepare_payload();
    }
    stream_.expires_after(timeout_of(c_));
    co_await http::async_write(stream_, req, net::redirect_error(kAwait, ec));
    if (ec) co_return fmt::format("sending {} failed: {}", target, ec.message());
    co_return "";
  }

  // Reads the status line and headers; returns an error message or "".
  net::awaitable<std::string> read_header() {
    beast::error_code ec;
    parser_.body_limit(std::numeric_limits<std::uint64_t>::max());
    stream_.expires_after(timeout_of(c_));
    co_await http::async_read_header(stream_, buffer_, parser_, net::redirect_error(kAwait, ec));
    if (ec) co_return ec == beast::error::timeout ? fmt::format("no answer within {} s", c_.timeout_s) : "reading the answer failed: " + ec.message();
    co_return "";
  }

  int status() const { return parser_.get().result_int(); }

  // Reads the rest of the body; chunked bodies go to `on_chunk` piece by piece as they arrive
  // (and are not kept), others end up in body().
  net::awaitable<std::string> read_body(std::function<void(std::string_view)> on_chunk = {}) {
    // Beast keeps a reference to the callback: it lives in this coroutine's frame until the end.
    auto callback = [&on_chunk](std::uint64_t, beast::string_view data, beast::error_code&) -> std::size_t {
      on_chunk(std::string_view(data.data(), data.size()));
      return data.size();
    };
    if (on_chunk) parser_.on_chunk_body(callback);
    beast::error_code ec;
    while (!parser_.is_done()) {
      stream_.expires_after(timeout_of(c_));
      co_await http::async_read_some(stream_, buffer_, parser_, net::redirect_error(kAwait, ec));
      if (ec == beast::error::timeout) co_return fmt::format("the stream stalled: no bytes for {} s", c_.timeout_s);
      if (ec) co_return "reading the answer failed: " + ec.message();
    }
    co_return "";
  }

  std::string& body() { return parser_.get().body(); }

 private:
  const ClientOptions& c_;
  beast::tcp_stream stream_;
  tcp::resolver resolver_;
  beast::flat_buffer buffer_;
  http::response_parser<http::string_body> parser_;
};

// The message of an OpenAI error body, or the body itself.
std::string error_message(const std::string& body) {
  const Json j = Json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object() && j["error"].contains("message"))
    return j["error"]["message"].is_string() ? j["error"]["message"].get<std::string>() : j["error"]["message"].dump();
  return body.substr(0, 200);
}

Json request_body(const ClientOptions& c, const Prompt& p) {
  Json body = {{"model", c.model},
               {"max_tokens", p.output_len},
               {"temperature", c.temperature},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (c.ignore_eos) body["ignore_eos"] = true;
  if (c.endpoint == "/v1/chat/completions")
    body["messages"] = p.prompt.is_array() && !p.prompt.empty() && p.prompt[0].is_object() ? p.prompt
                                                                                          : Json::array({{{"role", "user"}, {"content", p.prompt}}});
  else
    body["prompt"] = p.prompt;
  return body;
}

// The text a streamed chunk carries (completions: text; chat: content and reasoning deltas).
std::string chunk_text(const Json& choice) {
  if (choice.contains("text") && choice["text"].is_string()) return choice["text"];
  std::string out;
  if (const auto d = choice.find("delta"); d != choice.end() && d->is_object())
    for (const char* key : {"content", "reasoning_content"})
      if (d->contains(key) && (*d)[key].is_string()) out += (*d)[key].get<std::string>();
  return out;
}

// Takes SSE bytes as they come; times each frame that carries text.
class SseTimer {
 public:
  SseTimer(RequestRecord& r, Clock::time_point start) : r_(r), start_(start) {}

  void feed(std::string_view bytes) {
    pending_.append(bytes);
    for (std::size_t end; (end = pending_.find("\n\n")) != std::string::npos; pending_.erase(0, end + 2)) frame(pending_.substr(0, end));
  }
  bool done() const { return done_; }
  const std::string& error() const { return error_; }
  std::int64_t text_frames() const { return text_frames_; }

 private:
  void frame(const std::string& f) {
    if (f.rfind("data: ", 0) != 0) return;  // comments, other fields
    const std::string payload = f.substr(6);
    if (payload == "[DONE]") {
      done_ = true;
      return;
    }
    const Json chunk = Json::parse(payload, nullptr, false);
    if (chunk.is_discarded()) return fail_once("a stream frame is not JSON: " + payload.substr(0, 80));
    if (chunk.contains("error")) return fail_once("error event: " + error_message(payload));
    if (chunk.contains("usage") && chunk["usage"].is_object()) {
      r_.output_tokens = chunk["usage"].value("completion_tokens", std::int64_t{0});
      r_.input_tokens = chunk["usage"].value("prompt_tokens", std::int64_t{0});
    }
    bool text = false;
    if (chunk.contains("choices") && chunk["choices"].is_array())
      for (const Json& choice : chunk["choices"]) text |= !chunk_text(choice).empty();
    if (!text) return;
    const double t = seconds_since(start_);
    if (text_frames_++ == 0) r_.ttft_s = t;
    else r_.itl_s.push_back(t - last_);
    last_ = t;
  }
  void fail_once(const std::string& e) {
    if (error_.empty()) error_ = e;
  }

  RequestRecord& r_;
  Clock::time_point start_;
  std::string pending_, error_;
  bool done_ = false;
  std::int64_t text_frames_ = 0;
  double last_ = 0;
};

net::awaitable<RequestRecord> run_request(const ClientOptions& c, const Prompt& p, Clock::time_point run_start) {
  RequestRecord r;
  const Clock::time_point start = Clock::now();
  r.start_s = std::chrono::duration<double>(start - run_start).count();
  r.input_tokens = p.input_len;
  Connection conn(co_await net::this_coro::executor, c);
  std::string error = co_await conn.send(http::verb::post, c.endpoint, request_body(c, p).dump());
  if (error.empty()) error = co_await conn.read_header();
  if (error.empty() && conn.status() != 200) {
    const int status = conn.status();
    error = co_await conn.read_body();
    if (error.empty()) error = fmt::format("HTTP {}: {}", status, error_message(conn.body()));
  } else if (error.empty()) {
    SseTimer sse(r, start);
    error = co_await conn.read_body([&sse](std::string_view bytes) { sse.feed(bytes); });
    if (error.empty() && !conn.body().empty()) sse.feed(conn.body());  // a stream sent without chunking: timed at its end
    if (error.empty()) error = sse.error();
    if (error.empty() && !sse.done()) error = "the stream ended without data: [DONE]";
    if (r.output_tokens == 0) r.output_tokens = sse.text_frames();
  }
  r.e2e_s = seconds_since(start);
  r.ok = error.empty();
  r.error = error;
  co_return r;
}

net::awaitable<std::string> get(const ClientOptions& c, const std::string& path) {
  Connection conn(co_await net::this_coro::executor, c);
  std::string error = co_await conn.send(http::verb::get, path, "");
  if (error.empty()) error = co_await conn.read_header();
  if (error.empty()) error = co_await conn.read_body();
  if (error.empty() && conn.status() != 200) error = fmt::format("HTTP {}: {}", conn.status(), error_message(conn.body()));
  if (!error.empty()) throw Error(fmt::format("GET http://{}:{}{}: {}", c.url.host, c.url.port, path, error));
  co_return std::move(conn.body());
}

// Waits on a timer that another coroutine cancels when something changed (one thread: no locks).
net::awaitable<void> wait_for_change(net::steady_timer& changed) {
  changed.expires_at(Clock::time_point::max());
  beast::error_code ec;
  co_await changed.async_wait(net::redirect_error(kAwait, ec));
}

struct Run {
  const ClientOptions& client;
  const std::vector<Prompt>& prompts;
  const LoadShape& shape;
  const std::function<void(double, const std::string&)>& on_sample;
  LoadResult result;
  std::int64_t in_flight = 0;
  bool dispatching = true;
  Clock::time_point start = Clock::now();

  bool more(std::size_t i) const {
    return shape.duration_s > 0 ? seconds_since(start) < shape.duration_s : i < prompts.size();
  }

  net::awaitable<void> dispatch() {
    auto ex = co_await net::this_coro::executor;
    net::steady_timer changed(ex), arrival(ex);
    std::mt19937_64 rng(shape.seed);
    const bool paced = shape.request_rate > 0 && std::isfinite(shape.request_rate);
    std::exponential_distribution<double> gap(paced ? shape.request_rate : 1.0);
    Clock::time_point next = Clock::now();
    for (std::size_t i = 0; more(i); ++i) {
      if (paced) {
        next += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
        arrival.expires_at(next);
        co_await arrival.async_wait(kAwait);
      }
      while (shape.max_concurrency > 0 && in_flight >= shape.max_concurrency) co_await wait_for_change(changed);
      if (!more(i)) break;  // a soak may have ended while waiting for a slot
      ++in_flight;
      const std::size_t slot = result.records.size();
      result.records.emplace_back();
      net::co_spawn(ex, one(prompts[i % prompts.size()], slot, changed), net::detached);
    }
    while (in_flight > 0) co_await wait_for_change(changed);
    result.wall_s = seconds_since(start);
    dispatching = false;
  }

  net::awaitable<void> one(const Prompt& p, std::size_t slot, net::steady_timer& changed) {
    RequestRecord r;
    try {
      r = co_await run_request(client, p, start);
    } catch (const std::exception& e) {  // counted like any failure; the dispatcher must hear of it
      r.ok = false;
      r.error = std::string("client error: ") + e.what();
    }
    result.records[slot] = std::move(r);
    --in_flight;
    changed.cancel();
  }

  net::awaitable<void> sample() {
    net::steady_timer tick(co_await net::this_coro::executor);
    auto sample_once = [&]() -> net::awaitable<void> {
      std::string body;
      try {
        body = co_await get(client, "/metrics");
      } catch (const Error&) {  // recorded as a failed sample: the soak goes on
      }
      on_sample(seconds_since(start), body);
    };
    co_await sample_once();
    for (Clock::time_point next = Clock::now(); dispatching;) {
      next += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(shape.sample_interval_s));
      while (dispatching && Clock::now() < next) {
        tick.expires_after(std::chrono::milliseconds(100));
        co_await tick.async_wait(kAwait);
      }
      co_await sample_once();
    }
  }
};

}  // namespace

Url parse_url(const std::string& url) {
  static const std::regex pattern(R"(http://(\[[0-9a-fA-F:]+\]|[A-Za-z0-9._-]+)(?::([0-9]{1,5}))?(/.*)?)");
  std::smatch m;
  if (!std::regex_match(url, m, pattern))
    fail("--url '{}': expected http://HOST[:PORT] (plain HTTP; https is not supported)", url);
  Url u;
  u.host = m[1].str();
  if (u.host.front() == '[') u.host = u.host.substr(1, u.host.size() - 2);
  u.port = m[2].matched ? m[2].str() : "80";
  if (std::stoi(u.port) < 1 || std::stoi(u.port) > 65535) fail("--url '{}': port {} is outside 1..65535", url, u.port);
  return u;
}

LoadResult run_load(const ClientOptions& client, const std::vector<Prompt>& prompts, const LoadShape& shape,
                    const std::function<void(double, const std::string&)>& on_sample) {
  if (prompts.empty()) fail("no prompts to send");
  net::io_context ioc;
  Run run{client, prompts, shape, on_sample, {}};
  net::co_spawn(ioc, run.dispatch(), [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
  if (on_sample) net::co_spawn(ioc, run.sample(), net::detached);
  ioc.run();
  return std::move(run.result);
}

std::string http_get(const ClientOptions& client, const std::string& path) {
  net::io_context ioc;
  std::optional<std::string> body;
  std::exception_ptr error;
  net::co_spawn(ioc, get(client, path), [&](std::exception_ptr e, std::string b) {
    error = e;
    body = std::move(b);
  });
  ioc.run();
  if (error) std::rethrow_exception(error);
  return *body;
}

}  // namespace plumb::cli::bench
