// The host fact readers on a fake /proc and /sys tree, and on this machine's.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "plumb/util/host_facts.h"
#include "scoped_env.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;

class FakeHost {
 public:
  FakeHost() : root_(fs::temp_directory_path() / ("plumb-host-facts-" + std::to_string(::getpid()))) {
    fs::remove_all(root_);
  }
  ~FakeHost() { fs::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) const {
    const fs::path p = root_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  HostPaths paths() const { return {(root_ / "proc").string(), (root_ / "sys").string()}; }

 private:
  fs::path root_;
};

using test::ScopedEnv;

TEST(HostFacts, ReadsTheKernelSettingsOfAFakeTree) {
  FakeHost h;
  h.write("proc/sys/vm/max_map_count", "65530\n");
  h.write("sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "powersave\n");
  h.write("sys/devices/system/cpu/cpu10/cpufreq/scaling_governor", "schedutil\n");
  h.write("sys/devices/system/cpu/cpu1/cpufreq/scaling_governor", "performance\n");
  h.write("sys/devices/system/cpu/cpufreq/policy0/scaling_governor", "ignored\n");  // not a cpuN entry
  h.write("sys/devices/system/cpu/cpu2/online", "1\n");                              // no cpufreq: skipped
  h.write("sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n");
  h.write("sys/kernel/mm/transparent_hugepage/defrag", "always defer [defer+madvise] madvise never\n");
  h.write("sys/class/kfd/kfd/topology/nodes/0/properties", "cpu_cores_count 64\nsimd_count 0\ngfx_target_version 0\n");
  h.write("sys/class/kfd/kfd/topology/nodes/1/properties", "simd_count 440\ngfx_target_version 90010\nvendor_id 4098\n");
  h.write("sys/class/kfd/kfd/topology/nodes/2/properties", "gfx_target_version 90010\n");
  h.write("proc/meminfo", "MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    500 kB\n");
  const ScopedEnv hsa("HSA_OVERRIDE_GFX_VERSION", "10.3.0");
  const HostFacts f = read_host_facts(h.paths());
  ASSERT_TRUE(f.max_map_count);
  EXPECT_EQ(*f.max_map_count, 65530);
  EXPECT_EQ(f.cpu_governors, (std::vector<std::string>{"powersave", "performance", "schedutil"}));  // cpu0, cpu1, cpu10
  EXPECT_EQ(f.thp_enabled, "always [madvise] never");
  EXPECT_EQ(selected_choice(f.thp_enabled), "madvise");
  EXPECT_EQ(selected_choice(f.thp_defrag), "defer+madvise");
  EXPECT_EQ(f.kfd_gfx_target_versions, (std::vector<std::int64_t>{90010, 90010}));
  EXPECT_EQ(f.memory_total, 1024000);
  EXPECT_EQ(f.memory_available, 512000);
  EXPECT_EQ(f.env.at("HSA_OVERRIDE_GFX_VERSION"), "10.3.0");
}

TEST(HostFacts, AMissingTreeLeavesEverythingUnknown) {
  FakeHost h;  // nothing written
  const HostFacts f = read_host_facts(h.paths());
  EXPECT_FALSE(f.max_map_count);
  EXPECT_TRUE(f.cpu_governors.empty());
  EXPECT_TRUE(f.thp_enabled.empty());
  EXPECT_TRUE(f.kfd_gfx_target_versions.empty());
  EXPECT_EQ(f.memory_total, -1);
  EXPECT_EQ(resident_set_bytes(h.paths()), -1);
}

TEST(HostFacts, GarbageValuesAreUnknownNotZero) {
  FakeHost h;
  h.write("proc/sys/vm/max_map_count", "lots\n");
  h.write("proc/self/statm", "x y\n");
  EXPECT_FALSE(read_host_facts(h.paths()).max_map_count);
  EXPECT_EQ(resident_set_bytes(h.paths()), -1);
}

TEST(HostFacts, ResidentSetFromStatmPages) {
  FakeHost h;
  h.write("proc/self/statm", "1000 25 10 1 0 50 0\n");
  EXPECT_EQ(resident_set_bytes(h.paths()), 25 * sysconf(_SC_PAGESIZE));
}

TEST(HostFacts, ThisMachine) {
  const HostFacts f = read_host_facts();
  EXPECT_GT(f.cpus, 0);
  EXPECT_GT(f.memory_total, 0);
  EXPECT_GT(resident_set_bytes(), 1 << 20);  // this test binary holds more than a MiB
  ASSERT_TRUE(f.open_files);
  rlimit r{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &r), 0);
  EXPECT_EQ(f.open_files->soft, r.rlim_cur == RLIM_INFINITY ? ResourceLimit::kUnlimited : static_cast<std::int64_t>(r.rlim_cur));
  EXPECT_TRUE(f.locked_memory);
  EXPECT_FALSE(f.kernel.empty());
}

TEST(HostFacts, SelectedChoiceWithoutBrackets) {
  EXPECT_EQ(selected_choice("never"), "never");
  EXPECT_EQ(selected_choice("  always \n"), "always");
  EXPECT_EQ(selected_choice("a ]b[ c"), "a ]b[ c");
}

}  // namespace
}  // namespace plumb
