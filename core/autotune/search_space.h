// What `dscore autotune` searches (docs/autotuning.md): the ZeRO stage and
// the micro-batch size (with the accumulation steps that keep a fixed
// train_batch_size), and with "fast": false also activation checkpointing,
// optimizer and parameter offload, the thread split per rank and, around
// the best of those, one ZeRO bucket or overlap setting at a time. A
// Candidate is one point; candidate_config() writes it into the user's
// config, changing nothing else.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/config/json.h"
#include "core/config/training_config.h"

namespace dscore::autotune {

struct Candidate {
  int stage = 0;
  int64_t micro = 1;  // train_micro_batch_size_per_gpu
  int64_t gas = 1;    // gradient_accumulation_steps
  bool checkpointing = false;
  std::string offload_optimizer = "none";  // none | cpu | nvme
  std::string offload_param = "none";      // none | cpu | nvme (stage 3)
  int threads = 0;                         // `dscore run --threads`; 0: its default
  // One ZeRO setting changed on top (the second phase): a
  // zero_optimization key and its value.
  std::optional<std::pair<std::string, json::Value>> zero_knob;
  bool user_config = false;  // the config as the user wrote it

  // "z2_mb16_gas2", then "_ckpt", "_optcpu", "_paramnvme", "_t1",
  // "_reduce_bucket_size=5e+07"; "user_z2_mb16_gas2" for the user's own.
  std::string name() const;
};

// What the search starts from: the user's config and what it fixes.
struct SearchBase {
  json::Value document;     // as written, "autotuning" kept; stage set to stages[0]
  std::vector<int> stages;  // zero_optimization.stage: int, list or "all"
  std::optional<int64_t> fixed_train_batch_size;  // train_batch_size given as a number
  int64_t gas = 1;  // gradient_accumulation_steps when train_batch_size is not fixed
  int world = 1;
  int cpus = 1;                   // CPUs this job's ranks share
  std::string nvme_path;          // an nvme_path the user gave (nvme offload is tried with it)
  std::optional<Candidate> user;  // the user's own settings (a single stage)
};

// Reads the user's config document for a search on `world` ranks sharing
// `cpus` CPUs. A stage list or "all" becomes the stages searched (the
// document then says stages[0], so it validates); errors name the key.
Result<SearchBase> read_search_base(json::Value document, int world, int cpus);

// The user's settings as a candidate, from the validated config (batch
// keys resolved).
Candidate user_candidate(const config::TrainingConfig& config, bool checkpointing, int threads);

// The config of `c`: the base document with the candidate's keys set and
// "autotuning" removed: what best_config.json holds.
json::Value candidate_config(const SearchBase& base, const Candidate& c);

// A trial's config: candidate_config() running `steps` optimizer steps,
// with no checkpoints and no monitors (a trial leaves nothing behind but
// its folder), and plugins.paths made absolute against `config_dir`.
json::Value trial_config(const json::Value& candidate, int64_t steps,
                         const std::string& config_dir);

// plugins.paths of `doc` made absolute against `config_dir`, so a config
// written elsewhere (a trial's, best_config.json) loads the same plugins.
void absolute_plugin_paths(json::Value* doc, const std::string& config_dir);
// Whether `doc` names plugin folders (plugins.paths): running it from
// another folder then needs --trust-config-plugin-paths.
bool has_plugin_paths(const json::Value& doc);

// Micro-batch sizes allowed by the batch keys and the section's bounds,
// ascending: divisors of train_batch_size / world when it is fixed, else
// every size whose train_batch_size (micro x gas x world) is within
// [min_train_batch_size, max_train_batch_size].
std::vector<int64_t> allowed_micro_batches(const SearchBase& base,
                                           const config::AutotuningConfig& settings);

// Of the allowed sizes that fit, the ones tried: the largest and
// num_tuning_micro_batch_sizes - 1 more, spread down to half of it (as
// DeepSpeed's autotuner), or the largest ones when those are fewer.
std::vector<int64_t> tuning_micro_batches(const std::vector<int64_t>& fitting, int64_t num_tuning);

// The accumulation steps for `micro` (train_batch_size fixed: what keeps it).
int64_t gas_for(const SearchBase& base, int64_t micro);

// The settings of the first phase (micro-batch left to fill in): every
// stage with the user's checkpointing and offload; without `fast`, also
// every checkpointing, offload and thread choice.
std::vector<Candidate> phase_one_settings(const SearchBase& base, bool fast);

// Ways to make a setting need less memory, in order: checkpointing, then
// optimizer offload to the CPU, then parameter offload (stage 3). Used in
// fast mode for a stage where nothing fits as the user wrote it.
std::vector<Candidate> memory_savers(const Candidate& setting);

// The second phase (without `fast`): `best` with one ZeRO setting changed
// at a time (bucket sizes, overlap_comm, contiguous_gradients, stage-3
// prefetch and persistence), as DeepSpeed's tuning templates.
std::vector<Candidate> knob_variants(const Candidate& best);

}  // namespace dscore::autotune
