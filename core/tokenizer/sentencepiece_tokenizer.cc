// A Tokenizer over sentencepiece::SentencePieceProcessor.
#include "core/tokenizer/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

namespace dscore::tokenizer {
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp,
                         std::string path)
      : sp_(std::move(sp)), path_(std::move(path)) {}

  void set(SpecialTokens special, bool add_bos, bool add_eos) {
    special_ = special;
    add_bos_ = add_bos && special.bos;
    add_eos_ = add_eos && special.eos;
    description_ =
        "the SentencePiece tokenizer " + path_ + " (" + std::to_string(vocab_size()) + " ids)";
  }

  Result<std::vector<int32_t>> encode(std::string_view text,
                                      bool add_special_tokens) const override {
    std::vector<int> pieces;
    const auto status = sp_->Encode(text, &pieces);
    if (!status.ok())
      return invalid_argument("SentencePiece (" + path_ +
                              ") cannot encode the text: " + status.ToString());
    std::vector<int32_t> ids;
    ids.reserve(pieces.size() + 2);
    if (add_special_tokens && add_bos_) ids.push_back(*special_.bos);
    ids.insert(ids.end(), pieces.begin(), pieces.end());
    if (add_special_tokens && add_eos_) ids.push_back(*special_.eos);
    return ids;
  }

  Result<std::string> decode(
      const std::vector<int32_t>& ids,
      bool /*skip_special_tokens: control pieces decode to nothing*/) const override {
    std::vector<int> pieces;
    pieces.reserve(ids.size());
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size())
        return invalid_argument("token id " + std::to_string(id) + " is not in the vocabulary of " +
                                description_);
      pieces.push_back(id);
    }
    std::string text;
    const auto status = sp_->Decode(pieces, &text);
    if (!status.ok())
      return invalid_argument("SentencePiece (" + path_ + ") cannot decode: " + status.ToString());
    return text;
  }

  int64_t vocab_size() const override { return sp_->GetPieceSize(); }

  std::optional<int32_t> token_id(std::string_view token) const override {
    const int id = sp_->PieceToId(token);
    if (id < 0 || sp_->IdToPiece(id) != token) return std::nullopt;  // unknown pieces map to unk
    return id;
  }

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string path_;
  bool add_bos_ = false, add_eos_ = false;
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> load_sentencepiece_tokenizer(const std::string& path,
                                                                const SpecialTokenNames& names) {
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = sp->Load(path);
  if (!status.ok())
    return invalid_argument(path + " is not a SentencePiece model that libsentencepiece loads (" +
                            status.ToString() + ")");
  const int own_bos = sp->bos_id(), own_eos = sp->eos_id();  // -1 when the model has none
  auto tokenizer = std::make_unique<SentencePieceTokenizer>(std::move(sp), path);
  SpecialTokens special;
  auto resolve = [&](const std::optional<std::string>& name, int fallback, const char* key,
                     std::optional<int32_t>* out) -> Status {
    if (name) {
      *out = tokenizer->token_id(*name);
      if (!*out)
        return invalid_argument(std::string(key) + " \"" + *name + "\" (beside " + path +
                                ") is not a piece of " + path);
    } else if (fallback >= 0) {
      *out = fallback;
    }
    return Status::Ok();
  };
  DSCORE_RETURN_IF_ERROR(resolve(names.bos, own_bos, "bos_token", &special.bos));
  DSCORE_RETURN_IF_ERROR(resolve(names.eos, own_eos, "eos_token", &special.eos));
  tokenizer->set(special, names.add_bos.value_or(true), names.add_eos.value_or(false));
  return std::unique_ptr<Tokenizer>(std::move(tokenizer));
}

}  // namespace dscore::tokenizer
