// A hand-made byte-level BPE tokenizer.json for tests: ids 0..255 are the
// bytes (written in GPT-2's byte alphabet), then the merged tokens of
// tiny_merges(), then "<|endoftext|>" (special, id 263), "xyz" (264, in
// the vocabulary but reachable by no merge) and "34" (265, the last merge).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace dscore::testing {

// GPT-2's alphabet, computed here independently of core/tokenizer.
inline std::string tiny_byte_char(int b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  int cp = b;
  if (!printable) {
    int n = 0;
    for (int c = 0; c < b; ++c)
      if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE)) ++n;
    cp = 256 + n;
  }
  std::string out;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return out;
}

inline std::string tiny_json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "\"";
}

// Merges in rank order; the merged tokens get ids 256.. in this order.
inline const std::vector<std::pair<std::string, std::string>>& tiny_merges() {
  static const std::vector<std::pair<std::string, std::string>> m = {
      {"h", "e"},    {"l", "l"},        {"he", "ll"},
      {"hell", "o"}, {"\xC4\xA0", "w"},  // "Ġw": a space then w
      {"a", "a"},    {"aa", "aa"}};
  return m;
}
constexpr int32_t kTinyEndOfText = 263;
constexpr int32_t kTinyXyz = 264;
constexpr int32_t kTiny34 = 265;  // merge "3" "4", the last rank
constexpr int32_t kTinyVocabSize = 266;
constexpr int32_t kTinyHello = 259;
constexpr int32_t kTinySpaceW = 260;
constexpr int32_t kTinyAaaa = 262;

struct TinyTokenizer {
  std::string model_type = "BPE";
  std::string pre_tokenizer =
      R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})";
  std::string normalizer = "null";
  std::string post_processor = R"({"type": "ByteLevel"})";
  std::string decoder = R"({"type": "ByteLevel"})";
  bool ignore_merges = false;
  std::string unk_token = "null";  // JSON: null or a token text such as "\"xyz\""
  bool fuse_unk = false;
  bool merges_as_strings = false;  // "a b" (older files) instead of ["a", "b"]
  std::string extra_added;         // more added_tokens entries, e.g. for a wide vocabulary
  std::string extra_merge;         // one more merges entry (JSON), e.g. a bad one

  std::string json() const {
    std::string vocab;
    for (int b = 0; b < 256; ++b)
      vocab += (b ? ", " : "") + tiny_json_string(tiny_byte_char(b)) + ": " + std::to_string(b);
    int id = 256;
    std::string merges;
    for (const auto& [a, b] : tiny_merges()) {
      vocab += ", " + tiny_json_string(a + b) + ": " + std::to_string(id++);
      merges += std::string(merges.empty() ? "" : ", ") +
                (merges_as_strings ? tiny_json_string(a + " " + b)
                                   : "[" + tiny_json_string(a) + ", " + tiny_json_string(b) + "]");
    }
    vocab += ", \"<|endoftext|>\": 263, \"xyz\": 264, \"34\": 265";
    merges += merges_as_strings ? ", \"3 4\"" : ", [\"3\", \"4\"]";
    if (!extra_merge.empty()) merges += ", " + extra_merge;
    return R"({"version": "1.0", "truncation": null, "padding": null,
  "added_tokens": [{"id": 263, "content": "<|endoftext|>", "single_word": false, "lstrip": false,
                    "rstrip": false, "normalized": false, "special": true})" +
           extra_added + R"(],
  "normalizer": )" +
           normalizer + R"(, "pre_tokenizer": )" + pre_tokenizer + R"(, "post_processor": )" +
           post_processor + R"(, "decoder": )" + decoder + R"(,
  "model": {"type": ")" +
           model_type + R"(", "dropout": null, "unk_token": )" + unk_token +
           R"(, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": )" +
           (fuse_unk ? "true" : "false") + R"(, "byte_fallback": false,
            "ignore_merges": )" +
           (ignore_merges ? "true" : "false") + R"(, "vocab": {)" + vocab + R"(},
            "merges": [)" +
           merges + "]}}";
  }

  void write(const std::string& dir) const {
    std::ofstream(dir + "/tokenizer.json", std::ios::binary) << json();
  }
};

// Llama 3's pre-tokenizer: its Split pattern, then ByteLevel without regex.
inline const char kLlama3PreTokenizer[] = R"({"type": "Sequence", "pretokenizers": [
  {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
   "behavior": "Isolated", "invert": false},
  {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]})";

// A TemplateProcessing that puts <|endoftext|> (263) before the sequence.
inline const char kBosTemplate[] = R"({"type": "TemplateProcessing",
  "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
  "pair": [], "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [263], "tokens": ["<|endoftext|>"]}}})";

}  // namespace dscore::testing
