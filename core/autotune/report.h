// What `dscore autotune` leaves behind: results_dir/summary.txt (the
// table), results.json (every candidate), best_config.json; and in each
// trial's folder its result.json, which a search with "overwrite": false
// reuses when the trial's config is unchanged.
#pragma once

#include <optional>
#include <string>

#include "core/autotune/autotune.h"
#include "core/base/status.h"
#include "core/config/json.h"

namespace dscore::autotune {

// One line per candidate: name, phase, plan per rank, state, metric,
// seconds per step, peak RSS, and why it was skipped or failed; then the
// best and how the search ended. Without `all`, the candidates that fit but
// were not run are counted instead of listed (summary.txt lists them).
std::string format_table(const AutotuneReport& report, bool all = true);

// A candidate as JSON (results.json, `--log-format json`).
json::Value record_json(const TrialRecord& record);

// The trial's result.json: record_json() plus the config it ran.
json::Value trial_result_json(const TrialRecord& record, const json::Value& trial_config);

struct ReusedResult {
  double seconds_per_step = 0;
  double samples_per_second = 0;
  int64_t peak_rss_bytes = 0;
};
// A measured result.json at `path` whose config equals `trial_config`.
std::optional<ReusedResult> read_trial_result(const std::string& path,
                                              const json::Value& trial_config);

// Writes summary.txt, results.json and (with a best) best_config.json
// under report.results_dir, each durably.
Status write_results(const AutotuneReport& report);

// A text file's contents, or "" when unreadable (a trial's logs).
std::string read_text_or_empty(const std::string& path);

}  // namespace dscore::autotune
