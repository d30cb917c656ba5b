#include "core/autotune/autotune.h"

#include <sched.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <dscore/cpp/dtype.hpp>

#include "core/app/planner.h"
#include "core/autotune/report.h"
#include "core/autotune/trial.h"
#include "core/base/logging.h"
#include "core/base/strings.h"
#include "core/checkpoint/durable_file.h"
#include "core/engine/initialize.h"
#include "core/engine/job_fit.h"

namespace dscore::autotune {
namespace fs = std::filesystem;
namespace {

// Planning makes a model and an optimizer per candidate, each saying what
// it chose at info level; the trials' stderr.log keeps those lines, so the
// search itself logs warnings and errors only.
class QuietInfoLogs {
 public:
  QuietInfoLogs() : saved_(log_level()) {
    if (saved_ < LogLevel::kWarning) set_log_level(LogLevel::kWarning);
  }
  ~QuietInfoLogs() { set_log_level(saved_); }
  QuietInfoLogs(const QuietInfoLogs&) = delete;
  QuietInfoLogs& operator=(const QuietInfoLogs&) = delete;

 private:
  LogLevel saved_;
};

// The measured candidates confirmed, and how often each runs again.
constexpr size_t kConfirmed = 3;
constexpr int kConfirmationRounds = 1;

int cpus_available() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return 1;
}

// A candidate's plan, before anything runs.
struct Evaluation {
  bool fits = false;
  std::string reason;      // why it cannot run
  json::Value config;      // candidate_config()
  std::string resolved;    // its resolved config, to find duplicates
  int64_t host_bytes = 0;  // per rank
  int64_t disk_bytes = 0;  // per rank
  StepFeatures features;
};

class Search {
 public:
  Search(const AutotuneRequest& request, SearchBase base, std::string config_dir,
         InitializeOptions init, config::AutotuningConfig settings,
         std::optional<double> forward_flops, const TrialObserver& observer)
      : request_(request),
        base_(std::move(base)),
        config_dir_(std::move(config_dir)),
        init_(std::move(init)),
        settings_(std::move(settings)),
        forward_flops_(forward_flops),
        observer_(observer),
        metric_(metric_from_name(settings_.metric)) {}

  Result<AutotuneReport> run(uint64_t seed);

 private:
  // The candidate's plan, made once (the micro-batch bisection and the
  // records ask for the same candidates).
  const Evaluation& evaluate(const Candidate& c);
  Evaluation plan(const Candidate& c);
  // Adds `c` to the records unless a candidate with the same resolved
  // config is there; returns its index, or nullopt for a duplicate.
  std::optional<size_t> add(const Candidate& c, const Evaluation& e, int phase);
  Status add_phase_one();
  // The largest allowed micro-batch index whose plan fits, or -1.
  int64_t largest_fitting(const Candidate& setting, const std::vector<int64_t>& allowed);
  Candidate with_micro(Candidate c, int64_t micro) const;
  // Runs the records `runnable` in the tuner's order.
  Status run_phase(const std::vector<size_t>& runnable, int64_t trial_budget, uint64_t seed);
  // round 0: the trial; round n > 0: its n-th confirmation run, in
  // exps_dir/<name>/confirm<n>/, averaged with the earlier runs.
  Status run_trial(TrialRecord* record, int round = 0);
  // The best few measured candidates run once more, in turn, so the
  // choice does not rest on one short window of a shared machine.
  Status confirm_best();
  double metric_of(const WindowRate& rate) const;

  const AutotuneRequest& request_;
  SearchBase base_;
  std::string config_dir_;
  InitializeOptions init_;
  config::AutotuningConfig settings_;
  std::optional<double> forward_flops_;
  const TrialObserver& observer_;
  Metric metric_;
  std::vector<TrialRecord> records_;
  std::vector<StepFeatures> features_;  // per record
  std::set<std::string> seen_;
  std::map<std::string, Evaluation> evaluations_;  // by candidate name
  int64_t trials_ = 0;
  std::string stop_reason_;
};

const Evaluation& Search::evaluate(const Candidate& c) {
  const std::string name = c.name();
  auto it = evaluations_.find(name);
  if (it == evaluations_.end()) it = evaluations_.emplace(name, plan(c)).first;
  return it->second;
}

Evaluation Search::plan(const Candidate& c) {
  Evaluation e;
  e.config = candidate_config(base_, c);
  auto setup = prepare_text(json::serialize(e.config), c.name(), config_dir_, init_);
  if (!setup.ok()) {
    e.reason = setup.status().message();
    return e;
  }
  if (!setup->loaded.ok()) {
    e.reason = "invalid config: " + config::format_error(setup->loaded.errors.front(), "");
    return e;
  }
  const config::TrainingConfig& cfg = *setup->loaded.config;
  if (auto errors = config::placement_errors(cfg); !errors.empty()) {
    e.reason = "invalid config: " + errors.front().path + ": " + errors.front().message;
    return e;
  }
  auto plans = plan_job(*setup, request_.ranks);
  if (!plans.ok()) {
    e.reason = "no plan: " + plans.status().message();
    return e;
  }
  const zero::ZeroPlan& largest = *std::max_element(
      plans->begin(), plans->end(), [](const zero::ZeroPlan& a, const zero::ZeroPlan& b) {
        return a.memory.total() + a.memory.disk() < b.memory.total() + b.memory.disk();
      });
  zero::NodeCapacity node = read_node_capacity(largest, request_.ranks);
  if (request_.memory_bytes) node.ram_available = *request_.memory_bytes;
  const Status fits = zero::check_fits(largest, node);
  e.fits = fits.ok();
  if (!fits.ok()) e.reason = "does not fit: " + fits.message();
  e.host_bytes = largest.host_memory();
  e.disk_bytes = largest.memory.disk();
  json::Value resolved = cfg.resolved;
  resolved.erase("autotuning");
  e.resolved = json::serialize(resolved) + " threads " + std::to_string(c.threads);
  StepFeatures& f = e.features;
  const double micro = static_cast<double>(cfg.batch.train_micro_batch_size_per_gpu);
  const double gas = static_cast<double>(cfg.batch.gradient_accumulation_steps);
  f.samples = cfg.batch.train_batch_size;
  f.micro_steps = gas;
  f.flops = forward_flops_.value_or(0) * micro * gas * (checkpoints_activations(cfg) ? 4 : 3);
  f.comm_bytes = static_cast<double>(largest.comm_total()) *
                 static_cast<double>(sdk::dtype_size(largest.grad_dtype));
  f.disk_bytes =
      2.0 * static_cast<double>(largest.memory.disk_master + largest.memory.disk_optimizer) +
      2.0 * gas * static_cast<double>(largest.memory.disk_parameters);
  return e;
}

std::optional<size_t> Search::add(const Candidate& c, const Evaluation& e, int phase) {
  if (!e.resolved.empty() && !seen_.insert(e.resolved).second) return std::nullopt;
  TrialRecord r;
  r.candidate = c;
  r.config = e.config;
  r.phase = phase;
  r.state = e.fits ? TrialState::kNotRun : TrialState::kSkipped;
  r.reason = e.reason;
  r.plan_host_bytes = e.host_bytes;
  r.plan_disk_bytes = e.disk_bytes;
  records_.push_back(std::move(r));
  features_.push_back(e.features);
  return records_.size() - 1;
}

Candidate Search::with_micro(Candidate c, int64_t micro) const {
  c.micro = micro;
  c.gas = gas_for(base_, micro);
  return c;
}

int64_t Search::largest_fitting(const Candidate& setting, const std::vector<int64_t>& allowed) {
  // Memory grows with the micro-batch: the first size that does not fit
  // ends the fitting ones.
  int64_t lo = 0, hi = static_cast<int64_t>(allowed.size());  // fits below lo, not from hi
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (evaluate(with_micro(setting, allowed[static_cast<size_t>(mid)])).fits)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo - 1;
}

Status Search::add_phase_one() {
  if (base_.user) add(*base_.user, evaluate(*base_.user), 1);
  const std::vector<int64_t> allowed = allowed_micro_batches(base_, settings_);
  if (allowed.empty())
    return invalid_argument(
        base_.fixed_train_batch_size
            ? "train_batch_size " + std::to_string(*base_.fixed_train_batch_size) +
                  " allows no micro-batch size within autotuning's min/max_train_micro_batch_"
                  "size_per_gpu at " +
                  std::to_string(base_.world) + " rank(s): it must be a multiple of the ranks"
            : std::string("autotuning's batch bounds (min/max_train_batch_size, "
                          "min/max_train_micro_batch_size_per_gpu) allow no micro-batch size"));
  for (const Candidate& setting : phase_one_settings(base_, settings_.fast)) {
    std::vector<Candidate> tries = {setting};
    if (settings_.fast)
      for (const Candidate& saver : memory_savers(setting)) tries.push_back(saver);
    for (size_t t = 0; t < tries.size(); ++t) {
      const int64_t k = largest_fitting(tries[t], allowed);
      if (k < 0) {
        // Listed once, at the smallest size, with the reason.
        if (t + 1 == tries.size()) {
          const Candidate c = with_micro(tries[t], allowed.front());
          add(c, evaluate(c), 1);
        }
        continue;
      }
      const std::vector<int64_t> fitting(allowed.begin(), allowed.begin() + k + 1);
      for (int64_t micro : tuning_micro_batches(fitting, settings_.num_tuning_micro_batch_sizes)) {
        const Candidate c = with_micro(tries[t], micro);
        add(c, evaluate(c), 1);
      }
      // The next size up: planned, and listed with why it was not run.
      if (static_cast<size_t>(k + 1) < allowed.size()) {
        const Candidate c = with_micro(tries[t], allowed[static_cast<size_t>(k + 1)]);
        add(c, evaluate(c), 1);
      }
      break;
    }
  }
  return Status::Ok();
}

double Search::metric_of(const WindowRate& rate) const {
  switch (metric_) {
    case Metric::kLatency:
      return rate.seconds_per_step;
    case Metric::kFlops:
      return rate.samples_per_second * forward_flops_.value_or(0) * 3 / base_.world;
    case Metric::kThroughput:
      break;
  }
  return rate.samples_per_second;
}

Status Search::run_trial(TrialRecord* r, int round) {
  const std::string name = r->candidate.name();
  fs::path folder = fs::path(settings_.exps_dir) / name;
  if (round > 0) folder /= "confirm" + std::to_string(round);
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) return internal_error("cannot create " + folder.string() + ": " + ec.message());
  const json::Value config = trial_config(r->config, settings_.end_profile_step, config_dir_);
  const fs::path config_path = folder / "ds_config.json";
  const fs::path result_path = folder / "result.json";
  if (!settings_.overwrite && round == 0) {
    if (auto reused = read_trial_result(result_path.string(), config); reused) {
      r->state = TrialState::kReused;
      r->seconds_per_step = reused->seconds_per_step;
      r->samples_per_second = reused->samples_per_second;
      r->peak_rss_bytes = reused->peak_rss_bytes;
      r->metric = metric_of({reused->seconds_per_step, reused->samples_per_second});
      r->runs = 1;
      return Status::Ok();
    }
  }
  DSCORE_RETURN_IF_ERROR(
      checkpoint::write_file_durably(config_path.string(), json::serialize(config, true)));
  TrialProcess process;
  process.argv = {request_.dscore_executable, "run", "--config", config_path.string(),
                  "--log-format", "json", "-n", std::to_string(base_.world),
                  // The paths were made absolute from a config already trusted.
                  "--trust-config-plugin-paths"};
  if (r->candidate.threads > 0)
    process.argv.insert(process.argv.end(), {"--threads", std::to_string(r->candidate.threads)});
  if (request_.allow_unsupported) process.argv.push_back("--allow-unsupported");
  process.folder = folder.string();
  process.env = {{"DSCORE_AUTOTUNE_TRIAL", name}, {"DSCORE_PROGRESS_BAR", "0"}};
  process.timeout = request_.trial_timeout;
  DSCORE_ASSIGN_OR_RETURN(TrialExit exit, run_trial_process(process));
  r->peak_rss_bytes = std::max(r->peak_rss_bytes, exit.peak_rss_bytes);
  const std::string out = read_text_or_empty((folder / "stdout.log").string());
  const std::string err = read_text_or_empty((folder / "stderr.log").string());
  const std::string run = round > 0 ? "confirmation run " + std::to_string(round) + ": " : "";
  if (!exit.ok()) {
    r->state = TrialState::kFailed;
    r->metric.reset();
    r->reason = run + failure_reason(exit, err);
    if (exit.timed_out)
      r->reason +=
          " (after " + std::to_string(request_.trial_timeout.count()) + " s; --trial-timeout)";
  } else if (auto rate = window_rate(read_progress(out), settings_.start_profile_step,
                                     settings_.end_profile_step);
             !rate.ok()) {
    r->state = TrialState::kFailed;
    r->metric.reset();
    r->reason = run + rate.status().message();
  } else {
    if (round == 0) r->state = TrialState::kRan;
    // The mean over this trial's runs.
    const double n = static_cast<double>(r->runs);
    auto mean = [n](std::optional<double>* x, double v) {
      *x = (x->value_or(0) * n + v) / (n + 1);
    };
    mean(&r->seconds_per_step, rate->seconds_per_step);
    mean(&r->samples_per_second, rate->samples_per_second);
    mean(&r->metric, metric_of(*rate));
    ++r->runs;
  }
  return checkpoint::write_file_durably(result_path.string(),
                                        json::serialize(trial_result_json(*r, config), true));
}

Status Search::run_phase(const std::vector<size_t>& runnable, int64_t trial_budget, uint64_t seed) {
  std::vector<StepFeatures> features;
  for (size_t i : runnable) features.push_back(features_[i]);
  Tuner tuner(settings_.tuner_type, seed, trial_budget, settings_.tuner_early_stopping,
              std::move(features), metric_, forward_flops_.value_or(0) * 3 / base_.world);
  const int64_t planned =
      trials_ + std::min<int64_t>(trial_budget, static_cast<int64_t>(runnable.size()));
  while (auto next = tuner.next()) {
    TrialRecord& r = records_[runnable[*next]];
    r.predicted = tuner.predicted(*next);
    ++trials_;
    if (observer_) observer_(r, trials_, planned, /*started=*/true);
    DSCORE_RETURN_IF_ERROR(run_trial(&r));
    if (observer_) observer_(r, trials_, planned, /*started=*/false);
    tuner.record(*next, r.seconds_per_step, r.metric);
  }
  stop_reason_ = tuner.stop_reason();
  return Status::Ok();
}

Status Search::confirm_best() {
  std::vector<size_t> measured;
  for (size_t i = 0; i < records_.size(); ++i)
    if (records_[i].metric) measured.push_back(i);
  std::sort(measured.begin(), measured.end(), [&](size_t a, size_t b) {
    return better(metric_, *records_[a].metric, *records_[b].metric);
  });
  if (measured.size() > kConfirmed) measured.resize(kConfirmed);
  if (measured.size() < 2) return Status::Ok();
  for (int round = 1; round <= kConfirmationRounds; ++round)
    for (size_t i : measured) {
      if (!records_[i].metric) continue;  // failed in an earlier round
      DSCORE_RETURN_IF_ERROR(run_trial(&records_[i], round));
      if (observer_) observer_(records_[i], /*trial=*/0, trials_, /*started=*/false);
    }
  return Status::Ok();
}

std::optional<size_t> best_of(const std::vector<TrialRecord>& records, Metric metric) {
  std::optional<size_t> best;
  for (size_t i = 0; i < records.size(); ++i)
    if (records[i].metric && (!best || better(metric, *records[i].metric, *records[*best].metric)))
      best = i;
  return best;
}

Result<AutotuneReport> Search::run(uint64_t seed) {
  const auto start = std::chrono::steady_clock::now();
  DSCORE_RETURN_IF_ERROR(add_phase_one());
  std::vector<size_t> runnable;
  for (size_t i = 0; i < records_.size(); ++i)
    if (records_[i].state == TrialState::kNotRun) runnable.push_back(i);
  if (runnable.empty())
    return Status(
        DSCORE_RESOURCE_EXHAUSTED,
        "no candidate fits this node (" + std::to_string(records_.size()) +
            " planned; the first: " + (records_.empty() ? "none" : records_.front().reason) +
            "); lower the micro-batch bounds, or give more memory (--memory)");
  DSCORE_RETURN_IF_ERROR(run_phase(runnable, settings_.tuner_num_trials, seed));
  // Without "fast": one ZeRO setting at a time around the best so far.
  if (auto best = best_of(records_, metric_);
      best && !settings_.fast && trials_ < settings_.tuner_num_trials) {
    std::vector<size_t> second;
    for (const Candidate& c : knob_variants(records_[*best].candidate)) {
      const Evaluation& e = evaluate(c);
      if (auto i = add(c, e, 2); i && e.fits) second.push_back(*i);
    }
    if (!second.empty())
      DSCORE_RETURN_IF_ERROR(run_phase(second, settings_.tuner_num_trials - trials_, seed + 1));
  }
  DSCORE_RETURN_IF_ERROR(confirm_best());
  AutotuneReport report;
  report.metric = metric_;
  report.metric_name = settings_.metric;
  report.tuner_type = settings_.tuner_type;
  report.ranks = base_.world;
  report.trials = std::move(records_);
  report.best = best_of(report.trials, metric_);
  report.stop_reason = stop_reason_;
  report.results_dir = settings_.results_dir;
  report.exps_dir = settings_.exps_dir;
  if (forward_flops_) report.flops_per_sample = 3 * *forward_flops_;
  if (report.best) {
    json::Value& best = report.trials[*report.best].config;
    absolute_plugin_paths(&best, config_dir_);
    const std::string path = (fs::path(settings_.results_dir) / "best_config.json").string();
    report.best_command = "dscore run --config " + path;
    if (base_.world > 1) report.best_command += " -n " + std::to_string(base_.world);
    const int threads = report.trials[*report.best].candidate.threads;
    if (threads > 0) report.best_command += " --threads " + std::to_string(threads);
    if (has_plugin_paths(best)) report.best_command += " --trust-config-plugin-paths";
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  DSCORE_RETURN_IF_ERROR(write_results(report));
  return report;
}

}  // namespace

const char* state_name(TrialState state) {
  switch (state) {
    case TrialState::kSkipped:
      return "skipped";
    case TrialState::kRan:
      return "ran";
    case TrialState::kReused:
      return "reused";
    case TrialState::kFailed:
      return "failed";
    case TrialState::kNotRun:
      break;
  }
  return "not run";
}

Result<AutotuneReport> run_autotune(const AutotuneRequest& request, const TrialObserver& observer) {
  DSCORE_ASSIGN_OR_RETURN(json::Value document, json::parse_file(request.config_path));
  DSCORE_ASSIGN_OR_RETURN(SearchBase base,
                          read_search_base(std::move(document), request.ranks, cpus_available()));
  // An absent section takes the schema's defaults.
  if (base.document.find("autotuning") == nullptr)
    base.document.set("autotuning", json::Value::object());
  const std::string config_dir = fs::absolute(request.config_path).parent_path().string();
  InitializeOptions init;
  init.trust_config_plugin_paths = request.trust_config_plugin_paths;
  init.allow_unsupported = request.allow_unsupported;
  init.job = comm::JobEnv{};
  init.job->world_size = request.ranks;
  DSCORE_ASSIGN_OR_RETURN(Setup setup, prepare_text(json::serialize(base.document),
                                                    request.config_path, config_dir, init));
  if (!setup.loaded.ok()) return invalid_argument(format_config_errors(setup.loaded));
  const config::TrainingConfig& cfg = *setup.loaded.config;
  const config::AutotuningConfig& settings = cfg.autotuning;
  if (settings.end_profile_step < settings.start_profile_step)
    return invalid_argument("autotuning.end_profile_step (" +
                            std::to_string(settings.end_profile_step) +
                            ") must be at least start_profile_step (" +
                            std::to_string(settings.start_profile_step) + ")");
  if (!setup.selection.model || !setup.selection.optimizer)
    return invalid_argument(
        "`dscore autotune` needs \"model\" and \"optimizer\" sections: it plans every candidate "
        "before running it");
  DSCORE_ASSIGN_OR_RETURN(std::optional<double> flops, forward_flops_per_sample(setup));
  if (settings.metric == "flops" && !flops)
    return invalid_argument("autotuning.metric \"flops\": the model plugin " +
                            setup.selection.model->info->display() +
                            " does not report its FLOPs (layer_flops); use \"throughput\"");
  log_config_notices(setup.loaded);
  if (base.stages.size() == 1) base.user = user_candidate(cfg, checkpoints_activations(cfg), 0);
  QuietInfoLogs quiet;
  Search search(request, std::move(base), config_dir, init, settings, flops, observer);
  return search.run(cfg.seed);
}

}  // namespace dscore::autotune
