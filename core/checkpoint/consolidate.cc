#include "core/checkpoint/consolidate.h"

#include <cctype>
#include <cstdio>
#include <cstring>

#include <dscore/cpp/dtype.hpp>

#include "core/checkpoint/checkpoint_info.h"
#include "core/checkpoint/durable_file.h"
#include "core/config/json.h"

namespace dscore::checkpoint {
namespace {

std::string shard_name(size_t index, size_t count) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}

// The (rows, cols) tensor `in` as its (cols, rows) transpose.
std::vector<float> transposed(const std::vector<float>& in, int64_t rows, int64_t cols) {
  std::vector<float> out(in.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      out[static_cast<size_t>(j * rows + i)] = in[static_cast<size_t>(i * cols + j)];
  return out;
}

// fp32 values as the export's dtype, in `bytes`.
void encode(const std::vector<float>& values, dscore_dtype dtype, std::vector<char>* bytes) {
  const size_t size = sdk::dtype_size(dtype);
  bytes->resize(values.size() * size);
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DSCORE_DTYPE_F32) {
      std::memcpy(bytes->data() + 4 * i, &values[i], 4);
    } else {
      const uint16_t h = dtype == DSCORE_DTYPE_BF16 ? sdk::float_to_bf16(values[i])
                                                    : sdk::float_to_half(values[i]);
      std::memcpy(bytes->data() + 2 * i, &h, 2);
    }
  }
}

}  // namespace

Result<uint64_t> parse_size(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.'))
    ++digits;
  const std::string number = text.substr(0, digits);
  std::string unit = text.substr(digits);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double value = 0;
  try {
    size_t used = 0;
    value = std::stod(number, &used);
    if (used != number.size()) throw std::invalid_argument(number);
  } catch (const std::exception&) {
    return invalid_argument("size \"" + text +
                            "\" is not a number with an optional unit (e.g. 5GB, 500MB)");
  }
  const std::pair<const char*, double> units[] = {
      {"", 1},      {"B", 1},        {"KB", 1e3},        {"MB", 1e6},          {"GB", 1e9},
      {"TB", 1e12}, {"KIB", 1024.0}, {"MIB", 1048576.0}, {"GIB", 1073741824.0}};
  for (const auto& [name, scale] : units)
    if (unit == name) {
      if (value * scale < 1)
        return invalid_argument("size \"" + text + "\" must be at least one byte");
      return static_cast<uint64_t>(value * scale);
    }
  return invalid_argument("size \"" + text +
                          "\" has an unknown unit (use B, KB, MB, GB, TB, KiB, MiB or GiB)");
}

Result<ConsolidateResult> zero_to_fp32(const std::string& dir, const std::string& out_dir,
                                       const ConsolidateOptions& options) {
  if (options.dtype != DSCORE_DTYPE_F32 && options.dtype != DSCORE_DTYPE_BF16 &&
      options.dtype != DSCORE_DTYPE_F16)
    return invalid_argument("the consolidated weights are written as fp32, bf16 or fp16");
  const uint64_t element_bytes = sdk::dtype_size(options.dtype);
  DSCORE_ASSIGN_OR_RETURN(CheckpointInfo info, open_checkpoint(dir, options.tag));
  DSCORE_ASSIGN_OR_RETURN(FragmentSet set, FragmentSet::open(info.path, info.state.optim_files));
  DSCORE_RETURN_IF_ERROR(set.check_complete(kMasterSlot, info.state.params));

  // Each parameter's output name and layout.
  std::vector<OutputTensor> outputs;
  for (const SavedParam& p : info.state.params) {
    OutputTensor o{p.name, false};
    if (options.output) {
      DSCORE_ASSIGN_OR_RETURN(o, options.output(p.name));
    }
    if (o.transpose && p.shape.size() != 2)
      return invalid_argument("parameter " + p.name +
                              " is to be written transposed but is not 2-D");
    outputs.push_back(std::move(o));
  }

  // Shards: parameters in order, a new shard when the next would pass the limit.
  std::vector<std::vector<size_t>> shards(1);
  uint64_t in_shard = 0;
  for (size_t i = 0; i < info.state.params.size(); ++i) {
    const uint64_t bytes = static_cast<uint64_t>(info.state.params[i].numel) * element_bytes;
    if (!shards.back().empty() && in_shard + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += bytes;
  }
  DSCORE_RETURN_IF_ERROR(make_folders(out_dir));
  ConsolidateResult result;
  json::Value weight_map = json::Value::object();
  std::vector<float> tensor;
  std::vector<char> bytes;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name =
        shards.size() == 1 ? "model.safetensors" : shard_name(s, shards.size());
    std::vector<TensorSpec> specs;
    for (size_t i : shards[s]) {
      std::vector<int64_t> shape = info.state.params[i].shape;
      if (outputs[i].transpose) std::swap(shape[0], shape[1]);
      specs.push_back({outputs[i].name, options.dtype, std::move(shape)});
    }
    DSCORE_ASSIGN_OR_RETURN(
        SafetensorsWriter writer,
        SafetensorsWriter::create(out_dir + "/" + name, std::move(specs), {{"format", "pt"}}));
    for (size_t i : shards[s]) {
      const SavedParam& p = info.state.params[i];
      tensor.assign(static_cast<size_t>(p.numel), 0.0f);
      tensor.shrink_to_fit();
      DSCORE_RETURN_IF_ERROR(
          set.read(kMasterSlot, p.name, 0, p.numel, 1, DSCORE_DTYPE_F32, tensor.data()));
      if (outputs[i].transpose) tensor = transposed(tensor, p.shape[0], p.shape[1]);
      if (options.dtype == DSCORE_DTYPE_F32) {
        DSCORE_RETURN_IF_ERROR(writer.append(tensor.data(), tensor.size() * sizeof(float)));
      } else {
        encode(tensor, options.dtype, &bytes);
        DSCORE_RETURN_IF_ERROR(writer.append(bytes.data(), bytes.size()));
      }
      weight_map.set(outputs[i].name, json::Value(name));
      result.total_bytes += tensor.size() * element_bytes;
      ++result.tensors;
    }
    DSCORE_RETURN_IF_ERROR(writer.commit());
    result.files.push_back(out_dir + "/" + name);
  }
  if (shards.size() > 1) {
    json::Value index = json::Value::object();
    json::Value metadata = json::Value::object();
    metadata.set("total_size", json::Value(static_cast<int64_t>(result.total_bytes)));
    index.set("metadata", std::move(metadata));
    index.set("weight_map", std::move(weight_map));
    const std::string path = out_dir + "/model.safetensors.index.json";
    DSCORE_RETURN_IF_ERROR(
        write_file_durably(path, json::serialize(index, /*pretty=*/true) + "\n"));
    result.files.push_back(path);
  }
  return result;
}

}  // namespace dscore::checkpoint
