// Crash-safe files. A DurableFile is written under a temporary name beside
// its final one, then commit() flushes it, fsyncs it, renames it over the
// final name and fsyncs the folder: a reader (or a crash at any moment)
// sees either no file, the previous one, or the whole new one. Errors name
// the path and say what to do (a full disk says so).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace dscore::checkpoint {

// An errno as a sentence for `path`, e.g. "cannot write /ckpt/x: No space
// left on device (the disk is full: free space or save elsewhere)".
Status file_error(const std::string& what, const std::string& path, int err);

class DurableFile {
 public:
  static Result<DurableFile> create(const std::string& path);
  DurableFile(DurableFile&& other) noexcept;
  DurableFile& operator=(DurableFile&&) = delete;
  DurableFile(const DurableFile&) = delete;
  ~DurableFile();  // an uncommitted file's temporary is removed

  // Append (small writes are buffered).
  Status write(const void* data, size_t bytes);
  // Overwrite bytes already written (flushes first).
  Status write_at(uint64_t offset, const void* data, size_t bytes);
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  Status commit();

 private:
  DurableFile(std::string path, std::string temporary, int fd);
  Status flush();
  Status write_fully(const char* data, size_t bytes);

  std::string path_, temporary_;
  int fd_ = -1;
  uint64_t size_ = 0;
  uint64_t written_ = 0;       // bytes handed to the kernel
  uint64_t writeback_at_ = 0;  // writeback started up to here
  std::vector<char> buffer_;
};

// The whole of `contents` as a durable file.
Status write_file_durably(const std::string& path, std::string_view contents);
// fsync a folder (makes renames and new entries in it durable).
Status sync_folder(const std::string& path);
// mkdir -p.
Status make_folders(const std::string& path);
// rm -r; a missing path is fine.
Status remove_tree(const std::string& path);
// Atomically put `from` at `to`: when `to` exists the two are exchanged
// (renameat2 RENAME_EXCHANGE) and `from` then names the old one.
// *exchanged says which happened.
Status rename_or_exchange(const std::string& from, const std::string& to, bool* exchanged);
// `bytes` bytes at `offset` of the open file `fd` (named `path` in errors);
// DATA_LOSS when the file ends first: it is truncated.
Status pread_fully(int fd, const std::string& path, uint64_t offset, uint64_t bytes, void* dst);
// A small text file, whole; NOT_FOUND when it does not exist.
Result<std::string> read_text_file(const std::string& path, size_t max_bytes);
bool path_exists(const std::string& path);
bool is_folder(const std::string& path);

}  // namespace dscore::checkpoint
