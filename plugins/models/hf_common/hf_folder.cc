#include "hf_folder.h"

#include <dscore/cpp/dtype.hpp>
#include <dscore/cpp/plugin.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include "hf_config.h"

namespace dscore::hf {
namespace {

using sdk::Error;

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // safetensors' own limit
constexpr uint64_t kBandPiece = 4u << 20;         // bytes read at once for a transposed slice

// Bytes per element of a safetensors dtype name; 0 when unknown.
uint64_t element_bytes(const std::string& dtype) {
  static const std::pair<const char*, uint64_t> kSizes[] = {
      {"F64", 8}, {"I64", 8}, {"U64", 8},  {"F32", 4},     {"I32", 4},
      {"U32", 4}, {"F16", 2}, {"BF16", 2}, {"I16", 2},     {"U16", 2},
      {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (const auto& [name, size] : kSizes)
    if (dtype == name) return size;
  return 0;
}

std::string read_text_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(DSCORE_NOT_FOUND,
                what + " " + path + " does not exist or cannot be read" +
                    (errno != 0 ? std::string(" (") + std::strerror(errno) + ")" : std::string()));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// Converts n elements of `dtype` at src to fp32.
void to_float(const std::string& dtype, const unsigned char* src, int64_t n, float* out) {
  if (dtype == "F32") {
    std::memcpy(out, src, static_cast<size_t>(n) * 4);
    return;
  }
  const bool bf16 = dtype == "BF16";
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    out[i] = bf16 ? sdk::bf16_to_float(h) : sdk::half_to_float(h);
  }
}

}  // namespace

int64_t HfTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

struct HfFolder::File {
  std::string path;
  int fd = -1;
  uint64_t size = 0;
  ~File() {
    if (fd >= 0) ::close(fd);
  }
};

HfFolder::~HfFolder() = default;

std::shared_ptr<const HfFolder> HfFolder::open(const std::string& dir) {
  std::shared_ptr<HfFolder> f(new HfFolder());
  f->dir_ = dir;
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw Error(DSCORE_NOT_FOUND, "from_pretrained folder " + dir +
                                      " does not exist or is not a folder: give the folder "
                                      "save_pretrained wrote (holding config.json)");
  const std::string config_path = dir + "/config.json";
  if (!exists(config_path))
    throw Error(DSCORE_NOT_FOUND, "from_pretrained folder " + dir +
                                      " has no config.json: it is not a Hugging Face model "
                                      "folder (save_pretrained writes config.json beside the "
                                      "weights)");
  f->config_ = std::make_unique<HfConfig>(read_text_file(config_path, "config file"), config_path);

  // transformers looks for the single file first, then the sharded index.
  const std::string single = dir + "/model.safetensors";
  const std::string index = dir + "/model.safetensors.index.json";
  if (exists(single)) {
    f->open_file(single);
    return f;
  }
  if (!exists(index))
    throw Error(DSCORE_NOT_FOUND,
                "from_pretrained folder " + dir +
                    " has neither model.safetensors nor model.safetensors.index.json: dscore "
                    "reads safetensors weights only (save_pretrained writes them by default; "
                    "convert a pytorch_model.bin with transformers' save_pretrained)");
  f->index_path_ = index;
  rapidjson::Document doc;
  const std::string text = read_text_file(index, "index file");
  doc.Parse(text.c_str(), text.size());
  if (doc.HasParseError() || !doc.IsObject())
    throw Error(
        DSCORE_DATA_LOSS,
        index + " is not a JSON object (" +
            (doc.HasParseError() ? std::string(rapidjson::GetParseError_En(doc.GetParseError()))
                                 : std::string("wrong type")) +
            ")");
  auto map = doc.FindMember("weight_map");
  if (map == doc.MemberEnd() || !map->value.IsObject())
    throw Error(DSCORE_DATA_LOSS, index + " has no \"weight_map\" object");
  std::map<std::string, std::string> wanted;  // tensor -> file
  std::vector<std::string> order;
  std::set<std::string> seen;
  for (auto& m : map->value.GetObject()) {
    if (!m.value.IsString())
      throw Error(DSCORE_DATA_LOSS,
                  index + ": weight_map[\"" + m.name.GetString() + "\"] is not a file name");
    const std::string file = m.value.GetString();
    if (file.find('/') != std::string::npos)
      throw Error(DSCORE_DATA_LOSS,
                  index + ": weight_map names " + file + ", which is not a file of the folder");
    wanted[m.name.GetString()] = dir + "/" + file;
    if (seen.insert(file).second) order.push_back(file);
  }
  std::sort(order.begin(), order.end());
  for (const std::string& file : order) {
    if (!exists(dir + "/" + file))
      throw Error(DSCORE_NOT_FOUND, index + " lists " + file + ", which is not in " + dir +
                                        ": the download is incomplete");
    f->open_file(dir + "/" + file);
  }
  for (const auto& [name, file] : wanted) {
    auto it = f->tensors_.find(name);
    if (it == f->tensors_.end() || it->second.file != file)
      throw Error(DSCORE_DATA_LOSS, index + " puts tensor " + name + " in " + file +
                                        ", whose header does not have it");
  }
  return f;
}

void HfFolder::open_file(const std::string& path) {
  auto file = std::make_unique<File>();
  file->path = path;
  file->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file->fd < 0)
    throw Error(DSCORE_NOT_FOUND, "cannot open " + path + ": " + std::strerror(errno));
  struct stat st;
  if (::fstat(file->fd, &st) != 0)
    throw Error(DSCORE_UNAVAILABLE, "cannot stat " + path + ": " + std::strerror(errno));
  file->size = static_cast<uint64_t>(st.st_size);
  if (file->size < 8)
    throw Error(DSCORE_DATA_LOSS, path + " is " + std::to_string(file->size) +
                                      " bytes: too short for a safetensors file (truncated?)");
  unsigned char length[8];
  pread_exact(*file, 0, 8, length);
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = header_bytes << 8 | length[i];
  if (header_bytes > kMaxHeaderBytes || header_bytes > file->size - 8)
    throw Error(DSCORE_DATA_LOSS, path + ": the header length field says " +
                                      std::to_string(header_bytes) + " bytes but the file has " +
                                      std::to_string(file->size) +
                                      ": not a safetensors file, or truncated");
  std::string text(header_bytes, '\0');
  pread_exact(*file, 8, header_bytes, text.data());
  rapidjson::Document doc;
  doc.Parse(text.c_str(), text.size());
  if (doc.HasParseError() || !doc.IsObject())
    throw Error(DSCORE_DATA_LOSS, path + ": the safetensors header is not a JSON object");
  const uint64_t data_start = 8 + header_bytes;
  for (auto& m : doc.GetObject()) {
    const std::string name(m.name.GetString(), m.name.GetStringLength());
    if (name == "__metadata__") continue;
    auto bad = [&](const std::string& what) {
      return Error(DSCORE_DATA_LOSS, path + ": tensor " + name + ": " + what);
    };
    const rapidjson::Value& v = m.value;
    if (!v.IsObject() || !v.HasMember("dtype") || !v["dtype"].IsString() || !v.HasMember("shape") ||
        !v["shape"].IsArray() || !v.HasMember("data_offsets") || !v["data_offsets"].IsArray() ||
        v["data_offsets"].Size() != 2 || !v["data_offsets"][0].IsUint64() ||
        !v["data_offsets"][1].IsUint64())
      throw bad("the header entry needs dtype, shape and data_offsets [begin, end]");
    HfTensor t;
    t.name = name;
    t.file = path;
    t.dtype = v["dtype"].GetString();
    for (const auto& d : v["shape"].GetArray()) {
      if (!d.IsInt64() || d.GetInt64() < 0) throw bad("the shape has a bad dimension");
      t.shape.push_back(d.GetInt64());
    }
    const uint64_t begin = v["data_offsets"][0].GetUint64();
    const uint64_t end = v["data_offsets"][1].GetUint64();
    if (end < begin) throw bad("data_offsets end before they begin");
    const uint64_t size = element_bytes(t.dtype);
    if (size != 0 && end - begin != static_cast<uint64_t>(t.numel()) * size)
      throw bad("data_offsets span " + std::to_string(end - begin) + " bytes but " + t.dtype + " " +
                shape_text(t.shape) + " needs " +
                std::to_string(static_cast<uint64_t>(t.numel()) * size));
    if (data_start + end > file->size)
      throw Error(DSCORE_DATA_LOSS, path + " is " + std::to_string(file->size) +
                                        " bytes but tensor " + name + " ends at byte " +
                                        std::to_string(data_start + end) +
                                        ": the file is truncated (download it again)");
    t.offset = data_start + begin;
    t.bytes = end - begin;
    if (!tensors_.emplace(name, std::move(t)).second)
      throw Error(DSCORE_DATA_LOSS,
                  "tensor " + name + " is in " + path + " and in another weight file of " + dir_);
  }
  files_.push_back(std::move(file));
}

std::vector<std::string> HfFolder::files() const {
  std::vector<std::string> out;
  for (const auto& f : files_) out.push_back(f->path);
  return out;
}

const HfTensor* HfFolder::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const HfTensor& HfFolder::tensor(const std::string& name, const std::vector<int64_t>& shape) const {
  const HfTensor* t = find(name);
  if (t == nullptr) {
    std::string where = index_path_.empty() ? files_.front()->path : index_path_ + " (files:";
    if (!index_path_.empty()) {
      for (const auto& f : files_) where += " " + f->path.substr(f->path.rfind('/') + 1);
      where += ")";
    }
    throw Error(DSCORE_NOT_FOUND, "tensor " + name + " is missing from " + where +
                                      ": the folder does not hold the model its config.json "
                                      "describes");
  }
  if (t->shape != shape)
    throw Error(DSCORE_INVALID_ARGUMENT, "tensor " + name + " in " + t->file + " has shape " +
                                             shape_text(t->shape) +
                                             " but config.json's model needs " + shape_text(shape));
  if (t->dtype != "F32" && t->dtype != "BF16" && t->dtype != "F16")
    throw Error(DSCORE_UNIMPLEMENTED, "tensor " + name + " in " + t->file + " has dtype " +
                                          t->dtype + ": dscore reads F32, BF16 and F16 weights");
  return *t;
}

const HfFolder::File& HfFolder::file_of(const HfTensor& t) const {
  for (const auto& f : files_)
    if (f->path == t.file) return *f;
  throw Error(DSCORE_INTERNAL, "tensor " + t.name + " names a file this folder did not open");
}

void HfFolder::pread_exact(const File& f, uint64_t offset, uint64_t bytes, void* dst) const {
  char* p = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t n = ::pread(f.fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw Error(DSCORE_UNAVAILABLE, "cannot read " + f.path + ": " + std::strerror(errno));
    if (n == 0)
      throw Error(DSCORE_DATA_LOSS, f.path + " ends at byte " + std::to_string(offset) +
                                        " but more data was expected: the file is truncated");
    p += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<uint64_t>(n);
  }
}

void HfFolder::read(const HfTensor& t, int64_t offset, int64_t count, float* out) const {
  if (offset < 0 || count < 0 || offset + count > t.numel())
    throw Error(DSCORE_OUT_OF_RANGE, "read of elements [" + std::to_string(offset) + ", " +
                                         std::to_string(offset + count) + ") of tensor " + t.name +
                                         " " + shape_text(t.shape));
  const uint64_t size = element_bytes(t.dtype);
  std::vector<unsigned char> raw;
  constexpr int64_t kPiece = 1 << 20;  // elements converted at once
  for (int64_t done = 0; done < count; done += kPiece) {
    const int64_t n = std::min(kPiece, count - done);
    if (t.dtype == "F32") {
      pread_exact(file_of(t), t.offset + static_cast<uint64_t>(offset + done) * 4,
                  static_cast<uint64_t>(n) * 4, out + done);
      continue;
    }
    raw.resize(static_cast<size_t>(n) * size);
    pread_exact(file_of(t), t.offset + static_cast<uint64_t>(offset + done) * size, raw.size(),
                raw.data());
    to_float(t.dtype, raw.data(), n, out + done);
  }
}

void HfFolder::read_transposed(const HfTensor& t, int64_t offset, int64_t count, float* out) const {
  if (t.shape.size() != 2)
    throw Error(DSCORE_INTERNAL, "read_transposed of tensor " + t.name + " " + shape_text(t.shape) +
                                     ", which is not 2-D");
  if (offset < 0 || count < 0 || offset + count > t.numel())
    throw Error(DSCORE_OUT_OF_RANGE, "read of elements [" + std::to_string(offset) + ", " +
                                         std::to_string(offset + count) + ") of the transpose of " +
                                         t.name + " " + shape_text(t.shape));
  if (count == 0) return;
  // Stored (R, K); the slice indexes the transpose (K, R): element k is
  // stored at (k % R, k / R). It covers transpose rows [c0, c1], i.e. the
  // stored column band [c0, c1] of every stored row.
  const int64_t R = t.shape[0], K = t.shape[1];
  const int64_t c0 = offset / R, c1 = (offset + count - 1) / R, band = c1 - c0 + 1;
  const uint64_t size = element_bytes(t.dtype);
  // Stored rows per read: whole rows when the band is the whole row (one
  // contiguous read), else the band of each row, so a rank reads only the
  // bytes of its slice.
  const bool whole_rows = band == K;
  const int64_t width = whole_rows ? K : band;
  const int64_t rows_per_piece = std::max<int64_t>(
      1, static_cast<int64_t>(kBandPiece / (static_cast<uint64_t>(width) * size)));
  std::vector<unsigned char> raw;
  std::vector<float> values;
  for (int64_t r0 = 0; r0 < R; r0 += rows_per_piece) {
    const int64_t rows = std::min(rows_per_piece, R - r0);
    raw.resize(static_cast<size_t>(rows * width) * size);
    if (whole_rows) {
      pread_exact(file_of(t), t.offset + static_cast<uint64_t>(r0 * K) * size, raw.size(),
                  raw.data());
    } else {
      for (int64_t r = 0; r < rows; ++r)
        pread_exact(file_of(t), t.offset + static_cast<uint64_t>((r0 + r) * K + c0) * size,
                    static_cast<uint64_t>(band) * size, raw.data() + r * band * size);
    }
    values.resize(static_cast<size_t>(rows * width));
    to_float(t.dtype, raw.data(), rows * width, values.data());
    const int64_t first_col = whole_rows ? c0 : 0;  // band column 0 in `values`
    for (int64_t c = c0; c <= c1; ++c) {
      for (int64_t r = r0; r < r0 + rows; ++r) {
        const int64_t k = c * R + r;  // index in the transpose
        if (k < offset || k >= offset + count) continue;
        out[k - offset] = values[static_cast<size_t>((r - r0) * width + (c - c0) + first_col)];
      }
    }
  }
}

}  // namespace dscore::hf
