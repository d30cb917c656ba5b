// Multi-rank test harness: writes a training config, runs tests/multirank's
// zero_worker under a real `mpirun -n W`, and reads back what every rank
// wrote (losses per step as exact doubles, applied/skipped steps, loss
// scales, counted memory, communication counters, the final fp32 master
// weights gathered on rank 0).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tests/core/cli/process.h"

namespace dscore::testing {

// An mlp training config; fields left as they are give a small model.
struct RunSpec {
  int world = 2;
  int stage = 0;
  std::string precision = "fp32";  // fp32 | fp16 | bf16
  int train_batch = 16;
  int gas = 1;
  int steps = 12;
  int hidden = 64;
  int layers = 3;  // hidden layers
  double clipping = 0;
  int64_t reduce_bucket_size = 1000;
  bool overlap_comm = true;
  int64_t persistence_threshold = 100;  // stage 3
  int64_t max_reuse_distance = 0;       // stage 3
  int64_t prefetch_bucket_size = 5000;  // stage 3
  int64_t timeout_ms = 60000;
  std::string optimizer = R"({"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.01}})";
  std::string scheduler =
      R"({"type": "WarmupLR", "params": {"warmup_max_lr": 0.003, "warmup_num_steps": 5, "warmup_type": "linear"}})";  // "" = none
  std::string model;             // the "model" section; "" = the mlp of hidden/layers
  std::string extra;             // more top-level JSON members, comma-separated
  std::string zero_extra;        // more "zero_optimization" members, comma-separated
  std::string plugin_path;       // one more "plugins.paths" entry ("" = none)
  int initial_scale_power = 12;  // fp16
  int loss_scale_window = 0;     // fp16; 0 = DeepSpeed's default
  std::vector<std::string> env;  // NAME=value for every rank (mpirun -x)
  std::string config_json() const;
};

struct RankReport {
  int64_t numel = 0;
  std::vector<double> losses;
  std::vector<bool> applied;
  std::vector<double> loss_scales;
  std::vector<double> grad_norms;   // unscaled, before clipping; -1 on overflow
  std::vector<uint64_t> wire_sent;  // cumulative bytes sent after each step
  std::map<std::string, std::pair<int64_t, int64_t>> comm;  // op -> (calls, elements)
  // parameters, gradients, master, optimizer, buffers, offload tiles
  std::vector<int64_t> memory, plan;
};

struct RunResult {
  ProcessResult process;
  std::vector<RankReport> ranks;  // one per rank that wrote its report
  std::vector<float> params;      // gathered fp32 master weights (rank 0)
  // --dump-state: gathered fp32 masters ("fp32") and optimizer slots by name.
  std::map<std::string, std::vector<float>> state;
  // --load with several folders: the outputs of the 2nd, 3rd, ... runs.
  std::vector<RunResult> more;
  bool ok() const { return process.exited() && process.exit_code == 0; }
};

// Runs the worker under mpirun; `worker_args` are appended (fault options).
RunResult run_workers(const RunSpec& spec, const std::vector<std::string>& worker_args = {},
                      std::chrono::seconds timeout = std::chrono::seconds(240));

// Largest |a - b| / max(|b|, floor) over two equally long vectors.
double max_relative_difference(const std::vector<double>& a, const std::vector<double>& b,
                               double floor = 1e-12);
double max_relative_difference(const std::vector<float>& a, const std::vector<float>& b,
                               double floor = 1e-6);

}  // namespace dscore::testing
