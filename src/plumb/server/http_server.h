#pragma once
// The HTTP/1.1 transport of `plumb serve`: an event-driven server (Boost.Beast parses requests,
// Boost.Asio runs every connection on a few threads) that hands each request to one Handler and
// lets it answer either with one response or with a Server-Sent-Events stream. No thread is held
// per connection, so thousands of idle streams cost only their sockets and buffers
// (docs/PERF.md). Beast stays inside http_server.cpp: nothing else includes it.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace plumb::server {

struct HttpRequest {
  std::string method;                         // "GET", "POST", ...
  std::string target;                         // path and query as sent
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;

  std::string path() const;  // target without the query
  const std::string* header(const std::string& lower_name) const;
};

using Headers = std::vector<std::pair<std::string, std::string>>;

// One request's answer. All methods must be called on the exchange's executor: from the Handler
// itself or from a function given to post(). Calls after the client went away are ignored.
class Exchange {
 public:
  virtual ~Exchange() = default;
  // A complete response; the exchange is over once it is written.
  virtual void respond(int status, const std::string& content_type, std::string body, const Headers& extra = {}) = 0;
  // Starts an SSE response (200, text/event-stream, chunked); then any number of send_event()
  // calls, each one complete "data: ...\n\n" frame, and one end_events().
  virtual void start_events() = 0;
  virtual void send_event(std::string frame) = 0;
  virtual void end_events() = 0;
  // Runs `fn` on this exchange's executor (safe from any thread, also after a disconnect).
  virtual void post(std::function<void()> fn) = 0;
  // `fn` runs once, on the executor, when the client disconnects before the answer is complete.
  virtual void on_disconnect(std::function<void()> fn) = 0;
  virtual bool disconnected() const = 0;
};

using Handler = std::function<void(const HttpRequest&, std::shared_ptr<Exchange>)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 8000;            // 0: any free port (see HttpServer::port)
  int threads = 2;                      // I/O threads for all connections together
  std::size_t body_limit = 8u << 20;    // larger request bodies get 413
  int idle_timeout_s = 120;             // keep-alive connections with no request are closed
};

class HttpServer {
 public:
  // Binds and listens (throws plumb::Error naming the address on failure); serving starts with
  // start().
  HttpServer(HttpServerOptions options, Handler handler);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  std::uint16_t port() const;
  void start();            // runs the I/O threads
  void stop_accepting();   // closes the listening socket; open connections go on
  void stop();             // closes everything and joins the threads; idempotent
  std::size_t open_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace plumb::server
