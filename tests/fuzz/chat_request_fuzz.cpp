// libFuzzer target for a /v1/chat/completions (and /v1/completions) request body, the path from
// the HTTP body to the engine request: parse_body, parse_generation_params for both endpoints,
// parse_chat_request, the response_format schema's JsonMatcher and the rendered prompt encoded
// with tiny-kjv's tokenizer. Bad input must be refused with ApiError (a 400 naming the field) or
// plumb::Error (also a 400); any other exception would reach the client as a 500, so it aborts.
// An accepted request must be one the engine can take: n, max_tokens, top_logprobs and the
// sampling values inside their documented ranges, no empty stop string, a prompt that starts
// with BOS and encodes to known ids.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "plumb/server/api_error.h"
#include "plumb/server/chat_request.h"
#include "plumb/server/generation_params.h"
#include "plumb/server/json_matcher.h"
#include "plumb/tokenizer/chat.h"
#include "plumb/tokenizer/tokenizer.h"
#include "plumb/util/error.h"

namespace {

using plumb::server::Endpoint;

void check_params(const plumb::server::GenerationParams& g) {
  const plumb::runtime::Request& r = g.request;
  const plumb::SamplingParams& s = r.sampling;
  bool ok = g.n >= 1 && g.n <= 16 && r.max_tokens >= 1 && r.top_logprobs >= -1 && r.top_logprobs <= 20 &&
            g.logprobs == (r.top_logprobs >= 0) && s.temperature >= 0 && s.temperature <= 2 && s.top_p > 0 && s.top_p <= 1 &&
            s.top_k >= 0 && s.min_p >= 0 && s.min_p <= 1 && s.repetition_penalty > 0 && r.stop_strings.size() <= 16 &&
            (!g.include_usage || g.stream);
  for (const std::string& stop : r.stop_strings) ok = ok && !stop.empty();
  if (!ok) std::abort();
}

void check_plan(const plumb::server::ChatPlan& plan, const plumb::Tokenizer& tokenizer) {
  if (plan.json_schema) {
    plumb::server::JsonMatcher matcher(*plan.json_schema);  // ApiError for a schema outside the subset
    // A fresh matcher always has a way to finish: its shortest completion must be accepted whole.
    const std::string completion = matcher.completion();
    for (char c : completion)
      if (!matcher.feed(static_cast<unsigned char>(c))) std::abort();
    if (!matcher.complete()) std::abort();
  }
  const std::string prompt = plumb::render_conversation(plan.conversation);
  const std::vector<std::uint32_t> ids = tokenizer.encode(prompt);
  if (ids.empty()) std::abort();
  if (auto bos = tokenizer.bos_id(); bos && ids.front() != *bos) std::abort();
  for (std::uint32_t id : ids)
    if (!tokenizer.has_id(id)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const plumb::Tokenizer tokenizer = plumb::Tokenizer::load(PLUMB_SOURCE_DIR "/models/tiny-kjv");
  const std::string text(reinterpret_cast<const char*>(data), size);
  plumb::server::Json body;
  try {
    body = plumb::server::parse_body(text);
  } catch (const plumb::server::ApiError&) {
    return 0;  // not a JSON object: a 400
  }
  for (Endpoint endpoint : {Endpoint::kChat, Endpoint::kCompletions}) {
    try {
      check_params(plumb::server::parse_generation_params(body, endpoint, {}));
    } catch (const plumb::Error&) {
      // A 400 naming the field (ApiError is a plumb::Error).
    }
  }
  try {
    check_plan(plumb::server::parse_chat_request(body), tokenizer);
  } catch (const plumb::Error&) {
  }
  return 0;
}
