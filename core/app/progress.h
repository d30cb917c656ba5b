// Progress output of `dscore run`: a one-line bar redrawn in place on a
// terminal, plain lines otherwise, plus DeepSpeed's `steps_per_print` line
// ("step=N, skipped=S, lr=[...], mom=[...]"), or JSON progress records.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/engine/step_observer.h"

namespace dscore {

struct ProgressSnapshot {
  int64_t step = 0;  // optimizer steps done
  int64_t total_steps = 0;
  double loss = 0;
  double lr = 0;
  int64_t samples = 0;  // global samples so far
  int64_t skipped = 0;
  std::vector<std::pair<std::string, double>> metrics;  // the model's (StepReport::metrics)
};

class ProgressReporter {
 public:
  // json: one JSON progress record per step on stdout instead of text
  // (`dscore run --log-format json`).
  // tokens_per_sample > 0 (token models): the rate is shown in tokens/s.
  // start_samples, start_step: global samples and optimizer steps already
  // done (a resumed run), left out of the rate; a run that trains no step
  // past start_step (a checkpoint already at total_steps) says so and
  // shows no rate.
  ProgressReporter(int64_t total_steps, int64_t steps_per_print, bool terminal, bool json = false,
                   int64_t tokens_per_sample = 0, int64_t start_samples = 0,
                   int64_t start_step = 0);
  void update(const ProgressSnapshot& snapshot, const std::vector<double>& lrs,
              const std::string& momentum_text);
  void finish(const ProgressSnapshot& snapshot);

 private:
  std::string line(const ProgressSnapshot& s, double samples_per_second) const;
  double samples_per_second(const ProgressSnapshot& s) const;
  int64_t total_steps_;
  int64_t steps_per_print_;
  int64_t plain_interval_;
  bool terminal_;
  bool json_;
  int64_t tokens_per_sample_;
  int64_t start_samples_;
  int64_t start_step_;
  std::chrono::steady_clock::time_point start_;
};

// The reporter fed from the engine's boundaries (Engine::add_observer).
class ProgressObserver final : public StepObserver {
 public:
  // As ProgressReporter's; momentum_text is DeepSpeed's "mom=[...]" content.
  ProgressObserver(int64_t total_steps, int64_t steps_per_print, bool terminal, bool json,
                   int64_t tokens_per_sample, int64_t start_samples, int64_t start_step,
                   std::string momentum_text)
      : reporter_(total_steps, steps_per_print, terminal, json, tokens_per_sample, start_samples,
                  start_step),
        momentum_text_(std::move(momentum_text)) {
    // Where a run that trains nothing ends: where it started.
    snapshot_.step = start_step;
    snapshot_.total_steps = total_steps;
    snapshot_.samples = start_samples;
  }
  void on_step_end(const StepReport& r) override {
    snapshot_.step = r.global_steps;
    snapshot_.loss = r.loss;
    snapshot_.samples = r.global_samples;
    snapshot_.skipped = r.skipped_steps;
    snapshot_.lr = r.lr.empty() ? 0 : r.lr[0];
    snapshot_.metrics = r.metrics;
    reporter_.update(snapshot_, r.lr, momentum_text_);
  }
  void finish() { reporter_.finish(snapshot_); }

 private:
  ProgressReporter reporter_;
  std::string momentum_text_;
  ProgressSnapshot snapshot_;
};

}  // namespace dscore
