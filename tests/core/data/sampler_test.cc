// The sampler's contract: the micro-batches of all ranks of one optimizer
// step tile that step's global batch exactly, in rank-major order per micro
// step, whatever the world size.
#include <gtest/gtest.h>

#include <set>

#include "core/data/sampler.h"

namespace dscore::data {
namespace {

TEST(DistributedSampler, SliceOfRankOneMicroOneOfStepThree) {
  config::BatchConfig b{16, 4, 2};  // train 16 = micro 4 * gas 2 * world 2
  DistributedSampler rank1(b, 2, 1);
  SampleRange r = rank1.micro_batch(3, 1);
  EXPECT_EQ(r.first, 3 * 16 + 1 * 8 + 4);
  EXPECT_EQ(r.count, 4);
}

TEST(DistributedSampler, RanksAndMicroStepsTileTheGlobalBatch) {
  for (int world : {1, 2, 4}) {
    const int64_t micro = 3, gas = 2;
    config::BatchConfig b{micro * gas * world, micro, gas};
    for (int64_t step = 0; step < 3; ++step) {
      std::set<int64_t> seen;
      for (int rank = 0; rank < world; ++rank) {
        DistributedSampler s(b, world, rank);
        for (int64_t m = 0; m < gas; ++m) {
          SampleRange r = s.micro_batch(step, m);
          for (int64_t i = r.first; i < r.first + r.count; ++i) EXPECT_TRUE(seen.insert(i).second);
        }
      }
      ASSERT_EQ(static_cast<int64_t>(seen.size()), b.train_batch_size);
      EXPECT_EQ(*seen.begin(), step * b.train_batch_size);
      EXPECT_EQ(*seen.rbegin(), (step + 1) * b.train_batch_size - 1);
    }
  }
}

}  // namespace
}  // namespace dscore::data
