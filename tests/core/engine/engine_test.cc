// Engine behaviour a user notices: DeepSpeed's step()/boundary semantics, gradient accumulation,
// clipping (docs/deepspeed-reference.md#gradient-clipping), the LR schedule timing
// (docs/deepspeed-reference.md#how-the-engine-drives-schedulers: the k-th update uses t = k - 2),
// skipped non-finite steps, monitor x-axis (docs/deepspeed-reference.md#monitors), and clear errors
// when a model misuses the hooks. Driven through dscore::prepare_text/build_engine with a C++ test
// model and the fake_sgd plugin (p -= lr * grad_scale * g).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/data/batch.h"
#include "core/engine/engine_testing.h"
#include "core/engine/initialize.h"
#include "tests/core/engine/quadratic_model.h"

namespace dscore {
namespace {

namespace fs = std::filesystem;
using testing::QuadraticModel;

std::string plugin_paths() {
  return std::string("\"plugins\": {\"paths\": [\"") + DSCORE_BUILD_PLUGIN_DIR + "\", \"" +
         DSCORE_TEST_PLUGIN_DIR + "/fake_sgd\"]}";
}

struct Built {
  std::unique_ptr<Engine> engine;
  QuadraticModel* model = nullptr;
};

// `extra` is spliced into the top-level object.
Built build(const std::string& extra, std::vector<float> initial = {0, 0},
            std::vector<float> target = {3, 4}) {
  const std::string text = "{" + plugin_paths() + ", " + extra + "}";
  InitializeOptions options;
  options.trust_config_plugin_paths = true;  // the build's plugin folder
  options.own_model = true;
  auto setup = prepare_text(text, "engine_test.json", ".", options);
  EXPECT_TRUE(setup.ok()) << setup.status().message();
  EXPECT_TRUE(setup->loaded.ok()) << format_config_errors(setup->loaded);
  auto model = std::make_unique<QuadraticModel>(std::move(initial), std::move(target));
  QuadraticModel* raw = model.get();
  auto engine = build_engine(*setup, std::move(model));
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  return {std::move(*engine), raw};
}

const dscore_batch kEmptyBatch = {sizeof(dscore_batch), 1, 0, nullptr};

void train_step(Engine& e) {
  for (int64_t m = 0; m < e.config().batch.gradient_accumulation_steps; ++m) {
    ASSERT_TRUE(e.forward_backward(kEmptyBatch).ok());
    ASSERT_TRUE(e.step().ok());
  }
}

std::vector<float> params(Engine& e) {
  std::vector<float> out;
  EXPECT_TRUE(EngineTesting::gather_parameters(e, &out).ok());
  return out;
}

const char* kSgd = "\"optimizer\": {\"type\": \"fake_sgd\", \"params\": {\"lr\": 1.0}}";

TEST(Engine, UnclippedSgdStepMovesByTheGradient) {
  Built b = build(std::string("\"gradient_clipping\": 0, \"train_batch_size\": 1, ") + kSgd);
  train_step(*b.engine);
  EXPECT_EQ(params(*b.engine), (std::vector<float>{3, 4}));
  EXPECT_DOUBLE_EQ(b.engine->get_global_grad_norm(), 5.0);
  EXPECT_EQ(b.engine->global_steps(), 1);
  EXPECT_TRUE(b.engine->was_step_applied());
}

TEST(Engine, ClippingScalesByClipOverNormPlusEpsilon) {
  // N = 5, c = 1: combined factor max(1, (5 + 1e-6) / 1)
  // (docs/deepspeed-reference.md#gradient-clipping).
  Built b = build(std::string("\"train_batch_size\": 1, \"gradient_clipping\": 1.0, ") + kSgd);
  train_step(*b.engine);
  const double factor = 1.0 / (5.0 + 1e-6);
  std::vector<float> p = params(*b.engine);
  EXPECT_FLOAT_EQ(p[0], static_cast<float>(3 * factor));
  EXPECT_FLOAT_EQ(p[1], static_cast<float>(4 * factor));
  EXPECT_DOUBLE_EQ(b.engine->get_global_grad_norm(), 5.0);  // reported before clipping
}

TEST(Engine, ClippingInactiveBelowThreshold) {
  Built b = build(std::string("\"train_batch_size\": 1, \"gradient_clipping\": 10.0, ") + kSgd);
  train_step(*b.engine);
  EXPECT_EQ(params(*b.engine), (std::vector<float>{3, 4}));
}

// DSCORE_VIEWS_STREAM_ORDERED is for a model on the hooks' stream: where
// there is none (the CPU device, on whose streams nothing of the model's
// runs) the engine still hands out views that are ready, so a model that
// asks anyway trains as one that does not. Stage 3 with every parameter
// gathered, on the CPU device's asynchronous streams.
TEST(Engine, AStreamOrderedModelGetsReadyViewsWithoutAStream) {
  const std::string config = std::string(
      "\"gradient_clipping\": 0, \"train_batch_size\": 1, "
      "\"zero_optimization\": {\"stage\": 3, "
      "\"stage3_param_persistence_threshold\": 0}, "
      "\"optimizer\": {\"type\": \"fake_sgd\", \"params\": "
      "{\"lr\": 0.1}}");
  Built plain = build(config);
  Built ordered = build(config);
  ordered.model->view_flags = DSCORE_VIEWS_STREAM_ORDERED;
  // Many steps, each moving the parameters (lr 0.1): without the rule the
  // host's read races the comm stream's gather, and some read comes first.
  for (int step = 0; step < 50; ++step) {
    train_step(*plain.engine);
    train_step(*ordered.engine);
  }
  EXPECT_EQ(params(*ordered.engine), params(*plain.engine));
  // w_k = c (1 - 0.9^k) from 0: c = 4 after 50 steps.
  EXPECT_NEAR(params(*plain.engine)[1], 4.0 * (1.0 - std::pow(0.9, 50)), 1e-4);
}

TEST(Engine, AccumulationUpdatesOnlyAtTheBoundaryWithTheMeanGradient) {
  // gas 4: four micro-batches, each adding (w - c) / 4.
  Built b = build(std::string("\"gradient_clipping\": 0, \"train_batch_size\": 8, "
                              "\"train_micro_batch_size_per_gpu\": 2, ") +
                  kSgd);
  Engine& e = *b.engine;
  ASSERT_EQ(e.config().batch.gradient_accumulation_steps, 4);
  for (int m = 0; m < 3; ++m) {
    EXPECT_FALSE(e.is_gradient_accumulation_boundary());
    ASSERT_TRUE(e.forward_backward(kEmptyBatch).ok());
    ASSERT_TRUE(e.step().ok());
    EXPECT_EQ(params(e), (std::vector<float>{0, 0})) << "updated before the boundary";
    EXPECT_EQ(e.global_steps(), 0);
  }
  EXPECT_TRUE(e.is_gradient_accumulation_boundary());
  ASSERT_TRUE(e.forward_backward(kEmptyBatch).ok());
  ASSERT_TRUE(e.step().ok());
  EXPECT_EQ(params(e), (std::vector<float>{3, 4}));
  EXPECT_EQ(e.micro_steps(), 4);
  EXPECT_EQ(e.global_steps(), 1);
  EXPECT_EQ(e.global_samples(), 8);
  EXPECT_DOUBLE_EQ(e.last_loss(), 12.5);  // mean micro-batch loss 0.5 * 25
}

TEST(Engine, WarmupScheduleFirstTwoUpdatesUseTheMinimumLr) {
  // WarmupLR linear 0 -> 1 over 4 steps: lr(t) = t / 4; the constructor applies t = -1 (min).
  // Update k uses t = k - 2 (docs/deepspeed-reference.md#how-the-engine-drives-schedulers).
  Built b = build(std::string("\"gradient_clipping\": 0, \"train_batch_size\": 1, ") + kSgd +
                  ", \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0, "
                  "\"warmup_max_lr\": 1.0, \"warmup_num_steps\": 4, \"warmup_type\": \"linear\"}}");
  Engine& e = *b.engine;
  EXPECT_EQ(e.get_lr(), std::vector<double>{0.0});
  train_step(e);  // lr 0
  EXPECT_EQ(params(e), (std::vector<float>{0, 0}));
  EXPECT_EQ(e.get_lr(), std::vector<double>{0.0});  // t = 0
  train_step(e);                                    // lr 0
  EXPECT_EQ(params(e), (std::vector<float>{0, 0}));
  EXPECT_EQ(e.get_lr(), std::vector<double>{0.25});  // t = 1
  train_step(e);                                     // lr 0.25: w += 0.25 * (c - w)
  EXPECT_EQ(params(e), (std::vector<float>{0.75f, 1.0f}));
  EXPECT_EQ(e.get_lr(), std::vector<double>{0.5});
}

TEST(Engine, NonFiniteGradientSkipsTheUpdateAndTheSchedule) {
  Built b = build(std::string("\"train_batch_size\": 1, ") + kSgd +
                  ", \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0, "
                  "\"warmup_max_lr\": 1.0, \"warmup_num_steps\": 4, \"warmup_type\": \"linear\"}}");
  Engine& e = *b.engine;
  b.model->poison_gradients = true;
  train_step(e);
  EXPECT_FALSE(e.was_step_applied());
  EXPECT_EQ(e.skipped_steps(), 1);
  EXPECT_EQ(e.global_steps(), 1);  // counters advance as in DeepSpeed's overflow skip
  EXPECT_EQ(e.global_samples(), 1);
  EXPECT_EQ(e.get_lr(), std::vector<double>{0.0});  // schedule did not advance (t = -1)
  EXPECT_EQ(params(e), (std::vector<float>{0, 0}));
  // The poisoned gradient is discarded: the next clean step is unaffected.
  b.model->poison_gradients = false;
  train_step(e);
  EXPECT_TRUE(e.was_step_applied());
  EXPECT_EQ(e.get_lr(), std::vector<double>{0.0});  // t = 0 after the first applied update
}

TEST(Engine, ModelThatKeepsALayerAcquiredGetsAClearError) {
  Built b = build(std::string("\"train_batch_size\": 1, ") + kSgd);
  b.model->forget_release = true;
  auto loss = b.engine->forward_backward(kEmptyBatch);
  ASSERT_FALSE(loss.ok());
  EXPECT_NE(loss.status().message().find("test model 'quadratic'"), std::string::npos);
  EXPECT_NE(loss.status().message().find("layer 0 still acquired"), std::string::npos)
      << loss.status().message();
}

TEST(Engine, AcquireOfAMissingLayerNamesTheLayerCount) {
  Built b = build(std::string("\"train_batch_size\": 1, ") + kSgd);
  b.model->acquire_out_of_range = true;
  auto loss = b.engine->forward_backward(kEmptyBatch);
  ASSERT_FALSE(loss.ok());
  EXPECT_NE(loss.status().message().find("acquire(7): the model has only 1 layers"),
            std::string::npos)
      << loss.status().message();
}

TEST(Engine, UnsupportedOffloadIsRefusedWithTheFix) {
  // Optimizer offload needs a partitioned optimizer state (stage >= 1);
  // parameters on NVMe are not built yet.
  for (const std::string zero :
       {R"({"stage": 0, "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp"}})",
        R"({"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/tmp"}})"}) {
    const std::string text = "{" + plugin_paths() + ", \"train_batch_size\": 1, " + kSgd +
                             ", \"zero_optimization\": " + zero + "}";
    InitializeOptions options;
    options.trust_config_plugin_paths = true;  // the build's plugin folder
    options.own_model = true;
    auto setup = prepare_text(text, "t.json", ".", options);
    ASSERT_TRUE(setup.ok() && setup->loaded.ok()) << format_config_errors(setup->loaded);
    auto engine = build_engine(
        *setup, std::make_unique<QuadraticModel>(std::vector<float>{0}, std::vector<float>{1}));
    ASSERT_FALSE(engine.ok()) << zero;
    // Stage 0 is a config error (plan.h offload_plan_errors); NVMe
    // parameters are a feature not built yet.
    EXPECT_EQ(engine.status().code(), zero.find("stage\": 0") != std::string::npos
                                          ? DSCORE_INVALID_ARGUMENT
                                          : DSCORE_UNIMPLEMENTED)
        << zero;
    EXPECT_NE(engine.status().message().find("\"device\""), std::string::npos)
        << engine.status().message();
  }
}

std::vector<std::string> read_lines(const fs::path& file) {
  std::ifstream in(file);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  return lines;
}

TEST(Engine, MonitorEventsUseDeepSpeedTagsAndXAxis) {
  const fs::path dir =
      fs::temp_directory_path() / ("dscore_engine_monitor_" + std::to_string(getpid()));
  fs::remove_all(dir);
  {
    Built b =
        build(std::string("\"train_batch_size\": 4, \"train_micro_batch_size_per_gpu\": 2, ") +
              kSgd + ", \"csv_monitor\": {\"enabled\": true, \"output_path\": \"" + dir.string() +
              "\", \"job_name\": \"job\"}");
    train_step(*b.engine);
    train_step(*b.engine);
  }
  // train_loss at the pre-increment global_samples, lr at the post-increment one.
  const auto loss = read_lines(dir / "job" / "Train_Samples_train_loss.csv");
  const auto lr = read_lines(dir / "job" / "Train_Samples_lr.csv");
  ASSERT_EQ(loss.size(), 3u);
  EXPECT_EQ(loss[0], "step,train_loss");
  EXPECT_EQ(loss[1], "0,12.5");
  EXPECT_EQ(loss[2].substr(0, 2), "4,");
  ASSERT_EQ(lr.size(), 3u);
  EXPECT_EQ(lr[1], "4,1.0");
  EXPECT_EQ(lr[2], "8,1.0");
  fs::remove_all(dir);
}

// Counts what a StepObserver is told; phases must nest and close.
class RecordingObserver : public StepObserver {
 public:
  void on_phase_begin(StepPhase p) override {
    open[static_cast<size_t>(p)] += 1;
    begun[static_cast<size_t>(p)] += 1;
  }
  void on_phase_end(StepPhase p) override { open[static_cast<size_t>(p)] -= 1; }
  void on_acquired(size_t, dscore_acquire_mode) override { acquired += 1; }
  void on_boundary(const StepReport& r, std::vector<ScalarEvent>* events) override {
    boundaries += 1;
    tags_at_boundary = events->size();
    events->push_back({"Test/observer", 1.0, r.global_samples});
  }
  void on_step_end(const StepReport& r) override { reports.push_back(r); }

  std::array<int, kStepPhaseCount> open{}, begun{};
  int acquired = 0, boundaries = 0;
  size_t tags_at_boundary = 0;
  std::vector<StepReport> reports;
};

TEST(Engine, StepObserversSeeEveryPhaseAndEachBoundaryReport) {
  Built b =
      build(std::string("\"train_batch_size\": 2, \"train_micro_batch_size_per_gpu\": 1, ") + kSgd);
  Engine& e = *b.engine;
  RecordingObserver seen;
  e.add_observer(&seen);
  EngineTesting::reset_timing(e);
  train_step(e);
  train_step(e);
  for (size_t p = 0; p < kStepPhaseCount; ++p)
    EXPECT_EQ(seen.open[p], 0) << "phase " << p << " left open";
  EXPECT_EQ(seen.begun[static_cast<size_t>(StepPhase::kForwardBackward)], 4);
  EXPECT_EQ(seen.begun[static_cast<size_t>(StepPhase::kStepCall)], 4);
  EXPECT_EQ(seen.begun[static_cast<size_t>(StepPhase::kStep)], 4);
  EXPECT_EQ(seen.begun[static_cast<size_t>(StepPhase::kOptimizer)], 2);
  EXPECT_GT(seen.acquired, 0);
  EXPECT_EQ(seen.boundaries, 2);
  EXPECT_EQ(seen.tags_at_boundary, 2u);  // train_loss and lr (no fp16 loss scale)
  ASSERT_EQ(seen.reports.size(), 2u);
  EXPECT_EQ(seen.reports[1].global_steps, e.global_steps());
  EXPECT_EQ(seen.reports[1].global_samples, e.global_samples());
  EXPECT_EQ(seen.reports[1].samples_before, 2);
  EXPECT_EQ(seen.reports[1].loss, e.last_loss());
  EXPECT_EQ(seen.reports[1].grad_norm, e.get_global_grad_norm());
  EXPECT_EQ(seen.reports[1].lr, e.get_lr());
  EXPECT_TRUE(seen.reports[1].applied);
  // The engine's own accounting is an observer too.
  EXPECT_EQ(EngineTesting::timing(e).micro_steps, 4);
  EXPECT_EQ(EngineTesting::timing(e).steps, 2);
  e.remove_observer(&seen);
  train_step(e);
  EXPECT_EQ(seen.reports.size(), 2u);
}

}  // namespace
}  // namespace dscore
