#include "plumb/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "plumb/tokenizer/unicode_additions.h"
#include "plumb/util/error.h"

namespace plumb {

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

struct MatchData {
  pcre2_match_data* data;
  explicit MatchData(const pcre2_code* code) : data(pcre2_match_data_create_from_pattern(code, nullptr)) {
    if (!data) throw std::bad_alloc();
  }
  ~MatchData() { pcre2_match_data_free(data); }
};

// Runs one match from `offset`; returns the match range or {npos, npos} when there is none.
std::pair<std::size_t, std::size_t> match_once(const pcre2_code* code, MatchData& md, std::string_view subject,
                                               std::size_t offset, uint32_t options, const std::string& pattern) {
  int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), offset,
                       options | PCRE2_NO_UTF_CHECK, md.data, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return {std::string_view::npos, std::string_view::npos};
  if (rc < 0) fail("regex /{}/ failed on a {}-byte piece: {}", pattern, subject.size(), pcre2_message(rc));
  PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.data);
  return {ov[0], ov[1]};
}

// Length of the UTF-8 character starting with byte `lead` (for stepping past an empty match).
std::size_t char_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

// Appends the PCRE2 form of the escape at pattern[i] ('\\'), returning the index of its last byte.
std::size_t translate_escape(std::string_view pattern, std::size_t i, bool in_class, std::string& out) {
  char kind = pattern[i + 1];
  if (kind == 's' || kind == 'S') {
    out += kind == 's' ? "\\p{White_Space}" : "\\P{White_Space}";
    return i + 1;
  }
  // \p{X} / \P{X} for a one-letter general category: add what PCRE2's Unicode tables lack.
  bool category = (kind == 'p' || kind == 'P') && i + 4 < pattern.size() && pattern[i + 2] == '{' &&
                  pattern[i + 4] == '}' && !unicode_additions(pattern[i + 3]).empty();
  if (!category) {
    out.append(pattern.substr(i, 2));
    return i + 1;
  }
  std::string items = fmt::format("\\p{{{}}}{}", pattern[i + 3], unicode_additions(pattern[i + 3]));
  if (kind == 'p') out += in_class ? items : "[" + items + "]";
  else if (!in_class) out += "[^" + items + "]";
  else fail("regex /{}/: \\P{{{}}} inside a character class is not supported", pattern, pattern[i + 3]);
  return i + 4;
}

}  // namespace

std::string translate_oniguruma_pattern(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      i = translate_escape(pattern, i, in_class, out);
      continue;
    }
    if (in_class && pattern.substr(i, 2) == "[:") {  // a POSIX class such as [:alpha:]: same in both
      std::size_t end = pattern.find(":]", i + 2);
      if (end == std::string_view::npos) fail("regex /{}/: unterminated [: in a character class", pattern);
      out.append(pattern.substr(i, end + 2 - i));
      i = end + 1;
      continue;
    }
    if (in_class && (c == '[' || pattern.substr(i, 2) == "&&"))
      fail("regex /{}/: nested classes and && inside [...] are Oniguruma-only syntax, not supported", pattern);
    out += c;
    if (in_class) {
      in_class = c != ']';
      continue;
    }
    if (c != '[') continue;
    in_class = true;
    // A ']' right after '[' or '[^' is a literal member, not the end of the class.
    if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
    if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
  }
  return out;
}

Regex::Regex(std::string_view oniguruma_pattern) : pattern_(oniguruma_pattern), compiled_(std::make_unique<Compiled>()) {
  std::string translated = translate_oniguruma_pattern(oniguruma_pattern);
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                  PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
  if (!compiled_->code)
    fail("cannot compile regex /{}/ (as PCRE2 /{}/): {} at offset {}", pattern_, translated, pcre2_message(error),
         error_offset);
  // JIT is an optimization only: without it (unsupported CPU) the interpreter gives the same results.
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

std::vector<std::pair<std::size_t, std::size_t>> Regex::find_all(std::string_view subject) const {
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  MatchData md(compiled_->code);
  std::size_t offset = 0;
  while (offset <= subject.size()) {
    auto [start, end] = match_once(compiled_->code, md, subject, offset, 0, pattern_);
    if (start == std::string_view::npos) break;
    if (end == start) {  // an empty match splits nothing: step over one character
      if (start == subject.size()) break;
      offset = start + char_length(static_cast<unsigned char>(subject[start]));
      continue;
    }
    matches.emplace_back(start, end);
    offset = end;
  }
  return matches;
}

bool Regex::matches_entirely(std::string_view subject) const {
  MatchData md(compiled_->code);
  auto [start, end] = match_once(compiled_->code, md, subject, 0, PCRE2_ANCHORED | PCRE2_ENDANCHORED, pattern_);
  return start != std::string_view::npos;
}

}  // namespace plumb
