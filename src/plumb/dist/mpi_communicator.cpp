// The MPI Communicator: the plugin libplumb_mpi.so (built only where CMake finds MPI:
// cmake/dist.cmake), which world.cpp loads only for a launch of several processes, so plumb
// itself does not depend on libmpi. MPI is initialised by plumb_mpi_world() and finalised when
// the process exits.
#include <mpi.h>

#include <cstdlib>
#include <vector>

#include "plumb/dist/communicator.h"
#include "plumb/dist/launch.h"
#include "plumb/util/error.h"

namespace plumb::dist {
namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fail("MPI: {} failed: {}", what, std::string(msg, static_cast<std::size_t>(len)));
}

// Finalises MPI at exit, after every communicator is gone (static destruction follows main).
struct MpiRuntime {
  ~MpiRuntime() {
    int init = 0, done = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&done);
    if (init && !done) MPI_Finalize();
  }
};
MpiRuntime g_runtime;

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }
  ~MpiCommunicator() override {
    int done = 0;
    MPI_Finalized(&done);
    if (owned_ && !done) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string transport() const override { return "mpi"; }
  void barrier() override { check(MPI_Barrier(comm_), "MPI_Barrier"); }
  void broadcast(void* data, std::size_t bytes, int root) override {
    if (bytes > static_cast<std::size_t>(INT32_MAX)) fail("MPI broadcast of {} bytes: above 2 GiB", bytes);
    check(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_), "MPI_Bcast");
  }
  void all_gather_bytes(const void* send, std::span<const int64_t> bytes, void* out) override {
    const Counts c = counts("all_gather", bytes);
    check(MPI_Allgatherv(send, c.counts[static_cast<std::size_t>(rank_)], MPI_BYTE, out, c.counts.data(),
                         c.displs.data(), MPI_BYTE, comm_),
          "MPI_Allgatherv");
  }
  void all_to_all_bytes(const void* send, std::span<const int64_t> send_bytes, void* out,
                        std::span<const int64_t> recv_bytes) override {
    const Counts s = counts("all_to_all (send)", send_bytes), r = counts("all_to_all (receive)", recv_bytes);
    check(MPI_Alltoallv(send, s.counts.data(), s.displs.data(), MPI_BYTE, out, r.counts.data(), r.displs.data(),
                        MPI_BYTE, comm_),
          "MPI_Alltoallv");
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split");
    return std::make_unique<MpiCommunicator>(sub, true);
  }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

 private:
  // MPI's int counts and displacements of one byte count per rank.
  struct Counts {
    std::vector<int> counts, displs;
  };
  Counts counts(const char* what, std::span<const int64_t> bytes) const {
    if (static_cast<int>(bytes.size()) != size_) fail("{}: {} counts for a group of {}", what, bytes.size(), size_);
    Counts c;
    int64_t at = 0;
    for (int64_t b : bytes) {
      if (b < 0 || at + b > INT32_MAX) fail("MPI {} of {} bytes: above 2 GiB", what, at + b);
      c.counts.push_back(static_cast<int>(b));
      c.displs.push_back(static_cast<int>(at));
      at += b;
    }
    return c;
  }

  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

}  // namespace plumb::dist

// The plugin's one entry point (world.cpp looks it up by this name): the world communicator of
// this MPI launch; throws plumb::Error.
extern "C" plumb::dist::Communicator* plumb_mpi_world(const plumb::dist::LaunchInfo& li) {
  using namespace plumb::dist;
  using plumb::fail;
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  if (provided < MPI_THREAD_SERIALIZED)
    fail("MPI: the library gives thread level {}, plumb needs MPI_THREAD_SERIALIZED (collectives run on the engine "
         "thread)",
         provided);
  // Errors come back as codes (check() turns them into plumb::Error) instead of aborting here.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  auto w = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, false);
  if (w->rank() != li.rank || w->size() != li.size)
    fail("MPI says rank {} of {}, the {} environment rank {} of {}", w->rank(), w->size(), li.launcher, li.rank,
         li.size);
  return w.release();
}
