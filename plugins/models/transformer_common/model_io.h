// The checks a token model's entry points make on what the host hands
// them: an init_param slice, and forward()'s logits output. Each failure
// names the model and what was expected.
#pragma once

#include <dscore/model.h>
#include <dscore/cpp/plugin.hpp>

#include <cstdint>
#include <string>

namespace dscore::transformer {

// Parameter `index` of `d`, counted across its layers in order.
inline const dscore_model_param* param_at(const dscore_model_description& d, size_t index) {
  for (size_t l = 0; l < d.layer_count; ++l) {
    if (index < d.layers[l]->param_count) return d.layers[l]->params[index];
    index -= d.layers[l]->param_count;
  }
  throw sdk::Error(DSCORE_OUT_OF_RANGE,
                   "parameter index " + std::to_string(index) + " is past the model's parameters");
}

// init_param(index, offset, count, out) of a model with `param_count`
// parameters, parameter `index` having `numel` elements: returns out's
// fp32 data.
inline float* init_param_output(size_t index, size_t param_count, int64_t numel, int64_t offset,
                                int64_t count, dscore_tensor* out) {
  if (index >= param_count)
    throw sdk::Error(DSCORE_OUT_OF_RANGE,
                     "parameter index " + std::to_string(index) + " out of range");
  if (offset < 0 || count < 0 || offset + count > numel)
    throw sdk::Error(DSCORE_OUT_OF_RANGE, "init_param: slice outside the parameter");
  if (out == nullptr || out->dtype != DSCORE_DTYPE_F32 || out->numel != count ||
      (count > 0 && out->data == nullptr))
    throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                     "init_param: output must be fp32 with count elements");
  return static_cast<float*>(out->data);
}

// forward()'s output: null (no logits wanted) or host fp32 of
// (batch, vocab_size).
inline float* logits_output(dscore_tensor* output, int64_t batch, int64_t vocab_size,
                            const char* model) {
  if (output == nullptr) return nullptr;
  if (output->data == nullptr || output->dtype != DSCORE_DTYPE_F32 ||
      output->numel != batch * vocab_size ||
      (output->device_type != DSCORE_DEVICE_CPU && output->device_type != DSCORE_DEVICE_CUDA_HOST))
    throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                     std::string(model) +
                         " forward: output must be host fp32 of (batch, vocab_size) = (" +
                         std::to_string(batch) + ", " + std::to_string(vocab_size) + ")");
  return static_cast<float*>(output->data);
}

}  // namespace dscore::transformer
