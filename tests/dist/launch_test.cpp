// dist::read_launch: each launcher's variables, precedence, and clear errors for bad ones.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "plumb/dist/launch.h"
#include "plumb/util/error.h"

namespace plumb::dist {
namespace {

LaunchInfo launch_with(const std::map<std::string, std::string>& vars) {
  return read_launch([&](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    launch_with(vars);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Launch, NoVariablesIsOneProcess) {
  const LaunchInfo li = launch_with({});
  EXPECT_EQ(li.launcher, "none");
  EXPECT_EQ(li.rank, 0);
  EXPECT_EQ(li.size, 1);
  EXPECT_FALSE(li.mpi());
}

TEST(Launch, EachLauncher) {
  LaunchInfo li = launch_with({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
  EXPECT_EQ(li.launcher, "mpirun");
  EXPECT_EQ(li.rank, 1);
  EXPECT_EQ(li.size, 4);
  EXPECT_EQ(li.local_rank, 1);
  EXPECT_TRUE(li.mpi());

  li = launch_with({{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}});
  EXPECT_EQ(li.launcher, "pmi");
  EXPECT_EQ(li.rank, 2);

  li = launch_with({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "3"}, {"SLURM_STEP_ID", "0"}});
  EXPECT_EQ(li.launcher, "srun");
  EXPECT_EQ(li.size, 8);
  EXPECT_EQ(li.local_rank, 3);

  li = launch_with({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}});
  EXPECT_EQ(li.launcher, "torchrun");
  EXPECT_FALSE(li.mpi());
  EXPECT_EQ(li.master_addr, "10.0.0.1");
  EXPECT_EQ(li.master_port, "29500");
}

TEST(Launch, SlurmAllocationWithoutAStepIsNotALaunch) {
  // sbatch sets SLURM_PROCID / SLURM_NTASKS for the batch script itself: one process.
  const LaunchInfo li = launch_with({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}});
  EXPECT_EQ(li.launcher, "none");
  EXPECT_EQ(li.size, 1);
}

TEST(Launch, MpirunTakesPrecedenceAndMustAgreeWithTorchrunVariables) {
  EXPECT_EQ(launch_with({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"RANK", "1"}, {"WORLD_SIZE", "2"}})
                .launcher,
            "mpirun");
  EXPECT_NE(error_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"RANK", "0"}, {"WORLD_SIZE", "2"}})
                .find("mpirun says rank 1 of 2, torchrun says rank 0 of 2"),
            std::string::npos);
}

TEST(Launch, BadVariablesAreClearErrors) {
  EXPECT_NE(error_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}).find("RANK='x' is not an integer >= 0"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}).find("RANK=2 is not below WORLD_SIZE=2"), std::string::npos);
  EXPECT_NE(error_of({{"WORLD_SIZE", "0"}, {"RANK", "0"}}).find("WORLD_SIZE='0' is not an integer >= 1"), std::string::npos);
  EXPECT_NE(error_of({{"PMI_RANK", "0"}}).find("PMI_RANK is set without PMI_SIZE"), std::string::npos);
}

}  // namespace
}  // namespace plumb::dist
