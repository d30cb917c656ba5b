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

Result<uint64_t> Model::boundary_bytes(size_t, int64_t, dscore_dtype) const {
  return unimplemented(display_name() + " cannot be cut into pipeline stages");
}

Result<Model::StageActivations> Model::stage_activation_bytes(const dscore_pipeline_stage&, int64_t,
                                                              bool, dscore_dtype,
                                                              dscore_dtype) const {
  return unimplemented(display_name() + " does not declare a pipeline stage's activation memory");
}

Result<dscore_model_collectives> Model::collective_bytes(const dscore_pipeline_stage&, int64_t,
                                                         bool) const {
  return unimplemented(display_name() + " does not declare what its collectives move");
}

Status Model::stage_forward(const dscore_pipeline_stage&, size_t, const dscore_batch&,
                            const dscore_model_hooks&, const void*, void*) {
  return unimplemented(display_name() + " cannot be cut into pipeline stages");
}

Status Model::stage_backward(const dscore_pipeline_stage&, size_t, const dscore_batch&,
                             const dscore_model_hooks&, double, const void*, void*, double*) {
  return unimplemented(display_name() + " cannot be cut into pipeline stages");
}

std::vector<dscore_layer_tie> layer_ties(const dscore_model_description& description) {
  std::vector<dscore_layer_tie> ties;
  if (!DSCORE_HAS_FIELD(&description, dscore_model_description, ties)) return ties;
  for (size_t t = 0; t < description.tie_count; ++t) ties.push_back(*description.ties[t]);
  return ties;
}

Result<std::unique_ptr<Model::DecodeCache>> Model::decode_cache(int64_t, int64_t, dscore_dtype) {
  return unimplemented(display_name() + " has no KV-cached generation");
}
Status Model::decode(DecodeCache&, const dscore_decode_batch&, const dscore_model_hooks&,
                     dscore_tensor*) {
  return unimplemented(display_name() + " has no KV-cached generation");
}
Result<uint64_t> Model::decode_cache_bytes(int64_t, int64_t, dscore_dtype) const {
  return unimplemented(display_name() + " has no KV-cached generation");
}

Status Model::synthetic_batch(uint64_t, int64_t, const dscore_batch&) const {
  return unimplemented(display_name() +
                       " has no synthetic task: set \"data\": {\"type\": \"text\" or \"tokens\", "
                       "\"path\": ...} in the config");
}

}  // namespace dscore
