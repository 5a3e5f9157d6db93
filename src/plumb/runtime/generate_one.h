#pragma once
// Synchronous use of an Engine: submit one request and wait for its final event, collecting the
// stream into one result. For the single-request front ends (plumb run / generate / perplexity)
// and for tests; the batch command collects many requests the same way.
#include <functional>
#include <string>
#include <vector>

#include "plumb/runtime/engine.h"

namespace plumb::runtime {

struct RequestResult {
  std::vector<TokenId> tokens;  // every generated token (including a final EOS or stop token)
  std::string text;
  std::vector<TokenLogprob> logprobs;
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  std::vector<float> prompt_logprobs;
  FinishReason finish = FinishReason::kNone;
  std::string error;
  std::int64_t prompt_tokens = 0, cached_prompt_tokens = 0, completion_tokens = 0;

  // Appends one event of the request's stream.
  void add(const Event& e);
};

// Blocks until the request ends. `on_event`, when given, also sees every event, in order, on
// the calling thread (the engine thread only queues them), so it may block, e.g. to print text
// as it streams. Errors of the request come back as FinishReason::kError in the result;
// submit()'s validation errors are thrown.
RequestResult generate_one(Engine& engine, Request request, const EventFn& on_event = {});

}  // namespace plumb::runtime
