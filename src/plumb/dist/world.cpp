#include "plumb/dist/world.h"

#include <mutex>

#include "plumb/util/error.h"

namespace plumb::dist {
namespace {

std::shared_ptr<Communicator> connect(const LaunchInfo& li) {
  if (li.size == 1) return make_local_communicator();
  if (!li.mpi())
    fail("launched by {} as rank {} of {} without an MPI launcher: plumb's host collectives run over MPI; launch "
         "with mpirun -np {} (or srun --mpi=pmix -n {}); see docs/DISTRIBUTED.md",
         li.launcher, li.rank, li.size, li.size, li.size);
  if (!built_with_mpi())
    fail("launched by {} as rank {} of {}, but this plumb was built without MPI (install libopenmpi-dev: "
         "scripts/install-deps.sh, then reconfigure)",
         li.launcher, li.rank, li.size);
  return make_mpi_world(li);
}

std::once_flag g_once;
LaunchInfo g_launch;
std::shared_ptr<Communicator> g_world;

void init() {
  std::call_once(g_once, [] {
    g_launch = read_launch();
    g_world = connect(g_launch);
  });
}

}  // namespace

const LaunchInfo& launch() {
  init();
  return g_launch;
}

std::shared_ptr<Communicator> world() {
  init();
  return g_world;
}

void abort_if_parallel(int code) {
  if (g_world && g_world->size() > 1) g_world->abort(code);
}

#ifndef PLUMB_WITH_MPI
bool built_with_mpi() { return false; }
std::shared_ptr<Communicator> make_mpi_world(const LaunchInfo&) { fail("plumb was built without MPI"); }
#endif

}  // namespace plumb::dist
