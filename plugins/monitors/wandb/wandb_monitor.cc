// The built-in "wandb" monitor (docs/deepspeed-reference.md#monitors): DeepSpeed's
// WandbMonitor calls wandb.init(project, group, entity=team) and then
// wandb.log({tag: value}, step=global_samples). This plugin writes what the
// wandb client writes in offline mode — an offline run folder with the
// transaction log — so `wandb sync <run folder>` uploads the run later. No
// network, no API key, no Python at training time.
//
// History follows wandb.log's step rule: values logged at the same step form
// one row, a row is written when a later step arrives (or at the end), and a
// value for an earlier step is dropped with a warning, as wandb drops it.
#include <dscore/monitor.h>
#include <unistd.h>
#include <dscore/cpp/monitor_plugin.hpp>
#include <dscore/cpp/plugin.hpp>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "config_json.h"
#include "records.h"
#include "run_folder.h"
#include "run_log.h"

namespace dscore::wandb {
namespace {

using sdk::Error;

constexpr const char kParamsSchema[] = R"json({
  "team": {"type": "string",
           "doc": "W&B entity the run belongs to (DeepSpeed passes team as entity); absent = the syncing user's default"},
  "group": {"type": "string", "doc": "run group; absent = none"},
  "project": {"type": "string", "default": "deepspeed", "doc": "W&B project name"},
  "dir": {"type": "string", "default": "",
          "doc": "dscore only: the run folder goes to dir/wandb/offline-run-*; \"\" = $WANDB_DIR, else the current directory"}
})json";

constexpr const char kProducer[] = "dscore-wandb-monitor 0.1.0";

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

// wandb.init rejects these project names; say so now rather than at sync.
void check_project(const std::string& project) {
  if (project.size() > 128)
    throw Error(DSCORE_INVALID_ARGUMENT,
                "wandb.project '" + project + "' is longer than 128 characters");
  if (project.find_first_of("/\\#?%:") != std::string::npos)
    throw Error(
        DSCORE_INVALID_ARGUMENT,
        "wandb.project '" + project + "' contains one of / \\ # ? % : which W&B does not allow");
}

class WandbMonitor : public sdk::Instance {
 public:
  WandbMonitor(sdk::HostRef host, const sdk::Params& p) : Instance(host) {
    run_.project = p.string("project");
    check_project(run_.project);
    run_.entity = p.string("team", "");
    run_.group = p.string("group", "");
    run_.host = hostname();
    run_.run_id = new_run_id();
    run_.start_time = unix_now();
    std::string base = p.string("dir", "");
    if (base.empty() && std::getenv("WANDB_DIR") != nullptr) base = std::getenv("WANDB_DIR");
    const RunFolder folder = create_run_folder(host, base, run_.run_id, run_.start_time);
    try {
      log_ = std::make_unique<RunLog>(folder.run_file);
    } catch (const Error& e) {
      throw Error(e.code(), std::string(e.what()) + "; set wandb.dir to a writable directory");
    }
    log_->append(header_record(++num_, kProducer));
    log_->append(run_record(++num_, run_));
    log_->flush();
    host.log(DSCORE_LOG_INFO, "wandb",
             "offline run " + run_.run_id + " in " + folder.run_dir +
                 "; upload it with: wandb sync " + folder.run_dir);
  }

  void write_config(const char* json) {
    log_->append(config_record(++num_, top_level_members(json != nullptr ? json : "{}")));
    log_->flush();
  }

  void write(const dscore_scalar_event& e, bool has_wall_time) {
    if (e.tag == nullptr) throw Error(DSCORE_INVALID_ARGUMENT, "an event has no tag");
    if (e.step < step_) {
      if (!warned_step_)
        host().log(DSCORE_LOG_WARNING, "wandb",
                   "'" + std::string(e.tag) + "' logged at step " + std::to_string(e.step) +
                       ", before the current step " + std::to_string(step_) +
                       "; W&B steps only increase, so it is dropped (as wandb.log drops it)");
      warned_step_ = true;
      return;
    }
    if (e.step > step_) commit_row();
    step_ = e.step;
    row_time_ = has_wall_time && e.wall_time > 0 ? e.wall_time : unix_now();
    const std::string value = json_number(e.value);
    for (Item& item : row_)
      if (item.key == e.tag) {
        item.value_json = value;
        return;
      }
    row_.push_back({e.tag, value});
  }

  void flush() { log_->flush(); }

  // The last row, then the exit record that marks the run finished. A run
  // file that cannot be finished is logged (the run still syncs; W&B then
  // shows it as not finished): destruction cannot fail.
  ~WandbMonitor() override {
    try {
      commit_row();
      log_->append(exit_record(++num_, 0, static_cast<int32_t>(unix_now() - run_.start_time)));
      log_->flush();
    } catch (const std::exception& e) {
      host().log(DSCORE_LOG_WARNING, "wandb",
                 std::string("could not finish the run file: ") + e.what());
    } catch (...) {
    }
  }

 private:
  // One history record for the row plus a summary record with the same
  // values, as the wandb client writes them (the summary keeps the latest).
  void commit_row() {
    if (row_.empty()) return;
    std::vector<Item> items = row_;
    items.push_back({"_step", std::to_string(step_)});
    items.push_back({"_runtime", json_number(row_time_ - run_.start_time)});
    items.push_back({"_timestamp", json_number(row_time_)});
    log_->append(history_record(++num_, step_, items));
    log_->append(summary_record(++num_, items));
    row_.clear();
  }

  RunInfo run_;
  std::unique_ptr<RunLog> log_;
  int64_t num_ = 0;   // record sequence number
  int64_t step_ = 0;  // the step of the row being collected
  double row_time_ = 0;
  std::vector<Item> row_;  // in first-logged order
  bool warned_step_ = false;
};

const dscore_plugin_descriptor kWandb = sdk::monitor_descriptor<WandbMonitor>(
    "wandb", "0.1.0",
    "DeepSpeed's WandB monitor: an offline run folder under dir/wandb for `wandb sync`",
    kParamsSchema);

}  // namespace
}  // namespace dscore::wandb

DSCORE_PLUGIN_LIBRARY("dscore-wandb", "0.1.0", "dscore", &dscore::wandb::kWandb)
