#pragma once
// UTF-8 helpers shared by the tokenizer: encoding code points, measuring complete prefixes for
// streaming, and lossy decoding that replaces ill-formed bytes with U+FFFD exactly like Rust's
// String::from_utf8_lossy and the WHATWG TextDecoder (one U+FFFD per maximal ill-formed subpart),
// so our decode output matches HF tokenizers byte for byte.
#include <cstddef>
#include <string>
#include <string_view>

namespace plumb::utf8 {

// Appends the UTF-8 encoding of `cp` (must be a Unicode scalar value) to `out`.
void append(std::string& out, char32_t cp);

// Length of the well-formed sequence starting at `s[0]`, or 0 if the bytes there are ill-formed
// or truncated. `s` must be non-empty.
std::size_t sequence_length(std::string_view s);

// Length of the maximal ill-formed subpart at `s[0]` (1..3 bytes), assuming sequence_length()
// returned 0 for the full sequence. If the subpart reaches the end of `s`, it may be the start of
// a character that more bytes would complete: see incomplete_tail().
std::size_t ill_formed_length(std::string_view s);

// Number of trailing bytes of `s` that form a proper prefix of a well-formed sequence (0..3): the
// bytes a streaming decoder must hold back until more input arrives.
std::size_t incomplete_tail(std::string_view s);

// `s` with each maximal ill-formed subpart replaced by U+FFFD.
std::string decode_lossy(std::string_view s);

// Byte offset of the first ill-formed or truncated sequence in `s`, or npos if `s` is valid.
std::size_t first_invalid(std::string_view s);

inline bool is_valid(std::string_view s) { return first_invalid(s) == std::string_view::npos; }

}  // namespace plumb::utf8
