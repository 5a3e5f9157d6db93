#include "plumb/dist/world.h"

#include <dlfcn.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "plumb/util/error.h"

namespace plumb::dist {
namespace {

#ifdef PLUMB_WITH_MPI
constexpr bool kWithMpi = true;
#else
constexpr bool kWithMpi = false;
#endif
constexpr const char* kPlugin = "libplumb_mpi.so";

// The MPI world from the plugin: $PLUMB_MPI_PLUGIN, else beside the executable, else in its
// parent folder (the build tree's tests/ binaries). RTLD_GLOBAL: Open MPI's own components
// resolve libmpi's symbols from the global scope.
std::shared_ptr<Communicator> make_mpi_world(const LaunchInfo& li) {
  namespace fs = std::filesystem;
  std::vector<std::string> tried;
  if (const char* p = std::getenv("PLUMB_MPI_PLUGIN")) tried.emplace_back(p);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    tried.push_back((exe.parent_path() / kPlugin).string());
    tried.push_back((exe.parent_path().parent_path() / kPlugin).string());
  }
  std::string why;
  for (const std::string& path : tried) {
    if (!fs::exists(path, ec)) continue;
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
      why = dlerror();
      continue;
    }
    using WorldFn = Communicator* (*)(const LaunchInfo&);
    auto fn = reinterpret_cast<WorldFn>(dlsym(h, "plumb_mpi_world"));
    if (!fn) fail("{}: no plumb_mpi_world in it: {}", path, dlerror());
    return std::shared_ptr<Communicator>(fn(li));
  }
  fail("launched by {} as rank {} of {}: cannot load the MPI plugin {} (looked for {}){}", li.launcher, li.rank,
       li.size, kPlugin, fmt::join(tried, ", "), why.empty() ? "" : ": " + why);
}

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

bool built_with_mpi() { return kWithMpi; }

}  // namespace plumb::dist
