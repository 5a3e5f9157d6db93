#include "parallel_flags.h"

#include "generation_flags.h"
#include "plumb/dist/world.h"
#include "plumb/util/error.h"

namespace plumb::cli {

void add_parallel_flags(CLI::App& cmd, ParallelFlags& f) {
  cmd.add_option("--dp", f.dp, "data-parallel replicas (each its own copy of the model; with mpirun)")
      ->check(at_least(1))
      ->capture_default_str();
  cmd.add_option("--tp", f.tp, "tensor-parallel ranks: attention heads split (and the routed experts; with mpirun)")
      ->check(at_least(1))
      ->capture_default_str();
  cmd.add_option("--ep", f.ep, "expert-parallel ranks: routed experts split (with mpirun)")
      ->check(at_least(1))
      ->capture_default_str();
}

std::shared_ptr<dist::Parallel> join_layout(const ParallelFlags& f) {
  const dist::Layout layout{f.dp, f.tp, f.ep};
  std::shared_ptr<dist::Communicator> world = dist::world();
  if (world->size() == 1 && !layout.parallel()) return nullptr;
  if (world->size() > 1 && !layout.parallel())
    fail("launched as {} processes ({}) without a layout: say how to split them with --dp / --tp / --ep (their "
         "product {})",
         world->size(), dist::launch().launcher, world->size());
  return std::make_shared<dist::Parallel>(std::move(world), layout);
}

}  // namespace plumb::cli
