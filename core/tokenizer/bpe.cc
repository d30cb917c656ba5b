// The merge loop of bpe.h over a doubly linked list of symbols.
#include "core/tokenizer/bpe.h"

#include <queue>

#include "core/tokenizer/byte_level.h"

namespace dscore::tokenizer {

Result<Bpe> Bpe::create(std::unordered_map<std::string, int32_t> vocab,
                        const std::vector<std::pair<std::string, std::string>>& merges,
                        Options options, const std::string& where) {
  Bpe bpe;
  bpe.vocab_ = std::move(vocab);
  bpe.options_ = options;
  bpe.where_ = where;
  bpe.merges_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    // Not a structured binding: clang 14 (the fuzz build) cannot capture one.
    const std::string& a = merges[i].first;
    const std::string& b = merges[i].second;
    auto id_of = [&](const std::string& token) -> Result<int32_t> {
      auto it = bpe.vocab_.find(token);
      if (it == bpe.vocab_.end())
        return invalid_argument(where + ": model.merges[" + std::to_string(i) + "] (\"" + a + " " +
                                b + "\") uses \"" + token +
                                "\", which is not in model.vocab; the file is inconsistent");
      return it->second;
    };
    DSCORE_ASSIGN_OR_RETURN(const int32_t left, id_of(a));
    DSCORE_ASSIGN_OR_RETURN(const int32_t right, id_of(b));
    DSCORE_ASSIGN_OR_RETURN(const int32_t merged, id_of(a + b));
    // As Hugging Face's map built from the list: a repeated pair keeps its last rank.
    bpe.merges_[key(left, right)] = Merge{static_cast<int32_t>(i), merged};
  }
  return bpe;
}

Status Bpe::encode_word(std::string_view word, std::vector<int32_t>* out) const {
  if (options_.ignore_merges) {
    auto it = vocab_.find(std::string(word));
    if (it != vocab_.end()) {
      out->push_back(it->second);
      return Status::Ok();
    }
  }
  std::string key_text(word);
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(key_text);
    if (it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return Status::Ok();
    }
  }
  std::vector<int32_t> ids;
  DSCORE_RETURN_IF_ERROR(merge_word(word, &ids));
  out->insert(out->end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() >= kCacheWords) cache_.clear();
  cache_.emplace(std::move(key_text), std::move(ids));
  return Status::Ok();
}

Status Bpe::merge_word(std::string_view word, std::vector<int32_t>* out) const {
  // The word's characters as symbols of a linked list.
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // -1 at the ends
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  std::string ch;
  for (size_t i = 0; i < word.size();) {
    const size_t n = std::min(utf8_length(static_cast<unsigned char>(word[i])), word.size() - i);
    ch.assign(word.substr(i, n));
    i += n;
    auto it = vocab_.find(ch);
    int32_t id;
    if (it != vocab_.end()) {
      id = it->second;
    } else if (options_.unk_id) {
      id = *options_.unk_id;
      if (options_.fuse_unk && !symbols.empty() && symbols.back().id == id) continue;
    } else {
      return invalid_argument(where_ + ": the character \"" + ch + "\" of the word \"" +
                              std::string(word) +
                              "\" is not in model.vocab and the model has no unk_token; "
                              "the tokenizer cannot encode this text");
    }
    const auto pos = static_cast<int32_t>(symbols.size());
    symbols.push_back(Symbol{id, pos - 1, pos + 1, true});
  }
  if (symbols.empty()) return Status::Ok();
  symbols.back().next = -1;

  // Candidate merges: (rank, left position), smallest first. A candidate is
  // stale when its left symbol died or its right neighbour changed; checked
  // on pop by re-deriving the pair.
  struct Candidate {
    int32_t rank, pos, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push_pair = [&](int32_t pos) {
    if (pos < 0) return;
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    auto it = merges_.find(key(symbols[pos].id, symbols[next].id));
    if (it != merges_.end()) heap.push(Candidate{it->second.rank, pos, it->second.id});
  };
  for (int32_t pos = 0; pos + 1 < static_cast<int32_t>(symbols.size()); ++pos) push_pair(pos);

  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    auto it = merges_.find(key(left.id, right.id));
    if (it == merges_.end() || it->second.id != top.merged || it->second.rank != top.rank) continue;
    left.id = top.merged;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    push_pair(left.prev);
    push_pair(top.pos);
  }
  for (int32_t pos = 0; pos >= 0; pos = symbols[pos].next) out->push_back(symbols[pos].id);
  return Status::Ok();
}

}  // namespace dscore::tokenizer
