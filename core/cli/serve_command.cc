// dscore serve (--checkpoint DIR | --config F | --hf DIR) [--port 8000]
//              [--host 127.0.0.1] [--batch-size 8] [--max-queue 64]
//              [--tokenizer DIR] [--model-name NAME] [--no-kv-cache]
// An OpenAI-compatible completions server (core/serve) over one model,
// until SIGINT or SIGTERM.
#include <atomic>
#include <csignal>
#include <cstdio>

#include "core/app/batch_generator.h"
#include "core/app/generation.h"
#include "core/cli/commands.h"
#include "core/cli/options.h"
#include "core/serve/completion_service.h"
#include "core/serve/server.h"
#include "core/tokenizer/tokenizer.h"

namespace dscore::cli {
namespace {

constexpr const char* kServeUsage =
    "usage: dscore serve (--checkpoint DIR | --config F | --hf DIR) [--port 8000] "
    "[--host 127.0.0.1]\n"
    "                    [--batch-size 8] [--max-queue 64] [--tokenizer DIR] [--model-name NAME] "
    "[--no-kv-cache]";

std::atomic<bool> g_stop{false};
void request_stop(int) { g_stop = true; }

}  // namespace

int serve_command(const std::vector<std::string>& args) {
  po::options_description options("serve options");
  std::string dir, tag, config, hf, host, tokenizer_dir, name;
  int port = 8000;
  int64_t batch_size = 8, max_queue = 64;
  InferenceOffload offload;
  options.add_options()("checkpoint", po::value<std::string>(&dir),
                        "a checkpoint folder (holding `latest`)")(
      "tag", po::value<std::string>(&tag), "the checkpoint's tag (default: `latest`'s)")(
      "config", po::value<std::string>(&config), "a training config (its model's initial weights)")(
      "hf", po::value<std::string>(&hf), "a Hugging Face model folder (GPT-2, Llama, Qwen, ...)")(
      "host", po::value<std::string>(&host)->default_value("127.0.0.1"),
      "the IPv4 address to listen at (127.0.0.1: this machine only)")(
      "port", po::value<int>(&port)->default_value(8000), "the port (0: any free one)")(
      "batch-size", po::value<int64_t>(&batch_size)->default_value(8),
      "requests decoded together (KV cache slots)")(
      "max-queue", po::value<int64_t>(&max_queue)->default_value(64),
      "requests waiting for a slot before new ones get 429")(
      "tokenizer", po::value<std::string>(&tokenizer_dir),
      "folder with tokenizer.json or tokenizer.model (default: the model's from_pretrained)")(
      "model-name", po::value<std::string>(&name), "the model's name in responses")(
      "no-kv-cache", "decode with forward passes over the last block_size tokens")(
      "offload-param", po::value<std::string>(&offload.offload_param),
      "ZeRO-Inference: the weights in host memory (cpu) or on NVMe (nvme, with --nvme-path), "
      "each layer gathered as it runs; none: whole in memory (default: as the config says)")(
      "nvme-path", po::value<std::string>(&offload.nvme_path),
      "the folder for --offload-param nvme's swap files");
  po::variables_map vm;
  int exit_code = kExitOk;
  if (!parse_options(args, options, {}, kServeUsage, &vm, &exit_code)) return exit_code;
  const int sources = (dir.empty() ? 0 : 1) + (config.empty() ? 0 : 1) + (hf.empty() ? 0 : 1);
  if (sources != 1 || batch_size < 1 || max_queue < 0 || port < 0 || port > 65535) {
    std::fprintf(stderr,
                 "dscore serve: give exactly one of --checkpoint, --config and --hf; "
                 "--batch-size >= 1, --max-queue >= 0, --port 0-65535\n%s\n",
                 kServeUsage);
    return kExitUsage;
  }
  InferenceOptions inference;
  inference.environment = read_engine_environment();
  inference.heap_policy = true;
  inference.offload = offload;
  auto model = open_inference({dir, tag, config, hf}, inference);
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", model.status().message().c_str());
    return kExitFailure;
  }
  if (tokenizer_dir.empty() && model->data_type != "text") tokenizer_dir = model->from_pretrained;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  if (!tokenizer_dir.empty()) {
    auto loaded = tokenizer::load_tokenizer(tokenizer_dir);
    if (loaded.ok()) {
      tok = std::move(*loaded);
    } else if (vm.count("tokenizer") != 0) {
      std::fprintf(stderr, "error: %s\n", loaded.status().message().c_str());
      return kExitFailure;
    }
  }
  auto generator =
      BatchGenerator::create(*model->engine, model->block_size, model->vocab_size, batch_size,
                             vm.count("no-kv-cache") != 0 ? BatchGenerator::CacheMode::kOff
                                                          : BatchGenerator::CacheMode::kAuto);
  if (!generator.ok()) {
    std::fprintf(stderr, "error: %s\n", generator.status().message().c_str());
    return kExitFailure;
  }
  auto listener = serve::Listener::open(host, port);
  if (!listener.ok()) {
    std::fprintf(stderr, "error: %s\n", listener.status().message().c_str());
    return kExitFailure;
  }
  serve::ServedModel served;
  served.name = !name.empty() ? name : !hf.empty() ? hf : !dir.empty() ? dir : config;
  served.tok = tok.get();
  served.byte_level = model->data_type == "text";
  served.vocab_size = model->vocab_size;
  serve::CompletionService service(std::move(*generator), static_cast<size_t>(max_queue));
  serve::CompletionServer server(service, served);
  std::signal(SIGINT, request_stop);
  std::signal(SIGTERM, request_stop);
  std::printf("dscore serve: listening at http://%s:%d/v1/completions (%s; batches of %lld%s)\n",
              host.c_str(), listener->port(), served.name.c_str(),
              static_cast<long long>(batch_size),
              tok                 ? ""
              : served.byte_level ? ", byte-level text"
                                  : ", token ids only");
  std::fflush(stdout);
  server.serve(*listener, g_stop);
  std::printf("dscore serve: stopped\n");
  return kExitOk;
}

}  // namespace dscore::cli
