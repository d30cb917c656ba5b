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

std::string TorchSaveWriter::add_storage(const void* data, uint64_t bytes) {
  storages_.push_back({data, bytes});
  return std::to_string(storages_.size() - 1);
}

Status TorchSaveWriter::write(const std::string& path, const std::string& pickle) const {
  constexpr uint32_t kMax32 = 0xffffffffu;
  struct Entry {
    std::string name;
    const char* data;
    uint64_t bytes;
    uint32_t crc = 0;
    uint64_t local = 0;
  };
  const std::string byteorder = "little", version = "3\n";
  std::vector<Entry> entries;
  entries.push_back({name_ + "/data.pkl", pickle.data(), pickle.size()});
  entries.push_back({name_ + "/byteorder", byteorder.data(), byteorder.size()});
  for (size_t i = 0; i < storages_.size(); ++i)
    entries.push_back({name_ + "/data/" + std::to_string(i),
                       static_cast<const char*>(storages_[i].data), storages_[i].bytes});
  entries.push_back({name_ + "/version", version.data(), version.size()});
  DSCORE_ASSIGN_OR_RETURN(DurableFile file, DurableFile::create(path));
  for (Entry& e : entries) {
    e.crc = crc32_update(0, e.data, e.bytes);
    e.local = file.size();
    // A local zip64 field only where the sizes need it; padding (id 0x4246)
    // puts the data on a 64-byte boundary, as PyTorch's writer does.
    const bool big = e.bytes >= kMax32;
    const uint64_t fixed = 30 + e.name.size() + (big ? 20 : 0) + 4;
    const uint64_t pad = (64 - (e.local + fixed) % 64) % 64;
    std::string header;
    put(header, 0x04034b50, 4);
    put(header, big ? 45 : 20, 2);  // version needed (4.5: zip64)
    put(header, 0, 2);              // flags
    put(header, 0, 2);              // stored
    put(header, 0, 4);              // time, date
    put(header, e.crc, 4);
    put(header, big ? kMax32 : e.bytes, 4);
    put(header, big ? kMax32 : e.bytes, 4);
    put(header, e.name.size(), 2);
    put(header, (big ? 20 : 0) + 4 + pad, 2);
    header += e.name;
    if (big) {
      put(header, 1, 2);
      put(header, 16, 2);
      put(header, e.bytes, 8);
      put(header, e.bytes, 8);
    }
    put(header, 0x4246, 2);
    put(header, pad, 2);
    header.append(pad, 'Z');
    DSCORE_RETURN_IF_ERROR(file.write(header.data(), header.size()));
    DSCORE_RETURN_IF_ERROR(file.write(e.data, e.bytes));
  }
  // The central directory: every entry's sizes and offset in a zip64 field.
  const uint64_t directory_offset = file.size();
  std::string directory;
  for (const Entry& e : entries) {
    put(directory, 0x02014b50, 4);
    put(directory, 45, 2);  // version made by
    put(directory, 45, 2);  // version needed
    put(directory, 0, 2);
    put(directory, 0, 2);
    put(directory, 0, 4);
    put(directory, e.crc, 4);
    put(directory, kMax32, 4);
    put(directory, kMax32, 4);
    put(directory, e.name.size(), 2);
    put(directory, 28, 2);  // extra: the zip64 field
    put(directory, 0, 2);   // comment
    put(directory, 0, 2);   // disk
    put(directory, 0, 2);   // internal attributes
    put(directory, 0, 4);   // external attributes
    put(directory, kMax32, 4);
    directory += e.name;
    put(directory, 1, 2);
    put(directory, 24, 2);
    put(directory, e.bytes, 8);
    put(directory, e.bytes, 8);
    put(directory, e.local, 8);
  }
  const uint64_t record_offset = directory_offset + directory.size();
  std::string tail = directory;
  put(tail, 0x06064b50, 4);  // zip64 end of central directory
  put(tail, 44, 8);
  put(tail, 45, 2);
  put(tail, 45, 2);
  put(tail, 0, 4);
  put(tail, 0, 4);
  put(tail, entries.size(), 8);
  put(tail, entries.size(), 8);
  put(tail, directory.size(), 8);
  put(tail, directory_offset, 8);
  put(tail, 0x07064b50, 4);  // its locator
  put(tail, 0, 4);
  put(tail, record_offset, 8);
  put(tail, 1, 4);
  put(tail, 0x06054b50, 4);  // end of central directory: see the zip64 record
  put(tail, 0, 4);
  put(tail, 0xffff, 2);
  put(tail, 0xffff, 2);
  put(tail, kMax32, 4);
  put(tail, kMax32, 4);
  put(tail, 0, 2);
  DSCORE_RETURN_IF_ERROR(file.write(tail.data(), tail.size()));
  return file.commit();
}

}  // namespace dscore::checkpoint
