#pragma once
// Stop strings for streamed generation: text is fed as it is decoded, and any suffix that could
// still grow into a stop string is held back, so the stop string itself is never printed, even
// when it arrives split over several tokens.
#include <string>
#include <string_view>
#include <vector>

namespace plumb {

class StopStrings {
 public:
  explicit StopStrings(std::vector<std::string> stops);

  struct Output {
    std::string text;      // safe to print now
    bool stopped = false;  // a stop string was completed; `text` ends just before it
  };

  // Feeds newly decoded text (valid UTF-8). After a stop, further input is ignored.
  Output push(std::string_view text);
  // End of generation without a stop: the held-back text.
  std::string finish();

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace plumb
