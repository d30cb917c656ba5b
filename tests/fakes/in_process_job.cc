// run_in_process_job (in_process_job.h).
#include "tests/fakes/in_process_job.h"

#include <mutex>
#include <thread>

#include "core/data/batch.h"
#include "core/data/sampler.h"
#include "core/data/source.h"
#include "core/engine/engine_testing.h"
#include "core/engine/initialize.h"
#include "core/plugin_host/host_context.h"

namespace dscore::testing {
namespace {

Status train(Engine& e, int rank, const InProcessHooks& hooks, InProcessResult* result);

Status train_rank(const std::string& text, int rank, int world,
                  const std::shared_ptr<plugin_host::KvBackend>& store, const InProcessHooks& hooks,
                  InProcessResult* result) {
  // The harness is the program: it hands the engine this process's
  // environment (tests set DSCORE_* variables around a job).
  InitializeOptions options = options_with_environment();
  options.trust_config_plugin_paths = true;  // the build's plugin folder, outside the config's
  comm::JobEnv job;
  job.rank = rank;
  job.world_size = world;
  job.local_rank = rank;
  options.job = job;
  options.kv_store = store;
  DSCORE_ASSIGN_OR_RETURN(Setup setup, prepare_text(text, "in_process_job.json", ".", options));
  if (!setup.loaded.ok()) return invalid_argument(format_config_errors(setup.loaded));
  if (hooks.adjust_config) hooks.adjust_config(*setup.loaded.config);
  DSCORE_ASSIGN_OR_RETURN(auto engine, build_engine(setup, nullptr));
  Engine& e = *engine;
  // A failing rank ends the others' collectives at once, as under mpirun.
  const Status st = train(e, rank, hooks, result);
  if (!st.ok() && world > 1) e.abort(st.message());
  return st;
}

Status train(Engine& e, int rank, const InProcessHooks& hooks, InProcessResult* result) {
  const config::TrainingConfig& cfg = e.config();
  DSCORE_ASSIGN_OR_RETURN(auto source, data::make_batch_source(cfg, e.model()));
  const data::DistributedSampler sampler(cfg.batch, e.world_size(), e.rank());
  data::HostBatch batch(e.model().description(), cfg.batch.train_micro_batch_size_per_gpu);
  if (hooks.before_training) DSCORE_RETURN_IF_ERROR(hooks.before_training(e));
  std::vector<double> losses;
  for (int64_t step = e.global_steps(); step < cfg.train_steps; ++step) {
    for (int64_t micro = 0; micro < cfg.batch.gradient_accumulation_steps; ++micro) {
      DSCORE_RETURN_IF_ERROR(source->fill(sampler.micro_batch(step, micro), &batch));
      DSCORE_RETURN_IF_ERROR(e.forward_backward(batch.view()).status());
      DSCORE_RETURN_IF_ERROR(e.step());
    }
    losses.push_back(e.last_loss());
    if (hooks.after_each_step) DSCORE_RETURN_IF_ERROR(hooks.after_each_step(e, step));
  }
  std::vector<float> params;
  DSCORE_RETURN_IF_ERROR(EngineTesting::gather_parameters(e, &params));
  if (rank == 0) {
    result->losses = std::move(losses);
    result->params = std::move(params);
  }
  return Status::Ok();
}

}  // namespace

InProcessResult run_in_process_job(const std::string& config_body, int world,
                                   const InProcessHooks& hooks, const std::string& comm_backend) {
  std::string paths = std::string("\"") + DSCORE_BUILD_PLUGIN_DIR + "\"";
  for (const std::string& p : hooks.plugin_paths) paths += ", \"" + p + "\"";
  const std::string plugins =
      "\"paths\": [" + paths + "]" +
      (hooks.plugins_members.empty() ? std::string() : ", " + hooks.plugins_members);
  const std::string text = "{\"plugins\": {" + plugins + "}, \"comm\": {\"backend\": \"" +
                           comm_backend + "\", \"timeout_ms\": 60000}, " + config_body + "}";
  auto store = plugin_host::make_in_process_kv();
  InProcessResult result;
  std::mutex mutex;
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      const Status st = train_rank(text, r, world, store, hooks, &result);
      if (st.ok()) return;
      std::lock_guard<std::mutex> lock(mutex);
      if (result.error.empty()) result.error = "rank " + std::to_string(r) + ": " + st.message();
    });
  }
  for (std::thread& t : ranks) t.join();
  return result;
}

}  // namespace dscore::testing
