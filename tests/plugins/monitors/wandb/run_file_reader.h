// A reader of W&B transaction logs (`run-<id>.wandb`) for the wandb monitor
// tests, written from wandb's reader (wandb/sdk/internal/datastore.py):
// the 7-byte header, 32 KiB blocks, zero padding when fewer than 7 bytes are
// left in a block, chunks {crc32(type byte + data), uint16 length, uint8
// type} reassembled from FULL or FIRST/MIDDLE.../LAST. Uses its own bitwise
// CRC-32, independent of the plugin's table. Throws std::runtime_error
// naming the offset and the check that failed.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/plugins/monitors/monitor_test_util.h"

namespace dscore::testing {

inline uint32_t crc32_bitwise(std::string_view data, uint32_t crc = 0) {
  crc = ~crc;
  for (unsigned char c : data) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
  }
  return ~crc;
}

struct RunFileChunks {
  std::vector<std::string> records;   // reassembled record payloads
  std::vector<int> chunk_types;       // every chunk's type, in file order
  std::vector<size_t> chunk_offsets;  // where each chunk starts
  std::vector<size_t> paddings;       // offsets of zero padding at block ends
};

inline RunFileChunks read_run_file(const std::string& bytes) {
  constexpr size_t kBlock = 32768, kHeader = 7;
  if (bytes.size() < kHeader || bytes.compare(0, 4, ":W&B") != 0 ||
      read_le(bytes, 4, 2) != 0xBEE1 || bytes[6] != 0)
    throw std::runtime_error("bad file header");
  RunFileChunks out;
  size_t pos = kHeader;
  std::string pending;
  bool in_record = false;
  while (pos < bytes.size()) {
    const size_t left_in_block = kBlock - pos % kBlock;
    if (left_in_block < kHeader) {
      for (size_t i = 0; i < left_in_block; ++i)
        if (pos + i < bytes.size() && bytes[pos + i] != 0)
          throw std::runtime_error("non-zero block padding at " + std::to_string(pos));
      out.paddings.push_back(pos);
      pos += left_in_block;
      continue;
    }
    const std::string at = "chunk at offset " + std::to_string(pos) + ": ";
    if (bytes.size() - pos < kHeader) throw std::runtime_error(at + "truncated header");
    const uint32_t crc = static_cast<uint32_t>(read_le(bytes, pos, 4));
    const size_t length = read_le(bytes, pos + 4, 2);
    const int type = static_cast<unsigned char>(bytes[pos + 6]);
    if (length > left_in_block - kHeader) throw std::runtime_error(at + "crosses a block boundary");
    if (bytes.size() - pos - kHeader < length) throw std::runtime_error(at + "truncated data");
    const std::string data = bytes.substr(pos + kHeader, length);
    if (crc != crc32_bitwise(data, crc32_bitwise(std::string(1, static_cast<char>(type)))))
      throw std::runtime_error(at + "CRC mismatch");
    out.chunk_offsets.push_back(pos);
    pos += kHeader + length;
    out.chunk_types.push_back(type);
    const bool first = type == 1 || type == 2;
    if (first == in_record || type < 1 || type > 4)
      throw std::runtime_error(at + "unexpected chunk type " + std::to_string(type));
    pending += data;
    in_record = type == 2 || type == 3;
    if (!in_record) {
      out.records.push_back(pending);
      pending.clear();
    }
  }
  if (in_record) throw std::runtime_error("the last record is incomplete");
  return out;
}

// wandb_internal.Record, decoded as far as the tests look.
struct WandbItem {
  std::string key;  // `key`, or the single element of `nested_key`
  std::string value_json;
};
struct WandbRecord {
  int64_t num = 0;
  std::string type;              // "header", "run", "config", "history", "summary", "exit"
  std::vector<ProtoField> body;  // the record_type message's fields
  std::vector<WandbItem> items;  // config/summary updates, history items
  int64_t history_step = 0;
};

inline std::vector<WandbItem> decode_items(const std::vector<ProtoField>& body) {
  std::vector<WandbItem> out;
  for (const ProtoField& f : fields_of(body, 1)) {
    const std::vector<ProtoField> item = parse_proto(f.bytes);
    WandbItem i;
    const std::vector<ProtoField> nested = fields_of(item, 2);
    if (nested.size() > 1) throw std::runtime_error("nested_key with more than one element");
    i.key = nested.empty() ? field_of(item, 1).bytes : nested[0].bytes;
    i.value_json = field_of(item, 16).bytes;
    out.push_back(i);
  }
  return out;
}

inline WandbRecord decode_record(const std::string& payload) {
  const std::vector<ProtoField> fields = parse_proto(payload);
  WandbRecord r;
  r.num = static_cast<int64_t>(field_of(fields, 1).number_value);
  const std::pair<uint32_t, const char*> kinds[] = {{2, "history"}, {3, "summary"}, {5, "config"},
                                                    {17, "run"},    {18, "exit"},   {21, "header"}};
  for (const ProtoField& f : fields)
    for (const auto& [field, name] : kinds)
      if (f.field == field) {
        if (!r.type.empty()) throw std::runtime_error("two record types in one record");
        r.type = name;
        r.body = parse_proto(f.bytes);
      }
  if (r.type == "config" || r.type == "summary" || r.type == "history")
    r.items = decode_items(r.body);
  if (r.type == "history") {
    const std::vector<ProtoField> step = parse_proto(field_of(r.body, 2).bytes);
    r.history_step = step.empty() ? 0 : static_cast<int64_t>(field_of(step, 1).number_value);
  }
  return r;
}

inline std::vector<WandbRecord> read_run_records(const std::string& bytes) {
  std::vector<WandbRecord> out;
  for (const std::string& payload : read_run_file(bytes).records)
    out.push_back(decode_record(payload));
  return out;
}

}  // namespace dscore::testing
