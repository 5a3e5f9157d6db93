#include "plumb/format/json_util.h"

#include <fmt/format.h>

#include <optional>
#include <set>
#include <vector>

#include "plumb/util/error.h"

namespace plumb {
namespace {

constexpr std::size_t kBriefChars = 80;

std::string truncated(std::string s) {
  if (s.size() > kBriefChars) s = s.substr(0, kBriefChars) + "...";
  return s;
}

// Drops control characters from a message (nlohmann's "last read: '...'" echoes raw input).
std::string one_line(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out += static_cast<char>(c);
  }
  return out;
}

}  // namespace

nlohmann::json parse_json_strict(std::string_view text, const std::string& label) {
  // One key set per open object; objects nest, so keep a stack.
  std::vector<std::set<std::string>> open_objects;
  std::optional<std::string> duplicate;
  auto on_event = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) {
      open_objects.emplace_back();
    } else if (event == E::object_end) {
      open_objects.pop_back();
    } else if (event == E::key && !duplicate && !open_objects.empty()) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second) duplicate = key;
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end(), on_event);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e999
    fail("{}: invalid JSON: {}", label, one_line(e.what()));
  }
  if (duplicate) fail("{}: duplicate key {} in a JSON object", label, quote(*duplicate));
  return j;
}

std::string json_brief(const nlohmann::json& v) {
  auto dump = [](const nlohmann::json& x) {
    return truncated(x.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  };
  if (v.is_primitive()) return dump(v);
  if (v.is_array() && v.size() <= kBriefChars) {
    bool flat = true;
    for (const auto& e : v) flat = flat && e.is_primitive();
    if (flat) return dump(v);
  }
  return std::string("a JSON ") + v.type_name();
}

std::string quote(std::string_view s) { return "'" + one_line(s) + "'"; }

}  // namespace plumb
