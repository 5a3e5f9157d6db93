// plumb_nccl_ranks: the NCCL / RCCL communicator on device buffers, one GPU per rank. Run under
// mpirun (bootstrap over MPI) or, with --torchrun, as processes given RANK / WORLD_SIZE /
// LOCAL_RANK / MASTER_ADDR / MASTER_PORT (NCCL's own bootstrap). Checks all_gather and
// all_gather_v against the values each rank put in. Exit 77 (skipped) when this machine has
// fewer GPUs than local ranks (NCCL refuses two ranks on one GPU).
#include <cstdio>
#include <cstring>
#include <vector>

#if defined(PLUMB_WITH_RCCL)
#include <hip/hip_runtime.h>
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuMalloc hipMalloc
#define gpuMemcpy hipMemcpy
#define gpuH2D hipMemcpyHostToDevice
#define gpuD2H hipMemcpyDeviceToHost
#define gpuDeviceSynchronize hipDeviceSynchronize
#define gpuFree hipFree
#else
#include <cuda_runtime.h>
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuMalloc cudaMalloc
#define gpuMemcpy cudaMemcpy
#define gpuH2D cudaMemcpyHostToDevice
#define gpuD2H cudaMemcpyDeviceToHost
#define gpuDeviceSynchronize cudaDeviceSynchronize
#define gpuFree cudaFree
#endif

#include "plumb/dist/nccl_communicator.h"
#include "plumb/dist/world.h"
#include "plumb/util/error.h"

namespace {

float value(int rank, std::size_t i) { return static_cast<float>(rank * 1000 + static_cast<int>(i)) + 0.25f; }

int run(bool torchrun) {
  using plumb::dist::NcclCommunicator;
  const plumb::dist::LaunchInfo li = plumb::dist::read_launch();
  int gpus = 0;
  if (gpuGetDeviceCount(&gpus) != 0 || gpus <= li.local_rank) {
    std::printf("SKIPPED: rank %d needs GPU %d, this machine has %d\n", li.rank, li.local_rank, gpus);
    return 77;
  }
  const std::unique_ptr<NcclCommunicator> c =
      torchrun ? NcclCommunicator::from_env(li) : NcclCommunicator::over_mpi(*plumb::dist::world(), li.local_rank);
  const int P = c->size(), r = c->rank();
  std::vector<int64_t> counts;  // unequal parts for all_gather_v: rank q sends q + 3 floats
  int64_t total = 0;
  for (int q = 0; q < P; ++q) counts.push_back(q + 3), total += q + 3;
  const std::size_t mine = static_cast<std::size_t>(counts[static_cast<std::size_t>(r)]), equal = 5;
  std::vector<float> send(mine);
  for (std::size_t i = 0; i < mine; ++i) send[i] = value(r, i);
  float *d_send = nullptr, *d_out = nullptr;
  gpuMalloc(reinterpret_cast<void**>(&d_send), mine * sizeof(float));
  gpuMalloc(reinterpret_cast<void**>(&d_out), static_cast<std::size_t>(total) * sizeof(float));
  gpuMemcpy(d_send, send.data(), mine * sizeof(float), gpuH2D);
  int bad = 0;
  c->all_gather(d_send, equal, d_out, nullptr);
  std::vector<float> out(static_cast<std::size_t>(P) * equal);
  gpuDeviceSynchronize();
  gpuMemcpy(out.data(), d_out, out.size() * sizeof(float), gpuD2H);
  for (int q = 0; q < P; ++q)
    for (std::size_t i = 0; i < equal; ++i) bad += out[q * equal + i] != value(q, i);
  c->all_gather_v(d_send, counts, d_out, nullptr);
  out.assign(static_cast<std::size_t>(total), 0.f);
  gpuDeviceSynchronize();
  gpuMemcpy(out.data(), d_out, out.size() * sizeof(float), gpuD2H);
  std::size_t at = 0;
  for (int q = 0; q < P; ++q)
    for (int64_t i = 0; i < counts[static_cast<std::size_t>(q)]; ++i) bad += out[at++] != value(q, static_cast<std::size_t>(i));
  gpuFree(d_send);
  gpuFree(d_out);
  std::printf("nccl_ranks: rank %d of %d (%s): %s\n", r, P, torchrun ? "NCCL_COMM_ID bootstrap" : "MPI bootstrap",
              bad ? "MISMATCH" : "all_gather and all_gather_v correct");
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc > 1 && std::strcmp(argv[1], "--torchrun") == 0);
  } catch (const plumb::Error& e) {
    std::fprintf(stderr, "nccl_ranks: %s\n", e.what());
    return 1;
  }
}
