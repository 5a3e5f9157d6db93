#include "plumb/server/api_server.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>

#include "plumb/server/api_error.h"
#include "plumb/server/chat_request.h"
#include "plumb/server/json_constraint.h"

namespace plumb::server {
namespace {

struct Route {
  const char* path;
  const char* method;
};
constexpr Route kRoutes[] = {{"/v1/chat/completions", "POST"}, {"/v1/completions", "POST"}, {"/v1/models", "GET"},
                             {"/health", "GET"},               {"/metrics", "GET"},         {"/tokenize", "POST"},
                             {"/detokenize", "POST"}};

bool needs_auth(const std::string& path) { return path != "/health" && path != "/metrics"; }

// Equal-time comparison, so the key cannot be guessed byte by byte from response times.
bool same_key(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::vector<runtime::TokenId> prompt_tokens(const Json& body, const Tokenizer& tokenizer) {
  const Json* prompt = field(body, "prompt");
  if (!prompt) bad_field("prompt", "is required");
  const Json* single = prompt;
  if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_string()) {
    if (prompt->size() != 1) bad_field("prompt", "may hold one prompt only (send one request per prompt)");
    single = &(*prompt)[0];
  }
  if (single->is_string()) return tokenizer.encode(single->get<std::string>());
  if (!single->is_array()) bad_field("prompt", "must be a string or an array of token ids");
  std::vector<runtime::TokenId> ids;
  for (const Json& id : *single) {
    if (!id.is_number_unsigned() || !tokenizer.has_id(static_cast<std::uint32_t>(id.get<std::uint64_t>())))
      bad_field("prompt", "token ids must be ids of the model's vocabulary");
    ids.push_back(static_cast<runtime::TokenId>(id.get<std::uint64_t>()));
  }
  return ids;
}

}  // namespace

ApiServer::ApiServer(runtime::Engine& engine, const Tokenizer& tokenizer, ApiOptions options)
    : engine_(engine), tokenizer_(tokenizer), options_(std::move(options)), tokens_(std::make_shared<TokenTable>(tokenizer)) {}

void ApiServer::handle(const HttpRequest& request, std::shared_ptr<Exchange> exchange) {
  try {
    route(request, exchange);
  } catch (const ApiError& e) {
    exchange->respond(e.status(), "application/json", error_body(e.status(), e.what(), e.param(), e.code()));
  } catch (const Error& e) {
    // Bad input found below the server (tokenizer, the engine's validation).
    exchange->respond(400, "application/json", error_body(400, e.what()));
  } catch (const std::exception& e) {
    exchange->respond(500, "application/json", error_body(500, fmt::format("internal error: {}", e.what())));
  }
}

void ApiServer::route(const HttpRequest& request, const std::shared_ptr<Exchange>& exchange) {
  const std::string path = request.path();
  const Route* known = nullptr;
  for (const Route& r : kRoutes)
    if (path == r.path) known = &r;
  if (!known) throw ApiError(404, fmt::format("no route {} (see /v1/models, /v1/chat/completions, /v1/completions)", path));
  if (request.method != known->method) {
    exchange->respond(405, "application/json",
                      error_body(405, fmt::format("{} takes {}, not {}", path, known->method, request.method)), {{"Allow", known->method}});
    return;
  }
  if (needs_auth(path)) check_auth(request);
  if (path == "/health") {
    const char* state = draining_ ? "draining" : ready_ ? "ok" : "loading";
    exchange->respond(draining_ || !ready_ ? 503 : 200, "application/json", Json{{"status", state}}.dump());
  } else if (path == "/metrics") {
    exchange->respond(200, "text/plain; version=0.0.4", render_metrics(engine_.stats(), metrics_));
  } else if (path == "/v1/models") {
    exchange->respond(200, "application/json", models());
  } else if (path == "/tokenize") {
    exchange->respond(200, "application/json", tokenize(request.body));
  } else if (path == "/detokenize") {
    exchange->respond(200, "application/json", detokenize(request.body));
  } else {
    generate(request, exchange, path == "/v1/chat/completions" ? Endpoint::kChat : Endpoint::kCompletions);
  }
}

void ApiServer::check_auth(const HttpRequest& request) const {
  if (options_.api_key.empty()) return;
  const std::string* header = request.header("authorization");
  if (!header) throw ApiError(401, "missing API key: send 'Authorization: Bearer KEY'", "", "invalid_api_key");
  constexpr std::string_view kBearer = "Bearer ";
  if (!header->starts_with(kBearer) || !same_key(header->substr(kBearer.size()), options_.api_key))
    throw ApiError(401, "incorrect API key", "", "invalid_api_key");
}

std::string ApiServer::models() const {
  Json model = {{"id", options_.model_name},
                {"object", "model"},
                {"created", 0},
                {"owned_by", "plumb"},
                {"max_model_len", engine_.max_context()}};
  return Json{{"object", "list"}, {"data", Json::array({model})}}.dump();
}

std::string ApiServer::tokenize(const std::string& text) const {
  Json body = parse_body(text);
  std::vector<runtime::TokenId> ids;
  if (field(body, "messages")) ids = tokenizer_.encode(render_conversation(parse_chat_request(body).conversation));
  else if (auto prompt = get_string(body, "prompt")) ids = tokenizer_.encode(*prompt);
  else bad_field("prompt", "is required (a string), or messages");
  return Json{{"tokens", ids}, {"count", ids.size()}, {"max_model_len", engine_.max_context()}}.dump();
}

std::string ApiServer::detokenize(const std::string& text) const {
  Json body = parse_body(text);
  const Json* tokens = field(body, "tokens");
  if (!tokens || !tokens->is_array()) bad_field("tokens", "must be an array of token ids");
  std::vector<std::uint32_t> ids;
  for (const Json& id : *tokens) {
    if (!id.is_number_unsigned() || !tokenizer_.has_id(static_cast<std::uint32_t>(id.get<std::uint64_t>())))
      bad_field("tokens", "must hold ids of the model's vocabulary");
    ids.push_back(static_cast<std::uint32_t>(id.get<std::uint64_t>()));
  }
  return wire_json(Json{{"prompt", tokenizer_.decode(ids)}});
}

std::string ApiServer::next_id(Endpoint endpoint) {
  return fmt::format("{}-{:x}", endpoint == Endpoint::kChat ? "chatcmpl" : "cmpl", next_id_++);
}

void ApiServer::generate(const HttpRequest& request, const std::shared_ptr<Exchange>& exchange, Endpoint endpoint) {
  const Clock::time_point arrival = Clock::now();
  if (draining_) throw ApiError(503, "the server is shutting down");
  Json body = parse_body(request.body);
  if (auto model = get_string(body, "model"); model && *model != options_.model_name)
    throw ApiError(404, fmt::format("the model '{}' does not exist (this server serves '{}')", *model, options_.model_name), "model",
                   "model_not_found");
  GenerationParams params = parse_generation_params(body, endpoint, options_.defaults);
  ResponseMeta meta;
  meta.endpoint = endpoint;
  meta.id = next_id(endpoint);
  meta.model = options_.model_name;
  meta.system_fingerprint = options_.system_fingerprint;
  meta.created = static_cast<std::int64_t>(std::time(nullptr));
  runtime::Request& r = params.request;
  std::optional<JsonMatcher> json_output;
  if (endpoint == Endpoint::kChat) {
    ChatPlan plan = parse_chat_request(body);
    meta.mode = plan.conversation.mode;
    meta.tools = plan.tools;
    if (plan.json_schema) json_output.emplace(*plan.json_schema);  // 400 here for a schema outside the subset
    r.prompt = tokenizer_.encode(render_conversation(plan.conversation));
  } else {
    r.prompt = prompt_tokens(body, tokenizer_);
    if (params.echo) meta.echo_text = tokenizer_.decode(r.prompt), meta.prompt = r.prompt;
  }
  if (r.prompt.empty()) bad_field(endpoint == Endpoint::kChat ? "messages" : "prompt", "gives no tokens");
  if (static_cast<std::int64_t>(r.prompt.size()) >= engine_.max_context())
    throw ApiError(400,
                   fmt::format("the prompt has {} tokens but the context holds {} (including at least one generated token)",
                               r.prompt.size(), engine_.max_context()),
                   endpoint == Endpoint::kChat ? "messages" : "prompt", "context_length_exceeded");
  if (engine_.stats().waiting + params.n > options_.max_queue)
    throw ApiError(429, fmt::format("the request queue is full ({} waiting, --max-queue {}); retry later", engine_.stats().waiting,
                                    options_.max_queue));
  int n = params.n;
  runtime::Request base = r;
  const bool thinking = meta.mode == ChatMode::kThinking;
  auto generation = std::make_shared<Generation>(std::move(meta), std::move(params), exchange, tokenizer_, metrics_, arrival);
  submit(std::move(generation), base, n, exchange, json_output, thinking);
}

void ApiServer::submit(std::shared_ptr<Generation> generation, const runtime::Request& base, int n,
                       const std::shared_ptr<Exchange>& exchange, const std::optional<JsonMatcher>& json_output, bool thinking) {
  std::vector<runtime::RequestId> ids;
  try {
    for (int i = 0; i < n; ++i) {
      runtime::Request request = base;
      if (json_output) request.constraint = std::make_shared<JsonConstraint>(*json_output, tokens_, thinking);  // one state per choice
      request.sampling.seed += static_cast<std::uint64_t>(i);  // n different samples from one seed
      ids.push_back(engine_.submit(std::move(request), [generation, exchange, i](const runtime::Event& event) {
        Clock::time_point at = Clock::now();
        exchange->post([generation, i, event, at] { generation->on_event(i, event, at); });
      }));
    }
  } catch (...) {
    for (runtime::RequestId id : ids) engine_.cancel(id);  // a half-submitted request does not run on
    throw;
  }
  generation->set_request_ids(ids);
  exchange->on_disconnect([this, ids] {
    for (runtime::RequestId id : ids) engine_.cancel(id);
  });
  std::lock_guard lock(active_mutex_);
  forget_finished();
  active_.push_back({generation, exchange});
}

void ApiServer::forget_finished() {
  std::erase_if(active_, [](const Active& a) {
    auto g = a.generation.lock();
    return !g || g->done();
  });
}

std::size_t ApiServer::active_generations() const {
  std::lock_guard lock(active_mutex_);
  std::size_t n = 0;
  for (const Active& a : active_)
    if (auto g = a.generation.lock(); g && !g->done()) ++n;
  return n;
}

void ApiServer::cancel_all() {
  std::lock_guard lock(active_mutex_);
  for (const Active& a : active_) {
    auto g = a.generation.lock();
    auto x = a.exchange.lock();
    if (!g || !x) continue;
    x->post([this, g] {
      if (g->done()) return;
      g->mark_shutdown();
      for (runtime::RequestId id : g->request_ids()) engine_.cancel(id);
    });
  }
}

}  // namespace plumb::server
