// A pre-tokenizer's pattern, compiled with PCRE2 (the only place PCRE2 is
// used): UTF-8 with Unicode properties (\p{L}, \p{N}, \s as Unicode
// whitespace) and lookarounds, as the Oniguruma patterns of Hugging Face
// tokenizer.json files need. Invalid UTF-8 in the text never matches: it
// falls in the gaps between matches.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace dscore::tokenizer {

class RegexSplitter {
 public:
  // literal: match `pattern` as plain text. `where` names the source of the
  // pattern for errors ("tokenizer.json: pre_tokenizer.pattern.Regex").
  static Result<RegexSplitter> compile(const std::string& pattern, bool literal,
                                       const std::string& where);

  // The pieces of `text` in order: the matches (when keep_matches) and the
  // non-empty runs of text between them (when keep_gaps). Both is Hugging
  // Face's Split behaviour "Isolated"; gaps only is "Removed". Thread-safe.
  std::vector<std::string_view> split(std::string_view text, bool keep_matches,
                                      bool keep_gaps) const;

 private:
  struct Code;
  explicit RegexSplitter(std::shared_ptr<const Code> code) : code_(std::move(code)) {}
  std::shared_ptr<const Code> code_;
};

}  // namespace dscore::tokenizer
