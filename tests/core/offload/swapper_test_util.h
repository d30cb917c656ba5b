// Helpers for the swapper tests: aligned random buffers, a temporary folder,
// a registry over the nvme plugin and the fault-injecting test swapper, and
// a tiny tmpfs for the full-disk test.
#pragma once

#include <dscore/offload.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include "core/offload/swapper.h"
#include "core/plugin_host/registry.h"
#include "tests/fakes/temp_dir.h"

namespace dscore::offload::testing {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<char, FreeDeleter>;

// open() flags for a file the test makes.
constexpr uint32_t kCreate = DSCORE_OPEN_READ | DSCORE_OPEN_WRITE | DSCORE_OPEN_CREATE;

inline Buffer aligned(size_t bytes) {
  return Buffer(static_cast<char*>(std::aligned_alloc(4096, bytes == 0 ? 4096 : bytes)));
}

inline Buffer random_buffer(size_t bytes, uint64_t seed) {
  Buffer b = aligned(bytes);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    const uint64_t v = rng();
    std::memcpy(b.get() + i, &v, 8);
  }
  return b;
}

// The tests' temporary folder (tests/fakes/temp_dir.h).
using TempDir = dscore::testing::TempDir;

// A tmpfs of `size` mounted on a fresh folder; mounted() false (and why()
// says why) where this process may not mount.
class TinyTmpfs {
 public:
  explicit TinyTmpfs(const std::string& size) {
    const std::string options = "size=" + size;
    if (::mount("tmpfs", dir_.path().c_str(), "tmpfs", 0, options.c_str()) == 0) {
      mounted_ = true;
    } else {
      why_ = std::string("mount -t tmpfs -o ") + options + " failed: " + std::strerror(errno) +
             " (needs root / CAP_SYS_ADMIN)";
    }
  }
  ~TinyTmpfs() {
    if (mounted_) ::umount2(dir_.path().c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& why() const { return why_; }
  std::string path() const { return dir_.path().string(); }

 private:
  TempDir dir_;
  bool mounted_ = false;
  std::string why_;
};

inline std::shared_ptr<plugin_host::PluginRegistry> swapper_registry() {
  plugin_host::SearchPath path;
  path.add(DSCORE_NVME_PLUGIN, true);
  path.add(std::string(DSCORE_TEST_PLUGIN_DIR) + "/fake_faulty_swapper", false);
  auto registry = plugin_host::PluginRegistry::open(path);
  EXPECT_TRUE(registry.ok()) << registry.status().message();
  return registry.ok() ? *registry : nullptr;
}

// The nvme plugin's Swapper with the default aio settings, and the
// registry it came from; `swapper` is null (and the test has failed) when
// it cannot be made.
struct NvmeSwapper {
  NvmeSwapper() {
    if (!registry) return;
    auto made = make_swapper(*registry, config::default_aio(), plugin_host::InstanceContext{});
    EXPECT_TRUE(made.ok()) << made.status().message();
    if (made.ok()) swapper = std::move(*made);
  }
  std::shared_ptr<plugin_host::PluginRegistry> registry = swapper_registry();
  std::unique_ptr<Swapper> swapper;
};

// Sets DSCORE_NVME_BACKEND for the scope of a test.
class BackendEnv {
 public:
  explicit BackendEnv(const std::string& backend) {
    ::setenv("DSCORE_NVME_BACKEND", backend.c_str(), 1);
  }
  ~BackendEnv() { ::unsetenv("DSCORE_NVME_BACKEND"); }
};

}  // namespace dscore::offload::testing
