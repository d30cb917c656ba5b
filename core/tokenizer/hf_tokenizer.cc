// tokenizer.json -> an encoder: added-token split, pre-tokenizer steps, BPE
// per word, template; and the reverse through the ByteLevel decoder.
#include "core/tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "core/tokenizer/bpe.h"
#include "core/tokenizer/byte_level.h"
#include "core/tokenizer/regex_split.h"

namespace dscore::tokenizer {
namespace {

// GPT-2's pre-tokenizer pattern, which ByteLevel with use_regex applies.
const char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Field access with errors that name the file and the field.
class Fields {
 public:
  explicit Fields(std::string path) : path_(std::move(path)) {}
  const std::string& path() const { return path_; }

  Status error(const std::string& field, const std::string& what) const {
    return invalid_argument(path_ + ": " + field + " " + what);
  }
  Status unsupported(const std::string& field, const std::string& kind,
                     const std::string& supported) const {
    return unimplemented(path_ + ": " + field + " \"" + kind +
                         "\" is not supported by dscore's tokenizer (it reads " + supported +
                         "); use a byte-level BPE tokenizer.json (GPT-2, Llama 3) or a "
                         "SentencePiece tokenizer.model");
  }
  Result<std::string> type_of(const json::Value& v, const std::string& field) const {
    const json::Value* t = v.is_object() ? v.find("type") : nullptr;
    if (t == nullptr || !t->is_string()) return error(field, "has no \"type\" string");
    return t->as_string();
  }
  Result<bool> flag(const json::Value& v, const std::string& field, const char* key,
                    bool fallback) const {
    const json::Value* f = v.find(key);
    if (f == nullptr || f->is_null()) return fallback;
    if (!f->is_bool()) return error(field + "." + key, "must be true or false");
    return f->as_bool();
  }

 private:
  std::string path_;
};

struct AddedToken {
  std::string content;
  int32_t id;
  bool special;
};

// One pre-tokenizer step: ByteLevel or Split.
struct PreTokenStep {
  bool byte_level = false;
  bool add_prefix_space = false;            // ByteLevel
  std::shared_ptr<RegexSplitter> splitter;  // ByteLevel with use_regex, or Split
  bool keep_matches = true;                 // Split behaviour
};

class HfTokenizer final : public Tokenizer {
 public:
  HfTokenizer(Bpe bpe, std::vector<AddedToken> added, std::vector<PreTokenStep> steps,
              std::vector<int32_t> prefix, std::vector<int32_t> suffix, bool byte_level_decoder)
      : bpe_(std::move(bpe)),
        added_(std::move(added)),
        steps_(std::move(steps)),
        prefix_(std::move(prefix)),
        suffix_(std::move(suffix)),
        byte_level_decoder_(byte_level_decoder) {
    int64_t largest = -1;
    for (const auto& [text, id] : bpe_.vocab()) {
      largest = std::max<int64_t>(largest, id);
      id_to_token_.emplace(id, text);
    }
    for (const AddedToken& t : added_) {
      largest = std::max<int64_t>(largest, t.id);
      added_by_id_[t.id] = &t - added_.data();
      added_by_text_.emplace(t.content, t.id);
      if (!t.content.empty())
        by_first_byte_[static_cast<unsigned char>(t.content[0])].push_back(&t - added_.data());
    }
    // Longest first: leftmost-longest matching, as Hugging Face's.
    for (auto& list : by_first_byte_)
      std::sort(list.begin(), list.end(), [&](size_t a, size_t b) {
        return added_[a].content.size() > added_[b].content.size();
      });
    vocab_size_ = largest + 1;
  }

  void set(SpecialTokens special, std::string description) {
    special_ = special;
    description_ = std::move(description);
  }

  Result<std::vector<int32_t>> encode(std::string_view text,
                                      bool add_special_tokens) const override {
    std::vector<int32_t> ids;
    if (add_special_tokens) ids = prefix_;
    size_t start = 0;  // of the text not yet encoded
    for (size_t i = 0; i < text.size();) {
      const AddedToken* hit = added_at(text, i);
      if (hit == nullptr) {
        ++i;
        continue;
      }
      DSCORE_RETURN_IF_ERROR(encode_plain(text.substr(start, i - start), &ids));
      ids.push_back(hit->id);
      i += hit->content.size();
      start = i;
    }
    DSCORE_RETURN_IF_ERROR(encode_plain(text.substr(start), &ids));
    if (add_special_tokens) ids.insert(ids.end(), suffix_.begin(), suffix_.end());
    return ids;
  }

  Result<std::string> decode(const std::vector<int32_t>& ids,
                             bool skip_special_tokens) const override {
    std::string out;
    bool first = true;
    for (int32_t id : ids) {
      const std::string* token = nullptr;
      if (auto a = added_by_id_.find(id); a != added_by_id_.end()) {
        if (skip_special_tokens && added_[a->second].special) continue;
        token = &added_[a->second].content;
      } else if (auto v = id_to_token_.find(id); v != id_to_token_.end()) {
        token = &v->second;
      } else {
        return invalid_argument("token id " + std::to_string(id) + " is not in the vocabulary of " +
                                description_);
      }
      if (!byte_level_decoder_) {  // no decoder: Hugging Face joins tokens with spaces
        if (!first) out.push_back(' ');
        out += *token;
      } else if (auto bytes = unicode_to_bytes(*token)) {
        out += *bytes;
      } else {
        out += *token;  // not byte-level text (an added token): as written
      }
      first = false;
    }
    return out;
  }

  int64_t vocab_size() const override { return vocab_size_; }

  std::optional<int32_t> token_id(std::string_view token) const override {
    if (auto a = added_by_text_.find(std::string(token)); a != added_by_text_.end())
      return a->second;
    if (auto v = bpe_.vocab().find(std::string(token)); v != bpe_.vocab().end()) return v->second;
    return std::nullopt;
  }

 private:
  const AddedToken* added_at(std::string_view text, size_t i) const {
    for (size_t k : by_first_byte_[static_cast<unsigned char>(text[i])]) {
      const std::string& c = added_[k].content;
      if (text.compare(i, c.size(), c) == 0) return &added_[k];
    }
    return nullptr;
  }

  // Text with no added token: the pre-tokenizer steps, then BPE per word.
  // Each piece goes through the remaining steps before the next one, so
  // memory holds the ids, not every word of the text.
  Status encode_plain(std::string_view text, std::vector<int32_t>* ids) const {
    return pre_tokenize(text, 0, ids);
  }

  Status pre_tokenize(std::string_view piece, size_t step_index, std::vector<int32_t>* ids) const {
    if (piece.empty()) return Status::Ok();
    if (step_index == steps_.size()) return bpe_.encode_word(piece, ids);
    const PreTokenStep& step = steps_[step_index];
    std::string prefixed;
    if (step.byte_level && step.add_prefix_space && piece[0] != ' ') {
      prefixed = " " + std::string(piece);
      piece = prefixed;
    }
    std::vector<std::string_view> parts;
    if (step.splitter)
      parts = step.splitter->split(piece, step.keep_matches, true);
    else
      parts.push_back(piece);
    for (std::string_view part : parts) {
      if (step.byte_level) {
        DSCORE_RETURN_IF_ERROR(pre_tokenize(bytes_to_unicode(part), step_index + 1, ids));
      } else {
        DSCORE_RETURN_IF_ERROR(pre_tokenize(part, step_index + 1, ids));
      }
    }
    return Status::Ok();
  }

  Bpe bpe_;
  std::vector<AddedToken> added_;
  std::vector<PreTokenStep> steps_;
  std::vector<int32_t> prefix_, suffix_;  // the template around a single sequence
  bool byte_level_decoder_;
  std::unordered_map<int32_t, std::string> id_to_token_;
  std::unordered_map<int32_t, size_t> added_by_id_;
  std::unordered_map<std::string, int32_t> added_by_text_;
  std::vector<size_t> by_first_byte_[256];
  int64_t vocab_size_ = 0;
};

// ---- reading the file

Result<std::vector<AddedToken>> read_added(const Fields& f, const json::Value& root) {
  std::vector<AddedToken> out;
  const json::Value* list = root.find("added_tokens");
  if (list == nullptr || list->is_null()) return out;
  if (!list->is_array()) return f.error("added_tokens", "must be an array");
  for (size_t i = 0; i < list->items().size(); ++i) {
    const json::Value& t = list->items()[i];
    const std::string field = "added_tokens[" + std::to_string(i) + "]";
    const json::Value* content = t.is_object() ? t.find("content") : nullptr;
    const json::Value* id = t.is_object() ? t.find("id") : nullptr;
    if (content == nullptr || !content->is_string() || content->as_string().empty() ||
        id == nullptr || !id->is_int() || id->as_int() < 0 || id->as_int() > INT32_MAX)
      return f.error(field, "needs a non-empty \"content\" text and an \"id\" >= 0");
    for (const char* option : {"single_word", "lstrip", "rstrip"}) {
      DSCORE_ASSIGN_OR_RETURN(const bool on, f.flag(t, field, option, false));
      if (on)
        return f.unsupported(field + "." + option, "true (" + content->as_string() + ")",
                             "added tokens matched exactly, with single_word, lstrip and rstrip "
                             "false");
    }
    DSCORE_ASSIGN_OR_RETURN(const bool special, f.flag(t, field, "special", false));
    out.push_back(AddedToken{content->as_string(), static_cast<int32_t>(id->as_int()), special});
  }
  return out;
}

Status read_normalizer(const Fields& f, const json::Value& root) {
  const json::Value* n = root.find("normalizer");
  if (n == nullptr || n->is_null()) return Status::Ok();
  DSCORE_ASSIGN_OR_RETURN(const std::string type, f.type_of(*n, "normalizer"));
  const json::Value* list = n->find("normalizers");
  if (type == "Sequence" && list != nullptr && list->is_array() && list->items().empty())
    return Status::Ok();
  return f.unsupported("normalizer", type, "no normalizer (null)");
}

Status read_pre_tokenizer(const Fields& f, const json::Value& p, const std::string& field,
                          std::vector<PreTokenStep>* steps) {
  if (p.is_null()) return Status::Ok();
  DSCORE_ASSIGN_OR_RETURN(const std::string type, f.type_of(p, field));
  const char* supported = "ByteLevel, Split and Sequence pre-tokenizers";
  if (type == "Sequence") {
    const json::Value* list = p.find("pretokenizers");
    if (list == nullptr || !list->is_array())
      return f.error(field + ".pretokenizers", "must be an array");
    for (size_t i = 0; i < list->items().size(); ++i)
      DSCORE_RETURN_IF_ERROR(read_pre_tokenizer(
          f, list->items()[i], field + ".pretokenizers[" + std::to_string(i) + "]", steps));
    return Status::Ok();
  }
  PreTokenStep step;
  if (type == "ByteLevel") {
    step.byte_level = true;
    DSCORE_ASSIGN_OR_RETURN(step.add_prefix_space, f.flag(p, field, "add_prefix_space", false));
    DSCORE_ASSIGN_OR_RETURN(const bool use_regex, f.flag(p, field, "use_regex", true));
    if (use_regex) {
      DSCORE_ASSIGN_OR_RETURN(RegexSplitter s,
                              RegexSplitter::compile(kGpt2Pattern, false, "GPT-2's pattern"));
      step.splitter = std::make_shared<RegexSplitter>(std::move(s));
    }
  } else if (type == "Split") {
    const json::Value* pattern = p.find("pattern");
    const json::Value* regex =
        pattern != nullptr && pattern->is_object() ? pattern->find("Regex") : nullptr;
    const json::Value* literal =
        pattern != nullptr && pattern->is_object() ? pattern->find("String") : nullptr;
    const json::Value* text = regex != nullptr ? regex : literal;
    if (text == nullptr || !text->is_string())
      return f.error(field + ".pattern", "must be {\"Regex\": \"...\"} or {\"String\": \"...\"}");
    DSCORE_ASSIGN_OR_RETURN(RegexSplitter s,
                            RegexSplitter::compile(text->as_string(), regex == nullptr,
                                                   f.path() + ": " + field + ".pattern"));
    step.splitter = std::make_shared<RegexSplitter>(std::move(s));
    const json::Value* behavior = p.find("behavior");
    const std::string b = behavior != nullptr && behavior->is_string() ? behavior->as_string() : "";
    if (b == "Removed")
      step.keep_matches = false;
    else if (b != "Isolated")
      return f.unsupported(field + ".behavior", b, "Split behaviours Isolated and Removed");
    DSCORE_ASSIGN_OR_RETURN(const bool invert, f.flag(p, field, "invert", false));
    if (invert) return f.unsupported(field + ".invert", "true", "Split with invert false");
  } else {
    return f.unsupported(field, type, supported);
  }
  steps->push_back(std::move(step));
  return Status::Ok();
}

Result<Bpe> read_model(const Fields& f, const json::Value& root, int64_t* vocab_entries) {
  const json::Value* m = root.find("model");
  if (m == nullptr || !m->is_object()) return f.error("model", "is missing");
  DSCORE_ASSIGN_OR_RETURN(const std::string type, f.type_of(*m, "model"));
  if (type != "BPE") return f.unsupported("model.type", type, "BPE models");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json::Value* v = m->find(key);
    if (v != nullptr && !v->is_null() && !(v->is_string() && v->as_string().empty()))
      return f.unsupported(std::string("model.") + key, v->is_string() ? v->as_string() : "set",
                           "BPE without subword prefixes or suffixes");
  }
  const json::Value* dropout = m->find("dropout");
  if (dropout != nullptr && !dropout->is_null() &&
      !(dropout->is_number() && dropout->as_number() == 0))
    return f.unsupported("model.dropout", json::serialize(*dropout), "BPE without dropout");
  DSCORE_ASSIGN_OR_RETURN(const bool byte_fallback, f.flag(*m, "model", "byte_fallback", false));
  if (byte_fallback)
    return f.unsupported("model.byte_fallback", "true",
                         "byte-level BPE (byte_fallback false); for a SentencePiece-style "
                         "vocabulary give the folder's tokenizer.model");

  const json::Value* vocab = m->find("vocab");
  if (vocab == nullptr || !vocab->is_object())
    return f.error("model.vocab", "must be an object of token -> id");
  std::unordered_map<std::string, int32_t> ids;
  ids.reserve(vocab->members().size());
  for (const json::Member& e : vocab->members()) {
    if (!e.value.is_int() || e.value.as_int() < 0 || e.value.as_int() > INT32_MAX)
      return f.error("model.vocab[\"" + e.key + "\"]", "must be an id >= 0");
    ids.emplace(e.key, static_cast<int32_t>(e.value.as_int()));
  }
  *vocab_entries = static_cast<int64_t>(ids.size());

  const json::Value* merges = m->find("merges");
  if (merges == nullptr || !merges->is_array()) return f.error("model.merges", "must be an array");
  std::vector<std::pair<std::string, std::string>> pairs;
  pairs.reserve(merges->items().size());
  for (size_t i = 0; i < merges->items().size(); ++i) {
    const json::Value& e = merges->items()[i];
    const std::string field = "model.merges[" + std::to_string(i) + "]";
    if (e.is_string()) {
      const std::string& s = e.as_string();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        return f.error(field, "\"" + s + "\" must be two tokens separated by one space");
      pairs.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (e.is_array() && e.items().size() == 2 && e.items()[0].is_string() &&
               e.items()[1].is_string()) {
      pairs.emplace_back(e.items()[0].as_string(), e.items()[1].as_string());
    } else {
      return f.error(field, "must be \"a b\" or [\"a\", \"b\"]");
    }
  }

  Bpe::Options options;
  DSCORE_ASSIGN_OR_RETURN(options.fuse_unk, f.flag(*m, "model", "fuse_unk", false));
  DSCORE_ASSIGN_OR_RETURN(options.ignore_merges, f.flag(*m, "model", "ignore_merges", false));
  const json::Value* unk = m->find("unk_token");
  if (unk != nullptr && !unk->is_null()) {
    auto it = unk->is_string() ? ids.find(unk->as_string()) : ids.end();
    if (it == ids.end())
      return f.error("model.unk_token", "must be a token of model.vocab (or null)");
    options.unk_id = it->second;
  }
  return Bpe::create(std::move(ids), pairs, options, f.path());
}

// The ids a TemplateProcessing puts before and after the single sequence "A".
Status read_template(const Fields& f, const json::Value& p, const std::string& field,
                     std::vector<int32_t>* prefix, std::vector<int32_t>* suffix) {
  const json::Value* single = p.find("single");
  const json::Value* specials = p.find("special_tokens");
  if (single == nullptr || !single->is_array())
    return f.error(field + ".single", "must be an array");
  bool after = false;
  for (size_t i = 0; i < single->items().size(); ++i) {
    const json::Value& item = single->items()[i];
    const std::string where = field + ".single[" + std::to_string(i) + "]";
    if (item.is_object() && item.find("Sequence") != nullptr) {
      if (after) return f.unsupported(where, "a second Sequence", "one sequence per template");
      after = true;
      continue;
    }
    const json::Value* special = item.is_object() ? item.find("SpecialToken") : nullptr;
    const json::Value* name =
        special != nullptr && special->is_object() ? special->find("id") : nullptr;
    if (name == nullptr || !name->is_string())
      return f.error(where, "must be {\"Sequence\": ...} or {\"SpecialToken\": {\"id\": ...}}");
    const json::Value* entry =
        specials != nullptr && specials->is_object() ? specials->find(name->as_string()) : nullptr;
    const json::Value* entry_ids =
        entry != nullptr && entry->is_object() ? entry->find("ids") : nullptr;
    if (entry_ids == nullptr || !entry_ids->is_array())
      return f.error(field + ".special_tokens", "has no ids for \"" + name->as_string() + "\"");
    for (const json::Value& id : entry_ids->items()) {
      if (!id.is_int() || id.as_int() < 0 || id.as_int() > INT32_MAX)
        return f.error(field + ".special_tokens[\"" + name->as_string() + "\"].ids",
                       "must hold ids >= 0");
      (after ? suffix : prefix)->push_back(static_cast<int32_t>(id.as_int()));
    }
  }
  if (!after) return f.error(field + ".single", "has no {\"Sequence\": ...} item");
  return Status::Ok();
}

Status read_post_processor(const Fields& f, const json::Value& p, const std::string& field,
                           std::vector<int32_t>* prefix, std::vector<int32_t>* suffix) {
  if (p.is_null()) return Status::Ok();
  DSCORE_ASSIGN_OR_RETURN(const std::string type, f.type_of(p, field));
  if (type == "ByteLevel") return Status::Ok();  // offsets only
  if (type == "TemplateProcessing") return read_template(f, p, field, prefix, suffix);
  if (type == "Sequence") {
    const json::Value* list = p.find("processors");
    if (list == nullptr || !list->is_array())
      return f.error(field + ".processors", "must be an array");
    for (size_t i = 0; i < list->items().size(); ++i)
      DSCORE_RETURN_IF_ERROR(read_post_processor(
          f, list->items()[i], field + ".processors[" + std::to_string(i) + "]", prefix, suffix));
    return Status::Ok();
  }
  return f.unsupported(field, type, "TemplateProcessing, ByteLevel and Sequence post-processors");
}

Result<bool> read_decoder(const Fields& f, const json::Value& root) {
  const json::Value* d = root.find("decoder");
  if (d == nullptr || d->is_null()) return false;
  DSCORE_ASSIGN_OR_RETURN(const std::string type, f.type_of(*d, "decoder"));
  if (type != "ByteLevel") return f.unsupported("decoder", type, "the ByteLevel decoder or none");
  return true;
}

}  // namespace

namespace {

// BOS/EOS by name (tokenizer_config.json), else the template's first token.
Result<std::unique_ptr<Tokenizer>> with_special_tokens(std::unique_ptr<HfTokenizer> tokenizer,
                                                       const SpecialTokenNames& names,
                                                       const std::vector<int32_t>& prefix,
                                                       const std::string& path) {
  const std::string description =
      "the BPE tokenizer " + path + " (" + std::to_string(tokenizer->vocab_size()) + " ids)";
  SpecialTokens special;
  auto resolve = [&](const std::optional<std::string>& name, const char* key,
                     std::optional<int32_t>* out) -> Status {
    if (!name) return Status::Ok();
    *out = tokenizer->token_id(*name);
    if (!*out)
      return invalid_argument(key + std::string(" \"") + *name +
                              "\" (tokenizer_config.json or special_tokens_map.json beside " +
                              path + ") is not a token of " + path);
    return Status::Ok();
  };
  DSCORE_RETURN_IF_ERROR(resolve(names.bos, "bos_token", &special.bos));
  DSCORE_RETURN_IF_ERROR(resolve(names.eos, "eos_token", &special.eos));
  if (!special.bos && !prefix.empty()) special.bos = prefix.front();
  tokenizer->set(special, description);
  return std::unique_ptr<Tokenizer>(std::move(tokenizer));
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> load_hf_tokenizer(const std::string& path,
                                                     const SpecialTokenNames& names) {
  DSCORE_ASSIGN_OR_RETURN(const json::Value root, read_json_file(path));
  const Fields f(path);
  if (!root.is_object()) return f.error("the file", "must hold a JSON object");
  for (const char* key : {"truncation", "padding"}) {
    const json::Value* v = root.find(key);
    if (v != nullptr && !v->is_null())
      return f.unsupported(key, "set",
                           std::string("tokenizer.json files with \"") + key +
                               "\": null (dscore encodes whole texts)");
  }
  int64_t entries = 0;  // the model first: its kind is the first thing to report
  DSCORE_ASSIGN_OR_RETURN(Bpe bpe, read_model(f, root, &entries));
  DSCORE_ASSIGN_OR_RETURN(std::vector<AddedToken> added, read_added(f, root));
  DSCORE_RETURN_IF_ERROR(read_normalizer(f, root));
  std::vector<PreTokenStep> steps;
  if (const json::Value* p = root.find("pre_tokenizer"))
    DSCORE_RETURN_IF_ERROR(read_pre_tokenizer(f, *p, "pre_tokenizer", &steps));
  std::vector<int32_t> prefix, suffix;
  if (const json::Value* p = root.find("post_processor"))
    DSCORE_RETURN_IF_ERROR(read_post_processor(f, *p, "post_processor", &prefix, &suffix));
  DSCORE_ASSIGN_OR_RETURN(const bool byte_level_decoder, read_decoder(f, root));

  auto tokenizer = std::make_unique<HfTokenizer>(std::move(bpe), std::move(added), std::move(steps),
                                                 prefix, suffix, byte_level_decoder);
  return with_special_tokens(std::move(tokenizer), names, prefix, path);
}

Result<std::unique_ptr<Tokenizer>> load_gpt2_vocab_merges(const std::string& dir,
                                                          const SpecialTokenNames& names) {
  const std::string vocab_path = dir + "/vocab.json", merges_path = dir + "/merges.txt";
  DSCORE_ASSIGN_OR_RETURN(const json::Value vocab, read_json_file(vocab_path));
  if (!vocab.is_object())
    return invalid_argument(vocab_path + " must hold an object of token -> id");
  std::unordered_map<std::string, int32_t> ids;
  ids.reserve(vocab.members().size());
  for (const json::Member& e : vocab.members()) {
    if (!e.value.is_int() || e.value.as_int() < 0 || e.value.as_int() > INT32_MAX)
      return invalid_argument(vocab_path + ": \"" + e.key + "\" must map to an id >= 0");
    ids.emplace(e.key, static_cast<int32_t>(e.value.as_int()));
  }
  DSCORE_ASSIGN_OR_RETURN(const std::string text, read_whole_file(merges_path));
  std::vector<std::pair<std::string, std::string>> merges;
  size_t line_number = 0;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    at = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_number == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
      return invalid_argument(merges_path + ":" + std::to_string(line_number) + ": \"" + line +
                              "\" must be two tokens separated by one space");
    merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  DSCORE_ASSIGN_OR_RETURN(Bpe bpe, Bpe::create(std::move(ids), merges, {}, merges_path));
  // GPT-2's slow tokenizer keeps its special tokens whole in the text.
  std::vector<AddedToken> added;
  for (const auto* name : {&names.bos, &names.eos})
    if (*name) {
      auto it = bpe.vocab().find(**name);
      if (it != bpe.vocab().end() &&
          std::none_of(added.begin(), added.end(),
                       [&](const AddedToken& t) { return t.content == **name; }))
        added.push_back(AddedToken{**name, it->second, true});
    }
  PreTokenStep step;
  step.byte_level = true;
  DSCORE_ASSIGN_OR_RETURN(RegexSplitter s,
                          RegexSplitter::compile(kGpt2Pattern, false, "GPT-2's pattern"));
  step.splitter = std::make_shared<RegexSplitter>(std::move(s));
  std::vector<PreTokenStep> steps;
  steps.push_back(std::move(step));
  auto tokenizer =
      std::make_unique<HfTokenizer>(std::move(bpe), std::move(added), std::move(steps),
                                    std::vector<int32_t>{}, std::vector<int32_t>{}, true);
  return with_special_tokens(std::move(tokenizer), names, {}, vocab_path);
}

}  // namespace dscore::tokenizer
