// The nvme swapper plugin through the host's OffloadInstance, once per
// backend (DSCORE_NVME_BACKEND=io_uring / threads): batches deeper than the
// queue, registered buffers, every completion's status, bytes and os_error
// (end of file, a full tmpfs), and the refusals of bad requests.
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/plugin_host/comm_instance.h"
#include "tests/core/offload/swapper_test_util.h"

namespace dscore::plugin_host {
namespace {

using offload::testing::aligned;
using offload::testing::BackendEnv;
using offload::testing::Buffer;
using offload::testing::random_buffer;
using offload::testing::TempDir;

constexpr uint32_t kCreate = DSCORE_OPEN_READ | DSCORE_OPEN_WRITE | DSCORE_OPEN_CREATE;

ValidatedParams aio(int queue_depth) {
  json::Value v = json::Value::object();
  v.set("queue_depth", json::Value(queue_depth));
  v.set("intra_op_parallelism", json::Value(2));
  return ValidatedParams::from_object(v, v);
}

dscore_io_request request(dscore_io_op op, int64_t file, uint64_t offset, void* buffer,
                          size_t bytes, uint64_t id) {
  return dscore_io_request{sizeof(dscore_io_request), op, file, offset, buffer, bytes, id};
}

class NvmeSwapper : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<OffloadInstance> make(int queue_depth = 4) {
    registry_ = offload::testing::swapper_registry();
    if (!registry_) return nullptr;
    BackendEnv env(GetParam());
    const PluginInfo& info = *registry_->find(DSCORE_KIND_OFFLOAD, "nvme").value();
    auto instance = OffloadInstance::create(info, aio(queue_depth), InstanceContext{});
    if (!instance.ok() && GetParam() == "io_uring" &&
        instance.status().code() == DSCORE_UNAVAILABLE) {
      skip_ = instance.status().message();
      return nullptr;
    }
    EXPECT_TRUE(instance.ok()) << instance.status().message();
    return instance.ok() ? std::move(*instance) : nullptr;
  }
#define MAKE_OR_SKIP(var, ...)               \
  auto var = make(__VA_ARGS__);              \
  if (HasFailure()) return;                  \
  if (var == nullptr) GTEST_SKIP() << skip_; \
  static_assert(true)

  std::shared_ptr<PluginRegistry> registry_;
  std::string skip_;
  TempDir dir_;
};

TEST_P(NvmeSwapper, ABatchDeeperThanTheQueueRoundTripsThroughRegisteredAndLooseBuffers) {
  MAKE_OR_SKIP(s, 4);
  EXPECT_EQ(s->backend(), GetParam());
  EXPECT_EQ(s->alignment(), 4096u);
  auto f = s->open_file(dir_.file("batch.swp"), kCreate);
  ASSERT_TRUE(f.ok()) << f.status().message();
  constexpr int kRequests = 13;  // > 3 x queue_depth
  const size_t piece = 3 * 4096;
  Buffer out = random_buffer(kRequests * piece, 1), in = aligned(kRequests * piece);
  // The input half registered, the rest not: fixed and plain requests mix.
  ASSERT_TRUE(s->register_buffers({in.get()}, {kRequests * piece / 2}).ok());
  std::vector<dscore_io_request> writes, reads;
  for (int i = 0; i < kRequests; ++i) {
    writes.push_back(request(DSCORE_IO_WRITE, *f, i * piece, out.get() + i * piece, piece, i));
    reads.push_back(request(DSCORE_IO_READ, *f, i * piece, in.get() + i * piece, piece, 100 + i));
  }
  ASSERT_TRUE(s->submit(writes).ok());
  std::vector<dscore_io_completion> done;
  ASSERT_TRUE(s->wait(kRequests, -1, kRequests, &done).ok());
  ASSERT_EQ(done.size(), size_t{kRequests});
  for (const auto& c : done) {
    EXPECT_EQ(c.status, DSCORE_OK);
    EXPECT_EQ(c.bytes, piece);
    EXPECT_EQ(c.os_error, 0);
  }
  ASSERT_TRUE(s->sync_file(*f).ok());
  ASSERT_TRUE(s->submit(reads).ok());
  size_t reaped = 0;
  while (reaped < kRequests) {  // a small capacity: several waits
    ASSERT_TRUE(s->wait(1, -1, 5, &done).ok());
    EXPECT_LE(done.size(), 5u);
    for (const auto& c : done) EXPECT_EQ(c.status, DSCORE_OK) << "request " << c.user_data;
    reaped += done.size();
  }
  EXPECT_EQ(std::memcmp(out.get(), in.get(), kRequests * piece), 0);
  ASSERT_TRUE(s->register_buffers({}, {}).ok());
  EXPECT_TRUE(s->close_file(*f).ok());
}

TEST_P(NvmeSwapper, EndOfFileIsDataLossWithTheBytesRead) {
  MAKE_OR_SKIP(s);
  auto f = s->open_file(dir_.file("eof.swp"), kCreate);
  ASSERT_TRUE(f.ok());
  Buffer out = random_buffer(8192, 2), in = aligned(4 * 4096);
  ASSERT_TRUE(s->submit({request(DSCORE_IO_WRITE, *f, 0, out.get(), 8192, 1)}).ok());
  std::vector<dscore_io_completion> done;
  ASSERT_TRUE(s->wait(1, -1, 4, &done).ok());
  ASSERT_TRUE(s->submit({request(DSCORE_IO_READ, *f, 4096, in.get(), 4 * 4096, 2)}).ok());
  ASSERT_TRUE(s->wait(1, -1, 4, &done).ok());
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, DSCORE_DATA_LOSS);
  EXPECT_EQ(done[0].bytes, 4096u);
  EXPECT_EQ(done[0].os_error, 0);
  EXPECT_EQ(std::memcmp(in.get(), out.get() + 4096, 4096), 0);
}

TEST_P(NvmeSwapper, AFullFileSystemIsResourceExhaustedWithEnospc) {
  offload::testing::TinyTmpfs tmpfs("256k");
  if (!tmpfs.mounted()) GTEST_SKIP() << "no tiny file system to fill: " << tmpfs.why();
  MAKE_OR_SKIP(s);
  auto f = s->open_file(tmpfs.path() + "/full.swp", kCreate);
  ASSERT_TRUE(f.ok()) << f.status().message();
  const size_t bytes = 512 * 1024;
  Buffer out = random_buffer(bytes, 3);
  ASSERT_TRUE(s->submit({request(DSCORE_IO_WRITE, *f, 0, out.get(), bytes, 7)}).ok());
  std::vector<dscore_io_completion> done;
  ASSERT_TRUE(s->wait(1, -1, 1, &done).ok());
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, DSCORE_RESOURCE_EXHAUSTED);
  EXPECT_EQ(done[0].os_error, ENOSPC);
  EXPECT_LT(done[0].bytes, bytes);  // what fitted before the disk filled
}

TEST_P(NvmeSwapper, BadRequestsAndWaitsAreRefused) {
  MAKE_OR_SKIP(s);
  auto f = s->open_file(dir_.file("bad.swp"), kCreate);
  ASSERT_TRUE(f.ok());
  Buffer b = aligned(8192);
  Status odd = s->submit({request(DSCORE_IO_WRITE, *f, 512, b.get(), 4096, 1)});
  EXPECT_EQ(odd.code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(odd.message().find("not aligned to 4096 bytes"), std::string::npos) << odd.message();
  EXPECT_EQ(s->submit({request(DSCORE_IO_READ, 99, 0, b.get(), 4096, 1)}).code(), DSCORE_NOT_FOUND);
  EXPECT_EQ(s->submit({request(7, *f, 0, b.get(), 4096, 1)}).code(), DSCORE_INVALID_ARGUMENT);
  std::vector<dscore_io_completion> done;
  EXPECT_EQ(s->wait(1, -1, 4, &done).code(), DSCORE_FAILED_PRECONDITION);  // nothing outstanding
  EXPECT_EQ(s->wait(1, 0, 4, &done).code(), DSCORE_DEADLINE_EXCEEDED);
  auto missing = s->open_file(dir_.file("none/x.swp"), DSCORE_OPEN_READ);
  EXPECT_EQ(missing.status().code(), DSCORE_NOT_FOUND);
  EXPECT_NE(missing.status().message().find("none/x.swp: No such file or directory"),
            std::string::npos)
      << missing.status().message();
  EXPECT_EQ(s->close_file(99).code(), DSCORE_NOT_FOUND);
}

INSTANTIATE_TEST_SUITE_P(Backends, NvmeSwapper, ::testing::Values("io_uring", "threads"),
                         [](const auto& info) { return info.param; });

TEST(NvmeSwapperEnv, AnUnknownBackendNameIsRefused) {
  auto registry = offload::testing::swapper_registry();
  ASSERT_TRUE(registry);
  BackendEnv env("libaio");
  const PluginInfo& info = *registry->find(DSCORE_KIND_OFFLOAD, "nvme").value();
  auto instance = OffloadInstance::create(info, aio(4), InstanceContext{});
  ASSERT_EQ(instance.status().code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(instance.status().message().find(
                "DSCORE_NVME_BACKEND=libaio is not a backend; use io_uring, threads or auto"),
            std::string::npos)
      << instance.status().message();
}

// Make io_uring_setup fail with EPERM in this process, as a container's
// seccomp profile does.
bool forbid_io_uring() {
  struct sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog program = {static_cast<unsigned short>(sizeof filter / sizeof filter[0]),
                               filter};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
}

// In a child process (a fresh one: the fallback is logged once per process).
void fall_back_when_io_uring_is_forbidden() {
  if (!forbid_io_uring()) {
    std::fprintf(stderr, "cannot install the seccomp filter\n");
    std::exit(2);
  }
  auto registry = offload::testing::swapper_registry();
  const PluginInfo& info = *registry->find(DSCORE_KIND_OFFLOAD, "nvme").value();
  auto instance = OffloadInstance::create(info, aio(4), InstanceContext{});
  if (!instance.ok() || (*instance)->backend() != "threads") std::exit(3);
  TempDir dir;
  auto f = (*instance)->open_file(dir.file("x.swp"), kCreate);
  Buffer b = random_buffer(8192, 1);
  std::vector<dscore_io_completion> done;
  if (!f.ok() || !(*instance)->submit({request(DSCORE_IO_WRITE, *f, 0, b.get(), 8192, 1)}).ok() ||
      !(*instance)->wait(1, -1, 1, &done).ok() || done[0].status != DSCORE_OK)
    std::exit(4);
  std::exit(0);
}

TEST(NvmeSwapperFallback, ForbiddenIoUringFallsBackToThreadsAndSaysWhy) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(fall_back_when_io_uring_is_forbidden(), ::testing::ExitedWithCode(0),
              "io_uring_queue_init failed: Operation not permitted \\(forbidden: "
              "kernel.io_uring_disabled or a seccomp filter\\); falling back to 2 pread/pwrite "
              "thread");
}

}  // namespace
}  // namespace dscore::plugin_host
