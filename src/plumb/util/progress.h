#pragma once
// A terminal progress bar for long byte-oriented work (scans, conversions): done/total bytes,
// rate, ETA. Redraws at most ~10 times a second on stderr; prints plain lines when stderr is not
// a terminal, so logs stay readable.
#include <chrono>
#include <cstdint>
#include <string>

namespace plumb {

class Progress {
 public:
  Progress(std::string label, uint64_t total_bytes, bool enabled = true);
  ~Progress();
  void advance(uint64_t bytes);  // add done bytes
  // Optional second counter shown after the bytes ("12/345 tensors"); drawn on the next update.
  void set_items(uint64_t done, uint64_t total, std::string unit);
  void finish();                 // final line with totals
  // Counts whole things ("tokens") instead of bytes: amounts and the rate are drawn as
  // "120/3000 tokens", "45.0 tokens/s".
  void count_in(std::string unit) { unit_ = std::move(unit); }

 private:
  void draw(bool final);
  std::string label_;
  uint64_t total_ = 0, done_ = 0;
  uint64_t items_done_ = 0, items_total_ = 0;
  std::string items_unit_;
  std::string unit_;  // empty: bytes
  bool enabled_, tty_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
  int last_pct_logged_ = -1;
};

std::string format_bytes(double bytes);  // "1.23 GB"

}  // namespace plumb
