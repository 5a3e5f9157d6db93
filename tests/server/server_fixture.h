#pragma once
// The server under test: the scripted FakeEngine, the tiny-kjv tokenizer, ApiServer and the
// HTTP transport on a free loopback port.
#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "fake_engine.h"
#include "http_client.h"
#include "plumb/server/api_server.h"
#include "plumb/server/http_server.h"

namespace plumb::test {

inline const Tokenizer& tiny_kjv_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::load(std::string(PLUMB_SOURCE_DIR) + "/models/tiny-kjv");
  return tokenizer;
}

class ServerTest : public ::testing::Test {
 protected:
  void start(server::ApiOptions api = {}, server::HttpServerOptions http = {}) {
    if (api.model_name.empty()) api.model_name = "tiny-kjv";
    http.port = 0;
    api_ = std::make_unique<server::ApiServer>(engine_, tiny_kjv_tokenizer(), api);
    server_ = std::make_unique<server::HttpServer>(http, [this](const server::HttpRequest& r, std::shared_ptr<server::Exchange> x) {
      api_->handle(r, std::move(x));
    });
    server_->start();
    port_ = server_->port();
  }
  void SetUp() override { start(); }
  void TearDown() override {
    server_->stop();
    engine_.shutdown();
  }
  // Restart with other options (the default server from SetUp is replaced).
  void restart(server::ApiOptions api, server::HttpServerOptions http = {}) {
    server_->stop();
    start(std::move(api), http);
  }

  HttpResponse post(const std::string& path, const std::string& body, const std::vector<std::string>& headers = {}) {
    return http(port_, "POST", path, body, headers);
  }
  HttpResponse get(const std::string& path) { return http(port_, "GET", path); }

  // Polls `condition` for up to 10 s (a bounded loop: a broken server fails, never hangs).
  template <typename F>
  bool eventually(F condition) {
    for (int i = 0; i < 1000; ++i) {
      if (condition()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return condition();
  }

  FakeEngine engine_;
  std::unique_ptr<server::ApiServer> api_;
  std::unique_ptr<server::HttpServer> server_;
  int port_ = 0;
};

}  // namespace plumb::test
