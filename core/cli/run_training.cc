#include "core/cli/run_training.h"

#include "core/comm/sigterm_report.h"

#include <cstdio>

#include <dscore/cpp/python_float.hpp>

#include <algorithm>
#include <chrono>
#include <set>
#include <vector>
#include "core/base/logging.h"
#include "core/base/process_heap.h"
#include "core/base/strings.h"

#include "core/app/progress.h"
#include "core/checkpoint/deepspeed_import.h"
#include "core/checkpoint/durable_file.h"
#include "core/comm/agreement.h"
#include "core/comm/job_env.h"
#include "core/comm/launcher.h"
#include "core/config/run_rules.h"
#include "core/data/sampler.h"
#include "core/data/source.h"
#include "core/engine/initialize.h"
#include "core/engine/job_fit.h"
#include "core/observability/json_log.h"
#include "core/pipeline/pipe_spec.h"
#include "core/plugin_host/crash_handler.h"
#include "core/plugin_host/library.h"

namespace dscore {
namespace {

// The model's elements as a whole (a tensor-parallel rank holds parts).
int64_t whole_numel(const ParamLayout& layout) {
  int64_t n = 0;
  for (const ParamEntry& p : layout.params()) n += p.whole_numel();
  return n;
}

// Trained tokens per sample of a token model (one int32 input of T + 1
// tokens: T predictions); 0 for other models.
int64_t tokens_per_sample(const dscore_model_description& d) {
  if (d.input_count != 1 || d.inputs[0]->dtype != DSCORE_DTYPE_I32 || d.inputs[0]->ndim != 1)
    return 0;
  return d.inputs[0]->shape[0] - 1;
}

constexpr int kExitFailure = 1;
constexpr int kExitConfigError = 2;

int print_config_errors(const config::LoadedConfig& loaded) {
  for (const config::ConfigError& e : loaded.errors)
    std::fprintf(stderr, "error: %s\n", config::format_error(e, loaded.source_name).c_str());
  return kExitConfigError;
}

int fail(const Status& status) {
  log_error(status.message());
  return kExitFailure;
}

// The location of a dotted JSON path in the user's file, when it is there.
json::Location locate(const json::Value& root, const std::string& path) {
  const json::Value* v = &root;
  size_t start = 0;
  while (v != nullptr && start <= path.size()) {
    const size_t dot = path.find('.', start);
    const std::string key =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const json::Member* m = v->is_object() ? v->find_member(key) : nullptr;
    if (m == nullptr) return {};
    if (dot == std::string::npos) return m->key_location;
    v = &m->value;
    start = dot + 1;
  }
  return {};
}

// What `dscore run` needs beyond DeepSpeed's schema, and what this build
// cannot run yet: config errors (exit 2) before anything is created.
void check_run_config(config::LoadedConfig* loaded, const config::RunOptions& run) {
  const config::TrainingConfig& cfg = *loaded->config;
  if (!cfg.model)
    loaded->errors.push_back({"model",
                              {},
                              "`dscore run` needs a \"model\" section, e.g. "
                              "\"model\": {\"type\": \"mlp\"}"});
  if (!cfg.optimizer)
    loaded->errors.push_back({"optimizer",
                              {},
                              "`dscore run` needs an \"optimizer\" section, "
                              "e.g. \"optimizer\": {\"type\": \"Adam\", "
                              "\"params\": {\"lr\": 0.001}}"});
  if (cfg.train_steps <= 0)
    loaded->errors.push_back({"train_steps",
                              {},
                              "`dscore run` needs the number of optimizer "
                              "steps: set \"train_steps\" or pass --steps N"});
  if (cfg.save_interval > 0 && cfg.checkpoint_dir.empty())
    loaded->errors.push_back({"save_interval",
                              {},
                              "save_interval needs \"checkpoint_dir\": the folder to save "
                              "checkpoints in"});
  for (config::ConfigError& e : config::run_errors(cfg, run)) {
    e.location = locate(loaded->resolved, e.path);
    loaded->errors.push_back(std::move(e));
  }
}

// memory_breakdown: this rank's plan beside what it actually allocated.
// Each stage's share of the schedule spent computing (its first data-parallel
// rank's), beside the schedule's bubble at equal stage times: the bench
// reads it.
void log_pipeline_timing(const Engine& e) {
  const Engine::PipelineTiming t = e.pipeline_timing();
  if (t.batches == 0 || t.batch_seconds <= 0) return;
  const config::TrainingConfig& cfg = e.config();
  const auto spec = pipeline::pipe_spec_of(cfg);  // the engine ran it: it is valid
  if (!spec.ok()) return;
  const bool interleaved = spec->interleaved;
  const double busy = t.compute_seconds / t.batch_seconds;
  char line[256];
  std::snprintf(line, sizeof line,
                "pipeline stage timing: computing %.1f%% of train_batch over %lld batches, idle "
                "%.1f%% (%s bubble %s = %.1f%% at equal stage times)",
                100.0 * busy, static_cast<long long>(t.batches), 100.0 * (1.0 - busy),
                interleaved ? "the interleaved schedule's" : "1F1B's",
                interleaved ? "(p - 1) / (v m + p - 1)" : "(p - 1) / (m + p - 1)",
                100.0 * pipeline::bubble_fraction(spec->shape));
  log_info(line);
}

std::string describe_memory(const Engine& e) {
  const zero::ZeroPlan plan = e.plan();
  const zero::MemoryPlan &planned = plan.memory, measured = e.measured_memory();
  auto row = [](const char* name, int64_t p, int64_t m) {
    return std::string("\n  ") + name + ": planned " + format_bytes(static_cast<uint64_t>(p)) +
           ", allocated " + format_bytes(static_cast<uint64_t>(m));
  };
  int64_t plugins = 0;  // the model's activations and what other plugins allocate
  for (const auto& [tag, bytes] : e.plugin_memory().by_tag())
    plugins += static_cast<int64_t>(bytes);
  const std::optional<int64_t> peak = peak_resident_bytes();
  std::string text = "memory" + row("parameters", planned.parameters, measured.parameters) +
                     row("gradients", planned.gradients, measured.gradients) +
                     row("master weights", planned.master, measured.master) +
                     row("optimizer state", planned.optimizer, measured.optimizer) +
                     row("buffers", planned.buffers + planned.host_staging, measured.buffers) +
                     row("activations", planned.activations, plugins) +
                     "\n  process and allocator: planned " +
                     format_bytes(static_cast<uint64_t>(planned.process));
  // One line per rank that `dscore plan` can be checked against: the
  // host's part (on a GPU the rest is in its memory, not in the RSS).
  const int64_t host = plan.host_memory();
  if (plan.on_device)
    text += "\n  in GPU memory: planned " + std::to_string(plan.device_memory()) + " bytes";
  text += "\n  peak: planned " + std::to_string(host) + " bytes, peak RSS (VmHWM) " +
          (peak ? std::to_string(*peak) + " bytes" : std::string("unknown"));
  if (peak && *peak > 0)
    text += " (plan/measured " +
            std::to_string(static_cast<double>(host) / static_cast<double>(*peak)).substr(0, 5) +
            ")";
  return text;
}

// DeepSpeed's "mom=[...]": the optimizer's betas as a tuple, or its
// momentum, when it has either.
std::string momentum_text(const PluginSelection& selection) {
  if (!selection.optimizer) return "";
  const json::Value& params = selection.optimizer->params.values();
  if (const json::Value* betas = params.find("betas"); betas != nullptr && betas->is_array()) {
    std::vector<std::string> parts;
    for (const json::Value& b : betas->items())
      parts.push_back(sdk::python_float_repr(b.as_number()));
    return "(" + join(parts, ", ") + ")";
  }
  if (const json::Value* m = params.find("momentum"); m != nullptr && m->is_number())
    return sdk::python_float_repr(m->as_number());
  return "";
}

// The libraries this run's plugins come from, and the SHA-256 of each: the
// exact code the run loaded (plugin_host/trust.h says which files may be).
void log_plugin_libraries(const PluginSelection& selection) {
  std::vector<const SelectedPlugin*> used;
  for (const auto* one : {&selection.model, &selection.optimizer, &selection.scheduler})
    if (one->has_value()) used.push_back(&**one);
  for (const SelectedPlugin& monitor : selection.monitors) used.push_back(&monitor);
  std::set<std::string> logged;
  for (const SelectedPlugin* plugin : used) {
    if (plugin->info == nullptr || !logged.insert(plugin->info->library_path).second) continue;
    const Result<std::string> digest = plugin->info->library->sha256();
    log_info("plugin library " + plugin->info->library_path + " sha256 " +
             (digest.ok() ? *digest : "unreadable (" + digest.status().message() + ")"));
  }
}

// --resume on a folder DeepSpeed wrote: rank 0 converts it (`dscore
// checkpoint import`) into the run's checkpoint_dir/imported-deepspeed
// (without a checkpoint_dir, beside it as <dir>-dscore), replacing an
// earlier conversion there; then every rank resumes from that. Any other
// folder as it is.
Result<std::string> resume_folder(Engine& e, const std::string& dir) {
  if (!checkpoint::is_deepspeed_checkpoint(dir)) return dir;
  const std::string& save = e.config().checkpoint_dir;
  const std::string out = save.empty() ? dir + "-dscore" : save + "/imported-deepspeed";
  Status imported = Status::Ok();
  if (e.rank() == 0) {
    imported = checkpoint::remove_tree(out);
    if (imported.ok()) {
      auto result = checkpoint::import_deepspeed_checkpoint(dir, out, {});
      if (result.ok())
        log_info("converted DeepSpeed's checkpoint " + result->tag + " of " + dir +
                 " (ZeRO stage " + std::to_string(result->zero_stage) + ", " +
                 std::to_string(result->world_size) + " rank(s), step " +
                 std::to_string(result->global_steps) + ") into " + out);
      imported = result.status();
    }
  }
  DSCORE_RETURN_IF_ERROR(comm::agree(e.communicator(), imported)
                             .with_context("cannot convert DeepSpeed's checkpoint " + dir));
  return out;
}

}  // namespace

int run_training(const RunOptions& options) {
  plugin_host::install_crash_handler();
  if (options.log_json) {
    set_log_formatter([](LogLevel level, int rank, std::string_view message) {
      const double now =
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
              .count();
      return observability::json_log_line(now, level, std::max(rank, 0), message);
    });
  }
  auto job = comm::detect_job_env();
  if (!job.ok()) {
    log_error(job.status().message());
    return kExitConfigError;
  }
  if ((options.ranks > 1 || options.hosts) && job->world_size == 1) {
    const Result<comm::LaunchCommand> launch = [&] {
      if (!options.hosts) return comm::local_launch(options.ranks, options.rank_args);
      comm::HostLaunch hosts = *options.hosts;
      hosts.args = options.rank_args;
      return comm::host_launch(hosts);
    }();
    if (!launch.ok()) return fail(launch.status());
    if (options.dry_run) {
      std::printf("%s\n", comm::shell_line(*launch).c_str());
      return 0;
    }
    const Status failed = comm::exec_launch(*launch);  // returns on failure only
    return fail(options.hosts ? failed
                              : Status(failed.code(), "-n " + std::to_string(options.ranks) + ": " +
                                                          failed.message()));
  }
  if (options.ranks > 1 && job->world_size != options.ranks) {
    log_error("-n " + std::to_string(options.ranks) + " but the launcher started " +
              std::to_string(job->world_size) + " ranks; drop -n when using mpirun or srun");
    return kExitConfigError;
  }
  // One rank per process: every line this process logs shows its rank.
  set_log_rank(job->rank, job->world_size);
  if (job->world_size > 1) comm::end_with_launcher();
  InitializeOptions init;
  init.job = *job;
  init.train_steps = options.steps;
  init.allow_unsupported = options.allow_unsupported;
  init.trust_config_plugin_paths = options.trust_config_plugin_paths;
  init.compute_threads = options.threads;
  init.environment = read_engine_environment();
  auto setup = prepare(options.config_path, init);
  if (!setup.ok()) return fail(setup.status());
  if (setup->loaded.ok())
    check_run_config(&setup->loaded, {init.environment.experimental_cuda_engine});
  if (!setup->loaded.ok()) return print_config_errors(setup->loaded);
  const bool leader = job->rank == 0;
  // Libraries on the search path that failed to load, though not needed by
  // this config (a failed lookup already lists them in its error).
  if (setup->registry && leader) {
    for (const plugin_host::LoadProblem& p : setup->registry->problems())
      log_warning(p.message.find(p.path) == std::string::npos ? p.path + ": " + p.message
                                                              : p.message);
  }
  if (leader) log_config_notices(setup->loaded);
  if (leader) log_plugin_libraries(setup->selection);
  // The heap policy (process_heap.h), before the engine starts its threads.
  // Not with offload: its swap and staging buffers vary in size, and a heap
  // that never shrinks grew to 1.19x the peak RSS of glibc's defaults (the
  // 2.5B GPT of configs/nvme_offload_2b.json, bench/README.md).
  if (!config::make_placement(*setup->loaded.config).offloads()) {
    auto kept = apply_heap_policy_from_env();
    if (!kept.ok()) return fail(kept.status());
    if (*kept) log_debug("malloc: one arena, freed memory kept in the process");
  }

  auto engine = build_engine(*setup, nullptr);
  if (!engine.ok()) {
    // A decision every rank shares (the plan's fit) is said once.
    if (leader || !engine.status().shared_by_all_ranks()) log_error(engine.status().message());
    return kExitFailure;
  }
  Engine& e = **engine;
  if (e.world_size() > 1) comm::install_sigterm_report(e.communicator(), e.pipeline_role());
  struct Uninstall {
    ~Uninstall() { comm::uninstall_sigterm_report(); }
  } uninstall;
  // From here a failure on one rank ends every rank at once.
  auto fail_job = [&](const Status& status) {
    log_error(status.message());
    if (e.world_size() > 1) e.abort(status.message());
    return kExitFailure;
  };
  const config::TrainingConfig& cfg = e.config();
  auto source = data::make_batch_source(cfg, e.model());
  if (!source.ok()) return fail_job(source.status());

  if (leader)
    log_info("training " + e.model().display_name() + ": " +
             std::to_string(whole_numel(e.model_layout())) + " parameters" +
             (e.pipelined() && e.tensor_parallel_size() <= 1
                  ? " (this stage " + std::to_string(e.layout().total_numel()) + ")"
                  : std::string()) +
             (e.tensor_parallel_size() > 1
                  ? " (split over " + std::to_string(e.tensor_parallel_size()) +
                        " tensor-parallel ranks: this rank " +
                        std::to_string(e.layout().total_numel()) +
                        (e.pipelined() ? " of its stage's" : "") + ")"
                  : std::string()) +
             (e.sequence_parallel_size() > 1
                  ? " (each sample's sequence split over " +
                        std::to_string(e.sequence_parallel_size()) + " sequence-parallel ranks)"
                  : std::string()) +
             ", ZeRO stage " + std::to_string(cfg.zero.stage) + ", " +
             std::to_string(e.world_size()) + " rank(s), " + std::to_string(cfg.train_steps) +
             " steps, batch " + std::to_string(cfg.batch.train_batch_size) + " (micro " +
             std::to_string(cfg.batch.train_micro_batch_size_per_gpu) + " x gas " +
             std::to_string(cfg.batch.gradient_accumulation_steps) + " x " +
             std::to_string(e.data_parallel_size()) + " data-parallel ranks)");

  if (!options.resume_dir.empty()) {
    auto from = resume_folder(e, options.resume_dir);
    if (!from.ok()) return fail_job(from.status());
    auto resumed = e.load_checkpoint(*from);
    if (!resumed.ok()) return fail_job(resumed.status());
    if (leader && e.global_steps() >= cfg.train_steps)
      log_info("the checkpoint in " + options.resume_dir + " is already at step " +
               std::to_string(e.global_steps()) + " of train_steps " +
               std::to_string(cfg.train_steps) +
               ": nothing to train (raise train_steps or pass --steps N to train further)");
    else if (leader)
      log_info("resuming at step " + std::to_string(e.global_steps()) + " of " +
               std::to_string(cfg.train_steps));
  }
  // Periodic saves: a failure is reported and training goes on (the
  // previous checkpoint is intact); only the final save's failure fails the run.
  Status last_save;
  auto save = [&] {
    last_save = e.save_checkpoint(cfg.checkpoint_dir);
    if (!last_save.ok()) log_error(last_save.message() + (leader ? "; training goes on" : ""));
  };
  // A pipeline's stages read the same samples: the sampler's world is the
  // data-parallel one.
  const data::DistributedSampler sampler(cfg.batch, e.data_parallel_size(), e.data_parallel_rank());
  data::HostBatch batch(e.model().description(), cfg.batch.train_micro_batch_size_per_gpu);
  // A pipeline stage keeps one batch per activation buffer in flight.
  std::vector<std::unique_ptr<data::HostBatch>> pipe_batches;
  for (int b = 0; e.pipelined() && b < e.pipe_buffers(); ++b)
    pipe_batches.push_back(std::make_unique<data::HostBatch>(
        e.model().description(), cfg.batch.train_micro_batch_size_per_gpu));
  // Outlives every training call below (the engine is destroyed after it, untouched).
  ProgressObserver progress(cfg.train_steps, cfg.steps_per_print, options.progress_bar && leader,
                            options.log_json, tokens_per_sample(e.model().description()),
                            e.global_samples(), e.global_steps(), momentum_text(setup->selection));
  if (leader) e.add_observer(&progress);
  for (int64_t step = e.global_steps(); step < cfg.train_steps; ++step) {
    if (e.pipelined()) {
      auto load = [&](int64_t micro, int buffer) -> Result<const dscore_batch*> {
        data::HostBatch& b = *pipe_batches[static_cast<size_t>(buffer)];
        DSCORE_RETURN_IF_ERROR((*source)->fill(sampler.micro_batch(step, micro), &b));
        return &b.view();
      };
      if (auto loss = e.train_batch(load); !loss.ok()) return fail_job(loss.status());
    }
    for (int64_t micro = 0; !e.pipelined() && micro < cfg.batch.gradient_accumulation_steps;
         ++micro) {
      if (Status st = (*source)->fill(sampler.micro_batch(step, micro), &batch); !st.ok())
        return fail_job(st);
      if (auto loss = e.forward_backward(batch.view()); !loss.ok()) return fail_job(loss.status());
      if (Status st = e.step(); !st.ok()) return fail_job(st);
    }
    if (cfg.save_interval > 0 &&
        (e.global_steps() % cfg.save_interval == 0 || step + 1 == cfg.train_steps))
      save();
  }
  if (leader) progress.finish();
  e.remove_observer(&progress);
  if (e.pipelined() && e.data_parallel_rank() == 0) log_pipeline_timing(e);
  if (cfg.memory_breakdown) log_info(describe_memory(e));
  if (leader && cfg.comms_logger.present)
    log_info("comms_logger summary\n" + e.communicator().comms_summary());
  if (!last_save.ok()) {
    log_error("the final checkpoint was not saved: " + last_save.message());
    return kExitFailure;
  }
  return 0;
}

}  // namespace dscore
