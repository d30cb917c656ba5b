// A pipeline stage as the engine's model (core/pipeline/stage_model.h): its
// layers and parameters in model order with a tied layer's copy, the
// model's initial values by the model's parameter index, the hooks
// translated between the model's layer numbers and the stage's, the tied
// layer's gradients in the stage's own accumulators, and the refusals.
#include "core/pipeline/stage_model.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace dscore::pipeline {
namespace {

// Four layers of one two-element parameter each; the last reads layer 0
// (a tie). Its stage passes acquire the stage's layers, and on the last
// stage layer 0 for the head's gradient (1.0 each), as the gpt does.
class FakeModel final : public Model {
 public:
  explicit FakeModel(bool stages = true, size_t stray_layer = SIZE_MAX,
                     bool declares_stage_memory = true)
      : stages_(stages), stray_(stray_layer), declares_stage_memory_(declares_stage_memory) {
    for (size_t l = 0; l < 4; ++l) names_.push_back("layers." + std::to_string(l) + ".weight");
    for (size_t l = 0; l < 4; ++l)
      params_.push_back(
          {sizeof(dscore_model_param), names_[l].c_str(), 1, &shape_, 2, 0, 0, 0, 0, 0});
    for (size_t l = 0; l < 4; ++l) param_ptrs_.push_back(&params_[l]);
    for (size_t l = 0; l < 4; ++l)
      layers_.push_back({sizeof(dscore_model_layer), names_[l].c_str(), 1, &param_ptrs_[l]});
    for (const dscore_model_layer& layer : layers_) layer_ptrs_.push_back(&layer);
    description_ = {
        sizeof(dscore_model_description), 4, layer_ptrs_.data(), 0, nullptr, 0, 1, &tie_ptr_};
  }
  std::string display_name() const override { return "fake"; }
  const dscore_model_description& description() const override { return description_; }
  Status init_param(size_t index, int64_t offset, int64_t count, float* out) const override {
    for (int64_t k = 0; k < count; ++k) out[k] = static_cast<float>(index * 100 + offset + k);
    return Status::Ok();
  }
  Status forward_backward(const dscore_batch&, const dscore_model_hooks&, double,
                          double*) override {
    return Status::Ok();
  }
  // The whole pass: 1000 bytes a sample. A stage's slot: 10 bytes a layer
  // and sample; shared: 7 bytes on the stage with the head, 3 elsewhere.
  Result<uint64_t> activation_bytes(int64_t micro, bool, dscore_dtype,
                                    dscore_dtype) const override {
    return static_cast<uint64_t>(1000 * micro);
  }
  Result<StageActivations> stage_activation_bytes(const dscore_pipeline_stage& stage, int64_t micro,
                                                  bool, dscore_dtype, dscore_dtype) const override {
    if (!declares_stage_memory_) return unimplemented("no stage memory");
    return StageActivations{
        10 * (stage.end_layer - stage.first_layer) * static_cast<uint64_t>(micro),
        stage.end_layer == 4 ? 7u : 3u};
  }
  bool has_pipeline_stages() const override { return stages_; }
  Result<uint64_t> boundary_bytes(size_t, int64_t, dscore_dtype) const override { return 8; }
  Status stage_forward(const dscore_pipeline_stage& stage, size_t, const dscore_batch&,
                       const dscore_model_hooks& hooks, const void*, void*) override {
    for (size_t l = stage.first_layer; l < stage.end_layer; ++l) {
      dscore_layer_views v{};
      v.struct_size = sizeof v;
      if (hooks.acquire(hooks.ctx, l, DSCORE_ACQUIRE_FORWARD, &v) != DSCORE_OK)
        return invalid_argument("acquire failed");
      hooks.release(hooks.ctx, l);
    }
    if (stray_ != SIZE_MAX) {
      dscore_layer_views v{};
      v.struct_size = sizeof v;
      if (hooks.acquire(hooks.ctx, stray_, DSCORE_ACQUIRE_FORWARD, &v) != DSCORE_OK)
        return invalid_argument("acquire failed");
    }
    return Status::Ok();
  }
  Status stage_backward(const dscore_pipeline_stage& stage, size_t, const dscore_batch&,
                        const dscore_model_hooks& hooks, double, const void*, void*,
                        double*) override {
    const auto add = [&](size_t layer, float value, bool ready) {
      dscore_layer_views v{};
      v.struct_size = sizeof v;
      if (hooks.acquire(hooks.ctx, layer, DSCORE_ACQUIRE_BACKWARD, &v) != DSCORE_OK) return;
      for (size_t p = 0; p < v.count; ++p)
        for (int64_t k = 0; k < v.grads[p]->numel; ++k)
          static_cast<float*>(v.grads[p]->data)[k] += value;
      if (ready) hooks.grads_ready(hooks.ctx, layer);
      hooks.release(hooks.ctx, layer);
    };
    if (stage.end_layer == 4) add(0, 1.0f, stage.first_layer > 0);  // the head
    for (size_t l = stage.end_layer; l-- > stage.first_layer;) add(l, 10.0f + l, true);
    return Status::Ok();
  }

 private:
  bool stages_;
  size_t stray_;
  bool declares_stage_memory_;
  int64_t shape_ = 2;
  std::vector<std::string> names_;
  std::vector<dscore_model_param> params_;
  std::vector<const dscore_model_param*> param_ptrs_;
  std::vector<dscore_model_layer> layers_;
  std::vector<const dscore_model_layer*> layer_ptrs_;
  dscore_layer_tie tie_{sizeof(dscore_layer_tie), 0, 3};
  const dscore_layer_tie* tie_ptr_ = &tie_;
  dscore_model_description description_{};
};

// The engine's side of the hooks: one fp32 gradient per local layer, and
// what was acquired and reported ready, by local layer.
struct EngineSide {
  explicit EngineSide(size_t layers) : grads(layers, std::vector<float>(2, 0.0f)) {
    for (size_t l = 0; l < layers; ++l) {
      tensors.push_back({});
      tensors[l].struct_size = sizeof(dscore_tensor);
      tensors[l].data = grads[l].data();
      tensors[l].dtype = DSCORE_DTYPE_F32;
      tensors[l].device_type = DSCORE_DEVICE_CPU;
      tensors[l].numel = 2;
    }
    for (dscore_tensor& t : tensors) pointers.push_back(&t);
  }
  dscore_model_hooks hooks() {
    dscore_model_hooks h{};
    h.struct_size = sizeof h;
    h.ctx = this;
    h.acquire = [](void* ctx, size_t layer, dscore_acquire_mode mode,
                   dscore_layer_views* out) -> dscore_status {
      auto* self = static_cast<EngineSide*>(ctx);
      self->acquired.push_back(layer);
      out->count = 1;
      out->params = nullptr;
      out->grads = mode == DSCORE_ACQUIRE_BACKWARD ? &self->pointers[layer] : nullptr;
      return DSCORE_OK;
    };
    h.release = [](void*, size_t) -> dscore_status { return DSCORE_OK; };
    h.grads_ready = [](void* ctx, size_t layer) -> dscore_status {
      static_cast<EngineSide*>(ctx)->ready.push_back(layer);
      return DSCORE_OK;
    };
    return h;
  }
  std::vector<std::vector<float>> grads;
  std::vector<dscore_tensor> tensors;
  std::vector<dscore_tensor*> pointers;
  std::vector<size_t> acquired, ready;
};

dscore_batch no_batch() { return {sizeof(dscore_batch), 1, 0, nullptr}; }

TEST(StageModel, HoldsItsLayersAndACopyOfTheTiedLayerInModelOrder) {
  auto last = StageModel::create(std::make_unique<FakeModel>(), {0, 2, 4}, 1);
  ASSERT_TRUE(last.ok()) << last.status().message();
  const dscore_model_description& d = (*last)->description();
  ASSERT_EQ(d.layer_count, 3u);  // the copy of layer 0, then layers 2 and 3
  EXPECT_STREQ(d.layers[0]->name, "layers.0.weight");
  EXPECT_STREQ(d.layers[1]->name, "layers.2.weight");
  EXPECT_EQ((*last)->global_layer(2), 3u);
  EXPECT_EQ((*last)->tie_copies(), (std::vector<size_t>{0}));
  EXPECT_EQ((*last)->tied_layers(), (std::vector<size_t>{0}));
  EXPECT_TRUE((*last)->is_last());
  EXPECT_FALSE((*last)->is_first());
  // Parameters keep the model's initial values: local 1 is the model's 2.
  std::vector<float> values(2);
  ASSERT_TRUE((*last)->init_param(1, 0, 2, values.data()).ok());
  EXPECT_EQ(values, (std::vector<float>{200.0f, 201.0f}));
  EXPECT_NE((*last)->display_name().find("pipeline stage 1 of 2: layers 2-3"), std::string::npos);

  auto first = StageModel::create(std::make_unique<FakeModel>(), {0, 2, 4}, 0);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ((*first)->description().layer_count, 2u);
  EXPECT_TRUE((*first)->tie_copies().empty());
  EXPECT_EQ((*first)->tied_layers(), (std::vector<size_t>{0}));  // the owner itself
}

// The interleaved schedule's stages: 2 stages of 2 chunks over the 4
// layers, stage s holding virtual stages s and s + 2. The tie joins stage
// 0 (layer 0) and stage 1 (layer 3), which holds a copy of layer 0; a chunk
// the stage does not hold is refused.
TEST(StageModel, InterleavedStagesHoldTheirChunks) {
  auto second = StageModel::create(std::make_unique<FakeModel>(), {0, 1, 2, 3, 4}, 1, 2);
  ASSERT_TRUE(second.ok()) << second.status().message();
  ASSERT_EQ((*second)->chunk_count(), 2);
  EXPECT_EQ((*second)->chunk(0).first_layer, 1u);
  EXPECT_EQ((*second)->chunk(1).first_layer, 3u);
  EXPECT_FALSE((*second)->is_last(0));
  EXPECT_TRUE((*second)->is_last(1));
  EXPECT_EQ((*second)->description().layer_count, 3u);  // the copy of 0, then 1 and 3
  EXPECT_EQ((*second)->tie_copies(), (std::vector<size_t>{0}));
  EXPECT_NE((*second)->display_name().find("layers 1-1, 3-3"), std::string::npos);
  auto tied = tied_stages(FakeModel().description(), {0, 1, 2, 3, 4}, 2);
  ASSERT_TRUE(tied.ok());
  EXPECT_EQ(*tied, (std::optional<std::pair<int, int>>{{0, 1}}));
  dscore_pipeline_stage other{sizeof(dscore_pipeline_stage), 0, 1};
  EngineSide engine(3);
  const Status wrong =
      (*second)->stage_forward(other, 0, no_batch(), engine.hooks(), nullptr, nullptr);
  EXPECT_NE(wrong.message().find("has no chunk of layers 0-0"), std::string::npos)
      << wrong.message();
  EXPECT_FALSE(StageModel::create(std::make_unique<FakeModel>(), {0, 1, 2, 4}, 0, 2).ok());
}

TEST(StageModel, ATieInsideOneStageIsNoTie) {
  auto whole = StageModel::create(std::make_unique<FakeModel>(), {0, 4}, 0);
  ASSERT_TRUE(whole.ok());
  EXPECT_TRUE((*whole)->tied_layers().empty());
  EXPECT_EQ((*whole)->description().layer_count, 4u);
}

TEST(StageModel, TranslatesHooksAndKeepsTiedGradientsInItsOwnAccumulators) {
  auto stage = StageModel::create(std::make_unique<FakeModel>(), {0, 2, 4}, 1);
  ASSERT_TRUE(stage.ok());
  EngineSide engine(3);
  const dscore_model_hooks hooks = engine.hooks();
  const dscore_batch batch = no_batch();
  ASSERT_TRUE((*stage)->stage_forward((*stage)->chunk(0), 0, batch, hooks, nullptr, nullptr).ok());
  EXPECT_EQ(engine.acquired, (std::vector<size_t>{1, 2}));  // the model's layers 2 and 3
  engine.acquired.clear();
  (*stage)->hold_tied_grads(true);
  ASSERT_TRUE(
      (*stage)
          ->stage_backward((*stage)->chunk(0), 0, batch, hooks, 1.0, nullptr, nullptr, nullptr)
          .ok());
  EXPECT_EQ(engine.acquired, (std::vector<size_t>{0, 2, 1}));
  // The copy's grads_ready is held back; the others pass.
  EXPECT_EQ(engine.ready, (std::vector<size_t>{2, 1}));
  // The head's gradient went to the stage's accumulator, not the engine's view.
  EXPECT_EQ(engine.grads[0], (std::vector<float>{0.0f, 0.0f}));
  const std::vector<dscore_tensor*> tied = (*stage)->tied_grads(0);
  ASSERT_EQ(tied.size(), 1u);
  EXPECT_EQ(static_cast<float*>(tied[0]->data)[1], 1.0f);
  EXPECT_EQ(engine.grads[2], (std::vector<float>{13.0f, 13.0f}));
  // Not held: grads_ready passes; the accumulator adds up until zeroed.
  (*stage)->hold_tied_grads(false);
  ASSERT_TRUE(
      (*stage)
          ->stage_backward((*stage)->chunk(0), 0, batch, hooks, 1.0, nullptr, nullptr, nullptr)
          .ok());
  EXPECT_EQ(engine.ready.at(2), 0u);
  EXPECT_EQ(static_cast<float*>(tied[0]->data)[0], 2.0f);
  (*stage)->zero_tied_grads();
  EXPECT_EQ(static_cast<float*>(tied[0]->data)[0], 0.0f);
}

TEST(StageModel, AModelReachingALayerTheStageDoesNotHoldIsNamed) {
  auto stage = StageModel::create(std::make_unique<FakeModel>(true, 1), {0, 2, 4}, 1);
  ASSERT_TRUE(stage.ok());
  EngineSide engine(3);
  const Status status =
      (*stage)->stage_forward((*stage)->chunk(0), 0, no_batch(), engine.hooks(), nullptr, nullptr);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("acquired layer 1, which pipeline stage 1 does not hold"),
            std::string::npos)
      << status.message();
}

TEST(StageModel, RefusesAModelWithoutStagesAndTheWholeModelsCalls) {
  auto none = StageModel::create(std::make_unique<FakeModel>(false), {0, 2, 4}, 0);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("cannot be cut into pipeline stages"), std::string::npos);
  auto stage = StageModel::create(std::make_unique<FakeModel>(), {0, 2, 4}, 0);
  ASSERT_TRUE(stage.ok());
  EngineSide engine(2);
  double loss = 0;
  const Status whole = (*stage)->forward_backward(no_batch(), engine.hooks(), 1.0, &loss);
  EXPECT_EQ(whole.code(), DSCORE_FAILED_PRECONDITION);
  auto outside = StageModel::create(std::make_unique<FakeModel>(), {0, 2, 4}, 2);
  EXPECT_FALSE(outside.ok());
}

// A stage's activations: each chunk's slots times one slot's, plus the
// most its chunks share; a model that does not declare a stage's is
// counted at its whole pass per slot.
TEST(StageModel, ActivationsCountEachSlotOfEachChunk) {
  const std::vector<size_t> bounds = {0, 1, 2, 3, 4};  // 2 stages x 2 chunks
  auto stage = StageModel::create(std::make_unique<FakeModel>(), bounds, 1, 2);
  ASSERT_TRUE(stage.ok());
  (*stage)->set_slots({3, 2});  // chunks [1, 2) and [3, 4)
  auto bytes = (*stage)->activation_bytes(2, false, DSCORE_DTYPE_F32, DSCORE_DTYPE_F32);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  EXPECT_EQ(*bytes, 3u * 20 + 2u * 20 + 7);
  const FakeModel silent(true, SIZE_MAX, /*declares_stage_memory=*/false);
  auto upper = stage_activation_bytes(silent, stage_chunks(bounds, 1, 2), {3, 2}, 2, false,
                                      DSCORE_DTYPE_F32, DSCORE_DTYPE_F32);
  ASSERT_TRUE(upper.ok());
  EXPECT_FALSE(upper->declared);
  EXPECT_EQ(upper->bytes, 5u * 2000);
  // The executor's: 2 x buffers x (in + out), and the tied accumulators.
  EXPECT_EQ(executor_bytes(3, {8, 16}, 40), 2u * 3 * 24 + 40);
  EXPECT_EQ(layers_bytes(silent.description(), {0, 3}, DSCORE_DTYPE_BF16), 8u);
}

}  // namespace
}  // namespace dscore::pipeline
