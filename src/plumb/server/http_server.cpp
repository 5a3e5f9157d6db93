#include "plumb/server/http_server.h"

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility> (GCC 12).
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <deque>
#include <future>
#include <optional>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "plumb/server/api_error.h"
#include "plumb/util/error.h"

namespace plumb::server {

std::string HttpRequest::path() const { return target.substr(0, target.find('?')); }

const std::string* HttpRequest::header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? nullptr : &it->second;
}

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

constexpr std::size_t kHeaderLimit = 64 << 10;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Responses are written as raw HTTP/1.1 text: the shapes are few and fixed, and this keeps
// Beast's serializer templates out of the build.
std::string head(int status, const Headers& headers, bool keep_alive) {
  std::string out = fmt::format("HTTP/1.1 {} {}\r\n", status, status_reason(status));
  for (const auto& [name, value] : headers) out += fmt::format("{}: {}\r\n", name, value);
  out += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return out;
}

class Connection : public Exchange, public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, const HttpServerOptions& options, const Handler& handler, std::atomic<std::size_t>& open)
      : stream_(std::move(socket)), options_(options), handler_(handler), open_(open) {
    ++open_;
  }
  ~Connection() override { --open_; }

  void run() { read_request(); }

  void respond(int status, const std::string& content_type, std::string body, const Headers& extra) override {
    if (closed_ || answered_) return;
    answered_ = true;
    Headers headers = {{"Content-Type", content_type}, {"Content-Length", std::to_string(body.size())}};
    headers.insert(headers.end(), extra.begin(), extra.end());
    write(head(status, headers, keep_alive_) + body);
    finish_answer();
  }

  void start_events() override {
    if (closed_ || answered_ || streaming_) return;
    streaming_ = true;
    stream_.expires_never();  // an idle stream is not a dead connection
    write(head(200, {{"Content-Type", "text/event-stream"}, {"Cache-Control", "no-cache"}, {"Transfer-Encoding", "chunked"}},
               keep_alive_));
  }

  void send_event(std::string frame) override {
    if (closed_ || answered_ || !streaming_ || frame.empty()) return;
    write(fmt::format("{:x}\r\n", frame.size()) + frame + "\r\n");
  }

  void end_events() override {
    if (closed_ || answered_ || !streaming_) return;
    answered_ = true;
    write("0\r\n\r\n");
    finish_answer();
  }

  void post(std::function<void()> fn) override {
    net::post(stream_.get_executor(), [self = shared_from_this(), fn = std::move(fn)] { fn(); });
  }

  void on_disconnect(std::function<void()> fn) override { on_disconnect_ = std::move(fn); }
  bool disconnected() const override { return closed_; }

 private:
  void read_request() {
    parser_.emplace();
    parser_->body_limit(options_.body_limit);
    parser_->header_limit(kHeaderLimit);
    stream_.expires_after(std::chrono::seconds(options_.idle_timeout_s));
    http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      self->on_request(ec);
    });
  }

  void on_request(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == net::error::eof || ec == beast::error::timeout ||
        ec == net::error::operation_aborted || ec == net::error::connection_reset) {
      return close();
    }
    answered_ = streaming_ = false;
    keep_alive_ = false;  // errors in the request framing end the connection
    if (ec == http::error::body_limit) {
      return respond_error_and_close(413, fmt::format("the request body is larger than the limit of {} bytes", options_.body_limit));
    }
    if (ec) return respond_error_and_close(400, "malformed HTTP request: " + ec.message());
    auto& message = parser_->get();
    keep_alive_ = message.keep_alive();
    HttpRequest request;
    request.method = std::string(message.method_string());
    request.target = std::string(message.target());
    for (const auto& field : message) request.headers[lower(std::string(field.name_string()))] = std::string(field.value());
    request.body = std::move(message.body());
    parser_.reset();
    stream_.expires_never();  // answers can take as long as generation takes
    // Bytes already past this request are the next one's (the client pipelines): it is alive and
    // after_answer reads that request; else a read stays open to notice a disconnect.
    if (buffer_.size() == 0) watch();
    handler_(request, shared_from_this());
  }

  void respond_error_and_close(int status, const std::string& message) {
    respond(status, "application/json", error_body(status, message), {});
  }

  // One outstanding read while the request is answered: it ends with an error when the client
  // goes away, which is how a disconnect is noticed even on an idle stream. Bytes it reads are
  // the next request's: read at once if this answer is on the wire, else by after_answer (a
  // client may send its next request as soon as it has the last byte, before this side's write
  // completes; watching again then left that request unread until the idle timeout).
  void watch() {
    watching_ = true;
    auto space = buffer_.prepare(4096);
    stream_.async_read_some(space, [self = shared_from_this()](beast::error_code ec, std::size_t n) {
      self->watching_ = false;
      if (ec) return self->close();
      self->buffer_.commit(n);
      if (self->answered_ && self->writes_.empty()) self->read_request();
    });
  }

  void write(std::string bytes) {
    writes_.push_back(std::move(bytes));
    if (writes_.size() == 1) write_front();
  }

  void write_front() {
    net::async_write(stream_, net::buffer(writes_.front()), [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec) return self->close();
      self->writes_.pop_front();
      if (!self->writes_.empty()) return self->write_front();
      if (self->answered_) self->after_answer();
    });
  }

  void finish_answer() {
    if (writes_.empty()) after_answer();
  }

  // The last byte of an answer is on the wire: next request, or close.
  void after_answer() {
    if (!keep_alive_) {
      beast::error_code ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      return close();
    }
    if (!watching_) return read_request();
    // The watch read is still open: it picks up the next request when it arrives; a client that
    // sends nothing is dropped after the idle timeout.
    stream_.expires_after(std::chrono::seconds(options_.idle_timeout_s));
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ignored;
    stream_.socket().close(ignored);
    if (!answered_ && on_disconnect_) {
      auto fn = std::move(on_disconnect_);
      on_disconnect_ = nullptr;
      fn();
    }
  }

  beast::tcp_stream stream_;
  const HttpServerOptions& options_;
  const Handler& handler_;
  std::atomic<std::size_t>& open_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::deque<std::string> writes_;
  std::function<void()> on_disconnect_;
  bool keep_alive_ = false, answered_ = true, streaming_ = false, closed_ = false, watching_ = false;
};

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions options;
  Handler handler;
  std::atomic<std::size_t> open{0};  // declared before ioc: connections still queued in it count down
  net::io_context ioc;
  tcp::acceptor acceptor{net::make_strand(ioc)};
  std::vector<std::thread> threads;
  std::mutex stop_mutex;
  bool stopped = false;

  void accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
      if (!ec) {
        socket.set_option(tcp::no_delay(true), ec);
        std::make_shared<Connection>(std::move(socket), options, handler, open)->run();
      }
      accept();  // a failed accept (e.g. out of descriptors) does not end the server
    });
  }
};

HttpServer::HttpServer(HttpServerOptions options, Handler handler) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->handler = std::move(handler);
  if (impl_->options.threads < 1) fail("--http-threads must be >= 1, got {}", impl_->options.threads);
  beast::error_code ec;
  auto address = net::ip::make_address(impl_->options.host, ec);
  if (ec) fail("--host {}: not an IP address ({})", impl_->options.host, ec.message());
  tcp::endpoint endpoint(address, impl_->options.port);
  auto& acceptor = impl_->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) fail("cannot listen on {}:{}: {}", impl_->options.host, impl_->options.port, ec.message());
}

HttpServer::~HttpServer() { stop(); }

std::uint16_t HttpServer::port() const { return impl_->acceptor.local_endpoint().port(); }

void HttpServer::start() {
  net::post(impl_->acceptor.get_executor(), [impl = impl_.get()] { impl->accept(); });
  for (int i = 0; i < impl_->options.threads; ++i) impl_->threads.emplace_back([impl = impl_.get()] { impl->ioc.run(); });
}

void HttpServer::stop_accepting() {
  if (impl_->threads.empty()) {
    beast::error_code ignored;
    impl_->acceptor.close(ignored);
    return;
  }
  std::promise<void> done;
  net::post(impl_->acceptor.get_executor(), [impl = impl_.get(), &done] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
    done.set_value();
  });
  done.get_future().wait();
}

void HttpServer::stop() {
  std::lock_guard lock(impl_->stop_mutex);
  if (impl_->stopped) return;
  impl_->stopped = true;
  impl_->ioc.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
}

std::size_t HttpServer::open_connections() const { return impl_->open.load(); }

}  // namespace plumb::server
