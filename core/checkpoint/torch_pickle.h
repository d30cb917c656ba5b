// A strict reader of the pickles torch.save writes (data.pkl in its zip
// archive): plain values (None, bools, ints, floats, strings, bytes),
// containers (lists, tuples, dicts, sets), tensors by storage reference,
// and the objects of an allow-list of classes (torch dtypes and sizes,
// OrderedDict, DeepSpeed's few state classes) kept as data: the class name,
// its constructor arguments and its state. Nothing is ever called or
// imported: a pickle that names any other global, or uses an opcode outside
// the subset, is refused with the name, so a crafted file cannot run code.
#pragma once

#include <dscore/plugin.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/base/status.h"

namespace dscore::checkpoint {

// A tensor of a torch.save archive: elements of storage `storage_key`
// (the archive entry <prefix>/data/<key>) from `storage_offset` (in
// elements) with `shape` and `stride`.
struct TorchTensor {
  std::string storage_key;
  dscore_dtype dtype = DSCORE_DTYPE_INVALID;
  std::string dtype_name;  // torch's, e.g. "FloatStorage" or "float32"
  int64_t storage_offset = 0;
  std::vector<int64_t> shape, stride;
  int64_t numel() const;
  bool contiguous() const;  // row-major without gaps
};

class PickleValue;
using PickleRef = std::shared_ptr<PickleValue>;

class PickleValue {
 public:
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kBytes,
    kList,
    kTuple,
    kSet,
    kDict,
    kGlobal,
    kObject,
    kTensor,
    kStorage
  };
  Kind kind = Kind::kNone;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  std::string text;                                   // string, bytes; global/object: class name
  std::vector<PickleRef> items;                       // list, tuple, set; object: arguments
  std::vector<std::pair<PickleRef, PickleRef>> dict;  // dict; object: its state when a dict
  PickleRef state;                                    // object: state set by BUILD
  TorchTensor tensor;                                 // tensor, storage

  bool is(Kind k) const { return kind == k; }
  // Dict (or object state dict) member named `key`; nullptr when absent.
  const PickleValue* get(std::string_view key) const;
  // Dict member keyed by the integer `key`; nullptr when absent.
  const PickleValue* get(int64_t key) const;
  // "a dict", "a tensor [3, 4] float32", "a DynamicLossScaler object" ...: for messages.
  std::string describe() const;
  // Numbers: an int, a bool, a float, or a 0-d tensor is not read here.
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  double number() const { return kind == Kind::kInt ? static_cast<double>(integer) : real; }
};

// The globals a pickle may name (module.name), and what each becomes.
bool pickle_global_allowed(std::string_view qualified_name);

// Parses `bytes` (named `where` in errors). INVALID_ARGUMENT naming the
// global or opcode for what is refused; DATA_LOSS for a truncated or
// malformed pickle.
Result<PickleRef> parse_torch_pickle(std::string_view bytes, const std::string& where);

}  // namespace dscore::checkpoint
