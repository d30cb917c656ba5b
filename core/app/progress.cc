#include "core/app/progress.h"

#include <dscore/cpp/python_float.hpp>

#include <algorithm>
#include <cstdio>

#include "core/base/strings.h"
#include "core/observability/json_log.h"

namespace dscore {

ProgressReporter::ProgressReporter(int64_t total_steps, int64_t steps_per_print, bool terminal,
                                   bool json, int64_t tokens_per_sample, int64_t start_samples,
                                   int64_t start_step)
    : total_steps_(total_steps),
      steps_per_print_(steps_per_print),
      // Plain output: about 20 lines per run, and always the first step.
      plain_interval_(std::max<int64_t>(1, total_steps / 20)),
      terminal_(terminal && !json),
      json_(json),
      tokens_per_sample_(tokens_per_sample),
      start_samples_(start_samples),
      start_step_(start_step),
      start_(std::chrono::steady_clock::now()) {}

std::string ProgressReporter::line(const ProgressSnapshot& s, double samples_per_second) const {
  char buf[256];
  const bool tokens = tokens_per_sample_ > 0;
  std::snprintf(
      buf, sizeof buf, "step %lld/%lld | loss %.6f | lr %.4e | %.1f %s/s",
      static_cast<long long>(s.step), static_cast<long long>(s.total_steps), s.loss, s.lr,
      tokens ? samples_per_second * static_cast<double>(tokens_per_sample_) : samples_per_second,
      tokens ? "tokens" : "samples");
  std::string out = buf;
  if (s.skipped > 0) out += " | skipped " + std::to_string(s.skipped);
  return out;
}

double ProgressReporter::samples_per_second(const ProgressSnapshot& s) const {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return seconds > 0 ? static_cast<double>(s.samples - start_samples_) / seconds : 0;
}

void ProgressReporter::update(const ProgressSnapshot& s, const std::vector<double>& lrs,
                              const std::string& momentum_text) {
  const double rate = samples_per_second(s);
  if (json_) {
    observability::ProgressRecord r;
    r.step = s.step;
    r.total_steps = s.total_steps;
    r.loss = s.loss;
    r.lr = s.lr;
    r.samples = s.samples;
    r.samples_per_second = rate;
    r.skipped = s.skipped;
    r.elapsed_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    r.metrics = s.metrics;
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::printf("%s\n", observability::json_progress_line(now, 0, r).c_str());
    std::fflush(stdout);
    return;
  }
  // DeepSpeed prints after the increment when (global_steps + 1) % steps_per_print == 0,
  // naming step global_steps + 1 (engine.py _report_progress); kept as is.
  if (steps_per_print_ > 0 && (s.step + 1) % steps_per_print_ == 0) {
    std::vector<std::string> lr_text;
    for (double lr : lrs) lr_text.push_back(sdk::python_float_repr(lr));
    if (terminal_) std::printf("\r\033[K");
    std::printf("step=%lld, skipped=%lld, lr=[%s], mom=[%s]\n", static_cast<long long>(s.step + 1),
                static_cast<long long>(s.skipped), join(lr_text, ", ").c_str(),
                momentum_text.c_str());
  }
  if (terminal_) {
    const int width = 30;
    const int filled = s.total_steps > 0 ? static_cast<int>(width * s.step / s.total_steps) : 0;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(width - filled), '.');
    std::printf("\r\033[K[%s] %s", bar.c_str(), line(s, rate).c_str());
  } else if (s.step == 1 || s.step % plain_interval_ == 0 || s.step == s.total_steps) {
    std::printf("%s\n", line(s, rate).c_str());
  }
  std::fflush(stdout);
}

void ProgressReporter::finish(const ProgressSnapshot& s) {
  if (json_) return;  // the last progress record says it all
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (terminal_) std::printf("\n");
  if (s.step <= start_step_) {  // no step trained: no time, loss or rate to report
    std::printf("done: nothing trained, already at step %lld of %lld\n",
                static_cast<long long>(s.step), static_cast<long long>(s.total_steps));
    std::fflush(stdout);
    return;
  }
  std::printf("done: %lld steps, %lld samples in %.2f s, final loss %.6f",
              static_cast<long long>(s.step), static_cast<long long>(s.samples), seconds, s.loss);
  if (tokens_per_sample_ > 0)
    std::printf(", %.0f tokens/s", samples_per_second(s) * static_cast<double>(tokens_per_sample_));
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace dscore
