#pragma once
// The engine's scheduling policy, vLLM v1 style: no model and no threads, only counts. Every
// sequence has `known` tokens (prompt plus what it generated) of which `computed` are in the
// model state; a step gives each scheduled sequence a chunk of its uncomputed tokens, so a
// prefill, a chunked prefill, a decode token and the recompute after preemption are the same
// thing. Each step:
//   1. running sequences, in priority order (higher priority first, earlier arrival among
//      equals), get their next chunk under the token budget; when the KV pool cannot cover a
//      chunk, the last running sequence in that order (lowest priority, latest arrival) is
//      preempted by recompute: it releases its blocks and goes back to the waiting queue with
//      everything it generated, to be prefilled again;
//   2. if nothing was preempted, waiting sequences are admitted in policy order while a sequence
//      slot, token budget and the blocks of their first chunk are there. Admission stops at the
//      first sequence that does not fit (no overtaking, so the waiting bound below holds).
// Policies: FCFS admits by arrival. SRPT admits the least remaining work first (uncomputed
// tokens + tokens still to generate), except that a sequence that has waited
// `srpt_max_wait_steps` steps or more goes ahead of every sequence that has not (the aged ones
// longest-waiting first). So after that many steps only sequences that have waited longer are
// ahead of it, and it starts as soon as those have and a slot, budget and blocks are free: no
// stream of short requests can starve a long one. Priority breaks ties of the SRPT key.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "plumb/runtime/kv_blocks.h"

namespace plumb::runtime {

enum class SchedulePolicy { kFcfs, kSrpt };
SchedulePolicy parse_schedule_policy(const std::string& name);  // "fcfs" | "srpt"
const char* to_string(SchedulePolicy policy);

struct SchedulerConfig {
  std::int64_t max_batch_tokens = 2048;  // tokens per step over all sequences
  std::int64_t max_seqs = 64;            // running sequences at once
  std::int64_t max_chunk_tokens = 0;     // cap on one sequence's chunk per step; 0 = the budget
  SchedulePolicy policy = SchedulePolicy::kFcfs;
  std::int64_t srpt_max_wait_steps = 256;
};
void validate(const SchedulerConfig& config);  // throws plumb::Error naming the bad field

// The prefix cache as the scheduler sees it (optional; prefix_cache.h). At a sequence's
// admission (from position 0: new or preempted), `admit` says how many of its first tokens a
// cached snapshot covers (its first chunk starts there) and at which positions its chunks should
// end so that snapshots of it can be taken there. When blocks run short, `reclaim` frees
// snapshot blocks (up to the count given) before any sequence is preempted or left waiting;
// it returns false when it freed nothing.
struct PrefixHooks {
  struct Admission {
    std::int64_t cached = 0;
    std::vector<std::int64_t> pauses;  // ascending, each > cached
  };
  std::function<Admission(std::uint64_t id)> admit;
  std::function<bool(std::int64_t blocks)> reclaim;
};

struct ScheduledChunk {
  std::uint64_t id = 0;
  std::int64_t start = 0;   // first token index (position) of the chunk
  std::int64_t count = 0;   // tokens
  bool completes = false;   // the chunk ends at the last known token: its last row predicts the next
};

struct StepPlan {
  std::vector<ScheduledChunk> chunks;      // running order
  std::vector<std::uint64_t> preempted;    // their model state must be dropped
  std::int64_t tokens = 0;                 // sum of chunk counts
};

class Scheduler {
 public:
  // `blocks` must outlive the scheduler; the scheduler is its only user.
  Scheduler(const SchedulerConfig& config, KvBlockManager& blocks);

  // Whether a sequence of `prompt` tokens generating up to `max_new` can ever run: the positions
  // it may occupy (prompt + max_new - 1; the last token is never fed) fit the whole pool.
  bool fits_ever(std::int64_t prompt, std::int64_t max_new) const;

  void set_prefix_hooks(PrefixHooks hooks) { hooks_ = std::move(hooks); }

  // Queues a new sequence (ids must be unique). Throws when it can never fit.
  void add(std::uint64_t id, std::int64_t prompt, std::int64_t max_new, int priority);

  // Plans one step and applies it to the counts (the plan's chunks count as computed). The
  // caller must run the plan, then for every completing chunk call append_token() or finish().
  StepPlan schedule();

  // A token was sampled for `id` and continues the sequence.
  void append_token(std::uint64_t id);
  // `id` ended (finished, cancelled or failed): leaves every queue and frees its blocks. Unknown
  // ids are a no-op.
  void finish(std::uint64_t id);

  std::int64_t running() const { return static_cast<std::int64_t>(running_.size()); }
  std::int64_t waiting() const { return static_cast<std::int64_t>(waiting_.size()); }
  std::int64_t preemptions() const { return preemptions_; }
  std::int64_t step() const { return step_; }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  const KvBlockManager& blocks() const { return blocks_; }

 private:
  struct Seq {
    std::uint64_t id = 0;
    std::int64_t arrival = 0;  // order of add()
    int priority = 0;
    std::int64_t known = 0, computed = 0, generated = 0, max_new = 0;
    std::int64_t waiting_since = 0;  // step at which it (re)entered the waiting queue
    std::vector<std::int64_t> pauses;  // a chunk ends at one of these when it would cross it (PrefixHooks)
    std::int64_t remaining_work() const { return known - computed + (max_new - generated); }
  };
  void schedule_running(StepPlan& plan, std::int64_t& budget);
  void admit_waiting(StepPlan& plan, std::int64_t& budget);
  void sort_waiting();
  void preempt_last_running(StepPlan& plan);
  std::int64_t chunk_for(const Seq& s, std::int64_t budget) const;
  bool reserve(std::uint64_t id, std::int64_t positions);
  Seq* find(std::uint64_t id);

  SchedulerConfig config_;
  KvBlockManager& blocks_;
  PrefixHooks hooks_;
  std::vector<Seq> running_;  // kept in priority order (see the header comment)
  std::vector<Seq> waiting_;
  std::int64_t arrivals_ = 0, step_ = 0, preemptions_ = 0;
};

}  // namespace plumb::runtime
