// plumb doctor's checks on facts filled by hand: a healthy machine passes, each pitfall alone
// turns exactly its check into a warning (or error) with a fix, and the JSON report carries it.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>

#include "plumb/doctor/checks.h"
#include "plumb/doctor/report.h"

namespace plumb::doctor {
namespace {

// An H200 machine set up as the checks want it.
Facts healthy() {
  Facts f;
  f.build = {{"plumb_version", "0.1.0"}, {"git_rev", "abc1234"}, {"compiler", "gcc 12.2.0"}, {"cxx_flags", "-O2 -g"}};
  f.gpu.platform = "cuda";
  f.gpu.targets = "80-real,90a-real,80-virtual";
  f.gpu.runtime_version = "13.0";
  f.gpu.driver_version = "13.0";
  backend::GpuDeviceFacts d;
  d.name = "NVIDIA H200";
  d.arch = "sm_90";
  d.memory_total = 150'000'000'000;
  d.memory_free = 149'400'000'000;
  d.clock_mhz = 1980;
  d.memory_clock_mhz = 3201;
  d.multiprocessors = 132;
  d.warp_size = 32;
  d.ecc = 1;
  d.pdl = true;
  f.gpu.devices = {d};
  HostFacts& h = f.host;
  h.max_map_count = 1048576;
  h.cpu_governors = {"performance", "performance"};
  h.thp_enabled = "always [madvise] never";
  h.thp_defrag = "always defer defer+madvise [madvise] never";
  h.open_files = ResourceLimit{1048576, 1048576};
  h.locked_memory = ResourceLimit{ResourceLimit::kUnlimited, ResourceLimit::kUnlimited};
  h.cpus = 2;
  h.memory_total = 8'000'000'000;
  h.memory_available = 6'000'000'000;
  h.kernel = "Linux 6.1.0";
  return f;
}

std::vector<const Finding*> at_least(const std::vector<Finding>& all, Level level) {
  std::vector<const Finding*> out;
  for (const Finding& x : all)
    if (x.level >= level) out.push_back(&x);
  return out;
}

TEST(DoctorChecks, HealthyMachineIsAllOk) {
  const auto findings = run_checks(healthy());
  EXPECT_EQ(exit_code(findings), 0);
  EXPECT_TRUE(at_least(findings, Level::kNote).empty()) << findings_text(findings);
  for (const char* check : {"gpu_runtime", "max_map_count", "cpu_governor", "transparent_hugepages", "open_files", "locked_memory"})
    EXPECT_TRUE(std::any_of(findings.begin(), findings.end(), [&](const Finding& x) { return x.check == check; })) << check;
}

struct Pitfall {
  std::string name;
  std::function<void(Facts&)> apply;
  std::string check;               // the one finding it must raise
  Level level = Level::kWarning;
  std::vector<std::string> detail;  // substrings of its detail (the facts shown)
  std::string fix;                  // substring of its fix
};

std::vector<Pitfall> pitfalls() {
  return {
      {"max_map_count_default", [](Facts& f) { f.host.max_map_count = 65530; }, "max_map_count", Level::kWarning,
       {"65530", "1048576"}, "sysctl -w vm.max_map_count=1048576"},
      {"max_map_count_just_below", [](Facts& f) { f.host.max_map_count = 1048575; }, "max_map_count", Level::kWarning,
       {"1048575"}, "sysctl"},
      {"governor_powersave_on_one_cpu", [](Facts& f) { f.host.cpu_governors = {"performance", "powersave"}; },
       "cpu_governor", Level::kWarning, {"1 on performance", "1 on powersave"}, "cpupower frequency-set -g performance"},
      {"governor_schedutil", [](Facts& f) { f.host.cpu_governors = {"schedutil", "schedutil"}; }, "cpu_governor",
       Level::kWarning, {"2 on schedutil"}, "performance"},
      {"thp_never", [](Facts& f) { f.host.thp_enabled = "always madvise [never]"; }, "transparent_hugepages",
       Level::kWarning, {"enabled=never"}, "echo madvise"},
      {"open_files_1024", [](Facts& f) { f.host.open_files = ResourceLimit{1024, 524288}; }, "open_files",
       Level::kWarning, {"soft limit 1024", "hard 524288"}, "ulimit -n 65536"},
      {"open_files_hard_too_low", [](Facts& f) { f.host.open_files = ResourceLimit{1024, 4095}; }, "open_files",
       Level::kWarning, {"hard 4095"}, "raise the hard limit"},
      {"memlock_8mib", [](Facts& f) { f.host.locked_memory = ResourceLimit{8 << 20, 8 << 20}; }, "locked_memory",
       Level::kWarning, {"8.39 MB"}, "limits.conf"},
      {"memlock_soft_only", [](Facts& f) { f.host.locked_memory = ResourceLimit{65536, ResourceLimit::kUnlimited}; },
       "locked_memory", Level::kWarning, {"65.54 KB", "hard unlimited"}, "ulimit -l unlimited"},
      {"cuda_visible_devices_hides_all", [](Facts& f) { f.host.env["CUDA_VISIBLE_DEVICES"] = "-1"; }, "visible_devices",
       Level::kWarning, {"CUDA_VISIBLE_DEVICES='-1'"}, "unset CUDA_VISIBLE_DEVICES"},
      {"hip_visible_devices_empty", [](Facts& f) { f.host.env["HIP_VISIBLE_DEVICES"] = ""; }, "visible_devices",
       Level::kWarning, {"HIP_VISIBLE_DEVICES=''"}, "unset HIP_VISIBLE_DEVICES"},
      {"visible_devices_set_is_a_note", [](Facts& f) { f.host.env["CUDA_VISIBLE_DEVICES"] = "2,3"; }, "visible_devices",
       Level::kNote, {"CUDA_VISIBLE_DEVICES='2,3'"}, ""},
      {"hsa_override_on_gfx90a_by_kfd",
       [](Facts& f) {
         f.host.env["HSA_OVERRIDE_GFX_VERSION"] = "10.3.0";
         f.host.kfd_gfx_target_versions = {90010, 90010};
       },
       "hsa_override_gfx_version", Level::kWarning, {"HSA_OVERRIDE_GFX_VERSION=10.3.0", "matrix cores"},
       "unset HSA_OVERRIDE_GFX_VERSION"},
      {"hsa_override_on_gfx90a_by_runtime",
       [](Facts& f) {
         f.gpu.platform = "hip";
         f.gpu.targets = "gfx90a";
         f.gpu.devices[0].arch = "gfx90a:sramecc+:xnack-";
         f.host.env["HSA_OVERRIDE_GFX_VERSION"] = "9.0.8";
       },
       "hsa_override_gfx_version", Level::kWarning, {"9.0.8"}, "unset"},
      {"hsa_override_elsewhere_is_a_note", [](Facts& f) { f.host.env["HSA_OVERRIDE_GFX_VERSION"] = "11.0.0"; },
       "hsa_override_gfx_version", Level::kNote, {"11.0.0"}, ""},
      {"launch_blocking", [](Facts& f) { f.host.env["CUDA_LAUNCH_BLOCKING"] = "1"; }, "debug_switches", Level::kWarning,
       {"CUDA_LAUNCH_BLOCKING=1"}, "unset CUDA_LAUNCH_BLOCKING"},
      {"no_device_in_a_gpu_build",
       [](Facts& f) {
         f.gpu.devices.clear();
         f.gpu.error = "the runtime lists no device: no CUDA-capable device is detected (error 100)";
       },
       "gpu_runtime", Level::kWarning, {"error 100", "--backend cuda will refuse"}, "nvidia-smi"},
      {"device_memory_held_by_others", [](Facts& f) { f.gpu.devices[0].memory_free = 100'000'000'000; }, "gpu0_memory",
       Level::kWarning, {"50.00 GB of 150.00 GB already in use"}, "nvidia-smi"},
      {"ecc_off", [](Facts& f) { f.gpu.devices[0].ecc = 0; }, "gpu0_ecc", Level::kNote, {"ECC is off"}, ""},
      {"device_older_than_the_targets", [](Facts& f) { f.gpu.devices[0].arch = "sm_75"; }, "gpu0_targets",
       Level::kError, {"cannot run on sm_75"}, "PLUMB_CUDA_ARCHS"},
      {"hip_build_on_another_arch",
       [](Facts& f) {
         f.gpu.platform = "hip";
         f.gpu.targets = "gfx90a";
         f.gpu.devices[0].arch = "gfx942:sramecc+:xnack-";
       },
       "gpu0_targets", Level::kError, {"cannot run on gfx942"}, "-DPLUMB_HIP_ARCH=gfx942"},
      {"no_cpufreq_is_a_note", [](Facts& f) { f.host.cpu_governors.clear(); }, "cpu_governor", Level::kNote,
       {"no CPU exposes"}, ""},
      {"cpu_only_build_is_a_note",
       [](Facts& f) { f.gpu = {}; }, "gpu_runtime", Level::kNote, {"without a GPU backend"}, ""},
  };
}

class DoctorPitfall : public ::testing::TestWithParam<Pitfall> {};

TEST_P(DoctorPitfall, RaisesItsOwnCheckWithTheFix) {
  const Pitfall& p = GetParam();
  Facts f = healthy();
  p.apply(f);
  const auto findings = run_checks(f);
  const auto raised = at_least(findings, Level::kNote);
  ASSERT_EQ(raised.size(), 1u) << findings_text(findings);
  const Finding& x = *raised[0];
  EXPECT_EQ(x.check, p.check);
  EXPECT_EQ(x.level, p.level) << to_string(x.level);
  for (const std::string& s : p.detail) EXPECT_NE(x.detail.find(s), std::string::npos) << "missing '" << s << "' in: " << x.detail;
  if (p.level >= Level::kWarning) {
    EXPECT_NE(x.fix.find(p.fix), std::string::npos) << x.fix;
  } else {
    EXPECT_TRUE(x.fix.empty()) << x.fix;
  }
  EXPECT_EQ(exit_code(findings), p.level == Level::kError ? 2 : p.level == Level::kWarning ? 1 : 0);
}

INSTANTIATE_TEST_SUITE_P(EachAlone, DoctorPitfall, ::testing::ValuesIn(pitfalls()),
                         [](const auto& info) { return info.param.name; });

TEST(DoctorChecks, SeveralPitfallsTallyAndTheErrorWins) {
  Facts f = healthy();
  f.host.max_map_count = 65530;
  f.host.thp_enabled = "always madvise [never]";
  f.gpu.devices[0].arch = "sm_70";
  const auto findings = run_checks(f);
  const Tally t = tally(findings);
  EXPECT_EQ(t.warnings, 2);
  EXPECT_EQ(t.errors, 1);
  EXPECT_EQ(exit_code(findings), 2);
  EXPECT_NE(findings_text(findings).find("doctor: 2 warning(s), 1 error(s)"), std::string::npos);
}

TEST(DoctorChecks, UnreadableFactsAreNotesNotWarnings) {
  Facts f = healthy();
  f.host.max_map_count.reset();
  f.host.open_files.reset();
  f.host.locked_memory.reset();
  f.host.thp_enabled.clear();
  const auto findings = run_checks(f);
  EXPECT_EQ(exit_code(findings), 0);
  EXPECT_EQ(at_least(findings, Level::kNote).size(), 4u) << findings_text(findings);
}

TEST(DoctorTargets, CudaRealVirtualAndArchSpecific) {
  const std::string t = "80-real,90a-real,80-virtual";
  for (const char* arch : {"sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"}) EXPECT_TRUE(targets_cover("cuda", t, arch)) << arch;
  for (const char* arch : {"sm_75", "sm_70", "sm_61"}) EXPECT_FALSE(targets_cover("cuda", t, arch)) << arch;
  // Without PTX: SASS runs on its own major at an equal or higher minor; 90a only on sm_90.
  EXPECT_TRUE(targets_cover("cuda", "80-real", "sm_86"));
  EXPECT_FALSE(targets_cover("cuda", "86-real", "sm_80"));
  EXPECT_FALSE(targets_cover("cuda", "80-real", "sm_90"));
  EXPECT_TRUE(targets_cover("cuda", "90a-real", "sm_90"));
  EXPECT_FALSE(targets_cover("cuda", "90a-real", "sm_100"));
  EXPECT_FALSE(targets_cover("cuda", "90a-virtual", "sm_100"));
  EXPECT_TRUE(targets_cover("cuda", "", "sm_50"));  // targets not recorded: not judged
}

TEST(DoctorTargets, HipMatchesTheBaseArchitecture) {
  EXPECT_TRUE(targets_cover("hip", "gfx90a", "gfx90a:sramecc+:xnack-"));
  EXPECT_TRUE(targets_cover("hip", "gfx90a;gfx942", "gfx942"));
  EXPECT_FALSE(targets_cover("hip", "gfx90a", "gfx908:sramecc+:xnack-"));
  EXPECT_FALSE(targets_cover("hip", "gfx90a", "gfx90"));
}

TEST(DoctorReport, JsonCarriesFactsChecksAndSummary) {
  Facts f = healthy();
  f.host.open_files = ResourceLimit{1024, ResourceLimit::kUnlimited};
  f.host.env["CUDA_VISIBLE_DEVICES"] = "0";
  const auto findings = run_checks(f);
  const nlohmann::json j = nlohmann::json::parse(report_json(f, findings).dump());
  EXPECT_EQ(j["build"]["git_rev"], "abc1234");
  EXPECT_EQ(j["gpu"]["platform"], "cuda");
  ASSERT_EQ(j["gpu"]["devices"].size(), 1u);
  EXPECT_EQ(j["gpu"]["devices"][0]["memory_free"], 149'400'000'000);
  EXPECT_EQ(j["gpu"]["devices"][0]["ecc"], true);
  EXPECT_EQ(j["host"]["open_files"]["soft"], 1024);
  EXPECT_TRUE(j["host"]["open_files"]["hard"].is_null());  // unlimited
  EXPECT_TRUE(j["host"]["locked_memory"]["soft"].is_null());
  EXPECT_EQ(j["host"]["env"]["CUDA_VISIBLE_DEVICES"], "0");
  EXPECT_EQ(j["summary"]["warnings"], 1);
  EXPECT_EQ(j["summary"]["errors"], 0);
  EXPECT_EQ(j["summary"]["exit_code"], 1);
  int warnings = 0;
  for (const auto& c : j["checks"]) {
    if (c["level"] != "warning") continue;
    ++warnings;
    EXPECT_EQ(c["check"], "open_files");
    EXPECT_NE(c["fix"].get<std::string>().find("ulimit -n"), std::string::npos);
  }
  EXPECT_EQ(warnings, 1);
}

TEST(DoctorReport, TextShowsEachDeviceAndTheEnvironment) {
  Facts f = healthy();
  f.host.env["HIP_VISIBLE_DEVICES"] = "1";
  const std::string t = facts_text(f);
  for (const char* s : {"build     git_rev        abc1234", "cuda backend for 80-real,90a-real,80-virtual; runtime 13.0",
                        "NVIDIA H200 (sm_90, 132 SMs, warp 32), 150.00 GB (149.40 GB free), 1980 MHz, memory 3201 MHz, ECC on, "
                        "programmatic dependent launch",
                        "host      Linux 6.1.0, 2 CPUs", "env       HIP_VISIBLE_DEVICES=1"})
    EXPECT_NE(t.find(s), std::string::npos) << "missing '" << s << "' in:\n" << t;
}

}  // namespace
}  // namespace plumb::doctor
