// Block framing and CRC of the W&B transaction log (run_log.h).
#include "run_log.h"

#include <fcntl.h>
#include <unistd.h>
#include <dscore/cpp/file_io.hpp>
#include <dscore/cpp/plugin.hpp>

#include <array>
#include <cerrno>
#include <cstring>

namespace dscore::wandb {
namespace {

using sdk::errno_status;
using sdk::Error;
using sdk::put_le;

void put_chunk(std::string* out, std::string_view data, ChunkType type) {
  const char type_byte = static_cast<char>(type);
  put_le(out, crc32(data, crc32(std::string_view(&type_byte, 1))), 4);
  put_le(out, data.size(), 2);
  out->push_back(type_byte);
  out->append(data);
}

}  // namespace

uint32_t crc32(std::string_view data, uint32_t crc) {
  return sdk::crc32_reflected<0xEDB88320u>(data, crc);
}

std::string file_header() {
  std::string out = ":W&B";
  put_le(&out, 0xBEE1, 2);  // zlib.crc32("Weights & Biases") & 0xffff
  out.push_back('\0');      // version 0
  return out;
}

std::string frame_record(std::string_view payload, uint64_t offset) {
  constexpr size_t kDataPerBlock = kBlockSize - kRecordHeaderSize;
  std::string out;
  size_t space_left = kBlockSize - offset % kBlockSize;
  if (space_left < kRecordHeaderSize) {
    out.append(space_left, '\0');
    space_left = kBlockSize;
  }
  if (payload.size() + kRecordHeaderSize <= space_left) {
    put_chunk(&out, payload, kFull);
    return out;
  }
  // The first chunk fills the block (it may carry no data at all when
  // exactly a chunk header fits, as in wandb's writer); middles fill whole
  // blocks; the last carries the rest.
  size_t used = space_left - kRecordHeaderSize;
  put_chunk(&out, payload.substr(0, used), kFirst);
  while (payload.size() - used > kDataPerBlock) {
    put_chunk(&out, payload.substr(used, kDataPerBlock), kMiddle);
    used += kDataPerBlock;
  }
  put_chunk(&out, payload.substr(used), kLast);
  return out;
}

RunLog::RunLog(std::string path) : path_(std::move(path)) {
  const char* step = nullptr;
  file_ = sdk::create_new_file(path_, &step);
  if (file_ == nullptr) fail(step);
  put(file_header());
}

RunLog::~RunLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void RunLog::append(std::string_view record) { put(frame_record(record, offset_)); }

void RunLog::put(std::string_view bytes) {
  if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size()) fail("write");
  offset_ += bytes.size();
}

void RunLog::flush() {
  if (std::fflush(file_) != 0) fail("flush");
}

void RunLog::fail(const char* what) const {
  int err = errno;
  throw Error(errno_status(err), std::string("cannot ") + what + " the wandb run file '" + path_ +
                                     "': " + std::strerror(err));
}

}  // namespace dscore::wandb
