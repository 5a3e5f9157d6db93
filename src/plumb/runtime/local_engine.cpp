#include "plumb/runtime/local_engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "plumb/runtime/engine_request.h"
#include "plumb/runtime/kv_budget.h"
#include "plumb/runtime/prefix_cache.h"
#include "plumb/util/error.h"
#include "plumb/util/thread_pool.h"

namespace plumb::runtime {

namespace {

// The callback must not throw; if it does, the engine carries on (its other requests must not
// suffer) and the request keeps its course.
void deliver(RequestId id, const EventFn& on_event, const Event& e) {
  try {
    on_event(e);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "engine: the event callback of request %llu threw: %s\n", static_cast<unsigned long long>(id),
                 ex.what());
  }
}

KvLayout layout_for(const EngineModel& model, const EngineOptions& o) {
  KvFormat format = default_kv_format(model.config().arch, o.faithful);
  if (o.kv_dtype) format.kv = *o.kv_dtype;
  if (o.kv_index_dtype) format.index_keys = *o.kv_index_dtype;
  if (o.kv_bf16_recent < 0) fail("--kv-bf16-recent must be 0 or more, got {}", o.kv_bf16_recent);
  format.bf16_recent = o.kv_bf16_recent;
  return kv_layout(model.config(), o.kv_block_size, format);
}

// The pool's MiB: --kv-cache-mb, or the device budget (kv_budget.h).
KvBudget cache_budget(const EngineModel& model, const EngineOptions& o) {
  if (o.kv_cache_mib > 0) return {o.kv_cache_mib, "--kv-cache-mb"};
  return kv_budget(model.device_memory(), model.weight_bytes(), o.gpu_memory_fraction, o.scheduler.max_batch_tokens);
}

std::int64_t pool_size(const EngineModel& model, const KvLayout& layout, const EngineOptions& o) {
  return o.kv_blocks > 0 ? o.kv_blocks : pool_blocks(layout, cache_budget(model, o).cache_mib, o.scheduler.max_seqs);
}

// The threads that sample a step's sequences side by side: EngineOptions::sampling_threads, 0 =
// min(8, hardware threads); null for one (the engine thread alone).
std::unique_ptr<ThreadPool> sampling_pool(const EngineOptions& o) {
  int n = o.sampling_threads;
  if (n < 0) fail("sampling threads must be 0 (automatic) or more, got {}", n);
  if (n == 0) n = static_cast<int>(std::min(8u, std::max(1u, std::thread::hardware_concurrency())));
  return n > 1 ? std::make_unique<ThreadPool>(n) : nullptr;
}

std::unique_ptr<PrefixCache> prefix_cache_for(const KvLayout& layout, KvBlockManager& blocks, const EngineOptions& o) {
  if (!o.prefix_cache) return nullptr;
  // A snapshot's copy of the fixed state is charged as the blocks it would fill.
  const std::int64_t state_blocks = (layout.state_bytes_per_seq + layout.bytes_per_block - 1) / std::max<std::int64_t>(1, layout.bytes_per_block);
  return std::make_unique<PrefixCache>(blocks, state_blocks);
}

// A request from submit() to its final event. Owned by the inbox, then by the engine thread.
struct Active {
  RequestId id = 0;
  std::unique_ptr<Request> request;  // stable: `out` refers to it
  EventFn on_event;
  std::unique_ptr<RequestOutput> out;
  std::unique_ptr<EngineModel::Sequence> seq;  // while running: created at its first chunk, dropped on preemption
  std::vector<TokenId> tokens;                 // prompt + generated: what chunk positions index
  std::int64_t max_new = 0;
  PrefixCache::Hit prefix;     // found at its admission; forked when its first chunk runs
  std::int64_t cached = 0;     // prompt tokens its state was forked with
};

class LocalEngine final : public Engine {
 public:
  LocalEngine(std::unique_ptr<EngineModel> model, std::shared_ptr<const Tokenizer> tokenizer, const EngineOptions& options)
      : model_(std::move(model)),
        tokenizer_(std::move(tokenizer)),
        vocab_(tokenizer_.get(), static_cast<std::size_t>(model_->vocab_size()), model_->eos_id()),
        layout_(layout_for(*model_, options)),
        blocks_(options.kv_block_size, pool_size(*model_, layout_, options)),
        scheduler_(options.scheduler, blocks_),
        prefix_(prefix_cache_for(layout_, blocks_, options)),
        sampling_(sampling_pool(options)),
        max_seqs_(options.scheduler.max_seqs) {
    if (prefix_)
      scheduler_.set_prefix_hooks({[this](RequestId id) { return prefix_admission(id); },
                                   [this](std::int64_t n) { return prefix_->reclaim(n); }});
    stats_.kv_blocks_total = blocks_.total_blocks();
    model_->use_kv_blocks(blocks_.block_size(), blocks_.total_blocks(), layout_.format);  // the ids name its storage
    stats_.memory = memory_stats(*model_, layout_, blocks_.total_blocks(), max_seqs_);
    memory_refreshed_ = std::chrono::steady_clock::now();
    thread_ = std::thread([this] { loop(); });
  }
  ~LocalEngine() override { shutdown(); }

  RequestId submit(Request request, EventFn on_event) override;
  void cancel(RequestId id) override;
  EngineStats stats() const override;
  std::int64_t max_context() const override { return model_->max_context(); }
  std::int64_t vocab_size() const override { return model_->vocab_size(); }
  void shutdown() override;

 private:
  std::int64_t validate(const Request& r) const;  // returns max_tokens capped by the context
  void loop();
  void admit(std::vector<Active>& fresh);
  void step();
  // A chunk's sampling result: its next token's event (when it completes), or the error that ends
  // the request.
  struct Sampled {
    std::optional<Event> event;
    std::string error;
  };
  Sampled sample_chunk(const ScheduledChunk& c, std::span<const float> rows, bool all_rows);
  void finish_chunk(const ScheduledChunk& c, Sampled sampled);
  PrefixHooks::Admission prefix_admission(RequestId id);
  std::unique_ptr<EngineModel::Sequence> start_sequence(Active& a, std::int64_t start);
  void snapshot(const ScheduledChunk& c);
  void end(RequestId id, FinishReason reason, const std::string& error = {});
  void finish_request(RequestId id, const Event& final_event);
  void publish_stats();

  std::unique_ptr<EngineModel> model_;
  std::shared_ptr<const Tokenizer> tokenizer_;  // null: requests are ids only (no text, no stop strings)
  OutputVocab vocab_;  // every request's; its sampling scratch is the engine thread's
  KvLayout layout_;
  KvBlockManager blocks_;  // block_size and total are constant: validate() reads them on any thread
  Scheduler scheduler_;    // engine thread only, like active_
  std::unique_ptr<PrefixCache> prefix_;  // null: --prefix-cache off
  std::unique_ptr<ThreadPool> sampling_;  // null: the engine thread samples alone
  const std::int64_t max_seqs_;
  std::chrono::steady_clock::time_point memory_refreshed_;  // engine thread
  std::map<RequestId, Active> active_;

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable wake_;
  std::vector<Active> inbox_;
  std::vector<RequestId> cancels_;
  bool stopping_ = false;
  EngineStats stats_;
  std::atomic<RequestId> next_id_{1};
  std::mutex join_mu_;
  std::thread thread_;
};

std::int64_t LocalEngine::validate(const Request& r) const {
  const std::int64_t vocab = vocab_size(), ctx = max_context(), n = static_cast<std::int64_t>(r.prompt.size());
  if (r.prompt.empty()) fail("request: the prompt is empty");
  for (std::size_t i = 0; i < r.prompt.size(); ++i)
    if (r.prompt[i] >= vocab) fail("request: prompt token {} (index {}) is outside the vocabulary of {}", r.prompt[i], i, vocab);
  if (n >= ctx) fail("request: a prompt of {} tokens leaves no room in the model's context of {}", n, ctx);
  if (r.max_tokens < 1) fail("request: max_tokens must be at least 1, got {}", r.max_tokens);
  plumb::validate(r.sampling);
  if (r.top_logprobs < -1 || r.top_logprobs > 20) fail("request: top_logprobs must be -1 (off) or 0..20, got {}", r.top_logprobs);
  if (!tokenizer_ && !r.stop_strings.empty()) fail("request: stop strings need the model's tokenizer, and this engine has none");
  for (TokenId t : r.stop_token_ids)
    if (t >= vocab) fail("request: stop token id {} is outside the vocabulary of {}", t, vocab);
  const std::int64_t max_new = std::min(r.max_tokens, ctx - n);
  if (!scheduler_.fits_ever(n, max_new))  // reads only the pool's constant sizes
    fail("request: {} prompt + {} new tokens need {} KV blocks of {} positions; the pool has {} (raise --kv-cache-mb)",
         n, max_new, blocks_.blocks_for(n + max_new - 1), blocks_.block_size(), blocks_.total_blocks());
  return max_new;
}

RequestId LocalEngine::submit(Request request, EventFn on_event) {
  const std::int64_t max_new = validate(request);
  if (!on_event) fail("request: no event callback");
  Active a;
  a.id = next_id_++;
  a.request = std::make_unique<Request>(std::move(request));
  a.on_event = std::move(on_event);
  a.out = std::make_unique<RequestOutput>(a.id, *a.request, vocab_, max_new);
  a.tokens = a.request->prompt;
  a.max_new = max_new;
  const RequestId id = a.id;
  {
    std::lock_guard lk(mu_);
    if (stopping_) fail("the engine is shut down: request not accepted");
    inbox_.push_back(std::move(a));
  }
  wake_.notify_one();
  return id;
}

void LocalEngine::cancel(RequestId id) {
  {
    std::lock_guard lk(mu_);
    cancels_.push_back(id);
  }
  wake_.notify_one();
}

EngineStats LocalEngine::stats() const {
  std::lock_guard lk(mu_);
  EngineStats s = stats_;
  s.waiting += static_cast<std::int64_t>(inbox_.size());
  return s;
}

void LocalEngine::shutdown() {
  std::lock_guard join(join_mu_);
  if (!thread_.joinable()) return;
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void LocalEngine::loop() {
  for (;;) {
    std::vector<Active> fresh;
    std::vector<RequestId> cancels;
    bool stop = false;
    {
      std::unique_lock lk(mu_);
      wake_.wait(lk, [&] { return stopping_ || !inbox_.empty() || !cancels_.empty() || !scheduler_.idle(); });
      fresh.swap(inbox_);
      cancels.swap(cancels_);
      stop = stopping_;
    }
    admit(fresh);
    if (stop) {
      while (!active_.empty()) end(active_.begin()->first, FinishReason::kCancelled);
      publish_stats();
      return;
    }
    for (RequestId id : cancels)
      if (active_.count(id)) end(id, FinishReason::kCancelled);
    // Before the step too: requests taken from the inbox are in no count until it is published,
    // and a step can take long (a big prefill); /metrics and --max-queue read these counts.
    publish_stats();
    if (!scheduler_.idle()) step();
    publish_stats();
  }
}

void LocalEngine::admit(std::vector<Active>& fresh) {
  for (Active& a : fresh) {
    const RequestId id = a.id;
    const auto prompt = static_cast<std::int64_t>(a.request->prompt.size());
    const std::int64_t max_new = a.max_new;
    const int priority = a.request->priority;
    active_.emplace(id, std::move(a));
    {
      std::lock_guard lk(mu_);
      stats_.prompt_tokens_total += prompt;
    }
    try {
      scheduler_.add(id, prompt, max_new, priority);
    } catch (const std::exception& e) {
      end(id, FinishReason::kError, e.what());
    }
  }
}

void LocalEngine::step() {
  const StepPlan plan = scheduler_.schedule();
  for (RequestId id : plan.preempted) active_.at(id).seq.reset();  // recomputed from position 0
  if (plan.chunks.empty()) {  // cannot happen while validate() refuses what never fits
    while (!active_.empty()) end(active_.begin()->first, FinishReason::kError, "internal: the scheduler made no progress");
    return;
  }
  std::vector<EngineModel::Chunk> chunks;
  std::vector<bool> all_rows;
  try {
    for (const ScheduledChunk& c : plan.chunks) {
      Active& a = active_.at(c.id);
      if (!a.seq) a.seq = start_sequence(a, c.start);  // model state only while running
      const auto prompt = static_cast<std::int64_t>(a.request->prompt.size());
      all_rows.push_back(a.out->wants_prompt_rows() && c.start < prompt - 1);
      chunks.push_back({a.seq.get(), std::span(a.tokens).subspan(c.start, c.count), all_rows.back(), c.completes,
                        blocks_.table(c.id), prompt});
    }
  } catch (const std::exception& e) {  // a fork failed (out of memory): the step does not run
    if (prefix_) prefix_->unpin_all();
    for (const ScheduledChunk& c : plan.chunks) end(c.id, FinishReason::kError, std::string("starting a sequence failed: ") + e.what());
    return;
  }
  if (prefix_) prefix_->unpin_all();  // the forks are made: the snapshots may go
  const auto vocab = static_cast<std::size_t>(vocab_size());
  std::vector<std::size_t> rows(chunks.size());
  std::size_t total_rows = 0;
  for (std::size_t i = 0; i < chunks.size(); ++i)
    total_rows += rows[i] = all_rows[i] ? chunks[i].tokens.size() : chunks[i].last_logits ? 1 : 0;
  std::vector<float> logits;
  try {
    logits = model_->forward(chunks);
    if (logits.size() != total_rows * vocab)
      fail("{} logits, expected {} rows of {}", logits.size(), total_rows, vocab);
  } catch (const std::exception& e) {  // the batch's states are unusable: end its requests only
    for (const ScheduledChunk& c : plan.chunks) end(c.id, FinishReason::kError, std::string("model step failed: ") + e.what());
    return;
  }
  // Sampling (a vocabulary-sized pass or more per sequence: the host's share of a decode step) for
  // every chunk side by side, each request's output being its own; then, in chunk order on this
  // thread, the snapshots, events and scheduler updates.
  std::vector<std::size_t> first_row(chunks.size());
  for (std::size_t i = 1; i < chunks.size(); ++i) first_row[i] = first_row[i - 1] + rows[i - 1];
  std::vector<Sampled> sampled(plan.chunks.size());
  const auto sample_range = [&](std::int64_t begin, std::int64_t end) {
    for (auto i = static_cast<std::size_t>(begin); i < static_cast<std::size_t>(end); ++i)
      sampled[i] = sample_chunk(plan.chunks[i], std::span(logits).subspan(first_row[i] * vocab, rows[i] * vocab), all_rows[i]);
  };
  const auto n = static_cast<std::int64_t>(plan.chunks.size());
  if (sampling_ && n > 1)
    sampling_->parallel_for(n, 1, sample_range);
  else
    sample_range(0, n);
  for (std::size_t i = 0; i < plan.chunks.size(); ++i) {
    snapshot(plan.chunks[i]);
    finish_chunk(plan.chunks[i], std::move(sampled[i]));
  }
}

// After the forward, on any thread (it touches only this request's output and reads the engine's
// shared vocabulary): prompt logprobs from the chunk's rows and, when the chunk completes the
// sequence's known tokens, the next token from its last row.
LocalEngine::Sampled LocalEngine::sample_chunk(const ScheduledChunk& c, std::span<const float> rows, bool all_rows) {
  const Active& a = active_.at(c.id);
  const std::size_t vocab = static_cast<std::size_t>(vocab_size());
  try {
    if (all_rows)
      for (std::int64_t r = 0; r < c.count; ++r) a.out->prompt_row(c.start + r, rows.subspan(static_cast<std::size_t>(r) * vocab, vocab));
    if (!c.completes) return {};
    return {a.out->next_token(rows.last(vocab)), {}};
  } catch (const std::exception& e) {
    return {std::nullopt, e.what()};
  }
}

// On the engine thread, in chunk order: the sampled token's event and the scheduler's update.
void LocalEngine::finish_chunk(const ScheduledChunk& c, Sampled sampled) {
  if (!sampled.error.empty()) {
    end(c.id, FinishReason::kError, sampled.error);
    return;
  }
  if (!sampled.event) return;
  Active& a = active_.at(c.id);
  try {
    const Event& e = *sampled.event;
    {
      std::lock_guard lk(mu_);
      ++stats_.generation_tokens_total;
    }
    if (e.final) {
      finish_request(c.id, e);
      return;
    }
    deliver(a.id, a.on_event, e);
    a.tokens.push_back(e.tokens.back());
    scheduler_.append_token(c.id);
  } catch (const std::exception& e) {
    end(c.id, FinishReason::kError, e.what());
  }
}

// Scheduler hook at a sequence's admission: the longest cached prefix of its tokens, and where
// its prefill pauses for snapshots of its own: at the prefix it shares with earlier prompts (a
// branching point) and at its prompt's last block boundary. Requests that want prompt logprobs
// neither read nor write the cache: they need the rows of every position.
PrefixHooks::Admission LocalEngine::prefix_admission(RequestId id) {
  Active& a = active_.at(id);
  a.prefix = {};
  if (a.request->prompt_logprobs) return {};
  a.prefix = prefix_->lookup(a.tokens);
  const std::int64_t B = prefix_->block_size(), known = static_cast<std::int64_t>(a.tokens.size());
  PrefixHooks::Admission adm{a.prefix.tokens, {}};
  for (const std::int64_t at : {a.prefix.shared, (known - 1) / B * B})
    if (at > a.prefix.tokens && (adm.pauses.empty() || adm.pauses.back() < at) &&
        prefix_->wants(std::span(a.tokens).first(static_cast<std::size_t>(at))))
      adm.pauses.push_back(at);
  return adm;
}

// The model state of a sequence whose first chunk starts at `start`: a fork of the snapshot its
// admission found (pinned since), or a fresh one at position 0.
std::unique_ptr<EngineModel::Sequence> LocalEngine::start_sequence(Active& a, std::int64_t start) {
  const bool hit = start > 0;
  if (hit && (a.prefix.tokens != start || !a.prefix.state))
    fail("internal: a chunk starts at {} without a snapshot of that prefix", start);
  if (prefix_ && !a.request->prompt_logprobs) {
    std::lock_guard lk(mu_);
    stats_.prefix_cache_queries_total += (static_cast<std::int64_t>(a.tokens.size()) - 1) / prefix_->block_size();
    stats_.prefix_cache_hits_total += start / prefix_->block_size();
  }
  a.cached = start;
  if (!hit) return model_->new_sequence();
  return model_->fork(*a.prefix.state, a.prefix.blocks, blocks_.table(a.id).first(a.prefix.blocks.size()));
}

// After a chunk that ends on a block boundary: keep a snapshot of the sequence there, unless the
// cache has one of that prefix.
void LocalEngine::snapshot(const ScheduledChunk& c) {
  if (!prefix_) return;
  Active& a = active_.at(c.id);
  const std::int64_t end = c.start + c.count;
  if (a.request->prompt_logprobs || end % prefix_->block_size() != 0) return;
  const auto prefix = std::span(a.tokens).first(static_cast<std::size_t>(end));
  if (!prefix_->wants(prefix)) return;
  try {
    prefix_->insert(prefix, [&](std::span<const BlockId> to) { return model_->fork(*a.seq, blocks_.table(c.id).first(to.size()), to); });
  } catch (const std::exception& e) {  // the cache only saves work: the request carries on
    std::fprintf(stderr, "engine: no prefix-cache snapshot of request %llu: %s\n", static_cast<unsigned long long>(c.id), e.what());
  }
}

void LocalEngine::end(RequestId id, FinishReason reason, const std::string& error) {
  finish_request(id, active_.at(id).out->end(reason, error));
}

// Frees everything of the request, then delivers its final event: by then the engine holds no
// resource of it (engine.h), and stats() says so.
void LocalEngine::finish_request(RequestId id, const Event& final) {
  Event final_event = final;
  final_event.cached_prompt_tokens = active_.at(id).cached;
  const EventFn on_event = std::move(active_.at(id).on_event);
  scheduler_.finish(id);
  active_.erase(id);
  {
    std::lock_guard lk(mu_);
    ++stats_.finished_total[static_cast<int>(final_event.finish)];
  }
  publish_stats();
  deliver(id, on_event, final_event);
}

void LocalEngine::publish_stats() {
  // Memory moves slowly and asking the backend walks its weights: once a second is enough.
  std::optional<MemoryStats> memory;
  if (const auto now = std::chrono::steady_clock::now(); now - memory_refreshed_ >= std::chrono::seconds(1)) {
    memory = memory_stats(*model_, layout_, blocks_.total_blocks(), max_seqs_);
    memory_refreshed_ = now;
  }
  std::lock_guard lk(mu_);
  if (memory) stats_.memory = std::move(*memory);
  stats_.running = scheduler_.running();
  stats_.waiting = scheduler_.waiting();
  // Snapshot blocks are free for every request that needs them (reclaimed first): not "used".
  stats_.kv_blocks_used = blocks_.used_blocks() - (prefix_ ? prefix_->held_blocks() : 0);
  stats_.preemptions_total = scheduler_.preemptions();
  stats_.steps_total = scheduler_.step();
}

}  // namespace

std::unique_ptr<Engine> start_engine(std::unique_ptr<EngineModel> model, std::shared_ptr<const Tokenizer> tokenizer,
                                     const EngineOptions& options) {
  if (!model) fail("start_engine: no model");
  return std::make_unique<LocalEngine>(std::move(model), std::move(tokenizer), options);
}

std::string engine_memory_table(const EngineModel& model, const EngineOptions& options) {
  const KvLayout layout = layout_for(model, options);
  const std::int64_t blocks = pool_size(model, layout, options), seqs = options.scheduler.max_seqs;
  const std::string sized_by =
      options.kv_blocks > 0 ? "" : fmt::format("memory: KV pool sized by    {}\n", cache_budget(model, options).how);
  return memory_table(layout, model.weight_bytes(), blocks, seqs, model.max_context()) + sized_by +
         device_memory_rows(memory_stats(model, layout, blocks, seqs));
}

}  // namespace plumb::runtime
