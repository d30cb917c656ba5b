// dscore forward (--checkpoint DIR [--tag T] | --config FILE) --tokens IDS
// Runs a token model (gpt, gpt2) forward over prompts and prints, one JSON
// line per prompt, its mean next-token loss and the logits at its last
// token: to compare with another implementation (transformers) or inspect a
// checkpoint. --config evaluates the weights the config's model starts from
// (e.g. a from_pretrained folder's) without training.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/cli/commands.h"
#include "core/cli/options.h"
#include "core/engine/generation.h"

namespace dscore::cli {
namespace {

constexpr const char* kUsage =
    "usage: dscore forward (--checkpoint DIR [--tag T] | --config FILE) --tokens 1,2,3[;4,5,...]";

// "1,2,3;4,5" -> {{1,2,3},{4,5}}; false on anything else.
bool parse_prompts(const std::string& text, std::vector<std::vector<int32_t>>* out) {
  std::stringstream prompts(text);
  std::string prompt;
  while (std::getline(prompts, prompt, ';')) {
    std::vector<int32_t> ids;
    std::stringstream in(prompt);
    std::string item;
    while (std::getline(in, item, ',')) {
      try {
        size_t used = 0;
        const long long v = std::stoll(item, &used);
        if (used != item.size() || v < 0 || v > INT32_MAX) return false;
        ids.push_back(static_cast<int32_t>(v));
      } catch (const std::exception&) {
        return false;
      }
    }
    if (ids.empty()) return false;
    out->push_back(std::move(ids));
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
  if (!parse_options(args, options, {}, kUsage, &vm, &exit_code)) return exit_code;
  std::vector<std::vector<int32_t>> prompts;
  if (dir.empty() == config.empty() || !parse_prompts(tokens, &prompts)) {
    std::fprintf(stderr,
                 "dscore forward: give exactly one of --checkpoint and --config, and --tokens as "
                 "comma-separated ids, prompts separated by ';'\n%s\n",
                 kUsage);
    return kExitUsage;
  }
  auto model = config.empty() ? open_for_inference(dir, tag) : open_config_for_inference(config);
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", model.status().message().c_str());
    return kExitFailure;
  }
  const int64_t T = model->block_size, V = model->vocab_size;
  std::vector<int32_t> window(static_cast<size_t>(T + 1));
  const int64_t shape[2] = {1, T + 1};
  dscore_tensor input{};
  input.struct_size = sizeof input;
  input.data = window.data();
  input.dtype = DSCORE_DTYPE_I32;
  input.device_type = DSCORE_DEVICE_CPU;
  input.ndim = 2;
  input.shape = shape;
  input.numel = T + 1;
  const dscore_tensor* inputs[] = {&input};
  const dscore_batch batch{sizeof(dscore_batch), 1, 1, inputs};
  std::vector<float> logits(static_cast<size_t>(V));
  const int64_t out_shape[2] = {1, V};
  dscore_tensor output{};
  output.struct_size = sizeof output;
  output.data = logits.data();
  output.dtype = DSCORE_DTYPE_F32;
  output.device_type = DSCORE_DEVICE_CPU;
  output.ndim = 2;
  output.shape = out_shape;
  output.numel = V;
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
    std::fill(window.begin(), window.end(), -1);  // -1 = padding
    std::copy(p.begin(), p.end(), window.begin());
    double loss = 0;
    const Status status = model->engine->forward(batch, &output, &loss);
    if (!status.ok()) {
      std::fprintf(stderr, "error: %s\n", status.message().c_str());
      return kExitFailure;
    }
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
