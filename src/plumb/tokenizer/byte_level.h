#pragma once
// The byte-level alphabet of GPT-2-style BPE: every byte 0..255 is shown as one printable code
// point (printable Latin-1 bytes stand for themselves, the rest are shifted to U+0100..U+0143), so
// vocabulary strings like "Ġthe" mean the bytes " the".
#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace plumb::byte_level {

// The code point that stands for byte `b`.
char32_t char_for_byte(unsigned char b);

// The byte that code point `cp` stands for, or nullopt if `cp` is not in the alphabet.
std::optional<unsigned char> byte_for_char(char32_t cp);

// The UTF-8 text of the one-character token that stands for byte `b` (e.g. "Ġ" for 0x20).
std::string token_for_byte(unsigned char b);

// The bytes a vocabulary string stands for, as HF's ByteLevel decoder computes them: if every
// character is in the alphabet, the mapped bytes; otherwise the string's own UTF-8 bytes (this is
// how added tokens such as "<｜User｜>" decode to themselves).
std::string decode_token(std::string_view token);

}  // namespace plumb::byte_level
