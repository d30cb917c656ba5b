// aio_settings_from: the config's "aio" section as the Swapper's settings.
#include <gtest/gtest.h>

#include "core/offload/swapper.h"

namespace dscore::offload {
namespace {

TEST(AioSettings, DefaultsValuesAndTheOldThreadCountName) {
  auto d = aio_settings_from(json::Value());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->block_size, 1048576);
  EXPECT_EQ(d->queue_depth, 8);
  EXPECT_EQ(d->intra_op_parallelism, 1);
  EXPECT_FALSE(d->single_submit);
  EXPECT_TRUE(d->overlap_events);

  json::Value aio = json::Value::object();
  aio.set("block_size", json::Value(int64_t{262144}));
  aio.set("queue_depth", json::Value(32));
  aio.set("thread_count", json::Value(4));
  aio.set("single_submit", json::Value(true));
  aio.set("overlap_events", json::Value("auto"));
  auto s = aio_settings_from(aio);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->block_size, 262144);
  EXPECT_EQ(s->queue_depth, 32);
  EXPECT_EQ(s->intra_op_parallelism, 4);
  EXPECT_TRUE(s->single_submit);
  EXPECT_TRUE(s->overlap_events);  // "auto": the default
}

TEST(AioSettings, WrongTypesAndValuesNameTheKey) {
  json::Value aio = json::Value::object();
  aio.set("queue_depth", json::Value(0));
  EXPECT_EQ(aio_settings_from(aio).status().message(), "aio.queue_depth must be at least 1, not 0");
  aio = json::Value::object();
  aio.set("single_submit", json::Value(1));
  EXPECT_EQ(aio_settings_from(aio).status().message(), "aio.single_submit must be true or false");
  EXPECT_EQ(aio_settings_from(json::Value(3)).status().code(), DSCORE_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace dscore::offload
