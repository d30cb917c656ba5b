// The tuner of `dscore autotune` (core/autotune/tuner.h): the order of each
// tuner_type, the trial budget, early stopping, and the step-time model
// that model_based refits after each trial.
#include "core/autotune/tuner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace dscore::autotune {
namespace {

std::vector<StepFeatures> uniform(size_t n) { return std::vector<StepFeatures>(n); }

// Runs the tuner to the end; `metric_of(i)` is candidate i's measurement
// (nullopt: it failed). Returns the candidates in the order they ran.
template <typename F>
std::vector<size_t> drive(Tuner& tuner, F metric_of) {
  std::vector<size_t> order;
  while (auto i = tuner.next()) {
    order.push_back(*i);
    const std::optional<double> m = metric_of(*i);
    tuner.record(*i, m ? std::optional<double>(1.0 / *m) : std::nullopt, m);
  }
  return order;
}

TEST(AutotuneTuner, GridsearchRunsInOrderUntilTheBudget) {
  Tuner tuner("gridsearch", 1, /*max_trials=*/4, /*early_stopping=*/10, uniform(6),
              Metric::kThroughput, 0);
  // Every trial better than the last: only the budget stops it.
  const auto order = drive(tuner, [](size_t i) { return std::optional<double>(double(i + 1)); });
  EXPECT_EQ(order, std::vector<size_t>({0, 1, 2, 3}));
  EXPECT_EQ(tuner.trials(), 4);
  EXPECT_NE(tuner.stop_reason().find("tuner_num_trials (4)"), std::string::npos);
}

TEST(AutotuneTuner, StopsAfterTrialsWithoutGain) {
  Tuner tuner("gridsearch", 1, 50, /*early_stopping=*/2, uniform(10), Metric::kThroughput, 0);
  const double measured[] = {5, 7, 6, 9, 1, 2, 100, 1, 1, 1};
  const auto order = drive(tuner, [&](size_t i) { return std::optional<double>(measured[i]); });
  // 9 at index 3 is the last gain; 1 and 2 after it end the search.
  EXPECT_EQ(order, std::vector<size_t>({0, 1, 2, 3, 4, 5}));
  EXPECT_NE(tuner.stop_reason().find("2 trials in a row"), std::string::npos);
}

TEST(AutotuneTuner, LatencyIsBetterWhenLower) {
  EXPECT_TRUE(better(Metric::kLatency, 1.0, 2.0));
  EXPECT_FALSE(better(Metric::kThroughput, 1.0, 2.0));
  EXPECT_TRUE(better(Metric::kFlops, 3.0, 2.0));
  Tuner tuner("gridsearch", 1, 50, 1, uniform(4), Metric::kLatency, 0);
  const double seconds[] = {3, 2, 4, 1};
  const auto order = drive(tuner, [&](size_t i) { return std::optional<double>(seconds[i]); });
  EXPECT_EQ(order, std::vector<size_t>({0, 1, 2}));  // 4 after 2 is no gain
}

TEST(AutotuneTuner, FailuresBeforeAnyMeasurementDoNotStopTheSearch) {
  Tuner tuner("gridsearch", 1, 50, /*early_stopping=*/2, uniform(5), Metric::kThroughput, 0);
  const auto order = drive(tuner, [](size_t i) {
    return i < 3 ? std::nullopt : std::optional<double>(1.0);  // three crashes first
  });
  EXPECT_EQ(order.size(), 5u);
  EXPECT_EQ(tuner.stop_reason(), "every candidate ran");
}

TEST(AutotuneTuner, RandomIsASeededPermutation) {
  auto run = [](uint64_t seed) {
    Tuner tuner("random", seed, 50, 100, uniform(20), Metric::kThroughput, 0);
    return drive(tuner, [](size_t) { return std::optional<double>(1.0); });
  };
  const auto a = run(7);
  EXPECT_EQ(a, run(7));
  EXPECT_NE(a, run(8));
  EXPECT_EQ(std::set<size_t>(a.begin(), a.end()).size(), 20u);
  std::vector<size_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(a, sorted);
}

// Candidates whose true step time is 2e-10 s per FLOP plus 5 ms per
// micro-step: the model learns the rates and then predicts the rest.
TEST(AutotuneTuner, ModelBasedLearnsTheStepTime) {
  std::vector<StepFeatures> features;
  for (int micro : {1, 2, 4, 8, 16, 32})
    for (int gas : {1, 2, 4}) {
      StepFeatures f;
      f.flops = 1e8 * micro * gas;
      f.micro_steps = gas;
      f.samples = micro * gas;
      features.push_back(f);
    }
  auto truth = [&](size_t i) { return 2e-10 * features[i].flops + 5e-3 * features[i].micro_steps; };
  StepTimeModel model;
  for (size_t i : {0u, 4u, 9u, 13u, 17u}) model.add_measurement(features[i], truth(i));
  for (size_t i = 0; i < features.size(); ++i)
    EXPECT_NEAR(model.predict_seconds(features[i]) / truth(i), 1.0, 0.15) << i;

  // The tuner: the highest predicted throughput runs first, and the
  // truly best candidate (largest micro, gas 1) is among the first runs.
  Tuner tuner("model_based", 1, 50, 3, features, Metric::kThroughput, 0);
  const auto order = drive(tuner, [&](size_t i) {
    return std::optional<double>(static_cast<double>(features[i].samples) / truth(i));
  });
  size_t best = 0;
  for (size_t i = 0; i < features.size(); ++i)
    if (features[i].samples / truth(i) > features[best].samples / truth(best)) best = i;
  const auto at = std::find(order.begin(), order.end(), best);
  ASSERT_NE(at, order.end());
  EXPECT_LT(at - order.begin(), 4);
  EXPECT_LT(order.size(), features.size());  // it stopped early
  ASSERT_TRUE(tuner.predicted(0).has_value());
  Tuner grid("gridsearch", 1, 50, 3, features, Metric::kThroughput, 0);
  EXPECT_FALSE(grid.predicted(0).has_value());
}

}  // namespace
}  // namespace dscore::autotune
