// Test support: torch.save files built byte by byte, as torch.save writes
// them (a zip of stored entries; pickle protocol 2), so the readers of
// DeepSpeed checkpoints are tested without torch.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/checkpoint/zip_archive.h"

namespace dscore::checkpoint::testing {

inline void put(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// A zip archive of stored entries (method 0, or `method` for all).
inline std::string zip(const std::vector<std::pair<std::string, std::string>>& entries,
                       int method = 0) {
  std::string out, dir;
  for (const auto& [name, data] : entries) {
    const uint32_t crc = crc32_update(0, data.data(), data.size());
    const uint64_t local = out.size();
    put(out, 0x04034b50, 4);
    put(out, 20, 2);
    put(out, 0, 2);
    put(out, method, 2);
    put(out, 0, 4);
    put(out, crc, 4);
    put(out, data.size(), 4);
    put(out, data.size(), 4);
    put(out, name.size(), 2);
    put(out, 0, 2);
    out += name + data;
    put(dir, 0x02014b50, 4);
    put(dir, 20, 2);
    put(dir, 20, 2);
    put(dir, 0, 2);
    put(dir, method, 2);
    put(dir, 0, 4);
    put(dir, crc, 4);
    put(dir, data.size(), 4);
    put(dir, data.size(), 4);
    put(dir, name.size(), 2);
    put(dir, 0, 2);
    put(dir, 0, 2);
    put(dir, 0, 2);
    put(dir, 0, 2);
    put(dir, 0, 4);
    put(dir, local, 4);
    dir += name;
  }
  const uint64_t dir_offset = out.size();
  out += dir;
  put(out, 0x06054b50, 4);
  put(out, 0, 4);
  put(out, entries.size(), 2);
  put(out, entries.size(), 2);
  put(out, dir.size(), 4);
  put(out, dir_offset, 4);
  put(out, 0, 2);
  return out;
}

// Pickle protocol 2 pieces, as torch.save emits them.
inline std::string str(const std::string& s) {
  std::string out = "X";
  put(out, s.size(), 4);
  return out + s;
}
inline std::string global(const std::string& module, const std::string& name) {
  return "c" + module + "\n" + name + "\n";
}
inline std::string binint(int v) {
  std::string out = "J";
  put(out, static_cast<uint32_t>(v), 4);
  return out;
}
// _rebuild_tensor_v2((storage), offset, size, stride, False, OrderedDict())
inline std::string tensor(const std::string& key, const std::vector<int>& shape, int offset = 0) {
  std::string t = global("torch._utils", "_rebuild_tensor_v2") + "(" + "(" + str("storage") +
                  global("torch", "FloatStorage") + str(key) + str("cpu") + binint(6) + "tQ" +
                  binint(offset) + "(";
  for (int d : shape) t += binint(d);
  t += "t(";
  int stride = 1;
  std::vector<int> strides(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  for (int s : strides) t += binint(s);
  return t + "t\x89" + global("collections", "OrderedDict") + ")RtR";
}

inline std::string floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

inline std::string binfloat(double v) {  // big-endian
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  std::string out = "G";
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
  return out;
}

// Pickle containers: {k: v, ...} with string keys, [a, b, ...], and an
// object as DeepSpeed's LossScaler and fragment_address are pickled
// (NEWOBJ without arguments, then BUILD with a dict of fields).
inline std::string dict(const std::vector<std::pair<std::string, std::string>>& items) {
  std::string out = "}(";
  for (const auto& [key, value] : items) out += key + value;
  return out + "u";
}
inline std::string list(const std::vector<std::string>& items) {
  std::string out = "](";
  for (const std::string& item : items) out += item;
  return out + "e";
}
inline std::string object(const std::string& module, const std::string& name,
                          const std::string& fields) {
  return global(module, name) + ")\x81" + fields + "b";
}
inline std::string pickle(const std::string& value) {
  return std::string("\x80\x02") + value + ".";
}

// A torch.save archive named `name` of one pickle and float32 storages "0", "1", ...
inline std::string torch_save(const std::string& name, const std::string& pickled,
                              const std::vector<std::vector<float>>& storages) {
  std::vector<std::pair<std::string, std::string>> entries = {{name + "/data.pkl", pickled},
                                                              {name + "/byteorder", "little"}};
  for (size_t i = 0; i < storages.size(); ++i)
    entries.push_back({name + "/data/" + std::to_string(i), floats(storages[i])});
  entries.push_back({name + "/version", "3\n"});
  return zip(entries);
}

}  // namespace dscore::checkpoint::testing
