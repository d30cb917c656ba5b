// TFRecord framing, CRC32C and the hand-encoded Event protobufs of
// event_file.h. Protobuf wire format: a key is (field << 3 | wire type);
// wire types 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
#include "event_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <dscore/cpp/file_io.hpp>
#include <dscore/cpp/plugin.hpp>

#include <array>
#include <cerrno>
#include <cstring>

namespace dscore::tensorboard {
namespace {

using sdk::errno_status;
using sdk::Error;
using sdk::put_le;

void put_varint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

void put_key(std::string* out, uint32_t field, WireType type) {
  put_varint(out, field << 3 | type);
}

void put_bytes(std::string* out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kBytes);
  put_varint(out, bytes.size());
  out->append(bytes);
}

void put_double(std::string* out, uint32_t field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed64);
  put_le(out, bits, 8);
}

void put_float(std::string* out, uint32_t field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed32);
  put_le(out, bits, 4);
}

// tensorflow.Event field numbers.
constexpr uint32_t kEventWallTime = 1;     // double
constexpr uint32_t kEventStep = 2;         // int64
constexpr uint32_t kEventFileVersion = 3;  // string
constexpr uint32_t kEventSummary = 5;      // Summary
constexpr uint32_t kSummaryValue = 1;      // repeated Summary.Value
constexpr uint32_t kValueTag = 1;          // string
constexpr uint32_t kValueSimpleValue = 2;  // float

}  // namespace

uint32_t crc32c(std::string_view data) { return sdk::crc32_reflected<0x82F63B78u>(data); }

uint32_t mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string tfrecord(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 16);
  put_le(&out, payload.size(), 8);
  put_le(&out, mask_crc(crc32c(out)), 4);
  out.append(payload);
  put_le(&out, mask_crc(crc32c(payload)), 4);
  return out;
}

std::string file_version_event(double wall_time) {
  std::string event;
  put_double(&event, kEventWallTime, wall_time);
  put_bytes(&event, kEventFileVersion, "brain.Event:2");
  return event;
}

std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string summary_value;
  put_bytes(&summary_value, kValueTag, tag);
  put_float(&summary_value, kValueSimpleValue, value);
  std::string summary;
  put_bytes(&summary, kSummaryValue, summary_value);

  std::string event;
  put_double(&event, kEventWallTime, wall_time);
  // proto3 leaves a zero step out, as protobuf's own serializer does.
  if (step != 0) {
    put_key(&event, kEventStep, kVarint);
    put_varint(&event, static_cast<uint64_t>(step));
  }
  put_bytes(&event, kEventSummary, summary);
  return event;
}

std::string event_file_name(double unix_seconds, std::string_view hostname, long pid,
                            unsigned uid) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%010lld", static_cast<long long>(unix_seconds));
  return "events.out.tfevents." + std::string(seconds) + "." + std::string(hostname) + "." +
         std::to_string(pid) + "." + std::to_string(uid);
}

EventFile::EventFile(std::string path, double wall_time) : path_(std::move(path)) {
  const char* step = nullptr;
  file_ = sdk::create_new_file(path_, &step);
  if (file_ == nullptr) fail(step);
  append(file_version_event(wall_time));
  flush();
}

EventFile::~EventFile() {
  if (file_ != nullptr) std::fclose(file_);
}

void EventFile::append(std::string_view event) {
  const std::string record = tfrecord(event);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size()) fail("write");
}

void EventFile::flush() {
  if (std::fflush(file_) != 0) fail("flush");
}

void EventFile::fail(const char* what) const {
  int err = errno;
  throw Error(errno_status(err), std::string("cannot ") + what + " the TensorBoard event file '" +
                                     path_ + "': " + std::strerror(err));
}

}  // namespace dscore::tensorboard
