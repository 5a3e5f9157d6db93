// plumb serve --model DIR [--host H] [--port P] [--api-key KEY | env PLUMB_API_KEY]
// [--served-model-name NAME] [--max-queue N] [--drain-timeout S]: the OpenAI-compatible HTTP
// server (src/plumb/server). Under mpirun with --tp / --ep, rank 0 serves HTTP and runs the
// engine, and the other ranks follow its model calls (follow_model_group, runtime/model_group.h).
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include "commands.h"
#include "engine_flags.h"
#include "generation_flags.h"
#include "parallel_flags.h"
#include "plumb/runtime/sampler.h"
#include "plumb/server/serve.h"
#include "plumb/util/error.h"

namespace plumb::cli {

Runner register_serve(CLI::App& app) {
  struct Options {
    EngineFlags engine;
    ParallelFlags parallel;
    std::string served_name;
    server::ServeOptions serve;
  };
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (chat, completions, streaming, metrics)");
  auto o = std::make_shared<Options>();
  add_engine_flags(*cmd, o->engine);
  add_parallel_flags(*cmd, o->parallel);
  cmd->add_option("--host", o->serve.http.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", o->serve.http.port, "port (0: any free port)")->capture_default_str();
  cmd->add_option("--api-key", o->serve.api.api_key, "require 'Authorization: Bearer KEY' (default: env PLUMB_API_KEY)");
  cmd->add_option("--served-model-name", o->served_name, "model name in the API (default: the model directory's name)");
  cmd->add_option("--max-queue", o->serve.api.max_queue, "waiting requests at most; more get 429")->capture_default_str()->check(at_least(1));
  cmd->add_option("--drain-timeout", o->serve.drain_timeout_s, "seconds running requests may finish after SIGTERM")
      ->capture_default_str()
      ->check(seconds(true));
  // At most one per hardware thread: 100,000 would exhaust the machine's threads (issue #19's --threads).
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cmd->add_option("--http-threads", o->serve.http.threads, "I/O threads")->capture_default_str()->check(CLI::Range(1, hardware));
  cmd->add_option("--max-body", o->serve.http.body_limit, "largest request body in bytes (413 beyond)")->capture_default_str();
  return [o]() {
    o->engine.parallel = join_layout(o->parallel);
    if (const dist::Parallel* par = o->engine.parallel.get(); par && par->layout().dp > 1)
      fail("serve --dp {}: one server runs one model group (--tp / --ep); for replicas run one server per "
           "replica behind a load balancer",
           par->layout().dp);
    if (follow_model_group(o->engine)) return 0;
    if (o->serve.api.api_key.empty())
      if (const char* key = std::getenv("PLUMB_API_KEY")) o->serve.api.api_key = key;
    const std::string& dir = o->engine.model;
    o->serve.api.model_name =
        o->served_name.empty() ? std::filesystem::path(dir).lexically_normal().filename().string() : o->served_name;
    if (o->serve.api.model_name.empty()) o->serve.api.model_name = std::filesystem::absolute(dir).parent_path().filename().string();
    o->serve.api.defaults.sampling = sampling_defaults_for(dir);
    o->serve.api.system_fingerprint = "plumb-0.1.0-" + o->engine.numerics;
    const StartedEngine started = start_engine(o->engine, false);
    server::serve(*started.engine, *started.tokenizer, o->serve, std::cout);
    return 0;
  };
}

}  // namespace plumb::cli
