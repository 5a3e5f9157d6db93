// The building blocks: UTF-8 handling (lossy decoding as HF/WHATWG do it, held-back tails for
// streaming), the byte-level alphabet, and the Oniguruma -> PCRE2 pattern translation.
#include <gtest/gtest.h>

#include "plumb/tokenizer/byte_level.h"
#include "plumb/tokenizer/regex.h"
#include "plumb/tokenizer/utf8.h"
#include "plumb/util/error.h"

namespace plumb {
namespace {

const std::string kFFFD = "\xEF\xBF\xBD";

TEST(Utf8, LossyDecodeReplacesEachMaximalIllFormedSubpart) {
  EXPECT_EQ(utf8::decode_lossy("plain é 中 😀"), "plain é 中 😀");
  EXPECT_EQ(utf8::decode_lossy("\xF0\x9F\x98"), kFFFD);                         // truncated 4-byte: one
  EXPECT_EQ(utf8::decode_lossy("a\xF0\x9F\x98z"), "a" + kFFFD + "z");
  EXPECT_EQ(utf8::decode_lossy("\xE0\x80"), kFFFD + kFFFD);                     // overlong: E0 needs A0..BF
  EXPECT_EQ(utf8::decode_lossy("\xED\xA0\x80"), kFFFD + kFFFD + kFFFD);         // surrogate
  EXPECT_EQ(utf8::decode_lossy("\xC0\xAF"), kFFFD + kFFFD);                     // C0 never valid
  EXPECT_EQ(utf8::decode_lossy("\xF4\x90\x80\x80"), kFFFD + kFFFD + kFFFD + kFFFD);  // > U+10FFFF
  EXPECT_EQ(utf8::decode_lossy("\x80\xBF"), kFFFD + kFFFD);                     // stray continuations
  EXPECT_EQ(utf8::decode_lossy("\xFF"), kFFFD);
}

TEST(Utf8, IncompleteTailIsOnlyAValidPrefix) {
  EXPECT_EQ(utf8::incomplete_tail("abc"), 0u);
  EXPECT_EQ(utf8::incomplete_tail("a\xF0"), 1u);
  EXPECT_EQ(utf8::incomplete_tail("a\xF0\x9F"), 2u);
  EXPECT_EQ(utf8::incomplete_tail("a\xF0\x9F\x98"), 3u);
  EXPECT_EQ(utf8::incomplete_tail("a\xF0\x9F\x98\x80"), 0u);  // complete
  EXPECT_EQ(utf8::incomplete_tail("a\xE0\x80"), 0u);          // can never complete
  EXPECT_EQ(utf8::incomplete_tail("\x80"), 0u);
  EXPECT_EQ(utf8::incomplete_tail("\xE4\xB8"), 2u);
}

TEST(Utf8, FirstInvalid) {
  EXPECT_TRUE(utf8::is_valid("ok ✓"));
  EXPECT_EQ(utf8::first_invalid("ab\xFF"), 2u);
  EXPECT_EQ(utf8::first_invalid("ab\xE4\xB8"), 2u);
}

TEST(ByteLevel, Alphabet) {
  EXPECT_EQ(byte_level::token_for_byte(' '), "Ġ");
  EXPECT_EQ(byte_level::token_for_byte('\n'), "Ċ");
  EXPECT_EQ(byte_level::token_for_byte('\t'), "ĉ");
  EXPECT_EQ(byte_level::token_for_byte('!'), "!");
  EXPECT_EQ(byte_level::token_for_byte(0xAD), "Ń");  // soft hyphen is not printable: shifted
  for (int b = 0; b < 256; ++b) EXPECT_EQ(byte_level::byte_for_char(byte_level::char_for_byte(b)), b);
  EXPECT_EQ(byte_level::byte_for_char(U'中'), std::nullopt);
}

TEST(ByteLevel, DecodeTokenFallsBackToRawTextOutsideTheAlphabet) {
  EXPECT_EQ(byte_level::decode_token("Ġhello"), " hello");
  EXPECT_EQ(byte_level::decode_token("ĠçĶŁ"), " \xE7\x94\x9F");  // partial bytes stay raw bytes
  EXPECT_EQ(byte_level::decode_token("<｜User｜>"), "<｜User｜>");
}

TEST(RegexTranslation, WhitespaceBecomesTheWhiteSpaceProperty) {
  EXPECT_EQ(translate_oniguruma_pattern("\\s+(?!\\S)"), "\\p{White_Space}+(?!\\P{White_Space})");
  EXPECT_EQ(translate_oniguruma_pattern("\\\\s"), "\\\\s");  // an escaped backslash, then 's'
  EXPECT_EQ(translate_oniguruma_pattern("[\\s\\r]"), "[\\p{White_Space}\\r]");
}

TEST(RegexTranslation, GeneralCategoriesGainNewerUnicode) {
  std::string outside = translate_oniguruma_pattern("\\p{S}+");
  EXPECT_EQ(outside.rfind("[\\p{S}", 0), 0u);
  EXPECT_NE(outside.find("\\x{1FAE8}"), std::string::npos);  // U+1FAE8 SHAKING FACE, Unicode 15
  EXPECT_EQ(outside.substr(outside.size() - 2), "]+");
  std::string inside = translate_oniguruma_pattern("[^\\r\\p{L}]");
  EXPECT_EQ(inside.rfind("[^\\r\\p{L}\\x{", 0), 0u);
  EXPECT_EQ(translate_oniguruma_pattern("\\p{Han}\\p{Nd}"), "\\p{Han}\\p{Nd}");
  EXPECT_EQ(translate_oniguruma_pattern("[]\\s]"), "[]\\p{White_Space}]");  // leading ']' is literal
  // A POSIX class does not end the bracket: the \p{L} after ']' is outside and gets brackets.
  EXPECT_EQ(translate_oniguruma_pattern("[[:alpha:]\\s]\\p{L}").rfind("[[:alpha:]\\p{White_Space}][\\p{L}\\x{", 0), 0u);
  // Oniguruma-only class syntax would silently mean something else to PCRE2: rejected.
  EXPECT_THROW(translate_oniguruma_pattern("[a-z&&[^aeiou]]"), Error);
  EXPECT_THROW(translate_oniguruma_pattern("[a[bc]]"), Error);
}

TEST(RegexTranslation, MatchesLikeOniguruma) {
  Regex space("\\s+");
  EXPECT_TRUE(space.matches_entirely("\u0085\u00a0\u3000 \t"));
  EXPECT_FALSE(space.matches_entirely("\u180e"));  // Mongolian vowel separator: not White_Space
  EXPECT_FALSE(space.matches_entirely("\ufeff"));
  EXPECT_TRUE(Regex("\\p{S}").matches_entirely("\U0001FAE8"));
  EXPECT_TRUE(Regex("[\\p{L}\\p{M}]+").matches_entirely("\u0897a"));  // U+0897 ARABIC PEPET, Unicode 16
}

TEST(Regex, FindAllSkipsEmptyMatches) {
  auto matches = Regex("a*").find_all("baab");
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_EQ(matches[0], (std::pair<std::size_t, std::size_t>{1, 3}));
}

}  // namespace
}  // namespace plumb
