// Comm-backend and offload instances (core/plugin_host/comm_instance.cc)
// over the fake single-rank loopback and the in-memory swapper: calls reach
// the plugin, errors name it, optional functions answer UNIMPLEMENTED / OK.
#include "core/plugin_host/comm_instance.h"

#include <gtest/gtest.h>

#include <cstring>

#include "tests/core/plugin_host/test_plugins.h"

namespace dscore::plugin_host {
namespace {

ValidatedParams no_params() {
  return ValidatedParams::from_object(json::Value::object(), json::Value::object());
}

dscore_tensor fp32_view(float* data, int64_t* shape) {
  return dscore_tensor{sizeof(dscore_tensor),
                       data,
                       DSCORE_DTYPE_F32,
                       DSCORE_DEVICE_CPU,
                       0,
                       1,
                       shape,
                       nullptr,
                       shape[0],
                       nullptr};
}

TEST(PluginCommInstance, CollectivesReachTheBackendAndOptionalOnesAreUnimplemented) {
  auto registry = testing::open_test_registry({"fake_kinds"});
  ASSERT_TRUE(registry);
  const PluginInfo& info = *registry->find(DSCORE_KIND_COMM, "fake_loopback").value();
  auto comm = CommInstance::create(info, no_params(), InstanceContext{});
  ASSERT_TRUE(comm.ok()) << comm.status().message();
  float a[2] = {1, 2}, b[2] = {0, 0};
  int64_t shape[1] = {2};
  dscore_tensor send = fp32_view(a, shape), recv = fp32_view(b, shape);
  ASSERT_TRUE((*comm)->allreduce(send, recv, DSCORE_REDUCE_SUM, nullptr).ok());
  EXPECT_EQ(b[1], 2.0f);
  EXPECT_TRUE((*comm)->reduce_scatter(send, recv, DSCORE_REDUCE_AVG, nullptr).ok());
  EXPECT_TRUE((*comm)->allgather(send, recv, nullptr).ok());
  EXPECT_TRUE((*comm)->broadcast(recv, 0, nullptr).ok());
  EXPECT_TRUE((*comm)->barrier().ok());
  Status p2p = (*comm)->send(send, 1, nullptr);
  EXPECT_EQ(p2p.code(), DSCORE_FAILED_PRECONDITION);
  EXPECT_EQ(p2p.message(), info.display() + " send: no peers in a one-rank job");
  Status a2a = (*comm)->all_to_all(send, recv, nullptr);
  EXPECT_EQ(a2a.code(), DSCORE_UNIMPLEMENTED);
  EXPECT_EQ(a2a.message(), info.display() + " has no all_to_all");
  (*comm)->abort("test");  // absent: a no-op
  EXPECT_NE((*comm)->handle(), nullptr);
  EXPECT_EQ((*comm)->vtable(), info.descriptor->vtable);
}

TEST(PluginCommInstance, CreateErrorNamesTheBackend) {
  auto registry = testing::open_test_registry({"fake_kinds"});
  ASSERT_TRUE(registry);
  const PluginInfo& info = *registry->find(DSCORE_KIND_COMM, "fake_loopback").value();
  InstanceContext two_ranks;
  two_ranks.world_size = 2;
  auto comm = CommInstance::create(info, no_params(), two_ranks);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().message(), info.display() + " create: fake_loopback runs one rank only");
}

TEST(PluginOffloadInstance, WritesAndReadsBackThroughSubmitAndWait) {
  auto registry = testing::open_test_registry({"fake_kinds"});
  ASSERT_TRUE(registry);
  const PluginInfo& info = *registry->find(DSCORE_KIND_OFFLOAD, "fake_ram_swapper").value();
  auto swapper = OffloadInstance::create(info, no_params(), InstanceContext{});
  ASSERT_TRUE(swapper.ok()) << swapper.status().message();
  EXPECT_EQ((*swapper)->alignment(), 4096u);
  EXPECT_EQ((*swapper)->backend(), "ram");
  auto file = (*swapper)->open_file("/tmp/state.swp", DSCORE_OPEN_READ | DSCORE_OPEN_WRITE);
  ASSERT_TRUE(file.ok());

  alignas(4096) static char out[4096], in[4096];
  std::memset(out, 'x', sizeof out);
  dscore_io_request write{0, DSCORE_IO_WRITE, *file, 4096, out, sizeof out, 11};
  dscore_io_request read{0, DSCORE_IO_READ, *file, 4096, in, sizeof in, 12};
  ASSERT_TRUE((*swapper)->submit({write}).ok());
  ASSERT_TRUE((*swapper)->submit({read}).ok());
  std::vector<dscore_io_completion> done;
  ASSERT_TRUE((*swapper)->wait(2, 1000, 8, &done).ok());
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].user_data, 11u);
  EXPECT_EQ(done[1].bytes, sizeof in);
  EXPECT_EQ(done[1].os_error, 0);
  EXPECT_EQ(in[100], 'x');

  // Fewer than asked: DEADLINE_EXCEEDED, and what did complete is kept.
  Status st = (*swapper)->wait(1, 0, 8, &done);
  EXPECT_EQ(st.code(), DSCORE_DEADLINE_EXCEEDED);
  EXPECT_TRUE(done.empty());

  EXPECT_TRUE((*swapper)->register_buffers({out}, {sizeof out}).ok());  // absent: OK
  EXPECT_TRUE((*swapper)->sync_file(*file).ok());
  EXPECT_TRUE((*swapper)->close_file(*file).ok());
  EXPECT_EQ((*swapper)->close_file(99).code(), DSCORE_NOT_FOUND);
}

}  // namespace
}  // namespace dscore::plugin_host
