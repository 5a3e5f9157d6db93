#pragma once
// plumb doctor's judgement: from the facts about the build, the GPU runtime and the host (read
// elsewhere, so a test fills them by hand) to findings, each with what was seen and the fix.
// Exit code: 0 when nothing is worse than a note, 1 with warnings, 2 with errors.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "plumb/backend/device_facts.h"
#include "plumb/util/host_facts.h"

namespace plumb::doctor {

struct Facts {
  std::vector<std::pair<std::string, std::string>> build;  // version, git_rev, compiler, flags, ...
  backend::GpuFacts gpu;
  HostFacts host;
};

// kNote: worth knowing, nothing to fix (does not change the exit code).
enum class Level { kOk, kNote, kWarning, kError };
const char* to_string(Level level);  // "ok", "note", "warning", "error"

struct Finding {
  std::string check;  // stable id: "max_map_count", "cpu_governor", ...
  Level level = Level::kOk;
  std::string detail;  // what was seen
  std::string fix;     // empty unless level is kWarning or kError
};

// The limits the checks hold the facts to (and the reasons, in checks.cpp).
inline constexpr std::int64_t kMinMaxMapCount = 1048576;
inline constexpr std::int64_t kMinOpenFiles = 4096;
inline constexpr std::int64_t kMinLockedMemory = 64ll << 20;
// Device memory held by others before plumb starts that is worth a warning: this much or a
// tenth of the device, whichever is more (a runtime context alone takes a few hundred MiB).
inline constexpr std::int64_t kForeignDeviceMemory = 2ll << 30;

std::vector<Finding> run_checks(const Facts& facts);

// Whether kernels built for `targets` (the build's list: "80-real,90a-real,80-virtual" for CUDA,
// "gfx90a" for HIP) can run on a device of architecture `arch` ("sm_90", "gfx90a:sramecc+:xnack-").
bool targets_cover(const std::string& platform, const std::string& targets, const std::string& arch);

struct Tally {
  int warnings = 0, errors = 0;
};
Tally tally(const std::vector<Finding>& findings);
int exit_code(const std::vector<Finding>& findings);  // 2 with errors, else 1 with warnings, else 0

}  // namespace plumb::doctor
