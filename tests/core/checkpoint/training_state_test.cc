// The training state's JSON: a round trip keeps every field, the member
// order is the on-disk format's, and a missing or mistyped field is a
// DATA_LOSS error that names the field by its path.
#include <gtest/gtest.h>

#include <string>

#include "core/checkpoint/training_state.h"

namespace dscore::checkpoint {
namespace {

TrainingState sample() {
  TrainingState s;
  s.dscore_version = "0.test";
  s.model_dtype = "bf16";
  s.params = {{"wte", {8, 4}, 32}, {"ln.bias", {4}, 4}};
  s.model_files = {"mp_rank_00_model_states.safetensors"};
  s.optim_files = {"bf16_zero_pp_rank_0_mp_rank_00_optim_states.safetensors",
                   "bf16_zero_pp_rank_1_mp_rank_00_optim_states.safetensors"};
  s.counters = {7, 56, 1, 14};
  s.loss_scaler = {true, 32768.0, 7, 3, 2};
  s.lr_last_batch_iteration = 6;
  s.optimizer_type = "adamw";
  s.optimizer_slots = {{"exp_avg", "fp32", 1}, {"exp_avg_sq", "fp32", 1}};
  s.sampler_next_global_step = 7;
  s.train_batch_size = 8;
  s.seed = 1234;
  s.ds_config = json::Value::object();
  s.ds_config.set("train_batch_size", json::Value(8));
  s.client_state = json::Value::object();
  s.client_state.set("epoch", json::Value(2));
  return s;
}

TEST(TrainingState, RoundTripKeepsEveryField) {
  const TrainingState s = sample();
  const std::string text = json::serialize(to_json(s));
  auto parsed = json::parse(text, "state");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  auto back = training_state_from_json(*parsed, "ckpt");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->dscore_version, s.dscore_version);
  EXPECT_EQ(back->model_dtype, s.model_dtype);
  ASSERT_EQ(back->params.size(), 2u);
  EXPECT_EQ(back->params[0].name, "wte");
  EXPECT_EQ(back->params[0].shape, (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(back->params[0].numel, 32);
  EXPECT_EQ(back->params[1].numel, 4);
  EXPECT_EQ(back->model_files, s.model_files);
  EXPECT_EQ(back->optim_files, s.optim_files);
  EXPECT_EQ(back->counters.global_steps, 7);
  EXPECT_EQ(back->counters.global_samples, 56);
  EXPECT_EQ(back->counters.skipped_steps, 1);
  EXPECT_EQ(back->counters.micro_steps, 14);
  EXPECT_TRUE(back->loss_scaler.dynamic);
  EXPECT_EQ(back->loss_scaler.scale, 32768.0);
  EXPECT_EQ(back->loss_scaler.iteration, 7);
  EXPECT_EQ(back->loss_scaler.last_overflow_iteration, 3);
  EXPECT_EQ(back->loss_scaler.hysteresis_left, 2);
  EXPECT_EQ(back->lr_last_batch_iteration, 6);
  EXPECT_EQ(back->optimizer_type, "adamw");
  EXPECT_EQ(back->optimizer_slot_names(), (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
  EXPECT_EQ(back->optimizer_slots[1].dtype, "fp32");
  EXPECT_EQ(back->optimizer_slots[1].elements_per_param, 1);
  EXPECT_EQ(back->sampler_next_global_step, 7);
  EXPECT_EQ(back->train_batch_size, 8);
  EXPECT_EQ(back->seed, 1234);
  EXPECT_EQ(back->ds_config, s.ds_config);
  EXPECT_EQ(back->client_state, s.client_state);
  // Written again, the bytes are the same.
  EXPECT_EQ(json::serialize(to_json(*back)), text);
}

TEST(TrainingState, ANodeLocalSaveKeepsEachFilesHost) {
  TrainingState s = sample();
  EXPECT_FALSE(s.node_local());
  EXPECT_EQ(to_json(s).find("files")->find("hosts"), nullptr);  // shared saves read as before
  s.model_file_hosts.assign(s.model_files.size(), "hostA");
  s.optim_file_hosts = {"hostA", "hostB"};
  s.optim_files.resize(2, "zero_pp_rank_1_mp_rank_00_optim_states.safetensors");
  auto back = training_state_from_json(to_json(s), "ckpt");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(back->node_local());
  EXPECT_EQ(back->model_file_hosts, s.model_file_hosts);
  EXPECT_EQ(back->optim_file_hosts, s.optim_file_hosts);
  // A host list that does not cover the files is refused.
  json::Value short_list = to_json(s);
  json::Value files = *short_list.find("files");
  json::Value hosts = *files.find("hosts");
  hosts.set("optim_states", json::Value::array());
  files.set("hosts", hosts);
  short_list.set("files", files);
  auto bad = training_state_from_json(short_list, "ckpt");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("files.hosts does not name a host for every file"),
            std::string::npos)
      << bad.status().message();
}

// The member order and spelling of format version 1, as earlier builds
// wrote it by hand (core/engine/engine_checkpoint.cc before TrainingState).
TEST(TrainingState, JsonIsTheOnDiskFormat) {
  const std::string text = json::serialize(to_json(sample()));
  EXPECT_EQ(
      text,
      "{\"dscore_version\":\"0.test\",\"model_dtype\":\"bf16\",\"params\":[{\"name\":\"wte\","
      "\"shape\":[8,4]},"
      "{\"name\":\"ln.bias\",\"shape\":[4]}],\"files\":{\"model_states\":[\"mp_rank_00_model_"
      "states.safetensors\"],"
      "\"optim_states\":[\"bf16_zero_pp_rank_0_mp_rank_00_optim_states.safetensors\","
      "\"bf16_zero_pp_rank_1_mp_rank_00_optim_states.safetensors\"]},\"counters\":{\"global_"
      "steps\":7,"
      "\"global_samples\":56,\"skipped_steps\":1,\"micro_steps\":14},\"loss_scaler\":{\"dynamic\":"
      "true,"
      "\"scale\":32768.0,\"iteration\":7,\"last_overflow_iteration\":3,\"hysteresis_left\":2},"
      "\"lr_scheduler\":{\"last_batch_iteration\":6},\"optimizer\":{\"type\":\"adamw\",\"slots\":[{"
      "\"name\":"
      "\"exp_avg\",\"dtype\":\"fp32\",\"elements_per_param\":1},{\"name\":\"exp_avg_sq\",\"dtype\":"
      "\"fp32\","
      "\"elements_per_param\":1}]},\"data_sampler\":{\"next_global_step\":7,\"train_batch_size\":8}"
      ","
      "\"rng\":{\"seed\":1234},\"ds_config\":{\"train_batch_size\":8},\"client_state\":{\"epoch\":"
      "2}}");
}

Status parse_without(const char* section, const char* key) {
  json::Value v = to_json(sample());
  json::Value* holder = section[0] == '\0' ? &v : v.find(section);
  EXPECT_NE(holder, nullptr);
  if (holder != nullptr) holder->erase(key);
  return training_state_from_json(v, "ckpt/model_states").status();
}

TEST(TrainingState, MissingFieldIsDataLossNamingIt) {
  const Status counters = parse_without("counters", "global_samples");
  EXPECT_EQ(counters.code(), DSCORE_DATA_LOSS);
  EXPECT_NE(counters.message().find("ckpt/model_states"), std::string::npos) << counters.message();
  EXPECT_NE(counters.message().find("counters.global_samples is missing"), std::string::npos)
      << counters.message();

  const Status scaler = parse_without("loss_scaler", "hysteresis_left");
  EXPECT_EQ(scaler.code(), DSCORE_DATA_LOSS);
  EXPECT_NE(scaler.message().find("loss_scaler.hysteresis_left"), std::string::npos)
      << scaler.message();

  const Status section = parse_without("", "lr_scheduler");
  EXPECT_EQ(section.code(), DSCORE_DATA_LOSS);
  EXPECT_NE(section.message().find("lr_scheduler is missing"), std::string::npos)
      << section.message();

  const Status client = parse_without("", "client_state");
  EXPECT_EQ(client.code(), DSCORE_DATA_LOSS);
  EXPECT_NE(client.message().find("client_state"), std::string::npos) << client.message();
}

TEST(TrainingState, MistypedFieldIsDataLossNamingIt) {
  json::Value v = to_json(sample());
  v.find("counters")->set("global_steps", json::Value("seven"));
  Status s = training_state_from_json(v, "ckpt").status();
  EXPECT_EQ(s.code(), DSCORE_DATA_LOSS);
  EXPECT_NE(s.message().find("counters.global_steps is not an integer"), std::string::npos)
      << s.message();

  v = to_json(sample());
  v.find("optimizer")->find("slots")->items()[1].set("name", json::Value(3));
  s = training_state_from_json(v, "ckpt").status();
  EXPECT_EQ(s.code(), DSCORE_DATA_LOSS);
  EXPECT_NE(s.message().find("optimizer.slots[1].name is not a string"), std::string::npos)
      << s.message();

  v = to_json(sample());
  v.find("params")->items()[0].find("shape")->items()[1] = json::Value(-1);
  s = training_state_from_json(v, "ckpt").status();
  EXPECT_EQ(s.code(), DSCORE_DATA_LOSS);
  EXPECT_NE(s.message().find("params[0].shape"), std::string::npos) << s.message();

  s = training_state_from_json(json::Value(3), "ckpt").status();
  EXPECT_EQ(s.code(), DSCORE_DATA_LOSS);
  EXPECT_NE(s.message().find("no training state"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace dscore::checkpoint
