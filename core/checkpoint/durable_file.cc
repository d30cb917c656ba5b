#include "core/checkpoint/durable_file.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace dscore::checkpoint {
namespace {

constexpr size_t kBufferBytes = 4u << 20;        // small writes gather here
constexpr size_t kDirectBytes = 256u << 10;      // larger ones go straight to the file
constexpr uint64_t kWritebackBytes = 32u << 20;  // start writeback every this many bytes

std::string folder_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

}  // namespace

Status file_error(const std::string& what, const std::string& path, int err) {
  std::string message = what + " " + path + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT)
    message += " (the disk is full: free space or point the checkpoint folder at another disk)";
  else if (err == EFBIG)
    message += " (the file exceeds the file-size limit: check `ulimit -f` and the filesystem)";
  else if (err == EACCES || err == EPERM || err == EROFS)
    message += " (no permission: choose a folder this user can write)";
  return io_error(message);
}

DurableFile::DurableFile(std::string path, std::string temporary, int fd)
    : path_(std::move(path)), temporary_(std::move(temporary)), fd_(fd) {
  buffer_.reserve(kBufferBytes);
}

DurableFile::DurableFile(DurableFile&& other) noexcept
    : path_(std::move(other.path_)),
      temporary_(std::move(other.temporary_)),
      fd_(other.fd_),
      size_(other.size_),
      written_(other.written_),
      writeback_at_(other.writeback_at_),
      buffer_(std::move(other.buffer_)) {
  other.fd_ = -1;
  other.temporary_.clear();
}

DurableFile::~DurableFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!temporary_.empty()) ::unlink(temporary_.c_str());
}

Result<DurableFile> DurableFile::create(const std::string& path) {
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return file_error("cannot create", temporary, errno);
  return DurableFile(path, temporary, fd);
}

Status DurableFile::write_fully(const char* data, size_t bytes) {
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, data, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return file_error("cannot write", path_, errno);
    if (n == 0) return file_error("cannot write", path_, ENOSPC);
    data += n;
    bytes -= static_cast<size_t>(n);
    written_ += static_cast<uint64_t>(n);
  }
  // Let the disk start on what is written while the caller prepares more,
  // so commit()'s fsync has little left to wait for.
  if (written_ - writeback_at_ >= kWritebackBytes) {
    (void)::sync_file_range(fd_, static_cast<off_t>(writeback_at_),
                            static_cast<off_t>(written_ - writeback_at_), SYNC_FILE_RANGE_WRITE);
    writeback_at_ = written_;
  }
  return Status::Ok();
}

Status DurableFile::flush() {
  if (buffer_.empty()) return Status::Ok();
  Status status = write_fully(buffer_.data(), buffer_.size());
  buffer_.clear();
  return status;
}

Status DurableFile::write(const void* data, size_t bytes) {
  if (fd_ < 0) return failed_precondition(path_ + " is already committed");
  const char* p = static_cast<const char*>(data);
  size_ += bytes;
  if (bytes >= kDirectBytes) {
    DSCORE_RETURN_IF_ERROR(flush());
    return write_fully(p, bytes);
  }
  if (buffer_.size() + bytes > kBufferBytes) DSCORE_RETURN_IF_ERROR(flush());
  buffer_.insert(buffer_.end(), p, p + bytes);
  return Status::Ok();
}

Status DurableFile::write_at(uint64_t offset, const void* data, size_t bytes) {
  if (offset + bytes > size_) return internal_error("write_at past the end of " + path_);
  DSCORE_RETURN_IF_ERROR(flush());
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd_, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return file_error("cannot write", path_, n < 0 ? errno : ENOSPC);
    p += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status DurableFile::commit() {
  DSCORE_RETURN_IF_ERROR(flush());
  if (::fsync(fd_) != 0) return file_error("cannot flush to disk", path_, errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return file_error("cannot close", path_, errno);
  if (::rename(temporary_.c_str(), path_.c_str()) != 0)
    return file_error("cannot rename " + temporary_ + " to", path_, errno);
  temporary_.clear();
  return sync_folder(folder_of(path_));
}

Status write_file_durably(const std::string& path, std::string_view contents) {
  DSCORE_ASSIGN_OR_RETURN(DurableFile file, DurableFile::create(path));
  DSCORE_RETURN_IF_ERROR(file.write(contents.data(), contents.size()));
  return file.commit();
}

Status sync_folder(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return file_error("cannot open folder", path, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL) return file_error("cannot flush folder", path, err);
  return Status::Ok();
}

Status make_folders(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return file_error("cannot create folder", path, ec.value());
  return Status::Ok();
}

Status remove_tree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return file_error("cannot remove", path, ec.value());
  return Status::Ok();
}

Status rename_or_exchange(const std::string& from, const std::string& to, bool* exchanged) {
  *exchanged = false;
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0)
    return Status::Ok();
  if (errno != EEXIST) return file_error("cannot rename " + from + " to", to, errno);
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) != 0)
    return file_error("cannot exchange " + from + " with", to, errno);
  *exchanged = true;
  return Status::Ok();
}

Status pread_fully(int fd, const std::string& path, uint64_t offset, uint64_t bytes, void* dst) {
  char* p = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return file_error("cannot read", path, errno);
    if (n == 0)
      return data_loss(path + ": the file ends at byte " + std::to_string(offset) +
                       " but more data was expected: the file is truncated");
    p += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

Result<std::string> read_text_file(const std::string& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found(path + " does not exist");
    return file_error("cannot open", path, errno);
  }
  std::string text;
  char chunk[4096];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return file_error("cannot read", path, err);
    }
    if (n == 0) break;
    text.append(chunk, static_cast<size_t>(n));
    if (text.size() > max_bytes) {
      ::close(fd);
      return data_loss(path + " is larger than " + std::to_string(max_bytes) +
                       " bytes: not a file dscore wrote");
    }
  }
  ::close(fd);
  return text;
}

bool path_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool is_folder(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace dscore::checkpoint
