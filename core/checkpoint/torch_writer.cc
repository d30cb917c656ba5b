// The torch.save writer (torch_writer.h). Opcodes as in pickle protocol 2
// (Python's Lib/pickletools.py documents each); the archive as torch.save
// lays it out: "<name>/data.pkl", "<name>/byteorder", "<name>/data/<key>",
// "<name>/version", every entry's data 64-byte aligned through a padding
// extra field (id 0x4246), as PyTorch's writer pads.
#include "core/checkpoint/torch_writer.h"

#include <cstring>

#include "core/checkpoint/durable_file.h"
#include "core/checkpoint/zip_archive.h"

namespace dscore::checkpoint {
namespace {

void put(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

const char* storage_class(dscore_dtype dtype) {
  switch (dtype) {
    case DSCORE_DTYPE_F32:
      return "FloatStorage";
    case DSCORE_DTYPE_BF16:
      return "BFloat16Storage";
    case DSCORE_DTYPE_F16:
      return "HalfStorage";
    case DSCORE_DTYPE_F64:
      return "DoubleStorage";
    case DSCORE_DTYPE_I64:
      return "LongStorage";
    case DSCORE_DTYPE_I32:
      return "IntStorage";
    default:
      return nullptr;
  }
}

}  // namespace

void PickleWriter::global(const std::string& module, const std::string& name) {
  out_ += "c" + module + "\n" + name + "\n";
}

PickleWriter& PickleWriter::none() {
  out_ += 'N';
  return *this;
}

PickleWriter& PickleWriter::boolean(bool v) {
  out_ += static_cast<char>(v ? 0x88 : 0x89);
  return *this;
}

PickleWriter& PickleWriter::integer(int64_t v) {
  if (v >= 0 && v < 256) {
    out_ += 'K';
    put(out_, static_cast<uint64_t>(v), 1);
  } else if (v >= 0 && v < 65536) {
    out_ += 'M';
    put(out_, static_cast<uint64_t>(v), 2);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    out_ += 'J';
    put(out_, static_cast<uint32_t>(static_cast<int32_t>(v)), 4);
  } else {
    out_ += static_cast<char>(0x8a);  // LONG1, 8 bytes of two's complement
    out_ += static_cast<char>(8);
    put(out_, static_cast<uint64_t>(v), 8);
  }
  return *this;
}

PickleWriter& PickleWriter::real(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  out_ += 'G';
  for (int i = 7; i >= 0; --i) out_ += static_cast<char>((bits >> (8 * i)) & 0xff);
  return *this;
}

PickleWriter& PickleWriter::string(const std::string& v) {
  out_ += 'X';
  put(out_, v.size(), 4);
  out_ += v;
  return *this;
}

PickleWriter& PickleWriter::begin_dict() {
  out_ += "}(";
  return *this;
}

PickleWriter& PickleWriter::begin_ordered_dict() {
  global("collections", "OrderedDict");
  out_ += ")R(";
  return *this;
}

PickleWriter& PickleWriter::end_dict() {
  out_ += 'u';
  return *this;
}

PickleWriter& PickleWriter::begin_list() {
  out_ += "](";
  return *this;
}

PickleWriter& PickleWriter::end_list() {
  out_ += 'e';
  return *this;
}

PickleWriter& PickleWriter::begin_tuple() {
  out_ += '(';
  return *this;
}

PickleWriter& PickleWriter::end_tuple() {
  out_ += 't';
  return *this;
}

PickleWriter& PickleWriter::size(const std::vector<int64_t>& dims) {
  global("torch", "Size");
  begin_tuple();
  for (int64_t d : dims) integer(d);
  end_tuple();
  out_ += static_cast<char>(0x85);  // TUPLE1: Size's one argument
  out_ += 'R';
  return *this;
}

PickleWriter& PickleWriter::tensor(const std::string& key, dscore_dtype dtype,
                                   const std::vector<int64_t>& shape, int64_t storage_numel) {
  global("torch._utils", "_rebuild_tensor_v2");
  begin_tuple();
  // The storage, by persistent id ('storage', class, key, location, numel).
  begin_tuple();
  string("storage");
  global("torch", storage_class(dtype));
  string(key);
  string("cpu");
  integer(storage_numel);
  end_tuple();
  out_ += 'Q';
  integer(0);  // storage offset
  begin_tuple();
  for (int64_t d : shape) integer(d);
  end_tuple();
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  begin_tuple();
  for (int64_t s : strides) integer(s);
  end_tuple();
  boolean(false);        // requires_grad
  begin_ordered_dict();  // backward hooks
  end_dict();
  end_tuple();
  out_ += 'R';
  return *this;
}

PickleWriter& PickleWriter::begin_call(const std::string& module, const std::string& name) {
  global(module, name);
  return begin_tuple();
}

PickleWriter& PickleWriter::end_call() {
  end_tuple();
  out_ += 'R';
  return *this;
}

PickleWriter& PickleWriter::begin_object(const std::string& module, const std::string& name) {
  global(module, name);
  out_ += ')';
  out_ += static_cast<char>(0x81);  // NEWOBJ: cls.__new__(cls)
  return begin_dict();
}

PickleWriter& PickleWriter::end_object() {
  end_dict();
  out_ += 'b';  // BUILD: the dict becomes its fields
  return *this;
}

std::string PickleWriter::finish() const { return std::string("\x80\x02", 2) + out_ + "."; }

std::string TorchSaveWriter::add_storage(std::string bytes) {
  storages_.push_back(std::move(bytes));
  return std::to_string(storages_.size() - 1);
}

Status TorchSaveWriter::write(const std::string& path, const std::string& pickle) const {
  std::vector<std::pair<std::string, const std::string*>> entries;
  const std::string byteorder = "little", version = "3\n";
  entries.push_back({name_ + "/data.pkl", &pickle});
  entries.push_back({name_ + "/byteorder", &byteorder});
  for (size_t i = 0; i < storages_.size(); ++i)
    entries.push_back({name_ + "/data/" + std::to_string(i), &storages_[i]});
  entries.push_back({name_ + "/version", &version});
  uint64_t total = 0;
  for (const auto& e : entries) total += e.second->size() + 200;
  if (total >= 0xffffffffu)
    return invalid_argument(path +
                            ": the checkpoint file would pass 4 GiB, which needs zip64 "
                            "records dscore does not write yet");
  std::string out, directory;
  for (const auto& [name, data] : entries) {
    const uint32_t crc = crc32_update(0, data->data(), data->size());
    const uint64_t local = out.size();
    const uint64_t unpadded = local + 30 + name.size() + 4;
    const uint64_t extra = 4 + (64 - unpadded % 64) % 64;
    put(out, 0x04034b50, 4);
    put(out, 20, 2);  // version needed
    put(out, 0, 2);   // flags
    put(out, 0, 2);   // stored
    put(out, 0, 4);   // time, date
    put(out, crc, 4);
    put(out, data->size(), 4);
    put(out, data->size(), 4);
    put(out, name.size(), 2);
    put(out, extra, 2);
    out += name;
    put(out, 0x4246, 2);  // padding extra field
    put(out, extra - 4, 2);
    out.append(extra - 4, 'Z');
    out += *data;
    put(directory, 0x02014b50, 4);
    put(directory, 20, 2);  // version made by
    put(directory, 20, 2);
    put(directory, 0, 2);
    put(directory, 0, 2);
    put(directory, 0, 4);
    put(directory, crc, 4);
    put(directory, data->size(), 4);
    put(directory, data->size(), 4);
    put(directory, name.size(), 2);
    put(directory, 0, 2);  // extra
    put(directory, 0, 2);  // comment
    put(directory, 0, 2);  // disk
    put(directory, 0, 2);  // internal attributes
    put(directory, 0, 4);  // external attributes
    put(directory, local, 4);
    directory += name;
  }
  const uint64_t directory_offset = out.size();
  out += directory;
  put(out, 0x06054b50, 4);
  put(out, 0, 4);
  put(out, entries.size(), 2);
  put(out, entries.size(), 2);
  put(out, directory.size(), 4);
  put(out, directory_offset, 4);
  put(out, 0, 2);
  return write_file_durably(path, out);
}

}  // namespace dscore::checkpoint
