// dscore: the command-line entry point. A thin dispatcher over the
// subcommands (run, config, plugins, plan, autotune, lr-schedule, loss-scale,
// checkpoint, zero-to-fp32, export-hf, generate, serve, forward, io-bench, tokenize); everything
// else lives in core/.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "core/base/logging.h"
#include "core/base/strings.h"
#include "core/cli/commands.h"

namespace {

const char* kUsage =
    "usage: dscore <command> [options]\n"
    "\n"
    "commands:\n"
    "  run --config F [--steps N] [-n RANKS] [--resume DIR] [--allow-unsupported]\n"
    "      [--trust-config-plugin-paths]\n"
    "                                          train from a ds_config.json\n"
    "  config check F [--world-size N] [--allow-unsupported]\n"
    "                                          validate and print the resolved config\n"
    "  config reference                        print the config key reference (Markdown)\n"
    "  plugins list [--json]                   list the plugins on the search path\n"
    "  plan --config F [-n RANKS]              memory and communication per rank, before running\n"
    "  autotune --config F [-n RANKS] [--memory SIZE] [--run]\n"
    "                                          the fastest config that fits: planned, then "
    "measured\n"
    "  lr-schedule --config F [--steps N] [--csv]\n"
    "                                          preview the lr (and momentum) of every step\n"
    "  loss-scale --config F --overflows OOCC  the fp16 loss scale after each step of a pattern\n"
    "  checkpoint inspect DIR [--tag T]        verify a checkpoint and print what it holds\n"
    "  checkpoint import DEEPSPEED_DIR OUT [--tag T]\n"
    "                                          a DeepSpeed checkpoint as a dscore checkpoint\n"
    "  checkpoint export-deepspeed DIR OUT (--world-size N | --universal) [--stage 1|2]\n"
    "                                          a dscore checkpoint for DeepSpeed's "
    "load_checkpoint\n"
    "  zero-to-fp32 DIR OUT [--max-shard-size 5GB]\n"
    "                                          consolidate a checkpoint into model.safetensors\n"
    "  export-hf DIR OUT [--max-shard-size 5GB] [--dtype fp32|bf16|fp16]\n"
    "                                          a checkpoint as a Hugging Face folder (gpt, gpt2, "
    "llama)\n"
    "  generate (--checkpoint DIR | --config F) (--prompt TEXT | --prompts-file F) [...]\n"
    "                                          continue prompts with a token model (KV cache)\n"
    "  serve (--checkpoint DIR | --config F | --hf DIR) [--port 8000] [...]\n"
    "                                          an OpenAI-compatible /v1/completions server\n"
    "  forward (--checkpoint DIR | --config F) --tokens 1,2,3[;4,5]\n"
    "                                          a token model's loss and last-token logits per "
    "prompt\n"
    "  tokenize --tokenizer DIR --out PREFIX TEXT...\n"
    "                                          tokenize text files into token shards\n"
    "  io-bench PATH                           measure a folder's disk through the NVMe swapper;\n"
    "                                          cache the best \"aio\" settings for \"auto\"\n"
    "\n"
    "  --version                               print the version and plugin ABI\n"
    "  <command> --help                        help for one command\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? dscore::cli::kExitUsage : dscore::cli::kExitOk;
  }
  if (args[0] == "--version" || args[0] == "version") {
    std::printf("%s\n", dscore::cli::version_text().c_str());
    return dscore::cli::kExitOk;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  try {
    if (command == "run") return dscore::cli::run_command(args);
    if (command == "config") return dscore::cli::config_command(args);
    if (command == "plugins") return dscore::cli::plugins_command(args);
    if (command == "lr-schedule") return dscore::cli::lr_schedule_command(args);
    if (command == "loss-scale") return dscore::cli::loss_scale_command(args);
    if (command == "plan") return dscore::cli::plan_command(args);
    if (command == "checkpoint") return dscore::cli::checkpoint_command(args);
    if (command == "zero-to-fp32") return dscore::cli::zero_to_fp32_command(args);
    if (command == "generate") return dscore::cli::generate_command(args);
    if (command == "serve") return dscore::cli::serve_command(args);
    if (command == "export-hf") return dscore::cli::export_hf_command(args);
    if (command == "forward") return dscore::cli::forward_command(args);
    if (command == "io-bench") return dscore::cli::io_bench_command(args);
    if (command == "tokenize") return dscore::cli::tokenize_command(args);
    if (command == "autotune") return dscore::cli::autotune_command(args);
  } catch (const std::exception& e) {
    // A broken invariant inside dscore: report it rather than abort silently.
    dscore::log_error(std::string("internal error: ") + e.what());
    return dscore::cli::kExitFailure;
  }
  std::fprintf(stderr, "dscore: unknown command '%s'%s\n\n%s", command.c_str(),
               dscore::did_you_mean_suffix(
                   command, {"run", "config", "plugins", "lr-schedule", "loss-scale", "plan",
                             "checkpoint", "zero-to-fp32", "export-hf", "generate", "serve",
                             "forward", "io-bench", "tokenize", "autotune"})
                   .c_str(),
               kUsage);
  return dscore::cli::kExitUsage;
}
