#pragma once
// Device-buffer collectives over NCCL (CUDA) or RCCL (HIP, the same API), for the GPU backends'
// layouts. Built only where the library is found (cmake/dist.cmake: NCCL_ROOT / RCCL_ROOT); the
// build machine of this branch has neither, so this file and its .cpp have not been compiled
// yet, and no op calls them: the layouts run on the CPU backend (docs/DISTRIBUTED.md).
//
// Bootstrap, two ways, neither a transport of plumb's own:
//   over MPI (mpirun / srun): rank 0 makes the unique id, the MPI communicator broadcasts it;
//   torchrun-style (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, no MPI): NCCL's own bootstrap,
//     NCCL_COMM_ID=MASTER_ADDR:MASTER_PORT: every rank gets the same id from that address and
//     rank 0 runs NCCL's bootstrap root there (ncclCommInitRank).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "plumb/dist/communicator.h"
#include "plumb/dist/launch.h"

namespace plumb::dist {

class NcclCommunicator {
 public:
  // Selects GPU `device`, then joins the group of `bootstrap`'s ranks (collective over it).
  static std::unique_ptr<NcclCommunicator> over_mpi(Communicator& bootstrap, int device);
  // Selects GPU launch.local_rank and joins through MASTER_ADDR:MASTER_PORT (both required).
  static std::unique_ptr<NcclCommunicator> from_env(const LaunchInfo& launch);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Device buffers, enqueued on `stream` (a cudaStream_t / hipStream_t; null: the default one).
  // out = every rank's `count` floats, rank-major.
  void all_gather(const float* send, std::size_t count, float* out, void* stream);
  // out = rank r's counts[r] floats after those of the ranks below it (grouped broadcasts: NCCL
  // has no all-gather of unequal parts).
  void all_gather_v(const float* send, std::span<const int64_t> counts, float* out, void* stream);
  void broadcast(void* data, std::size_t bytes, int root, void* stream);

 private:
  struct Impl;
  NcclCommunicator(std::unique_ptr<Impl> impl, int rank, int size);
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, size_ = 1;
};

}  // namespace plumb::dist
