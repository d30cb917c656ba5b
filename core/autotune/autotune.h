// `dscore autotune`: the fastest config that fits, found with the memory
// plan and short measured runs (docs/autotuning.md). Every candidate's plan
// is computed first; one that does not fit this node's RAM (or the
// --memory given) or its disk is listed with the reason and never started.
// The rest run end_profile_step steps each as `dscore run` in a child
// process, in the tuner's order, until the trial budget or the
// early-stopping patience ends the search. A trial that crashes, fails or
// times out is recorded and the search goes on. The three best measured
// then run once more each, in turn, and the best mean wins: one short
// window on a shared machine is noisy. The best config is written
// as results_dir/best_config.json, beside the table (summary.txt) and every
// record (results.json).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/autotune/search_space.h"
#include "core/autotune/tuner.h"
#include "core/base/status.h"

namespace dscore::autotune {

struct AutotuneRequest {
  std::string config_path;
  int ranks = 1;                        // -n: data-parallel ranks on this node
  std::optional<int64_t> memory_bytes;  // --memory: RAM the ranks may use (else MemAvailable)
  std::chrono::seconds trial_timeout{600};
  bool allow_unsupported = false;          // passed to every trial
  bool trust_config_plugin_paths = false;  // for the user's config
  std::string dscore_executable;           // what trials run
};

enum class TrialState {
  kSkipped,  // not started: the plan does not fit, or the config is invalid
  kRan,      // measured
  kReused,   // measured by an earlier search (overwrite false)
  kFailed,   // crashed, failed, timed out, or ended before the profiled steps
  kNotRun,   // fits, but the search ended first
};
const char* state_name(TrialState state);

struct TrialRecord {
  Candidate candidate;
  json::Value config;  // candidate_config(): what best_config.json would hold
  TrialState state = TrialState::kNotRun;
  std::string reason;           // why skipped or failed
  int phase = 1;                // 2: a ZeRO setting around the first phase's best
  int64_t plan_host_bytes = 0;  // per rank, at the plan's peak
  int64_t plan_disk_bytes = 0;  // per rank
  int64_t peak_rss_bytes = 0;   // measured: the largest process of the trial
  // Means over the trial's measured runs: the trial, and for the best few
  // a confirmation run after the search.
  int64_t runs = 0;
  std::optional<double> seconds_per_step;
  std::optional<double> samples_per_second;
  std::optional<double> metric;
  std::optional<double> predicted;  // model_based: the metric it expected
};

struct AutotuneReport {
  Metric metric = Metric::kThroughput;
  std::string metric_name;
  std::string tuner_type;
  int ranks = 1;
  std::vector<TrialRecord> trials;
  std::optional<size_t> best;  // into trials
  std::string stop_reason;
  std::string results_dir;
  std::string exps_dir;
  double seconds = 0;
  // The command that trains the best config (its --threads when tuned).
  std::string best_command;
  // The model's FLOPs per sample of a step, forward and backward (3 x the
  // forward's); nullopt when the model plugin does not report them.
  std::optional<double> flops_per_sample;
};

// Called as each trial starts (record.state kNotRun) and ends; `trial` is
// its number (0 for a confirmation run), `planned` the trials the search
// may run so far (this phase's candidates that fit, within the budget).
using TrialObserver =
    std::function<void(const TrialRecord& record, int64_t trial, int64_t planned, bool started)>;

// Config errors come back as INVALID_ARGUMENT with one error per line.
Result<AutotuneReport> run_autotune(const AutotuneRequest& request, const TrialObserver& observer);

}  // namespace dscore::autotune
