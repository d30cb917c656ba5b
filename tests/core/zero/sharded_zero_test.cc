// Tests for core/zero/sharded_zero.cc and its parts (sharded_storage,
// sharded_gathers, sharded_reduce_scatter), driven directly as the engine's
// hooks would, on 2 loopback ranks (threads): a layer's full parameters
// come back from the shards at acquire; gradients reduce-scatter into the
// owners' shards averaged over the ranks; a layer lent twice in one backward
// (a tied embedding) reduces both; the second step prefetches along the
// trace the first recorded; the update drops every gathered layer.
#include "core/zero/sharded_zero.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/config/config.h"
#include "core/config/placement.h"
#include "core/device/cpu_device.h"
#include "tests/core/comm/loopback_ranks.h"

namespace dscore::zero {
namespace {

// Three layers of one parameter each (5, 7 and 3 elements: no world size
// divides them); init_param gives param p's element e the value 100 p + e.
class ThreeLayers : public Model {
 public:
  ThreeLayers() {
    for (size_t p = 0; p < 3; ++p) {
      params_[p] = {
          sizeof(dscore_model_param), kNames[p], 1, &shapes_[p], shapes_[p], 0, 0, 0, 0, 0};
      param_ptrs_[p] = &params_[p];
      layers_[p] = {sizeof(dscore_model_layer), kNames[p], 1, &param_ptrs_[p]};
      layer_ptrs_[p] = &layers_[p];
    }
  }
  std::string display_name() const override { return "three layers"; }
  const dscore_model_description& description() const override { return description_; }
  Status init_param(size_t param, int64_t offset, int64_t count, float* out) const override {
    for (int64_t i = 0; i < count; ++i)
      out[i] = static_cast<float>(100 * static_cast<int64_t>(param) + offset + i);
    return Status::Ok();
  }
  Status forward_backward(const dscore_batch&, const dscore_model_hooks&, double,
                          double*) override {
    return Status::Ok();  // driven by the test itself
  }
  int64_t numel(size_t p) const { return shapes_[p]; }

 private:
  static constexpr const char* kNames[3] = {"a", "b", "c"};
  int64_t shapes_[3] = {5, 7, 3};
  dscore_model_param params_[3];
  const dscore_model_param* param_ptrs_[3];
  dscore_model_layer layers_[3];
  const dscore_model_layer* layer_ptrs_[3];
  dscore_model_description description_{
      sizeof(dscore_model_description), 3, layer_ptrs_, 0, nullptr, 0, 0, nullptr};
};

config::TrainingConfig stage3_config() {
  config::ResolveContext context;
  context.world_size = 2;
  // Nothing persistent, everything prefetched, nothing kept for reuse.
  auto loaded = config::load_config_text(
      R"({"train_batch_size": 2, "zero_optimization": {"stage": 3,
          "stage3_param_persistence_threshold": 0, "stage3_prefetch_bucket_size": 1000000,
          "stage3_max_reuse_distance": 0}})",
      "test.json", context);
  EXPECT_TRUE(loaded.ok());
  return *loaded.config;
}

// One rank's stage 3 over `comm`, with host memory and an asynchronous
// comm stream, as the engine builds it.
struct Rank {
  explicit Rank(comm::Communicator& comm)
      : config(stage3_config()),
        placement(config::make_placement(config)),
        layout(ParamLayout::from_description(model.description()).value()),
        stream(device::make_cpu_stream("comm", device::CpuStreams::kAsynchronous)) {
    ZeroContext ctx;
    ctx.zero = &config.zero;
    ctx.placement = &placement;
    ctx.reduction = plan_reduction(config, comm.world_size());
    ctx.layout = &layout;
    ctx.comm = &comm;
    ctx.stream = stream.get();
    ctx.comm_target = device::ops::Target::cpu();
    ctx.compute_target = device::ops::Target::cpu();
    zero = std::make_unique<ShardedZero>(ctx);
    EXPECT_TRUE(zero->initialise(model).ok());
  }

  // A forward acquire of `layer`: its full values, then released.
  std::vector<float> gathered(size_t layer) {
    dscore_layer_views views{};
    views.struct_size = sizeof views;
    EXPECT_TRUE(zero->acquire(layer, DSCORE_ACQUIRE_FORWARD, nullptr, &views).ok());
    const auto* data = static_cast<const float*>(views.params[0]->data);
    std::vector<float> out(data, data + model.numel(layer));
    EXPECT_TRUE(zero->release(layer).ok());
    return out;
  }

  // A backward acquire of `layer` adding `value` into every gradient element.
  void add_gradients(size_t layer, float value) {
    dscore_layer_views views{};
    views.struct_size = sizeof views;
    ASSERT_TRUE(zero->acquire(layer, DSCORE_ACQUIRE_BACKWARD, nullptr, &views).ok());
    auto* grads = static_cast<float*>(views.grads[0]->data);
    for (int64_t e = 0; e < model.numel(layer); ++e) grads[e] += value;
    ASSERT_TRUE(zero->grads_ready(layer).ok());
    ASSERT_TRUE(zero->release(layer).ok());
  }

  // This rank's reduced gradient of each element it owns, by (param, element).
  std::vector<std::pair<std::pair<size_t, int64_t>, float>> owned_gradients() {
    std::vector<std::pair<std::pair<size_t, int64_t>, float>> out;
    const auto* grads = static_cast<const float*>(zero->owned_grads());
    for (const OwnedSegment& s : zero->owned_segments())
      for (int64_t i = 0; i < s.numel; ++i)
        out.push_back({{s.param, s.element + i}, grads[s.offset + i]});
    return out;
  }

  ThreeLayers model;
  config::TrainingConfig config;
  config::Placement placement;
  ParamLayout layout;
  std::unique_ptr<device::Stream> stream;
  std::unique_ptr<ShardedZero> zero;
};

TEST(ShardedZero, AcquireGathersEveryRanksShards) {
  comm::testing::run_loopback_ranks(2, [](comm::Communicator& comm) {
    Rank rank(comm);
    rank.zero->begin_micro_step(true);
    for (size_t layer = 0; layer < 3; ++layer) {
      const std::vector<float> values = rank.gathered(layer);
      for (int64_t e = 0; e < rank.model.numel(layer); ++e)
        EXPECT_EQ(values[static_cast<size_t>(e)], 100.0f * layer + e) << layer << "." << e;
    }
    ASSERT_TRUE(rank.zero->end_micro_step().ok());
    // Each rank owns about half of every parameter.
    int64_t owned = 0;
    for (const OwnedSegment& s : rank.zero->owned_segments()) owned += s.numel;
    EXPECT_EQ(owned, comm.rank() == 0 ? 3 + 4 + 2 : 2 + 3 + 1);
  });
}

TEST(ShardedZero, GradientsAreAveragedIntoTheOwnersShardsAndATiedLayerCountsTwice) {
  comm::testing::run_loopback_ranks(2, [](comm::Communicator& comm) {
    Rank rank(comm);
    const float mine = comm.rank() == 0 ? 1.0f : 3.0f;  // the ranks' average: 2
    rank.zero->begin_micro_step(true);
    rank.add_gradients(2, mine);
    rank.add_gradients(1, mine);
    rank.add_gradients(0, mine);
    rank.add_gradients(0, 10 * mine);  // layer 0 lent again in the same backward
    ASSERT_TRUE(rank.zero->end_micro_step().ok());
    for (const auto& [where, value] : rank.owned_gradients())
      EXPECT_EQ(value, where.first == 0 ? 22.0f : 2.0f)
          << "param " << where.first << " element " << where.second;
  });
}

TEST(ShardedZero, TheSecondStepPrefetchesAlongTheTraceAndTheUpdateDropsTheLayers) {
  comm::testing::run_loopback_ranks(2, [](comm::Communicator& comm) {
    Rank rank(comm);
    for (int step = 0; step < 2; ++step) {
      rank.zero->begin_micro_step(true);
      dscore_layer_views views{};
      views.struct_size = sizeof views;
      ASSERT_TRUE(rank.zero->acquire(0, DSCORE_ACQUIRE_FORWARD, nullptr, &views).ok());
      // The first step has no trace: only layer 0 is gathered. The second
      // prefetched the other two along the first's trace.
      EXPECT_EQ(rank.zero->live_elements(), step == 0 ? 5 : 5 + 7 + 3) << "step " << step;
      ASSERT_TRUE(rank.zero->release(0).ok());
      rank.gathered(1);
      rank.gathered(2);
      ASSERT_TRUE(rank.zero->end_micro_step().ok());
      ASSERT_TRUE(rank.zero->after_update().ok());
      EXPECT_EQ(rank.zero->live_elements(), 0);
    }
  });
}

}  // namespace
}  // namespace dscore::zero
