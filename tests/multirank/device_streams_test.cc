// The engine on the CPU device's two stream modes (core/device/cpu_device.h),
// with real ranks under mpirun: DSCORE_CPU_STREAMS=async (the comm stream a
// worker thread of its own, reductions and stage-3 gathers beside compute)
// trains to the same bits as DSCORE_CPU_STREAMS=sync (every task on the
// calling thread), at every stage, with accumulation, in fp32 and bf16, with
// the optimizer state on NVMe, and across a checkpoint save and resume. A
// wait missing between the comm stream and its users shows here as a
// difference, and under TSan (tsan.multirank_device_streams) as a report.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "tests/multirank/harness.h"

namespace dscore::testing {
namespace {

RunSpec with_streams(RunSpec spec, const std::string& mode) {
  spec.env.push_back("DSCORE_CPU_STREAMS=" + mode);
  return spec;
}

RunResult run_ok(const RunSpec& spec, const std::vector<std::string>& args = {}) {
  RunResult r = run_workers(spec, args);
  EXPECT_TRUE(r.ok()) << "stage " << spec.stage << " " << spec.precision << "\n"
                      << r.process.describe();
  EXPECT_EQ(r.ranks.size(), static_cast<size_t>(spec.world));
  return r;
}

void expect_bitwise(const RunResult& async, const RunResult& sync, const std::string& what) {
  ASSERT_FALSE(async.ranks.empty()) << what;
  ASSERT_FALSE(sync.ranks.empty()) << what;
  EXPECT_FALSE(sync.ranks[0].losses.empty()) << what;
  EXPECT_EQ(async.ranks[0].losses, sync.ranks[0].losses) << what;
  EXPECT_EQ(async.ranks[0].grad_norms, sync.ranks[0].grad_norms) << what;
  ASSERT_FALSE(sync.params.empty()) << what;
  EXPECT_TRUE(async.params == sync.params)
      << what << ": parameters differ (max rel "
      << max_relative_difference(async.params, sync.params) << ")";
}

std::string temp_folder(const char* stem) {
  std::string folder = (std::filesystem::temp_directory_path() / stem).string() + "-XXXXXX";
  EXPECT_NE(::mkdtemp(folder.data()), nullptr);
  return folder;
}

// `saver` stops after saving at step `save_step`, `loader` resumes from
// that checkpoint: the losses of both runs, one after the other, and the
// final parameters are those of `whole`, the run that never stopped.
void expect_resumes_as_whole(const RunResult& whole, const RunSpec& saver, const RunSpec& loader,
                             int save_step, const std::string& what) {
  const std::string ck = temp_folder("dscore-streams-ck");
  const RunResult first =
      run_ok(saver, {"--save", ck, "--save-step", std::to_string(save_step), "--stop-after-save"});
  const RunResult second = run_ok(loader, {"--load", ck});
  std::filesystem::remove_all(ck);
  ASSERT_FALSE(first.ranks.empty()) << what;
  ASSERT_FALSE(second.ranks.empty()) << what;
  std::vector<double> losses = first.ranks[0].losses;
  losses.insert(losses.end(), second.ranks[0].losses.begin(), second.ranks[0].losses.end());
  EXPECT_EQ(losses, whole.ranks[0].losses) << what;
  EXPECT_TRUE(second.params == whole.params) << what;
}

class EveryStage : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(EveryStage, AsynchronousStreamsEqualSynchronousBitwise) {
  const auto [stage, precision] = GetParam();
  RunSpec spec;
  spec.stage = stage;
  spec.precision = precision;
  spec.gas = 2;  // reductions every micro-step (stage 2/3) and at the boundary
  spec.steps = 6;
  spec.clipping = 0.05;
  spec.overlap_comm = true;
  if (precision == "bf16") spec.extra = R"("data_types": {"grad_accum_dtype": "bf16"})";
  const RunResult sync = run_ok(with_streams(spec, "sync"));
  const RunResult async = run_ok(with_streams(spec, "async"));
  expect_bitwise(async, sync, "stage " + std::to_string(stage) + " " + precision);
  const std::string async_log = async.process.out + async.process.err;
  EXPECT_NE(async_log.find("device: cpu (asynchronous streams)"), std::string::npos) << async_log;
  const std::string sync_log = sync.process.out + sync.process.err;
  EXPECT_NE(sync_log.find("device: cpu (synchronous streams)"), std::string::npos) << sync_log;
}

INSTANTIATE_TEST_SUITE_P(Streams, EveryStage,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3),
                                            ::testing::Values("fp32", "bf16")),
                         [](const auto& info) {
                           return "stage" + std::to_string(std::get<0>(info.param)) + "_" +
                                  std::get<1>(info.param);
                         });

// Stage 3, bf16, 4 steps, the optimizer state on NVMe under `folder`
// (both pipelines), and `more` zero_optimization keys.
RunSpec stage3_nvme(const std::string& folder, const std::string& more = "") {
  RunSpec spec;
  spec.stage = 3;
  spec.precision = "bf16";
  spec.hidden = 100;
  spec.steps = 4;
  spec.extra = R"("data_types": {"grad_accum_dtype": "bf16"})";
  spec.zero_extra =
      R"("sub_group_size": 4096, "offload_optimizer": {"device": "nvme", "nvme_path": ")" + folder +
      R"(", "pipeline_read": true, "pipeline_write": true, "buffer_count": 3})" + more;
  return spec;
}

TEST(DeviceStreams, NvmeOptimizerOffloadIsBitwiseOnBothModes) {
  const std::string folder = temp_folder("dscore-streams-nvme");
  const RunSpec spec = stage3_nvme(folder);
  expect_bitwise(run_ok(with_streams(spec, "async")), run_ok(with_streams(spec, "sync")),
                 "stage 3 bf16 with the optimizer state on NVMe");
  std::filesystem::remove_all(folder);
}

// NVMe offload as from a GPU (DSCORE_CPU_DEVICE_MEMORY=separate): each
// tile's gradients copied in on the state's copy stream after the compute
// stream, its parameters out beside the next tile's update, stage 3's
// swapped shards copied on the comm stream, read from the file on the host
// straight into a staging ring. Twice: with a ring of one granule's pieces
// (buffer_count x buffer_size 1), which gathers wrap and wait for their own
// copies, and with the first 4096 elements resident (max_in_cpu), copied
// from pinned memory.
TEST(DeviceStreams, NvmeOffloadFromSeparateMemoryIsBitwiseOnBothModes) {
  const std::string optimizer = temp_folder("dscore-streams-staged");
  const std::string params = temp_folder("dscore-streams-params");
  const auto spec_with = [&](const std::string& offload_param) {
    return stage3_nvme(optimizer, R"(, "offload_param": {"device": "nvme", "nvme_path": ")" +
                                      params + R"(", )" + offload_param + "}");
  };
  const RunResult sync = run_ok(with_streams(spec_with(R"("max_in_cpu": 0)"), "sync"));
  for (const auto& [offload_param, log_line] :
       {std::pair<std::string, std::string>{
            R"("max_in_cpu": 0, "buffer_count": 1, "buffer_size": 1)",
            "24.00 KiB pinned staging ring"},
        {R"("max_in_cpu": 4096)", "the resident part is pinned"}}) {
    RunSpec spec = spec_with(offload_param);
    spec.env.push_back("DSCORE_CPU_DEVICE_MEMORY=separate");
    const RunResult async = run_ok(with_streams(spec, "async"));
    expect_bitwise(async, sync,
                   "stage 3 bf16, NVMe offload from separate memory, " + offload_param);
    const std::string log = async.process.out + async.process.err;
    EXPECT_NE(log.find("device memory treated as separate"), std::string::npos) << log;
    EXPECT_NE(log.find("staged through host buffers"), std::string::npos) << log;
    EXPECT_NE(log.find(log_line), std::string::npos) << log;
  }
  std::filesystem::remove_all(optimizer);
  std::filesystem::remove_all(params);
}

// ZeRO-Offload's copy stream (host_offload_state.h): gradients out as they
// are reduced (stage 1 bucket by bucket, stage 3 layer by layer), parameters
// in beside the host's update of the next tile.
TEST(DeviceStreams, HostOptimizerOffloadIsBitwiseOnBothModes) {
  for (const auto& [stage, precision] :
       {std::pair<int, const char*>{1, "fp32"}, std::pair<int, const char*>{3, "bf16"}}) {
    RunSpec spec;
    spec.stage = stage;
    spec.precision = precision;
    spec.hidden = 100;
    spec.steps = 4;
    if (spec.precision == "bf16") spec.extra = R"("data_types": {"grad_accum_dtype": "bf16"})";
    spec.zero_extra = R"("sub_group_size": 4096, "offload_optimizer": {"device": "cpu"})";
    expect_bitwise(run_ok(with_streams(spec, "async")), run_ok(with_streams(spec, "sync")),
                   "stage " + std::to_string(stage) + " " + precision + " with ZeRO-Offload");
  }
}

// A checkpoint saved with ZeRO-Offload resumes without it, and the other
// way round, to the bits of the run that never stopped.
TEST(DeviceStreams, CheckpointsCrossInAndOutOfHostOffload) {
  RunSpec spec;
  spec.stage = 2;
  spec.precision = "bf16";
  spec.extra = R"("data_types": {"grad_accum_dtype": "bf16"})";
  spec.steps = 8;
  const RunResult whole = run_ok(with_streams(spec, "async"));
  const std::string offload = R"("sub_group_size": 4096, "offload_optimizer": {"device": "cpu"})";
  for (bool saved_offloaded : {true, false}) {
    RunSpec saver = spec, loader = spec;
    (saved_offloaded ? saver : loader).zero_extra = offload;
    expect_resumes_as_whole(whole, with_streams(saver, "async"), with_streams(loader, "async"), 4,
                            saved_offloaded ? "saved offloaded" : "resumed offloaded");
  }
}

// Partial offload (offload_optimizer.ratio 0.5 at stage 3: one of three
// sub-groups per rank kept with the parameters) as from a GPU: a checkpoint
// saved with it resumes in memory and fully offloaded, and one saved in
// memory resumes with it, to the bits of the run that never stopped.
TEST(DeviceStreams, CheckpointsCrossInAndOutOfPartialOffload) {
  RunSpec spec;
  spec.stage = 3;
  spec.precision = "bf16";
  spec.hidden = 100;
  spec.extra = R"("data_types": {"grad_accum_dtype": "bf16"})";
  spec.steps = 6;
  spec.env.push_back("DSCORE_CPU_DEVICE_MEMORY=separate");
  const RunResult whole = run_ok(with_streams(spec, "async"));
  const std::string partial =
      R"("sub_group_size": 4096, "offload_optimizer": {"device": "cpu", "ratio": 0.5})";
  const std::string full = R"("sub_group_size": 4096, "offload_optimizer": {"device": "cpu"})";
  for (const auto& [saved, resumed] : {std::pair<std::string, std::string>{partial, ""},
                                       std::pair<std::string, std::string>{partial, full},
                                       std::pair<std::string, std::string>{"", partial}}) {
    RunSpec saver = spec, loader = spec;
    saver.zero_extra = saved;
    loader.zero_extra = resumed;
    expect_resumes_as_whole(whole, with_streams(saver, "async"), with_streams(loader, "async"), 3,
                            "saved with {" + saved + "}, resumed with {" + resumed + "}");
  }
}

// Saved on the asynchronous streams, resumed on the synchronous ones (and
// the other way round): both equal the run that never stopped.
TEST(DeviceStreams, CheckpointsCrossBetweenModes) {
  RunSpec spec;
  spec.stage = 2;
  spec.steps = 8;
  const RunResult whole = run_ok(with_streams(spec, "sync"));
  for (const auto& [saver, loader] : {std::pair<std::string, std::string>{"async", "sync"},
                                      std::pair<std::string, std::string>{"sync", "async"}}) {
    expect_resumes_as_whole(whole, with_streams(spec, saver), with_streams(spec, loader), 4,
                            "saved on " + saver + ", resumed on " + loader);
  }
}

TEST(DeviceStreams, ABadModeIsRefusedNamingTheVariable) {
  RunSpec spec;
  spec.steps = 1;
  const RunResult r = run_workers(with_streams(spec, "threads"));
  EXPECT_FALSE(r.ok());
  const std::string log = r.process.out + r.process.err;
  EXPECT_NE(log.find("DSCORE_CPU_STREAMS"), std::string::npos) << log;
  EXPECT_NE(log.find("\"sync\""), std::string::npos) << log;
}

}  // namespace
}  // namespace dscore::testing
