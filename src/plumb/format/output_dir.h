#pragma once
// Safe output for conversions: the result is built in DST.tmp-<pid> next to DST and renamed into
// place only when complete, so an interrupted or failed run never leaves a directory named DST
// (a partial one keeps the .tmp-<pid> name, or is removed when the failure is an exception or
// SIGINT/SIGTERM; one killed outright is removed by the next run for the same DST). An existing
// DST is replaced only with force, and only after the new one is complete. Free disk space is
// checked before anything is written.
#include <atomic>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <string>

namespace plumb {

class AtomicOutputDir {
 public:
  // Refuses (plumb::Error) when DST exists and !force, when DST and SRC are the same directory or
  // one contains the other, or when the file system lacks `needed_bytes` (plus a small margin).
  AtomicOutputDir(const std::filesystem::path& src, const std::filesystem::path& dst, bool force,
                  uint64_t needed_bytes);
  ~AtomicOutputDir();  // not committed: the temporary directory is removed
  AtomicOutputDir(const AtomicOutputDir&) = delete;
  AtomicOutputDir& operator=(const AtomicOutputDir&) = delete;

  const std::filesystem::path& tmp() const { return tmp_; }  // write everything here
  // fsyncs the temporary directory, then renames it to DST (replacing an old DST under force).
  void commit();

 private:
  std::filesystem::path dst_, tmp_;
  bool committed_ = false;
};

// Free bytes for an unprivileged writer on the file system holding `dir`.
uint64_t free_bytes(const std::filesystem::path& dir);

// Copies what is not a weight file: every entry of `src` except *.safetensors, the index,
// config.json and leftovers of earlier runs (*.tmp*), recursively. Returns the bytes copied.
uint64_t copy_side_files(const std::filesystem::path& src, const std::filesystem::path& dst);
// Bytes that copy_side_files would copy (for the disk space check).
uint64_t side_files_bytes(const std::filesystem::path& src);

// While alive, SIGINT and SIGTERM set a flag instead of killing the process, so a conversion can
// stop between pieces and clean up its temporary output. check() throws plumb::Error once set.
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
  static void check();

 private:
  struct sigaction old_int_ {
  }, old_term_{};
};

// Peak resident set size of this process so far (getrusage), in bytes.
uint64_t peak_rss_bytes();

}  // namespace plumb
