// Progress output of `dscore run`: a one-line bar redrawn in place on a
// terminal, plain lines otherwise, plus DeepSpeed's `steps_per_print` line
// ("step=N, skipped=S, lr=[...], mom=[...]"), or JSON progress records.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace dscore {

struct ProgressSnapshot {
  int64_t step = 0;  // optimizer steps done
  int64_t total_steps = 0;
  double loss = 0;
  double lr = 0;
  int64_t samples = 0;  // global samples so far
  int64_t skipped = 0;
};

class ProgressReporter {
 public:
  // json: one JSON progress record per step on stdout instead of text
  // (`dscore run --log-format json`).
  // tokens_per_sample > 0 (token models): the rate is shown in tokens/s.
  // start_samples: global samples already done (a resumed run), left out
  // of the rate.
  ProgressReporter(int64_t total_steps, int64_t steps_per_print, bool terminal, bool json = false,
                   int64_t tokens_per_sample = 0, int64_t start_samples = 0);
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
  std::chrono::steady_clock::time_point start_;
};

}  // namespace dscore
