// dscore generate --checkpoint DIR (--prompt TEXT | --prompt-tokens IDS)
//                 [--tokenizer DIR] [--max-new-tokens N] [--temperature T]
//                 [--top-k K] [--seed S]
// Prints a continuation of the prompt from a saved token model (gpt).
// A text prompt prints text: bytes as tokens for byte-level models (trained
// on data.type "text"), else through a tokenizer (--tokenizer, or the
// model's "from_pretrained" folder), stopping at its end-of-sequence token.
// A token-id prompt prints token ids.
#include <cstdio>
#include <sstream>

#include "core/app/generation.h"
#include "core/checkpoint/checkpoint_info.h"
#include "core/cli/commands.h"
#include "core/cli/options.h"
#include "core/tokenizer/tokenizer.h"

namespace dscore::cli {
namespace {

constexpr const char* kGenerateUsage =
    "usage: dscore generate --checkpoint DIR (--prompt TEXT | --prompt-tokens 1,2,3) "
    "[--tokenizer DIR]\n"
    "                       [--max-new-tokens 200] [--temperature 0.8] [--top-k 0] [--seed 1337] "
    "[--tag T]";

// The saved model section's "from_pretrained" folder (a model read from a
// Hugging Face folder, whose tokenizer lies beside it), or "".
std::string from_pretrained_of(const std::string& dir, const std::string& tag) {
  auto info = checkpoint::open_checkpoint(dir, tag);
  if (!info.ok()) return "";
  const json::Value* model = info->state.ds_config.find("model");
  const json::Value* folder = model != nullptr ? model->find("from_pretrained") : nullptr;
  return folder != nullptr && folder->is_string() ? folder->as_string() : "";
}

}  // namespace

int generate_command(const std::vector<std::string>& args) {
  po::options_description options("generate options");
  std::string dir, tag, prompt, prompt_tokens, tokenizer_dir;
  int64_t max_new = 200;
  SamplingOptions sampling;
  options.add_options()("checkpoint", po::value<std::string>(&dir)->required(),
                        "the checkpoint folder (holding `latest`)")(
      "tag", po::value<std::string>(&tag), "the tag to load (default: the one `latest` names)")(
      "prompt", po::value<std::string>(&prompt),
      "prompt text (byte-level models, or through the tokenizer)")(
      "tokenizer", po::value<std::string>(&tokenizer_dir),
      "folder with tokenizer.json or tokenizer.model (default: the model's from_pretrained)")(
      "prompt-tokens", po::value<std::string>(&prompt_tokens), "prompt token ids, comma-separated")(
      "max-new-tokens", po::value<int64_t>(&max_new)->default_value(200), "tokens to generate")(
      "temperature", po::value<double>(&sampling.temperature)->default_value(0.8), "0 = greedy")(
      "top-k", po::value<int64_t>(&sampling.top_k)->default_value(0),
      "sample from the k most likely; 0 = all")(
      "seed", po::value<uint64_t>(&sampling.seed)->default_value(1337), "sampling seed");
  po::variables_map vm;
  int exit_code = kExitOk;
  if (!parse_options(args, options, {}, kGenerateUsage, &vm, &exit_code)) return exit_code;
  if (prompt.empty() == prompt_tokens.empty() || max_new < 0 || sampling.temperature < 0 ||
      sampling.top_k < 0) {
    std::fprintf(stderr,
                 "dscore generate: give exactly one of --prompt and --prompt-tokens; "
                 "--max-new-tokens, --temperature and --top-k must be >= 0\n%s\n",
                 kGenerateUsage);
    return kExitUsage;
  }
  auto model = open_for_inference(dir, tag, read_engine_environment());
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", model.status().message().c_str());
    return kExitFailure;
  }
  const bool text = !prompt.empty();  // text in, text out; ids in, ids out
  if (text && tokenizer_dir.empty() && model->data_type != "text")
    tokenizer_dir = from_pretrained_of(dir, tag);
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::vector<int32_t> tokens;
  if (text && !tokenizer_dir.empty()) {
    auto loaded = tokenizer::load_tokenizer(tokenizer_dir);
    if (!loaded.ok()) {
      std::fprintf(stderr, "error: %s\n", loaded.status().message().c_str());
      return kExitFailure;
    }
    tok = std::move(*loaded);
    if (tok->vocab_size() > model->vocab_size) {
      std::fprintf(stderr, "error: %s has more ids than the model's vocab_size %lld\n",
                   tok->description().c_str(), static_cast<long long>(model->vocab_size));
      return kExitUsage;
    }
    auto ids = tok->encode(prompt, /*add_special_tokens=*/true);
    if (!ids.ok()) {
      std::fprintf(stderr, "error: %s\n", ids.status().message().c_str());
      return kExitFailure;
    }
    tokens = std::move(*ids);
  } else if (text) {
    if (model->data_type != "text") {
      std::fprintf(stderr,
                   "error: this model was trained on data.type \"%s\", not byte-level text; "
                   "give the tokenizer's folder as --tokenizer DIR, or the prompt as "
                   "--prompt-tokens\n",
                   model->data_type.c_str());
      return kExitUsage;
    }
    for (unsigned char c : prompt) tokens.push_back(c);
  } else if (!parse_token_list(prompt_tokens, &tokens)) {
    std::fprintf(stderr, "dscore generate: --prompt-tokens must be comma-separated token ids\n");
    return kExitUsage;
  }
  for (int32_t t : tokens)
    if (t >= model->vocab_size) {
      std::fprintf(stderr, "error: prompt token %d is >= the model's vocab_size %lld\n", t,
                   static_cast<long long>(model->vocab_size));
      return kExitUsage;
    }
  if (text)
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  else
    std::fputs(prompt_tokens.c_str(), stdout);
  std::fflush(stdout);
  // With a tokenizer the whole sequence is decoded again after each token
  // and the new bytes printed: a character may span tokens, and
  // SentencePiece decodes a piece differently at the start of a text.
  size_t printed = 0;
  Status decode_error;
  if (tok) {
    auto head = tok->decode(tokens, /*skip_special_tokens=*/true);
    if (head.ok()) printed = head->size();
  }
  const Status status =
      generate(*model->engine, model->block_size, model->vocab_size, &tokens, max_new, sampling,
               [&](int32_t token) {
                 if (!text) {
                   std::printf(",%d", token);
                 } else if (!tok) {
                   std::fputc(token, stdout);
                 } else {
                   if (token == tok->special().eos) return false;
                   auto all = tok->decode(tokens, true);
                   if (!all.ok()) {
                     decode_error = all.status();
                     return false;
                   }
                   if (all->size() > printed)
                     std::fwrite(all->data() + printed, 1, all->size() - printed, stdout);
                   printed = std::max(printed, all->size());
                 }
                 std::fflush(stdout);
                 return true;
               });
  if (!decode_error.ok()) {
    std::fputc('\n', stdout);
    std::fprintf(stderr, "error: %s\n", decode_error.message().c_str());
    return kExitFailure;
  }
  std::fputc('\n', stdout);
  if (!status.ok()) {
    std::fprintf(stderr, "error: %s\n", status.message().c_str());
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace dscore::cli
