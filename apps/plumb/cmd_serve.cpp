// plumb serve --model DIR [--host H] [--port P] [--api-key KEY | env PLUMB_API_KEY]
// [--served-model-name NAME] [--max-queue N] [--drain-timeout S]: the OpenAI-compatible HTTP
// server (src/plumb/server).
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>

#include "commands.h"
#include "plumb/server/serve.h"
#include "plumb/util/error.h"

namespace plumb::cli {

Runner register_serve(CLI::App& app) {
  struct Options {
    std::string model, served_name;
    server::ServeOptions serve;
  };
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (chat, completions, streaming, metrics)");
  auto o = std::make_shared<Options>();
  cmd->add_option("--model", o->model, "model directory")->required();
  cmd->add_option("--host", o->serve.http.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", o->serve.http.port, "port (0: any free port)")->capture_default_str();
  cmd->add_option("--api-key", o->serve.api.api_key, "require 'Authorization: Bearer KEY' (default: env PLUMB_API_KEY)");
  cmd->add_option("--served-model-name", o->served_name, "model name in the API (default: the model directory's name)");
  cmd->add_option("--max-queue", o->serve.api.max_queue, "waiting requests at most; more get 429")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--drain-timeout", o->serve.drain_timeout_s, "seconds running requests may finish after SIGTERM")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--http-threads", o->serve.http.threads, "I/O threads")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--max-body", o->serve.http.body_limit, "largest request body in bytes (413 beyond)")->capture_default_str();
  return [o]() {
    if (o->serve.api.api_key.empty())
      if (const char* key = std::getenv("PLUMB_API_KEY")) o->serve.api.api_key = key;
    o->serve.api.model_name =
        o->served_name.empty() ? std::filesystem::path(o->model).lexically_normal().filename().string() : o->served_name;
    if (o->serve.api.model_name.empty()) o->serve.api.model_name = std::filesystem::absolute(o->model).parent_path().filename().string();
    // TODO(#15): build the serving engine from --model and call server::serve(engine, tokenizer, o->serve, std::cout).
    fail("plumb serve: the serving engine is not available in this build (issue #15); the server cannot start");
    return 0;
  };
}

}  // namespace plumb::cli
