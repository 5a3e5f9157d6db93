#include "plumb/runtime/generate_one.h"

#include <future>

namespace plumb::runtime {

void RequestResult::add(const Event& e) {
  tokens.insert(tokens.end(), e.tokens.begin(), e.tokens.end());
  text += e.text;
  logprobs.insert(logprobs.end(), e.logprobs.begin(), e.logprobs.end());
  top_logprobs.insert(top_logprobs.end(), e.top_logprobs.begin(), e.top_logprobs.end());
  prompt_logprobs.insert(prompt_logprobs.end(), e.prompt_logprobs.begin(), e.prompt_logprobs.end());
  if (!e.final) return;
  finish = e.finish;
  error = e.error;
  prompt_tokens = e.prompt_tokens;
  cached_prompt_tokens = e.cached_prompt_tokens;
  completion_tokens = e.completion_tokens;
}

RequestResult generate_one(Engine& engine, Request request, const EventFn& on_event) {
  RequestResult result;  // written only on the engine thread until the promise is set
  std::promise<void> done;
  engine.submit(std::move(request), [&](const Event& e) {
    if (on_event) on_event(e);
    result.add(e);
    if (e.final) done.set_value();
  });
  done.get_future().wait();
  return result;
}

}  // namespace plumb::runtime
