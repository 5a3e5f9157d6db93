#include "plumb/server/generation_params.h"

#include <fmt/format.h>

#include <random>

namespace plumb::server {
namespace {

constexpr std::int64_t kMaxN = 16, kMaxTopLogprobs = 20, kMaxStops = 16;

std::vector<std::string> parse_stop(const Json& body) {
  const Json* stop = field(body, "stop");
  if (!stop) return {};
  std::vector<std::string> stops;
  if (stop->is_string()) {
    stops.push_back(stop->get<std::string>());
  } else if (stop->is_array()) {
    if (stop->size() > kMaxStops) bad_field("stop", fmt::format("may hold at most {} strings", kMaxStops));
    for (const Json& s : *stop) {
      if (!s.is_string()) bad_field("stop", "must be a string or an array of strings");
      stops.push_back(s.get<std::string>());
    }
  } else {
    bad_field("stop", "must be a string or an array of strings");
  }
  for (const std::string& s : stops)
    if (s.empty()) bad_field("stop", "must not contain an empty string");
  return stops;
}

std::vector<runtime::TokenId> parse_stop_token_ids(const Json& body) {
  const Json* ids = field(body, "stop_token_ids");
  if (!ids) return {};
  if (!ids->is_array()) bad_field("stop_token_ids", "must be an array of token ids");
  std::vector<runtime::TokenId> out;
  for (const Json& id : *ids) {
    if (!id.is_number_unsigned() || id.get<std::uint64_t>() > UINT32_MAX) bad_field("stop_token_ids", "must be an array of token ids");
    out.push_back(static_cast<runtime::TokenId>(id.get<std::uint64_t>()));
  }
  return out;
}

SamplingParams parse_sampling(const Json& body, SamplingParams s) {
  if (auto t = get_number(body, "temperature", 0.0, 2.0)) s.temperature = static_cast<float>(*t), s.greedy = *t == 0.0;
  if (auto p = get_number(body, "top_p", 0.0, 1.0)) {
    if (*p == 0.0) bad_field("top_p", "must be in (0, 1]");
    s.top_p = static_cast<float>(*p);
  }
  if (auto k = get_int(body, "top_k", -1, INT32_MAX)) s.top_k = *k < 0 ? 0 : static_cast<int>(*k);  // -1: off (vLLM)
  if (auto p = get_number(body, "min_p", 0.0, 1.0)) s.min_p = static_cast<float>(*p);
  if (auto p = get_number(body, "repetition_penalty", 0.0, 100.0)) {
    if (*p == 0.0) bad_field("repetition_penalty", "must be > 0");
    s.repetition_penalty = static_cast<float>(*p);
  }
  if (auto p = get_number(body, "presence_penalty", -2.0, 2.0)) s.presence_penalty = static_cast<float>(*p);
  if (auto p = get_number(body, "frequency_penalty", -2.0, 2.0)) s.frequency_penalty = static_cast<float>(*p);
  if (auto seed = get_int(body, "seed", INT64_MIN, INT64_MAX)) {
    s.seed = static_cast<std::uint64_t>(*seed);
  } else {
    static thread_local std::mt19937_64 seeds{std::random_device{}()};
    s.seed = seeds();
  }
  return s;
}

}  // namespace

GenerationParams parse_generation_params(const Json& body, Endpoint endpoint, const GenerationDefaults& defaults) {
  GenerationParams g;
  runtime::Request& r = g.request;
  r.sampling = parse_sampling(body, defaults.sampling);
  r.max_tokens = defaults.max_tokens;
  if (auto m = get_int(body, "max_tokens", 1, INT64_MAX)) r.max_tokens = *m;
  if (endpoint == Endpoint::kChat)
    if (auto m = get_int(body, "max_completion_tokens", 1, INT64_MAX)) r.max_tokens = *m;
  r.stop_strings = parse_stop(body);
  r.stop_token_ids = parse_stop_token_ids(body);
  r.ignore_eos = get_bool(body, "ignore_eos").value_or(false);
  r.priority = static_cast<int>(get_int(body, "priority", INT32_MIN, INT32_MAX).value_or(0));
  g.n = static_cast<int>(get_int(body, "n", 1, kMaxN).value_or(1));
  g.stream = get_bool(body, "stream").value_or(false);
  if (const Json* options = field(body, "stream_options")) {
    if (!options->is_object()) bad_field("stream_options", "must be an object");
    if (!g.stream) bad_field("stream_options", "is only allowed with stream: true");
    g.include_usage = get_bool(*options, "include_usage").value_or(false);
  }
  if (endpoint == Endpoint::kChat) {
    g.logprobs = get_bool(body, "logprobs").value_or(false);
    auto top = get_int(body, "top_logprobs", 0, kMaxTopLogprobs);
    if (top && !g.logprobs) bad_field("top_logprobs", "needs logprobs: true");
    if (g.logprobs) r.top_logprobs = static_cast<int>(top.value_or(0));
  } else {
    // Completions: logprobs is the number of alternatives (0..20); echo returns the prompt too.
    if (auto top = get_int(body, "logprobs", 0, kMaxTopLogprobs)) g.logprobs = true, r.top_logprobs = static_cast<int>(*top);
    g.echo = get_bool(body, "echo").value_or(false);
    r.prompt_logprobs = g.echo && g.logprobs;
    if (g.echo && g.stream) bad_field("echo", "is not supported with stream: true");
  }
  return g;
}

}  // namespace plumb::server
