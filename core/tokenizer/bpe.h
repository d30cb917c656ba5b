// Byte-pair encoding of one pre-tokenized word (written by hand: the
// merging rule of Hugging Face tokenizers' BPE model). The word starts as
// its characters' ids; the adjacent pair with the lowest merge rank is
// merged, leftmost first among equals, until no adjacent pair has a merge.
// A min-heap of candidate pairs keeps a word of n characters at O(n log n).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/base/status.h"

namespace dscore::tokenizer {

class Bpe {
 public:
  struct Options {
    std::optional<int32_t> unk_id;  // an unknown character's id; none: an error
    bool fuse_unk = false;          // consecutive unknown characters give one unk
    bool ignore_merges = false;     // a word that is itself in the vocabulary is one token
  };

  // vocab: token text -> id. merges: pairs of token texts, rank = index;
  // each pair's concatenation must be in vocab. `where` names the file for
  // errors ("tokenizer.json").
  static Result<Bpe> create(std::unordered_map<std::string, int32_t> vocab,
                            const std::vector<std::pair<std::string, std::string>>& merges,
                            Options options, const std::string& where);
  Bpe(Bpe&& other) noexcept
      : vocab_(std::move(other.vocab_)),
        merges_(std::move(other.merges_)),
        options_(other.options_),
        where_(std::move(other.where_)),
        cache_(std::move(other.cache_)) {}

  // Appends the ids of `word` to out. INVALID_ARGUMENT for a character that
  // is not in the vocabulary when there is no unk token. Thread-safe (a
  // cache of recent words sits behind a mutex).
  Status encode_word(std::string_view word, std::vector<int32_t>* out) const;

  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t id;  // the merged token
  };
  Bpe() = default;
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  Status merge_word(std::string_view word, std::vector<int32_t>* out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> merge
  Options options_;
  std::string where_;
  // word -> ids; cleared when it reaches kCacheWords.
  static constexpr size_t kCacheWords = 200000;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace dscore::tokenizer
