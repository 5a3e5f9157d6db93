#pragma once
// `plumb serve`'s life: listen, print one ready line, answer until SIGTERM or SIGINT, then drain
// (stop accepting; /health and new requests 503; running requests may finish for up to the
// drain timeout; the rest are cancelled with an error event) and stop.
#include <functional>
#include <ostream>

#include "plumb/server/api_server.h"
#include "plumb/server/http_server.h"

namespace plumb::server {

struct ServeOptions {
  HttpServerOptions http;
  ApiOptions api;
  double drain_timeout_s = 30;
};

// Blocks until a signal arrives and the drain is over; the engine is shut down on return.
// `on_ready` (tests) gets the bound port once requests are answered.
void serve(runtime::Engine& engine, const Tokenizer& tokenizer, const ServeOptions& options, std::ostream& log,
           const std::function<void(std::uint16_t)>& on_ready = {});

}  // namespace plumb::server
