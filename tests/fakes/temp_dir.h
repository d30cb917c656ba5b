// A fresh folder for a test under the system's temporary directory
// ($TMPDIR, else /tmp), removed with everything in it when the test is done.
// The one temporary folder the tests share.
#pragma once

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include <stdlib.h>

namespace dscore::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "dscore_test") {
    const char* base = std::getenv("TMPDIR");
    std::string pattern =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/" + prefix + "_XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr)
      throw std::runtime_error("mkdtemp " + pattern + ": " + std::strerror(errno));
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // path()/name, as a string (the form file APIs take).
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  // Writes `text` to path()/name (creating its folders) and returns the full path.
  std::filesystem::path write(const std::string& name, const std::string& text) const {
    const std::filesystem::path target = path_ / name;
    std::filesystem::create_directories(target.parent_path());
    std::ofstream(target, std::ios::binary) << text;
    return target;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace dscore::testing
