#include "plumb/server/serve.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

namespace plumb::server {
namespace {

std::atomic<int> g_signal{0};

extern "C" void on_signal(int sig) { g_signal = sig; }

// Installs the handlers for the lifetime of serve() and restores the previous ones after.
class SignalScope {
 public:
  SignalScope() {
    g_signal = 0;
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, &old_term_);
    sigaction(SIGINT, &action, &old_int_);
  }
  ~SignalScope() {
    sigaction(SIGTERM, &old_term_, nullptr);
    sigaction(SIGINT, &old_int_, nullptr);
  }

 private:
  struct sigaction old_term_ {}, old_int_ {};
};

template <typename F>
bool wait_for(F done, std::chrono::duration<double> limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace

void serve(runtime::Engine& engine, const Tokenizer& tokenizer, const ServeOptions& options, std::ostream& log,
           const std::function<void(std::uint16_t)>& on_ready) {
  SignalScope signals;
  ApiServer api(engine, tokenizer, options.api);
  HttpServer http(options.http, [&api](const HttpRequest& request, std::shared_ptr<Exchange> exchange) {
    api.handle(request, std::move(exchange));
  });
  http.start();
  log << fmt::format("plumb serve: ready on http://{}:{} (model {})", options.http.host, http.port(), options.api.model_name)
      << std::endl;
  if (on_ready) on_ready(http.port());
  while (g_signal == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));

  log << fmt::format("plumb serve: signal {}: draining {} running request(s) for up to {} s", g_signal.load(),
                     api.active_generations(), options.drain_timeout_s)
      << std::endl;
  api.begin_drain();
  http.stop_accepting();
  if (!wait_for([&] { return api.active_generations() == 0; }, std::chrono::duration<double>(options.drain_timeout_s))) {
    log << fmt::format("plumb serve: drain timeout: cancelling {} request(s)", api.active_generations()) << std::endl;
    api.cancel_all();
    // Each cancelled request still gets its final event and its error frame written.
    wait_for([&] { return api.active_generations() == 0; }, std::chrono::seconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let the last frames reach the sockets
  http.stop();
  engine.shutdown();
  log << "plumb serve: stopped" << std::endl;
}

}  // namespace plumb::server
