// dscore forward (--checkpoint DIR [--tag T] | --config FILE) --tokens IDS
// Runs a token model (gpt, gpt2) forward over prompts and prints, one JSON
// line per prompt, its mean next-token loss and the logits at its last
// token: to compare with another implementation (transformers) or inspect a
// checkpoint. --config evaluates the weights the config's model starts from
// (e.g. a from_pretrained folder's) without training.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/app/generation.h"
#include "core/cli/commands.h"
#include "core/cli/options.h"

namespace dscore::cli {
namespace {

constexpr const char* kForwardUsage =
    "usage: dscore forward (--checkpoint DIR [--tag T] | --config FILE) --tokens 1,2,3[;4,5,...]";

// "1,2,3;4,5" -> {{1,2,3},{4,5}}; false on anything else.
bool parse_prompts(const std::string& text, std::vector<std::vector<int32_t>>* out) {
  std::stringstream prompts(text);
  std::string prompt;
  while (std::getline(prompts, prompt, ';')) {
    out->emplace_back();
    if (!parse_token_list(prompt, &out->back())) return false;
  }
  return !out->empty();
}

}  // namespace

int forward_command(const std::vector<std::string>& args) {
  po::options_description options("forward options");
  std::string dir, tag, config, tokens;
  options.add_options()("checkpoint", po::value<std::string>(&dir),
                        "a checkpoint folder (holding `latest`)")(
      "tag", po::value<std::string>(&tag), "the tag to load (default: the one `latest` names)")(
      "config", po::value<std::string>(&config),
      "a training config: its model's initial weights (e.g. from_pretrained)")(
      "tokens", po::value<std::string>(&tokens)->required(),
      "prompts: token ids separated by commas, prompts by semicolons");
  po::variables_map vm;
  int exit_code = kExitOk;
  if (!parse_options(args, options, {}, kForwardUsage, &vm, &exit_code)) return exit_code;
  std::vector<std::vector<int32_t>> prompts;
  if (dir.empty() == config.empty() || !parse_prompts(tokens, &prompts)) {
    std::fprintf(stderr,
                 "dscore forward: give exactly one of --checkpoint and --config, and --tokens as "
                 "comma-separated ids, prompts separated by ';'\n%s\n",
                 kForwardUsage);
    return kExitUsage;
  }
  const EngineEnvironment environment = read_engine_environment();
  auto model = config.empty() ? open_for_inference(dir, tag, {environment, {}})
                              : open_config_for_inference(config, {environment, {}});
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", model.status().message().c_str());
    return kExitFailure;
  }
  const int64_t T = model->block_size, V = model->vocab_size;
  auto step = TokenForward::create(*model->engine, T, V);
  if (!step.ok()) {
    std::fprintf(stderr, "error: %s\n", step.status().message().c_str());
    return kExitFailure;
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t>& p = prompts[i];
    if (static_cast<int64_t>(p.size()) > T) {
      std::fprintf(stderr, "error: prompt %zu has %zu tokens, more than the block size %lld\n", i,
                   p.size(), static_cast<long long>(T));
      return kExitUsage;
    }
    for (int32_t t : p)
      if (t >= V) {
        std::fprintf(stderr, "error: prompt %zu: token %d is >= the model's vocab_size %lld\n", i,
                     t, static_cast<long long>(V));
        return kExitUsage;
      }
    double loss = 0;
    const Status status = step->run(p, &loss);
    if (!status.ok()) {
      std::fprintf(stderr, "error: %s\n", status.message().c_str());
      return kExitFailure;
    }
    const std::vector<float>& logits = step->logits();
    std::string line = "{\"prompt\": " + std::to_string(i) + ", \"loss\": ";
    char number[32];
    if (p.size() >= 2 && std::isfinite(loss)) {
      std::snprintf(number, sizeof number, "%.9g", loss);
      line += number;
    } else {
      line += "null";  // a single token has no target
    }
    line += ", \"logits\": [";
    for (int64_t v = 0; v < V; ++v) {
      std::snprintf(number, sizeof number, "%s%.9g", v ? ", " : "", logits[v]);
      line += number;
    }
    std::printf("%s]}\n", line.c_str());
  }
  return kExitOk;
}

}  // namespace dscore::cli
