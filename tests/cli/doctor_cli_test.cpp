// `plumb doctor` through the binary: the JSON it prints parses and agrees with its exit code, the
// environment it is given shows up in its checks, --model adds inspect --scan's summary.
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "cli_test_util.h"

namespace plumb::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kKjv = fs::path(PLUMB_SOURCE_DIR) / "models" / "tiny-kjv";

// Runs plumb with `name`=`value` in its environment (unset again afterwards).
CliResult plumb_with_env(const std::string& args, const TempDir& tmp, const char* name, const char* value) {
  ::setenv(name, value, 1);
  CliResult r = plumb(args, tmp.path());
  ::unsetenv(name);
  return r;
}

const json* find_check(const json& j, const std::string& check, const std::string& level) {
  for (const json& c : j["checks"])
    if (c["check"] == check && c["level"] == level) return &c;
  return nullptr;
}

TEST(DoctorCli, JsonParsesAndMatchesTheExitCode) {
  TempDir tmp;
  const CliResult r = plumb("doctor --json", tmp.path());
  ASSERT_TRUE(r.status == 0 || r.status == 1 || r.status == 2) << r.status << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["summary"]["exit_code"], r.status);
  const int errors = j["summary"]["errors"], warnings = j["summary"]["warnings"];
  EXPECT_EQ(r.status, errors > 0 ? 2 : warnings > 0 ? 1 : 0);
  for (const char* k : {"plumb_version", "git_rev", "build_type", "compiler", "cxx_flags"})
    EXPECT_TRUE(j["build"].contains(k)) << k;
  EXPECT_GT(j["host"]["cpus"].get<int>(), 0);
  EXPECT_GT(j["host"]["memory_total"].get<std::int64_t>(), 0);
  for (const char* check : {"gpu_runtime", "max_map_count", "cpu_governor", "transparent_hugepages", "open_files", "locked_memory"}) {
    bool found = false;
    for (const json& c : j["checks"]) found |= c["check"] == check;
    EXPECT_TRUE(found) << check;
  }
  for (const json& c : j["checks"]) {
    if (c["level"] == "warning" || c["level"] == "error") {
      EXPECT_FALSE(c["fix"].get<std::string>().empty()) << c.dump();
    }
  }
}

TEST(DoctorCli, TextEndsWithTheTally) {
  TempDir tmp;
  const CliResult r = plumb("doctor", tmp.path());
  EXPECT_NE(r.out.find("build     git_rev"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("host      "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("doctor: "), std::string::npos) << r.out;
  EXPECT_EQ(r.status, plumb("doctor --json", tmp.path()).status);
}

TEST(DoctorCli, AVisibleDevicesVariableThatHidesEveryGpuWarns) {
  TempDir tmp;
  const CliResult r = plumb_with_env("doctor --json", tmp, "CUDA_VISIBLE_DEVICES", "-1");
  const json j = json::parse(r.out);
  EXPECT_EQ(j["host"]["env"]["CUDA_VISIBLE_DEVICES"], "-1");
  const json* c = find_check(j, "visible_devices", "warning");
  ASSERT_TRUE(c) << j["checks"].dump(2);
  EXPECT_NE((*c)["fix"].get<std::string>().find("unset CUDA_VISIBLE_DEVICES"), std::string::npos);
  EXPECT_GE(r.status, 1);
}

TEST(DoctorCli, LaunchBlockingWarnsInText) {
  TempDir tmp;
  const CliResult r = plumb_with_env("doctor", tmp, "CUDA_LAUNCH_BLOCKING", "1");
  EXPECT_NE(r.out.find("warning  CUDA_LAUNCH_BLOCKING=1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fix: unset CUDA_LAUNCH_BLOCKING"), std::string::npos) << r.out;
  EXPECT_GE(r.status, 1);
}

TEST(DoctorCli, ModelAddsTheInspectScanSummary) {
  TempDir tmp;
  const CliResult r = plumb("doctor --json --model " + kKjv.string(), tmp.path());
  const json j = json::parse(r.out);
  const json inspect = json::parse(plumb("inspect --scan --json " + kKjv.string(), tmp.path()).out);
  EXPECT_EQ(j["model"], inspect);  // the same summary and scan, not a second rendering
  EXPECT_TRUE(find_check(j, "model", "ok")) << j["checks"].dump(2);
  EXPECT_NE(r.status, 2) << r.out;  // the model is sound; only the machine's warnings may remain

  const CliResult text = plumb("doctor --model " + kKjv.string(), tmp.path());
  EXPECT_NE(text.out.find("no NaN/Inf, all scales in range"), std::string::npos) << text.out;
}

TEST(DoctorCli, AMissingModelIsAnError) {
  TempDir tmp;
  const CliResult r = plumb("doctor --json --model " + (tmp.path() / "nowhere").string(), tmp.path());
  EXPECT_EQ(r.status, 2) << r.out << r.err;
  const json j = json::parse(r.out);
  const json* c = find_check(j, "model", "error");
  ASSERT_TRUE(c) << j["checks"].dump(2);
  EXPECT_NE((*c)["detail"].get<std::string>().find("nowhere"), std::string::npos) << c->dump();
  EXPECT_TRUE(j["model"].is_null());
}

}  // namespace
}  // namespace plumb::test
