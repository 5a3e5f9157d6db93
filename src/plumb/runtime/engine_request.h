#pragma once
// One request's output side inside the engine: its sampler (seeded, with the request's
// penalties), its constraint, the detokenizer with its stop strings, logprobs and the finish
// rules. The engine hands it the logits that predict the next token and gets back the event to
// deliver; it never sees the model or the schedule.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "plumb/runtime/engine.h"
#include "plumb/runtime/text_stream.h"
#include "plumb/tokenizer/tokenizer.h"

namespace plumb::runtime {

// What the requests of one engine sample from, built once beside its tokenizer (not per
// request: finding the ids without text scans the whole vocabulary, ~129k ids for DeepSeek):
// the logit rows (a head may be padded past the tokenizer), EOS, and the ids below the row count
// the tokenizer cannot spell. Read-only once built: requests sharing it may sample on different
// threads (one request on one thread at a time).
class OutputVocab {
 public:
  // `tokenizer` must outlive it; null: requests are ids only (no text, no stop strings).
  OutputVocab(const Tokenizer* tokenizer, std::size_t rows, std::uint32_t eos);

  const Tokenizer* tokenizer() const { return tokenizer_; }
  std::size_t size() const { return size_; }
  std::uint32_t eos() const { return eos_; }
  const std::vector<std::uint32_t>& unknown_ids() const { return unknown_ids_; }

 private:
  friend class RequestOutput;
  const Tokenizer* tokenizer_;
  std::size_t size_;
  std::uint32_t eos_;
  std::vector<std::uint32_t> unknown_ids_;  // ascending
};

class RequestOutput {
 public:
  // `max_new` is Request::max_tokens already capped by the context. `vocab` must outlive it;
  // without a tokenizer the request is ids only: its events carry no text and it may have no
  // stop strings.
  RequestOutput(RequestId id, const Request& request, OutputVocab& vocab, std::int64_t max_new);

  // Samples the next token from `logits` (one vocab row) and returns the event that delivers it;
  // final when the request ended. Throws plumb::Error for this request's failures (a non-finite
  // logit, a constraint that allows nothing). Ids the tokenizer does not know are never sampled
  // (a vocabulary padded past the tokenizer: DeepSeek's 129,280 rows for 128,815 ids).
  Event next_token(std::span<const float> logits);

  // Prompt logprobs still missing: rows of positions >= this one are wanted.
  bool wants_prompt_rows() const;
  // The logits row of prompt position `pos` (it predicts token pos + 1); rows already seen
  // (recomputed after a preemption) are ignored.
  void prompt_row(std::int64_t pos, std::span<const float> logits);

  // The final event of a request that did not finish by itself.
  Event end(FinishReason reason, const std::string& error = {});

  bool finished() const { return finished_; }
  std::int64_t generated() const { return static_cast<std::int64_t>(generated_.size()); }

 private:
  Event final_event(Event e, FinishReason reason);
  void add_logprobs(Event& e, std::span<const float> logits, std::uint32_t token) const;
  std::uint32_t pick(std::span<const float> logits);
  bool push_text(std::uint32_t token) { return stream_ && stream_->push(token); }  // true: a stop string
  bool finish_text() { return stream_ && stream_->finish(); }

  RequestId id_;
  const Request& request_;
  OutputVocab& vocab_;
  std::int64_t max_new_;
  Sampler sampler_;
  std::string text_;     // everything delivered so far
  std::string pending_;  // text for the event being built
  TextSink sink_;
  std::optional<TextStream> stream_;  // none: ids only
  std::vector<std::uint32_t> generated_;
  std::vector<float> prompt_logprobs_;
  bool prompt_logprobs_sent_ = false, finished_ = false;
};

// log softmax(logits)[token], in double.
float token_logprob(std::span<const float> logits, std::uint32_t token);
// The `n` most likely tokens, most likely first (lower id first among equal logits).
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int n);

}  // namespace plumb::runtime
