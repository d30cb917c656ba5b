// The torch.save reader (torch_file.h).
#include "core/checkpoint/torch_file.h"

#include <dscore/cpp/dtype.hpp>

#include <cstring>

#include "core/tensor/dtype_ops.h"

namespace dscore::checkpoint {
namespace {

constexpr uint64_t kMaxPickleBytes = 1ull << 30;
// Storages up to this size are read whole once and kept (views share them).
constexpr uint64_t kMaxCachedStorage = 64ull << 20;

bool is_float_storage(dscore_dtype d) {
  return d == DSCORE_DTYPE_F32 || d == DSCORE_DTYPE_F16 || d == DSCORE_DTYPE_BF16 ||
         d == DSCORE_DTYPE_F64;
}

}  // namespace

Result<TorchFile> TorchFile::open(const std::string& path) {
  DSCORE_ASSIGN_OR_RETURN(ZipArchive archive, ZipArchive::open(path));
  // torch.save names every entry "<archive name>/...", the pickle "<archive name>/data.pkl".
  const ZipEntry* pickle = nullptr;
  for (const ZipEntry& e : archive.entries()) {
    const size_t slash = e.name.find('/');
    if (slash != std::string::npos && e.name.substr(slash) == "/data.pkl") {
      pickle = &e;
      break;
    }
  }
  if (pickle == nullptr)
    return data_loss(path +
                     ": no <name>/data.pkl entry: not a torch.save file (or one from "
                     "before PyTorch 1.6's zip format; re-save it with a current torch)");
  if (pickle->size > kMaxPickleBytes)
    return data_loss(path + ": its pickle is " + std::to_string(pickle->size) +
                     " bytes, past the 1 GiB a checkpoint's metadata can need");
  std::string prefix = pickle->name.substr(0, pickle->name.size() - std::strlen("data.pkl"));
  if (const ZipEntry* order = archive.find(prefix + "byteorder")) {
    DSCORE_ASSIGN_OR_RETURN(std::string byteorder, archive.read(*order));
    if (byteorder != "little")
      return unimplemented(path + ": saved with byte order '" + byteorder +
                           "'; only little "
                           "endian files are read");
  }
  DSCORE_ASSIGN_OR_RETURN(std::string bytes, archive.read(*pickle));
  DSCORE_ASSIGN_OR_RETURN(PickleRef root, parse_torch_pickle(bytes, path));
  return TorchFile(std::move(archive), std::move(prefix), std::move(root));
}

Result<const std::string*> TorchFile::storage(const TorchTensor& tensor,
                                              int64_t end_element) const {
  if (cached_key_ != tensor.storage_key || cached_key_.empty()) {
    const ZipEntry* entry = archive_.find(prefix_ + "data/" + tensor.storage_key);
    if (entry == nullptr)
      return data_loss(path() + ": the storage " + printable(tensor.storage_key) +
                       " of a tensor is missing from the archive");
    cached_key_.clear();
    DSCORE_ASSIGN_OR_RETURN(cached_bytes_, archive_.read(*entry));
    cached_key_ = tensor.storage_key;
  }
  const uint64_t needed = static_cast<uint64_t>(end_element) * sdk::dtype_size(tensor.dtype);
  if (end_element < 0 || needed > cached_bytes_.size())
    return data_loss(path() + ": storage " + printable(tensor.storage_key) + " has " +
                     std::to_string(cached_bytes_.size()) + " bytes; a tensor needs " +
                     std::to_string(needed));
  return &cached_bytes_;
}

Status TorchFile::read_f32(const TorchTensor& tensor, int64_t begin, int64_t count,
                           float* dst) const {
  if (!is_float_storage(tensor.dtype))
    return invalid_argument(path() + ": a " + tensor.dtype_name +
                            " tensor where floating-point values were expected");
  if (!tensor.contiguous())
    return unimplemented(path() + ": a non-contiguous tensor (strides); save it contiguous");
  if (begin < 0 || count < 0 || begin + count > tensor.numel())
    return invalid_argument(path() + ": elements " + std::to_string(begin) + "+" +
                            std::to_string(count) + " of a tensor of " +
                            std::to_string(tensor.numel()));
  const int64_t first = tensor.storage_offset + begin;
  const size_t width = sdk::dtype_size(tensor.dtype);
  auto convert = [&](const char* src, int64_t n, float* out) {
    if (tensor.dtype == DSCORE_DTYPE_F64) {
      for (int64_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, src + 8 * i, 8);
        out[i] = static_cast<float>(v);
      }
    } else {
      tensor::convert(src, tensor.dtype, out, DSCORE_DTYPE_F32, n);
    }
  };
  const ZipEntry* entry = archive_.find(prefix_ + "data/" + tensor.storage_key);
  if (entry != nullptr && entry->size > kMaxCachedStorage) {
    // A large storage (a rank's flat partition) streams through, converted
    // as it passes (its CRC-32 checked at the end), never held whole.
    const uint64_t from = static_cast<uint64_t>(first) * width;
    const uint64_t to = from + static_cast<uint64_t>(count) * width;
    if (to > entry->size)
      return data_loss(path() + ": storage " + printable(tensor.storage_key) + " has " +
                       std::to_string(entry->size) + " bytes; a tensor needs " +
                       std::to_string(to));
    uint64_t at = 0;
    std::string carry;  // an element split between two chunks
    return archive_.stream(*entry, [&](const char* data, size_t bytes) {
      const uint64_t lo = std::max(at, from), hi = std::min<uint64_t>(at + bytes, to);
      for (uint64_t pos = lo; pos < hi;) {
        const uint64_t element = (pos - from) / width, offset = (pos - from) % width;
        if (offset != 0 || hi - pos < width) {  // a partial element: gather its bytes
          const uint64_t take = std::min<uint64_t>(width - offset, hi - pos);
          carry.append(data + (pos - at), take);
          pos += take;
          if (carry.size() == width) {
            convert(carry.data(), 1, dst + element);
            carry.clear();
          }
          continue;
        }
        const uint64_t whole = (hi - pos) / width;
        convert(data + (pos - at), static_cast<int64_t>(whole), dst + element);
        pos += whole * width;
      }
      at += bytes;
      return Status::Ok();
    });
  }
  DSCORE_ASSIGN_OR_RETURN(const std::string* bytes, storage(tensor, first + count));
  convert(bytes->data() + static_cast<size_t>(first) * width, count, dst);
  return Status::Ok();
}

Result<std::vector<float>> TorchFile::read_f32(const TorchTensor& tensor) const {
  std::vector<float> out(static_cast<size_t>(tensor.numel()));
  DSCORE_RETURN_IF_ERROR(read_f32(tensor, 0, tensor.numel(), out.data()));
  return out;
}

Result<double> TorchFile::read_scalar(const TorchTensor& tensor) const {
  if (tensor.numel() != 1)
    return invalid_argument(path() + ": a tensor of " + std::to_string(tensor.numel()) +
                            " elements where one number was expected");
  if (is_float_storage(tensor.dtype)) {
    float v = 0;
    DSCORE_RETURN_IF_ERROR(read_f32(tensor, 0, 1, &v));
    return static_cast<double>(v);
  }
  DSCORE_ASSIGN_OR_RETURN(const std::string* bytes, storage(tensor, tensor.storage_offset + 1));
  const char* raw =
      bytes->data() + static_cast<size_t>(tensor.storage_offset) * sdk::dtype_size(tensor.dtype);
  switch (tensor.dtype) {
    case DSCORE_DTYPE_I64: {
      int64_t v;
      std::memcpy(&v, raw, 8);
      return static_cast<double>(v);
    }
    case DSCORE_DTYPE_I32: {
      int32_t v;
      std::memcpy(&v, raw, 4);
      return static_cast<double>(v);
    }
    default:
      return invalid_argument(path() + ": a " + tensor.dtype_name +
                              " tensor where a number was expected");
  }
}

}  // namespace dscore::checkpoint
