#pragma once
// The OpenAI request fields shared by /v1/chat/completions and /v1/completions, read into a
// runtime::Request template (prompt left empty) plus the response options. Throws ApiError(400)
// naming the first bad field.
#include <cstdint>

#include "plumb/runtime/engine.h"
#include "plumb/server/json_fields.h"

namespace plumb::server {

enum class Endpoint { kChat, kCompletions };

struct GenerationParams {
  runtime::Request request;  // everything but the prompt (and, for chat, the constraint)
  int n = 1;                 // choices: n engine requests
  bool stream = false, include_usage = false;
  bool logprobs = false;  // the response carries logprobs (request.top_logprobs >= 0)
  bool echo = false;      // completions: the prompt is part of the returned text
};

struct GenerationDefaults {
  SamplingParams sampling;  // the model's generation_config.json
  std::int64_t max_tokens = 256;
};

GenerationParams parse_generation_params(const Json& body, Endpoint endpoint, const GenerationDefaults& defaults);

}  // namespace plumb::server
