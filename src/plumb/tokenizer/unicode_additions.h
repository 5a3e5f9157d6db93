#pragma once
// PCRE2 10.42 (Debian 12) knows Unicode 14; HF tokenizers' Oniguruma knows Unicode 16. Characters
// assigned since (e.g. the emoji U+1FAE8, the Kawi and Garay scripts) would otherwise fall outside
// \p{S}, \p{L}, ... and split differently, so the regex translation adds them explicitly.
#include <string_view>

namespace plumb {

// PCRE2 character-class items ("\x{1FAE8}-\x{1FAEF}...") for the characters Oniguruma puts in
// general category `category` (one of 'L', 'M', 'N', 'P', 'S') that PCRE2 does not; "" otherwise.
std::string_view unicode_additions(char category);

}  // namespace plumb
