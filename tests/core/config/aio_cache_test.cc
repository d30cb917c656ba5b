// Tests for core/config/aio_cache.cc: the device key of a path, where the
// cache lives, a write read back, the atomic replace, one file per device,
// and a corrupt or foreign file ignored with a warning naming it.
#include "core/config/aio_cache.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <fstream>

#include <gtest/gtest.h>

#include "tests/core/config/temp_cache_home.h"

namespace dscore::config {
namespace {

namespace fs = std::filesystem;
using testing::TempCacheHome;

MeasuredAio sample(int64_t block_size) {
  MeasuredAio m;
  m.block_size = block_size;
  m.queue_depth = 32;
  m.intra_op_parallelism = 2;
  m.single_submit = true;
  m.overlap_events = false;
  m.read_gbps = 1.5;
  m.write_gbps = 1.25;
  m.probe_read_gbps = 1.625;
  m.probe_write_gbps = 1.375;
  m.path = "/mnt/nvme";
  m.measured_at = "2026-11-24T05:00:00Z";
  return m;
}

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

TEST(AioCache, ADeviceIsItsNumberAndFileSystem) {
  TempCacheHome home;
  Result<DeviceId> here = device_of(home.disk().string());
  ASSERT_TRUE(here.ok()) << here.status().message();
  struct stat st;
  ASSERT_EQ(::stat(home.disk().c_str(), &st), 0);
  EXPECT_EQ(here->major, major(st.st_dev));
  EXPECT_EQ(here->minor, minor(st.st_dev));
  EXPECT_FALSE(here->fs_type.empty());
  EXPECT_EQ(here->text(),
            std::to_string(here->major) + ":" + std::to_string(here->minor) + " " + here->fs_type);
  EXPECT_EQ(here->file_name(), std::to_string(here->major) + "-" + std::to_string(here->minor) +
                                   "-" + here->fs_type + ".json");
  // An nvme_path the run has yet to create: the device of its nearest parent.
  Result<DeviceId> later = device_of((home.disk() / "job" / "rank0").string());
  ASSERT_TRUE(later.ok()) << later.status().message();
  EXPECT_EQ(later->text(), here->text());
  // /proc is another file system.
  Result<DeviceId> proc = device_of("/proc/self");
  ASSERT_TRUE(proc.ok());
  EXPECT_EQ(proc->fs_type, "0x9fa0");  // PROC_SUPER_MAGIC, not a named disk file system
  EXPECT_NE(proc->text(), here->text());
}

TEST(AioCache, LivesUnderXdgCacheHomeElseHome) {
  TempCacheHome home;
  EXPECT_EQ(aio_cache_dir(), home.aio_dir().string());
  ::setenv("XDG_CACHE_HOME", "relative/cache", 1);  // invalid per the XDG spec: ignored
  const char* old_home = std::getenv("HOME");
  const std::string saved = old_home ? old_home : "";
  ::setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(aio_cache_dir(), "/home/someone/.cache/dscore/aio");
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(aio_cache_dir(), "/home/someone/.cache/dscore/aio");
  ::setenv("HOME", saved.c_str(), 1);
}

TEST(AioCache, WhatIsWrittenReadsBack) {
  TempCacheHome home;
  const DeviceId dev = *device_of(home.disk().string());
  EXPECT_FALSE(read_aio_cache(dev).measured);  // nothing measured yet, and no warning
  EXPECT_TRUE(read_aio_cache(dev).warning.empty());
  Result<std::string> file = write_aio_cache(dev, sample(8 << 20));
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(*file, (home.aio_dir() / dev.file_name()).string());
  AioCacheLookup back = read_aio_cache(dev);
  EXPECT_EQ(back.file, *file);
  EXPECT_TRUE(back.warning.empty()) << back.warning;
  ASSERT_TRUE(back.measured);
  const MeasuredAio want = sample(8 << 20);
  EXPECT_EQ(back.measured->block_size, want.block_size);
  EXPECT_EQ(back.measured->queue_depth, want.queue_depth);
  EXPECT_EQ(back.measured->intra_op_parallelism, want.intra_op_parallelism);
  EXPECT_EQ(back.measured->single_submit, want.single_submit);
  EXPECT_EQ(back.measured->overlap_events, want.overlap_events);
  EXPECT_EQ(back.measured->read_gbps, want.read_gbps);
  EXPECT_EQ(back.measured->probe_write_gbps, want.probe_write_gbps);
  EXPECT_EQ(back.measured->path, want.path);
  EXPECT_EQ(back.measured->measured_at, want.measured_at);
}

TEST(AioCache, ARewriteReplacesTheFileWholeByRename) {
  TempCacheHome home;
  const DeviceId dev = *device_of(home.disk().string());
  const std::string file = *write_aio_cache(dev, sample(1 << 20));
  struct stat before, after;
  ASSERT_EQ(::stat(file.c_str(), &before), 0);
  ASSERT_TRUE(write_aio_cache(dev, sample(4 << 20)).ok());
  ASSERT_EQ(::stat(file.c_str(), &after), 0);
  // A new inode: the old file was never truncated and rewritten in place,
  // so a reader (or a crash) sees one whole file or the other.
  EXPECT_NE(before.st_ino, after.st_ino);
  EXPECT_EQ(read_aio_cache(dev).measured->block_size, 4 << 20);
  EXPECT_EQ(files_in(home.aio_dir()), std::vector<std::string>{dev.file_name()});  // no temporaries
}

TEST(AioCache, EachDeviceHasItsOwnEntry) {
  TempCacheHome home;
  const DeviceId dev = *device_of(home.disk().string());
  DeviceId other = dev;
  other.minor += 1;
  ASSERT_TRUE(write_aio_cache(dev, sample(1 << 20)).ok());
  ASSERT_TRUE(write_aio_cache(other, sample(2 << 20)).ok());
  EXPECT_EQ(read_aio_cache(dev).measured->block_size, 1 << 20);
  EXPECT_EQ(read_aio_cache(other).measured->block_size, 2 << 20);
  DeviceId xfs = dev;
  xfs.fs_type = "xfs-other";
  EXPECT_FALSE(read_aio_cache(xfs).measured);
  // A file copied under another device's name is not believed.
  fs::copy_file(home.aio_dir() / dev.file_name(), home.aio_dir() / xfs.file_name());
  AioCacheLookup copied = read_aio_cache(xfs);
  EXPECT_FALSE(copied.measured);
  EXPECT_NE(copied.warning.find("written for device \"" + dev.text() + "\""), std::string::npos)
      << copied.warning;
}

TEST(AioCache, ACorruptFileIsIgnoredWithAWarningNamingIt) {
  TempCacheHome home;
  const DeviceId dev = *device_of(home.disk().string());
  const std::string file = *write_aio_cache(dev, sample(1 << 20));
  for (const char* text : {"{\"version\": 1, \"device\": ", "[1, 2]", "{\"version\": 7}",
                           "{\"version\": 1, \"device\": \"DEV\", \"aio\": {\"block_size\": 0}}",
                           "{\"version\": 1, \"device\": \"DEV\", \"aio\": {\"block_size\": 4096,"
                           " \"queue_depth\": 8, \"intra_op_parallelism\": 1,"
                           " \"single_submit\": \"no\", \"overlap_events\": true}}"}) {
    std::string t = text;
    if (auto at = t.find("DEV"); at != std::string::npos) t.replace(at, 3, dev.text());
    write_text(file, t);
    AioCacheLookup r = read_aio_cache(dev);
    EXPECT_FALSE(r.measured) << t;
    EXPECT_NE(r.warning.find(file), std::string::npos) << t << "\n" << r.warning;
    EXPECT_NE(r.warning.find("ignored"), std::string::npos) << r.warning;
  }
}

TEST(AioCache, NoCacheFolderIsAnErrorThatSaysWhatToSet) {
  TempCacheHome home;
  const DeviceId dev = *device_of(home.disk().string());
  const char* old_home = std::getenv("HOME");
  const std::string saved = old_home ? old_home : "";
  ::unsetenv("XDG_CACHE_HOME");
  ::unsetenv("HOME");
  Result<std::string> r = write_aio_cache(dev, sample(1 << 20));
  ::setenv("HOME", saved.c_str(), 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("XDG_CACHE_HOME"), std::string::npos);
}

}  // namespace
}  // namespace dscore::config
