#pragma once
// A compiled PCRE2 regex (UTF + UCP, JIT when available) for the pre-tokenizer's Split patterns,
// which tokenizer.json writes in Oniguruma syntax (HF tokenizers' engine). The constructs DeepSeek
// uses (\p{..} classes, ranges, alternation, (?!..) look-ahead, greedy quantifiers) mean the same
// in both engines except for two things the translation below fixes: PCRE2's \s also matches
// U+180E while Oniguruma's is the White_Space property, and PCRE2 10.42's Unicode tables are two
// versions older (see unicode_additions.h).
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace plumb {

class Regex {
 public:
  // Throws plumb::Error with PCRE2's message and offset if the pattern does not compile.
  explicit Regex(std::string_view oniguruma_pattern);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Byte ranges [start, end) of the successive non-overlapping, non-empty matches in `subject`,
  // searched left to right as Oniguruma's find_iter does. `subject` must be valid UTF-8.
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view subject) const;

  // Whether the whole of `subject` (valid UTF-8) matches.
  bool matches_entirely(std::string_view subject) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;
  std::string pattern_;
  std::unique_ptr<Compiled> compiled_;
};

// The pattern in PCRE2 syntax: \s / \S become \p{White_Space} / \P{White_Space}, and the
// one-letter general categories \p{L}, \p{M}, \p{N}, \p{P}, \p{S} gain the characters of
// unicode_additions().
std::string translate_oniguruma_pattern(std::string_view pattern);

}  // namespace plumb
