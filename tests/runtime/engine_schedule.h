#pragma once
// The serving engine's steps without its thread, clock or sampler (issue 15 item 6), for the
// schedule tests (engine_schedule_test.cpp on the CPU, engine_schedule_gpu_test.cpp on the GPU):
//   - make_schedule: the engine's Scheduler and KvBlockManager planning every step of a fixed
//     workload (requests arriving at fixed steps; each "generated" token fixed in advance, so the
//     plan never depends on logits and two backends can run the same one);
//   - ScheduleRunner: a model fed those steps as LocalEngine::step feeds its EngineModel (one
//     ragged forward per step over the engine's block tables; logits of the chunks that complete
//     their sequence's known tokens), on any backend, with taps;
//   - lockstep: two runners over one schedule, every tap and logit compared bitwise after every
//     forward, the first difference named (forward, tap, row, request, position);
//   - first_request_difference: each request's logits in two runs (batched and alone).
// The runner drives plumb::Model as runtime::LoadedModel (engine_model.cpp) does: KV storage from
// the engine's format and block ids, each chunk given its request's prompt length as its prefill.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "plumb/model/model.h"
#include "plumb/runtime/kv_blocks.h"
#include "plumb/runtime/kv_layout.h"
#include "plumb/runtime/scheduler.h"

namespace plumb::runtime::schedule {

// One request: its prompt, then the tokens its decode steps feed (what it "generated").
struct Req {
  std::vector<TokenId> tokens;
  std::int64_t prompt = 0;   // the first `prompt` of `tokens`
  std::int64_t arrival = 0;  // submitted before this step is planned
  int priority = 0;
  // Completing chunks it runs: one per generated token, the last one never fed.
  std::int64_t generates() const { return static_cast<std::int64_t>(tokens.size()) - prompt + 1; }
};

// `prompt` random prompt tokens and `generate` - 1 fed ones (ids 2.. below vocab).
inline Req random_req(std::uint64_t seed, std::int64_t prompt, std::int64_t generate, std::int64_t vocab,
                      std::int64_t arrival = 0, int priority = 0) {
  std::mt19937_64 rng(seed);
  Req r;
  for (std::int64_t i = 0; i < prompt + generate - 1; ++i)
    r.tokens.push_back(static_cast<TokenId>(2 + rng() % static_cast<std::uint64_t>(vocab - 2)));
  r.prompt = prompt;
  r.arrival = arrival;
  r.priority = priority;
  return r;
}

struct Chunk {
  std::size_t req = 0;                // index into the workload
  std::int64_t start = 0, count = 0;  // positions [start, start + count)
  bool completes = false;             // its last row's logits are wanted
  std::vector<std::int32_t> blocks;   // the request's block table when the step was planned
};

struct Step {
  std::vector<std::size_t> preempted;  // states dropped before the forward (recomputed from 0)
  std::vector<Chunk> chunks;           // one forward, in the scheduler's running order
  std::vector<std::size_t> finished;   // states dropped after it
};

// Every step the engine would run for `reqs` under `config` with a pool of `blocks` blocks of
// `block_size` positions (no prefix cache: these prompts share no block, so it would only add
// pauses at block boundaries).
inline std::vector<Step> make_schedule(const std::vector<Req>& reqs, const SchedulerConfig& config,
                                       std::int64_t block_size, std::int64_t blocks) {
  KvBlockManager pool(block_size, blocks);
  Scheduler sched(config, pool);
  std::vector<Step> steps;
  std::vector<std::int64_t> generated(reqs.size(), 0);
  std::size_t added = 0, finished = 0;
  for (std::int64_t at = 0; finished < reqs.size(); ++at) {
    for (std::size_t i = 0; i < reqs.size(); ++i)
      if (reqs[i].arrival == at) sched.add(i, reqs[i].prompt, reqs[i].generates(), reqs[i].priority), ++added;
    if (sched.idle()) {
      if (added < reqs.size()) continue;  // the next arrival is later
      ADD_FAILURE() << "the scheduler went idle with requests unfinished";
      break;
    }
    const StepPlan plan = sched.schedule();
    if (plan.chunks.empty()) {
      ADD_FAILURE() << "the scheduler planned an empty step";
      break;
    }
    Step s;
    for (std::uint64_t id : plan.preempted) s.preempted.push_back(static_cast<std::size_t>(id));
    for (const ScheduledChunk& c : plan.chunks) {
      const std::span<const BlockId> t = pool.table(c.id);
      s.chunks.push_back({static_cast<std::size_t>(c.id), c.start, c.count, c.completes, {t.begin(), t.end()}});
    }
    for (const ScheduledChunk& c : plan.chunks) {
      if (!c.completes) continue;
      if (++generated[c.id] == reqs[c.id].generates()) {
        sched.finish(c.id);
        s.finished.push_back(static_cast<std::size_t>(c.id));
        ++finished;
      } else {
        sched.append_token(c.id);
      }
    }
    steps.push_back(std::move(s));
  }
  return steps;
}

// Each request alone, as an engine of one sequence slot and the default budget runs it.
inline std::vector<Step> alone_schedule(const Req& r, std::int64_t block_size, std::int64_t blocks) {
  Req only = r;
  only.arrival = 0;
  SchedulerConfig c;
  c.max_seqs = 1;
  return make_schedule({only}, c, block_size, blocks);
}

// One tap of one forward, on the host.
struct TapValue {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> data;
};

// A model fed schedule steps (see the header comment).
class ScheduleRunner {
 public:
  ScheduleRunner(const std::string& dir, const LoadOptions& load, const KvFormat& format, std::int64_t block_size,
                 std::int64_t blocks)
      : model_(load_model(dir, load)) {
    model_->set_kv_storage(kv_storage(format));
    model_->use_external_blocks(block_size, blocks);
  }

  Model& model() { return *model_; }

  // Runs `s` as one forward; returns the completing chunks' last-row logits, in chunk order.
  std::vector<float> forward(const Step& s, const std::vector<Req>& reqs, const Taps& taps = {}) {
    for (std::size_t i : s.preempted) states_.erase(i);
    std::vector<SequenceStep> batch;
    std::vector<std::int64_t> wanted;
    std::int64_t row = 0;
    for (const Chunk& c : s.chunks) {
      std::unique_ptr<SequenceState>& st = states_[c.req];
      if (!st) st = model_->new_sequence();
      if (st->pos != c.start) ADD_FAILURE() << "request " << c.req << " is at " << st->pos << ", its chunk starts at " << c.start;
      st->blocks.ids = c.blocks;
      const Req& r = reqs[c.req];
      batch.push_back({st.get(), std::span<const TokenId>(r.tokens).subspan(static_cast<std::size_t>(c.start),
                                                                            static_cast<std::size_t>(c.count)),
                       r.prompt});
      row += c.count;
      if (c.completes) wanted.push_back(row - 1);
    }
    std::vector<float> out = to_host_floats(model_->backend(), model_->forward(batch, wanted, taps));
    for (std::size_t i : s.finished) states_.erase(i);
    return out;
  }

  // Runs every step; per request, the logits of its completing chunks in order.
  std::vector<std::vector<float>> run(const std::vector<Step>& steps, const std::vector<Req>& reqs) {
    std::vector<std::vector<float>> per_req(reqs.size());
    for (const Step& s : steps) append_by_request(per_req, s, forward(s, reqs), model_->config().vocab_size);
    return per_req;
  }

  // Hands each completing chunk's logits row of `logits` (one step's) to its request.
  static void append_by_request(std::vector<std::vector<float>>& per_req, const Step& s, const std::vector<float>& logits,
                                std::int64_t vocab) {
    const auto V = static_cast<std::size_t>(vocab);
    std::size_t k = 0;
    for (const Chunk& c : s.chunks)
      if (c.completes) per_req[c.req].insert(per_req[c.req].end(), logits.begin() + k * V, logits.begin() + (k + 1) * V), ++k;
  }

 private:
  std::unique_ptr<Model> model_;
  std::map<std::size_t, std::unique_ptr<SequenceState>> states_;
};

// Where batch row `row` of step `s` comes from.
inline std::string row_origin(const Step& s, std::int64_t row) {
  for (const Chunk& c : s.chunks) {
    if (row < c.count) return fmt::format("request {} position {}", c.req, c.start + row);
    row -= c.count;
  }
  return "no chunk";
}

inline std::string describe_step(const Step& s) {
  std::string out;
  for (const Chunk& c : s.chunks)
    out += fmt::format("{}request {} [{}, {}){}", out.empty() ? "" : ", ", c.req, c.start, c.start + c.count,
                       c.completes ? " (logits)" : "");
  return out;
}

// Compares two taps (same name expected): the first differing value, its row and where that row
// comes from when the tap has one row per batch row.
inline std::string tap_difference(const TapValue& a, const TapValue& b, const Step& s, std::int64_t rows) {
  if (a.name != b.name || a.shape != b.shape)
    return fmt::format("tap {} {} vs tap {} {}", a.name, fmt::join(a.shape, "x"), b.name, fmt::join(b.shape, "x"));
  std::size_t differ = 0, first = 0;
  double worst = 0;
  for (std::size_t i = 0; i < a.data.size(); ++i)
    if (std::memcmp(&a.data[i], &b.data[i], sizeof(float)) != 0) {
      if (differ++ == 0) first = i;
      worst = std::max(worst, std::fabs(double(a.data[i]) - b.data[i]));
    }
  if (differ == 0) return "";
  const std::int64_t per_row = a.shape.empty() || a.shape[0] == 0 ? 1 : static_cast<std::int64_t>(a.data.size()) / a.shape[0];
  const std::int64_t row = static_cast<std::int64_t>(first) / per_row;
  const std::string origin = a.shape.empty() || a.shape[0] != rows ? "a row of its own" : row_origin(s, row);
  return fmt::format("tap {} [{}]: {} of {} values differ, the first at row {} ({}), value {} vs {}, max |diff| {:.3g}",
                     a.name, fmt::join(a.shape, "x"), differ, a.data.size(), row, origin, a.data[first], b.data[first],
                     worst);
}

// Two runs of one schedule, forward by forward: the first difference in words (empty when every
// tap and logit of every forward is bitwise equal), and each run's logits per request.
struct Lockstep {
  std::string first_difference;
  std::vector<std::vector<float>> a, b;
};

// Runs `steps` on both runners, collecting every tap of every forward; a difference is looked for
// in forward order, and within a forward in tap order, then in the logits.
inline Lockstep lockstep(ScheduleRunner& a, ScheduleRunner& b, const std::vector<Step>& steps, const std::vector<Req>& reqs) {
  Lockstep out;
  out.a.resize(reqs.size());
  out.b.resize(reqs.size());
  const std::int64_t vocab = a.model().config().vocab_size;
  for (std::size_t f = 0; f < steps.size(); ++f) {
    const Step& s = steps[f];
    std::vector<TapValue> ta, tb;
    auto collect = [](std::vector<TapValue>& into) {
      return Taps([&into](const std::string& name, const float* data, const std::vector<std::int64_t>& shape) {
        std::int64_t n = 1;
        for (std::int64_t d : shape) n *= d;
        into.push_back({name, shape, std::vector<float>(data, data + n)});
      });
    };
    const std::vector<float> la = a.forward(s, reqs, collect(ta)), lb = b.forward(s, reqs, collect(tb));
    ScheduleRunner::append_by_request(out.a, s, la, vocab);
    ScheduleRunner::append_by_request(out.b, s, lb, vocab);
    if (!out.first_difference.empty()) continue;
    std::int64_t rows = 0;
    for (const Chunk& c : s.chunks) rows += c.count;
    const std::string where = fmt::format("forward {} of {} ({})", f, steps.size(), describe_step(s));
    if (ta.size() != tb.size()) {
      out.first_difference = fmt::format("{}: {} taps vs {}", where, ta.size(), tb.size());
      continue;
    }
    for (std::size_t i = 0; i < ta.size() && out.first_difference.empty(); ++i)
      if (std::string d = tap_difference(ta[i], tb[i], s, rows); !d.empty()) out.first_difference = where + ": " + d;
    // (A forward where no chunk completes has no logits: memcmp must not see their null data.)
    const bool same_logits = la.size() == lb.size() && (la.empty() || std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)) == 0);
    if (out.first_difference.empty() && !same_logits) out.first_difference = where + ": the logits differ, every tap equal";
  }
  return out;
}

// Compares each request's logits between two runs (e.g. batched and alone): the first request and
// completing chunk that differ, bitwise; empty when all agree.
inline std::string first_request_difference(const std::vector<std::vector<float>>& got,
                                            const std::vector<std::vector<float>>& want, std::int64_t vocab) {
  for (std::size_t r = 0; r < want.size(); ++r) {
    if (got[r].size() != want[r].size()) return fmt::format("request {}: {} logits vs {}", r, got[r].size(), want[r].size());
    for (std::size_t i = 0; i < want[r].size(); ++i)
      if (std::memcmp(&got[r][i], &want[r][i], sizeof(float)) != 0)
        return fmt::format("request {} generated token {}: logit {} is {} vs {}", r, i / static_cast<std::size_t>(vocab),
                           i % static_cast<std::size_t>(vocab), got[r][i], want[r][i]);
  }
  return "";
}

}  // namespace plumb::runtime::schedule
