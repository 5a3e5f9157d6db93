#include "plumb/format/json_util.h"

#include <fmt/format.h>

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

// Escapes control characters in a message (nlohmann's "last read: '...'" echoes raw input).
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

// A SAX pass that only tracks object keys, one set per open object. (nlohmann's callback parser
// would do this in one pass, but it rescans the parent object after every nested object: quadratic,
// minutes on a 70k-tensor header.) Syntax errors are reported here too, with nlohmann's position
// and the field whose value was being read.
class DuplicateKeyCheck : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit DuplicateKeyCheck(const std::string& label) : label_(label) {}
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    open_objects_.emplace_back();
    return true;
  }
  bool key(string_t& k) override {
    if (!open_objects_.back().keys.insert(k).second) fail("{}: duplicate key {} in a JSON object", label_, quote(k));
    open_objects_.back().current = k;
    return true;
  }
  bool end_object() override {
    open_objects_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  // Called for syntax errors and for numbers out of range (1e999); names the field being read.
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    const std::string field = field_path();
    if (field.empty()) fail("{}: invalid JSON: {}", label_, one_line(e.what()));
    fail("{}: invalid JSON: field {}: {}", label_, quote(field), one_line(e.what()));
  }

 private:
  const std::string& label_;
  // The dotted keys of the open objects, as far as they are known ("rope_scaling.factor").
  std::string field_path() const {
    std::string path;
    for (const OpenObject& o : open_objects_) {
      if (o.current.empty()) break;
      path += (path.empty() ? "" : ".") + o.current;
    }
    return path;
  }

  struct OpenObject {
    std::set<std::string> keys;
    std::string current;  // the key whose value is being read
  };
  std::vector<OpenObject> open_objects_;
};

}  // namespace

nlohmann::json parse_json_strict(std::string_view text, const std::string& label) {
  DuplicateKeyCheck check(label);
  nlohmann::json::sax_parse(text.begin(), text.end(), &check);
  return nlohmann::json::parse(text.begin(), text.end());  // known valid now
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
