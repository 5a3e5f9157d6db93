#pragma once
// The --dp x --tp x --ep layout of a multi-process run and this process's place in it.
//
// World rank w = d * (tp * ep) + m: replica d (data parallel: its own sequences) and rank m of
// that replica's model group, which holds one copy of the model. Inside the model group:
//   routed experts   split across all tp * ep ranks: rank m owns the experts
//                    [m * E / M, (m + 1) * E / M), M = tp * ep (the block `convert shard` gives
//                    rank m); every rank routes every token, computes its experts' outputs and
//                    all-gathers them, and each output element is summed on every rank in the
//                    one order a single process uses, so results are bitwise those of one process;
//   attention heads  split across the tp ranks t = m / ep (heads [t * H / tp, (t + 1) * H / tp)),
//                    replicated across the ep ranks of the same t; each head's output, and each
//                    element of the projections after it, is computed wholly on one rank and
//                    all-gathered (never a sum of partial sums).
// Everything else (embedding, norms, mHC, the router, KV projections, the indexer, the shared
// expert, the head) is replicated.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "plumb/dist/communicator.h"

namespace plumb::dist {

struct Layout {
  int dp = 1, tp = 1, ep = 1;
  int size() const { return dp * tp * ep; }
  bool parallel() const { return size() > 1; }
  std::string str() const;  // "dp 1 x tp 2 x ep 1"
};

// A [begin, end) range of experts or heads.
struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool contains(int64_t i) const { return i >= begin && i < end; }
};

class Parallel {
 public:
  // Splits `world` by `layout`; a plumb::Error when the product is not the world's size (naming
  // both) or a degree is below 1. Collective: every rank of `world` must call it.
  Parallel(std::shared_ptr<Communicator> world, Layout layout);

  const Layout& layout() const { return layout_; }
  Communicator& world() { return *world_; }
  Communicator& model_group() { return *model_; }  // tp * ep ranks: the experts' group
  Communicator& tp_group() { return *tp_; }        // tp ranks: the attention heads' group
  int model_size() const { return model_->size(); }
  int tp_size() const { return tp_->size(); }
  int dp_rank() const { return dp_rank_; }
  // Whether this rank leads its model group (rank 0 of it): under the serving engine the lead
  // runs the engine and the others follow its model calls (runtime/model_group.h).
  bool leads_model_group() const { return model_->rank() == 0; }
  // The leads of every replica, by replica (on a lead; on another rank: its peers of the same
  // model-group rank): where the replicas' results meet.
  Communicator& replica_leads() { return *peers_; }
  // The one rank that writes a command's output (world rank 0).
  bool writes_output() const { return world_->rank() == 0; }

  // This rank's routed experts of `experts`, and the owner (model-group rank) of expert e; a
  // plumb::Error naming `what` when the experts do not split evenly.
  Range experts(int64_t experts, const std::string& what) const;
  int expert_owner(int64_t expert, int64_t experts) const;
  // This rank's attention heads (or head groups) of `heads`.
  Range heads(int64_t heads, const std::string& what) const;

 private:
  std::shared_ptr<Communicator> world_;
  std::unique_ptr<Communicator> model_, tp_, peers_;
  Layout layout_;
  int dp_rank_ = 0;
};

}  // namespace plumb::dist
