// TensorFlow event files as TensorBoard reads them, without TensorFlow or a
// protobuf library: TFRecord framing (uint64 length, masked CRC32C of the
// length, data, masked CRC32C of the data) around tensorflow.Event messages
// encoded by hand (tensorflow/core/util/event.proto, summary.proto).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace dscore::tensorboard {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord uses.
uint32_t crc32c(std::string_view data);
// TFRecord's masked form: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t mask_crc(uint32_t crc);

// One TFRecord: length, masked CRC of the 8 length bytes, payload, masked
// CRC of the payload; integers little-endian.
std::string tfrecord(std::string_view payload);

// The first record of every event file: Event{wall_time, file_version:
// "brain.Event:2"}, as TensorFlow and torch's SummaryWriter write it.
std::string file_version_event(double wall_time);

// Event{wall_time, step, summary: Summary{value: [{tag, simple_value}]}}:
// what SummaryWriter.add_scalar writes (the value is stored as float32).
std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value);

// "events.out.tfevents.<%010d unix seconds>.<hostname>.<pid>.<uid>": the
// name torch's SummaryWriter gives its event files (TensorFlow's name plus
// a pid and a per-process counter, so writers never collide).
std::string event_file_name(double unix_seconds, std::string_view hostname, long pid, unsigned uid);

// An event file open for writing. Errors throw sdk::Error naming the file.
class EventFile {
 public:
  // Creates `path` (it must not exist) and writes the file_version record.
  EventFile(std::string path, double wall_time);
  ~EventFile();
  EventFile(const EventFile&) = delete;
  EventFile& operator=(const EventFile&) = delete;

  // Append one serialized Event as a TFRecord (buffered until flush()).
  void append(std::string_view event);
  // Hand everything appended so far to the OS, so TensorBoard sees it.
  void flush();
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail(const char* what) const;
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace dscore::tensorboard
