#pragma once
// The serving engine's public contract (issue #15): requests in, a stream of events out. One
// engine thread owns the model and its backend; submit(), cancel() and stats() may be called from
// any thread. Every generating front end (plumb run/chat/generate/perplexity/batch, the
// benchmarks and the HTTP server) talks to the model only through this interface.
//
// Event delivery: `on_event` runs on the engine thread, in order, once per event; it must not
// block (copy the event into a queue and return). After an event with `final == true` no further
// event for that request is delivered and the engine holds no resource of it.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "plumb/runtime/memory_stats.h"
#include "plumb/runtime/sampler.h"
#include "plumb/util/token_id.h"

namespace plumb::runtime {

using TokenId = plumb::TokenId;
using RequestId = std::uint64_t;

// Constrained decoding hook (JSON output, grammars): consulted on the engine thread before each
// sampled token of its request. Implementations keep their own state.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets allowed[id] = false for every id that may not come next. `allowed` has vocab entries,
  // all true on entry. `remaining`: the tokens the request may still generate, this one
  // included (max_tokens and the context), so that a constraint can finish in time.
  virtual void mask(std::span<bool> allowed, std::int64_t remaining) = 0;
  // The token the engine sampled (always one mask() allowed).
  virtual void accept(TokenId token) = 0;
  // True when the constrained output is complete (the engine then ends the request with
  // FinishReason::kStop).
  virtual bool done() const = 0;
};

struct Request {
  std::vector<TokenId> prompt;  // at least one token
  SamplingParams sampling;
  std::int64_t max_tokens = 256;          // generated tokens at most (capped by the context)
  std::vector<std::string> stop_strings;  // text stops: the text before the stop is delivered
  std::vector<TokenId> stop_token_ids;    // token stops besides EOS (the stop token is delivered)
  bool ignore_eos = false;
  int priority = 0;           // larger runs first under preemption; the scheduler's tie-break
  int top_logprobs = -1;      // -1: no logprobs; 0..20: the sampled token's logprob and this many alternatives
  bool prompt_logprobs = false;  // logprob of every prompt token after the first (echo, perplexity)
  std::shared_ptr<TokenConstraint> constraint;  // optional
};

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };
const char* to_string(FinishReason reason);  // "stop", "length", "cancelled", "error"

struct TokenLogprob {
  TokenId token = 0;
  float logprob = 0;
};

struct Event {
  RequestId id = 0;
  // Tokens generated since the previous event (usually one) and the text they complete: UTF-8
  // that is final (never part of a pending stop string or an incomplete character).
  std::vector<TokenId> tokens;
  std::string text;
  // With Request::top_logprobs >= 0: one entry per token in `tokens`, the sampled token's
  // logprob and the top alternatives (most likely first).
  std::vector<TokenLogprob> logprobs;
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  // With Request::prompt_logprobs, in the first event: prompt.size() - 1 entries.
  std::vector<float> prompt_logprobs;
  bool final = false;
  FinishReason finish = FinishReason::kNone;  // set on the final event
  std::string error;                          // FinishReason::kError: what went wrong
  // Counts for usage, set on the final event.
  std::int64_t prompt_tokens = 0;
  std::int64_t cached_prompt_tokens = 0;  // served from the prefix cache
  std::int64_t completion_tokens = 0;
};

using EventFn = std::function<void(const Event&)>;

// What /metrics and the stats lines report; a consistent snapshot.
struct EngineStats {
  std::int64_t running = 0, waiting = 0;
  std::int64_t kv_blocks_used = 0, kv_blocks_total = 0;
  std::int64_t prompt_tokens_total = 0, generation_tokens_total = 0;
  std::int64_t preemptions_total = 0;
  std::int64_t prefix_cache_queries_total = 0, prefix_cache_hits_total = 0;  // in blocks
  std::int64_t steps_total = 0;
  // Finished requests by reason (indexed by FinishReason).
  std::int64_t finished_total[5] = {0, 0, 0, 0, 0};
  MemoryStats memory;  // refreshed at most once a second while the engine runs steps
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Validates the request (throws plumb::Error naming the field: empty prompt, prompt longer
  // than the context, max_tokens < 1, bad sampling values, a request that can never fit the KV
  // pool) and queues it. Returns at once.
  virtual RequestId submit(Request request, EventFn on_event) = 0;
  // Ends the request at the next step with FinishReason::kCancelled (a final event is still
  // delivered); unknown or finished ids are ignored.
  virtual void cancel(RequestId id) = 0;
  virtual EngineStats stats() const = 0;
  // The model's context length and vocabulary size, for request validation in front ends.
  virtual std::int64_t max_context() const = 0;
  virtual std::int64_t vocab_size() const = 0;
  // Stops accepting requests, cancels the remaining ones (each gets its final event) and joins
  // the engine thread. Idempotent; the destructor calls it.
  virtual void shutdown() = 0;
};

}  // namespace plumb::runtime
