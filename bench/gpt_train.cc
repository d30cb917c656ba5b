// GPT training throughput on the CPU: tokens/s of a ~10M-parameter gpt
// (6 layers, 384 wide, T 256, byte-level text) at 1 rank and at 2 ranks,
// and the achieved FLOP/s (6N + 12 L C T per token, N = parameters without
// the position embedding, as nanoGPT's MFU) as a fraction of the best fp32
// GEMM rate measured in the same run on all cores (cpu_gemm_rate.h; target
// >= 85%), ZeRO-0 and ZeRO-3 at 2 ranks (ZeRO-3 / ZeRO-0 target >= 0.95).
// Also the activation memory and the step time with activation
// checkpointing on.
//
//   gpt_train [--steps S] [--micro B]           1 rank here, then 2 ranks under mpirun
//   gpt_train --ranks 2 ...                     (the 2-rank half; started by the first)
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/base/memory.h"
#include "core/base/process_heap.h"
#include "core/comm/job_env.h"
#include "core/comm/launcher.h"
#include "core/data/sampler.h"
#include "core/data/source.h"
#include "core/engine/initialize.h"
#include "cpu_gemm_rate.h"

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

constexpr int kLayers = 6, kEmbd = 384, kHeads = 6, kBlock = 256, kVocab = 256;

std::string config_text(int micro, int world, int stage, int steps, bool checkpointing) {
  char text[1600];
  std::snprintf(
      text, sizeof text,
      R"({"plugins": {"paths": ["%s"]}, "train_batch_size": %d, "train_micro_batch_size_per_gpu": %d,
                    "train_steps": %d, "zero_optimization": {"stage": %d},
                    "optimizer": {"type": "AdamW", "params": {"lr": 0.0006}},
                    "model": {"type": "gpt", "n_layer": %d, "n_head": %d, "n_embd": %d, "block_size": %d,
                              "vocab_size": %d},
                    %s
                    "data": {"type": "text", "path": "%s/configs/data/quickstart.txt"}})",
      DSCORE_BUILD_PLUGIN_DIR, micro * world, micro, steps, stage, kLayers, kHeads, kEmbd, kBlock,
      kVocab, checkpointing ? R"("activation_checkpointing": {},)" : "", DSCORE_SOURCE_DIR);
  return text;
}

struct Figures {
  double tokens_per_second = 0;  // all ranks
  double flops_per_token = 0;
  int64_t activation_bytes = 0;  // this rank's "gpt activations"
  int64_t params = 0;
};

Figures train(int micro, int world, int stage, int steps, bool checkpointing) {
  dscore::InitializeOptions trusted = dscore::options_with_environment();
  trusted.trust_config_plugin_paths = true;  // the build's plugin folder, named here
  auto setup = dscore::prepare_text(config_text(micro, world, stage, steps, checkpointing),
                                    "gpt_train.json", ".", trusted);
  if (!setup.ok() || !setup->loaded.ok()) {
    std::fprintf(stderr, "config: %s\n",
                 setup.ok() ? dscore::format_config_errors(setup->loaded).c_str()
                            : setup.status().message().c_str());
    std::exit(1);
  }
  auto engine = dscore::build_engine(*setup, nullptr);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.status().message().c_str());
    std::exit(1);
  }
  dscore::Engine& e = **engine;
  const auto& cfg = e.config();
  auto source = dscore::data::make_batch_source(cfg, e.model());
  if (!source.ok()) {
    std::fprintf(stderr, "%s\n", source.status().message().c_str());
    std::exit(1);
  }
  dscore::data::DistributedSampler sampler(cfg.batch, e.world_size(), e.rank());
  dscore::data::HostBatch batch(e.model().description(), cfg.batch.train_micro_batch_size_per_gpu);
  auto step = [&](int64_t s) {
    if (!(*source)->fill(sampler.micro_batch(s, 0), &batch).ok() ||
        !e.forward_backward(batch.view()).ok() || !e.step().ok())
      std::exit(1);
  };
  step(0);  // warm-up: allocates the activations, touches the memory
  auto start = Clock::now();
  for (int64_t s = 1; s <= steps; ++s) step(s);
  const double elapsed = seconds_since(start);
  Figures f;
  f.params = e.layout().total_numel();
  const double n = static_cast<double>(f.params - kBlock * kEmbd);  // without wpe
  f.flops_per_token = 6.0 * n + 12.0 * kLayers * kEmbd * kBlock;
  f.tokens_per_second = static_cast<double>(steps) * cfg.batch.train_batch_size * kBlock / elapsed;
  f.activation_bytes = static_cast<int64_t>(e.plugin_memory().by_tag()["gpt activations"]);
  return f;
}

void print_line(const char* what, const Figures& f, double gemm_flops) {
  const double achieved = f.tokens_per_second * f.flops_per_token;
  std::printf(
      "%-34s %10.0f tokens/s  %7.2f GFLOP/s  %5.1f%% of the GEMM limit  activations %6.1f "
      "MiB/rank\n",
      what, f.tokens_per_second, achieved / 1e9, 100.0 * achieved / gemm_flops,
      static_cast<double>(f.activation_bytes) / (1 << 20));
}

}  // namespace

int main(int argc, char** argv) {
  // As `dscore run` does, before any thread starts (core/base/process_heap.h).
  if (const auto kept = dscore::apply_heap_policy_from_env(); !kept.ok()) {
    std::fprintf(stderr, "%s\n", kept.status().message().c_str());
    return 1;
  }
  int steps = 4, micro = 8, ranks = 1;
  double limit = 0;  // GFLOP/s; the 2-rank half gets the first half's
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--steps")
      steps = std::stoi(argv[i + 1]);
    else if (k == "--micro")
      micro = std::stoi(argv[i + 1]);
    else if (k == "--ranks")
      ranks = std::stoi(argv[i + 1]);
    else if (k == "--limit-gflops")
      limit = std::stod(argv[i + 1]);
  }
  auto job = dscore::comm::detect_job_env();
  if (!job.ok()) return 1;
  if (ranks == 2 && job->world_size == 1) {
    std::vector<std::string> args(argv + 1, argv + argc);
    std::fprintf(stderr, "%s\n", dscore::comm::exec_under_mpirun(2, args).message().c_str());
    return 1;
  }
  const bool leader = job->rank == 0;
  if (ranks == 2) {
    const Figures zero0 = train(micro, 2, 0, steps, false);
    const Figures zero3 = train(micro, 2, 3, steps, false);
    if (leader) {
      print_line("2 ranks, ZeRO-0", zero0, limit * 1e9);
      print_line("2 ranks, ZeRO-3", zero3, limit * 1e9);
      std::printf("ZeRO-3 / ZeRO-0 at 2 ranks: %.3f (target >= 0.95)\n",
                  zero3.tokens_per_second / zero0.tokens_per_second);
    }
    return 0;
  }
  // The limit first, on all cores, before any engine holds threads.
  const dscore::bench::CpuGemmRate rate = dscore::bench::measure_cpu_gemm_rate();
  const double gemm = rate.fp32_gflops * 1e9;
  const Figures one = train(micro, 1, 0, steps, false);
  const Figures ckpt = train(micro, 1, 0, steps, true);
  std::printf(
      "gpt_train: %lld parameters (%d layers, n_embd %d, %d heads, T %d, vocab %d), micro batch "
      "%d, %d steps, fp32, AdamW\n",
      static_cast<long long>(one.params), kLayers, kEmbd, kHeads, kBlock, kVocab, micro, steps);
  std::printf("%s\n", dscore::bench::describe(rate).c_str());
  std::printf("FLOPs per token: %.3g (6N + 12 L C T); target >= 85%% of the GEMM limit\n",
              one.flops_per_token);
  print_line("1 rank, ZeRO-0", one, gemm);
  print_line("1 rank, activation checkpointing", ckpt, gemm);
  std::printf("activation checkpointing: %.1f%% of the activation memory, %.2fx the step time\n",
              100.0 * static_cast<double>(ckpt.activation_bytes) /
                  static_cast<double>(one.activation_bytes),
              one.tokens_per_second / ckpt.tokens_per_second);
  std::fflush(stdout);
  // The 2-rank half in its own processes (mpirun), after this one's output.
  const pid_t child = fork();
  if (child == 0) {
    const std::string s = std::to_string(steps), m = std::to_string(micro),
                      l = std::to_string(rate.fp32_gflops);
    execl("/proc/self/exe", argv[0], "--ranks", "2", "--steps", s.c_str(), "--micro", m.c_str(),
          "--limit-gflops", l.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
