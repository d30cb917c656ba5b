// ZeRO throughput at 2 ranks: samples/s for stages 0-3 on an mlp with 302
// parameter tensors, ZeRO-3 as a fraction of ZeRO-0 (target >= 0.85), and
// the per-step engine overhead outside model compute, optimizer, gradient
// statistics and communication (target <= 1 ms). Beside them, limits
// measured in the same run: the allgather bandwidth between the ranks and a
// STREAM-style copy bandwidth.
//
//   zero_throughput [--hidden H] [--batch B] [--steps S]
// starts itself under mpirun -n 2 when no launcher is present.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/base/process_heap.h"
#include "core/comm/job_env.h"
#include "core/comm/launcher.h"
#include "core/data/sampler.h"
#include "core/data/source.h"
#include "core/engine/engine_testing.h"
#include "core/engine/initialize.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string config_text(int stage, int hidden, int batch, int steps) {
  char text[1024];
  std::snprintf(text, sizeof text,
                R"({"plugins": {"paths": ["%s"]}, "train_batch_size": %d, "train_steps": %d,
                    "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
                    "model": {"type": "mlp", "input_dim": %d, "hidden_dim": %d, "output_dim": %d,
                              "n_hidden_layers": 150},
                    "zero_optimization": {"stage": %d, "overlap_comm": true,
                                          "stage3_param_persistence_threshold": 0}})",
                DSCORE_BUILD_PLUGIN_DIR, batch, steps, hidden, hidden, hidden, stage);
  return text;
}

// STREAM-style copy bandwidth of this process, GB/s (read + write bytes).
double copy_bandwidth() {
  const size_t n = size_t{64} << 20;
  std::vector<char> a(n, 1), b(n, 2);
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    auto t = Clock::now();
    std::memcpy(b.data(), a.data(), n);
    best = std::max(best, 2.0 * static_cast<double>(n) / seconds_since(t) / 1e9);
  }
  return best + static_cast<double>(b[n / 2]) * 0;  // keep the copy
}

struct Figures {
  double samples_per_second = 0;
  double overhead_ms = 0, model_ms = 0, comm_wait_ms = 0, optimizer_ms = 0, statistics_ms = 0;
  double preemptions = 0;  // involuntary context switches of the training thread per step
  int64_t tensors = 0;
};

long involuntary_switches() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_nivcsw;
}

Figures run_stage(int stage, int hidden, int batch, int steps, double* allgather_gbps) {
  dscore::InitializeOptions trusted = dscore::options_with_environment();
  trusted.trust_config_plugin_paths = true;  // the build's plugin folder, named here
  auto setup = dscore::prepare_text(config_text(stage, hidden, batch, steps),
                                    "zero_throughput.json", ".", trusted);
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
  dscore::data::DistributedSampler sampler(cfg.batch, e.world_size(), e.rank());
  dscore::data::HostBatch data(e.model().description(), cfg.batch.train_micro_batch_size_per_gpu);
  auto train_step = [&](int64_t step) {
    (void)(*source)->fill(sampler.micro_batch(step, 0), &data);
    if (!e.forward_backward(data.view()).ok() || !e.step().ok()) std::exit(1);
  };
  Figures f;
  train_step(0);  // warm-up: records the stage-3 trace, touches all memory
  dscore::EngineTesting::reset_timing(e);
  const long switches_before = involuntary_switches();
  auto start = Clock::now();
  for (int64_t s = 1; s <= steps; ++s) train_step(s);
  const double elapsed = seconds_since(start);
  f.preemptions = static_cast<double>(involuntary_switches() - switches_before) / steps;
  const dscore::EngineTiming t = dscore::EngineTesting::timing(e);
  f.samples_per_second = steps * cfg.batch.train_batch_size / elapsed;
  const double per_step = 1e-6 / static_cast<double>(steps);
  f.overhead_ms = static_cast<double>(t.overhead_ns()) * per_step;
  f.model_ms = static_cast<double>(t.model_ns()) * per_step;
  f.comm_wait_ms = static_cast<double>(t.comm_wait_ns) * per_step;
  f.optimizer_ms = static_cast<double>(t.optimizer_ns) * per_step;
  f.statistics_ms = static_cast<double>(t.statistics_ns) * per_step;
  f.tensors = static_cast<int64_t>(e.layout().params().size());
  if (allgather_gbps != nullptr) {
    // Allgather bandwidth between the ranks on a buffer the size of the model.
    const int64_t n = e.layout().total_numel();
    std::vector<float> buffer(static_cast<size_t>(n));
    auto& comm = e.communicator();
    const int w = comm.world_size();
    const int64_t chunk = n / w;
    auto t0 = Clock::now();
    for (int i = 0; i < 5; ++i)
      (void)comm.allgather({buffer.data() + comm.rank() * chunk, DSCORE_DTYPE_F32, chunk},
                           {buffer.data(), DSCORE_DTYPE_F32, chunk * w});
    *allgather_gbps = 5.0 * static_cast<double>(chunk * (w - 1) * 4) / seconds_since(t0) / 1e9;
  }
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  // As `dscore run` does, before any thread starts (core/base/process_heap.h).
  if (const auto kept = dscore::apply_heap_policy_from_env(); !kept.ok()) {
    std::fprintf(stderr, "%s\n", kept.status().message().c_str());
    return 1;
  }
  int hidden = 96, batch = 64, steps = 6;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--hidden")
      hidden = std::stoi(argv[i + 1]);
    else if (k == "--batch")
      batch = std::stoi(argv[i + 1]);
    else if (k == "--steps")
      steps = std::stoi(argv[i + 1]);
  }
  auto job = dscore::comm::detect_job_env();
  if (job.ok() && job->world_size == 1) {
    std::vector<std::string> args(argv + 1, argv + argc);
    std::fprintf(stderr, "%s\n", dscore::comm::exec_under_mpirun(2, args).message().c_str());
    return 1;
  }
  const bool leader = job.ok() && job->rank == 0;
  const double copy_gbps = copy_bandwidth();
  double allgather_gbps = 0;
  std::vector<Figures> figures;
  for (int stage = 0; stage <= 3; ++stage)
    figures.push_back(
        run_stage(stage, hidden, batch, steps, stage == 0 ? &allgather_gbps : nullptr));
  if (!leader) return 0;
  std::printf(
      "zero_throughput: mlp, %lld parameter tensors, hidden %d, global batch %d, 2 ranks, %d "
      "steps\n",
      static_cast<long long>(figures[0].tensors), hidden, batch, steps);
  std::printf("limits measured now: memcpy %.2f GB/s per rank, allgather between ranks %.2f GB/s\n",
              copy_gbps, allgather_gbps);
  std::printf("%-7s %12s %10s %10s %10s %10s %10s %12s\n", "stage", "samples/s", "model ms",
              "comm ms", "optim ms", "stats ms", "engine ms", "preempt/step");
  for (int stage = 0; stage <= 3; ++stage) {
    const Figures& f = figures[static_cast<size_t>(stage)];
    std::printf("%-7d %12.1f %10.2f %10.2f %10.2f %10.2f %10.3f %12.1f\n", stage,
                f.samples_per_second, f.model_ms, f.comm_wait_ms, f.optimizer_ms, f.statistics_ms,
                f.overhead_ms, f.preemptions);
  }
  const double ratio = figures[3].samples_per_second / figures[0].samples_per_second;
  double worst_overhead = 0;
  for (const Figures& f : figures) worst_overhead = std::max(worst_overhead, f.overhead_ms);
  std::printf("ZeRO-3 / ZeRO-0 throughput: %.3f (target >= 0.85)\n", ratio);
  std::printf("engine overhead per step, worst stage: %.3f ms (target <= 1 ms)\n", worst_overhead);
  return 0;
}
