// The flat layout: offsets follow layer order then parameter order, with no
// gaps; layer ranges select each layer's parameters.
#include <gtest/gtest.h>

#include "core/zero/param_layout.h"

namespace dscore {
namespace {

TEST(ParamLayout, OffsetsAreContiguousInLayerOrder) {
  int64_t s0[] = {3, 2}, s1[] = {3}, s2[] = {4};
  dscore_model_param p0{sizeof(dscore_model_param), "a.w", 2, s0, 6, 0, 0, 0, 0, 0};
  dscore_model_param p1{sizeof(dscore_model_param),   "a.b", 1, s1, 3,
                        DSCORE_PARAM_NO_WEIGHT_DECAY, 0,     0, 0,  0};
  dscore_model_param p2{sizeof(dscore_model_param), "b.w", 1, s2, 4, 0, 0, 0, 0, 0};
  const dscore_model_param* l0p[] = {&p0, &p1};
  const dscore_model_param* l1p[] = {&p2};
  dscore_model_layer l0{sizeof(dscore_model_layer), "a", 2, l0p};
  dscore_model_layer l1{sizeof(dscore_model_layer), "b", 1, l1p};
  const dscore_model_layer* layers[] = {&l0, &l1};
  dscore_model_description d{
      sizeof(dscore_model_description), 2, layers, 0, nullptr, 0, 0, nullptr};
  auto layout = ParamLayout::from_description(d);
  ASSERT_TRUE(layout.ok());
  ASSERT_EQ(layout->params().size(), 3u);
  EXPECT_EQ(layout->params()[0].offset, 0);
  EXPECT_EQ(layout->params()[1].offset, 6);
  EXPECT_EQ(layout->params()[2].offset, 9);
  EXPECT_EQ(layout->params()[1].flags, DSCORE_PARAM_NO_WEIGHT_DECAY);
  EXPECT_EQ(layout->params()[0].shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(layout->total_numel(), 13);
  EXPECT_EQ(layout->layer_first(1), 2u);
  EXPECT_EQ(layout->layer_end(0), 2u);
  EXPECT_EQ(layout->layer_end(1), 3u);
}

TEST(ParamLayout, EmptyParameterIsRejectedByName) {
  int64_t s0[] = {0};
  dscore_model_param p0{sizeof(dscore_model_param), "w", 1, s0, 0, 0, 0, 0, 0, 0};
  const dscore_model_param* lp[] = {&p0};
  dscore_model_layer l0{sizeof(dscore_model_layer), "a", 1, lp};
  const dscore_model_layer* layers[] = {&l0};
  dscore_model_description d{
      sizeof(dscore_model_description), 1, layers, 0, nullptr, 0, 0, nullptr};
  auto layout = ParamLayout::from_description(d);
  ASSERT_FALSE(layout.ok());
  EXPECT_NE(layout.status().message().find("'w'"), std::string::npos);
}

}  // namespace
}  // namespace dscore
