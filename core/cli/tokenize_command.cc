// dscore tokenize --tokenizer DIR --out PREFIX TEXT...
// Tokenizes text files with a Hugging Face folder's tokenizer into llm.c
// token shards that data.type "tokens" reads (token_shard_writer.h); each
// file is one document. --print shows the ids of each file instead, and
// --decode the text of given ids (both for checking against Hugging Face).
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/cli/commands.h"
#include "core/cli/options.h"
#include "core/data/token_shard_writer.h"
#include "core/tokenizer/tokenizer.h"

namespace dscore::cli {
namespace {

constexpr const char* kTokenizeUsage =
    "usage: dscore tokenize --tokenizer DIR --out PREFIX [--separator TOKEN|none] "
    "[--no-special-tokens]\n"
    "                       [--shard-tokens 100000000] [--val-tokens N] TEXT...\n"
    "       dscore tokenize --tokenizer DIR --print [--no-special-tokens] TEXT...\n"
    "       dscore tokenize --tokenizer DIR --decode 1,2,3";

Result<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read the text file '" + path + "'");
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) return io_error("cannot read the text file '" + path + "': read failed");
  return content.str();
}

// The token each document starts with: --separator, or by default nothing
// when encoding already starts documents with BOS (Llama), else EOS
// (llm.c's GPT-2 shards: <|endoftext|> before every document).
Result<std::optional<int32_t>> separator_of(const tokenizer::Tokenizer& tok,
                                            const std::string& option, bool special) {
  if (option == "none") return std::optional<int32_t>();
  if (!option.empty()) {
    auto id = tok.token_id(option);
    if (!id)
      return invalid_argument("--separator \"" + option + "\" is not a token of " +
                              tok.description() +
                              "; give a token text such as \"<|endoftext|>\", "
                              "or none");
    return id;
  }
  DSCORE_ASSIGN_OR_RETURN(const std::vector<int32_t> empty, tok.encode("", special));
  if (!empty.empty()) return std::optional<int32_t>();
  return tok.special().eos;
}

}  // namespace

int tokenize_command(const std::vector<std::string>& args) {
  po::options_description options("tokenize options");
  std::string dir, separator, decode_ids;
  std::vector<std::string> inputs;
  data::TokenShardWriter::Options shards;
  options.add_options()("tokenizer", po::value<std::string>(&dir)->required(),
                        "the folder holding tokenizer.json or tokenizer.model")(
      "out", po::value<std::string>(&shards.prefix),
      "shard name prefix: PREFIX_000000.bin, ... (PREFIX_val_000000.bin, "
      "PREFIX_train_000001.bin, ... with --val-tokens)")(
      "separator", po::value<std::string>(&separator),
      "token put before every document; default: none when documents start with BOS, else EOS")(
      "no-special-tokens", "do not add the tokens Hugging Face's tokenizer(text) adds (BOS)")(
      "shard-tokens", po::value<int64_t>(&shards.shard_tokens)->default_value(100000000),
      "tokens per shard")("val-tokens", po::value<int64_t>(&shards.val_tokens)->default_value(0),
                          "put the first N tokens in a validation shard")(
      "print", "print each file's token ids (one comma-separated line per file); write nothing")(
      "decode", po::value<std::string>(&decode_ids), "print the text of comma-separated token ids")(
      "text", po::value<std::vector<std::string>>(&inputs), "text files, one document each");
  po::positional_options_description positional;
  positional.add("text", -1);
  po::variables_map vm;
  int exit_code = kExitOk;
  if (!parse_options(args, options, positional, kTokenizeUsage, &vm, &exit_code)) return exit_code;
  const bool print = vm.count("print") > 0, decode = vm.count("decode") > 0;
  const bool special = vm.count("no-special-tokens") == 0;
  const int modes = int(print) + int(decode) + int(!shards.prefix.empty());
  if (modes != 1 || (decode ? !inputs.empty() : inputs.empty())) {
    std::fprintf(stderr,
                 "dscore tokenize: give exactly one of --out, --print and --decode; --out and "
                 "--print take text files, --decode none\n%s\n",
                 kTokenizeUsage);
    return kExitUsage;
  }
  auto tok = tokenizer::load_tokenizer(dir);
  if (!tok.ok()) return report_failure(tok.status());

  if (decode) {
    std::vector<int32_t> ids;
    if (!parse_token_list(decode_ids, &ids)) {
      std::fprintf(stderr, "dscore tokenize: --decode takes comma-separated token ids\n");
      return kExitUsage;
    }
    auto text = (*tok)->decode(ids, false);
    if (!text.ok()) return report_failure(text.status());
    std::fwrite(text->data(), 1, text->size(), stdout);
    return kExitOk;
  }

  std::optional<data::TokenShardWriter> writer;
  std::optional<int32_t> sep;
  if (!print) {
    shards.vocab_size = (*tok)->vocab_size();
    auto created = data::TokenShardWriter::create(shards);
    if (!created.ok()) return report_failure(created.status());
    writer.emplace(std::move(*created));
    auto s = separator_of(**tok, separator, special);
    if (!s.ok()) return report_failure(s.status());
    sep = *s;
  }
  for (const std::string& path : inputs) {
    auto text = read_text(path);
    if (!text.ok()) return report_failure(text.status());
    auto ids = (*tok)->encode(*text, special);
    if (!ids.ok())
      return report_failure(Status(ids.status().code(), path + ": " + ids.status().message()));
    if (print) {
      for (size_t i = 0; i < ids->size(); ++i) std::printf(i ? ",%d" : "%d", (*ids)[i]);
      std::printf("\n");
      continue;
    }
    if (sep) ids->insert(ids->begin(), *sep);
    if (Status s = writer->append(*ids); !s.ok()) return report_failure(s);
  }
  if (print) return kExitOk;
  auto files = writer->finish();
  if (!files.ok()) return report_failure(files.status());
  std::printf("wrote %lld tokens (uint%d, vocab %lld, %s) to %zu shard(s):\n",
              static_cast<long long>(writer->tokens_written()), writer->tokens_width() * 8,
              static_cast<long long>((*tok)->vocab_size()),
              sep ? ("separator " + std::to_string(*sep)).c_str() : "no separator", files->size());
  for (const std::string& f : *files) std::printf("  %s\n", f.c_str());
  return kExitOk;
}

}  // namespace dscore::cli
