#include "plumb/tokenizer/byte_level.h"

#include "plumb/tokenizer/utf8.h"

namespace plumb::byte_level {
namespace {

bool stands_for_itself(unsigned b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<char32_t, 256> char_of_byte{};
  std::array<int, 0x144> byte_of_char{};  // -1 where the code point is not in the alphabet

  Tables() {
    byte_of_char.fill(-1);
    char32_t next_shifted = 0x100;
    for (unsigned b = 0; b < 256; ++b) {
      char32_t cp = stands_for_itself(b) ? char32_t(b) : next_shifted++;
      char_of_byte[b] = cp;
      byte_of_char[cp] = static_cast<int>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

// Decodes one code point of well-formed UTF-8 at s[i], advancing i; returns U+FFFD on bad input
// (such a character is then simply "not in the alphabet").
char32_t next_code_point(std::string_view s, std::size_t& i) {
  std::size_t n = utf8::sequence_length(s.substr(i));
  if (n == 0) {
    ++i;
    return 0xFFFD;
  }
  auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  char32_t cp = n == 1 ? byte(0) : n == 2 ? (byte(0) & 0x1F) : n == 3 ? (byte(0) & 0x0F) : (byte(0) & 0x07);
  for (std::size_t k = 1; k < n; ++k) cp = (cp << 6) | (byte(k) & 0x3F);
  i += n;
  return cp;
}

}  // namespace

char32_t char_for_byte(unsigned char b) { return tables().char_of_byte[b]; }

std::optional<unsigned char> byte_for_char(char32_t cp) {
  if (cp >= tables().byte_of_char.size()) return std::nullopt;
  int b = tables().byte_of_char[cp];
  if (b < 0) return std::nullopt;
  return static_cast<unsigned char>(b);
}

std::string token_for_byte(unsigned char b) {
  std::string s;
  utf8::append(s, char_for_byte(b));
  return s;
}

std::string decode_token(std::string_view token) {
  std::string bytes;
  std::size_t i = 0;
  while (i < token.size()) {
    auto b = byte_for_char(next_code_point(token, i));
    if (!b) return std::string(token);
    bytes += static_cast<char>(*b);
  }
  return bytes;
}

}  // namespace plumb::byte_level
