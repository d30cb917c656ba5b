// A torch.save file (PyTorch's zip format) opened for reading: its pickle
// parsed strictly (torch_pickle.h) and its tensors read from their storage
// entries, each checked against its CRC-32 as it streams. What DeepSpeed's
// checkpoint files are (deepspeed_import.h reads them through this).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/checkpoint/torch_pickle.h"
#include "core/checkpoint/zip_archive.h"

namespace dscore::checkpoint {

class TorchFile {
 public:
  // NOT_FOUND for a missing file; DATA_LOSS or INVALID_ARGUMENT naming the
  // file for a damaged archive or a refused pickle.
  static Result<TorchFile> open(const std::string& path);

  const std::string& path() const { return archive_.path(); }
  const PickleValue& root() const { return *root_; }

  // Elements [begin, begin + count) of `tensor` (a contiguous float tensor
  // of fp32, fp16, bf16 or fp64) as fp32 into dst.
  Status read_f32(const TorchTensor& tensor, int64_t begin, int64_t count, float* dst) const;
  // A whole float tensor as fp32.
  Result<std::vector<float>> read_f32(const TorchTensor& tensor) const;
  // A 0-d or 1-element tensor of any float or int dtype, as a double.
  Result<double> read_scalar(const TorchTensor& tensor) const;

 private:
  TorchFile(ZipArchive archive, std::string prefix, PickleRef root)
      : archive_(std::move(archive)), prefix_(std::move(prefix)), root_(std::move(root)) {}
  // The bytes of the storage under `tensor`, read whole and CRC-checked
  // once (DeepSpeed's module weights are views of one flat storage: the
  // last storage read is kept), holding at least `end_element` elements.
  Result<const std::string*> storage(const TorchTensor& tensor, int64_t end_element) const;

  ZipArchive archive_;
  std::string prefix_;  // "<archive name>/"
  PickleRef root_;
  mutable std::string cached_key_;
  mutable std::string cached_bytes_;
};

}  // namespace dscore::checkpoint
