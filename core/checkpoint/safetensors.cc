#include "core/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <dscore/cpp/dtype.hpp>

#include "core/checkpoint/checksum.h"
#include "core/config/json.h"

namespace dscore::checkpoint {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;
constexpr size_t kHashPiece = 1u << 20;       // hash and write in cache-sized pieces
constexpr uint64_t kStreamPiece = 64u << 20;  // bytes asked of a streamed tensor at once

struct DtypeName {
  dscore_dtype dtype;
  const char* name;
};
constexpr DtypeName kDtypes[] = {
    {DSCORE_DTYPE_F64, "F64"},   {DSCORE_DTYPE_F32, "F32"}, {DSCORE_DTYPE_F16, "F16"},
    {DSCORE_DTYPE_BF16, "BF16"}, {DSCORE_DTYPE_I64, "I64"}, {DSCORE_DTYPE_I32, "I32"},
    {DSCORE_DTYPE_I16, "I16"},   {DSCORE_DTYPE_I8, "I8"},   {DSCORE_DTYPE_U64, "U64"},
    {DSCORE_DTYPE_U32, "U32"},   {DSCORE_DTYPE_U16, "U16"}, {DSCORE_DTYPE_U8, "U8"},
    {DSCORE_DTYPE_BOOL, "BOOL"},
};

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The JSON header, padded with spaces so the data starts at a multiple of 8.
std::string build_header(const std::vector<TensorSpec>& tensors,
                         const std::map<std::string, std::string>& metadata,
                         const std::vector<uint64_t>& checksums) {
  json::Value root = json::Value::object();
  json::Value meta = json::Value::object();
  for (const auto& [k, v] : metadata) meta.set(k, json::Value(v));
  json::Value sums = json::Value::object();
  for (size_t i = 0; i < tensors.size(); ++i)
    sums.set(tensors[i].name, json::Value(format_checksum(checksums[i])));
  meta.set(kChecksumsKey, json::Value(json::serialize(sums)));
  root.set("__metadata__", std::move(meta));
  uint64_t offset = 0;
  for (const TensorSpec& t : tensors) {
    json::Value entry = json::Value::object();
    entry.set("dtype", json::Value(safetensors_dtype_name(t.dtype)));
    json::Value shape = json::Value::array();
    for (int64_t d : t.shape) shape.push_back(json::Value(d));
    entry.set("shape", std::move(shape));
    json::Value offsets = json::Value::array();
    offsets.push_back(json::Value(static_cast<int64_t>(offset)));
    offset += t.bytes();
    offsets.push_back(json::Value(static_cast<int64_t>(offset)));
    entry.set("data_offsets", std::move(offsets));
    root.set(t.name, std::move(entry));
  }
  std::string text = json::serialize(root);
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

void put_u64_le(uint64_t v, char out[8]) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

}  // namespace

const char* safetensors_dtype_name(dscore_dtype dtype) {
  for (const DtypeName& d : kDtypes)
    if (d.dtype == dtype) return d.name;
  return nullptr;
}

dscore_dtype dtype_from_safetensors(std::string_view name) {
  for (const DtypeName& d : kDtypes)
    if (name == d.name) return d.dtype;
  return DSCORE_DTYPE_INVALID;
}

uint64_t TensorSpec::bytes() const {
  return static_cast<uint64_t>(product(shape)) * sdk::dtype_size(dtype);
}
int64_t TensorInfo::numel() const { return product(shape); }

// ---------------------------------------------------------------- writing

struct SafetensorsWriter::Hasher {
  ChecksumStream stream;
};

SafetensorsWriter::SafetensorsWriter(DurableFile file, std::vector<TensorSpec> tensors,
                                     std::map<std::string, std::string> metadata,
                                     uint64_t header_bytes)
    : file_(std::move(file)),
      tensors_(std::move(tensors)),
      metadata_(std::move(metadata)),
      header_bytes_(header_bytes) {}

Result<SafetensorsWriter> SafetensorsWriter::create(
    const std::string& path, std::vector<TensorSpec> tensors,
    const std::map<std::string, std::string>& metadata) {
  for (const TensorSpec& t : tensors) {
    if (safetensors_dtype_name(t.dtype) == nullptr)
      return invalid_argument("tensor " + t.name + " has a dtype safetensors cannot store");
    if (t.name.empty() || t.name == "__metadata__")
      return invalid_argument("a safetensors tensor cannot be named \"" + t.name + "\"");
  }
  const std::string header =
      build_header(tensors, metadata, std::vector<uint64_t>(tensors.size(), 0));
  DSCORE_ASSIGN_OR_RETURN(DurableFile file, DurableFile::create(path));
  char length[8];
  put_u64_le(header.size(), length);
  DSCORE_RETURN_IF_ERROR(file.write(length, 8));
  DSCORE_RETURN_IF_ERROR(file.write(header.data(), header.size()));
  SafetensorsWriter writer(std::move(file), std::move(tensors), metadata, 8 + header.size());
  writer.hasher_ = std::make_shared<Hasher>();
  writer.current_left_ = writer.tensors_.empty() ? 0 : writer.tensors_[0].bytes();
  // Zero-byte tensors at the front complete at once.
  writer.current_ = 0;
  DSCORE_RETURN_IF_ERROR(writer.append(nullptr, 0));
  return writer;
}

Status SafetensorsWriter::append(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  for (;;) {
    while (current_ < tensors_.size() && current_left_ == 0) {
      checksums_.push_back(hasher_->stream.digest());
      hasher_ = std::make_shared<Hasher>();
      ++current_;
      current_left_ = current_ < tensors_.size() ? tensors_[current_].bytes() : 0;
    }
    if (bytes == 0) return Status::Ok();
    if (current_ >= tensors_.size())
      return internal_error(file_.path() + ": more data appended than the header declares");
    const size_t n = static_cast<size_t>(std::min<uint64_t>({current_left_, bytes, kHashPiece}));
    hasher_->stream.update(p, n);
    DSCORE_RETURN_IF_ERROR(file_.write(p, n));
    p += n;
    bytes -= n;
    current_left_ -= n;
  }
}

Status SafetensorsWriter::commit() {
  if (current_ < tensors_.size())
    return internal_error(file_.path() + ": tensor " + tensors_[current_].name + " is missing " +
                          std::to_string(current_left_) + " bytes");
  const std::string header = build_header(tensors_, metadata_, checksums_);
  if (8 + header.size() != header_bytes_)
    return internal_error(file_.path() +
                          ": the header changed length when its checksums were filled in");
  DSCORE_RETURN_IF_ERROR(file_.write_at(8, header.data(), header.size()));
  return file_.commit();
}

Status write_safetensors(const std::string& path, const std::vector<TensorData>& tensors,
                         const std::map<std::string, std::string>& metadata,
                         const std::function<void()>& midway) {
  std::vector<TensorSpec> specs;
  specs.reserve(tensors.size());
  for (const TensorData& t : tensors) specs.push_back(t.spec);
  DSCORE_ASSIGN_OR_RETURN(SafetensorsWriter writer,
                          SafetensorsWriter::create(path, std::move(specs), metadata));
  std::vector<char> piece;  // for streamed tensors
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorData& t = tensors[i];
    if (!t.source) {
      DSCORE_RETURN_IF_ERROR(writer.append(t.data, t.spec.bytes()));
    } else {
      const uint64_t total = t.spec.bytes();
      piece.resize(static_cast<size_t>(std::min<uint64_t>(total, kStreamPiece)));
      for (uint64_t done = 0; done < total;) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(total - done, kStreamPiece));
        DSCORE_RETURN_IF_ERROR(t.source(done, piece.data(), n));
        DSCORE_RETURN_IF_ERROR(writer.append(piece.data(), n));
        done += n;
      }
    }
    if (i == 0 && midway) midway();
  }
  return writer.commit();
}

// ---------------------------------------------------------------- reading

Result<SafetensorsReader> SafetensorsReader::open(const std::string& path) {
  const int raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (raw < 0) {
    if (errno == ENOENT) return not_found(path + " does not exist");
    return file_error("cannot open", path, errno);
  }
  SafetensorsReader r;
  r.path_ = path;
  r.fd_ = std::shared_ptr<const int>(new int(raw), [](const int* fd) {
    ::close(*fd);
    delete fd;
  });
  struct stat st;
  if (::fstat(raw, &st) != 0) return file_error("cannot stat", path, errno);
  r.file_size_ = static_cast<uint64_t>(st.st_size);
  if (r.file_size_ < 8)
    return data_loss(path + " is " + std::to_string(r.file_size_) +
                     " bytes: too short for a safetensors file (truncated?)");
  unsigned char length[8];
  DSCORE_RETURN_IF_ERROR(pread_fully(raw, path, 0, 8, length));
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = header_size << 8 | length[i];
  if (header_size > kMaxHeaderBytes || header_size > r.file_size_ - 8)
    return data_loss(path + ": its header length field says " + std::to_string(header_size) +
                     " bytes but the file has " + std::to_string(r.file_size_) +
                     ": not a safetensors file, or it is truncated or corrupt");
  std::string text(header_size, '\0');
  DSCORE_RETURN_IF_ERROR(pread_fully(raw, path, 8, header_size, text.data()));
  auto parsed = json::parse(text, path);
  if (!parsed.ok())
    return data_loss("the safetensors header is corrupt: " + parsed.status().message());
  if (!parsed->is_object())
    return data_loss(path + ": the safetensors header is not a JSON object");
  const uint64_t data_start = 8 + header_size;
  const uint64_t data_size = r.file_size_ - data_start;
  std::map<std::string, uint64_t> sums;
  for (const json::Member& m : parsed->members()) {
    if (m.key == "__metadata__") {
      if (!m.value.is_object()) return data_loss(path + ": __metadata__ is not an object");
      for (const json::Member& e : m.value.members()) {
        if (!e.value.is_string())
          return data_loss(path + ": __metadata__." + e.key + " is not a string");
        r.metadata_[e.key] = e.value.as_string();
      }
      continue;
    }
    const json::Value& v = m.value;
    const json::Value* dtype = v.is_object() ? v.find("dtype") : nullptr;
    const json::Value* shape = v.is_object() ? v.find("shape") : nullptr;
    const json::Value* offsets = v.is_object() ? v.find("data_offsets") : nullptr;
    auto bad = [&](const std::string& what) {
      return data_loss(path + ": tensor " + m.key + ": " + what);
    };
    if (dtype == nullptr || !dtype->is_string() || shape == nullptr || !shape->is_array() ||
        offsets == nullptr || !offsets->is_array() || offsets->items().size() != 2)
      return bad("needs dtype, shape and data_offsets [begin, end]");
    TensorInfo t;
    t.name = m.key;
    t.dtype = dtype_from_safetensors(dtype->as_string());
    if (t.dtype == DSCORE_DTYPE_INVALID) return bad("unknown dtype " + dtype->as_string());
    for (const json::Value& d : shape->items()) {
      if (!d.is_integral() || d.as_int() < 0) return bad("the shape has a bad dimension");
      t.shape.push_back(d.as_int());
    }
    const json::Value& b = offsets->items()[0];
    const json::Value& e = offsets->items()[1];
    if (!b.is_integral() || !e.is_integral() || b.as_int() < 0 || e.as_int() < b.as_int())
      return bad("bad data_offsets");
    const uint64_t begin = static_cast<uint64_t>(b.as_int()),
                   end = static_cast<uint64_t>(e.as_int());
    if (end - begin != static_cast<uint64_t>(t.numel()) * sdk::dtype_size(t.dtype))
      return bad("data_offsets span " + std::to_string(end - begin) +
                 " bytes but the dtype and shape need " +
                 std::to_string(static_cast<uint64_t>(t.numel()) * sdk::dtype_size(t.dtype)));
    if (end > data_size)
      return data_loss(path + " is " + std::to_string(r.file_size_) + " bytes but tensor " +
                       t.name + " ends at byte " + std::to_string(data_start + end) +
                       ": the file is truncated");
    t.offset = data_start + begin;
    t.bytes = end - begin;
    r.tensors_.push_back(std::move(t));
  }
  if (auto it = r.metadata_.find(kChecksumsKey); it != r.metadata_.end()) {
    auto sums_json = json::parse(it->second, path + " " + kChecksumsKey);
    if (!sums_json.ok() || !sums_json->is_object())
      return data_loss(path + ": the " + std::string(kChecksumsKey) + " metadata is corrupt");
    for (const json::Member& s : sums_json->members()) {
      const auto value = s.value.is_string() ? parse_checksum(s.value.as_string()) : std::nullopt;
      if (!value)
        return data_loss(path + ": the checksum of " + s.key + " is not xxh3:<16 hex digits>");
      sums[s.key] = *value;
    }
    for (TensorInfo& t : r.tensors_) {
      auto found = sums.find(t.name);
      if (found == sums.end()) return data_loss(path + ": tensor " + t.name + " has no checksum");
      t.checksum = found->second;
    }
  }
  return r;
}

const TensorInfo* SafetensorsReader::find(std::string_view name) const {
  for (const TensorInfo& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

Status SafetensorsReader::read(const TensorInfo& tensor, uint64_t offset, uint64_t bytes,
                               void* dst) const {
  if (offset + bytes > tensor.bytes)
    return internal_error("read past the end of tensor " + tensor.name);
  return pread_fully(*fd_, path_, tensor.offset + offset, bytes, dst);
}

Status SafetensorsReader::read_verified(const TensorInfo& tensor, void* dst) const {
  ChecksumStream hash;
  char* p = static_cast<char*>(dst);
  for (uint64_t done = 0; done < tensor.bytes;) {
    const uint64_t n = std::min<uint64_t>(tensor.bytes - done, 8u << 20);
    DSCORE_RETURN_IF_ERROR(read(tensor, done, n, p + done));
    hash.update(p + done, n);
    done += n;
  }
  return check(tensor, hash.digest());
}

Status SafetensorsReader::verify(const TensorInfo& tensor) const {
  ChecksumStream hash;
  std::vector<char> buffer(static_cast<size_t>(std::min<uint64_t>(tensor.bytes, 8u << 20)));
  for (uint64_t done = 0; done < tensor.bytes;) {
    const uint64_t n = std::min<uint64_t>(tensor.bytes - done, buffer.size());
    DSCORE_RETURN_IF_ERROR(read(tensor, done, n, buffer.data()));
    hash.update(buffer.data(), n);
    done += n;
  }
  return check(tensor, hash.digest());
}

Status SafetensorsReader::check(const TensorInfo& tensor, uint64_t computed) const {
  if (!tensor.checksum || *tensor.checksum == computed) return Status::Ok();
  return data_loss(
      path_ + ": tensor " + tensor.name + " fails its checksum (stored " +
      format_checksum(*tensor.checksum) + ", computed " + format_checksum(computed) +
      "): the file is corrupt; restore it from a copy or load an earlier checkpoint tag");
}

}  // namespace dscore::checkpoint
