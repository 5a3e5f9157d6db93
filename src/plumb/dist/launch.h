#pragma once
// Who launched this process and as which rank, from the launcher's environment:
//   mpirun (Open MPI)   OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK
//   PMI (MPICH, Hydra)  PMI_RANK / PMI_SIZE (local rank: MPI_LOCALRANKID)
//   srun (Slurm)        SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID (only when SLURM_STEP_ID is
//                       set: inside a job step, not merely inside an allocation)
//   torchrun-style      RANK / WORLD_SIZE / LOCAL_RANK (+ MASTER_ADDR / MASTER_PORT)
// The first that is present names the launcher; a later one that is also present must agree
// with it (a clear error otherwise). No variables: one process, rank 0 of 1.
#include <functional>
#include <string>

namespace plumb::dist {

struct LaunchInfo {
  std::string launcher = "none";  // none, mpirun, pmi, srun, torchrun
  int rank = 0, size = 1, local_rank = 0;
  std::string master_addr, master_port;  // torchrun-style only
  bool mpi() const { return launcher == "mpirun" || launcher == "pmi" || launcher == "srun"; }
};

using GetEnv = std::function<const char*(const char*)>;
// Reads the environment (getenv by default; tests pass their own); throws plumb::Error for a
// malformed or inconsistent one, naming the variables.
LaunchInfo read_launch(const GetEnv& getenv = {});

}  // namespace plumb::dist
