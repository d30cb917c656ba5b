#include "core/model/model.h"

namespace dscore {

Status Model::forward(const dscore_batch&, const dscore_model_hooks&, double*, dscore_tensor*) {
  return unimplemented(display_name() + " has no forward-only pass");
}

Result<double> Model::layer_flops(size_t, int64_t) const {
  return unimplemented(display_name() + " does not report its FLOPs");
}

Result<uint64_t> Model::activation_bytes(int64_t, bool, dscore_dtype, dscore_dtype) const {
  return unimplemented(display_name() + " does not declare its activation memory");
}

Status Model::synthetic_batch(uint64_t, int64_t, const dscore_batch&) const {
  return unimplemented(display_name() +
                       " has no synthetic task: set \"data\": {\"type\": \"text\" or \"tokens\", "
                       "\"path\": ...} in the config");
}

}  // namespace dscore
