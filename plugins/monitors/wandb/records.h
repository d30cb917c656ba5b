// The wandb_internal.Record messages an offline run's transaction log holds
// (wandb/proto/wandb_internal.proto), encoded by hand: header, run, config,
// history, summary and exit — what `wandb sync` needs to recreate the run.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dscore::wandb {

// One key and its value as JSON text (ConfigItem, HistoryItem, SummaryItem).
struct Item {
  std::string key;
  std::string value_json;
};

struct RunInfo {
  std::string run_id;  // 8 characters [a-z0-9], as wandb generates
  std::string entity;  // "" = the syncing user's default entity
  std::string project;
  std::string group;  // "" = none
  std::string host;
  double start_time = 0;  // Unix seconds
};

// Each returns one serialized Record; `num` is the record's sequence number
// (1, 2, ... as wandb numbers them).
std::string header_record(int64_t num, std::string_view producer);
std::string run_record(int64_t num, const RunInfo& run);
// Config items use `key` (wandb's run/config records do).
std::string config_record(int64_t num, const std::vector<Item>& items);
// History and summary items use a one-element `nested_key`, as the current
// wandb client writes them, so tags containing '/' are never split.
std::string history_record(int64_t num, int64_t step, const std::vector<Item>& items);
std::string summary_record(int64_t num, const std::vector<Item>& items);
std::string exit_record(int64_t num, int32_t exit_code, int32_t runtime_seconds);

// A number as Python's json.dumps writes it: repr(float), and NaN, Infinity,
// -Infinity for the values JSON itself cannot hold (wandb reads them back).
std::string json_number(double v);

}  // namespace dscore::wandb
