// `dscore lr-schedule --config F [--steps N] [--csv]`: the learning rate of
// every parameter group and the momentum (beta1/beta2 when the scheduler
// sets them) at each optimizer step, exactly as training applies them: the
// engine's counter t starts at the scheduler's first_iteration() and update
// k uses the point at t = first + k - 1 (DeepSpeed: the constructor value,
// then one scheduler step after every applied update; core/engine/
// lr_schedule.h). A table and a terminal plot by default, CSV with --csv.
#include <dscore/cpp/python_float.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/cli/commands.h"
#include "core/cli/options.h"
#include "core/engine/environment.h"
#include "core/engine/initialize.h"
#include "core/plugin_host/instances.h"

namespace dscore::cli {
namespace {

const char* kLrScheduleUsage = "usage: dscore lr-schedule --config F [--steps N] [--csv]";

struct Row {
  int64_t step;             // 1-based optimizer update
  int64_t t;                // the scheduler iteration it uses
  std::vector<double> lrs;  // one per parameter group
  uint32_t mask;            // of group 0's point
  double beta1, beta2;
};

std::string repr(double v) { return sdk::python_float_repr(v); }

void print_csv(const std::vector<Row>& rows, bool betas) {
  std::printf("step");
  const size_t groups = rows.front().lrs.size();
  for (size_t g = 0; g < groups; ++g) std::printf(groups == 1 ? ",lr" : ",lr_group%zu", g);
  if (betas) std::printf(",beta1,beta2");
  std::printf("\n");
  for (const Row& r : rows) {
    std::printf("%lld", static_cast<long long>(r.step));
    for (double lr : r.lrs) std::printf(",%s", repr(lr).c_str());
    if (betas)
      std::printf(",%s,%s", r.mask & DSCORE_HPARAM_BETA1 ? repr(r.beta1).c_str() : "",
                  r.mask & DSCORE_HPARAM_BETA2 ? repr(r.beta2).c_str() : "");
    std::printf("\n");
  }
}

void print_table(const std::vector<Row>& rows, bool betas) {
  const size_t groups = rows.front().lrs.size();
  std::printf("%8s %8s", "step", "t");
  for (size_t g = 0; g < groups; ++g)
    std::printf(" %24s", groups == 1 ? "lr" : ("lr[" + std::to_string(g) + "]").c_str());
  if (betas) std::printf(" %24s %24s", "beta1", "beta2");
  std::printf("\n");
  for (const Row& r : rows) {
    std::printf("%8lld %8lld", static_cast<long long>(r.step), static_cast<long long>(r.t));
    for (double lr : r.lrs) std::printf(" %24s", repr(lr).c_str());
    if (betas)
      std::printf(" %24s %24s", r.mask & DSCORE_HPARAM_BETA1 ? repr(r.beta1).c_str() : "-",
                  r.mask & DSCORE_HPARAM_BETA2 ? repr(r.beta2).c_str() : "-");
    std::printf("\n");
  }
}

// Group 0's lr over the steps: one column per bucket of steps (its last
// step's value), one row per tenth of the range.
void print_plot(const std::vector<Row>& rows) {
  constexpr int kHeight = 10;
  const int width = static_cast<int>(std::min<size_t>(rows.size(), 64));
  double lo = rows.front().lrs[0], hi = lo;
  for (const Row& r : rows) lo = std::min(lo, r.lrs[0]), hi = std::max(hi, r.lrs[0]);
  std::vector<std::string> canvas(kHeight, std::string(static_cast<size_t>(width), ' '));
  for (int c = 0; c < width; ++c) {
    const size_t last = (static_cast<size_t>(c) + 1) * rows.size() / static_cast<size_t>(width) - 1;
    const double v = rows[last].lrs[0];
    const int level =
        hi > lo ? static_cast<int>(std::lround((v - lo) / (hi - lo) * (kHeight - 1))) : kHeight / 2;
    canvas[static_cast<size_t>(kHeight - 1 - level)][static_cast<size_t>(c)] = '*';
  }
  std::printf("\nlr (group 0) by optimizer step\n");
  const std::string top = repr(hi), bottom = repr(lo);
  const size_t margin = std::max(top.size(), bottom.size());
  for (int row = 0; row < kHeight; ++row) {
    const std::string label = row == 0 ? top : row == kHeight - 1 ? bottom : "";
    std::printf("%*s |%s\n", static_cast<int>(margin), label.c_str(), canvas[row].c_str());
  }
  std::printf("%*s +%s\n", static_cast<int>(margin), "", std::string(width, '-').c_str());
  const std::string last = std::to_string(rows.back().step);
  std::printf("%*s  1%*s\n", static_cast<int>(margin), "", std::max(1, width - 1), last.c_str());
}

}  // namespace

int lr_schedule_command(const std::vector<std::string>& args) {
  po::options_description options("lr-schedule options");
  std::string config_path;
  int64_t steps = 0;
  options.add_options()("config,c", po::value<std::string>(&config_path)->required(),
                        "the ds_config.json to preview")(
      "steps", po::value<int64_t>(&steps), "optimizer steps to show (default: \"train_steps\")")(
      "csv", "print CSV (step, lr per group, beta1/beta2 when set) instead of a table and plot");
  po::positional_options_description positional;
  po::variables_map vm;
  int exit_code = kExitOk;
  if (!parse_options(args, options, positional, kLrScheduleUsage, &vm, &exit_code))
    return exit_code;
  InitializeOptions init;
  // DSCORE_TRUST_CONFIG_PLUGIN_PATHS=1 (plugin_host/trust.h).
  init.trust_config_plugin_paths = read_engine_environment().trust_config_plugin_paths;
  if (vm.count("steps")) {
    if (steps <= 0) {
      std::fprintf(stderr, "dscore: --steps must be a positive number of optimizer steps\n");
      return kExitUsage;
    }
    init.train_steps = steps;  // as `dscore run --steps N`: "auto" resolves against it
  }
  init.own_model = true;  // the model does not shape the schedule
  const std::optional<Setup> setup = prepare_or_report(config_path, init);
  if (!setup) return kExitUsage;
  const config::LoadedConfig& loaded = setup->loaded;
  const config::TrainingConfig& cfg = *loaded.config;
  const int64_t count = cfg.train_steps;
  if (count <= 0) {
    std::fprintf(stderr,
                 "error: %s: train_steps: how many optimizer steps to show? set "
                 "\"train_steps\" or pass --steps N\n",
                 loaded.source_name.c_str());
    return kExitUsage;
  }
  if (!setup->selection.optimizer) {
    std::fprintf(stderr,
                 "error: %s: optimizer: the schedule starts from the optimizer's lr: add an "
                 "\"optimizer\" section, e.g. {\"type\": \"Adam\", \"params\": {\"lr\": 0.001}}\n",
                 loaded.source_name.c_str());
    return kExitUsage;
  }
  // As the engine: one parameter group whose base lr is the optimizer's.
  double base_lr = 0;
  auto schedule = make_schedule(*setup, &base_lr);
  if (!schedule.ok()) {
    std::fprintf(stderr, "error: %s: scheduler: %s\n", loaded.source_name.c_str(),
                 schedule.status().message().c_str());
    return kExitUsage;
  }
  const std::vector<double> base_lrs = {base_lr};
  std::unique_ptr<plugin_host::SchedulerInstance> scheduler = std::move(*schedule);
  std::vector<Row> rows;
  bool betas = false;
  const int64_t first = scheduler ? scheduler->first_iteration() : -1;
  for (int64_t k = 1; k <= count; ++k) {
    Row row{k, first + k - 1, {}, DSCORE_HPARAM_LR, 0, 0};
    for (size_t g = 0; g < base_lrs.size(); ++g) {
      if (!scheduler) {
        row.lrs.push_back(base_lrs[g]);
        continue;
      }
      auto point = scheduler->point_at(row.t, g);
      if (!point.ok()) {
        std::fprintf(stderr, "error: %s\n", point.status().message().c_str());
        return kExitFailure;
      }
      row.lrs.push_back(point->lr);
      if (g == 0) row.mask = point->set_mask, row.beta1 = point->beta1, row.beta2 = point->beta2;
    }
    betas |= (row.mask & (DSCORE_HPARAM_BETA1 | DSCORE_HPARAM_BETA2)) != 0;
    rows.push_back(std::move(row));
  }
  if (vm.count("csv")) {
    print_csv(rows, betas);
    return kExitOk;
  }
  const std::string what = scheduler ? "scheduler " + setup->selection.scheduler->info->name
                                     : std::string("no scheduler: the optimizer's lr throughout");
  std::printf("%s (%s), optimizer %s, base lr %s, %lld steps\n", loaded.source_name.c_str(),
              what.c_str(), setup->selection.optimizer->info->name.c_str(),
              repr(base_lrs[0]).c_str(), static_cast<long long>(count));
  print_table(rows, betas);
  print_plot(rows);
  return kExitOk;
}

}  // namespace dscore::cli
