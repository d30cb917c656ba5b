// The torch.save reader (torch_file.h).
#include "core/checkpoint/torch_file.h"

#include <dscore/cpp/dtype.hpp>

#include <cstring>

#include "core/tensor/dtype_ops.h"

namespace dscore::checkpoint {
namespace {

constexpr uint64_t kMaxPickleBytes = 1ull << 30;

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
  DSCORE_ASSIGN_OR_RETURN(const std::string* bytes, storage(tensor, first + count));
  const char* src = bytes->data() + static_cast<size_t>(first) * sdk::dtype_size(tensor.dtype);
  if (tensor.dtype == DSCORE_DTYPE_F64) {
    for (int64_t i = 0; i < count; ++i) {
      double v;
      std::memcpy(&v, src + 8 * i, 8);
      dst[i] = static_cast<float>(v);
    }
  } else {
    tensor::convert(src, tensor.dtype, dst, DSCORE_DTYPE_F32, count);
  }
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
