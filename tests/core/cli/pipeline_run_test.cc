// `dscore run` with "pipeline" through the real executable under mpirun:
// the stages give the losses of one rank (the mlp bitwise; the gpt within
// the rounding of its tied embedding's gradient, summed from two stages in
// another order), PP x DP equals DP, and what a pipeline does not run or a
// stalled stage ends the job with a message naming it.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/core/cli/process.h"

namespace dscore::testing {
namespace {

namespace fs = std::filesystem;

class PipelineRun : public ::testing::Test {
 protected:
  // Runs `config` (JSON members after the common ones) at `ranks` and
  // returns its CSV losses (job `name`).
  std::vector<double> losses(const std::string& name, const std::string& config, int ranks) {
    const fs::path path = dir_.write(name + ".json", "{" + config + R"(,
      "csv_monitor": {"enabled": true, "output_path": ")" +
                                                         (dir_.path() / "out").string() +
                                                         R"(", "job_name": ")" + name + "\"}}");
    ProcessOptions options;
    options.env = mpi_test_env();
    std::vector<std::string> args = {"run", "--config", path.string(), "-n", std::to_string(ranks)};
    args.insert(args.end(), more_args_.begin(), more_args_.end());
    ProcessResult r = run_dscore(args, options);
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.describe();
    out_ = r.out + r.err;
    return read_csv_values(dir_.path() / "out" / name / "Train_Samples_train_loss.csv");
  }
  ProcessResult run(const std::string& name, const std::string& config, int ranks,
                    EnvOverrides env = {}) {
    ProcessOptions options;
    options.env = mpi_test_env();
    for (auto& [k, v] : env) options.env[k] = v;
    const fs::path path = dir_.write(name + ".json", "{" + config + "}");
    return run_dscore({"run", "--config", path.string(), "-n", std::to_string(ranks)}, options);
  }
  TempDir dir_{"dscore_cli_pipeline"};
  std::string out_;
  std::vector<std::string> more_args_;  // for losses()' runs: --steps, --resume
};

const std::string kMlp = R"("train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
  "optimizer": {"type": "Adam", "params": {"lr": 0.01}}, "train_steps": 12, "seed": 3,
  "model": {"type": "mlp", "n_hidden_layers": 3, "hidden_dim": 32})";

std::string gpt(const fs::path& corpus) {
  return R"("train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "train_steps": 8,
    "seed": 3, "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
    "model": {"type": "gpt", "n_layer": 3, "n_head": 2, "n_embd": 32, "block_size": 16,
              "vocab_size": 256},
    "data": {"type": "text", "path": ")" +
         corpus.string() + "\"}";
}

double max_relative(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::abs(a[i]));
  return worst;
}

TEST_F(PipelineRun, MlpStagesGiveOneRanksLossesBitwise) {
  const std::vector<double> one = losses("pp1", kMlp, 1);
  ASSERT_EQ(one.size(), 12u);
  const std::vector<double> two = losses("pp2", kMlp + R"(, "pipeline": {"stages": 2})", 2);
  EXPECT_NE(out_.find("in 2 stages x 1 data-parallel"), std::string::npos) << out_;
  const std::vector<double> four =
      losses("pp4", kMlp + R"(, "pipeline": {"stages": 4, "partition": "uniform"})", 4);
  EXPECT_EQ(one, two);
  EXPECT_EQ(one, four);
  // pipeline_parallel_size says the same as pipeline.stages.
  EXPECT_EQ(one, losses("pps2", kMlp + R"(, "pipeline_parallel_size": 2)", 2));
}

// The edges of the schedule and the 16-bit paths: one micro-batch a step,
// more stages than micro-batches, bf16, and fp16 with its loss scale (an
// overflow skips the step on every stage at once), all bitwise.
TEST_F(PipelineRun, MlpStagesAreBitwiseAtTheScheduleEdgesAndIn16Bit) {
  const std::string five = R"("train_batch_size": 8, "optimizer": {"type": "Adam", "params":
      {"lr": 0.01}}, "train_steps": 5, "seed": 3,
      "model": {"type": "mlp", "n_hidden_layers": 3, "hidden_dim": 32})";
  const std::string two = R"(, "pipeline": {"stages": 2})";
  const std::string one_micro = five + R"(, "train_micro_batch_size_per_gpu": 8)";
  EXPECT_EQ(losses("gas1", one_micro, 1), losses("gas1_pp2", one_micro + two, 2));
  const std::string two_micro = five + R"(, "train_micro_batch_size_per_gpu": 4)";
  EXPECT_EQ(
      losses("gas2", two_micro, 1),
      losses("gas2_pp4", two_micro + R"(, "pipeline": {"stages": 4, "partition": "uniform"})", 4));
  // bf16; fp16 from a scale of 2^40, so the first steps overflow and are
  // skipped on both stages.
  const std::string micro2 = five + R"(, "train_micro_batch_size_per_gpu": 2)";
  const std::string bf16 = micro2 + R"(, "bf16": {"enabled": true})";
  EXPECT_EQ(losses("bf16", bf16, 1), losses("bf16_pp2", bf16 + two, 2));
  const std::string fp16 = micro2 + R"(, "fp16": {"enabled": true, "initial_scale_power": 40})";
  const std::vector<double> fp16_one = losses("fp16", fp16, 1);
  EXPECT_EQ(fp16_one, losses("fp16_pp2", fp16 + two, 2));
  EXPECT_NE(out_.find("fp16 gradient overflow; the update is skipped"), std::string::npos) << out_;
}

TEST_F(PipelineRun, GptStagesMatchOneRankWithinTheTiedEmbeddingsRounding) {
  std::string text;
  for (int i = 0; i < 400; ++i) text += "the quick brown fox jumps over the lazy dog ";
  const fs::path corpus = dir_.write("corpus.txt", text);
  const std::vector<double> one = losses("g1", gpt(corpus), 1);
  ASSERT_EQ(one.size(), 8u);
  const std::vector<double> two = losses("g2", gpt(corpus) + R"(, "pipeline": {"stages": 2})", 2);
  // Four stages, the last holding the final LayerNorm and head alone.
  const std::vector<double> four =
      losses("g4", gpt(corpus) + R"(, "pipeline": {"stages": 4, "partition": "uniform"})", 4);
  EXPECT_EQ(one.front(), two.front());  // the first step's forward is the same arithmetic
  EXPECT_LT(max_relative(one, two), 1e-7);
  EXPECT_LT(max_relative(one, four), 1e-7);
  EXPECT_LT(one.back(), one.front() - 0.5);  // it learns
  // Two stages of two data-parallel ranks each: the losses of two ranks
  // (the monitor's loss is then the data-parallel mean, as DeepSpeed's
  // pipeline reports it; without a pipeline it is rank 0's, so the
  // comparison is through the progress line's mean).
  ProcessResult dp = run("gdp2", gpt(corpus) + R"(, "steps_per_print": 1)", 2);
  ProcessResult ppdp =
      run("g2dp2", gpt(corpus) + R"(, "steps_per_print": 1, "pipeline": {"stages": 2})", 4);
  ASSERT_EQ(dp.exit_code, 0) << dp.describe();
  ASSERT_EQ(ppdp.exit_code, 0) << ppdp.describe();
  const auto mean_losses = [](const std::string& out) {
    std::vector<double> v;
    for (const std::string& line : lines_starting_with(out, "step ")) {
      const size_t at = line.find("| loss ");
      if (at != std::string::npos) v.push_back(std::stod(line.substr(at + 7)));
    }
    return v;
  };
  const std::vector<double> a = mean_losses(dp.out), b = mean_losses(ppdp.out);
  ASSERT_EQ(a.size(), 8u) << dp.out;
  ASSERT_EQ(b.size(), 8u) << ppdp.out;
  EXPECT_LT(max_relative(a, b), 1e-6);
}

// The llama: untied, its stages change no arithmetic (bitwise at 2 and 4
// stages, the last of which holds the final norm and head alone, and
// interleaved); tied, as
// the gpt, within the rounding of the embedding's gradient summed from two
// stages.
TEST_F(PipelineRun, LlamaStagesGiveOneRanksLosses) {
  std::string text;
  for (int i = 0; i < 400; ++i) text += "the quick brown fox jumps over the lazy dog ";
  const fs::path corpus = dir_.write("corpus.txt", text);
  const auto llama = [&](bool tied) {
    return std::string(R"("train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
      "train_steps": 6, "seed": 3, "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
      "model": {"type": "llama", "vocab_size": 256, "hidden_size": 32, "intermediate_size": 64,
                "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
                "max_position_embeddings": 64, "block_size": 16, "tie_word_embeddings": )") +
           (tied ? "true" : "false") + R"(},
      "data": {"type": "text", "path": ")" +
           corpus.string() + "\"}";
  };
  const std::string four = R"(, "pipeline": {"stages": 4, "partition": "uniform"})";
  const std::vector<double> one = losses("l1", llama(false), 1);
  ASSERT_EQ(one.size(), 6u);
  EXPECT_EQ(one, losses("l2", llama(false) + R"(, "pipeline": {"stages": 2})", 2));
  EXPECT_EQ(one, losses("l4", llama(false) + four, 4));
  // Interleaved, 2 chunks on each of 2 stages: still one rank's arithmetic.
  EXPECT_EQ(one, losses("li2", llama(false) + R"(, "pipeline": {"stages": 2,
      "schedule": "interleaved", "virtual_stages": 2})",
                        2));
  const std::vector<double> tied = losses("t1", llama(true), 1);
  EXPECT_LT(max_relative(tied, losses("t4", llama(true) + four, 4)), 1e-7);
  // DeepSpeed's activation_checkpoint_interval: the model checkpoints its
  // blocks, recomputing the same arithmetic, and plans less memory.
  const std::string checkpointed =
      R"(, "pipeline": {"stages": 2, "activation_checkpoint_interval": 1})";
  EXPECT_EQ(one, losses("lc2", llama(false) + checkpointed, 2));
  const auto activations_row = [&](const std::string& name, const std::string& config) {
    const fs::path path = dir_.write(name + ".json", "{" + config + "}");
    const ProcessResult plan = run_dscore({"plan", "--config", path.string(), "-n", "2"});
    const std::vector<std::string> rows = lines_starting_with(plan.out, "  activations ");
    return rows.size() == 1 ? rows[0] : plan.describe();
  };
  const std::string kept = activations_row("pk", llama(false) + R"(, "pipeline": {"stages": 2})");
  EXPECT_NE(kept, activations_row("pc", llama(false) + checkpointed)) << kept;
}

TEST_F(PipelineRun, RefusesWhatAPipelineDoesNotRunNamingTheKey) {
  ProcessResult zero2 =
      run("z2", kMlp + R"(, "pipeline": {"stages": 2}, "zero_optimization": {"stage": 2})", 2);
  EXPECT_NE(zero2.exit_code, 0);
  EXPECT_NE(zero2.err.find("ZeRO stage 2 with a pipeline"), std::string::npos) << zero2.err;
  ProcessResult odd = run("odd", kMlp + R"(, "pipeline": {"stages": 2})", 3);
  EXPECT_NE(odd.exit_code, 0);
  EXPECT_NE(odd.err.find("does not divide the world size 3"), std::string::npos) << odd.err;
  ProcessResult both =
      run("both", kMlp + R"(, "pipeline": {"stages": 2}, "pipeline_parallel_size": 4)", 2);
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.err.find("disagrees with pipeline.stages"), std::string::npos) << both.err;
  ProcessResult interval = run(
      "interval", kMlp + R"(, "pipeline": {"stages": 2, "activation_checkpoint_interval": 2})", 2);
  EXPECT_NE(interval.exit_code, 0);
  EXPECT_NE(interval.err.find("pipeline.activation_checkpoint_interval"), std::string::npos)
      << interval.err;
  EXPECT_NE(interval.err.find("does not checkpoint activations: set it to 0"), std::string::npos)
      << interval.err;
}

// ZeRO-Offload under a pipeline (ZeRO 1, as DeepSpeed allows): each
// stage's optimizer runs on the host (cpu) or from swap files (nvme) for its
// own parameters, bitwise the run without offload, fp32 and bf16, at 2
// stages x 2 replicas; a checkpoint saved with offload resumes without it
// at one rank bitwise (the mlp's stages change no arithmetic).
TEST_F(PipelineRun, OffloadUnderAPipelineIsBitwiseAndItsCheckpointsResumeWithoutIt) {
  std::string text;
  for (int i = 0; i < 400; ++i) text += "the quick brown fox jumps over the lazy dog ";
  const fs::path corpus = dir_.write("corpus.txt", text);
  // ZeRO 1, its optimizer on the host or from files, or kept.
  const auto zero1 = [&](const std::string& device) {
    if (device.empty()) return std::string(R"(, "zero_optimization": {"stage": 1})");
    return R"(, "zero_optimization": {"stage": 1, "offload_optimizer": {"device": ")" + device +
           R"(", "nvme_path": ")" + (dir_.path() / "swap").string() + "\"}}";
  };
  const std::string pipe = R"(, "pipeline": {"stages": 2})";
  for (const std::string bf16 : {"", R"(, "bf16": {"enabled": true})"}) {
    const std::string base = gpt(corpus) + pipe + bf16;
    const std::string name = std::to_string(bf16.size());
    const std::vector<double> kept = losses("k" + name, base + zero1(""), 4);
    ASSERT_EQ(kept.size(), 8u);
    EXPECT_EQ(kept, losses("c" + name, base + zero1("cpu"), 4));
    EXPECT_EQ(kept, losses("n" + name, base + zero1("nvme"), 4));
  }
  const std::vector<double> full = losses("mfull", kMlp, 1);
  ASSERT_EQ(full.size(), 12u);
  const std::string ck = (dir_.path() / "ck_offload").string();
  more_args_ = {"--steps", "6"};
  losses("msave",
         kMlp + zero1("cpu") + R"(, "pipeline": {"stages": 2}, "save_interval": 6,
         "checkpoint_dir": ")" +
             ck + "\"",
         2);
  more_args_ = {"--resume", ck};
  EXPECT_EQ(losses("mat1", kMlp, 1), std::vector<double>(full.begin() + 6, full.end()));
}

// A checkpoint of 2 stages x 2 data-parallel ranks (ZeRO 1: each stage's
// optimizer state in two partitions) resumes at 2 x 2 bitwise, and at 1
// stage on 1 rank and at 4 stages: there the gradient is one rank's sum of
// all micro-batches instead of two replicas' sums averaged, other fp32
// rounding, so the resumed steps are held to the uninterrupted 2 x 2 run's
// within 1e-6 relative (measured 4.8e-8; a partition not restored moves
// them by far more).
TEST_F(PipelineRun, APipelineTimesDataCheckpointResumesAtOneRankAndFourStages) {
  const std::string zero1 = kMlp + R"(, "zero_optimization": {"stage": 1})";
  const std::string two_by_two = zero1 + R"(, "pipeline": {"stages": 2})";
  const std::vector<double> full = losses("full22", two_by_two, 4);  // 12 steps
  ASSERT_EQ(full.size(), 12u);
  const std::vector<double> rest(full.begin() + 6, full.end());
  more_args_ = {"--steps", "6"};
  const std::string ck = (dir_.path() / "ck22").string();
  losses("save22", two_by_two + R"(, "save_interval": 6, "checkpoint_dir": ")" + ck + "\"", 4);
  more_args_ = {"--resume", ck};
  EXPECT_EQ(losses("at22", two_by_two, 4), rest);
  const std::vector<double> at1 = losses("at11", zero1, 1);
  const std::vector<double> at4 =
      losses("at41", zero1 + R"(, "pipeline": {"stages": 4, "partition": "uniform"})", 4);
  ASSERT_EQ(at1.size(), rest.size());
  ASSERT_EQ(at4.size(), rest.size());
  EXPECT_LT(max_relative(rest, at1), 1e-6);
  EXPECT_LT(max_relative(rest, at4), 1e-6);
  EXPECT_EQ(at1, at4);  // both one data-parallel rank: the same arithmetic
}

// A checkpoint saved by 2 stages resumes at 1 and at 4 stages, and one
// saved by 1 stage at 2: the mlp's stages change no arithmetic, so the
// resumed steps are the uninterrupted run's, bitwise.
TEST_F(PipelineRun, CheckpointsResumeAtOtherStageCountsBitwise) {
  const std::vector<double> full = losses("full", kMlp, 1);  // 12 steps
  ASSERT_EQ(full.size(), 12u);
  const std::vector<double> rest(full.begin() + 6, full.end());
  const auto saving = [&](const std::string& where) {
    return R"(, "save_interval": 6, "checkpoint_dir": ")" + (dir_.path() / where).string() + "\"";
  };
  // --steps 6: the first half only.
  more_args_ = {"--steps", "6"};
  losses("save2", kMlp + saving("ck2") + R"(, "pipeline": {"stages": 2})", 2);
  losses("save1", kMlp + saving("ck1"), 1);
  more_args_ = {"--resume", (dir_.path() / "ck2").string()};
  EXPECT_EQ(losses("at1", kMlp, 1), rest);
  EXPECT_EQ(losses("at4", kMlp + R"(, "pipeline": {"stages": 4, "partition": "uniform"})", 4),
            rest);
  more_args_ = {"--resume", (dir_.path() / "ck1").string()};
  EXPECT_EQ(losses("at2", kMlp + R"(, "pipeline": {"stages": 2})", 2), rest);
  // Stage 1's parameters are in a file of its own.
  EXPECT_TRUE(
      fs::exists(dir_.path() / "ck2" / "global_step6" / "pipe_stage_01_model_states.safetensors"));
}

// The interleaved schedule (Megatron-LM's; "schedule": "interleaved"):
// each stage runs virtual_stages chunks of layers. The mlp's losses are one
// rank's bitwise at 2 and 4 stages; the gpt's are 1F1B's at 2 stages
// bitwise (its tied embedding's gradient is summed the same way); a
// checkpoint it saves resumes at one stage bitwise; `dscore plan` shows the
// chunks; what it cannot run is refused naming the key.
TEST_F(PipelineRun, InterleavedScheduleGivesOneRanksAnd1F1BsLosses) {
  const std::string mlp8 = R"("train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
    "optimizer": {"type": "Adam", "params": {"lr": 0.01}}, "train_steps": 12, "seed": 3,
    "model": {"type": "mlp", "n_hidden_layers": 7, "hidden_dim": 32})";
  const auto interleaved = [](int stages) {
    return R"(, "pipeline": {"stages": )" + std::to_string(stages) +
           R"(, "partition": "uniform", "schedule": "interleaved", "virtual_stages": 2})";
  };
  const std::vector<double> one = losses("i1", mlp8, 1);
  ASSERT_EQ(one.size(), 12u);
  EXPECT_EQ(one, losses("i2", mlp8 + interleaved(2), 2));
  EXPECT_NE(out_.find("interleaved schedule, 2 chunks a stage"), std::string::npos) << out_;
  EXPECT_NE(out_.find("stage 0: layers 0-1, 4-5; stage 1: layers 2-3, 6-7"), std::string::npos)
      << out_;
  EXPECT_EQ(one, losses("i4", mlp8 + interleaved(4), 4));

  std::string text;
  for (int i = 0; i < 400; ++i) text += "the quick brown fox jumps over the lazy dog ";
  const fs::path corpus = dir_.write("corpus.txt", text);
  const std::vector<double> plain =
      losses("gi1f1b", gpt(corpus) + R"(, "pipeline": {"stages": 2})", 2);
  ASSERT_EQ(plain.size(), 8u);
  EXPECT_EQ(plain, losses("gi2", gpt(corpus) + R"(, "pipeline": {"stages": 2,
      "schedule": "interleaved", "virtual_stages": 2})",
                          2));

  // Saved by the interleaved schedule after 6 steps, resumed at one stage.
  const std::vector<double> rest(one.begin() + 6, one.end());
  more_args_ = {"--steps", "6"};
  const std::string save =
      R"(, "save_interval": 6, "checkpoint_dir": ")" + (dir_.path() / "ick").string() + R"(")";
  losses("isave", mlp8 + interleaved(2) + save, 2);
  more_args_ = {"--resume", (dir_.path() / "ick").string()};
  EXPECT_EQ(losses("iat1", mlp8, 1), rest);
  more_args_.clear();

  const fs::path plan = dir_.write("iplan.json", "{" + mlp8 + interleaved(2) + "}");
  ProcessResult r = run_dscore({"plan", "--config", plan.string(), "-n", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("interleaved (2 chunks a stage) over 4 micro-batches, bubble (p - 1) / "
                       "(v m + p - 1) = 0.111"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("stage 1 (ranks 1-1): layers 2-3, 6-7"), std::string::npos) << r.out;

  // 3 micro-batches on 2 stages; virtual_stages without the schedule.
  ProcessResult odd = run("iodd",
                          R"("train_batch_size": 6, "train_micro_batch_size_per_gpu": 2,
    "optimizer": {"type": "Adam", "params": {"lr": 0.01}}, "train_steps": 2,
    "model": {"type": "mlp", "n_hidden_layers": 7, "hidden_dim": 32})" +
                              interleaved(2),
                          2);
  EXPECT_NE(odd.exit_code, 0);
  EXPECT_NE(odd.err.find("gradient_accumulation_steps, 3) to be a multiple of the stages (2)"),
            std::string::npos)
      << odd.err;
  ProcessResult chunks =
      run("ichunks", mlp8 + R"(, "pipeline": {"stages": 2, "virtual_stages": 2})", 2);
  EXPECT_NE(chunks.exit_code, 0);
  EXPECT_NE(chunks.err.find("virtual_stages 2 needs \"schedule\": \"interleaved\""),
            std::string::npos)
      << chunks.err;
}

// `dscore plan` per stage: its layers and ranks, the activations 1F1B keeps
// in flight there (stages - stage), the boundary bytes, the bubble, and
// each stage's own parameters in its ranks' columns.
TEST_F(PipelineRun, PlanShowsEachStage) {
  const fs::path path = dir_.write("plan.json", "{" + kMlp + R"(, "pipeline": {"stages": 2}})");
  ProcessResult r = run_dscore({"plan", "--config", path.string(), "-n", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  // 16 x 32 + 32 | 32 x 32 + 32 | 32 x 32 + 32 | 32 x 4 + 4: balanced as layers 0-1 | 2-3.
  EXPECT_NE(r.out.find("pipeline: 2 stages x 2 data-parallel, 1F1B over 2 micro-batches, bubble "
                       "(p - 1) / (m + p - 1) = 0.333"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("stage 0 (ranks 0-1): layers 0-1, 1600 parameters, activations of up to 2 "
                       "micro-batches, per micro-batch receives 0 B and sends 256 B"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("stage 1 (ranks 2-3): layers 2-3, 1188 parameters"), std::string::npos)
      << r.out;
}

// A stage that dies (SIGKILL in its first backward, the failpoint
// pipeline.stage_dies): mpirun ends the job at once, and the rank left
// waiting for it says which stage it is and what it was waiting in.
TEST_F(PipelineRun, ADeadStageEndsTheJobAndTheOthersSayTheirStage) {
  ProcessResult r = run("dies", kMlp + R"(, "pipeline": {"stages": 2})", 2,
                        {{"DSCORE_FAILPOINTS", "pipeline.stage_dies@1"}});
  EXPECT_NE(r.exit_code, 0) << r.describe();
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.err.find("[dscore rank 0] stopped by SIGTERM"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("This rank (pipeline stage 0 of 2) was in recv"), std::string::npos)
      << r.err;
}

TEST_F(PipelineRun, AStalledStageEndsTheJobNamingTheStageThatWaited) {
  ProcessResult r = run("stall", kMlp + R"(, "pipeline": {"stages": 2},
      "comm": {"timeout_ms": 3000})",
                        2, {{"DSCORE_FAILPOINTS", "pipeline.stage_stalls@0"}});
  EXPECT_NE(r.exit_code, 0) << r.describe();
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.err.find("pipeline stage 1 (rank 1) receiving from stage 0"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace dscore::testing
