// The search space of `dscore autotune` (core/autotune/search_space.h):
// what it reads from the user's config, the micro-batch sizes it allows and
// picks, and the configs it writes for candidates and trials.
#include "core/autotune/search_space.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace dscore::autotune {
namespace {

json::Value parse(const std::string& text) {
  auto v = json::parse(text, "test");
  EXPECT_TRUE(v.ok()) << v.status().message();
  return v.ok() ? *v : json::Value();
}

const json::Value& at(const json::Value& v, std::initializer_list<const char*> path) {
  const json::Value* cur = &v;
  for (const char* key : path) {
    cur = cur->find(key);
    if (cur == nullptr) throw std::runtime_error(std::string("missing ") + key);
  }
  return *cur;
}

config::AutotuningConfig settings() {
  config::AutotuningConfig s;  // the schema's defaults
  s.min_train_batch_size = 1;
  s.min_train_micro_batch_size_per_gpu = 1;
  s.max_train_micro_batch_size_per_gpu = 1024;
  s.num_tuning_micro_batch_sizes = 3;
  return s;
}

TEST(AutotuneSearchSpace, StagesComeFromTheStageKey) {
  auto one = read_search_base(parse(R"({"zero_optimization": {"stage": 2}})"), 1, 2);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->stages, std::vector<int>({2}));
  auto all = read_search_base(parse(R"({"zero_optimization": {"stage": "all"}})"), 1, 2);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->stages, std::vector<int>({0, 1, 2, 3}));
  // The document then names one stage, so it validates.
  EXPECT_EQ(at(all->document, {"zero_optimization", "stage"}).as_int(), 0);
  auto list = read_search_base(parse(R"({"zero_optimization": {"stage": [3, 1, 3]}})"), 1, 2);
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->stages, std::vector<int>({1, 3}));
  auto absent = read_search_base(parse(R"({})"), 1, 2);
  ASSERT_TRUE(absent.ok());
  EXPECT_EQ(absent->stages, std::vector<int>({0}));  // DeepSpeed's default
  for (const char* bad :
       {R"({"zero_optimization": {"stage": 4}})", R"({"zero_optimization": {"stage": "some"}})",
        R"({"zero_optimization": {"stage": []}})"}) {
    auto r = read_search_base(parse(bad), 1, 2);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("zero_optimization.stage"), std::string::npos);
  }
}

TEST(AutotuneSearchSpace, AFixedTrainBatchSizeKeepsItsValue) {
  auto base = read_search_base(parse(R"({"train_batch_size": 24})"), 2, 2);
  ASSERT_TRUE(base.ok());
  // 12 samples per rank: its divisors.
  EXPECT_EQ(allowed_micro_batches(*base, settings()), std::vector<int64_t>({1, 2, 3, 4, 6, 12}));
  EXPECT_EQ(gas_for(*base, 4), 3);
  config::AutotuningConfig bounded = settings();
  bounded.min_train_micro_batch_size_per_gpu = 2;
  bounded.max_train_micro_batch_size_per_gpu = 6;
  EXPECT_EQ(allowed_micro_batches(*base, bounded), std::vector<int64_t>({2, 3, 4, 6}));
  // Not a multiple of the ranks: no size.
  auto odd = read_search_base(parse(R"({"train_batch_size": 5})"), 2, 2);
  EXPECT_TRUE(allowed_micro_batches(*odd, settings()).empty());
}

TEST(AutotuneSearchSpace, WithoutAFixedBatchTheBoundsLimitIt) {
  auto base = read_search_base(parse(R"({"gradient_accumulation_steps": 2})"), 2, 2);
  ASSERT_TRUE(base.ok());
  config::AutotuningConfig s = settings();
  s.max_train_batch_size = 40;  // micro x 2 x 2 <= 40
  s.min_train_batch_size = 8;   // micro >= 2
  EXPECT_EQ(allowed_micro_batches(*base, s), std::vector<int64_t>({2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(gas_for(*base, 7), 2);
}

TEST(AutotuneSearchSpace, TriesTheLargestFittingSizesDownToHalf) {
  const std::vector<int64_t> fitting = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  EXPECT_EQ(tuning_micro_batches(fitting, 3), std::vector<int64_t>({12, 9, 6}));
  EXPECT_EQ(tuning_micro_batches(fitting, 1), std::vector<int64_t>({12}));
  // Fewer sizes in the upper half than asked: the largest ones.
  EXPECT_EQ(tuning_micro_batches({1, 2, 4, 8, 16, 32}, 3), std::vector<int64_t>({32, 16, 8}));
  EXPECT_EQ(tuning_micro_batches({1, 2}, 5), std::vector<int64_t>({2, 1}));
  EXPECT_TRUE(tuning_micro_batches({}, 3).empty());
}

TEST(AutotuneSearchSpace, ACandidateChangesOnlyItsKeys) {
  auto base = read_search_base(parse(R"({"train_batch_size": 32, "optimizer": {"type": "Adam"},
                "zero_optimization": {"stage": "all", "reduce_bucket_size": 1000,
                                      "offload_optimizer": {"device": "nvme", "nvme_path": "/x"}},
                "autotuning": {"enabled": true}})"),
                               1, 2);
  ASSERT_TRUE(base.ok());
  EXPECT_EQ(base->nvme_path, "/x");
  Candidate c;
  c.stage = 3;
  c.micro = 8;
  c.gas = 4;
  c.checkpointing = true;
  c.offload_optimizer = "cpu";
  c.offload_param = "nvme";
  const json::Value doc = candidate_config(*base, c);
  EXPECT_EQ(doc.find("autotuning"), nullptr);
  EXPECT_EQ(at(doc, {"train_batch_size"}).as_int(), 32);
  EXPECT_EQ(at(doc, {"train_micro_batch_size_per_gpu"}).as_int(), 8);
  EXPECT_EQ(at(doc, {"gradient_accumulation_steps"}).as_int(), 4);
  EXPECT_EQ(at(doc, {"zero_optimization", "stage"}).as_int(), 3);
  EXPECT_EQ(at(doc, {"zero_optimization", "reduce_bucket_size"}).as_int(), 1000);
  EXPECT_EQ(at(doc, {"zero_optimization", "offload_optimizer", "device"}).as_string(), "cpu");
  EXPECT_EQ(at(doc, {"zero_optimization", "offload_param", "nvme_path"}).as_string(), "/x");
  EXPECT_TRUE(at(doc, {"activation_checkpointing"}).is_object());
  EXPECT_EQ(at(doc, {"optimizer", "type"}).as_string(), "Adam");
  EXPECT_EQ(c.name(), "z3_mb8_gas4_ckpt_optcpu_paramnvme");
  // Parameter offload only at stage 3; the user's own nvme section kept.
  c.stage = 1;
  c.offload_optimizer = "nvme";
  c.checkpointing = false;
  const json::Value one = candidate_config(*base, c);
  EXPECT_EQ(at(one, {"zero_optimization"}).find("offload_param"), nullptr);
  EXPECT_EQ(at(one, {"zero_optimization", "offload_optimizer", "nvme_path"}).as_string(), "/x");
  EXPECT_EQ(one.find("activation_checkpointing"), nullptr);
}

TEST(AutotuneSearchSpace, TheUsersCandidateIsTheirConfig) {
  auto base = read_search_base(parse(R"({"train_batch_size": 32, "seed": 3,
                                         "autotuning": {}})"),
                               1, 2);
  ASSERT_TRUE(base.ok());
  Candidate user;
  user.user_config = true;
  user.micro = 32;
  json::Value expected = base->document;
  expected.erase("autotuning");
  EXPECT_EQ(candidate_config(*base, user), expected);
  EXPECT_EQ(user.name(), "user_z0_mb32_gas1");
}

TEST(AutotuneSearchSpace, ATrialLeavesNothingBehind) {
  const json::Value candidate = parse(
      R"({"checkpoint_dir": "ck", "save_interval": 10, "train_steps": 400,
          "csv_monitor": {"enabled": true, "output_path": "runs"},
          "plugins": {"paths": ["plugins", "/abs"], "monitors": [{"type": "m"}]}})");
  const json::Value trial = trial_config(candidate, 5, "/cfg/dir");
  EXPECT_EQ(at(trial, {"train_steps"}).as_int(), 5);
  EXPECT_EQ(trial.find("checkpoint_dir"), nullptr);
  EXPECT_EQ(trial.find("save_interval"), nullptr);
  EXPECT_FALSE(at(trial, {"csv_monitor", "enabled"}).as_bool());
  EXPECT_EQ(at(trial, {"plugins"}).find("monitors"), nullptr);
  const auto& paths = at(trial, {"plugins", "paths"}).items();
  ASSERT_EQ(paths.size(), 2u);
  EXPECT_EQ(paths[0].as_string(), "/cfg/dir/plugins");
  EXPECT_EQ(paths[1].as_string(), "/abs");
  EXPECT_TRUE(has_plugin_paths(trial));
  EXPECT_FALSE(has_plugin_paths(parse("{}")));
}

TEST(AutotuneSearchSpace, FastTunesStagesOnlyAndTheFullSpaceMore) {
  auto base = read_search_base(parse(R"({"zero_optimization": {"stage": "all"}})"), 1, 2);
  ASSERT_TRUE(base.ok());
  const auto fast = phase_one_settings(*base, /*fast=*/true);
  ASSERT_EQ(fast.size(), 4u);
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(fast[static_cast<size_t>(s)].stage, s);
    EXPECT_EQ(fast[static_cast<size_t>(s)].offload_optimizer, "none");
    EXPECT_FALSE(fast[static_cast<size_t>(s)].checkpointing);
  }
  // Full, 2 CPUs for 1 rank: checkpointing x 2 and threads {default, 1}
  // (4 per stage), optimizer offload {none, cpu} from stage 1, parameter
  // offload {none, cpu} at stage 3: 4 + 8 + 8 + 16.
  const auto full = phase_one_settings(*base, /*fast=*/false);
  EXPECT_EQ(full.size(), 36u);
  int with_threads = 0;
  for (const Candidate& c : full) {
    with_threads += c.threads == 1;
    if (c.stage == 0) {
      EXPECT_EQ(c.offload_optimizer, "none");
    }
    if (c.stage != 3) {
      EXPECT_EQ(c.offload_param, "none");
    }
  }
  EXPECT_EQ(with_threads, static_cast<int>(full.size()) / 2);
}

TEST(AutotuneSearchSpace, MemorySaversAndKnobs) {
  Candidate c;
  c.stage = 3;
  const auto savers = memory_savers(c);
  ASSERT_EQ(savers.size(), 3u);
  EXPECT_EQ(savers[0].name(), "z3_mb1_gas1_ckpt");
  EXPECT_EQ(savers[1].name(), "z3_mb1_gas1_ckpt_optcpu");
  EXPECT_EQ(savers[2].name(), "z3_mb1_gas1_ckpt_optcpu_paramcpu");
  c.stage = 0;
  EXPECT_EQ(memory_savers(c).size(), 1u);
  EXPECT_TRUE(knob_variants(c).empty());  // stage 0 has no ZeRO settings
  c.stage = 2;
  c.user_config = true;
  const auto knobs = knob_variants(c);
  EXPECT_EQ(knobs.size(), 2u + 3u + 4u);
  EXPECT_EQ(knobs.front().name(), "z2_mb1_gas1_reduce_bucket_size=5e6");
  for (const Candidate& k : knobs) EXPECT_FALSE(k.user_config);
  c.stage = 3;
  EXPECT_EQ(knob_variants(c).size(), 2u + 4u + 2u + 3u);
}

}  // namespace
}  // namespace dscore::autotune
