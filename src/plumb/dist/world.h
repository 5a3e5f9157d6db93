#pragma once
// The world group of this process, made once from the launch environment (launch.h):
//   no launcher, or a launcher of 1 process: the local group, and MPI is never initialised (a
//     single process needs no MPI runtime; the MPI library is still linked where it was found);
//   mpirun / PMI / srun: MPI, from the plugin libplumb_mpi.so beside the binary (or its parent
//     folder, or $PLUMB_MPI_PLUGIN), loaded only then: plumb itself does not link libmpi.
//     Initialised with MPI_THREAD_SERIALIZED, since the serving engine calls the collectives
//     from its thread; finalised at exit;
//   torchrun-style (RANK / WORLD_SIZE > 1) without an MPI launcher: refused, because the host
//     collectives are MPI's (the GPU backend's NCCL can bootstrap from MASTER_ADDR:MASTER_PORT
//     alone: nccl_communicator.h).
// A plumb built without MPI refuses any launch of more than one process, saying so.
#include <memory>

#include "plumb/dist/communicator.h"
#include "plumb/dist/launch.h"

namespace plumb::dist {

// The launch seen by world() (read once).
const LaunchInfo& launch();
// The world group (made on first call; later calls return the same one).
std::shared_ptr<Communicator> world();
// True when this plumb was built with MPI (its plugin).
bool built_with_mpi();
// When this process is one of several: ends them all (Communicator::abort). Otherwise returns.
void abort_if_parallel(int code);

}  // namespace plumb::dist
