// Test support: a fresh folder under $TMPDIR (or /tmp) that stands for the
// user's cache: XDG_CACHE_HOME points at <folder>/cache while it lives, and
// the old value comes back (and the folder goes) when it ends. Also a
// <folder>/disk for files whose device the cache is keyed by.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

namespace dscore::testing {

class TempCacheHome {
 public:
  TempCacheHome() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && tmp[0] ? tmp : "/tmp") + "/dscore_aio_cache.XXXXXX";
    if (!::mkdtemp(pattern.data())) std::abort();
    root_ = pattern;
    std::filesystem::create_directories(disk());
    if (const char* old = std::getenv("XDG_CACHE_HOME")) old_ = old;
    ::setenv("XDG_CACHE_HOME", cache().c_str(), 1);
  }
  ~TempCacheHome() {
    if (old_)
      ::setenv("XDG_CACHE_HOME", old_->c_str(), 1);
    else
      ::unsetenv("XDG_CACHE_HOME");
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  TempCacheHome(const TempCacheHome&) = delete;
  TempCacheHome& operator=(const TempCacheHome&) = delete;

  std::filesystem::path cache() const { return root_ / "cache"; }
  std::filesystem::path aio_dir() const { return cache() / "dscore" / "aio"; }
  std::filesystem::path disk() const { return root_ / "disk"; }

 private:
  std::filesystem::path root_;
  std::optional<std::string> old_;
};

}  // namespace dscore::testing
