// Writing files torch.load reads (PyTorch's zip format), for checkpoints
// DeepSpeed loads: a pickle (protocol 2, as torch.save writes) built value by
// value, and the archive holding it with one entry per tensor storage
// (stored, 64-byte aligned, CRC-32, zip64 records), written durably and
// streamed. The reading side is
// torch_file.h.
#pragma once

#include <dscore/plugin.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace dscore::checkpoint {

// A pickle, appended to value by value; containers are opened and closed
// around their members (a dict's members alternate key, value).
class PickleWriter {
 public:
  PickleWriter& none();
  PickleWriter& boolean(bool v);
  PickleWriter& integer(int64_t v);
  PickleWriter& real(double v);
  PickleWriter& string(const std::string& v);
  PickleWriter& begin_dict();
  PickleWriter& begin_ordered_dict();  // collections.OrderedDict
  PickleWriter& end_dict();
  PickleWriter& begin_list();
  PickleWriter& end_list();
  PickleWriter& begin_tuple();
  PickleWriter& end_tuple();
  // torch.Size(dims).
  PickleWriter& size(const std::vector<int64_t>& dims);
  // A contiguous tensor over storage `key` (elements of `dtype`, from offset 0).
  PickleWriter& tensor(const std::string& key, dscore_dtype dtype,
                       const std::vector<int64_t>& shape, int64_t storage_numel);
  // module.name(*args) for the args pickled between begin_call and end_call
  // (an enum member such as ZeroStageEnum(2)).
  PickleWriter& begin_call(const std::string& module, const std::string& name);
  PickleWriter& end_call();
  // An object of module.name whose fields are the dict pickled between
  // begin_object and end_object (as pickle saves a plain class instance).
  PickleWriter& begin_object(const std::string& module, const std::string& name);
  PickleWriter& end_object();
  // The pickle, with its protocol header and STOP.
  std::string finish() const;

 private:
  void global(const std::string& module, const std::string& name);
  std::string out_;
};

// A torch.save archive named `name` (entries "<name>/..."): the pickle and
// the storages it references by key "0", "1", ... (add_storage returns the
// key; the bytes are not copied and must outlive write()). Written durably,
// streamed, with zip64 records (so past 4 GiB too; readers take them at any
// size, as PyTorch's own writer always adds them).
class TorchSaveWriter {
 public:
  explicit TorchSaveWriter(std::string name) : name_(std::move(name)) {}
  std::string add_storage(const void* data, uint64_t bytes);
  Status write(const std::string& path, const std::string& pickle) const;

 private:
  struct Storage {
    const void* data;
    uint64_t bytes;
  };
  std::string name_;
  std::vector<Storage> storages_;
};

}  // namespace dscore::checkpoint
