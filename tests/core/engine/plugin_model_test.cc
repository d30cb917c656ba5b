// The engine with real plugins end to end (mlp model, adam, synthetic data
// through core/data), via dscore::initialize's pieces: runs are
// deterministic, gradient accumulation gives the same training as one big
// micro-batch (to fp32 summation-order tolerance), and the loss falls.
#include <gtest/gtest.h>

#include <cmath>

#include "core/data/sampler.h"
#include "core/data/source.h"
#include "core/engine/engine_testing.h"
#include "core/engine/initialize.h"

namespace dscore {
namespace {

struct Trace {
  std::vector<double> losses;
  std::vector<float> params;
};

Trace train(int micro, int steps) {
  const std::string text =
      std::string("{\"plugins\": {\"paths\": [\"") + DSCORE_BUILD_PLUGIN_DIR +
      "\"]}, \"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": " +
      std::to_string(micro) +
      ", \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003, \"weight_decay\": 0.01}},"
      " \"gradient_clipping\": 1.0, \"model\": {\"type\": \"mlp\", \"hidden_dim\": 32}, \"seed\": "
      "7}";
  InitializeOptions options;
  options.trust_config_plugin_paths = true;  // the build's plugin folder
  auto setup = prepare_text(text, "plugin_model_test.json", ".", options);
  EXPECT_TRUE(setup.ok() && setup->loaded.ok()) << format_config_errors(setup->loaded);
  auto engine = build_engine(*setup, nullptr);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  Engine& e = **engine;
  const config::TrainingConfig& cfg = e.config();
  auto source = data::make_batch_source(cfg, e.model());
  EXPECT_TRUE(source.ok());
  data::DistributedSampler sampler(cfg.batch, 1, 0);
  data::HostBatch batch(e.model().description(), micro);
  Trace trace;
  for (int s = 0; s < steps; ++s) {
    for (int m = 0; m < cfg.batch.gradient_accumulation_steps; ++m) {
      EXPECT_TRUE((*source)->fill(sampler.micro_batch(s, m), &batch).ok());
      EXPECT_TRUE(e.forward_backward(batch.view()).ok());
      EXPECT_TRUE(e.step().ok());
    }
    trace.losses.push_back(e.last_loss());
  }
  EXPECT_TRUE(EngineTesting::gather_parameters(e, &trace.params).ok());
  return trace;
}

TEST(EngineWithPlugins, RunsAreBitwiseDeterministic) {
  Trace a = train(32, 10), b = train(32, 10);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.params, b.params);
}

TEST(EngineWithPlugins, AccumulationMatchesOneLargeMicroBatch) {
  // Same global batch of 32 as 1 x 32 and 4 x 8: only the fp32 summation
  // order differs. Tolerance: 1e-4 relative on every loss over 30 steps.
  Trace one = train(32, 30), four = train(8, 30);
  ASSERT_EQ(one.losses.size(), four.losses.size());
  for (size_t i = 0; i < one.losses.size(); ++i)
    EXPECT_NEAR(four.losses[i], one.losses[i], 1e-4 * std::abs(one.losses[i])) << "step " << i;
}

TEST(EngineWithPlugins, LossFallsOnTheSyntheticTask) {
  Trace t = train(32, 150);
  EXPECT_LT(t.losses.back(), 0.25 * t.losses.front())
      << "first " << t.losses.front() << " last " << t.losses.back();
}

}  // namespace
}  // namespace dscore
