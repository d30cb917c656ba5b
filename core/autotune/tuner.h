// The order trials run in and when the search stops (DeepSpeed's
// tuner_type, tuner_num_trials, tuner_early_stopping).
//  - gridsearch: candidates as enumerated;
//  - random: shuffled with the config's seed;
//  - model_based: the candidate whose predicted metric is best runs next;
//    a step-time model over the plan's figures (compute, communication,
//    disk traffic, micro-steps) is refit after every measured trial.
// The search stops after tuner_num_trials trials, or once
// tuner_early_stopping trials in a row brought no better metric.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dscore::autotune {

// A candidate's step as the plan sees it, per rank.
struct StepFeatures {
  double flops = 0;        // model FLOPs per step (recomputation included)
  double comm_bytes = 0;   // bytes through collectives per step
  double disk_bytes = 0;   // bytes to and from NVMe per step
  double micro_steps = 1;  // forward/backward passes per step
  int64_t samples = 1;     // train_batch_size
};

// Step time = sum of weights x features (plus a constant), with weights
// starting from typical rates (50 GFLOP/s, 2 GB/s collectives, 1 GB/s disk,
// 1 ms per micro-step, 5 ms per step) and fitted to measured step times
// by least squares held toward those rates.
class StepTimeModel {
 public:
  StepTimeModel();
  double predict_seconds(const StepFeatures& f) const;
  void add_measurement(const StepFeatures& f, double seconds);

 private:
  static constexpr size_t kTerms = 5;
  std::array<double, kTerms> terms(const StepFeatures& f) const;
  void refit();
  std::array<double, kTerms> prior_;
  std::array<double, kTerms> weight_;  // multiplies prior_
  std::vector<std::pair<std::array<double, kTerms>, double>> seen_;
};

enum class Metric { kThroughput, kLatency, kFlops };
Metric metric_from_name(const std::string& name);  // the schema allows only the three
const char* metric_unit(Metric metric);            // "samples/s", "s/step", "FLOP/s"
// Whether `a` is better than `b` (latency: lower).
bool better(Metric metric, double a, double b);

class Tuner {
 public:
  // candidates: how many there are; features: each one's (model_based).
  Tuner(const std::string& type, uint64_t seed, int64_t max_trials, int64_t early_stopping,
        std::vector<StepFeatures> features, Metric metric, double flops_scale);
  // The next candidate to run, or nullopt: all ran, the trial budget is
  // spent, or the early-stopping patience ran out.
  std::optional<size_t> next();
  // What candidate `index` measured: its step time, or nullopt when it
  // failed (counts as a trial without gain).
  void record(size_t index, std::optional<double> step_seconds, std::optional<double> metric);
  // The model's prediction for candidate `index` (model_based), in the
  // metric's unit.
  std::optional<double> predicted(size_t index) const;
  int64_t trials() const { return trials_; }
  // Why the search ended (for the report); empty while it goes on.
  const std::string& stop_reason() const { return stop_reason_; }

 private:
  double predicted_metric(size_t index) const;
  std::string type_;
  int64_t max_trials_;
  int64_t early_stopping_;
  std::vector<StepFeatures> features_;
  Metric metric_;
  double flops_scale_;         // metric flops = samples/s x flops_scale_
  std::vector<size_t> order_;  // gridsearch / random
  std::vector<bool> done_;
  StepTimeModel model_;
  int64_t trials_ = 0;
  int64_t since_best_ = 0;
  std::optional<double> best_;
  std::string stop_reason_;
};

}  // namespace dscore::autotune
