// The Swapper over the nvme plugin, once per backend (io_uring, threads):
// random data of awkward sizes round-trips, hundreds of tickets over several
// files, close + reopen, registered buffers, a real full disk (tmpfs), a
// read past the end, misuse.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "core/offload/swapper.h"
#include "tests/core/offload/swapper_test_util.h"

namespace dscore::offload {
namespace {

using testing::aligned;
using testing::BackendEnv;
using testing::Buffer;
using testing::kCreate;
using testing::random_buffer;
using testing::TempDir;

constexpr size_t kBlock = 64 * 1024;

class Swapper : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    registry_ = testing::swapper_registry();
    ASSERT_TRUE(registry_);
  }

  // A swapper on the backend under test; skips the test when io_uring is
  // unavailable here (the threads run covers the fallback).
  std::unique_ptr<offload::Swapper> make(config::AioConfig s = small()) {
    BackendEnv env(GetParam());
    auto swapper = make_swapper(*registry_, s, plugin_host::InstanceContext{});
    if (!swapper.ok() && GetParam() == "io_uring" && swapper.status().code() == DSCORE_UNAVAILABLE)
      return nullptr;
    EXPECT_TRUE(swapper.ok()) << swapper.status().message();
    if (!swapper.ok()) return nullptr;
    EXPECT_EQ((*swapper)->backend(), GetParam());
    return std::move(*swapper);
  }
  static config::AioConfig small() {
    config::AioConfig s = config::default_aio();
    s.block_size = kBlock;
    s.queue_depth = 4;
    s.intra_op_parallelism = 3;
    return s;
  }
#define MAKE_OR_SKIP(var, ...)                                                        \
  auto var = make(__VA_ARGS__);                                                       \
  if (HasFailure()) return;                                                           \
  if (var == nullptr) GTEST_SKIP() << "io_uring is unavailable here: " << GetParam(); \
  static_assert(true)

  std::shared_ptr<plugin_host::PluginRegistry> registry_;
  TempDir dir_;
};

void expect_same(const char* a, const char* b, size_t bytes, const std::string& what) {
  EXPECT_EQ(std::memcmp(a, b, bytes), 0) << what << " differs after the round trip";
}

TEST_P(Swapper, AwkwardSizesRoundTrip) {
  MAKE_OR_SKIP(swapper);
  // One page, one block, a block and a page, more than queue_depth x block,
  // and a larger odd size: all multiples of 4096, few of the block size.
  const std::vector<size_t> sizes = {4096, kBlock, kBlock + 4096, 5 * kBlock + 8192,
                                     1024 * 1024 + 12288};
  auto a = swapper->open(dir_.file("a.swp"), kCreate);
  auto b = swapper->open(dir_.file("b.swp"), kCreate);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().message();
  std::vector<Buffer> out, in;
  std::vector<uint64_t> offsets;
  uint64_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.push_back(random_buffer(sizes[i], i + 1));
    offsets.push_back(offset);
    const int file = i % 2 == 0 ? *a : *b;
    ASSERT_TRUE(swapper->write(file, offset, out[i].get(), sizes[i]).ok());
    offset += sizes[i] + 4096;  // leave holes
  }
  ASSERT_TRUE(swapper->wait_all().ok());
  std::vector<offload::Swapper::Ticket> tickets;
  for (size_t i = 0; i < sizes.size(); ++i) {
    in.push_back(aligned(sizes[i]));
    auto t = swapper->read(i % 2 == 0 ? *a : *b, offsets[i], in[i].get(), sizes[i]);
    ASSERT_TRUE(t.ok()) << t.status().message();
    tickets.push_back(*t);
  }
  for (size_t i = sizes.size(); i-- > 0;) {  // any order
    ASSERT_TRUE(swapper->wait(tickets[i]).ok());
    expect_same(out[i].get(), in[i].get(), sizes[i], std::to_string(sizes[i]) + " bytes");
  }
  size_t total = 0;
  for (size_t s : sizes) total += s;
  EXPECT_EQ(swapper->bytes_written(), total);
  EXPECT_EQ(swapper->bytes_read(), total);
}

TEST_P(Swapper, HundredsOfConcurrentTicketsOverSeveralFiles) {
  MAKE_OR_SKIP(swapper);
  constexpr int kFiles = 3, kTickets = 300;
  std::vector<int> files;
  for (int f = 0; f < kFiles; ++f) {
    auto file = swapper->open(dir_.file("f" + std::to_string(f)), kCreate);
    ASSERT_TRUE(file.ok());
    files.push_back(*file);
  }
  std::mt19937 rng(7);
  struct Slot {
    int file;
    uint64_t offset;
    size_t bytes;
    Buffer out, in;
    offload::Swapper::Ticket ticket;
  };
  std::vector<Slot> slots(kTickets);
  std::vector<uint64_t> end(kFiles, 0);
  for (int i = 0; i < kTickets; ++i) {
    Slot& s = slots[i];
    s.file = i % kFiles;
    s.bytes = 4096 * (1 + rng() % 24);
    s.offset = end[s.file];
    end[s.file] += s.bytes;
    s.out = random_buffer(s.bytes, 100 + i);
    auto t = swapper->write(files[s.file], s.offset, s.out.get(), s.bytes);
    ASSERT_TRUE(t.ok());
    s.ticket = *t;
  }
  std::vector<int> order(kTickets);
  for (int i = 0; i < kTickets; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  for (int i : order) ASSERT_TRUE(swapper->wait(slots[i].ticket).ok());
  for (Slot& s : slots) {
    s.in = aligned(s.bytes);
    auto t = swapper->read(files[s.file], s.offset, s.in.get(), s.bytes);
    ASSERT_TRUE(t.ok());
    s.ticket = *t;
  }
  std::shuffle(order.begin(), order.end(), rng);
  for (int i : order) {
    ASSERT_TRUE(swapper->wait(slots[i].ticket).ok());
    expect_same(slots[i].out.get(), slots[i].in.get(), slots[i].bytes,
                "ticket " + std::to_string(i));
  }
}

TEST_P(Swapper, SyncCloseAndReopenReadBack) {
  const size_t bytes = 3 * kBlock + 4096;
  Buffer out = random_buffer(bytes, 42);
  {
    MAKE_OR_SKIP(swapper);
    auto f = swapper->open(dir_.file("state.swp"), kCreate | DSCORE_OPEN_TRUNCATE);
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(swapper->path(*f), dir_.file("state.swp"));
    ASSERT_TRUE(swapper->write(*f, 8192, out.get(), bytes).ok());
    ASSERT_TRUE(swapper->sync(*f).ok());  // waits for the write first
    ASSERT_TRUE(swapper->close(*f).ok());
    EXPECT_EQ(swapper->close(*f).code(), DSCORE_NOT_FOUND);
    EXPECT_EQ(swapper->write(*f, 0, out.get(), 4096).status().code(), DSCORE_NOT_FOUND);
    // Reopen in the same swapper.
    auto again = swapper->open(dir_.file("state.swp"), DSCORE_OPEN_READ);
    ASSERT_TRUE(again.ok());
    Buffer in = aligned(bytes);
    auto t = swapper->read(*again, 8192, in.get(), bytes);
    ASSERT_TRUE(t.ok());
    ASSERT_TRUE(swapper->wait(*t).ok());
    expect_same(out.get(), in.get(), bytes, "reopened file");
  }  // destroyed with the file open: closes it
  MAKE_OR_SKIP(fresh);
  auto f = fresh->open(dir_.file("state.swp"), DSCORE_OPEN_READ);
  ASSERT_TRUE(f.ok());
  Buffer in = aligned(bytes);
  auto t = fresh->read(*f, 8192, in.get(), bytes);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(fresh->wait(*t).ok());
  expect_same(out.get(), in.get(), bytes, "file read by a new swapper");
}

TEST_P(Swapper, RegisteredBuffersAndUnregisteredOnesBothWork) {
  MAKE_OR_SKIP(swapper);
  const size_t arena_bytes = 4 * kBlock;
  Buffer arena = random_buffer(arena_bytes, 5);
  Buffer loose = random_buffer(2 * kBlock, 6);
  ASSERT_TRUE(swapper->register_buffers({{arena.get(), arena_bytes}}).ok());
  auto f = swapper->open(dir_.file("fixed.swp"), kCreate);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(swapper->write(*f, 0, arena.get() + kBlock, 2 * kBlock).ok());  // inside
  ASSERT_TRUE(swapper->write(*f, 2 * kBlock, loose.get(), 2 * kBlock).ok());  // outside
  ASSERT_TRUE(swapper->wait_all().ok());
  Buffer copy = aligned(arena_bytes);
  std::memcpy(copy.get(), arena.get(), arena_bytes);
  std::memset(arena.get(), 0, arena_bytes);
  ASSERT_TRUE(swapper->read(*f, 0, arena.get(), arena_bytes).ok());  // inside, whole arena
  ASSERT_TRUE(swapper->wait_all().ok());
  expect_same(copy.get() + kBlock, arena.get(), 2 * kBlock, "registered half");
  expect_same(loose.get(), arena.get() + 2 * kBlock, 2 * kBlock, "unregistered half");
  ASSERT_TRUE(swapper->register_buffers({}).ok());  // cleared before the arena goes
}

TEST_P(Swapper, AFullDiskIsResourceExhaustedNamingFileOffsetSizeAndFix) {
  testing::TinyTmpfs tmpfs("256k");
  if (!tmpfs.mounted()) GTEST_SKIP() << "no tiny file system to fill: " << tmpfs.why();
  MAKE_OR_SKIP(swapper);
  const std::string path = tmpfs.path() + "/full.swp";
  auto f = swapper->open(path, kCreate);
  ASSERT_TRUE(f.ok()) << f.status().message();
  const size_t bytes = 8 * kBlock;  // 512 KiB into 256 KiB
  Buffer out = random_buffer(bytes, 9);
  auto t = swapper->write(*f, 0, out.get(), bytes);
  ASSERT_TRUE(t.ok());
  Status st = swapper->wait(*t);
  ASSERT_EQ(st.code(), DSCORE_RESOURCE_EXHAUSTED) << st.message();
  EXPECT_NE(st.message().find("writing " + path + " at byte offset "), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("(65536 bytes)"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("No space left on device (ENOSPC)"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("free space on " + tmpfs.path() + " or point nvme_path elsewhere"),
            std::string::npos)
      << st.message();
  // Sticky: nothing more is accepted, with the same message.
  auto next = swapper->write(*f, 0, out.get(), 4096);
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().message(), st.message());
  EXPECT_EQ(swapper->sync(*f).message(), st.message());
  EXPECT_EQ(swapper->wait_all().message(), st.message());
}

TEST_P(Swapper, AReadPastTheEndIsDataLoss) {
  MAKE_OR_SKIP(swapper);
  const std::string path = dir_.file("short.swp");
  auto f = swapper->open(path, kCreate);
  ASSERT_TRUE(f.ok());
  Buffer out = random_buffer(8192, 3);
  ASSERT_TRUE(swapper->write(*f, 0, out.get(), 8192).ok());
  ASSERT_TRUE(swapper->wait_all().ok());
  Buffer in = aligned(kBlock);
  auto t = swapper->read(*f, 0, in.get(), kBlock);
  ASSERT_TRUE(t.ok());
  Status st = swapper->wait(*t);
  EXPECT_EQ(st.code(), DSCORE_DATA_LOSS) << st.message();
  EXPECT_NE(st.message().find("reading " + path +
                              " at byte offset 0 (65536 bytes) failed: end of "
                              "file after 8192 of 65536 bytes"),
            std::string::npos)
      << st.message();
}

TEST_P(Swapper, MisuseIsRefusedWithTheRule) {
  MAKE_OR_SKIP(swapper);
  auto f = swapper->open(dir_.file("x.swp"), kCreate);
  ASSERT_TRUE(f.ok());
  Buffer b = aligned(8192);
  auto odd = swapper->write(*f, 100, b.get(), 4096);
  ASSERT_EQ(odd.status().code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(odd.status().message().find("multiples of 4096 bytes"), std::string::npos);
  EXPECT_EQ(swapper->read(*f, 0, b.get() + 1, 4096).status().code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_EQ(swapper->read(7, 0, b.get(), 4096).status().code(), DSCORE_NOT_FOUND);
  auto t = swapper->write(*f, 0, b.get(), 4096);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(swapper->wait(*t).ok());
  EXPECT_EQ(swapper->wait(*t).code(), DSCORE_INVALID_ARGUMENT);  // waited for once
  auto none = swapper->write(*f, 0, b.get(), 0);                 // nothing to do
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(swapper->wait(*none).ok());
  auto missing = swapper->open(dir_.file("no/such/dir/y.swp"), kCreate);
  ASSERT_EQ(missing.status().code(), DSCORE_NOT_FOUND);
  EXPECT_NE(missing.status().message().find("no/such/dir/y.swp"), std::string::npos);
  // Refusals are not I/O failures: the swapper still works.
  EXPECT_TRUE(swapper->write(*f, 0, b.get(), 8192).ok());
  EXPECT_TRUE(swapper->wait_all().ok());
}

TEST_P(Swapper, WithoutOverlappedEventsBatchesStillRoundTrip) {
  config::AioConfig s = small();
  s.overlap_events = false;
  s.single_submit = true;
  MAKE_OR_SKIP(swapper, s);
  const size_t bytes = 9 * kBlock + 4096;
  Buffer out = random_buffer(bytes, 11), in = aligned(bytes);
  auto f = swapper->open(dir_.file("batch.swp"), kCreate);
  ASSERT_TRUE(f.ok());
  auto w = swapper->write(*f, 0, out.get(), bytes);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(swapper->wait(*w).ok());
  ASSERT_TRUE(swapper->read(*f, 0, in.get(), bytes).ok());
  ASSERT_TRUE(swapper->wait_all().ok());
  expect_same(out.get(), in.get(), bytes, "batched transfer");
}

INSTANTIATE_TEST_SUITE_P(Backends, Swapper, ::testing::Values("io_uring", "threads"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace dscore::offload
