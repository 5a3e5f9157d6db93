#include "plumb/dist/parallel.h"

#include <fmt/format.h>

#include "plumb/util/error.h"

namespace plumb::dist {

std::string Layout::str() const { return fmt::format("dp {} x tp {} x ep {}", dp, tp, ep); }

Parallel::Parallel(std::shared_ptr<Communicator> world, Layout layout) : world_(std::move(world)), layout_(layout) {
  if (layout.dp < 1 || layout.tp < 1 || layout.ep < 1)
    fail("--dp {} --tp {} --ep {}: every degree must be at least 1", layout.dp, layout.tp, layout.ep);
  if (layout.size() != world_->size())
    fail("--dp {} x --tp {} x --ep {} = {} processes, but {} were launched (the product must be the number of "
         "processes: mpirun -np {})",
         layout.dp, layout.tp, layout.ep, layout.size(), world_->size(), layout.size());
  const int M = layout.tp * layout.ep, w = world_->rank();
  dp_rank_ = w / M;
  const int m = w % M, t = m / layout.ep, e = m % layout.ep;
  model_ = world_->split(dp_rank_, m);
  tp_ = world_->split(dp_rank_ * layout.ep + e, t);
  peers_ = world_->split(m, dp_rank_);  // the ranks m of every replica; for m = 0, their leads
}

Range Parallel::experts(int64_t experts, const std::string& what) const {
  const int64_t M = model_->size();
  if (experts % M != 0) fail("{}: {} routed experts do not split evenly across tp x ep = {} ranks", what, experts, M);
  const int64_t per = experts / M, m = model_->rank();
  return {m * per, (m + 1) * per};
}

int Parallel::expert_owner(int64_t expert, int64_t experts) const {
  return static_cast<int>(expert / (experts / model_->size()));
}

Range Parallel::heads(int64_t heads, const std::string& what) const {
  const int64_t T = tp_->size();
  if (heads % T != 0) fail("{}: {} do not split evenly across --tp {}", what, heads, T);
  const int64_t per = heads / T, t = tp_->rank();
  return {t * per, (t + 1) * per};
}

}  // namespace plumb::dist
