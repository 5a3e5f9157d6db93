#include "plumb/tokenizer/token_index.h"

#include <bit>
#include <functional>

namespace plumb {

std::uint32_t TokenIndex::hash_of(std::string_view s) {
  return static_cast<std::uint32_t>(std::hash<std::string_view>{}(s));
}

void TokenIndex::build(const std::vector<std::string>& tokens, const std::vector<bool>& present) {
  slots_.assign(std::bit_ceil(2 * tokens.size() + 2), Slot{});
  const std::size_t mask = slots_.size() - 1;
  for (std::uint32_t id = 0; id < tokens.size(); ++id) {
    if (!present[id]) continue;
    std::uint32_t h = hash_of(tokens[id]);
    std::size_t i = h & mask;
    while (slots_[i].id_plus_one != 0 && tokens[slots_[i].id_plus_one - 1] != tokens[id]) i = (i + 1) & mask;
    slots_[i] = {h, id + 1};
  }
}

std::optional<std::uint32_t> TokenIndex::find(std::string_view token, const std::vector<std::string>& tokens) const {
  if (slots_.empty()) return std::nullopt;
  const std::size_t mask = slots_.size() - 1;
  std::uint32_t h = hash_of(token);
  for (std::size_t i = h & mask; slots_[i].id_plus_one != 0; i = (i + 1) & mask) {
    const Slot& slot = slots_[i];
    if (slot.hash == h && tokens[slot.id_plus_one - 1] == token) return slot.id_plus_one - 1;
  }
  return std::nullopt;
}

}  // namespace plumb
