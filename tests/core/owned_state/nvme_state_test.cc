// NvmeState staged (core/owned_state/nvme_state.h: NVMe offload from device
// memory the host does not address) on its own, over the nvme plugin, on a
// CPU device whose copies each wait 2 ms on their stream's worker: the
// copy stream lags the host, so a wait missing between them shows as a
// wrong value, not as luck. An update walk must hand each tile the
// gradients written last on the compute stream, write each tile's new
// parameters to the model (two staging tiles for three tiles: a staging
// tile reused too early overwrites a copy in flight) and return only once
// they are there; the master (an fp32 model's, in its file) and the slots
// keep what the visitor wrote. A visitor's error ends the walk with it.
#include "core/owned_state/nvme_state.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "core/device/cpu_device.h"
#include "tests/core/engine/quadratic_model.h"
#include "tests/core/offload/swapper_test_util.h"
#include "tests/core/owned_state/owned_state_checks.h"

namespace dscore {
namespace {

constexpr int64_t kOwned = 10000;  // 3 tiles of 4096
constexpr int64_t kTile = 4096;

// The CPU device, memory treated as separate, every copy 2 ms late.
class SlowCopyDevice final : public device::Device {
 public:
  device::DeviceType type() const override { return device::DeviceType::kCpu; }
  int index() const override { return 0; }
  std::string describe() const override { return "cpu (slow copies)"; }
  bool memory_is_host() const override { return false; }
  int32_t tensor_device_type() const override { return cpu_.tensor_device_type(); }
  Result<std::unique_ptr<device::Stream>> create_stream(std::string name) override {
    return cpu_.create_stream(std::move(name));
  }
  Result<device::Buffer> allocate(size_t bytes, device::Placement placement, MemoryUse use,
                                  std::string_view name, bool zero = true) override {
    return cpu_.allocate(bytes, placement, use, name, zero);
  }
  void copy(void* dst, const void* src, size_t bytes, device::Stream& stream) override {
    stream.enqueue([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      return Status::Ok();
    });
    cpu_.copy(dst, src, bytes, stream);
  }
  void fill_zero(void* dst, size_t bytes, device::Stream& stream) override {
    cpu_.fill_zero(dst, bytes, stream);
  }

 private:
  device::CpuDevice cpu_{device::CpuStreams::kAsynchronous, device::CpuMemory::kSeparate};
};

class NvmeStateStaged : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(nvme_.swapper);
    auto compute = device_.create_stream("compute");
    ASSERT_TRUE(compute.ok());
    compute_ = std::move(*compute);
    for (int64_t i = 0; i < kOwned; ++i) params_[static_cast<size_t>(i)] = 1.0f;
  }

  std::unique_ptr<NvmeState> make() {
    NvmeStateOptions o;
    o.folder = dir_.file("rank0");
    o.sub_group_size = kTile;
    o.pipeline_read = (GetParam() & 1) != 0;
    o.pipeline_write = (GetParam() & 2) != 0;
    DeviceSide side;
    side.device = &device_;
    side.compute = compute_.get();
    side.grads = grads_.data();
    side.model_params = params_.data();
    o.staging = side;
    auto state = NvmeState::create(nvme_.swapper.get(), o, {{"exp_avg", DSCORE_DTYPE_F32, 1}},
                                   {0.5}, kOwned, params_.data(), model_, {});
    EXPECT_TRUE(state.ok()) << state.status().message();
    return state.ok() ? std::move(*state) : nullptr;
  }

  offload::testing::TempDir dir_;
  offload::testing::NvmeSwapper nvme_;
  SlowCopyDevice device_;
  std::unique_ptr<device::Stream> compute_;
  std::vector<float> grads_ = std::vector<float>(kOwned);   // the "device" gradients
  std::vector<float> params_ = std::vector<float>(kOwned);  // where the model reads (fp32)
  testing::QuadraticModel model_{{0.0f}, {0.0f}};           // unused: the master comes from params_
};

TEST_P(NvmeStateStaged, TilesSeeTheLatestGradientsAndTheModelTheirValues) {
  auto state = make();
  ASSERT_NE(state, nullptr);
  EXPECT_TRUE(state->on_host());
  for (int step = 1; step <= 2; ++step) {
    // The "backward" writes the gradients late on the compute stream.
    compute_->enqueue([this, step] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (int64_t i = 0; i < kOwned; ++i)
        grads_[static_cast<size_t>(i)] = static_cast<float>(step * 100000 + i);
      return Status::Ok();
    });
    std::vector<int64_t> begins;
    Status s = state->for_each_tile(TileAccess::kUpdate, [&](const StateTile& tile) {
      begins.push_back(tile.begin);
      const float* g = static_cast<const float*>(tile.grads);
      float* slot = static_cast<float*>(tile.slots[0]);
      for (int64_t i = tile.begin; i < tile.end; ++i) {
        const int64_t k = i - tile.begin;
        if (g[k] != static_cast<float>(step * 100000 + i))
          return internal_error("step " + std::to_string(step) + ": gradient " + std::to_string(i) +
                                " is " + std::to_string(g[k]));
        if (tile.master[k] != (step == 1 ? 1.0f : static_cast<float>(-i)))
          return internal_error("master " + std::to_string(i) + " is " +
                                std::to_string(tile.master[k]));
        tile.master[k] = static_cast<float>(-i - step + 1);
        slot[k] += 1.0f;
      }
      return Status::Ok();
    });
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(begins, (std::vector<int64_t>{0, 4096, 8192}));
    // Back in the model as soon as the walk returns.
    for (int64_t i = 0; i < kOwned; ++i)
      ASSERT_EQ(params_[static_cast<size_t>(i)], static_cast<float>(-i - step + 1))
          << "step " << step << " element " << i;
    if (step == 1)  // the next step's master check expects -i
      for (int64_t i = 0; i < kOwned; ++i) params_[static_cast<size_t>(i)] = 0;
  }
  float values[2] = {0, 0};
  ASSERT_TRUE(state->read(kMasterState, 9999, 1, &values[0]).ok());
  ASSERT_TRUE(state->read(0, 9999, 1, &values[1]).ok());
  EXPECT_EQ(values[0], -10000.0f);  // -9999 - 2 + 1
  EXPECT_EQ(values[1], 2.5f);       // 0.5 + 2 updates
}

TEST_P(NvmeStateStaged, AVisitorErrorEndsTheWalkAndTheNextWalkWorks) {
  auto state = make();
  ASSERT_NE(state, nullptr);
  testing::expect_a_visitor_error_ends_the_walk(*state, params_.data(), kTile);
}

INSTANTIATE_TEST_SUITE_P(Pipelines, NvmeStateStaged, ::testing::Values(0, 1, 2, 3),
                         [](const auto& info) {
                           return std::string((info.param & 1) != 0 ? "read" : "noread") + "_" +
                                  ((info.param & 2) != 0 ? "write" : "nowrite");
                         });

}  // namespace
}  // namespace dscore
