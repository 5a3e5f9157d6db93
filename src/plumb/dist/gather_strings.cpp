#include "plumb/dist/gather_strings.h"

#include <cstring>

namespace plumb::dist {

std::vector<std::vector<std::string>> all_gather_strings(Communicator& c, std::span<const std::string> mine) {
  // First each rank's string lengths (count first), then the bytes.
  std::vector<int64_t> lengths = {static_cast<int64_t>(mine.size())};
  std::string bytes;
  for (const std::string& s : mine) lengths.push_back(static_cast<int64_t>(s.size())), bytes += s;
  const std::vector<int64_t> one(1, static_cast<int64_t>(lengths.size()));
  const std::vector<int64_t> sizes = c.all_gather(std::span<const int64_t>(one));
  const std::vector<int64_t> all_lengths = c.all_gather(std::span<const int64_t>(lengths), std::span<const int64_t>(sizes));
  std::vector<int64_t> byte_counts;
  std::size_t at = 0;
  for (int64_t n : sizes) {
    int64_t total = 0;
    for (int64_t i = 1; i < n; ++i) total += all_lengths[at + static_cast<std::size_t>(i)];
    byte_counts.push_back(total);
    at += static_cast<std::size_t>(n);
  }
  const std::vector<char> all_bytes = c.all_gather(std::span<const char>(bytes.data(), bytes.size()), std::span<const int64_t>(byte_counts));
  std::vector<std::vector<std::string>> out(sizes.size());
  std::size_t len_at = 0, byte_at = 0;
  for (std::size_t r = 0; r < sizes.size(); ++r) {
    const int64_t count = all_lengths[len_at];
    for (int64_t i = 0; i < count; ++i) {
      const auto len = static_cast<std::size_t>(all_lengths[len_at + 1 + static_cast<std::size_t>(i)]);
      out[r].push_back(len == 0 ? std::string() : std::string(all_bytes.data() + byte_at, len));
      byte_at += len;
    }
    len_at += static_cast<std::size_t>(sizes[r]);
  }
  return out;
}

}  // namespace plumb::dist
