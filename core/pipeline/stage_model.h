// One pipeline stage of a model, as the engine's Model: the stage's layers
// [first, end) of the whole model's (or, under the interleaved schedule,
// its chunks of layers: virtual stages stage, stage + stages, ...), plus a copy of each tie's owner
// that the stage reads but does not run (model.h dscore_layer_tie: the gpt's embedding on the last
// stage, for its LM head), in model order. Its parameters keep the model's names and initial
// values, so the engine lays out, initialises, updates and names them as it would the whole
// model's. The pipeline executor (core/engine/pipeline_step.cc) runs it a
// micro-batch at a time through stage_forward and stage_backward; the
// hooks it is given speak of the stage's own layers, and the model's calls
// (which speak of the whole model's) are translated to them.
//
// Tied layers: their gradients are summed across the stages holding them
// before the data-parallel reduction. The model adds a tied layer's
// gradients into accumulators of the stage's own (tied_grads: zeroed each
// batch by the executor, summed across the stages, then added into the
// engine's views), as the engine's own views are redirected at the
// accumulation boundary (ZeRO's gradient buckets). At that boundary
// (hold_tied_grads) their grads_ready is held back from the engine; the
// executor sums them and reports them ready itself.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/model/model.h"

namespace dscore::pipeline {

// `bounds` below is a partition into `stages` x chunks virtual stages
// (partition_layers), virtual stage j being chunk j / stages of stage
// j % stages; `stages` 0 means one chunk a stage (bounds.size() - 1).
//
// The layers stage `stage` of the partition `bounds` holds (model indices,
// ascending): its own, and the owner of each tie whose reader it runs while
// the owner is another stage's. tied: every tie owner among them that
// spans stages (the owner's stage's too); copies: those it does not run.
struct StageLayers {
  std::vector<size_t> held, tied, copies;
};
StageLayers stage_layers(const dscore_model_description& whole, const std::vector<size_t>& bounds,
                         int stage, int stages = 0);

// The two stages the model's ties join (the owners', the readers'), none
// when each tie lies within one stage; UNIMPLEMENTED when ties join more
// than one pair of stages (a pipeline has one tie group).
Result<std::optional<std::pair<int, int>>> tied_stages(const dscore_model_description& whole,
                                                       const std::vector<size_t>& bounds,
                                                       int stages = 0);

// The description of those layers (the model's own layer structs, listed
// in `storage`, which must outlive it); no ties.
dscore_model_description stage_description(const dscore_model_description& whole,
                                           const std::vector<size_t>& held,
                                           std::vector<const dscore_model_layer*>* storage);

// The chunks of layers stage `stage` of the partition `bounds` runs, in
// model order.
std::vector<dscore_pipeline_stage> stage_chunks(const std::vector<size_t>& bounds, int stage,
                                                int stages = 0);
// "0-1, 4-5": the chunks' layers, for messages and the plan.
std::string layer_list(const std::vector<dscore_pipeline_stage>& chunks);
// "stage 0: layers 0-1, 4-5; stage 1: layers 2-3, 6-7".
std::string partition_text(const std::vector<size_t>& bounds, int stages);

// The largest boundary tensor (model.h boundary_bytes) the chunks receive
// and send per micro-batch of `micro_batch` samples; 0 where a chunk starts
// or ends the model.
struct StageBoundaryBytes {
  uint64_t in = 0, out = 0;
};
Result<StageBoundaryBytes> stage_boundary_bytes(const Model& whole,
                                                const std::vector<dscore_pipeline_stage>& chunks,
                                                int64_t micro_batch, dscore_dtype compute_dtype);

// A stage's activation memory when chunk c keeps slots[c] activation slots
// (slots_per_chunk of its schedule): each slot's bytes (the model's
// stage_activation_bytes) plus the most a chunk's passes share. A model
// that does not declare it (declared false) is counted at its whole
// activation_bytes for every slot: an upper bound.
struct StageActivationBytes {
  uint64_t bytes = 0;
  bool declared = false;
};
Result<StageActivationBytes> stage_activation_bytes(
    const Model& whole, const std::vector<dscore_pipeline_stage>& chunks,
    const std::vector<int>& slots, int64_t micro_batch, bool checkpointing,
    dscore_dtype param_dtype, dscore_dtype grad_dtype);

// What the pipeline executor keeps for a stage beside the model states and
// the model's activations: per pipe buffer the boundary tensor in and out
// and their gradients (`boundary`), and the tied
// layers' gradient accumulators (`tied_grad_bytes`, StageModel::tied_grads).
uint64_t executor_bytes(int pipe_buffers, StageBoundaryBytes boundary, uint64_t tied_grad_bytes);
// The bytes of `layers`' parameters of `description` in `dtype`.
uint64_t layers_bytes(const dscore_model_description& description,
                      const std::vector<size_t>& layers, dscore_dtype dtype);

class StageModel final : public Model {
 public:
  // Stage `stage` of the stages whose layer bounds are `bounds`
  // (partition_layers). FAILED_PRECONDITION, naming the model, when it
  // cannot be cut into stages.
  static Result<std::unique_ptr<StageModel>> create(std::unique_ptr<Model> model,
                                                    const std::vector<size_t>& bounds, int stage,
                                                    int stages = 0);

  int stage() const { return stage_; }
  int stages() const { return stages_; }
  // The stage's chunks of layers, in model order (one without interleaving).
  const std::vector<dscore_pipeline_stage>& chunks() const { return chunks_; }
  int chunk_count() const { return static_cast<int>(chunks_.size()); }
  const dscore_pipeline_stage& chunk(int c) const { return chunks_[static_cast<size_t>(c)]; }
  bool is_first(int chunk = 0) const {
    return chunks_[static_cast<size_t>(chunk)].first_layer == 0;
  }
  bool is_last(int chunk = 0) const;
  const Model& whole() const { return *whole_; }
  // The activation slots each chunk's schedule uses (slots_per_chunk), for
  // activation_bytes(); one a chunk until set.
  void set_slots(std::vector<int> slots) { slots_ = std::move(slots); }
  // This stage's layers whose gradients are summed with another stage's:
  // each tie's owner, here or as a copy, on the stages that hold it while
  // it spans stages (local indices, ascending).
  const std::vector<size_t>& tied_layers() const { return tied_; }
  // Copies of another stage's layer: their gradients count once, on the
  // owner's stage, in the global norm. Local indices, ascending; they come
  // first in the layout, being earlier layers of the model.
  const std::vector<size_t>& tie_copies() const { return copies_; }
  size_t global_layer(size_t local) const { return global_of_local_[local]; }

  // At the accumulation boundary's backward: hold back grads_ready of the
  // tied layers (the executor reports them after summing).
  void hold_tied_grads(bool hold) { hold_tied_grads_ = hold; }
  // The accumulators of tied layer `local` (one per parameter, in the
  // grads' dtype; made at its first backward acquire, empty before).
  std::vector<dscore_tensor*> tied_grads(size_t local);
  void zero_tied_grads();

  // Model
  std::string display_name() const override;
  const dscore_model_description& description() const override { return description_; }
  Status init_param(size_t param_index, int64_t offset, int64_t count, float* out) const override;
  Status forward_backward(const dscore_batch& batch, const dscore_model_hooks& hooks,
                          double loss_scale, double* loss) override;
  Result<double> layer_flops(size_t layer, int64_t batch_size) const override;
  // The stage's under its schedule (stage_activation_bytes over set_slots).
  Result<uint64_t> activation_bytes(int64_t micro_batch, bool checkpointing,
                                    dscore_dtype param_dtype,
                                    dscore_dtype grad_dtype) const override;
  bool has_synthetic_task() const override { return whole_->has_synthetic_task(); }
  Status synthetic_batch(uint64_t seed, int64_t first_sample,
                         const dscore_batch& out) const override;
  bool has_pipeline_stages() const override { return true; }
  Result<uint64_t> boundary_bytes(size_t layer, int64_t micro_batch,
                                  dscore_dtype compute_dtype) const override;
  // `stage` must be one of this stage's chunks.
  Status stage_forward(const dscore_pipeline_stage& stage, size_t slot, const dscore_batch& batch,
                       const dscore_model_hooks& hooks, const void* input, void* output) override;
  Status stage_backward(const dscore_pipeline_stage& stage, size_t slot, const dscore_batch& batch,
                        const dscore_model_hooks& hooks, double loss_scale, const void* output_grad,
                        void* input_grad, double* loss) override;

 private:
  StageModel() = default;
  // The engine's hooks (local layers) as the whole model's (global layers).
  struct Translation {
    StageModel* self;
    const dscore_model_hooks* engine;
  };
  dscore_model_hooks translate(Translation* t) const;
  static dscore_status acquire(void* ctx, size_t layer, dscore_acquire_mode mode,
                               dscore_layer_views* out);
  static dscore_status release(void* ctx, size_t layer);
  static dscore_status grads_ready(void* ctx, size_t layer);
  dscore_status local_of(size_t global, size_t* local);
  Status check_chunk(const dscore_pipeline_stage& range) const;
  Status with_translation_error(Status status);

  std::unique_ptr<Model> whole_;
  int stage_ = 0;
  int stages_ = 1;
  std::vector<dscore_pipeline_stage> chunks_;
  std::vector<int> slots_;  // per chunk (set_slots)
  std::vector<size_t> global_of_local_;
  std::vector<long> local_of_global_;  // -1: not on this stage
  std::vector<size_t> global_param_;   // local parameter index -> the model's
  std::vector<size_t> tied_, copies_;
  std::vector<bool> is_tied_;  // by local layer
  bool hold_tied_grads_ = false;
  // Per local layer (tied ones only): the accumulators and their views.
  struct TiedGrads {
    std::vector<std::vector<std::byte>> memory;
    std::vector<dscore_tensor> tensors;
    std::vector<dscore_tensor*> pointers;
  };
  std::vector<TiedGrads> tied_grads_;
  void lend_tied_grads(size_t local, dscore_layer_views* views);
  std::string translation_error_;
  std::vector<const dscore_model_layer*> layers_;
  dscore_model_description description_{};
};

}  // namespace dscore::pipeline
