#include "plumb/runtime/stop_strings.h"

#include <algorithm>

namespace plumb {

StopStrings::StopStrings(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

StopStrings::Output StopStrings::push(std::string_view text) {
  if (stopped_) return {};
  pending_ += text;
  // The earliest complete stop string wins.
  std::size_t stop_at = std::string::npos;
  for (const std::string& s : stops_) stop_at = std::min(stop_at, pending_.find(s));
  if (stop_at != std::string::npos) {
    stopped_ = true;
    Output out{pending_.substr(0, stop_at), true};
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  std::size_t hold = 0;
  for (const std::string& s : stops_)
    for (std::size_t n = std::min(s.size() - 1, pending_.size()); n > hold; --n)
      if (pending_.compare(pending_.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
  Output out{pending_.substr(0, pending_.size() - hold), false};
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopStrings::finish() {
  std::string rest = stopped_ ? std::string() : std::move(pending_);
  pending_.clear();
  return rest;
}

}  // namespace plumb
