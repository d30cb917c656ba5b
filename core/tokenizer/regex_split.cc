// PCRE2 compile (JIT when available) and the match loop of regex_split.h.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "core/tokenizer/regex_split.h"

#include <pcre2.h>

#include "core/tokenizer/byte_level.h"

namespace dscore::tokenizer {

struct RegexSplitter::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

Result<RegexSplitter> RegexSplitter::compile(const std::string& pattern, bool literal,
                                             const std::string& where) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // (PCRE2_LITERAL allows no PCRE2_UCP, which a literal does not need.)
  const uint32_t flags =
      PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   flags, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR text[256];
    pcre2_get_error_message(error, text, sizeof text);
    return invalid_argument(where + ": the pattern \"" + pattern +
                            "\" does not compile (at offset " + std::to_string(offset) + ": " +
                            reinterpret_cast<char*>(text) +
                            "); dscore runs these patterns with PCRE2");
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter on failure
  auto owned = std::make_shared<Code>();
  owned->code = code;
  return RegexSplitter(std::move(owned));
}

std::vector<std::string_view> RegexSplitter::split(std::string_view text, bool keep_matches,
                                                   bool keep_gaps) const {
  std::vector<std::string_view> pieces;
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(code_->code, nullptr);
  DSCORE_CHECK(match != nullptr, "pcre2_match_data_create_from_pattern failed (out of memory)");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t gap_start = 0, at = 0;
  while (at <= text.size()) {
    const int rc = pcre2_match(code_->code, subject, text.size(), at, 0, match, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    DSCORE_CHECK(rc >= 0, "pcre2_match failed with code " + std::to_string(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match);
    const size_t begin = ov[0], end = ov[1];
    if (end == begin) {  // an empty match splits nothing: step over one character
      if (begin >= text.size()) break;
      at = begin + utf8_length(static_cast<unsigned char>(text[begin]));
      continue;
    }
    if (keep_gaps && begin > gap_start) pieces.push_back(text.substr(gap_start, begin - gap_start));
    if (keep_matches) pieces.push_back(text.substr(begin, end - begin));
    gap_start = at = end;
  }
  if (keep_gaps && gap_start < text.size()) pieces.push_back(text.substr(gap_start));
  pcre2_match_data_free(match);
  return pieces;
}

}  // namespace dscore::tokenizer
