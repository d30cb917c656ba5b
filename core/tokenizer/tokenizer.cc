// load_tokenizer: which file of the folder, and the special-token names
// beside it.
#include "core/tokenizer/tokenizer.h"

#include <sys/stat.h>

#include "core/tokenizer/hf_tokenizer.h"
#include "core/tokenizer/sentencepiece_tokenizer.h"
#include "core/tokenizer/special_tokens.h"

namespace dscore::tokenizer {
namespace {

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return not_found("tokenizer folder '" + dir +
                     "' does not exist; give a Hugging Face model folder holding tokenizer.json "
                     "or tokenizer.model");
  DSCORE_ASSIGN_OR_RETURN(const SpecialTokenNames names, read_special_token_names(dir));
  const std::string json_path = dir + "/tokenizer.json";
  const std::string model_path = dir + "/tokenizer.model";
  const bool has_model = is_file(model_path);
  if (is_file(json_path)) {
    auto hf = load_hf_tokenizer(json_path, names);
    // Llama 2 folders ship a tokenizer.json converted from their
    // tokenizer.model, of a kind dscore does not read: use the original.
    if (!hf.ok() && hf.status().code() == DSCORE_UNIMPLEMENTED && has_model)
      return load_sentencepiece_tokenizer(model_path, names);
    return hf;
  }
  if (has_model) return load_sentencepiece_tokenizer(model_path, names);
  if (is_file(dir + "/vocab.json") && is_file(dir + "/merges.txt"))
    return load_gpt2_vocab_merges(dir, names);
  return not_found("tokenizer folder '" + dir +
                   "' holds neither tokenizer.json (Hugging Face tokenizers), tokenizer.model "
                   "(SentencePiece) nor vocab.json with merges.txt (GPT-2); give the folder a "
                   "model's tokenizer was saved to (save_pretrained)");
}

}  // namespace dscore::tokenizer
