// bench/gpu/gpt_gpu: GPT-2 124M (12 layers, n_embd 768, 12 heads, T 1024,
// vocab 50257) trained by the engine on one GPU, bf16, the nccl backend:
// tokens/s and MFU at ZeRO stages 0, 2 and 3 against the GPU's bf16 matmul
// rate measured in the same run (bench/gpu_matmul_rate.h; llm.c reaches
// about 50%), and ZeRO-Offload (stage 2, offload_optimizer "cpu",
// pin_memory) whose optimizer phase is read against what it must move:
// 4 bytes per owned parameter over PCIe (bf16 gradients out, bf16
// parameters in) at the pinned copy rate, and 28 per parameter through the
// CPU's memory (AdamW's read p, g, m, v and write p, m, v, in fp32 and
// bf16) at the rate of a parallel memcpy, both measured here. The update
// overlaps the copies, so the floor is the larger of the two. With
// --nvme DIR, ZeRO-3 with the optimizer state and the parameters on NVMe
// under DIR (pipelined reads and writes; max_in_cpu 0, so every gather
// reads its shards from the disk), whose optimizer phase is read
// against the disk: 12 bytes per parameter read and 12 written (fp32
// master, exp_avg, exp_avg_sq) plus the new bf16 parameters written, the
// reads and writes one after the other at the rates of the same folder
// through the same swapper (core/offload/swap_bandwidth.h), measured here;
// and the rest of the step against the parameters' reads: 2 bytes per
// parameter for the forward's gathers and 2 for the backward's.
// MFU counts 6N + 12 L C T FLOP per token (N without the position
// embedding), as nanoGPT and llm.c do.
//
//   gpt_gpu [--steps S] [--micro B] [--stages 0,2,3] [--no-offload] [--nvme DIR]
//           [--partial RATIO] [--profile] [--tiny]
//
// `--stages none` runs no in-memory stage (only --nvme, say). --partial
// RATIO adds ZeRO-3 with partial offload (offload_optimizer.ratio RATIO,
// sub_group_size 1e7: 13 sub-groups, the first floor((1 - RATIO) * 13)
// updated on the GPU, the rest on the host), its optimizer phase beside
// the full offload's.
// --tiny runs every configuration on a tiny GPT with small limits: the
// CUDA emulation's smoke run of the bench (bench/gpu/CMakeLists.txt).
// --profile brackets the last timed step of each run with cudaProfilerStart
// and cudaProfilerStop, so `ncu --profile-from-start off` measures that
// step's kernels alone (scripts/gpu-bundle/run-gpu-profile.sh).
//
// Exits 0 with a message where no CUDA device is present. Sets
// DSCORE_EXPERIMENTAL_CUDA_ENGINE=1 (docs/gpu.md).
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/data/sampler.h"
#include "core/data/source.h"
#include "core/engine/engine_testing.h"
#include "core/engine/engine_timing.h"
#include "core/engine/initialize.h"
#include "core/offload/swap_bandwidth.h"
#include "gpu_matmul_rate.h"
#include "host_memory_rate.h"

namespace {

using Clock = std::chrono::steady_clock;

// The model, and the sizes of the limits measured beside it.
struct Shape {
  const char* name;
  int layers, embd, heads, block, vocab;
  int64_t sub_group;              // --partial's sub_group_size
  int64_t matmul_n;               // the cuBLAS rate's products
  int matmul_iterations;          // and how many are timed
  size_t copy_bytes, disk_bytes;  // the pinned copy's and the disk probe's
};
constexpr Shape kGpt2 = {
    "GPT-2 124M", 12, 768, 12, 1024, 50257, 10000000, 8192, 20, size_t{256} << 20, size_t{1} << 30};
// --tiny: every configuration on a tiny GPT, in seconds on the CUDA
// emulation (its ctest), so a bench run on a lent GPU does not fail on
// the bench's own mistakes. Its figures measure nothing.
constexpr Shape kTiny = {"a tiny GPT (--tiny)", 2, 64, 2, 64, 256, 4096, 256, 2, size_t{1} << 20,
                         size_t{16} << 20};
Shape g_shape = kGpt2;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "gpt_gpu: %s\n", what.c_str());
  std::exit(1);
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(e));
}

std::string write_corpus() {
  const std::string path = (std::filesystem::temp_directory_path() / "dscore_gpt_gpu.txt").string();
  std::ofstream out(path);
  for (int i = 0; i < 20000; ++i)
    out << "the quick brown fox jumps over the lazy dog " << i << " times; ";
  return path;
}

// `offload_json`: zero_optimization keys after the stage ("" for none; then
// FusedAdam on the device, else the CPU AdamW).
std::string config_text(int micro, int steps, int stage, const std::string& offload_json,
                        const std::string& corpus) {
  const bool offload = !offload_json.empty();
  return std::string(R"({"plugins": {"paths": [")") + DSCORE_BUILD_PLUGIN_DIR +
         R"("]}, "device": "cuda", "comm": {"backend": "nccl"},
  "train_batch_size": )" +
         std::to_string(micro) + R"(, "train_micro_batch_size_per_gpu": )" + std::to_string(micro) +
         R"(, "train_steps": )" + std::to_string(steps + 1) +
         R"(, "bf16": {"enabled": true},
  "zero_optimization": {"stage": )" +
         std::to_string(stage) + offload_json + R"(},
  "optimizer": {"type": ")" +
         (offload ? "AdamW" : "FusedAdam") + R"(", "params": {"lr": 0.0006}},
  "model": {"type": "gpt", "n_layer": )" +
         std::to_string(g_shape.layers) + R"(, "n_head": )" + std::to_string(g_shape.heads) +
         R"(, "n_embd": )" + std::to_string(g_shape.embd) + R"(, "block_size": )" +
         std::to_string(g_shape.block) + R"(, "vocab_size": )" + std::to_string(g_shape.vocab) +
         R"(, "device": "cuda", "cuda_dtype": "bf16"},
  "data": {"type": "text", "path": ")" +
         corpus + R"("}})";
}

struct Figures {
  double tokens_per_second = 0;
  double flops_per_token = 0;
  double optimizer_seconds = 0;  // per step
  double step_seconds = 0;
  int64_t params = 0;
  dscore::EngineTiming timing;  // the measured steps' (engine_timing.h)
  // GPU memory: the plan's (states, buffers, declared activations), and
  // what the run took (cudaMemGetInfo's free bytes before the engine and
  // after the steps; the memory pools keep what they held).
  int64_t planned_bytes = 0, activation_bytes = 0, used_bytes = 0;
};

size_t free_gpu_bytes() {
  size_t free_bytes = 0, total = 0;
  check(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo");
  return free_bytes;
}

constexpr const char* kZeroOffload =
    R"(, "offload_optimizer": {"device": "cpu", "pin_memory": true})";

std::string partial_offload(const std::string& ratio) {
  return R"(, "sub_group_size": )" + std::to_string(g_shape.sub_group) +
         R"(, "offload_optimizer": {"device": "cpu", "pin_memory": true, "ratio": )" + ratio + "}";
}

std::string nvme_offload(const std::string& folder) {
  return R"(, "offload_optimizer": {"device": "nvme", "nvme_path": ")" + folder +
         R"(", "pipeline_read": true, "pipeline_write": true, "buffer_count": 3},
  "offload_param": {"device": "nvme", "max_in_cpu": 0, "nvme_path": ")" +
         folder + R"("})";
}

// `profile_last_step`: --profile.
Figures train(int micro, int steps, int stage, const std::string& offload_json,
              const std::string& corpus, bool profile_last_step) {
  dscore::InitializeOptions trusted = dscore::options_with_environment();
  trusted.trust_config_plugin_paths = true;  // the build's plugin folder, named here
  auto setup = dscore::prepare_text(config_text(micro, steps, stage, offload_json, corpus),
                                    "gpt_gpu.json", ".", trusted);
  if (!setup.ok()) die(setup.status().message());
  if (!setup->loaded.ok()) die(dscore::format_config_errors(setup->loaded));
  const size_t free_before = free_gpu_bytes();
  auto engine = dscore::build_engine(*setup, nullptr);
  if (!engine.ok()) die(engine.status().message());
  dscore::Engine& e = **engine;
  const auto& cfg = e.config();
  auto source = dscore::data::make_batch_source(cfg, e.model());
  if (!source.ok()) die(source.status().message());
  dscore::data::DistributedSampler sampler(cfg.batch, e.world_size(), e.rank());
  dscore::data::HostBatch batch(e.model().description(), cfg.batch.train_micro_batch_size_per_gpu);
  auto step = [&](int64_t s) {
    if (auto st = (*source)->fill(sampler.micro_batch(s, 0), &batch); !st.ok()) die(st.message());
    if (auto loss = e.forward_backward(batch.view()); !loss.ok()) die(loss.status().message());
    if (auto st = e.step(); !st.ok()) die(st.message());
  };
  step(0);  // warm-up: allocations, cuBLAS handles, the CUDA module
  dscore::EngineTesting::reset_timing(e);
  const auto start = Clock::now();
  for (int64_t s = 1; s <= steps; ++s) {
    const bool profiled = profile_last_step && s == steps;
    if (profiled) check(cudaProfilerStart(), "cudaProfilerStart");
    step(s);
    if (profiled) check(cudaProfilerStop(), "cudaProfilerStop");
  }
  const double elapsed = seconds_since(start);
  const dscore::EngineTiming timing = dscore::EngineTesting::timing(e);
  Figures f;
  f.params = e.layout().total_numel();
  const Shape& m = g_shape;
  const double n = static_cast<double>(f.params - int64_t{m.block} * m.embd);  // without wpe
  f.flops_per_token = 6.0 * n + 12.0 * m.layers * m.embd * m.block;
  f.tokens_per_second = static_cast<double>(steps) * micro * m.block / elapsed;
  f.step_seconds = elapsed / steps;
  f.optimizer_seconds = static_cast<double>(timing.optimizer_ns) * 1e-9 / steps;
  f.timing = timing;
  f.planned_bytes = e.plan().device_memory();
  f.activation_bytes = e.plan().memory.activations;
  f.used_bytes = static_cast<int64_t>(free_before) - static_cast<int64_t>(free_gpu_bytes());
  return f;
}

// Pinned host <-> device, 256 MiB each way, best of 5: bytes per second.
double pinned_copy_rate() {
  const size_t bytes = g_shape.copy_bytes;
  void *host = nullptr, *dev = nullptr;
  check(cudaMallocHost(&host, bytes), "cudaMallocHost");
  check(cudaMalloc(&dev, bytes), "cudaMalloc");
  std::memset(host, 1, bytes);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t = Clock::now();
    check(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
    check(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    best = std::min(best, seconds_since(t));
  }
  cudaFree(dev);
  cudaFreeHost(host);
  return 2.0 * static_cast<double>(bytes) / best;
}

// The folder's swap rates through the nvme plugin (what io-bench measures):
// 1 GiB written, synced, read back.
dscore::offload::SwapBandwidth disk_rate(const std::string& folder, const std::string& corpus) {
  dscore::InitializeOptions trusted = dscore::options_with_environment();
  trusted.trust_config_plugin_paths = true;  // the build's plugin folder, named here
  auto setup = dscore::prepare_text(config_text(1, 1, 3, nvme_offload(folder), corpus),
                                    "gpt_gpu.json", ".", trusted);
  if (!setup.ok()) die(setup.status().message());
  auto swapper = dscore::offload::make_swapper(*setup->registry, dscore::config::default_aio(), {});
  if (!swapper.ok()) die(swapper.status().message());
  auto rate =
      dscore::offload::measure_swap(**swapper, folder + "/gpt_gpu_probe.swp", g_shape.disk_bytes);
  if (!rate.ok()) die(rate.status().message());
  std::filesystem::remove(folder + "/gpt_gpu_probe.swp");
  return *rate;
}

void print_line(const std::string& what, const Figures& f, double peak_flops) {
  const double achieved = f.tokens_per_second * f.flops_per_token;
  std::printf(
      "%-28s %9.0f tokens/s  %7.1f TFLOP/s  MFU %5.1f%%  step %7.1f ms  optimizer %6.1f ms\n",
      what.c_str(), f.tokens_per_second, achieved / 1e12, 100.0 * achieved / peak_flops,
      f.step_seconds * 1e3, f.optimizer_seconds * 1e3);
  // Where the host's time per step went (engine_timing.h): in the model's
  // call (enqueueing, and the wait for the loss), in the hooks, finishing the
  // micro-step's reductions, the step's statistics and comm waits.
  const dscore::EngineTiming& t = f.timing;
  const double per_step = t.steps > 0 ? 1e-6 / static_cast<double>(t.steps) : 0.0;
  std::printf(
      "%-28s host per step: model call %.1f ms, hooks %.1f ms, finishing reductions %.1f ms, "
      "statistics %.1f ms, comm waits %.1f ms, other %.1f ms\n",
      "", static_cast<double>(t.model_ns()) * per_step, static_cast<double>(t.hooks_ns) * per_step,
      static_cast<double>(t.reduce_finish_ns) * per_step,
      static_cast<double>(t.statistics_ns) * per_step,
      static_cast<double>(t.comm_wait_ns) * per_step,
      static_cast<double>(t.overhead_ns()) * per_step);
  // The plan's GPU memory against what the run took: the fit check's
  // figure on real hardware (the CUDA contexts' own memory is taken before).
  std::printf("%-28s GPU memory: planned %.1f MiB (activations %.1f MiB), the run took %.1f MiB\n",
              "", static_cast<double>(f.planned_bytes) / (1 << 20),
              static_cast<double>(f.activation_bytes) / (1 << 20),
              static_cast<double>(f.used_bytes) / (1 << 20));
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 10, micro = 8;
  bool offload = true, profile = false;
  std::string nvme, partial;
  std::vector<int> stages = {0, 2, 3};
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--no-offload") {
      offload = false;
    } else if (k == "--tiny") {
      g_shape = kTiny;
    } else if (k == "--profile") {
      profile = true;
    } else if (i + 1 < argc && k == "--nvme") {
      nvme = argv[++i];
    } else if (i + 1 < argc && k == "--partial") {
      partial = argv[++i];
    } else if (i + 1 < argc && k == "--steps") {
      steps = std::max(1, std::atoi(argv[++i]));
    } else if (i + 1 < argc && k == "--micro") {
      micro = std::max(1, std::atoi(argv[++i]));
    } else if (i + 1 < argc && k == "--stages") {
      stages.clear();
      for (const char* p = argv[++i]; *p != '\0'; ++p)
        if (*p >= '0' && *p <= '3') stages.push_back(*p - '0');
    } else {
      std::fprintf(stderr,
                   "usage: gpt_gpu [--steps S] [--micro B] [--stages 0,2,3] [--no-offload] "
                   "[--nvme DIR] [--partial RATIO] [--profile] [--tiny]\n");
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("gpt_gpu: no CUDA device; nothing measured\n");
    return 0;
  }
  ::setenv("DSCORE_EXPERIMENTAL_CUDA_ENGINE", "1", 1);
  const dscore::bench::GpuMatmulRate rate =
      dscore::bench::measure_gpu_matmul_rate(g_shape.matmul_n, g_shape.matmul_iterations);
  const double peak = rate.bf16_tflops * 1e12;
  const std::string corpus = write_corpus();
  std::printf(
      "gpt_gpu: %s (%d layers, n_embd %d, %d heads, T %d, vocab %d), bf16, micro "
      "batch %d, %d timed steps after 1 warm-up, on %s\n",
      g_shape.name, g_shape.layers, g_shape.embd, g_shape.heads, g_shape.block, g_shape.vocab,
      micro, steps, rate.device.c_str());
  std::printf("limit: cuBLAS bf16 matmul %.1f TFLOP/s (n = %lld); MFU is against it\n",
              rate.bf16_tflops, static_cast<long long>(rate.n));
  std::fflush(stdout);
  for (int stage : stages) {
    print_line("ZeRO-" + std::to_string(stage), train(micro, steps, stage, "", corpus, profile),
               peak);
    std::fflush(stdout);
  }
  if (offload) {
    const Figures f = train(micro, steps, 2, kZeroOffload, corpus, profile);
    print_line("ZeRO-2 + ZeRO-Offload", f, peak);
    const double pcie = pinned_copy_rate(), memory = dscore::bench::measure_host_memory_rate();
    const double n = static_cast<double>(f.params);
    const double pcie_s = 4.0 * n / pcie, memory_s = 28.0 * n / memory;
    const double floor = std::max(pcie_s, memory_s);
    std::printf(
        "offload optimizer phase %.1f ms; floor %.1f ms = max(4 B x N over PCIe at %.1f GB/s: "
        "%.1f ms, 28 B x N through host memory at %.1f GB/s: %.1f ms); %.0f%% of the floor's "
        "speed\n",
        f.optimizer_seconds * 1e3, floor * 1e3, pcie / 1e9, pcie_s * 1e3, memory / 1e9,
        memory_s * 1e3, 100.0 * floor / f.optimizer_seconds);
  }
  if (!partial.empty()) {
    const Figures f = train(micro, steps, 3, partial_offload(partial), corpus, profile);
    print_line("ZeRO-3 + partial offload " + partial, f, peak);
    std::printf("partial offload (ratio %s) optimizer phase %.1f ms\n", partial.c_str(),
                f.optimizer_seconds * 1e3);
  }
  if (!nvme.empty()) {
    std::filesystem::create_directories(nvme);
    const Figures f = train(micro, steps, 3, nvme_offload(nvme), corpus, profile);
    print_line("ZeRO-3 + NVMe (state, params)", f, peak);
    const dscore::offload::SwapBandwidth disk = disk_rate(nvme, corpus);
    const double n = static_cast<double>(f.params);
    // The reads and the writes one after the other: the disk does both.
    const double disk_s =
        12.0 * n / (disk.read_gbps() * 1e9) + 14.0 * n / (disk.write_gbps() * 1e9);
    std::printf(
        "nvme optimizer phase %.1f ms; disk time %.1f ms = 12 B x N read at %.2f GB/s + 14 B x N "
        "written at %.2f GB/s (%s); the phase at %.0f%% of the disk's speed\n",
        f.optimizer_seconds * 1e3, disk_s * 1e3, disk.read_gbps(), disk.write_gbps(), nvme.c_str(),
        100.0 * disk_s / f.optimizer_seconds);
    const double reads_s = 4.0 * n / (disk.read_gbps() * 1e9);
    const double rest_s = f.step_seconds - f.optimizer_seconds;
    std::printf(
        "nvme forward and backward %.1f ms; parameter reads %.1f ms = 4 B x N at %.2f GB/s "
        "(max_in_cpu 0); the rest of the step at %.0f%% of the disk's speed\n",
        rest_s * 1e3, reads_s * 1e3, disk.read_gbps(), 100.0 * reads_s / rest_s);
  }
  std::filesystem::remove(corpus);
  std::printf("gpt_gpu: every configuration ran\n");
  return 0;
}
