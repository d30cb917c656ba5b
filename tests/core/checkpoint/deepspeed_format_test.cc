// DeepSpeed checkpoints imported (core/checkpoint/deepspeed_import.h) and
// exported (deepspeed_export.h), on a ZeRO-2 save of 2 ranks built here byte
// for byte in DeepSpeed's layout:
// parameters a [3] and b [2, 2] back to back, padded to 8 (a multiple of
// 2 x ranks); rank 0 owns elements 0-3 (a, b[0]), rank 1 elements 4-6
// (b[1..3]) and the padding, which its fp32 slice leaves out and its Adam
// moments keep. Real DeepSpeed is the judge in tests/external/deepspeed/
// (check_checkpoint_import.py, check_checkpoint_export.py).
#include "core/checkpoint/deepspeed_import.h"

#include "core/checkpoint/deepspeed_export.h"
#include "core/checkpoint/torch_file.h"

#include <gtest/gtest.h>

#include "core/checkpoint/checkpoint_info.h"
#include "core/checkpoint/durable_file.h"
#include "core/checkpoint/format.h"
#include "tests/core/checkpoint/torch_save_writer.h"
#include "tests/fakes/temp_dir.h"

namespace dscore::checkpoint {
namespace {

using dscore::testing::TempDir;
using namespace dscore::checkpoint::testing;

std::string size(const std::vector<int>& dims) {
  std::string t = "(";
  for (int d : dims) t += binint(d);
  return global("torch", "Size") + t + "t\x85R";
}

class DeepSpeedImport : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.write("ds/latest", "global_step7\n");
    write_model({});
    write_rank(0, {1, 2, 3, 4}, {10, 20, 30, 40});
    write_rank(1, {5, 6, 7}, {50, 60, 70, 0});
  }

  // The model-states file; `config` adds members to its ds_config.
  void write_model(std::vector<std::pair<std::string, std::string>> config) {
    config.insert(config.end(), {{str("train_batch_size"), binint(8)},
                                 {str("zero_optimization"), dict({{str("stage"), binint(2)}})},
                                 {str("optimizer"), dict({{str("type"), str("Adam")}})}});
    const std::string shapes = list({global("collections", "OrderedDict") + ")R" + "(" + str("a") +
                                     size({3}) + str("b") + size({2, 2}) + "u"});
    const std::string model = dict(
        {{str("module"), dict({{str("a"), tensor("0", {3})}, {str("b"), tensor("0", {2, 2}, 3)}})},
         {str("param_shapes"), shapes},
         {str("lr_scheduler"), dict({{str("last_batch_iteration"), binint(6)}})},
         {str("global_steps"), binint(7)},
         {str("global_samples"), binint(56)},
         {str("skipped_steps"), binint(0)},
         {str("dp_world_size"), binint(2)},
         {str("ds_config"), dict(config)}});
    dir_.write("ds/global_step7/mp_rank_00_model_states.pt",
               torch_save("mp_rank_00_model_states", pickle(model), {{1, 2, 3, 4, 5, 6, 7}}));
  }

  // Rank `rank`'s optimizer file; `scaler` is its pickled loss scaler
  // (DeepSpeed's static one by default) and `dynamic` its dynamic flag.
  void write_rank(int rank, const std::vector<float>& fp32, const std::vector<float>& moment,
                  const std::string& scaler = object("deepspeed.runtime.fp16.loss_scaler",
                                                     "LossScaler",
                                                     dict({{str("cur_scale"), binfloat(1.0)}})),
                  const std::string& dynamic = "\x89") {
    const int n = static_cast<int>(fp32.size()), padded = static_cast<int>(moment.size());
    const std::string state =
        dict({{binint(0), dict({{str("step"), binint(7)},
                                {str("exp_avg"), tensor("1", {padded})},
                                {str("exp_avg_sq"), tensor("2", {padded})}})}});
    const std::string osd = dict(
        {{str("loss_scaler"), scaler},
         {str("dynamic_loss_scale"), dynamic},
         {str("single_partition_of_fp32_groups"), list({tensor("0", {n})})},
         {str("base_optimizer_state"), dict({{str("state"), state}, {str("param_groups"), "]"}})}});
    std::vector<float> squares = moment;
    for (float& v : squares) v *= v;
    const std::string name = "zero_pp_rank_" + std::to_string(rank) + "_mp_rank_00_optim_states";
    dir_.write("ds/global_step7/" + name + ".pt",
               torch_save(name, pickle(dict({{str("optimizer_state_dict"), osd}})),
                          {fp32, moment, squares}));
  }

  std::vector<float> read(const std::string& slot, const std::string& param, int64_t count,
                          const std::string& folder = "out") {
    auto info = open_checkpoint(dir_.file(folder), "");
    EXPECT_TRUE(info.ok()) << info.status().message();
    auto set = FragmentSet::open(info->path, info->state.optim_files);
    EXPECT_TRUE(set.ok()) << set.status().message();
    std::vector<float> out(static_cast<size_t>(count));
    Status st = set->read(slot, param, 0, count, 1, DSCORE_DTYPE_F32, out.data());
    EXPECT_TRUE(st.ok()) << st.message();
    return out;
  }

  TempDir dir_{"dscore_ds_import"};
};

TEST_F(DeepSpeedImport, TheRanksSlicesBecomeWholeParametersWithTheirState) {
  auto result = import_deepspeed_checkpoint(dir_.file("ds"), dir_.file("out"), {});
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_EQ(result->tag, "global_step7");
  EXPECT_EQ(result->zero_stage, 2);
  EXPECT_EQ(result->world_size, 2);
  EXPECT_EQ(result->elements, 7);
  EXPECT_EQ(read("fp32", "a", 3), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(read("fp32", "b", 4), (std::vector<float>{4, 5, 6, 7}));
  EXPECT_EQ(read("exp_avg", "b", 4), (std::vector<float>{40, 50, 60, 70}));
  EXPECT_EQ(read("exp_avg_sq", "a", 3), (std::vector<float>{100, 400, 900}));
  auto info = open_checkpoint(dir_.file("out"), "");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state.counters.global_steps, 7);
  EXPECT_EQ(info->state.counters.global_samples, 56);
  EXPECT_EQ(info->state.lr_last_batch_iteration, 6);
  EXPECT_EQ(info->state.optimizer_type, "adam");
  EXPECT_EQ(info->state.train_batch_size, 8);
  ASSERT_EQ(info->state.params.size(), 2u);
  EXPECT_EQ(info->state.params[1].shape, (std::vector<int64_t>{2, 2}));
}

TEST_F(DeepSpeedImport, AnFp16SaveBringsItsDynamicLossScaler) {
  // DeepSpeed's DynamicLossScaler, pickled with its fields (and its dtype
  // as the global torch.float16).
  write_model({{str("fp16"), dict({{str("enabled"), "\x88"}})}});
  const std::string scaler = object("deepspeed.runtime.fp16.loss_scaler", "DynamicLossScaler",
                                    dict({{str("cur_scale"), binfloat(1024.0)},
                                          {str("cur_iter"), binint(7)},
                                          {str("last_overflow_iter"), binint(3)},
                                          {str("cur_hysteresis"), binint(2)},
                                          {str("dynamic"), "\x88"},
                                          {str("dtype"), global("torch", "float16")}}));
  write_rank(0, {1, 2, 3, 4}, {10, 20, 30, 40}, scaler, "\x88");
  write_rank(1, {5, 6, 7}, {50, 60, 70, 0}, scaler, "\x88");
  auto result = import_deepspeed_checkpoint(dir_.file("ds"), dir_.file("out"), {});
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_EQ(result->model_dtype, "fp16");
  auto info = open_checkpoint(dir_.file("out"), "");
  ASSERT_TRUE(info.ok()) << info.status().message();
  const TrainingState::LossScaler& ls = info->state.loss_scaler;
  EXPECT_TRUE(ls.dynamic);
  EXPECT_EQ(ls.scale, 1024.0);
  EXPECT_EQ(ls.iteration, 7);
  EXPECT_EQ(ls.last_overflow_iteration, 3);
  EXPECT_EQ(ls.hysteresis_left, 2);
  EXPECT_EQ(read("fp32", "b", 4), (std::vector<float>{4, 5, 6, 7}));
}

TEST_F(DeepSpeedImport, AMissingRankFileIsNamed) {
  std::filesystem::remove(dir_.file("ds/global_step7/zero_pp_rank_1_mp_rank_00_optim_states.pt"));
  auto result = import_deepspeed_checkpoint(dir_.file("ds"), dir_.file("out"), {});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), DSCORE_NOT_FOUND);
  EXPECT_NE(result.status().message().find("zero_pp_rank_1_mp_rank_00_optim_states.pt: missing; "
                                           "the checkpoint was saved by 2 ranks"),
            std::string::npos)
      << result.status().message();
  EXPECT_FALSE(std::filesystem::exists(dir_.file("out/latest")));
  EXPECT_FALSE(std::filesystem::exists(dir_.file("out/global_step7.partial")));
}

TEST_F(DeepSpeedImport, ASliceOfTheWrongSizeIsALayoutError) {
  write_rank(1, {5, 6}, {50, 60, 0, 0});
  auto result = import_deepspeed_checkpoint(dir_.file("ds"), dir_.file("out"), {});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), DSCORE_DATA_LOSS);
  EXPECT_NE(result.status().message().find("rank 1 saved 2 fp32 values"), std::string::npos)
      << result.status().message();
}

TEST_F(DeepSpeedImport, ARankFileThatWouldRunCodeIsRefused) {
  // A pickle that loads fine up to a call torch.load would make.
  const std::string name = "zero_pp_rank_1_mp_rank_00_optim_states";
  dir_.write(
      "ds/global_step7/" + name + ".pt",
      torch_save(name, pickle(global("subprocess", "check_call") + "(" + str("id") + "tR"), {}));
  auto result = import_deepspeed_checkpoint(dir_.file("ds"), dir_.file("out"), {});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(result.status().message().find(name + ".pt: refused: the pickle names the global "
                                                  "subprocess.check_call"),
            std::string::npos)
      << result.status().message();
}

TEST_F(DeepSpeedImport, NoLatestAskForATagAndAnExistingTagIsKept) {
  std::filesystem::remove(dir_.file("ds/latest"));
  auto result = import_deepspeed_checkpoint(dir_.file("ds"), dir_.file("out"), {});
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("--tag"), std::string::npos)
      << result.status().message();
  ASSERT_TRUE(
      import_deepspeed_checkpoint(dir_.file("ds"), dir_.file("out"), {"global_step7"}).ok());
  auto again = import_deepspeed_checkpoint(dir_.file("ds"), dir_.file("out"), {"global_step7"});
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("global_step7 exists"), std::string::npos)
      << again.status().message();
}

TEST_F(DeepSpeedImport, ResumingFromTheDeepSpeedFolderItselfSaysHowToConvertIt) {
  EXPECT_TRUE(is_deepspeed_checkpoint(dir_.file("ds")));
  ASSERT_TRUE(import_deepspeed_checkpoint(dir_.file("ds"), dir_.file("out"), {}).ok());
  EXPECT_FALSE(is_deepspeed_checkpoint(dir_.file("out")));  // dscore's
  EXPECT_FALSE(is_deepspeed_checkpoint(dir_.file("nowhere")));
  auto info = open_checkpoint(dir_.file("ds"), "");
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), DSCORE_FAILED_PRECONDITION);
  EXPECT_NE(info.status().message().find("is a DeepSpeed checkpoint (.pt files): convert it with "
                                         "`dscore checkpoint import " +
                                         dir_.file("ds")),
            std::string::npos)
      << info.status().message();
}

TEST_F(DeepSpeedImport, ModelParallelCheckpointsAreRefusedByName) {
  dir_.write("ds/global_step7/mp_rank_01_model_states.pt", "x");
  auto result = import_deepspeed_checkpoint(dir_.file("ds"), dir_.file("out"), {});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), DSCORE_UNIMPLEMENTED);
  EXPECT_NE(result.status().message().find("model (tensor) parallelism"), std::string::npos)
      << result.status().message();
}

// The values of a float tensor list entry `key` of rank `rank`'s exported optimizer file.
std::vector<float> exported_values(const std::string& folder, int rank, const char* key) {
  auto file = TorchFile::open(folder + "/global_step7/zero_pp_rank_" + std::to_string(rank) +
                              "_mp_rank_00_optim_states.pt");
  EXPECT_TRUE(file.ok()) << file.status().message();
  const PickleValue* osd = file->root().get("optimizer_state_dict");
  const PickleValue* v =
      std::string(key) == "fp32"
          ? osd->get("single_partition_of_fp32_groups")->items[0].get()
          : osd->get("base_optimizer_state")->get("state")->get(int64_t{0})->get(key);
  auto values = file->read_f32(v->tensor);
  EXPECT_TRUE(values.ok()) << values.status().message();
  return *values;
}

TEST_F(DeepSpeedImport, ExportWritesEachRanksSliceAndImportsBackUnchanged) {
  ASSERT_TRUE(import_deepspeed_checkpoint(dir_.file("ds"), dir_.file("out"), {}).ok());
  DeepSpeedExportOptions options;
  options.world_size = 3;  // 7 elements padded to 12: slices of 4, the last one all padding
  options.next_lr = 0.25;
  auto exported = export_deepspeed_checkpoint(dir_.file("out"), dir_.file("back"), options);
  ASSERT_TRUE(exported.ok()) << exported.status().message();
  EXPECT_EQ(exported->files.size(), 4u);
  EXPECT_EQ(*read_text_file(dir_.file("back/latest"), 100), "global_step7");
  EXPECT_EQ(exported_values(dir_.file("back"), 0, "fp32"), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(exported_values(dir_.file("back"), 1, "fp32"), (std::vector<float>{5, 6, 7}));
  EXPECT_EQ(exported_values(dir_.file("back"), 1, "exp_avg"), (std::vector<float>{50, 60, 70, 0}));
  EXPECT_EQ(exported_values(dir_.file("back"), 2, "exp_avg_sq"), (std::vector<float>{0, 0, 0, 0}));
  auto rank0 =
      TorchFile::open(dir_.file("back/global_step7/zero_pp_rank_0_mp_rank_00_optim_states.pt"));
  ASSERT_TRUE(rank0.ok());
  const PickleValue* group = rank0->root()
                                 .get("optimizer_state_dict")
                                 ->get("base_optimizer_state")
                                 ->get("param_groups")
                                 ->items[0]
                                 .get();
  EXPECT_EQ(group->get("lr")->real, 0.25);
  // DeepSpeed's layout read back: the same parameters and state.
  auto again = import_deepspeed_checkpoint(dir_.file("back"), dir_.file("again"), {});
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->world_size, 3);
  EXPECT_EQ(read("fp32", "b", 4, "again"), (std::vector<float>{4, 5, 6, 7}));
  EXPECT_EQ(read("exp_avg_sq", "a", 3, "again"), (std::vector<float>{100, 400, 900}));
}

TEST_F(DeepSpeedImport, TheUniversalExportImportsBackUnchanged) {
  ASSERT_TRUE(import_deepspeed_checkpoint(dir_.file("ds"), dir_.file("out"), {}).ok());
  DeepSpeedExportOptions options;
  options.universal = true;
  auto exported = export_deepspeed_checkpoint(dir_.file("out"), dir_.file("uni"), options);
  ASSERT_TRUE(exported.ok()) << exported.status().message();
  EXPECT_EQ(*read_text_file(dir_.file("uni/latest_universal"), 100), "global_step7");
  auto b = TorchFile::open(dir_.file("uni/global_step7/zero/b/exp_avg.pt"));
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->root().get("param")->tensor.shape, (std::vector<int64_t>{2, 2}));
  auto again = import_deepspeed_checkpoint(dir_.file("uni"), dir_.file("again"), {});
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(read("fp32", "b", 4, "again"), (std::vector<float>{4, 5, 6, 7}));
  EXPECT_EQ(read("exp_avg", "b", 4, "again"), (std::vector<float>{40, 50, 60, 70}));
  auto info = open_checkpoint(dir_.file("again"), "");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state.counters.global_steps, 7);
}

TEST_F(DeepSpeedImport, ExportRefusesWhatItCannotWriteByName) {
  ASSERT_TRUE(import_deepspeed_checkpoint(dir_.file("ds"), dir_.file("out"), {}).ok());
  DeepSpeedExportOptions options;
  options.zero_stage = 3;
  auto stage3 = export_deepspeed_checkpoint(dir_.file("out"), dir_.file("back"), options);
  ASSERT_FALSE(stage3.ok());
  EXPECT_EQ(stage3.status().code(), DSCORE_UNIMPLEMENTED);
  EXPECT_NE(stage3.status().message().find("ZeRO stage 3"), std::string::npos)
      << stage3.status().message();
  options.zero_stage = 2;
  options.world_size = 0;
  EXPECT_EQ(
      export_deepspeed_checkpoint(dir_.file("out"), dir_.file("back"), options).status().code(),
      DSCORE_INVALID_ARGUMENT);
  EXPECT_FALSE(std::filesystem::exists(dir_.file("back/latest")));
}

}  // namespace
}  // namespace dscore::checkpoint
