#include "plumb/tokenizer/utf8.h"

#include <cstdint>

namespace plumb::utf8 {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Valid range of the second byte for a given lead byte (Unicode Table 3-7); the later
// continuation bytes are always 0x80..0xBF.
struct LeadInfo {
  std::size_t length;  // 0 for bytes that cannot start a sequence
  std::uint8_t second_lo, second_hi;
};

LeadInfo lead_info(std::uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};  // excludes surrogates
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};  // up to U+10FFFF
  return {0, 0, 0};
}

// How many bytes at the start of `s` (at most the lead's length) are a valid prefix.
std::size_t valid_prefix(std::string_view s, const LeadInfo& info) {
  std::size_t n = 1;
  for (; n < info.length && n < s.size(); ++n) {
    auto b = static_cast<std::uint8_t>(s[n]);
    bool ok = n == 1 ? (b >= info.second_lo && b <= info.second_hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
  }
  return n;
}

}  // namespace

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::size_t sequence_length(std::string_view s) {
  LeadInfo info = lead_info(static_cast<std::uint8_t>(s[0]));
  if (info.length == 0 || s.size() < info.length) return 0;
  return valid_prefix(s, info) == info.length ? info.length : 0;
}

std::size_t ill_formed_length(std::string_view s) {
  LeadInfo info = lead_info(static_cast<std::uint8_t>(s[0]));
  if (info.length == 0) return 1;
  return valid_prefix(s, info);
}

std::size_t incomplete_tail(std::string_view s) {
  // A truncated sequence has at most 3 bytes: look for its lead among the last 3.
  for (std::size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    std::string_view tail = s.substr(s.size() - back);
    LeadInfo info = lead_info(static_cast<std::uint8_t>(tail[0]));
    if (info.length == 0) continue;  // continuation byte: keep looking for the lead
    bool truncated = info.length > back && valid_prefix(tail, info) == back;
    return truncated ? back : 0;
  }
  return 0;
}

std::string decode_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    std::string_view rest = s.substr(i);
    if (std::size_t n = sequence_length(rest)) {
      out.append(rest.substr(0, n));
      i += n;
    } else {
      out.append(kReplacement);
      i += ill_formed_length(rest);
    }
  }
  return out;
}

std::size_t first_invalid(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {  // fast path for ASCII
      ++i;
      continue;
    }
    std::size_t n = sequence_length(s.substr(i));
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

}  // namespace plumb::utf8
