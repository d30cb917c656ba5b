#include "core/zero/zero_strategy.h"

#include <algorithm>

#include "core/tensor/dtype_ops.h"
#include "core/tensor/host_buffer.h"
#include "core/zero/flat_zero.h"
#include "core/zero/sharded_zero.h"

namespace dscore::zero {

std::unique_ptr<ZeroStrategy> make_zero_strategy(const ZeroContext& context) {
  const int stage = context.config->zero.stage;
  if (stage == 3) return std::make_unique<ShardedZero>(context);
  return std::make_unique<FlatZero>(context, stage);
}

Status init_owned(const Model& model, size_t param, int64_t element, int64_t numel, float* master,
                  void* params16, dscore_dtype model_dtype) {
  const bool has_16bit = model_dtype != DSCORE_DTYPE_F32 && params16 != nullptr;
  if (master != nullptr) {
    DSCORE_RETURN_IF_ERROR(model.init_param(param, element, numel, master));
    if (has_16bit) tensor::convert(master, DSCORE_DTYPE_F32, params16, model_dtype, numel);
    return Status::Ok();
  }
  // init_param is a function of (parameter, element): pieces give the same values.
  constexpr int64_t kPiece = 1 << 20;
  std::vector<float> staging(static_cast<size_t>(std::min(numel, kPiece)));
  for (int64_t done = 0; done < numel; done += kPiece) {
    const int64_t n = std::min(kPiece, numel - done);
    DSCORE_RETURN_IF_ERROR(model.init_param(param, element + done, n, staging.data()));
    tensor::convert(staging.data(), DSCORE_DTYPE_F32,
                    tensor::element_at(params16, model_dtype, done), model_dtype, n);
  }
  return Status::Ok();
}

}  // namespace dscore::zero
