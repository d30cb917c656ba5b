// Protobuf encoding of the wandb_internal records in records.h. Field numbers
// are wandb_internal.proto's (checked by tests/external/check_wandb.py, which
// decodes the file with wandb's own generated classes).
#include "records.h"

#include <dscore/cpp/python_float.hpp>

#include <cmath>

namespace dscore::wandb {
namespace {

// Record: the oneof record_type and the sequence number.
constexpr uint32_t kRecordNum = 1;
constexpr uint32_t kRecordHistory = 2;
constexpr uint32_t kRecordSummary = 3;
constexpr uint32_t kRecordConfig = 5;
constexpr uint32_t kRecordRun = 17;
constexpr uint32_t kRecordExit = 18;
constexpr uint32_t kRecordHeader = 21;
// RunRecord.
constexpr uint32_t kRunId = 1;
constexpr uint32_t kRunEntity = 2;
constexpr uint32_t kRunProject = 3;
constexpr uint32_t kRunGroup = 6;
constexpr uint32_t kRunHost = 13;
constexpr uint32_t kRunStartTime = 17;  // google.protobuf.Timestamp {seconds 1, nanos 2}
// ConfigRecord/SummaryRecord.update = 1, HistoryRecord.item = 1, .step = 2.
constexpr uint32_t kItems = 1;
constexpr uint32_t kHistoryStep = 2;
constexpr uint32_t kHistoryStepNum = 1;
// ConfigItem/HistoryItem/SummaryItem.
constexpr uint32_t kItemKey = 1;
constexpr uint32_t kItemNestedKey = 2;
constexpr uint32_t kItemValueJson = 16;
// RunExitRecord, HeaderRecord, VersionInfo.
constexpr uint32_t kExitCode = 1;
constexpr uint32_t kExitRuntime = 2;
constexpr uint32_t kHeaderVersionInfo = 1;
constexpr uint32_t kVersionProducer = 1;

// Just enough of the protobuf wire format: varints (wire type 0) and
// length-delimited fields (wire type 2).
class Message {
 public:
  Message& varint(uint32_t field, uint64_t v) {
    put_varint(field << 3 | 0);
    put_varint(v);
    return *this;
  }
  Message& bytes(uint32_t field, std::string_view b) {
    put_varint(field << 3 | 2);
    put_varint(b.size());
    out_.append(b);
    return *this;
  }
  // proto3 leaves empty strings out.
  Message& string(uint32_t field, std::string_view s) {
    return s.empty() ? *this : bytes(field, s);
  }
  Message& message(uint32_t field, const Message& m) { return bytes(field, m.out_); }
  const std::string& str() const { return out_; }

 private:
  void put_varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>((v & 0x7F) | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  std::string out_;
};

Message items_message(const std::vector<Item>& items, bool nested) {
  Message m;
  for (const Item& item : items) {
    Message i;
    i.bytes(nested ? kItemNestedKey : kItemKey, item.key);
    i.bytes(kItemValueJson, item.value_json);
    m.message(kItems, i);
  }
  return m;
}

std::string record(int64_t num, uint32_t field, const Message& body) {
  Message r;
  r.varint(kRecordNum, static_cast<uint64_t>(num));
  r.message(field, body);
  return r.str();
}

}  // namespace

std::string header_record(int64_t num, std::string_view producer) {
  Message version;
  version.string(kVersionProducer, producer);
  Message header;
  header.message(kHeaderVersionInfo, version);
  return record(num, kRecordHeader, header);
}

std::string run_record(int64_t num, const RunInfo& run) {
  Message start;
  const int64_t nanos = std::llround(run.start_time * 1e9);  // ~256 ns resolution today: plenty
  start.varint(1, static_cast<uint64_t>(nanos / 1000000000));
  start.varint(2, static_cast<uint64_t>(nanos % 1000000000));
  Message r;
  r.string(kRunId, run.run_id)
      .string(kRunEntity, run.entity)
      .string(kRunProject, run.project)
      .string(kRunGroup, run.group)
      .string(kRunHost, run.host)
      .message(kRunStartTime, start);
  return record(num, kRecordRun, r);
}

std::string config_record(int64_t num, const std::vector<Item>& items) {
  return record(num, kRecordConfig, items_message(items, false));
}

std::string history_record(int64_t num, int64_t step, const std::vector<Item>& items) {
  Message h = items_message(items, true);
  Message s;
  if (step != 0) s.varint(kHistoryStepNum, static_cast<uint64_t>(step));
  h.message(kHistoryStep, s);
  return record(num, kRecordHistory, h);
}

std::string summary_record(int64_t num, const std::vector<Item>& items) {
  return record(num, kRecordSummary, items_message(items, true));
}

std::string exit_record(int64_t num, int32_t exit_code, int32_t runtime_seconds) {
  Message e;
  // int32 fields: negative values are sign-extended to 64 bits.
  if (exit_code != 0) e.varint(kExitCode, static_cast<uint64_t>(static_cast<int64_t>(exit_code)));
  if (runtime_seconds != 0)
    e.varint(kExitRuntime, static_cast<uint64_t>(static_cast<int64_t>(runtime_seconds)));
  return record(num, kRecordExit, e);
}

std::string json_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return sdk::python_float_repr(v);
}

}  // namespace dscore::wandb
