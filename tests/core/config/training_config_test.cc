// Tests for core/config/training_config.cc: the typed "aio" section (its
// defaults from the schema alone, the old thread_count name, errors naming
// the key) and the offload device's names.
#include "core/config/training_config.h"

#include <gtest/gtest.h>

#include "core/config/config.h"

namespace dscore::config {
namespace {

LoadedConfig load_with(const std::string& extra) {
  return load_config_text("{\"train_batch_size\": 8, " + extra + "}", "ds.json", ResolveContext{});
}

TEST(TypedAio, DefaultsAreDeepSpeedsFromTheSchema) {
  const AioConfig d = default_aio();
  EXPECT_EQ(d.block_size, 1048576);
  EXPECT_EQ(d.queue_depth, 8);
  EXPECT_EQ(d.intra_op_parallelism, 1);
  EXPECT_FALSE(d.single_submit);
  EXPECT_TRUE(d.overlap_events);
}

TEST(TypedAio, ValuesTheOldThreadCountNameAndAutoWithoutADiskToMeasure) {
  const LoadedConfig c = load_with(
      R"("aio": {"block_size": 262144, "queue_depth": 32, "thread_count": 4,
                 "single_submit": true, "overlap_events": "auto"})");
  ASSERT_TRUE(c.ok()) << c.errors[0].message;
  const AioConfig& a = c.config->aio;
  EXPECT_EQ(a.block_size, 262144);
  EXPECT_EQ(a.queue_depth, 32);
  EXPECT_EQ(a.intra_op_parallelism, 4);
  EXPECT_TRUE(a.single_submit);
  EXPECT_TRUE(a.overlap_events);  // "auto" with no nvme_path: the default
}

TEST(TypedAio, WrongTypesAndValuesNameTheKey) {
  const LoadedConfig zero = load_with(R"("aio": {"queue_depth": 0})");
  ASSERT_EQ(zero.errors.size(), 1u);
  EXPECT_EQ(zero.errors[0].path, "aio.queue_depth");
  const LoadedConfig number = load_with(R"("aio": {"single_submit": 1})");
  ASSERT_EQ(number.errors.size(), 1u);
  EXPECT_EQ(number.errors[0].path, "aio.single_submit");
  EXPECT_FALSE(load_with(R"("aio": 3)").ok());
}

TEST(TypedAio, AsJsonItIsTheSectionBack) {
  AioConfig a = default_aio();
  a.queue_depth = 16;
  const json::Value j = aio_json(a);
  EXPECT_EQ(j.find("block_size")->as_int(), 1048576);
  EXPECT_EQ(j.find("queue_depth")->as_int(), 16);
  EXPECT_EQ(j.find("intra_op_parallelism")->as_int(), 1);
  EXPECT_FALSE(j.find("single_submit")->as_bool());
  EXPECT_TRUE(j.find("overlap_events")->as_bool());
  EXPECT_EQ(j.members().size(), 5u);
}

TEST(OffloadDevice, IsReadFromTheConfigAndNamedBack) {
  const LoadedConfig c = load_with(
      R"("zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/n"},
                               "offload_param": {"device": "cpu"}})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.config->zero.offload_optimizer->device, OffloadDevice::kNvme);
  EXPECT_EQ(c.config->zero.offload_param->device, OffloadDevice::kCpu);
  EXPECT_STREQ(offload_device_name(OffloadDevice::kNone), "none");
  EXPECT_STREQ(offload_device_name(OffloadDevice::kCpu), "cpu");
  EXPECT_STREQ(offload_device_name(OffloadDevice::kNvme), "nvme");
}

}  // namespace
}  // namespace dscore::config
