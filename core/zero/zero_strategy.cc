#include "core/zero/zero_strategy.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>

#include "core/tensor/dtype_ops.h"
#include "core/tensor/host_buffer.h"
#include "core/zero/flat_zero.h"
#include "core/zero/sharded_zero.h"
#include "core/zero/zero_memory.h"

namespace dscore::zero {

std::unique_ptr<ZeroStrategy> make_zero_strategy(const ZeroContext& context) {
  const int stage = context.placement->stage;
  if (stage == 3) return std::make_unique<ShardedZero>(context);
  return std::make_unique<FlatZero>(context, stage);
}

ParamRun buffer_run(const ZeroContext& context, size_t param, int64_t element, int64_t numel,
                    const void* data) {
  if (context.device == nullptr) return {param, element, numel, data};
  const size_t es = sdk::dtype_size(context.model_dtype());
  const char* base = static_cast<const char*>(data);
  return {param, element, numel, nullptr,
          [device = context.device, stream = context.stream, base, es](int64_t first, int64_t count,
                                                                       void* dst) {
            return download(device, stream, dst, base + static_cast<size_t>(first) * es,
                            static_cast<size_t>(count) * es);
          }};
}

Status init_owned(const Model& model, size_t param, int64_t element, int64_t numel, float* master,
                  void* params16, dscore_dtype model_dtype, device::Device* device,
                  device::Stream* stream) {
  const bool has_16bit = model_dtype != DSCORE_DTYPE_F32 && params16 != nullptr;
  const size_t es16 = sdk::dtype_size(model_dtype);
  // init_param is a function of (parameter, element): pieces give the same values.
  constexpr int64_t kPiece = 1 << 20;
  const size_t piece = static_cast<size_t>(std::min(numel, kPiece));
  std::vector<float> values(piece);
  std::vector<char> values16(has_16bit ? piece * es16 : 0);
  for (int64_t done = 0; done < numel; done += kPiece) {
    const int64_t n = std::min(kPiece, numel - done);
    DSCORE_RETURN_IF_ERROR(model.init_param(param, element + done, n, values.data()));
    if (master != nullptr)
      DSCORE_RETURN_IF_ERROR(upload(device, stream, master + done, values.data(),
                                    static_cast<size_t>(n) * sizeof(float)));
    if (has_16bit) {
      tensor::convert(values.data(), DSCORE_DTYPE_F32, values16.data(), model_dtype, n);
      DSCORE_RETURN_IF_ERROR(upload(device, stream, tensor::element_at(params16, model_dtype, done),
                                    values16.data(), static_cast<size_t>(n) * es16));
    }
  }
  return Status::Ok();
}

}  // namespace dscore::zero
