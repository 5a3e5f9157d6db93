#include "plumb/runtime/scheduler.h"

#include <algorithm>
#include <tuple>

#include "plumb/util/error.h"

namespace plumb::runtime {

SchedulePolicy parse_schedule_policy(const std::string& name) {
  if (name == "fcfs") return SchedulePolicy::kFcfs;
  if (name == "srpt") return SchedulePolicy::kSrpt;
  fail("unknown scheduler '{}': expected fcfs or srpt", name);
}

const char* to_string(SchedulePolicy policy) { return policy == SchedulePolicy::kFcfs ? "fcfs" : "srpt"; }

void validate(const SchedulerConfig& c) {
  if (c.max_batch_tokens < 1) fail("max_batch_tokens must be at least 1, got {}", c.max_batch_tokens);
  if (c.max_seqs < 1) fail("max_seqs must be at least 1, got {}", c.max_seqs);
  if (c.max_chunk_tokens < 0) fail("max_chunk_tokens must be >= 0 (0: the batch budget), got {}", c.max_chunk_tokens);
  if (c.srpt_max_wait_steps < 1) fail("srpt_max_wait_steps must be at least 1, got {}", c.srpt_max_wait_steps);
}

Scheduler::Scheduler(const SchedulerConfig& config, KvBlockManager& blocks) : config_(config), blocks_(blocks) {
  validate(config_);
}

bool Scheduler::fits_ever(std::int64_t prompt, std::int64_t max_new) const {
  return blocks_.blocks_for(prompt + max_new - 1) <= blocks_.total_blocks();
}

void Scheduler::add(std::uint64_t id, std::int64_t prompt, std::int64_t max_new, int priority) {
  if (prompt < 1) fail("sequence {}: the prompt is empty", id);
  if (max_new < 1) fail("sequence {}: max_new must be at least 1, got {}", id, max_new);
  if (find(id)) fail("sequence {} is already scheduled", id);
  if (!fits_ever(prompt, max_new))
    fail("a request of {} prompt + {} new tokens needs {} KV blocks of {} positions; the pool has {}", prompt,
         max_new, blocks_.blocks_for(prompt + max_new - 1), blocks_.block_size(), blocks_.total_blocks());
  Seq s;
  s.id = id;
  s.arrival = arrivals_++;
  s.priority = priority;
  s.known = prompt;
  s.max_new = max_new;
  s.waiting_since = step_;
  waiting_.push_back(s);
}

std::int64_t Scheduler::chunk_for(const Seq& s, std::int64_t budget) const {
  std::int64_t n = std::min(s.known - s.computed, budget);
  if (config_.max_chunk_tokens > 0) n = std::min(n, config_.max_chunk_tokens);
  const auto pause = std::upper_bound(s.pauses.begin(), s.pauses.end(), s.computed);
  if (pause != s.pauses.end()) n = std::min(n, *pause - s.computed);
  return n;
}

// The pool's reserve, after freeing prefix-cache snapshots when it is short.
bool Scheduler::reserve(std::uint64_t id, std::int64_t positions) {
  while (!blocks_.reserve(id, positions)) {
    const auto need = blocks_.blocks_for(positions) - static_cast<std::int64_t>(blocks_.table(id).size());
    if (!hooks_.reclaim || !hooks_.reclaim(need)) return false;
  }
  return true;
}

// Lowest priority, latest arrival: the last of running_, which is kept in that order.
void Scheduler::preempt_last_running(StepPlan& plan) {
  Seq s = running_.back();
  running_.pop_back();
  blocks_.release(s.id);
  s.computed = 0;
  s.waiting_since = step_;
  waiting_.push_back(s);
  plan.preempted.push_back(s.id);
  ++preemptions_;
}

void Scheduler::schedule_running(StepPlan& plan, std::int64_t& budget) {
  for (std::size_t i = 0; i < running_.size() && budget > 0; ++i) {
    const std::int64_t n = chunk_for(running_[i], budget);
    bool self_preempted = false;
    while (!reserve(running_[i].id, running_[i].computed + n)) {
      self_preempted = i + 1 == running_.size();
      preempt_last_running(plan);
      if (self_preempted) break;
    }
    if (self_preempted) break;
    Seq& s = running_[i];
    plan.chunks.push_back({s.id, s.computed, n, s.computed + n == s.known});
    s.computed += n;
    budget -= n;
  }
}

void Scheduler::sort_waiting() {
  if (config_.policy == SchedulePolicy::kFcfs) {
    std::stable_sort(waiting_.begin(), waiting_.end(), [](const Seq& a, const Seq& b) { return a.arrival < b.arrival; });
    return;
  }
  const auto key = [&](const Seq& s) {
    const bool aged = step_ - s.waiting_since >= config_.srpt_max_wait_steps;
    // Aged sequences first, longest-waiting first; the others by remaining work.
    return aged ? std::make_tuple(0, s.waiting_since, 0, s.arrival)
                : std::make_tuple(1, s.remaining_work(), -s.priority, s.arrival);
  };
  std::stable_sort(waiting_.begin(), waiting_.end(), [&](const Seq& a, const Seq& b) { return key(a) < key(b); });
}

void Scheduler::admit_waiting(StepPlan& plan, std::int64_t& budget) {
  sort_waiting();
  std::size_t admitted = 0;
  while (admitted < waiting_.size() && budget > 0 && running() < config_.max_seqs) {
    Seq s = waiting_[admitted];  // computed is 0: new or preempted
    if (hooks_.admit) {
      PrefixHooks::Admission a = hooks_.admit(s.id);
      s.computed = a.cached;
      s.pauses = std::move(a.pauses);
    }
    const std::int64_t n = chunk_for(s, budget);
    if (!reserve(s.id, s.computed + n)) break;
    plan.chunks.push_back({s.id, s.computed, n, s.computed + n == s.known});
    s.computed += n;
    budget -= n;
    const auto at = std::upper_bound(running_.begin(), running_.end(), s, [](const Seq& a, const Seq& b) {
      return std::tie(b.priority, a.arrival) < std::tie(a.priority, b.arrival);
    });
    running_.insert(at, s);
    ++admitted;
  }
  waiting_.erase(waiting_.begin(), waiting_.begin() + static_cast<std::ptrdiff_t>(admitted));
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  std::int64_t budget = config_.max_batch_tokens;
  schedule_running(plan, budget);
  if (plan.preempted.empty()) admit_waiting(plan, budget);
  for (const ScheduledChunk& c : plan.chunks) plan.tokens += c.count;
  ++step_;
  return plan;
}

Scheduler::Seq* Scheduler::find(std::uint64_t id) {
  for (auto* q : {&running_, &waiting_})
    for (Seq& s : *q)
      if (s.id == id) return &s;
  return nullptr;
}

void Scheduler::append_token(std::uint64_t id) {
  Seq* s = find(id);
  if (!s) fail("append_token: sequence {} is not scheduled", id);
  if (s->generated >= s->max_new) fail("append_token: sequence {} already has its {} new tokens", id, s->max_new);
  ++s->known;
  ++s->generated;
}

void Scheduler::finish(std::uint64_t id) {
  for (auto* q : {&running_, &waiting_})
    q->erase(std::remove_if(q->begin(), q->end(), [&](const Seq& s) { return s.id == id; }), q->end());
  blocks_.release(id);
}

}  // namespace plumb::runtime
