// Shared by the monitor plugin tests: a protobuf wire-format reader (the
// tests decode what the plugins encode, independently of the plugins' own
// encoders), a temporary folder, an events helper, and a file-size limit
// that makes the next write fail (a disk that fills up mid-run).
#pragma once

#include <dscore/monitor.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>
#include "tests/fakes/temp_dir.h"

namespace dscore::testing {

// One field of a protobuf message: varint/fixed values in `number_value`,
// length-delimited payloads in `bytes`.
struct ProtoField {
  uint32_t field = 0;
  uint32_t wire_type = 0;
  uint64_t number_value = 0;
  std::string bytes;

  double as_double() const {
    double d;
    std::memcpy(&d, &number_value, sizeof d);
    return d;
  }
  float as_float() const {
    const uint32_t bits = static_cast<uint32_t>(number_value);
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
};

inline uint64_t read_varint(std::string_view data, size_t* pos) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*pos >= data.size()) throw std::runtime_error("truncated varint");
    const auto byte = static_cast<unsigned char>(data[(*pos)++]);
    v |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) return v;
  }
  throw std::runtime_error("varint longer than 10 bytes");
}

inline uint64_t read_le(std::string_view data, size_t pos, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(data[pos + i])) << (8 * i);
  return v;
}

// All fields of one message, in order. Throws std::runtime_error on
// malformed input.
inline std::vector<ProtoField> parse_proto(std::string_view data) {
  std::vector<ProtoField> out;
  size_t pos = 0;
  while (pos < data.size()) {
    ProtoField f;
    const uint64_t key = read_varint(data, &pos);
    f.field = static_cast<uint32_t>(key >> 3);
    f.wire_type = static_cast<uint32_t>(key & 7);
    const int fixed = f.wire_type == 1 ? 8 : f.wire_type == 5 ? 4 : 0;
    if (f.wire_type == 0) {
      f.number_value = read_varint(data, &pos);
    } else if (fixed > 0) {
      if (pos + fixed > data.size()) throw std::runtime_error("truncated fixed field");
      f.number_value = read_le(data, pos, fixed);
      pos += fixed;
    } else if (f.wire_type == 2) {
      const uint64_t size = read_varint(data, &pos);
      if (size > data.size() - pos) throw std::runtime_error("truncated length-delimited field");
      f.bytes = std::string(data.substr(pos, size));
      pos += size;
    } else {
      throw std::runtime_error("unexpected wire type " + std::to_string(f.wire_type));
    }
    out.push_back(std::move(f));
  }
  return out;
}

// Fields numbered `field`, in order.
inline std::vector<ProtoField> fields_of(const std::vector<ProtoField>& fields, uint32_t field) {
  std::vector<ProtoField> out;
  for (const ProtoField& f : fields)
    if (f.field == field) out.push_back(f);
  return out;
}
// The only field numbered `field`; throws when absent or repeated.
inline ProtoField field_of(const std::vector<ProtoField>& fields, uint32_t field) {
  std::vector<ProtoField> all = fields_of(fields, field);
  if (all.size() != 1)
    throw std::runtime_error("field " + std::to_string(field) + " appears " +
                             std::to_string(all.size()) + " times");
  return all[0];
}

// Whether `text` is exactly `pattern`, where in the pattern '9' stands for
// any digit, 'a' for any of [a-z0-9], and every other character for itself
// (std::regex trips GCC 12's -Wmaybe-uninitialized under the sanitizers).
inline bool matches_shape(std::string_view text, std::string_view pattern) {
  if (text.size() != pattern.size()) return false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool digit = c >= '0' && c <= '9';
    if (pattern[i] == '9'   ? !digit
        : pattern[i] == 'a' ? !(digit || (c >= 'a' && c <= 'z'))
                            : c != pattern[i])
      return false;
  }
  return true;
}

inline std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_bytes(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

struct TestEvent {
  std::string tag;
  double value;
  int64_t step;
  double wall_time = 0;
};

inline dscore_status write_events(const dscore_monitor_vtable* vt, dscore_monitor* m,
                                  const std::vector<TestEvent>& events) {
  std::vector<dscore_scalar_event> c(events.size());
  std::vector<const dscore_scalar_event*> ptrs;
  for (size_t i = 0; i < events.size(); ++i) {
    c[i] = {sizeof(dscore_scalar_event), events[i].tag.c_str(), events[i].value, events[i].step,
            events[i].wall_time};
    ptrs.push_back(&c[i]);
  }
  return vt->write_scalars(m, ptrs.data(), ptrs.size());
}

// While alive, no file of this process may grow past `bytes` (RLIMIT_FSIZE,
// with SIGXFSZ ignored so the write fails with EFBIG instead of killing the
// test). Applies to root too.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(uint64_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    saved_handler_ = signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    signal(SIGXFSZ, saved_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  sighandler_t saved_handler_ = SIG_DFL;
};

}  // namespace dscore::testing
