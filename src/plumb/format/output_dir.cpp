// Atomic output directories, free space checks, side-file copies and interrupt handling.
#include "plumb/format/output_dir.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "plumb/format/safetensors.h"
#include "plumb/util/error.h"
#include "plumb/util/progress.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;

// Slack on top of the computed output size: directory entries, file system metadata, rounding.
constexpr uint64_t kSpaceMarginBytes = 64ull << 20;

std::atomic<int> g_signal{0};

void on_signal(int sig) { g_signal.store(sig); }

// Absolute, symlinks resolved, no trailing separator ("out/" names the directory "out").
fs::path normalized(const fs::path& p) {
  fs::path n = fs::weakly_canonical(fs::absolute(p));
  return n.has_filename() ? n : n.parent_path();
}

bool is_within(const fs::path& inner, const fs::path& outer) {
  auto [o, i] = std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end());
  return o == outer.end();
}

void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open directory: {}", dir.string(), std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) fail("{}: fsync failed: {}", dir.string(), std::strerror(err));
}

// Weight files and the files a conversion rewrites are not copied; neither are hidden entries
// (.git, .cache from downloads), which are not part of a model.
bool is_side_entry(const fs::directory_entry& e) {
  const std::string name = e.path().filename().string();
  if (name.empty() || name[0] == '.') return false;
  if (name == Checkpoint::kIndexName || name == "config.json") return false;
  std::error_code ec;
  return !(e.path().extension() == ".safetensors" && fs::is_regular_file(e.path(), ec));
}

// A run killed outright (SIGKILL, power loss) leaves DST.tmp-<pid> or DST.old-<pid>. Those whose
// process is gone are removed, so they do not hold the disk space this run needs.
void remove_stale_leftovers(const fs::path& dst) {
  const std::string stem = dst.filename().string();
  std::error_code ec;
  for (fs::directory_iterator it(dst.parent_path(), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= stem.size() + 5 || name.compare(0, stem.size(), stem) != 0) continue;
    const std::string tag = name.substr(stem.size(), 5), pid = name.substr(stem.size() + 5);
    if ((tag != ".tmp-" && tag != ".old-") || pid.size() > 10 ||
        pid.find_first_not_of("0123456789") != std::string::npos)
      continue;
    const long long id = std::stoll(pid);
    if (id <= 0 || id > INT_MAX || ::kill(static_cast<pid_t>(id), 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    fs::remove_all(it->path(), rm);
    if (!rm) std::fprintf(stderr, "plumb: removed %s, left by an interrupted run\n", it->path().c_str());
  }
}

}  // namespace

uint64_t free_bytes(const fs::path& dir) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) fail("{}: cannot query free space: {}", dir.string(), std::strerror(errno));
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

AtomicOutputDir::AtomicOutputDir(const fs::path& src, const fs::path& dst, bool force, uint64_t needed_bytes) {
  dst_ = normalized(dst);
  const fs::path src_abs = normalized(src);
  if (dst_ == src_abs || is_within(dst_, src_abs) || is_within(src_abs, dst_))
    fail("{}: the output must not be, contain or lie inside the source {}", dst_.string(), src_abs.string());
  if (!dst_.has_filename() || dst_ == dst_.root_path()) fail("{}: not a usable output directory name", dst.string());
  std::error_code ec;
  if (fs::exists(fs::symlink_status(dst_, ec)) && !force)
    fail("{}: already exists (pass --force to replace it once the conversion is complete)", dst_.string());
  const fs::path parent = dst_.parent_path();
  fs::create_directories(parent, ec);
  if (ec) fail("{}: cannot create: {}", parent.string(), ec.message());
  remove_stale_leftovers(dst_);
  const uint64_t avail = free_bytes(parent);
  if (avail < needed_bytes + kSpaceMarginBytes)
    fail("{}: not enough free disk space: the conversion writes {} and {} is free (with a {} margin)", parent.string(),
         format_bytes(static_cast<double>(needed_bytes)), format_bytes(static_cast<double>(avail)),
         format_bytes(static_cast<double>(kSpaceMarginBytes)));
  tmp_ = dst_;
  tmp_ += ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp_, ec);  // same pid as ours: left by a dead process
  if (!fs::create_directory(tmp_, ec) || ec)
    fail("{}: cannot create: {}", tmp_.string(), ec ? ec.message() : "already exists");
}

AtomicOutputDir::~AtomicOutputDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

void AtomicOutputDir::commit() {
  fsync_dir(tmp_);
  std::error_code ec;
  fs::path old;
  if (fs::exists(fs::symlink_status(dst_, ec))) {  // --force: move the old one aside first
    old = dst_;
    old += ".old-" + std::to_string(::getpid());
    fs::remove_all(old, ec);
    fs::rename(dst_, old, ec);
    if (ec) fail("{}: cannot move the existing output aside to {}: {}", dst_.string(), old.string(), ec.message());
  }
  fs::rename(tmp_, dst_, ec);
  if (ec) {
    const std::string why = ec.message();
    if (!old.empty()) fs::rename(old, dst_, ec);  // put the previous output back
    fail("{}: cannot rename {} into place: {}", dst_.string(), tmp_.string(), why);
  }
  committed_ = true;
  fsync_dir(dst_.parent_path());
  if (!old.empty()) fs::remove_all(old, ec);
}

uint64_t side_files_bytes(const fs::path& src) {
  uint64_t total = 0;
  for (const auto& e : fs::directory_iterator(src)) {
    if (!is_side_entry(e)) continue;
    if (fs::is_directory(e.path())) {
      for (const auto& f : fs::recursive_directory_iterator(e.path()))
        if (fs::is_regular_file(f.path())) total += fs::file_size(f.path());
    } else if (fs::is_regular_file(e.path())) {
      total += fs::file_size(e.path());
    }
  }
  return total;
}

uint64_t copy_side_files(const fs::path& src, const fs::path& dst) {
  for (const auto& e : fs::directory_iterator(src)) {
    if (!is_side_entry(e)) continue;
    std::error_code ec;
    // Symlinks are followed (the Hugging Face cache links every file to a blob).
    fs::copy(e.path(), dst / e.path().filename(), fs::copy_options::recursive, ec);
    if (ec) fail("{}: cannot copy to {}: {}", e.path().string(), dst.string(), ec.message());
  }
  return side_files_bytes(src);
}

InterruptGuard::InterruptGuard() {
  g_signal.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;  // a second Ctrl-C kills at once
  ::sigaction(SIGINT, &sa, &old_int_);
  ::sigaction(SIGTERM, &sa, &old_term_);
}

InterruptGuard::~InterruptGuard() {
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
}

void InterruptGuard::check() {
  if (const int sig = g_signal.load())
    fail("interrupted by signal {} ({}); partial output removed", sig, strsignal(sig));
}

uint64_t peak_rss_bytes() {
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;  // Linux reports kilobytes
}

}  // namespace plumb
