// The pipeline composed with tensor and sequence parallelism (3D:
// pipeline x tensor x data, and pipeline x sequence) under real ranks
// (mpirun): each stage's ranks form the tensor- or sequence-parallel groups
// of its layers, the boundary tensors pass between the same coordinates of
// neighbouring stages, and the tied embedding's gradients are summed
// between the first and last stage of each part. The gpt and the llama at
// 2 stages x TP=2 and 2 stages x SP=2 train as one rank does (the same
// bounds as tensor_parallel_test.cc: not bitwise, split sums round
// differently), 2 stages x TP=2 x DP=2 as 2 data-parallel ranks, the
// interleaved schedule as 1F1B, the optimizer offloaded as in memory, and a
// checkpoint saved at 2 stages x TP=2 resumes there bitwise and loads at
// one rank, at TP=2 and at 2 stages with the state bitwise (and the
// reverse). The parameters compared are the whole model's, gathered from
// every stage's parts (Engine::gather_parameters).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/core/cli/process.h"
#include "tests/multirank/parallel_specs.h"

namespace dscore::testing {
namespace {

std::string pipe(int stages) {
  return R"(, "pipeline": {"stages": )" + std::to_string(stages) + "}";
}
std::string tp(int size) {
  return R"(, "tensor_parallel": {"autotp_size": )" + std::to_string(size) + "}";
}
std::string sp(int size) { return R"(, "sequence_parallel_size": )" + std::to_string(size); }

// 4 micro-batches a step, so the 1F1B schedule has a steady state; 4
// blocks, so each stage holds two.
RunSpec pipeline_gpt_spec() {
  RunSpec spec = parallel_gpt_spec();
  spec.model =
      R"({"type": "gpt", "n_layer": 4, "n_head": 4, "n_embd": 32, "block_size": 16, "vocab_size": 256})";
  spec.gas = 4;
  return spec;
}

TEST(PipelineComposition, GptStagesTimesTensorOrSequenceTrainAsOneRank) {
  RunSpec spec = pipeline_gpt_spec();
  spec.world = 1;
  const RunResult one = run_ok(spec, "one rank");
  for (double norm : one.ranks[0].grad_norms) EXPECT_GT(norm, spec.clipping);
  const std::string base = spec.extra;
  spec.world = 4;
  spec.extra = base + pipe(2) + tp(2);
  const RunResult pp_tp = run_ok(spec, "PP=2 x TP=2");
  expect_close(pp_tp, one, "PP=2 x TP=2 vs one rank");
  // Every rank reports the last stage's loss.
  ASSERT_EQ(pp_tp.ranks.size(), 4u);
  for (const RankReport& r : pp_tp.ranks) EXPECT_EQ(r.losses, pp_tp.ranks[0].losses);
  spec.extra = base + pipe(2) + sp(2);
  expect_close(run_ok(spec, "PP=2 x SP=2"), one, "PP=2 x SP=2 vs one rank");
}

TEST(PipelineComposition, ThreeDimensionsTrainAsTwoDataParallelRanks) {
  RunSpec spec = pipeline_gpt_spec();
  spec.stage = 1;
  spec.world = 2;
  const RunResult dp = run_ok(spec, "DP=2");
  spec.world = 8;
  spec.extra += pipe(2) + tp(2);
  expect_close(run_ok(spec, "PP=2 x TP=2 x DP=2"), dp, "PP=2 x TP=2 x DP=2 at ZeRO 1 vs DP=2");
}

// The llama's tied head (its embedding copied to the last stage, split by
// vocabulary rows in both) and its grouped key/value heads.
TEST(PipelineComposition, LlamaStagesTimesTensorOrSequenceTrainAsOneRank) {
  RunSpec spec = parallel_llama_spec(/*tied=*/true);
  spec.gas = 4;
  spec.world = 1;
  const RunResult one = run_ok(spec, "llama one rank");
  const std::string base = spec.extra;
  spec.world = 4;
  spec.extra = base + pipe(2) + tp(2);
  expect_close(run_ok(spec, "llama PP=2 x TP=2"), one, "llama PP=2 x TP=2 vs one rank");
  spec.extra = base + pipe(2) + sp(2);
  expect_close(run_ok(spec, "llama PP=2 x SP=2"), one, "llama PP=2 x SP=2 vs one rank");
}

// Megatron's interleaved schedule runs the same micro-batches through the
// same split layers: 1F1B's bits. ZeRO-Offload keeps each stage's part of
// the optimizer on the host: the in-memory bits.
TEST(PipelineComposition, InterleavedAndOffloadedGiveTheSameBits) {
  RunSpec spec = pipeline_gpt_spec();
  spec.world = 4;
  spec.stage = 1;
  const std::string base = spec.extra;
  spec.extra = base + pipe(2) + tp(2);
  const RunResult one_f_one_b = run_ok(spec, "PP=2 x TP=2, 1F1B");
  spec.extra = base + tp(2) +
               R"(, "pipeline": {"stages": 2, "schedule": "interleaved", "virtual_stages": 2})";
  expect_bitwise(run_ok(spec, "PP=2 x TP=2 interleaved"), one_f_one_b,
                 "PP=2 x TP=2 interleaved vs 1F1B");
  spec.extra = base + pipe(2) + tp(2);
  spec.zero_extra = R"("offload_optimizer": {"device": "cpu"})";
  expect_bitwise(run_ok(spec, "PP=2 x TP=2 offloaded"), one_f_one_b,
                 "PP=2 x TP=2 offloaded vs in memory");
}

// Each stage's parts write their own model file (stage 0's
// mp_rank_0M_model_states, stage s's pipe_stage_0s_mp_rank_0M_model_states:
// before, the parts of a stage past the first wrote one file over each
// other) and each rank its optimizer states.
TEST(PipelineComposition, CheckpointsLoadAtOtherStageAndTensorParallelCounts) {
  TempDir dir("dscore_pipe_tp_checkpoint");
  const std::string ck = (dir.path() / "ck").string();
  RunSpec spec = pipeline_gpt_spec();
  spec.stage = 1;
  const std::string base = spec.extra;
  spec.world = 4;
  spec.extra = base + pipe(2) + tp(2);
  const RunResult first = expect_resumes_bitwise(spec, ck, "PP=2 x TP=2");
  ASSERT_TRUE(first.ok() && !first.state.empty());
  for (const char* file :
       {"mp_rank_01_model_states.safetensors", "pipe_stage_01_mp_rank_00_model_states.safetensors",
        "pipe_stage_01_mp_rank_01_model_states.safetensors"})
    EXPECT_TRUE(std::filesystem::exists(dir.path() / "ck" / "global_step3" / file)) << file;

  const auto loaded_state = [&](int world, const std::string& axes, const std::string& from) {
    RunSpec at = pipeline_gpt_spec();
    at.stage = 1;
    at.world = world;
    at.extra = base + axes;
    const RunResult r = run_workers(at, {"--load", from, "--dump-state"});
    EXPECT_TRUE(r.ok()) << r.process.describe();
    return r.state;
  };
  EXPECT_EQ(loaded_state(1, "", ck), first.state) << "PP=2 x TP=2 save loaded at one rank";
  EXPECT_EQ(loaded_state(2, tp(2), ck), first.state) << "PP=2 x TP=2 save loaded at TP=2";
  EXPECT_EQ(loaded_state(2, pipe(2), ck), first.state) << "PP=2 x TP=2 save loaded at PP=2";
  // The model files alone (every stage's parts) hold the whole model.
  RunSpec weights = pipeline_gpt_spec();
  weights.world = 1;
  const RunResult from_model_files =
      run_workers(weights, {"--load", ck, "--load-weights-only", "--dump-state"});
  ASSERT_TRUE(from_model_files.ok()) << from_model_files.process.describe();
  EXPECT_EQ(from_model_files.state.at("fp32"), first.state.at("fp32"))
      << "PP=2 x TP=2 model files loaded at one rank";

  const std::string ck1 = ck + "_one";
  RunSpec one = pipeline_gpt_spec();
  one.stage = 1;
  one.world = 1;
  const RunResult saved =
      run_workers(one, {"--save", ck1, "--save-step", "3", "--stop-after-save", "--dump-state"});
  ASSERT_TRUE(saved.ok()) << saved.process.describe();
  EXPECT_EQ(loaded_state(4, pipe(2) + tp(2), ck1), saved.state)
      << "one-rank save loaded at PP=2 x TP=2";
}

}  // namespace
}  // namespace dscore::testing
