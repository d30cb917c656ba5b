// HostOffloadState (ZeRO-Offload's optimizer state in host memory) on its
// own, on the CPU device's asynchronous streams: what an update walk hands
// the visitor (the gradients of the right elements, from early copies and
// from the step's), what it writes back where the model reads, and its
// failure paths: a visitor's error and a failed reduction stop the walk with
// that error, leave no copy in flight, and the next walk works.
#include "core/owned_state/host_offload_state.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "core/device/cpu_device.h"
#include "tests/core/engine/quadratic_model.h"
#include "tests/core/owned_state/owned_state_checks.h"

namespace dscore {
namespace {

constexpr int64_t kOwned = 10000;  // 3 tiles of 4096
constexpr int64_t kTile = 4096;

class HostOffloadStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto compute = device_.create_stream("compute");
    ASSERT_TRUE(compute.ok());
    compute_ = std::move(*compute);
    for (int64_t i = 0; i < kOwned; ++i) {
      grads_[static_cast<size_t>(i)] = static_cast<float>(i);
      params_[static_cast<size_t>(i)] = 1.0f;
    }
  }

  std::unique_ptr<HostOffloadState> make() {
    HostOffloadOptions o;
    o.side.device = &device_;
    o.side.compute = compute_.get();
    o.side.grads = grads_.data();
    o.side.model_params = params_.data();
    o.tile_elements = kTile;
    auto state = HostOffloadState::create(o, {{"exp_avg", DSCORE_DTYPE_F32, 1}}, {0.0}, kOwned,
                                          params_.data(), model_, {});
    EXPECT_TRUE(state.ok()) << state.status().message();
    return state.ok() ? std::move(*state) : nullptr;
  }

  device::CpuDevice device_{device::CpuStreams::kAsynchronous};
  std::unique_ptr<device::Stream> compute_;
  std::vector<float> grads_ = std::vector<float>(kOwned);   // the "device" gradients
  std::vector<float> params_ = std::vector<float>(kOwned);  // where the model reads (fp32)
  testing::QuadraticModel model_{{0.0f}, {0.0f}};  // unused: fp32 masters come from params_
};

// Each tile sees the gradients of its own elements, whether they came early
// (reported after a reduction's event) or at the step; the master the
// visitor writes reaches the model's parameters.
TEST_F(HostOffloadStateTest, TilesSeeTheirGradientsAndWriteTheModelsParameters) {
  auto state = make();
  ASSERT_NE(state, nullptr);
  state->boundary_micro_step();
  // A "reduction" on the compute stream writes [100, 5000) late; the
  // state must copy it only after the event.
  device::EventPtr reduced = compute_->submit([this] {
    for (int64_t i = 100; i < 5000; ++i) grads_[static_cast<size_t>(i)] = -static_cast<float>(i);
    return Status::Ok();
  });
  state->owned_grads_final({{100, 5000}}, reduced);
  std::vector<int64_t> begins;
  Status s = state->for_each_tile(TileAccess::kUpdate, [&](const StateTile& tile) {
    begins.push_back(tile.begin);
    const float* g = static_cast<const float*>(tile.grads);
    for (int64_t i = tile.begin; i < tile.end; ++i) {
      const float want = i >= 100 && i < 5000 ? -static_cast<float>(i) : static_cast<float>(i);
      if (g[i - tile.begin] != want)
        return internal_error("gradient " + std::to_string(i) + " is " +
                              std::to_string(g[i - tile.begin]));
      tile.master[i - tile.begin] = 2.0f;
    }
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(begins, (std::vector<int64_t>{0, 4096, 8192}));
  for (int64_t i = 0; i < kOwned; ++i) ASSERT_EQ(params_[static_cast<size_t>(i)], 2.0f) << i;
  float master = 0;
  ASSERT_TRUE(state->read(kMasterState, 9999, 1, &master).ok());
  EXPECT_EQ(master, 2.0f);
}

// The update starts on a tile once its gradients are here, not once all
// are: tile 0's came early, tiles 1 and 2 wait behind a reduction that
// finishes only when tile 0 is visited (or after 5 s, which fails).
TEST_F(HostOffloadStateTest, ATileIsUpdatedOnceItsGradientsAreHereNotAllOfThem) {
  auto state = make();
  ASSERT_NE(state, nullptr);
  auto comm = device_.create_stream("comm");
  ASSERT_TRUE(comm.ok());
  std::atomic<bool> open{false}, timed_out{false};
  state->boundary_micro_step();
  state->owned_grads_final({{0, kTile}}, compute_->record());
  device::EventPtr late = (*comm)->submit([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!open.load()) {
      if (std::chrono::steady_clock::now() > deadline) {
        timed_out = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return Status::Ok();
  });
  state->owned_grads_final({{kTile, kOwned}}, late);
  std::vector<int64_t> begins;
  bool waited_for_all = false;
  Status s = state->for_each_tile(TileAccess::kUpdate, [&](const StateTile& tile) {
    if (begins.empty()) waited_for_all = timed_out.load();
    begins.push_back(tile.begin);
    open = true;
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(begins, (std::vector<int64_t>{0, 4096, 8192}));
  EXPECT_FALSE(waited_for_all) << "tile 0 waited for the late reduction";
  EXPECT_FALSE(timed_out.load());
}

// A bf16 model: the optimizer's walk (kStep) hands each tile a staging
// tile for the new 16-bit parameters and sends what the visitor wrote there
// (no conversion of the master); other update walks (a checkpoint's load)
// hand none and send the master's values converted.
TEST_F(HostOffloadStateTest, TheOptimizersWalkSendsThe16BitParametersTheVisitorWrote) {
  constexpr uint16_t kTwo = 0x4000, kThree = 0x4040;  // 2.0f and 3.0f in bf16
  std::vector<uint16_t> model16(kOwned, 0);
  HostOffloadOptions o;
  o.side.device = &device_;
  o.side.compute = compute_.get();
  o.side.grads = grads_.data();
  o.side.model_params = model16.data();
  o.side.model_dtype = DSCORE_DTYPE_BF16;
  o.tile_elements = kTile;
  auto state = HostOffloadState::create(o, {{"exp_avg", DSCORE_DTYPE_F32, 1}}, {0.0}, kOwned,
                                        params_.data(), model_, {});
  ASSERT_TRUE(state.ok()) << state.status().message();
  for (TileAccess access : {TileAccess::kStep, TileAccess::kUpdate}) {
    const bool step = access == TileAccess::kStep;
    (*state)->boundary_micro_step();
    Status s = (*state)->for_each_tile(access, [&](const StateTile& tile) {
      if ((tile.params16 != nullptr) != step)
        return internal_error("tile " + std::to_string(tile.begin) + ": params16 " +
                              (step ? "missing" : "handed out outside the optimizer's walk"));
      for (int64_t i = 0; i < tile.end - tile.begin; ++i) {
        tile.master[i] = 2.0f;
        if (step) static_cast<uint16_t*>(tile.params16)[i] = kThree;
      }
      return Status::Ok();
    });
    ASSERT_TRUE(s.ok()) << s.message();
    const uint16_t want = step ? kThree : kTwo;
    for (int64_t i = 0; i < kOwned; ++i)
      ASSERT_EQ(model16[static_cast<size_t>(i)], want) << (step ? "kStep" : "kUpdate") << " " << i;
  }
}

TEST_F(HostOffloadStateTest, AVisitorErrorStopsTheWalkAndTheNextWalkWorks) {
  auto state = make();
  ASSERT_NE(state, nullptr);
  testing::expect_a_visitor_error_ends_the_walk(*state, params_.data(), kTile);
}

// A reduction that failed: its event carries the failure into the state's
// copy stream, and the walk reports it instead of training on stale values.
TEST_F(HostOffloadStateTest, AFailedReductionFailsTheUpdate) {
  auto state = make();
  ASSERT_NE(state, nullptr);
  auto comm = device_.create_stream("comm");
  ASSERT_TRUE(comm.ok());
  device::EventPtr failed =
      (*comm)->submit([] { return Status(DSCORE_UNAVAILABLE, "rank 1 died"); });
  state->boundary_micro_step();
  state->owned_grads_final({{0, kOwned}}, failed);
  bool visited = false;
  Status s = state->for_each_tile(TileAccess::kUpdate, [&](const StateTile&) {
    visited = true;
    return Status::Ok();
  });
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank 1 died"), std::string::npos) << s.message();
  EXPECT_FALSE(visited);
}

}  // namespace
}  // namespace dscore
