// Layer partitions against DeepSpeed 0.19.8's own functions
// (deepspeed.runtime.utils.partition_uniform and partition_balanced, whose
// outputs are written below as they printed them), and partition_layers'
// methods and refusals on a described model.
#include "core/pipeline/partition.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dscore::pipeline {
namespace {

using Bounds = std::vector<size_t>;

TEST(PartitionUniform, MatchesDeepSpeed) {
  EXPECT_EQ(partition_uniform(5, 2), (Bounds{0, 3, 5}));
  EXPECT_EQ(partition_uniform(5, 4), (Bounds{0, 2, 3, 4, 5}));
  EXPECT_EQ(partition_uniform(3, 4), (Bounds{0, 1, 2, 3, 3}));
  EXPECT_EQ(partition_uniform(10, 3), (Bounds{0, 4, 7, 10}));
  EXPECT_EQ(partition_uniform(7, 7), (Bounds{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(partition_uniform(12, 5), (Bounds{0, 3, 6, 8, 10, 12}));
}

TEST(PartitionBalanced, MatchesDeepSpeed) {
  EXPECT_EQ(partition_balanced({1, 1, 1, 1}, 2), (Bounds{0, 2, 4}));
  EXPECT_EQ(partition_balanced({100, 10, 10, 10, 10, 100}, 2), (Bounds{0, 3, 6}));
  EXPECT_EQ(partition_balanced({100, 10, 10, 10, 10, 100}, 3), (Bounds{0, 1, 5, 6}));
  EXPECT_EQ(partition_balanced({5, 1, 1, 1, 1, 1, 1, 5}, 4), (Bounds{0, 1, 4, 7, 8}));
  EXPECT_EQ(partition_balanced({0, 1, 1, 1, 0}, 2), (Bounds{0, 3, 5}));
  EXPECT_EQ(partition_balanced({3, 3, 3}, 3), (Bounds{0, 1, 2, 3}));
  EXPECT_EQ(partition_balanced({1, 2, 3, 4, 5, 6, 7, 8, 9}, 3), (Bounds{0, 5, 7, 9}));
  EXPECT_EQ(partition_balanced({8448, 2112, 2112, 2112, 8448}, 2), (Bounds{0, 3, 5}));
}

// Layers named "embed", "block.0".."block.2", "final" with the given
// parameter counts; the final layer reads the embedding (a tie).
class DescribedModel {
 public:
  DescribedModel(const std::vector<int64_t>& numels, bool tied) {
    for (size_t l = 0; l < numels.size(); ++l) {
      shapes_.push_back(numels[l]);
      param_names_.push_back(layer_names_[l] + ".weight");
    }
    for (size_t l = 0; l < numels.size(); ++l) {
      params_.push_back({sizeof(dscore_model_param), param_names_[l].c_str(), 1, &shapes_[l],
                         numels[l], 0, 0, 0, 0, 0});
    }
    for (size_t l = 0; l < numels.size(); ++l) param_ptrs_.push_back(&params_[l]);
    for (size_t l = 0; l < numels.size(); ++l)
      layers_.push_back({sizeof(dscore_model_layer), layer_names_[l].c_str(), 1, &param_ptrs_[l]});
    for (const dscore_model_layer& layer : layers_) layer_ptrs_.push_back(&layer);
    tie_ = {sizeof(dscore_layer_tie), 0, numels.size() - 1};
    tie_ptr_ = &tie_;
    description_ = {
        sizeof(dscore_model_description), layer_ptrs_.size(), layer_ptrs_.data(), 0, nullptr, 0,
        tied ? size_t{1} : size_t{0},     &tie_ptr_};
  }
  const dscore_model_description& description() const { return description_; }

 private:
  const std::vector<std::string> layer_names_ = {"embed", "block.0", "block.1", "block.2", "final"};
  std::vector<int64_t> shapes_;
  std::vector<std::string> param_names_;
  std::vector<dscore_model_param> params_;
  std::vector<const dscore_model_param*> param_ptrs_;
  std::vector<dscore_model_layer> layers_;
  std::vector<const dscore_model_layer*> layer_ptrs_;
  dscore_layer_tie tie_{};
  const dscore_layer_tie* tie_ptr_ = nullptr;
  dscore_model_description description_{};
};

TEST(PartitionLayers, ByParametersCountsATiedCopyOnTheReadersStage) {
  // Untied: 100 | 10 10 10 | 1 balances as [0, 1), [1, 5).
  const DescribedModel untied({100, 10, 10, 10, 1}, false);
  EXPECT_EQ(*partition_layers(untied.description(), 2, "parameters"), (Bounds{0, 1, 5}));
  // Tied, the final layer weighs 1 + 100: [0, 3), [3, 5) balances 120 | 111.
  const DescribedModel tied({100, 10, 10, 10, 1}, true);
  EXPECT_EQ(*partition_layers(tied.description(), 2, "parameters"), (Bounds{0, 3, 5}));
  EXPECT_EQ(*partition_layers(tied.description(), 2, "best"), (Bounds{0, 3, 5}));
}

TEST(PartitionLayers, UniformAndByTypeFollowDeepSpeed) {
  const DescribedModel m({100, 10, 10, 10, 1}, true);
  EXPECT_EQ(*partition_layers(m.description(), 2, "uniform"), (Bounds{0, 3, 5}));
  EXPECT_EQ(*partition_layers(m.description(), 4, "UNIFORM"), (Bounds{0, 2, 3, 4, 5}));
  // The three blocks over three stages, the others where the balance puts them.
  EXPECT_EQ(*partition_layers(m.description(), 3, "type:Block"), (Bounds{0, 2, 3, 5}));
}

TEST(PartitionLayers, RefusesWhatCannotBeCutWithTheReason) {
  const DescribedModel m({100, 10, 10, 10, 1}, false);
  auto too_many = partition_layers(m.description(), 6, "uniform");
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("every stage needs at least one layer"),
            std::string::npos)
      << too_many.status().message();
  auto unknown = partition_layers(m.description(), 2, "profile");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("\"profile\" is not a partition method"),
            std::string::npos);
  auto unmatched = partition_layers(m.description(), 2, "type:attention");
  ASSERT_FALSE(unmatched.ok());
  EXPECT_NE(unmatched.status().message().find("matches none of the model's layer names"),
            std::string::npos);
  auto bad_regex = partition_layers(m.description(), 2, "type:(");
  ASSERT_FALSE(bad_regex.ok());
  EXPECT_NE(bad_regex.status().message().find("is not a regular expression"), std::string::npos);
}

}  // namespace
}  // namespace dscore::pipeline
