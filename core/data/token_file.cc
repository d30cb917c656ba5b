// mmap, llm.c header checks and the vocabulary scan of token_file.h.
#include "core/data/token_file.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
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

// The largest token in [begin, end) of a format; a tight loop the compiler
// vectorises.
template <TokenFormat kFormat>
int32_t max_token(const uint8_t* tokens, int64_t begin, int64_t end) {
  int32_t m = 0;
  for (int64_t i = begin; i < end; ++i) {
    int32_t v;
    if constexpr (kFormat == TokenFormat::kBytes) {
      v = tokens[i];
    } else {
      uint16_t u;
      std::memcpy(&u, tokens + 2 * i, sizeof u);
      v = u;
    }
    m = std::max(m, v);
  }
  return m;
}

}  // namespace

// ---- MappedFile

Result<MappedFile> MappedFile::open(const std::string& path) {
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
  const auto size = static_cast<uint64_t>(st.st_size);
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (addr == MAP_FAILED)
    return io_error("cannot memory-map data file " + quoted(path) + ": " + std::strerror(err));
  return MappedFile(path, static_cast<const uint8_t*>(addr), size);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

// ---- TokenFile

Result<TokenFile> TokenFile::open(const std::string& path, TokenFormat format) {
  DSCORE_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  const uint64_t size = file.size();
  if (format == TokenFormat::kBytes) {
    const uint8_t* data = file.data();
    return TokenFile(std::move(file), format, data, static_cast<int64_t>(size));
  }

  const std::string name = quoted(path);
  if (size < static_cast<uint64_t>(kLlmcHeaderBytes))
    return invalid_argument(name + " is not an llm.c token shard: it has " + std::to_string(size) +
                            " bytes, fewer than the " + std::to_string(kLlmcHeaderBytes) +
                            "-byte header. " + kTokensHint);
  const uint8_t* header = file.data();
  const int32_t magic = read_i32(header);
  const int32_t version = read_i32(header + 4);
  const int32_t count = read_i32(header + 8);
  if (magic != kLlmcMagic)
    return invalid_argument(name + " is not an llm.c token shard: its header magic is " +
                            std::to_string(magic) + ", expected magic " +
                            std::to_string(kLlmcMagic) + ". " + kTokensHint);
  if (version != kLlmcVersion)
    return invalid_argument(
        "llm.c token shard " + name + " has version " + std::to_string(version) +
        "; dscore reads version " + std::to_string(kLlmcVersion) +
        " (uint16 GPT-2 tokens): expected version 1. Regenerate the shard with llm.c's "
        "dev/data scripts for the GPT-2 tokenizer");
  if (count <= 0)
    return invalid_argument("llm.c token shard " + name +
                            " holds no tokens (its header token count is " + std::to_string(count) +
                            "); remove it from data.path or regenerate it");
  const uint64_t expected =
      static_cast<uint64_t>(kLlmcHeaderBytes) + 2 * static_cast<uint64_t>(count);
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
  const uint8_t* tokens = header + kLlmcHeaderBytes;
  return TokenFile(std::move(file), format, tokens, count);
}

int32_t TokenFile::token(int64_t i) const {
  DSCORE_CHECK(i >= 0 && i < count_, "token index out of range");
  if (format_ == TokenFormat::kBytes) return tokens_[i];
  uint16_t u;
  std::memcpy(&u, tokens_ + 2 * i, sizeof u);
  return u;
}

void TokenFile::copy(int64_t first, int64_t count, int32_t* out) const {
  DSCORE_CHECK(first >= 0 && count >= 0 && first + count <= count_, "token range out of the file");
  if (format_ == TokenFormat::kBytes) {
    for (int64_t k = 0; k < count; ++k) out[k] = tokens_[first + k];
    return;
  }
  const uint8_t* p = tokens_ + 2 * first;
  for (int64_t k = 0; k < count; ++k) {
    uint16_t u;
    std::memcpy(&u, p + 2 * k, sizeof u);
    out[k] = u;
  }
}

uint64_t TokenFile::byte_offset(int64_t i) const {
  const uint64_t width = format_ == TokenFormat::kBytes ? 1 : 2;
  return static_cast<uint64_t>(tokens_ - file_.data()) + width * static_cast<uint64_t>(i);
}

Status TokenFile::check_vocab(int64_t vocab_size) const {
  const bool bytes = format_ == TokenFormat::kBytes;
  if (vocab_size >= (bytes ? 256 : 65536)) return Status::Ok();  // no token can reach it

  const uint8_t* tokens = tokens_;
  const int32_t largest = tbb::parallel_reduce(
      tbb::blocked_range<int64_t>(0, count_, int64_t{1} << 20), int32_t{0},
      [&](const tbb::blocked_range<int64_t>& r, int32_t m) {
        const int32_t part = bytes ? max_token<TokenFormat::kBytes>(tokens, r.begin(), r.end())
                                   : max_token<TokenFormat::kLlmcShard>(tokens, r.begin(), r.end());
        return std::max(m, part);
      },
      [](int32_t a, int32_t b) { return std::max(a, b); });
  if (largest < vocab_size) return Status::Ok();

  int64_t first = 0;
  while (token(first) < vocab_size) ++first;  // exists: largest >= vocab_size
  const std::string where = "position " + std::to_string(first) + " (byte offset " +
                            std::to_string(byte_offset(first)) + ")";
  if (bytes)
    return invalid_argument(
        "data file " + quoted(path()) + ": the byte at " + where + " has value " +
        std::to_string(token(first)) + ", not below model.vocab_size " +
        std::to_string(vocab_size) + " (the largest byte is " + std::to_string(largest) +
        "). data.type \"text\" reads every byte as a token 0..255: set model.vocab_size "
        "to 256");
  return invalid_argument(
      "llm.c token shard " + quoted(path()) + ": the token at " + where + " is " +
      std::to_string(token(first)) + ", not below model.vocab_size " + std::to_string(vocab_size) +
      " (the largest token in the shard is " + std::to_string(largest) +
      "). Set model.vocab_size to at least " + std::to_string(largest + 1) +
      " (GPT-2's tokenizer needs 50257), or use shards tokenized for this model");
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
