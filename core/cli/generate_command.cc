// dscore generate (--checkpoint DIR | --config F | --hf DIR) (--prompt TEXT | --prompt-tokens IDS |
//                 --prompts-file F) [--tokenizer DIR] [--max-new-tokens N]
//                 [--temperature T] [--top-k K] [--top-p P]
//                 [--repetition-penalty R] [--seed S] [--batch-size B]
//                 [--no-kv-cache] [--offload-param none|cpu|nvme --nvme-path DIR] [-n RANKS]
// Prints a continuation of the prompt from a saved token model (gpt,
// llama), decoding against the model's KV cache where it has one; a
// prompts file (one JSON per line, generate_batch.h) is generated B
// sequences at a time. -n RANKS splits the model over local ranks under
// mpirun (tensor parallelism; each rank reads only its slices).
// A text prompt prints text: bytes as tokens for byte-level models (trained
// on data.type "text"), else through a tokenizer (--tokenizer, or the
// model's "from_pretrained" folder), stopping at its end-of-sequence token.
// A token-id prompt prints token ids.
#include <cstdio>
#include <sstream>

#include "core/app/generation.h"
#include "core/cli/commands.h"
#include "core/cli/generate_batch.h"
#include "core/cli/options.h"
#include "core/comm/job_env.h"
#include "core/comm/launcher.h"
#include "core/tokenizer/tokenizer.h"

namespace dscore::cli {
namespace {

constexpr const char* kGenerateUsage =
    "usage: dscore generate (--checkpoint DIR | --config F | --hf DIR) (--prompt TEXT | "
    "--prompt-tokens 1,2,3 "
    "| "
    "--prompts-file F.jsonl)\n"
    "                       [--tokenizer DIR] [--max-new-tokens 200] [--temperature 0.8] "
    "[--top-k 0] [--top-p 1]\n"
    "                       [--repetition-penalty 1] [--seed 1337] [--batch-size 8] "
    "[--no-kv-cache] [--tag T]";

// Where the time went, on stderr: the prompt's step, then per new token.
void print_timing(const GenerationTiming& t) {
  std::fprintf(
      stderr,
      "[dscore] generate: prompt of %lld tokens and the first new one in %.4f s "
      "(%.1f prompt tokens/s); %lld more in %.4f s (%.2f tokens/s, %.2f ms/token); %s\n",
      static_cast<long long>(t.prompt_tokens), t.prefill_seconds,
      t.prefill_seconds > 0 ? static_cast<double>(t.prompt_tokens) / t.prefill_seconds : 0.0,
      static_cast<long long>(t.decoded_tokens), t.decode_seconds,
      t.decode_seconds > 0 ? static_cast<double>(t.decoded_tokens) / t.decode_seconds : 0.0,
      t.decoded_tokens > 0 ? 1e3 * t.decode_seconds / static_cast<double>(t.decoded_tokens) : 0.0,
      t.cached ? "KV cache" : "no KV cache (a forward pass per token)");
}

// The ranks' command line: this one without -n.
std::vector<std::string> rank_args(const std::vector<std::string>& args) {
  std::vector<std::string> out = {"generate"};
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-n" || a == "--n") {
      ++i;  // and its value
      continue;
    }
    const bool attached =
        (a.rfind("-n", 0) == 0 && a.rfind("--", 0) != 0) || a.rfind("--n=", 0) == 0;
    if (!attached) out.push_back(a);
  }
  return out;
}

}  // namespace

int generate_command(const std::vector<std::string>& args) {
  po::options_description options("generate options");
  std::string dir, tag, prompt, prompt_tokens, tokenizer_dir;
  int64_t max_new = 200;
  SamplingOptions sampling;
  BatchGenerateOptions batch;
  std::string config, hf;
  InferenceOffload offload;
  int ranks = 1;
  options.add_options()("checkpoint", po::value<std::string>(&dir),
                        "the checkpoint folder (holding `latest`)")(
      "config", po::value<std::string>(&config),
      "a training config instead: its model's initial weights (e.g. from_pretrained)")(
      "hf", po::value<std::string>(&hf), "a Hugging Face model folder instead (GPT-2, Llama, ...)")(
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
      "top-p", po::value<double>(&sampling.top_p)->default_value(1.0),
      "sample from the smallest set of tokens whose probability reaches p")(
      "repetition-penalty", po::value<double>(&sampling.repetition_penalty)->default_value(1.0),
      "divide the logits of tokens already in the sequence by this (> 1 repeats less)")(
      "seed", po::value<uint64_t>(&sampling.seed)->default_value(1337), "sampling seed")(
      "prompts-file", po::value<std::string>(&batch.prompts_file),
      "prompts, one JSON object per line ({\"prompt\": text} or {\"prompt_tokens\": [ids]}); "
      "completions printed as JSON lines")("batch-size",
                                           po::value<int64_t>(&batch.batch_size)->default_value(8),
                                           "sequences of a prompts file generated together")(
      "no-kv-cache", "a forward pass over the last block_size tokens per token (no KV cache)")(
      "offload-param", po::value<std::string>(&offload.offload_param),
      "ZeRO-Inference: the weights in host memory (cpu) or on NVMe (nvme, with --nvme-path), "
      "each layer gathered as it runs; none: whole in memory (default: as the config says)")(
      "nvme-path", po::value<std::string>(&offload.nvme_path),
      "the folder for --offload-param nvme's swap files")(
      "n,n", po::value<int>(&ranks)->default_value(1),
      "local ranks splitting the model (tensor parallelism, under mpirun)");
  po::variables_map vm;
  int exit_code = kExitOk;
  if (!parse_options(args, options, {}, kGenerateUsage, &vm, &exit_code)) return exit_code;
  const int sources = (prompt.empty() ? 0 : 1) + (prompt_tokens.empty() ? 0 : 1) +
                      (batch.prompts_file.empty() ? 0 : 1);
  const int models = (dir.empty() ? 0 : 1) + (config.empty() ? 0 : 1) + (hf.empty() ? 0 : 1);
  if (sources != 1 || models != 1 || max_new < 0 || sampling.temperature < 0 ||
      sampling.top_k < 0 || sampling.top_p <= 0 || sampling.top_p > 1 ||
      sampling.repetition_penalty <= 0 || batch.batch_size < 1) {
    std::fprintf(stderr,
                 "dscore generate: give exactly one of --checkpoint, --config and --hf, and of "
                 "--prompt, --prompt-tokens and --prompts-file; --max-new-tokens, --temperature "
                 "and --top-k must be >= 0, "
                 "--top-p in (0, 1], --repetition-penalty > 0, --batch-size >= 1\n%s\n",
                 kGenerateUsage);
    return kExitUsage;
  }
  const bool use_cache = vm.count("no-kv-cache") == 0;
  auto job = comm::detect_job_env();
  if (!job.ok()) {
    std::fprintf(stderr, "error: %s\n", job.status().message().c_str());
    return kExitFailure;
  }
  if (ranks > 1 && job->world_size == 1) {  // start the ranks; each comes back here
    const Status failed = comm::exec_under_mpirun(ranks, rank_args(args));
    std::fprintf(stderr, "error: %s\n", failed.message().c_str());
    return kExitFailure;
  }
  // Every rank generates the same tokens (the group's sums give each the
  // same logits); the first prints them.
  if (job->rank != 0 && std::freopen("/dev/null", "w", stdout) == nullptr) return kExitFailure;
  InferenceOptions inference;
  inference.environment = read_engine_environment();
  inference.heap_policy = true;
  inference.offload = offload;
  inference.tensor_parallel = job->world_size;
  auto model = open_inference({dir, tag, config, hf}, inference);
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", model.status().message().c_str());
    return kExitFailure;
  }
  const bool text = !prompt.empty() || !batch.prompts_file.empty();  // text in, text out
  const bool tokenizer_given = !tokenizer_dir.empty();
  if (text && tokenizer_dir.empty() && model->data_type != "text")
    tokenizer_dir = model->from_pretrained;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::vector<int32_t> tokens;
  if (text && !tokenizer_dir.empty()) {
    auto loaded = tokenizer::load_tokenizer(tokenizer_dir);
    if (loaded.ok()) {
      tok = std::move(*loaded);
    } else if (tokenizer_given || batch.prompts_file.empty()) {
      std::fprintf(stderr, "error: %s\n", loaded.status().message().c_str());
      return kExitFailure;
    }  // a prompts file of token ids needs none
  }
  if (tok) {
    if (tok->vocab_size() > model->vocab_size) {
      std::fprintf(stderr, "error: %s has more ids than the model's vocab_size %lld\n",
                   tok->description().c_str(), static_cast<long long>(model->vocab_size));
      return kExitUsage;
    }
  }
  if (!batch.prompts_file.empty()) {
    batch.max_new_tokens = max_new;
    batch.sampling = sampling;
    batch.use_cache = use_cache;
    return generate_prompts_file(*model, tok.get(), batch);
  }
  if (text && tok) {
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
  GenerationTiming timing;
  if (tok) {
    auto head = tok->decode(tokens, /*skip_special_tokens=*/true);
    if (head.ok()) printed = head->size();
  }
  const Status status = generate(
      *model->engine, model->block_size, model->vocab_size, &tokens, max_new, sampling,
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
      },
      use_cache, &timing);
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
  std::fflush(stdout);
  print_timing(timing);
  return kExitOk;
}

}  // namespace dscore::cli
