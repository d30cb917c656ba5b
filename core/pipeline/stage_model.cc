#include "core/pipeline/stage_model.h"

#include <algorithm>
#include <set>

#include <dscore/cpp/dtype.hpp>

namespace dscore::pipeline {

namespace {

// The stage that runs `layer`: of the virtual stage whose bounds hold it,
// virtual stage j being stage j % stages (its chunk j / stages).
int stage_of(const std::vector<size_t>& bounds, int stages, size_t layer) {
  const int virtual_stage =
      static_cast<int>(std::upper_bound(bounds.begin(), bounds.end(), layer) - bounds.begin()) - 1;
  return virtual_stage % stages;
}

int stages_or_all(const std::vector<size_t>& bounds, int stages) {
  return stages > 0 ? stages : static_cast<int>(bounds.size()) - 1;
}

}  // namespace

std::string layer_list(const std::vector<dscore_pipeline_stage>& chunks) {
  std::string text;
  for (const dscore_pipeline_stage& c : chunks)
    text += (text.empty() ? "" : ", ") + std::to_string(c.first_layer) + "-" +
            std::to_string(c.end_layer - 1);
  return text;
}

std::string partition_text(const std::vector<size_t>& bounds, int stages) {
  std::string text;
  for (int s = 0; s < stages; ++s)
    text += (s ? "; " : "") + std::string("stage ") + std::to_string(s) + ": layers " +
            layer_list(stage_chunks(bounds, s, stages));
  return text;
}

Result<std::optional<std::pair<int, int>>> tied_stages(const dscore_model_description& whole,
                                                       const std::vector<size_t>& bounds,
                                                       int stages) {
  stages = stages_or_all(bounds, stages);
  std::optional<std::pair<int, int>> joined;
  for (const dscore_layer_tie& tie : layer_ties(whole)) {
    const std::pair<int, int> pair{stage_of(bounds, stages, tie.owner),
                                   stage_of(bounds, stages, tie.reader)};
    if (pair.first == pair.second) continue;
    if (joined && *joined != pair)
      return unimplemented("its tied layers join stages " + std::to_string(joined->first) + "-" +
                           std::to_string(joined->second) + " and " + std::to_string(pair.first) +
                           "-" + std::to_string(pair.second) +
                           "; ties between more than one pair of stages are not built: use a "
                           "partition that puts them on the same two stages");
    joined = pair;
  }
  return joined;
}

StageLayers stage_layers(const dscore_model_description& whole, const std::vector<size_t>& bounds,
                         int stage, int stages) {
  stages = stages_or_all(bounds, stages);
  std::set<size_t> held, tied, copies;
  for (const dscore_pipeline_stage& chunk : stage_chunks(bounds, stage, stages))
    for (size_t l = chunk.first_layer; l < chunk.end_layer; ++l) held.insert(l);
  for (const dscore_layer_tie& tie : layer_ties(whole)) {
    const int owner = stage_of(bounds, stages, tie.owner),
              reader = stage_of(bounds, stages, tie.reader);
    if (owner == reader) continue;  // one stage runs both: nothing to tie
    if (stage == reader) {
      held.insert(tie.owner);
      copies.insert(tie.owner);
    }
    if (stage == reader || stage == owner) tied.insert(tie.owner);
  }
  return {{held.begin(), held.end()}, {tied.begin(), tied.end()}, {copies.begin(), copies.end()}};
}

dscore_model_description stage_description(const dscore_model_description& whole,
                                           const std::vector<size_t>& held,
                                           std::vector<const dscore_model_layer*>* storage) {
  storage->clear();
  for (size_t g : held) storage->push_back(whole.layers[g]);
  dscore_model_description d = whole;
  d.struct_size = sizeof d;
  d.layer_count = storage->size();
  d.layers = storage->data();
  d.tie_count = 0;
  d.ties = nullptr;
  return d;
}

Result<std::unique_ptr<StageModel>> StageModel::create(std::unique_ptr<Model> model,
                                                       const std::vector<size_t>& bounds, int stage,
                                                       int stages) {
  stages = stages_or_all(bounds, stages);
  const dscore_model_description& whole = model->description();
  if (!model->has_pipeline_stages())
    return failed_precondition(model->display_name() +
                               " cannot be cut into pipeline stages (it has no stage_forward, "
                               "stage_backward and boundary_bytes): remove \"pipeline\" from "
                               "the config, or train a model that has them (mlp, gpt, llama)");
  if (bounds.size() < 2 || stages < 1 || (bounds.size() - 1) % static_cast<size_t>(stages) != 0 ||
      stage < 0 || stage >= stages || bounds.back() != whole.layer_count)
    return invalid_argument("pipeline stage " + std::to_string(stage) + " of " +
                            std::to_string(stages) + " does not fit the partition's " +
                            std::to_string(bounds.size() - 1) + " parts");
  std::unique_ptr<StageModel> self(new StageModel());
  self->stage_ = stage;
  self->stages_ = stages;
  self->chunks_ = stage_chunks(bounds, stage, stages);
  self->slots_.assign(self->chunks_.size(), 1);
  const StageLayers layers = stage_layers(whole, bounds, stage, stages);
  self->local_of_global_.assign(whole.layer_count, -1);
  for (size_t g : layers.held) {
    self->local_of_global_[g] = static_cast<long>(self->global_of_local_.size());
    self->global_of_local_.push_back(g);
  }
  self->description_ = stage_description(whole, layers.held, &self->layers_);
  for (size_t g : layers.tied)
    self->tied_.push_back(static_cast<size_t>(self->local_of_global_[g]));
  for (size_t g : layers.copies)
    self->copies_.push_back(static_cast<size_t>(self->local_of_global_[g]));
  self->is_tied_.assign(self->layers_.size(), false);
  for (size_t l : self->tied_) self->is_tied_[l] = true;
  self->tied_grads_.resize(self->layers_.size());
  // The model's parameter index of each of the stage's, in layout order.
  std::vector<size_t> first_param(whole.layer_count + 1, 0);
  for (size_t l = 0; l < whole.layer_count; ++l)
    first_param[l + 1] = first_param[l] + whole.layers[l]->param_count;
  for (size_t g : self->global_of_local_)
    for (size_t p = first_param[g]; p < first_param[g + 1]; ++p) self->global_param_.push_back(p);
  self->whole_ = std::move(model);
  return self;
}

bool StageModel::is_last(int chunk) const {
  return chunks_[static_cast<size_t>(chunk)].end_layer == whole_->description().layer_count;
}

std::string StageModel::display_name() const {
  return whole_->display_name() + " (pipeline stage " + std::to_string(stage_) + " of " +
         std::to_string(stages_) + ": layers " + layer_list(chunks_) + ")";
}

Status StageModel::init_param(size_t param_index, int64_t offset, int64_t count, float* out) const {
  if (param_index >= global_param_.size())
    return invalid_argument("init_param(" + std::to_string(param_index) + "): the stage has " +
                            std::to_string(global_param_.size()) + " parameters");
  return whole_->init_param(global_param_[param_index], offset, count, out);
}

Status StageModel::forward_backward(const dscore_batch&, const dscore_model_hooks&, double,
                                    double*) {
  return failed_precondition(display_name() +
                             " runs through the pipeline schedule (Engine::train_batch), not "
                             "forward_backward");
}

Result<double> StageModel::layer_flops(size_t layer, int64_t batch_size) const {
  if (layer >= global_of_local_.size())
    return invalid_argument("layer_flops(" + std::to_string(layer) + "): the stage has " +
                            std::to_string(global_of_local_.size()) + " layers");
  return whole_->layer_flops(global_of_local_[layer], batch_size);
}

std::vector<dscore_pipeline_stage> stage_chunks(const std::vector<size_t>& bounds, int stage,
                                                int stages) {
  stages = stages_or_all(bounds, stages);
  std::vector<dscore_pipeline_stage> chunks;
  for (size_t v = static_cast<size_t>(stage); v + 1 < bounds.size();
       v += static_cast<size_t>(stages)) {
    dscore_pipeline_stage chunk{};
    chunk.struct_size = sizeof chunk;
    chunk.first_layer = bounds[v];
    chunk.end_layer = bounds[v + 1];
    chunks.push_back(chunk);
  }
  return chunks;
}

Result<StageBoundaryBytes> stage_boundary_bytes(const Model& whole,
                                                const std::vector<dscore_pipeline_stage>& chunks,
                                                int64_t micro_batch, dscore_dtype compute_dtype) {
  StageBoundaryBytes most;
  for (const dscore_pipeline_stage& chunk : chunks) {
    if (chunk.first_layer > 0) {
      DSCORE_ASSIGN_OR_RETURN(const uint64_t in,
                              whole.boundary_bytes(chunk.first_layer, micro_batch, compute_dtype));
      most.in = std::max(most.in, in);
    }
    if (chunk.end_layer < whole.description().layer_count) {
      DSCORE_ASSIGN_OR_RETURN(const uint64_t out,
                              whole.boundary_bytes(chunk.end_layer, micro_batch, compute_dtype));
      most.out = std::max(most.out, out);
    }
  }
  return most;
}

uint64_t executor_bytes(int pipe_buffers, StageBoundaryBytes boundary, uint64_t tied_grad_bytes) {
  return 2 * static_cast<uint64_t>(pipe_buffers) * (boundary.in + boundary.out) + tied_grad_bytes;
}

uint64_t layers_bytes(const dscore_model_description& description,
                      const std::vector<size_t>& layers, dscore_dtype dtype) {
  uint64_t bytes = 0;
  for (size_t l : layers) {
    const dscore_model_layer& layer = *description.layers[l];
    for (size_t p = 0; p < layer.param_count; ++p)
      bytes += static_cast<uint64_t>(layer.params[p]->numel) * sdk::dtype_size(dtype);
  }
  return bytes;
}

Result<StageActivationBytes> stage_activation_bytes(
    const Model& whole, const std::vector<dscore_pipeline_stage>& chunks,
    const std::vector<int>& slots, int64_t micro_batch, bool checkpointing,
    dscore_dtype param_dtype, dscore_dtype grad_dtype) {
  if (slots.size() != chunks.size())
    return internal_error("stage_activation_bytes: " + std::to_string(slots.size()) +
                          " slot counts for " + std::to_string(chunks.size()) + " chunks");
  StageActivationBytes total{0, true};
  uint64_t shared = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    auto bytes = whole.stage_activation_bytes(chunks[c], micro_batch, checkpointing, param_dtype,
                                              grad_dtype);
    if (!bytes.ok() && bytes.status().code() != DSCORE_UNIMPLEMENTED) return bytes.status();
    if (!bytes.ok()) {
      total.declared = false;
      break;
    }
    total.bytes += static_cast<uint64_t>(slots[c]) * bytes->slot_bytes;
    shared = std::max(shared, bytes->shared_bytes);
  }
  if (total.declared) {
    total.bytes += shared;
    return total;
  }
  DSCORE_ASSIGN_OR_RETURN(
      const uint64_t whole_pass,
      whole.activation_bytes(micro_batch, checkpointing, param_dtype, grad_dtype));
  int all_slots = 0;
  for (int n : slots) all_slots += n;
  return StageActivationBytes{whole_pass * static_cast<uint64_t>(all_slots), false};
}

Result<uint64_t> StageModel::activation_bytes(int64_t micro_batch, bool checkpointing,
                                              dscore_dtype param_dtype,
                                              dscore_dtype grad_dtype) const {
  DSCORE_ASSIGN_OR_RETURN(const StageActivationBytes bytes,
                          pipeline::stage_activation_bytes(*whole_, chunks_, slots_, micro_batch,
                                                           checkpointing, param_dtype, grad_dtype));
  return bytes.bytes;
}

Status StageModel::synthetic_batch(uint64_t seed, int64_t first_sample,
                                   const dscore_batch& out) const {
  return whole_->synthetic_batch(seed, first_sample, out);
}

Result<uint64_t> StageModel::boundary_bytes(size_t layer, int64_t micro_batch,
                                            dscore_dtype compute_dtype) const {
  return whole_->boundary_bytes(layer, micro_batch, compute_dtype);
}

// ---------------------------------------------------------------- hooks

dscore_status StageModel::local_of(size_t global, size_t* local) {
  if (global < local_of_global_.size() && local_of_global_[global] >= 0) {
    *local = static_cast<size_t>(local_of_global_[global]);
    return DSCORE_OK;
  }
  if (translation_error_.empty())
    translation_error_ = "the model acquired layer " + std::to_string(global) +
                         ", which pipeline stage " + std::to_string(stage_) +
                         " does not hold (its layers are " + layer_list(chunks_) +
                         "; a layer another reads must be declared as a tie)";
  return DSCORE_INVALID_ARGUMENT;
}

dscore_status StageModel::acquire(void* ctx, size_t layer, dscore_acquire_mode mode,
                                  dscore_layer_views* out) {
  auto* t = static_cast<Translation*>(ctx);
  size_t local = 0;
  if (dscore_status s = t->self->local_of(layer, &local); s != DSCORE_OK) return s;
  const dscore_status s = t->engine->acquire(t->engine->ctx, local, mode, out);
  if (s == DSCORE_OK && mode == DSCORE_ACQUIRE_BACKWARD && t->self->is_tied_[local])
    t->self->lend_tied_grads(local, out);
  return s;
}

void StageModel::lend_tied_grads(size_t local, dscore_layer_views* views) {
  TiedGrads& g = tied_grads_[local];
  if (g.tensors.empty()) {
    g.memory.resize(views->count);
    g.tensors.resize(views->count);
    for (size_t p = 0; p < views->count; ++p) {
      const dscore_tensor& view = *views->grads[p];
      g.memory[p].assign(static_cast<size_t>(view.numel) * sdk::dtype_size(view.dtype),
                         std::byte{0});
      g.tensors[p] = view;
      g.tensors[p].data = g.memory[p].data();
      g.tensors[p].device_type = DSCORE_DEVICE_CPU;
    }
    for (dscore_tensor& tensor : g.tensors) g.pointers.push_back(&tensor);
  }
  views->grads = g.pointers.data();
}

std::vector<dscore_tensor*> StageModel::tied_grads(size_t local) {
  return tied_grads_[local].pointers;
}

void StageModel::zero_tied_grads() {
  for (TiedGrads& g : tied_grads_)
    for (std::vector<std::byte>& m : g.memory) std::fill(m.begin(), m.end(), std::byte{0});
}

dscore_status StageModel::release(void* ctx, size_t layer) {
  auto* t = static_cast<Translation*>(ctx);
  size_t local = 0;
  if (dscore_status s = t->self->local_of(layer, &local); s != DSCORE_OK) return s;
  return t->engine->release(t->engine->ctx, local);
}

dscore_status StageModel::grads_ready(void* ctx, size_t layer) {
  auto* t = static_cast<Translation*>(ctx);
  size_t local = 0;
  if (dscore_status s = t->self->local_of(layer, &local); s != DSCORE_OK) return s;
  if (t->self->hold_tied_grads_ && t->self->is_tied_[local]) return DSCORE_OK;
  return t->engine->grads_ready(t->engine->ctx, local);
}

dscore_model_hooks StageModel::translate(Translation* t) const {
  dscore_model_hooks hooks = *t->engine;
  hooks.ctx = t;
  hooks.acquire = &StageModel::acquire;
  hooks.release = &StageModel::release;
  hooks.grads_ready = &StageModel::grads_ready;
  return hooks;
}

Status StageModel::with_translation_error(Status status) {
  if (translation_error_.empty()) return status;
  Status error = invalid_argument(display_name() + ": " + translation_error_);
  translation_error_.clear();
  return error;
}

Status StageModel::check_chunk(const dscore_pipeline_stage& range) const {
  for (const dscore_pipeline_stage& c : chunks_)
    if (c.first_layer == range.first_layer && c.end_layer == range.end_layer) return Status::Ok();
  return invalid_argument(display_name() + " has no chunk of layers " +
                          std::to_string(range.first_layer) + "-" +
                          std::to_string(range.end_layer - 1));
}

Status StageModel::stage_forward(const dscore_pipeline_stage& range, size_t slot,
                                 const dscore_batch& batch, const dscore_model_hooks& hooks,
                                 const void* input, void* output) {
  DSCORE_RETURN_IF_ERROR(check_chunk(range));
  Translation t{this, &hooks};
  const dscore_model_hooks translated = translate(&t);
  return with_translation_error(
      whole_->stage_forward(range, slot, batch, translated, input, output));
}

Status StageModel::stage_backward(const dscore_pipeline_stage& range, size_t slot,
                                  const dscore_batch& batch, const dscore_model_hooks& hooks,
                                  double loss_scale, const void* output_grad, void* input_grad,
                                  double* loss) {
  DSCORE_RETURN_IF_ERROR(check_chunk(range));
  Translation t{this, &hooks};
  const dscore_model_hooks translated = translate(&t);
  return with_translation_error(whole_->stage_backward(range, slot, batch, translated, loss_scale,
                                                       output_grad, input_grad, loss));
}

}  // namespace dscore::pipeline
