#include "plumb/util/progress.h"

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

namespace plumb {

std::string format_bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000.0 && u < 4) {
    b /= 1000.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.2f} {}", b, units[u]);
}

Progress::Progress(std::string label, uint64_t total, bool enabled)
    : label_(std::move(label)), total_(total), enabled_(enabled), tty_(::isatty(STDERR_FILENO) != 0) {
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

Progress::~Progress() {
  if (!finished_) finish();
}

void Progress::advance(uint64_t bytes) {
  done_ += bytes;
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ >= std::chrono::milliseconds(100)) {
    last_draw_ = now;
    draw(false);
  }
}

void Progress::set_items(uint64_t done, uint64_t total, std::string unit) {
  items_done_ = done;
  items_total_ = total;
  items_unit_ = std::move(unit);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (enabled_) draw(true);
}

void Progress::draw(bool final) {
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double rate = secs > 0 ? done_ / secs : 0.0;
  double frac = total_ ? static_cast<double>(done_) / total_ : 1.0;
  int pct = static_cast<int>(frac * 100.0);
  if (!tty_ && !final && pct / 10 == last_pct_logged_ / 10) return;  // log every 10% off a tty
  last_pct_logged_ = pct;
  std::string eta = "--";
  if (rate > 0 && !final) {
    double left = (total_ - done_) / rate;
    eta = fmt::format("{}:{:02d}", static_cast<int>(left) / 60, static_cast<int>(left) % 60);
  }
  constexpr int kWidth = 30;
  int filled = static_cast<int>(frac * kWidth);
  std::string bar = std::string(filled, '#') + std::string(kWidth - filled, '.');
  std::string items;
  if (!items_unit_.empty()) items = fmt::format(" {}/{} {}", items_done_, items_total_, items_unit_);
  const std::string amounts = unit_.empty() ? format_bytes(done_) + " / " + format_bytes(total_)
                                            : fmt::format("{}/{} {}", done_, total_, unit_);
  const std::string speed = unit_.empty() ? format_bytes(rate) + "/s" : fmt::format("{:.1f} {}/s", rate, unit_);
  std::string line = fmt::format("{} [{}] {:3d}% {}{} {} ETA {}", label_, bar, pct, amounts, items, speed,
                                 final ? "0:00" : eta);
  if (tty_)
    std::fprintf(stderr, "\r%s%s", line.c_str(), final ? "\n" : "");
  else
    std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace plumb
