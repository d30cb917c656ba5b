// pread with change detection, llm.c header checks and the vocabulary scan
// of token_file.h.
#include "core/data/token_file.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <tbb/blocked_range.h>
#include <tbb/parallel_reduce.h>

namespace dscore::data {
namespace {

// llm.c writes its header and tokens little-endian; reading them with memcpy
// is only right on a little-endian host.
static_assert(std::endian::native == std::endian::little, "token files are little-endian");

const char kTokensHint[] =
    "data.type \"tokens\" reads token shards written by llm.c's dev/data scripts (e.g. fineweb.py, "
    "tinyshakespeare.py); to train on a raw text file use data.type \"text\"";

std::string quoted(const std::string& path) { return "'" + path + "'"; }

std::string working_directory() {
  std::error_code ec;
  const std::filesystem::path cwd = std::filesystem::current_path(ec);
  return ec ? std::string("(unknown)") : cwd.string();
}

std::string relative_hint(const std::string& path) {
  if (!path.empty() && path[0] == '/') return "";
  return " (relative paths are resolved from the working directory " + working_directory() + ")";
}

int32_t read_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The largest token in [0, count) of raw tokens `width` bytes wide; tight
// loops the compiler vectorises. uint32 tokens compare as int64.
template <typename T>
int64_t max_token(const uint8_t* raw, int64_t count) {
  int64_t m = 0;
  for (int64_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, raw + sizeof(T) * i, sizeof v);
    m = std::max<int64_t>(m, v);
  }
  return m;
}

int64_t max_raw_token(uint64_t width, const uint8_t* raw, int64_t count) {
  if (width == 1) return max_token<uint8_t>(raw, count);
  if (width == 2) return max_token<uint16_t>(raw, count);
  return max_token<uint32_t>(raw, count);
}

// Token k of raw tokens `width` bytes wide.
int64_t raw_token(uint64_t width, const uint8_t* raw, int64_t k) {
  if (width == 1) return raw[k];
  if (width == 2) {
    uint16_t u;
    std::memcpy(&u, raw + 2 * k, sizeof u);
    return u;
  }
  uint32_t u;
  std::memcpy(&u, raw + 4 * k, sizeof u);
  return u;
}

}  // namespace

// ---- DataFile

Result<DataFile> DataFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT)
      return not_found("data file " + quoted(path) + " does not exist" + relative_hint(path) +
                       "; fix data.path");
    return io_error("cannot open data file " + quoted(path) + ": " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return io_error("cannot stat data file " + quoted(path) + ": " + std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return invalid_argument(quoted(path) +
                            " is a directory; data.path names a file or a glob pattern such as '" +
                            path + "/*.bin'");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument("data file " + quoted(path) +
                            " is not a regular file; data.path must name files");
  }
  if (st.st_size == 0) {
    ::close(fd);
    return invalid_argument(
        "data file " + quoted(path) +
        " is empty (0 bytes); point data.path at a file that holds training data");
  }
  return DataFile(path, fd, static_cast<uint64_t>(st.st_size), st.st_mtim);
}

DataFile::DataFile(DataFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      size_(std::exchange(other.size_, 0)),
      mtime_(other.mtime_) {}

DataFile& DataFile::operator=(DataFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = std::exchange(other.size_, 0);
    mtime_ = other.mtime_;
  }
  return *this;
}

DataFile::~DataFile() {
  if (fd_ >= 0) ::close(fd_);
}

Status DataFile::changed(const std::string& what) const {
  return data_loss("data file " + quoted(path_) +
                   " changed while this run was reading it: " + what +
                   ". A run's samples must stay as they were when it started; restore the "
                   "file (or point data.path at a copy nothing writes to) and resume from the "
                   "last checkpoint");
}

Status DataFile::read(uint64_t offset, uint64_t count, void* out) const {
  DSCORE_CHECK(offset <= size_ && count <= size_ - offset, "read past the end of the file");
  // Same size and modification time as at open: not rewritten since (a
  // truncation after this check shows as a short read below).
  struct stat st {};
  if (::fstat(fd_, &st) != 0)
    return io_error("cannot stat data file " + quoted(path_) + ": " + std::strerror(errno));
  const auto now_size = static_cast<uint64_t>(st.st_size);
  if (now_size != size_)
    return changed("it had " + std::to_string(size_) + " bytes when the run opened it and has " +
                   std::to_string(now_size) + " now");
  if (st.st_mtim.tv_sec != mtime_.tv_sec || st.st_mtim.tv_nsec != mtime_.tv_nsec)
    return changed("it has the size it had when the run opened it (" + std::to_string(size_) +
                   " bytes) but another modification time: it was rewritten in place (or touched)");

  auto* p = static_cast<uint8_t*>(out);
  uint64_t done = 0;
  while (done < count) {
    const ssize_t n = ::pread(fd_, p + done, count - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return io_error("cannot read data file " + quoted(path_) + " at byte " +
                      std::to_string(offset + done) + ": " + std::strerror(errno));
    if (n == 0)
      return changed("it ends at byte " + std::to_string(offset + done) + " now, but had " +
                     std::to_string(size_) + " bytes when the run opened it (truncated)");
    done += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

// ---- TokenFile

Result<TokenFile> TokenFile::open(const std::string& path, TokenFormat format) {
  DSCORE_ASSIGN_OR_RETURN(DataFile file, DataFile::open(path));
  const uint64_t size = file.size();
  if (format == TokenFormat::kBytes)
    return TokenFile(std::move(file), format, 1, 0, static_cast<int64_t>(size));

  const std::string name = quoted(path);
  if (size < static_cast<uint64_t>(kLlmcHeaderBytes))
    return invalid_argument(name + " is not an llm.c token shard: it has " + std::to_string(size) +
                            " bytes, fewer than the " + std::to_string(kLlmcHeaderBytes) +
                            "-byte header. " + kTokensHint);
  uint8_t header[12];  // magic, version, token count
  DSCORE_RETURN_IF_ERROR(file.read(0, sizeof header, header));
  const int32_t magic = read_i32(header);
  const int32_t version = read_i32(header + 4);
  const int32_t count = read_i32(header + 8);
  if (magic != kLlmcMagic && magic != kLlmcWideMagic)
    return invalid_argument(name + " is not an llm.c token shard: its header magic is " +
                            std::to_string(magic) + ", expected magic " +
                            std::to_string(kLlmcMagic) + " (uint16 tokens) or " +
                            std::to_string(kLlmcWideMagic) + " (uint32 tokens). " + kTokensHint);
  const bool wide = magic == kLlmcWideMagic;
  const int32_t expected_version = wide ? kLlmcWideVersion : kLlmcVersion;
  if (version != expected_version)
    return invalid_argument(
        "llm.c token shard " + name + " has magic " + std::to_string(magic) + " and version " +
        std::to_string(version) + "; dscore reads version " + std::to_string(expected_version) +
        " with that magic (" + (wide ? "uint32" : "uint16") +
        " tokens). Regenerate the shard with `dscore tokenize` or llm.c's dev/data scripts");
  if (count <= 0)
    return invalid_argument("llm.c token shard " + name +
                            " holds no tokens (its header token count is " + std::to_string(count) +
                            "); remove it from data.path or regenerate it");
  const uint64_t width = wide ? 4 : 2;
  const uint64_t expected =
      static_cast<uint64_t>(kLlmcHeaderBytes) + width * static_cast<uint64_t>(count);
  if (size < expected)
    return data_loss("llm.c token shard " + name + " is truncated: its header says " +
                     std::to_string(count) + " tokens (" + std::to_string(expected) +
                     " bytes with the header) but the file has " + std::to_string(size) +
                     " bytes; re-download or regenerate it");
  if (size > expected)
    return data_loss("llm.c token shard " + name + " has " + std::to_string(size) +
                     " bytes but its header says " + std::to_string(count) + " tokens (" +
                     std::to_string(expected) +
                     " bytes with the header): the file is corrupt; regenerate it");
  return TokenFile(std::move(file), format, width, static_cast<uint64_t>(kLlmcHeaderBytes), count);
}

Status TokenFile::read_raw(int64_t first, int64_t count, uint8_t* out) const {
  DSCORE_CHECK(first >= 0 && count >= 0 && first + count <= count_, "token range out of the file");
  return file_.read(byte_offset(first), width() * static_cast<uint64_t>(count), out);
}

Status TokenFile::copy(int64_t first, int64_t count, int32_t* out) const {
  // The raw tokens land at the start of out, then widen in place from the
  // last one down: out[k] (bytes 4k..4k+3) only overwrites raw tokens >= k,
  // already widened, since a raw token is at most 4 bytes wide.
  auto* raw = reinterpret_cast<uint8_t*>(out);
  DSCORE_RETURN_IF_ERROR(read_raw(first, count, raw));
  for (int64_t k = count - 1; k >= 0; --k)
    out[k] = static_cast<int32_t>(static_cast<uint32_t>(raw_token(width_, raw, k)));
  return Status::Ok();
}

uint64_t TokenFile::byte_offset(int64_t i) const {
  return first_byte_ + width() * static_cast<uint64_t>(i);
}

namespace {

// Tokens per read of the vocabulary scan: 1-4 MiB buffers.
constexpr int64_t kScanBlock = int64_t{1} << 20;

}  // namespace

Result<int64_t> TokenFile::first_token_at_least(int64_t vocab_size) const {
  std::vector<uint8_t> raw(static_cast<size_t>(kScanBlock) * width());
  for (int64_t begin = 0; begin < count_; begin += kScanBlock) {
    const int64_t n = std::min(kScanBlock, count_ - begin);
    DSCORE_RETURN_IF_ERROR(read_raw(begin, n, raw.data()));
    for (int64_t k = 0; k < n; ++k)
      if (raw_token(width(), raw.data(), k) >= vocab_size) return begin + k;
  }
  return int64_t{-1};
}

Status TokenFile::check_vocab(int64_t vocab_size) const {
  const bool bytes = format_ == TokenFormat::kBytes;
  if (width() < 4 && vocab_size >= (int64_t{1} << (8 * width())))
    return Status::Ok();  // no token can reach it

  // Per block: its largest token, or the block's read error.
  struct Scan {
    int64_t largest = 0;
    Status error;
  };
  const Scan scan = tbb::parallel_reduce(
      tbb::blocked_range<int64_t>(0, count_, kScanBlock), Scan{},
      [&](const tbb::blocked_range<int64_t>& r, Scan acc) {
        if (!acc.error.ok()) return acc;
        std::vector<uint8_t> raw(static_cast<size_t>(r.size()) * width());
        if (Status st = read_raw(r.begin(), static_cast<int64_t>(r.size()), raw.data()); !st.ok())
          return Scan{acc.largest, st};
        acc.largest = std::max(acc.largest,
                               max_raw_token(width(), raw.data(), static_cast<int64_t>(r.size())));
        return acc;
      },
      [](Scan a, const Scan& b) {
        a.largest = std::max(a.largest, b.largest);
        if (a.error.ok()) a.error = b.error;
        return a;
      });
  DSCORE_RETURN_IF_ERROR(scan.error);
  const int64_t largest = scan.largest;
  if (largest < vocab_size) return Status::Ok();

  DSCORE_ASSIGN_OR_RETURN(const int64_t first, first_token_at_least(vocab_size));
  // The file is unchanged (every read checks), so the scan's token is there.
  DSCORE_CHECK(first >= 0, "a token >= vocab_size was seen in the scan");
  std::vector<uint8_t> raw_value(width());
  DSCORE_RETURN_IF_ERROR(read_raw(first, 1, raw_value.data()));
  const int64_t value = raw_token(width(), raw_value.data(), 0);
  const std::string where = "position " + std::to_string(first) + " (byte offset " +
                            std::to_string(byte_offset(first)) + ")";
  if (bytes)
    return invalid_argument(
        "data file " + quoted(path()) + ": the byte at " + where + " has value " +
        std::to_string(value) + ", not below model.vocab_size " + std::to_string(vocab_size) +
        " (the largest byte is " + std::to_string(largest) +
        "). data.type \"text\" reads every byte as a token 0..255: set model.vocab_size "
        "to 256");
  return invalid_argument(
      "llm.c token shard " + quoted(path()) + ": the token at " + where + " is " +
      std::to_string(value) + ", not below model.vocab_size " + std::to_string(vocab_size) +
      " (the largest token in the shard is " + std::to_string(largest) +
      "). Set model.vocab_size to at least " + std::to_string(largest + 1) +
      " (GPT-2's tokenizer needs 50257, Llama 3's 128256), or use shards tokenized for this "
      "model");
}

// ---- data.path

Result<std::vector<std::string>> expand_data_path(const std::string& pattern) {
  if (pattern.empty())
    return invalid_argument(
        "data.path is not set; give the data file (or a glob pattern such as "
        "'data/fineweb_train_*.bin')");
  struct stat st {};
  if (::stat(pattern.c_str(), &st) == 0) return std::vector<std::string>{pattern};
  if (pattern.find_first_of("*?[") == std::string::npos)
    return not_found("data.path " + quoted(pattern) + ": no such file" + relative_hint(pattern));

  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> paths;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && paths.empty()))
    return not_found("data.path pattern " + quoted(pattern) + " matches no file" +
                     relative_hint(pattern) + "; fix data.path");
  if (rc != 0)
    return io_error("data.path pattern " + quoted(pattern) + ": glob failed (code " +
                    std::to_string(rc) + ")");
  std::sort(paths.begin(), paths.end());  // bytewise, whatever the locale's collation
  return paths;
}

}  // namespace dscore::data
