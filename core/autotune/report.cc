#include "core/autotune/report.h"

#include <cstdio>
#include <filesystem>

#include "core/base/strings.h"
#include "core/checkpoint/durable_file.h"

namespace dscore::autotune {
namespace {

constexpr size_t kMaxResultBytes = size_t{64} << 20;

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string metric_text(Metric metric, double v) {
  if (metric == Metric::kFlops) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3g", v);
    return buf;
  }
  return fixed(v, metric == Metric::kLatency ? 4 : 1);
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

}  // namespace

std::string format_table(const AutotuneReport& report, bool all) {
  const std::string unit = metric_unit(report.metric);
  size_t name_width = 9;
  for (const TrialRecord& r : report.trials)
    name_width = std::max(name_width, r.candidate.name().size());
  std::string out = pad("candidate", name_width) + "  phase  plan/rank    disk/rank    " +
                    pad("state", 8) + pad(report.metric_name + " (" + unit + ")", 26) +
                    "s/step    peak RSS     note\n";
  int64_t not_run = 0;
  for (size_t i = 0; i < report.trials.size(); ++i) {
    const TrialRecord& r = report.trials[i];
    if (!all && r.state == TrialState::kNotRun) {
      ++not_run;
      continue;
    }
    std::string line = pad(r.candidate.name(), name_width) + "  " +
                       pad(std::to_string(r.phase), 7) +
                       pad(format_bytes(static_cast<uint64_t>(r.plan_host_bytes)), 13) +
                       pad(format_bytes(static_cast<uint64_t>(r.plan_disk_bytes)), 13) +
                       pad(state_name(r.state), 8);
    std::string measured = r.metric ? metric_text(report.metric, *r.metric) : "-";
    if (r.runs > 1) measured += " (" + std::to_string(r.runs) + " runs)";
    if (r.predicted) measured += " (predicted " + metric_text(report.metric, *r.predicted) + ")";
    line +=
        pad(measured, 26) + pad(r.seconds_per_step ? fixed(*r.seconds_per_step, 4) : "-", 10) +
        pad(r.peak_rss_bytes > 0 ? format_bytes(static_cast<uint64_t>(r.peak_rss_bytes)) : "-", 13);
    std::string note = r.reason;
    if (report.best && *report.best == i) note = "best" + (note.empty() ? "" : "; " + note);
    line += note;
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  if (not_run > 0)
    out += "(" + std::to_string(not_run) + " more fit but were not run before the search ended: " +
           (std::filesystem::path(report.results_dir) / "summary.txt").string() + ")\n";
  int64_t ran = 0, skipped = 0, failed = 0;
  for (const TrialRecord& r : report.trials) {
    ran += r.state == TrialState::kRan || r.state == TrialState::kReused;
    skipped += r.state == TrialState::kSkipped;
    failed += r.state == TrialState::kFailed;
  }
  out += std::to_string(report.trials.size()) + " candidates: " + std::to_string(ran) +
         " measured, " + std::to_string(failed) + " failed, " + std::to_string(skipped) +
         " skipped by the plan (never started); tuner " + report.tuner_type +
         ", stopped: " + report.stop_reason + "; " + fixed(report.seconds, 1) + " s\n";
  if (report.best) {
    const TrialRecord& b = report.trials[*report.best];
    out += "best: " + b.candidate.name() + ", " + metric_text(report.metric, *b.metric) + " " +
           unit + "\n  " + report.best_command + "\n";
  } else {
    out += "no trial was measured: see the notes above and each trial's stderr.log under " +
           report.exps_dir + "\n";
  }
  return out;
}

json::Value record_json(const TrialRecord& r) {
  json::Value v = json::Value::object();
  v.set("name", json::Value(r.candidate.name()));
  v.set("phase", json::Value(static_cast<int64_t>(r.phase)));
  v.set("state", json::Value(state_name(r.state)));
  v.set("zero_stage", json::Value(static_cast<int64_t>(r.candidate.stage)));
  v.set("micro_batch", json::Value(r.candidate.micro));
  v.set("gradient_accumulation_steps", json::Value(r.candidate.gas));
  v.set("activation_checkpointing", json::Value(r.candidate.checkpointing));
  v.set("offload_optimizer", json::Value(r.candidate.offload_optimizer));
  v.set("offload_param", json::Value(r.candidate.offload_param));
  v.set("threads", json::Value(static_cast<int64_t>(r.candidate.threads)));
  v.set("user_config", json::Value(r.candidate.user_config));
  v.set("plan_host_bytes_per_rank", json::Value(r.plan_host_bytes));
  v.set("plan_disk_bytes_per_rank", json::Value(r.plan_disk_bytes));
  auto optional = [&](const char* key, const std::optional<double>& x) {
    v.set(key, x ? json::Value(*x) : json::Value());
  };
  optional("metric", r.metric);
  optional("predicted_metric", r.predicted);
  optional("seconds_per_step", r.seconds_per_step);
  optional("samples_per_second", r.samples_per_second);
  v.set("peak_rss_bytes", json::Value(r.peak_rss_bytes));
  v.set("runs", json::Value(r.runs));
  v.set("reason", json::Value(r.reason));
  return v;
}

json::Value trial_result_json(const TrialRecord& r, const json::Value& trial_config) {
  json::Value v = record_json(r);
  v.set("config", trial_config);
  return v;
}

std::optional<ReusedResult> read_trial_result(const std::string& path,
                                              const json::Value& trial_config) {
  if (!checkpoint::path_exists(path)) return std::nullopt;
  auto text = checkpoint::read_text_file(path, kMaxResultBytes);
  if (!text.ok()) return std::nullopt;
  auto v = json::parse(*text, path);
  if (!v.ok() || !v->is_object()) return std::nullopt;
  const json::Value* config = v->find("config");
  const json::Value* state = v->find("state");
  const json::Value* seconds = v->find("seconds_per_step");
  const json::Value* samples = v->find("samples_per_second");
  const json::Value* rss = v->find("peak_rss_bytes");
  if (config == nullptr || *config != trial_config || state == nullptr || !state->is_string() ||
      state->as_string() != "ran" || seconds == nullptr || !seconds->is_number() ||
      samples == nullptr || !samples->is_number())
    return std::nullopt;
  ReusedResult r;
  r.seconds_per_step = seconds->as_number();
  r.samples_per_second = samples->as_number();
  r.peak_rss_bytes = rss != nullptr && rss->is_int() ? rss->as_int() : 0;
  return r;
}

std::string read_text_or_empty(const std::string& path) {
  auto text = checkpoint::read_text_file(path, kMaxResultBytes);
  return text.ok() ? *text : std::string();
}

Status write_results(const AutotuneReport& report) {
  DSCORE_RETURN_IF_ERROR(checkpoint::make_folders(report.results_dir));
  const std::filesystem::path dir = report.results_dir;
  json::Value all = json::Value::object();
  all.set("metric", json::Value(report.metric_name));
  all.set("tuner_type", json::Value(report.tuner_type));
  all.set("ranks", json::Value(static_cast<int64_t>(report.ranks)));
  all.set("stop_reason", json::Value(report.stop_reason));
  all.set("seconds", json::Value(report.seconds));
  all.set("best",
          report.best ? json::Value(report.trials[*report.best].candidate.name()) : json::Value());
  all.set("best_command", json::Value(report.best_command));
  all.set("model_flops_per_sample",
          report.flops_per_sample ? json::Value(*report.flops_per_sample) : json::Value());
  json::Value trials = json::Value::array();
  for (const TrialRecord& r : report.trials) trials.push_back(record_json(r));
  all.set("candidates", std::move(trials));
  DSCORE_RETURN_IF_ERROR(checkpoint::write_file_durably((dir / "results.json").string(),
                                                        json::serialize(all, true) + "\n"));
  DSCORE_RETURN_IF_ERROR(
      checkpoint::write_file_durably((dir / "summary.txt").string(), format_table(report)));
  if (!report.best) return Status::Ok();
  return checkpoint::write_file_durably(
      (dir / "best_config.json").string(),
      json::serialize(report.trials[*report.best].config, true) + "\n");
}

}  // namespace dscore::autotune
