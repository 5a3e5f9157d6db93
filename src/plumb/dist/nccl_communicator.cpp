// NCCL / RCCL device communicator (nccl_communicator.h). Compiled only where cmake/dist.cmake
// finds the library; PLUMB_WITH_RCCL selects the HIP names.
#include "plumb/dist/nccl_communicator.h"

#include <cstdlib>
#include <string>
#include <utility>

#if defined(PLUMB_WITH_RCCL)
#include <hip/hip_runtime.h>
#include <rccl/rccl.h>
using StreamT = hipStream_t;
#define PLUMB_SET_DEVICE hipSetDevice
#define PLUMB_RUNTIME_ERROR hipGetErrorString
#define PLUMB_RUNTIME_OK hipSuccess
#else
#include <cuda_runtime.h>
#include <nccl.h>
using StreamT = cudaStream_t;
#define PLUMB_SET_DEVICE cudaSetDevice
#define PLUMB_RUNTIME_ERROR cudaGetErrorString
#define PLUMB_RUNTIME_OK cudaSuccess
#endif

#include "plumb/util/error.h"

namespace plumb::dist {
namespace {

void check(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess) fail("NCCL: {} failed: {}", what, ncclGetErrorString(rc));
}

void select_device(int device) {
  const auto rc = PLUMB_SET_DEVICE(device);
  if (rc != PLUMB_RUNTIME_OK) fail("NCCL: selecting GPU {} failed: {}", device, PLUMB_RUNTIME_ERROR(rc));
}

StreamT stream_of(void* s) { return static_cast<StreamT>(s); }

}  // namespace

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
};

NcclCommunicator::NcclCommunicator(std::unique_ptr<Impl> impl, int rank, int size)
    : impl_(std::move(impl)), rank_(rank), size_(size) {}

NcclCommunicator::~NcclCommunicator() {
  if (impl_ && impl_->comm) ncclCommDestroy(impl_->comm);
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::over_mpi(Communicator& bootstrap, int device) {
  select_device(device);
  ncclUniqueId id{};
  if (bootstrap.rank() == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  bootstrap.broadcast(&id, sizeof id, 0);
  auto impl = std::make_unique<Impl>();
  check(ncclCommInitRank(&impl->comm, bootstrap.size(), id, bootstrap.rank()), "ncclCommInitRank");
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(std::move(impl), bootstrap.rank(), bootstrap.size()));
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::from_env(const LaunchInfo& launch) {
  if (launch.master_addr.empty() || launch.master_port.empty())
    fail("NCCL bootstrap without MPI needs MASTER_ADDR and MASTER_PORT (rank {} of {})", launch.rank, launch.size);
  select_device(launch.local_rank);
  // With NCCL_COMM_ID set, ncclGetUniqueId encodes that address (the same id on every rank) and
  // ncclCommInitRank on rank 0 starts the bootstrap root there.
  const std::string addr = launch.master_addr + ":" + launch.master_port;
  if (setenv("NCCL_COMM_ID", addr.c_str(), 1) != 0) fail("NCCL: cannot set NCCL_COMM_ID={}", addr);
  ncclUniqueId id{};
  check(ncclGetUniqueId(&id), "ncclGetUniqueId (NCCL_COMM_ID)");
  auto impl = std::make_unique<Impl>();
  check(ncclCommInitRank(&impl->comm, launch.size, id, launch.rank), "ncclCommInitRank");
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(std::move(impl), launch.rank, launch.size));
}

void NcclCommunicator::all_gather(const float* send, std::size_t count, float* out, void* stream) {
  check(ncclAllGather(send, out, count, ncclFloat32, impl_->comm, stream_of(stream)), "ncclAllGather");
}

void NcclCommunicator::all_gather_v(const float* send, std::span<const int64_t> counts, float* out, void* stream) {
  if (static_cast<int>(counts.size()) != size_) fail("NCCL all_gather_v: {} counts for a group of {}", counts.size(), size_);
  check(ncclGroupStart(), "ncclGroupStart");
  int64_t at = 0;
  for (int r = 0; r < size_; ++r) {
    const auto n = static_cast<std::size_t>(counts[static_cast<std::size_t>(r)]);
    // Root r sends from its own buffer; every rank receives into its place in out.
    check(ncclBroadcast(r == rank_ ? send : out + at, out + at, n, ncclFloat32, r, impl_->comm, stream_of(stream)),
          "ncclBroadcast");
    at += counts[static_cast<std::size_t>(r)];
  }
  check(ncclGroupEnd(), "ncclGroupEnd");
}

void NcclCommunicator::broadcast(void* data, std::size_t bytes, int root, void* stream) {
  check(ncclBroadcast(data, data, bytes, ncclUint8, root, impl_->comm, stream_of(stream)), "ncclBroadcast");
}

}  // namespace plumb::dist
