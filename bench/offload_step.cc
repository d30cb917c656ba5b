// bench/offload_step: the optimizer step with its state offloaded, against
// what the state's memory can move.
//
// --to nvme (the default): the state on NVMe against the disk. One rank
// trains a bf16 mlp of --params parameters (default 500M) with AdamW at ZeRO
// stage 1 and "offload_optimizer": {"device": "nvme"}: the fp32 master,
// exp_avg and exp_avg_sq (12 bytes per parameter) live in swap files under
// --dir and every step reads and writes all of them, tile by tile, through
// 3 tile buffers (pipeline_read and pipeline_write). The limit, measured in
// the same run and folder by the disk probe (core/offload/disk_probe.h,
// without the Swapper): moving those bytes at the disk's sequential
// bandwidth. Reads and writes overlap in the pipeline, so the limit is the
// slower direction, max(bytes / read rate, bytes / write rate); the serial
// sum is printed beside it. Target: <= 1.2x.
//
// --to cpu: ZeRO-Offload ("offload_optimizer": {"device": "cpu"}, stage 2,
// as bench/gpu/gpt_gpu runs it from a GPU) on the CPU device: the master and
// slots in host memory, the gradients copied to the state's host copy and
// the new bf16 parameters copied back on its copy stream
// (core/owned_state/host_offload_state.h). The limit: the update's 28 bytes per
// parameter (read the bf16 gradient, the fp32 master, exp_avg, exp_avg_sq;
// write them and the bf16 parameter) at the rate of a parallel memcpy
// measured in the same run (bench/host_memory_rate.h). Target: <= 1.25x.
//
// Printed: each step's optimizer time, the limit, and their ratio. The
// micro-batch is one sample, so the forward and backward passes are small
// beside the step; they are timed apart.
//
//   offload_step [--to nvme|cpu] [--params N] [--dir PATH] [--steps K]
//                [--sub-group-size N] [--no-pipeline]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "core/data/sampler.h"
#include "core/data/source.h"
#include "core/engine/initialize.h"
#include "core/offload/disk_probe.h"
#include "host_memory_rate.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string to = "nvme";  // where the optimizer state goes: nvme or cpu
  int64_t params = 500'000'000;
  std::string base = "/tmp";
  int steps = 3;
  int64_t sub_group_size = 50'000'000;
  bool pipeline = true;
};

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--to" && has_value)
      o->to = argv[++i];
    else if (a == "--params" && has_value)
      o->params = std::atoll(argv[++i]);
    else if (a == "--dir" && has_value)
      o->base = argv[++i];
    else if (a == "--steps" && has_value)
      o->steps = std::atoi(argv[++i]);
    else if (a == "--sub-group-size" && has_value)
      o->sub_group_size = std::atoll(argv[++i]);
    else if (a == "--no-pipeline")
      o->pipeline = false;
    else
      return false;
  }
  return (o->to == "nvme" || o->to == "cpu") && o->params > 0 && o->steps > 0 &&
         o->sub_group_size > 0;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// An mlp of about `params` parameters: 7 hidden layers of width w (6 w x w matrices, and more).
std::string config_text(const Options& o, const std::string& swap_dir) {
  const auto width = static_cast<long long>(std::sqrt(static_cast<double>(o.params) / 7.0));
  const char* pipe = o.pipeline ? "true" : "false";
  char zero[1024];
  if (o.to == "cpu")
    std::snprintf(zero, sizeof zero,
                  R"({"stage": 2, "sub_group_size": %lld,
                      "offload_optimizer": {"device": "cpu", "pin_memory": true}})",
                  static_cast<long long>(o.sub_group_size));
  else
    std::snprintf(zero, sizeof zero,
                  R"({"stage": 1, "sub_group_size": %lld,
                      "offload_optimizer": {"device": "nvme", "nvme_path": "%s",
                        "pipeline_read": %s, "pipeline_write": %s, "buffer_count": 4}})",
                  static_cast<long long>(o.sub_group_size), swap_dir.c_str(), pipe, pipe);
  char text[2048];
  std::snprintf(text, sizeof text,
                R"({"plugins": {"paths": ["%s"]}, "train_batch_size": 1,
                    "optimizer": {"type": "AdamW", "params": {"lr": 0.0001, "weight_decay": 0.01}},
                    "model": {"type": "mlp", "input_dim": %lld, "hidden_dim": %lld, "output_dim": 4,
                              "n_hidden_layers": 7},
                    "bf16": {"enabled": true},
                    "zero_optimization": %s})",
                DSCORE_BUILD_PLUGIN_DIR, width, width, zero);
  return text;
}

dscore::Result<dscore::offload::DiskProbeResult> probe(const std::string& dir) {
  dscore::offload::DiskProbeOptions p;
  p.folder = dir;
  p.file_bytes = 2ull << 30;
  return dscore::offload::probe_disk(p);
}

// Trains o.steps steps, printing each; the best optimizer step in seconds.
dscore::Result<double> train(dscore::Engine& engine, const Options& o, double moved_bytes) {
  const auto& cfg = engine.config();
  DSCORE_ASSIGN_OR_RETURN(auto source, dscore::data::make_batch_source(cfg, engine.model()));
  dscore::data::DistributedSampler sampler(cfg.batch, 1, 0);
  dscore::data::HostBatch batch(engine.model().description(),
                                cfg.batch.train_micro_batch_size_per_gpu);
  double best_step = 1e30;
  for (int s = 0; s < o.steps; ++s) {
    DSCORE_RETURN_IF_ERROR(source->fill(sampler.micro_batch(s, 0), &batch));
    const auto fb = Clock::now();
    DSCORE_RETURN_IF_ERROR(engine.forward_backward(batch.view()).status());
    const double fb_s = seconds_since(fb);
    const auto st = Clock::now();
    DSCORE_RETURN_IF_ERROR(engine.step());
    const double step_s = seconds_since(st);
    best_step = std::min(best_step, step_s);
    std::printf("step %d: forward+backward %.2f s, optimizer step %.3f s (%.2f GB/s moved)\n",
                s + 1, fb_s, step_s, moved_bytes / step_s / 1e9);
  }
  return best_step;
}

dscore::Result<std::unique_ptr<dscore::Engine>> make_engine(const Options& o,
                                                            const std::string& swap_dir) {
  dscore::InitializeOptions trusted = dscore::options_with_environment();
  trusted.trust_config_plugin_paths = true;  // the build's plugin folder, named here
  auto setup = dscore::prepare_text(config_text(o, swap_dir), "offload_step.json", ".", trusted);
  if (!setup.ok()) return setup.status();
  if (!setup->loaded.ok())
    return dscore::invalid_argument(dscore::format_config_errors(setup->loaded));
  const auto created = Clock::now();
  DSCORE_ASSIGN_OR_RETURN(std::unique_ptr<dscore::Engine> engine,
                          dscore::build_engine(*setup, nullptr));
  std::printf("engine created in %.1f s\n", seconds_since(created));
  return engine;
}

dscore::Status run_cpu(const Options& o) {
  DSCORE_ASSIGN_OR_RETURN(std::unique_ptr<dscore::Engine> engine, make_engine(o, ""));
  const double n = static_cast<double>(engine->plan().numel);
  std::printf("parameters %lld, ZeRO-Offload (stage 2) to host memory\n",
              static_cast<long long>(engine->plan().numel));
  DSCORE_ASSIGN_OR_RETURN(const double best_step, train(*engine, o, 28.0 * n));
  engine.reset();
  const double rate = dscore::bench::measure_host_memory_rate();
  const double limit = 28.0 * n / rate;
  std::printf("host memory: parallel memcpy %.2f GB/s (read + written)\n", rate / 1e9);
  std::printf(
      "optimizer step (best) %.3f s vs the host memory limit %.3f s (28 B x N at that rate): "
      "%.2fx (target <= 1.25x)\n",
      best_step, limit, best_step / limit);
  return dscore::Status::Ok();
}

dscore::Status run_nvme(const Options& o) {
  const fs::path dir = fs::path(o.base) / ("dscore_offload_step_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } cleanup{dir};

  DSCORE_ASSIGN_OR_RETURN(auto before, probe(dir.string()));
  DSCORE_ASSIGN_OR_RETURN(std::unique_ptr<dscore::Engine> engine, make_engine(o, dir.string()));
  const dscore::zero::ZeroPlan plan = engine->plan();
  const double disk = static_cast<double>(plan.memory.disk());
  std::printf("parameters %lld, swap files %.2f GiB, tile buffers %.2f GiB in RAM\n",
              static_cast<long long>(plan.numel), disk / (1 << 30),
              static_cast<double>(plan.memory.offload_tiles) / (1 << 30));
  DSCORE_ASSIGN_OR_RETURN(const double best_step, train(*engine, o, 2 * disk));
  engine.reset();  // removes the swap files before the second probe
  DSCORE_ASSIGN_OR_RETURN(auto after, probe(dir.string()));
  const double read_gbps = std::max(before.read_gbps(), after.read_gbps());
  const double write_gbps = std::max(before.write_gbps(), after.write_gbps());
  // Reads and writes overlap in the pipeline, so the tighter limit is the
  // slower of the two directions; one after the other is the looser one.
  const double read_s = disk / (read_gbps * 1e9), write_s = disk / (write_gbps * 1e9);
  const double limit = std::max(read_s, write_s);
  std::printf(
      "disk probe (%s, best of before/after): read %.2f GB/s (%.2f, %.2f), write %.2f GB/s "
      "(%.2f, %.2f)\n",
      before.backend.c_str(), read_gbps, before.read_gbps(), after.read_gbps(), write_gbps,
      before.write_gbps(), after.write_gbps());
  std::printf("moving %.2f GiB each way at those rates: %.2f s reading, %.2f s writing\n",
              disk / (1 << 30), read_s, write_s);
  std::printf(
      "optimizer step (best) %.2f s vs the disk limit %.2f s (the slower direction; %.2f s "
      "one after the other): %.2fx (target <= 1.2x)\n",
      best_step, limit, read_s + write_s, best_step / limit);
  return dscore::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) {
    std::fprintf(stderr,
                 "usage: offload_step [--to nvme|cpu] [--params N] [--dir PATH] [--steps K] "
                 "[--sub-group-size N] [--no-pipeline]\n");
    return 2;
  }
  const dscore::Status s = o.to == "cpu" ? run_cpu(o) : run_nvme(o);
  if (!s.ok()) {
    std::fprintf(stderr, "offload_step: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}
