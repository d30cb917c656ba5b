// The Swapper over the fault-injecting test swapper (tests/fakes/plugins/
// fake_faulty_swapper.cc): an EIO on the Nth request fails exactly the
// ticket it belongs to, names file/offset/size/errno, and sticks; a plugin
// that reports a short read as success is caught as DATA_LOSS.
#include <gtest/gtest.h>

#include "core/offload/io_error.h"
#include "core/offload/swapper.h"
#include "tests/core/offload/swapper_test_util.h"

namespace dscore::offload {
namespace {

using testing::aligned;
using testing::Buffer;
using testing::kCreate;
using testing::random_buffer;
using testing::TempDir;

std::unique_ptr<offload::Swapper> faulty(const plugin_host::PluginRegistry& registry,
                                         int fail_request, const char* fault) {
  config::AioConfig s = config::default_aio();
  s.block_size = 4096;
  s.queue_depth = 1;  // one request at a time: which ticket fails is exact
  json::Value extra = json::Value::object();
  extra.set("fail_request", json::Value(fail_request));
  extra.set("fault", json::Value(fault));
  auto swapper = make_swapper(registry, s, {}, "fake_faulty_swapper", extra);
  EXPECT_TRUE(swapper.ok()) << swapper.status().message();
  return swapper.ok() ? std::move(*swapper) : nullptr;
}

TEST(SwapperFault, EioFailsItsTicketNamesTheRequestAndSticks) {
  auto registry = testing::swapper_registry();
  ASSERT_TRUE(registry);
  auto swapper = faulty(*registry, 3, "eio");
  ASSERT_TRUE(swapper);
  EXPECT_EQ(swapper->backend(), "fake");
  EXPECT_TRUE(swapper->failure().ok());
  TempDir dir;
  const std::string path = dir.file("eio.swp");
  auto f = swapper->open(path, kCreate);
  ASSERT_TRUE(f.ok());
  Buffer data = random_buffer(3 * 8192, 1);
  // Requests 1-2 are ticket 1, 3-4 ticket 2 (request 3 fails), 5-6 ticket 3.
  auto t1 = swapper->write(*f, 0, data.get(), 8192);
  auto t2 = swapper->write(*f, 8192, data.get() + 8192, 8192);
  ASSERT_TRUE(t1.ok() && t2.ok());
  // The I/O thread may reach request 3 before ticket 3 is queued.
  auto t3 = swapper->write(*f, 16384, data.get() + 16384, 8192);
  EXPECT_TRUE(swapper->wait(*t1).ok());
  Status st = swapper->wait(*t2);
  EXPECT_EQ(st.code(), DSCORE_UNAVAILABLE);
  EXPECT_EQ(st.message(), "swapper: writing " + path +
                              " at byte offset 8192 (4096 bytes) failed: Input/output error (EIO); "
                              "the drive reported an I/O error: check it (dmesg, smartctl) or "
                              "point nvme_path at another drive");
  // Ticket 3 was refused, or queued and never reported as done.
  if (t3.ok()) {
    Status third = swapper->wait(*t3);
    EXPECT_EQ(third.code(), DSCORE_UNAVAILABLE);
    EXPECT_EQ(third.message(), "not done, an earlier transfer failed: " + st.message());
  } else {
    EXPECT_EQ(t3.status().message(), st.message());
  }
  EXPECT_EQ(swapper->failure().message(), st.message());
  // Sticky, though the plugin would work again.
  Buffer in = aligned(4096);
  auto later = swapper->read(*f, 0, in.get(), 4096);
  EXPECT_EQ(later.status().message(), st.message());
  EXPECT_EQ(swapper->wait_all().message(), st.message());
  EXPECT_EQ(swapper->bytes_written(), 8192u);
}

TEST(SwapperFault, AShortReadReportedAsSuccessIsDataLoss) {
  auto registry = testing::swapper_registry();
  ASSERT_TRUE(registry);
  auto swapper = faulty(*registry, 2, "short_read");
  ASSERT_TRUE(swapper);
  TempDir dir;
  const std::string path = dir.file("short.swp");
  auto f = swapper->open(path, kCreate);
  ASSERT_TRUE(f.ok());
  Buffer out = random_buffer(4096, 2), in = aligned(4096);
  auto w = swapper->write(*f, 0, out.get(), 4096);  // request 1
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(swapper->wait(*w).ok());
  auto r = swapper->read(*f, 0, in.get(), 4096);  // request 2: half of it
  ASSERT_TRUE(r.ok());
  Status st = swapper->wait(*r);
  EXPECT_EQ(st.code(), DSCORE_DATA_LOSS);
  EXPECT_NE(st.message().find("reading " + path +
                              " at byte offset 0 (4096 bytes) failed: end of file after 2048 of "
                              "4096 bytes"),
            std::string::npos)
      << st.message();
}

TEST(SwapperFault, AnEnospcFromThePluginNamesTheFileSystem) {
  auto registry = testing::swapper_registry();
  ASSERT_TRUE(registry);
  auto swapper = faulty(*registry, 1, "enospc");
  ASSERT_TRUE(swapper);
  TempDir dir;
  auto f = swapper->open(dir.file("full.swp"), kCreate);
  ASSERT_TRUE(f.ok());
  Buffer out = random_buffer(4096, 3);
  auto w = swapper->write(*f, 4096, out.get(), 4096);
  ASSERT_TRUE(w.ok());
  Status st = swapper->wait(*w);
  EXPECT_EQ(st.code(), DSCORE_RESOURCE_EXHAUSTED);
  EXPECT_NE(
      st.message().find("No space left on device (ENOSPC); free space on " +
                        offload::mount_point_of(dir.path()) + " or point nvme_path elsewhere"),
      std::string::npos)
      << st.message();
}

TEST(SwapperFault, UnknownPluginAndBadParamsAreRefused) {
  auto registry = testing::swapper_registry();
  ASSERT_TRUE(registry);
  auto none = make_swapper(*registry, config::default_aio(), {}, "no_such_swapper");
  EXPECT_EQ(none.status().code(), DSCORE_NOT_FOUND);
  json::Value extra = json::Value::object();
  extra.set("fault", json::Value("meteor"));
  auto bad = make_swapper(*registry, config::default_aio(), {}, "fake_faulty_swapper", extra);
  ASSERT_EQ(bad.status().code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(bad.status().message().find("aio.fault"), std::string::npos) << bad.status().message();
  config::AioConfig odd = config::default_aio();
  odd.block_size = 1000;
  auto unaligned = make_swapper(*registry, odd, {}, "fake_faulty_swapper");
  ASSERT_EQ(unaligned.status().code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(unaligned.status().message().find("aio.block_size 1000 is not a multiple of 4096"),
            std::string::npos)
      << unaligned.status().message();
}

}  // namespace
}  // namespace dscore::offload
