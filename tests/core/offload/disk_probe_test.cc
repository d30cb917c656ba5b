// core/offload/disk_probe: the reference O_DIRECT probe writes and reads a
// small file through io_uring and through the thread fallback, removes it,
// and names the folder and the fix when it cannot run.
#include "core/offload/disk_probe.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "tests/core/offload/swapper_test_util.h"

namespace dscore::offload {
namespace {

using Backend = DiskProbeOptions::Backend;

DiskProbeOptions small(const std::filesystem::path& folder, Backend backend) {
  DiskProbeOptions o;
  o.folder = folder.string();
  o.file_bytes = (6ull << 20) + 4096 * 3;  // not a multiple of the block: a short last request
  o.block_size = 1ull << 20;
  o.queue_depth = 4;
  o.backend = backend;
  return o;
}

bool folder_is_empty(const std::filesystem::path& folder) {
  return std::filesystem::directory_iterator(folder) == std::filesystem::directory_iterator();
}

TEST(DiskProbe, ThreadsWriteAndReadTheWholeFileAndRemoveIt) {
  testing::TempDir dir;
  Result<DiskProbeResult> r = probe_disk(small(dir.path(), Backend::kThreads));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->backend, "threads");
  EXPECT_EQ(r->bytes, (6ull << 20) + 4096 * 3);
  EXPECT_GT(r->write_seconds, 0);
  EXPECT_GT(r->read_seconds, 0);
  EXPECT_GT(r->read_gbps(), 0);
  EXPECT_GT(r->write_gbps(), 0);
  EXPECT_TRUE(folder_is_empty(dir.path()));
}

TEST(DiskProbe, IoUringWhereTheKernelAllowsIt) {
  testing::TempDir dir;
  Result<DiskProbeResult> r = probe_disk(small(dir.path(), Backend::kIoUring));
  if (!r.ok() && r.status().code() == DSCORE_UNIMPLEMENTED)
    GTEST_SKIP() << "io_uring unavailable here: " << r.status().message();
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->backend, "io_uring");
  EXPECT_GT(r->write_gbps(), 0);
  EXPECT_GT(r->read_gbps(), 0);
  EXPECT_TRUE(folder_is_empty(dir.path()));
  // kAuto picks io_uring when it works, and says why when it does not.
  Result<DiskProbeResult> a = probe_disk(small(dir.path(), Backend::kAuto));
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->backend, "io_uring");
  EXPECT_TRUE(a->backend_reason.empty());
}

TEST(DiskProbe, RoundsTheSizeUpToTheDirectIoAlignment) {
  testing::TempDir dir;
  DiskProbeOptions o = small(dir.path(), Backend::kAuto);
  o.file_bytes = 5000;
  Result<DiskProbeResult> r = probe_disk(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->bytes, 8192u);
}

TEST(DiskProbe, AMissingFolderIsNamed) {
  testing::TempDir dir;
  const auto missing = std::filesystem::path(dir.path()) / "no_such_folder";
  Result<DiskProbeResult> r = probe_disk(small(missing, Backend::kAuto));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(missing.string()), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("exists and is writable"), std::string::npos);
}

TEST(DiskProbe, RefusesUnalignedBlocksAndNoQueue) {
  testing::TempDir dir;
  DiskProbeOptions o = small(dir.path(), Backend::kAuto);
  o.block_size = 1000;
  Result<DiskProbeResult> r = probe_disk(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("multiple of 4096"), std::string::npos);
  o = small(dir.path(), Backend::kAuto);
  o.queue_depth = 0;
  EXPECT_FALSE(probe_disk(o).ok());
}

TEST(DiskProbe, AFullDiskNamesTheFileTheRequestAndTheFix) {
  testing::TinyTmpfs tmpfs("256k");
  if (!tmpfs.mounted()) GTEST_SKIP() << tmpfs.why();
  for (Backend backend : {Backend::kIoUring, Backend::kThreads}) {
    DiskProbeOptions o = small(tmpfs.path(), backend);
    // fallocate refuses first...
    Result<DiskProbeResult> r = probe_disk(o);
    if (!r.ok() && r.status().code() == DSCORE_UNIMPLEMENTED) continue;  // no io_uring here
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(tmpfs.path() + "/.dscore_disk_probe."), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("free space in the folder"), std::string::npos)
        << r.status().message();
    // ... and without it, the write that runs out.
    o.preallocate = false;
    r = probe_disk(o);
    ASSERT_FALSE(r.ok());
    const std::string m = r.status().message();
    if (m.find("O_DIRECT") != std::string::npos) GTEST_SKIP() << "tmpfs here refuses O_DIRECT";
    // ENOSPC, or (tmpfs) a write cut short at the last free page.
    EXPECT_NE(m.find(" at offset "), std::string::npos) << m;
    EXPECT_NE(m.find(tmpfs.path() + "/.dscore_disk_probe."), std::string::npos) << m;
    EXPECT_TRUE(m.find("No space left on device") != std::string::npos ||
                m.find("short write") != std::string::npos)
        << m;
    EXPECT_NE(m.find("free space in the folder"), std::string::npos) << m;
    EXPECT_TRUE(folder_is_empty(tmpfs.path())) << "the probe file was left behind";
  }
}

}  // namespace
}  // namespace dscore::offload
