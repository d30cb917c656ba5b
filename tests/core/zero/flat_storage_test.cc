// The storage ZeRO stages 0-2 share: which flat range a rank owns (all of it
// replicated, its partition otherwise), the owned segments and their
// checkpoint/norm shares, initialisation of exactly the owned elements, and
// grad views pointed into a window of gradient memory.
#include <gtest/gtest.h>

#include <dscore/cpp/dtype.hpp>

#include <vector>

#include "core/zero/flat_storage.h"

namespace dscore::zero {
namespace {

// Two layers: a = {a.w (3x2), a.b (3)}, b = {b.w (4)}: 13 elements, padded
// to 16 for two ranks (partitions [0, 8) and [8, 16)).
class TwoLayers {
 public:
  TwoLayers() {
    const dscore_model_param* l0p[] = {&p_[0], &p_[1]};
    const dscore_model_param* l1p[] = {&p_[2]};
    std::copy(l0p, l0p + 2, l0p_);
    std::copy(l1p, l1p + 1, l1p_);
    layers_[0] = &l0_;
    layers_[1] = &l1_;
    layout_ = ParamLayout::from_description(description_).value();
  }
  const ParamLayout& layout() const { return layout_; }
  const dscore_model_description& description() const { return description_; }

 private:
  int64_t s0_[2] = {3, 2}, s1_[1] = {3}, s2_[1] = {4};
  dscore_model_param p_[3] = {{sizeof(dscore_model_param), "a.w", 2, s0_, 6, 0, 0, 0, 0, 0},
                              {sizeof(dscore_model_param), "a.b", 1, s1_, 3, 0, 0, 0, 0, 0},
                              {sizeof(dscore_model_param), "b.w", 1, s2_, 4, 0, 0, 0, 0, 0}};
  const dscore_model_param* l0p_[2];
  const dscore_model_param* l1p_[1];
  dscore_model_layer l0_{sizeof(dscore_model_layer), "a", 2, l0p_};
  dscore_model_layer l1_{sizeof(dscore_model_layer), "b", 1, l1p_};
  const dscore_model_layer* layers_[2];
  dscore_model_description description_{
      sizeof(dscore_model_description), 2, layers_, 0, nullptr, 0, 0, nullptr};
  ParamLayout layout_;
};

// Element e of parameter p starts as 100 p + e; records what was asked.
class CountingModel : public Model {
 public:
  explicit CountingModel(const dscore_model_description& d) : description_(d) {}
  std::string display_name() const override { return "counting"; }
  const dscore_model_description& description() const override { return description_; }
  Status init_param(size_t param, int64_t offset, int64_t count, float* out) const override {
    asked.push_back({static_cast<int64_t>(param), offset, count});
    for (int64_t i = 0; i < count; ++i) out[i] = static_cast<float>(100 * param + offset + i);
    return Status::Ok();
  }
  Status forward_backward(const dscore_batch&, const dscore_model_hooks&, double,
                          double*) override {
    return unimplemented("not used");
  }
  mutable std::vector<std::vector<int64_t>> asked;

 private:
  const dscore_model_description& description_;
};

bool same(const OwnedSegment& s, size_t param, int64_t offset, int64_t numel, int64_t element) {
  return s.param == param && s.offset == offset && s.numel == numel && s.element == element;
}

TEST(FlatStorage, PartitionedRankOwnsItsPartition) {
  TwoLayers model;
  FlatStorage storage(model.layout(), DSCORE_DTYPE_F32, DSCORE_DTYPE_F32, 1, 2,
                      Ownership::kPartitioned);
  EXPECT_EQ(storage.partition().padded_numel, 16);
  EXPECT_EQ(storage.owned_begin(), 8);
  EXPECT_EQ(storage.owned_numel(), 8);
  ASSERT_EQ(storage.segments().size(), 2u);
  EXPECT_TRUE(same(storage.segments()[0], 1, 0, 1, 2));  // a.b's last element
  EXPECT_TRUE(same(storage.segments()[1], 2, 1, 4, 0));  // all of b.w
  EXPECT_EQ(storage.checkpoint_segments().size(), 2u);
  EXPECT_EQ(storage.norm_range(), std::make_pair(int64_t{0}, int64_t{8}));
  EXPECT_EQ(storage.layer_range(0), std::make_pair(int64_t{0}, int64_t{9}));
  EXPECT_EQ(storage.layer_range(1), std::make_pair(int64_t{9}, int64_t{13}));
}

TEST(FlatStorage, ReplicatedRankOwnsEverythingButCheckpointsAndNormsItsPartition) {
  TwoLayers model;
  FlatStorage storage(model.layout(), DSCORE_DTYPE_F32, DSCORE_DTYPE_F32, 1, 2,
                      Ownership::kReplicated);
  EXPECT_EQ(storage.owned_begin(), 0);
  EXPECT_EQ(storage.owned_numel(), 16);
  ASSERT_EQ(storage.segments().size(), 3u);
  EXPECT_TRUE(same(storage.segments()[0], 0, 0, 6, 0));
  const std::vector<OwnedSegment> mine = storage.checkpoint_segments();
  ASSERT_EQ(mine.size(), 2u);
  EXPECT_TRUE(same(mine[0], 1, 8, 1, 2));
  EXPECT_TRUE(same(mine[1], 2, 9, 4, 0));
  EXPECT_EQ(storage.norm_range(), std::make_pair(int64_t{8}, int64_t{16}));
}

TEST(FlatStorage, InitialisesOnlyTheOwnedElementsInBothPrecisions) {
  TwoLayers layers;
  CountingModel model(layers.description());
  FlatStorage storage(layers.layout(), DSCORE_DTYPE_BF16, DSCORE_DTYPE_F32, 1, 2,
                      Ownership::kPartitioned);
  ASSERT_TRUE(storage.allocate().ok());
  ASSERT_TRUE(storage.initialise_owned(model).ok());
  EXPECT_EQ(model.asked, (std::vector<std::vector<int64_t>>{{1, 2, 1}, {2, 0, 4}}));
  const float* master = storage.owned_master();
  EXPECT_EQ(master[0], 102.0f);
  EXPECT_EQ(master[1], 200.0f);
  EXPECT_EQ(master[4], 203.0f);
  EXPECT_EQ(master[5], 0.0f);  // padding
  const auto* p16 = static_cast<const uint16_t*>(storage.owned_params16());
  EXPECT_EQ(p16[1], sdk::float_to_bf16(200.0f));
  // The model reads b.w from the flat parameters: the owned copy is that memory.
  EXPECT_EQ(storage.param_ptrs(2)[0]->data,
            storage.owned_params16() == nullptr ? nullptr : (void*)(p16 + 1));
  EXPECT_EQ(storage.param_ptrs(2)[0]->dtype, DSCORE_DTYPE_BF16);
  EXPECT_EQ(storage.full_master(), nullptr);  // 16-bit and partitioned: only the owned part is here
}

TEST(FlatStorage, Fp32ModelHasNoSeparateMasterOr16BitCopy) {
  TwoLayers layers;
  CountingModel model(layers.description());
  FlatStorage storage(layers.layout(), DSCORE_DTYPE_F32, DSCORE_DTYPE_F32, 0, 2,
                      Ownership::kPartitioned);
  ASSERT_TRUE(storage.allocate().ok());
  ASSERT_TRUE(storage.initialise_owned(model).ok());
  EXPECT_EQ(storage.owned_params16(), nullptr);
  EXPECT_EQ(static_cast<void*>(storage.owned_master()), storage.params());
  EXPECT_EQ(storage.full_master(), static_cast<const float*>(storage.params()));
  EXPECT_EQ(storage.owned_master()[7], 101.0f);  // a.b element 1
}

TEST(FlatStorage, GradViewsPointIntoAWindowAndStartNull) {
  TwoLayers layers;
  FlatStorage storage(layers.layout(), DSCORE_DTYPE_F32, DSCORE_DTYPE_BF16, 0, 1,
                      Ownership::kReplicated);
  ASSERT_TRUE(storage.allocate().ok());
  EXPECT_EQ(storage.grad_ptrs(0)[0]->data, nullptr);
  EXPECT_EQ(storage.grad_ptrs(0)[0]->numel, 6);
  EXPECT_STREQ(storage.grad_ptrs(1)[0]->name, "a.b");
  uint16_t bucket[8] = {};
  // The bucket's element 0 is flat index 5: a.b (offset 6) starts at element 1.
  storage.point_grads(1, 3, bucket, 5);
  EXPECT_EQ(storage.grad_ptrs(1)[0]->data, bucket + 1);
  EXPECT_EQ(storage.grad_ptrs(2)[0]->data, bucket + 4);
  EXPECT_EQ(storage.grad_ptrs(0)[0]->data, nullptr);
}

}  // namespace
}  // namespace dscore::zero
