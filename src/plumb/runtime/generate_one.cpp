#include "plumb/runtime/generate_one.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>

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
  std::mutex mu;
  std::condition_variable arrived;
  std::deque<Event> queue;  // filled on the engine thread, drained here
  const RequestId id = engine.submit(std::move(request), [&](const Event& e) {
    // Notify under the lock: once this thread lets go of `mu` after the final event, the waiting
    // thread may return and destroy `arrived`; a notify after the unlock could touch it then
    // (ThreadSanitizer saw exactly that in EngineBatching).
    std::lock_guard lk(mu);
    queue.push_back(e);
    arrived.notify_one();
  });
  RequestResult result;
  std::exception_ptr failure;  // of on_event: the request is cancelled, and its events drained first
  for (bool final = false; !final;) {
    Event e;
    {
      std::unique_lock lk(mu);
      arrived.wait(lk, [&] { return !queue.empty(); });
      e = std::move(queue.front());
      queue.pop_front();
    }
    final = e.final;
    if (on_event && !failure) try {
        on_event(e);
      } catch (...) {
        failure = std::current_exception();
        engine.cancel(id);
      }
    result.add(e);
  }
  if (failure) std::rethrow_exception(failure);
  return result;
}

}  // namespace plumb::runtime
