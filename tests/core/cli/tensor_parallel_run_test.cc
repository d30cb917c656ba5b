// `dscore run` with "tensor_parallel": {"autotp_size": N} and
// "sequence_parallel_size": N through the real executable under mpirun: the
// gpt split over 2 ranks (its layers, or each sample's sequence; alone or in
// each of 2 pipeline stages) gives one rank's losses, a tensor-parallel
// checkpoint resumes at one rank, and what
// either does not run yet (or a model that cannot be split) ends the job
// with a message naming the key and the fix.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "tests/core/cli/process.h"

namespace dscore::testing {
namespace {

namespace fs = std::filesystem;

class TensorParallelRun : public ::testing::Test {
 protected:
  ProcessResult run(const std::string& name, const std::string& config, int ranks) {
    ProcessOptions options;
    options.env = mpi_test_env();
    const fs::path path = dir_.write(name + ".json", "{" + config + "}");
    return run_dscore({"run", "--config", path.string(), "-n", std::to_string(ranks)}, options);
  }
  // The run's CSV losses (job `name`).
  std::vector<double> losses(const std::string& name, const std::string& config, int ranks) {
    ProcessResult r = run(name,
                          config + R"(, "csv_monitor": {"enabled": true, "output_path": ")" +
                              (dir_.path() / "out").string() + R"(", "job_name": ")" + name + "\"}",
                          ranks);
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.describe();
    out_ = r.out + r.err;
    return read_csv_values(dir_.path() / "out" / name / "Train_Samples_train_loss.csv");
  }
  std::string gpt(int heads = 4) {
    std::string text;
    for (int i = 0; i < 400; ++i) text += "the quick brown fox jumps over the lazy dog ";
    const fs::path corpus = dir_.write("corpus.txt", text);
    return R"("train_batch_size": 8, "train_micro_batch_size_per_gpu": 4, "train_steps": 6,
      "seed": 3, "gradient_clipping": 1.0,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
      "model": {"type": "gpt", "n_layer": 2, "n_head": )" +
           std::to_string(heads) + R"(, "n_embd": )" + std::to_string(8 * heads) +
           R"(, "block_size": 16,
                "vocab_size": 255},
      "data": {"type": "text", "path": ")" +
           corpus.string() + "\"}";
  }
  TempDir dir_{"dscore_cli_tensor_parallel"};
  std::string out_;
};

double max_relative(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::abs(a[i]));
  return worst;
}

// An odd vocabulary (255: parts of 128 and 127) and clipping active.
TEST_F(TensorParallelRun, GptSplitOverTwoRanksGivesOneRanksLosses) {
  const std::vector<double> one = losses("tp1", gpt(), 1);
  ASSERT_EQ(one.size(), 6u);
  const std::vector<double> two =
      losses("tp2", gpt() + R"(, "tensor_parallel": {"autotp_size": 2})", 2);
  EXPECT_NE(out_.find("split over 2 tensor-parallel ranks"), std::string::npos) << out_;
  EXPECT_NE(out_.find("x 1 data-parallel ranks"), std::string::npos) << out_;
  EXPECT_LT(max_relative(one, two), 1e-6);
  EXPECT_LT(one.back(), one.front());  // it learns
}

// A TP=2 run's checkpoint (whole tensors: docs/checkpoints.md) resumes at
// one rank, and the run goes on with the TP=2 run's losses.
TEST_F(TensorParallelRun, ATensorParallelCheckpointResumesAtOneRank) {
  const std::string tp2 = R"(, "tensor_parallel": {"autotp_size": 2})";
  const std::vector<double> full = losses("full", gpt() + tp2, 2);
  ASSERT_EQ(full.size(), 6u);
  const std::string ck = (dir_.path() / "ck").string();
  const std::string saving = R"(, "save_interval": 3, "checkpoint_dir": ")" + ck + R"(")";
  ProcessOptions options;
  options.env = mpi_test_env();
  const fs::path first_config = dir_.write("first.json", "{" + gpt() + tp2 + saving + "}");
  ProcessResult first =
      run_dscore({"run", "--config", first_config.string(), "-n", "2", "--steps", "3"}, options);
  ASSERT_EQ(first.exit_code, 0) << first.describe();
  EXPECT_TRUE(fs::exists(fs::path(ck) / "global_step3" / "mp_rank_01_model_states.safetensors"));
  const fs::path config = dir_.write(
      "resume.json", "{" + gpt() + R"(, "csv_monitor": {"enabled": true, "output_path": ")" +
                         (dir_.path() / "out").string() + R"(", "job_name": "resumed"}})");
  ProcessResult resumed = run_dscore({"run", "--config", config.string(), "--resume", ck}, options);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.describe();
  const std::vector<double> after =
      read_csv_values(dir_.path() / "out" / "resumed" / "Train_Samples_train_loss.csv");
  ASSERT_EQ(after.size(), 3u);
  EXPECT_LT(max_relative(after, std::vector<double>(full.begin() + 3, full.end())), 1e-6);
}

TEST_F(TensorParallelRun, RefusesWhatItDoesNotRunNamingTheKey) {
  const std::string tp2 = R"(, "tensor_parallel": {"autotp_size": 2})";
  const auto refused = [&](const std::string& name, const std::string& config, int ranks,
                           const std::string& message) {
    ProcessResult r = run(name, config, ranks);
    EXPECT_NE(r.exit_code, 0) << name;
    EXPECT_NE(r.err.find(message), std::string::npos) << name << ": " << r.err;
  };
  refused("odd", gpt() + R"(, "tensor_parallel": {"autotp_size": 3})", 2,
          "tensor_parallel.autotp_size 3 does not divide the 2 ranks");
  refused("heads", gpt(3) + tp2, 2, "does not divide the attention heads (3)");
  refused("mlp",
          R"("train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"lr": 0.01}},
             "train_steps": 2, "model": {"type": "mlp"})" +
              tp2,
          2, "model 'mlp' cannot be split for tensor parallelism");
  refused("custom", gpt() + R"(, "tensor_parallel": {"autotp_size": 2, "partition_config": {}})", 2,
          "partition_config");
  // A plugin whose parts do not tile its tensor (both ranks claim the same
  // rows): the engine's check names the parameter before any step.
  ProcessOptions options;
  options.env = mpi_test_env();
  options.env["DSCORE_PLUGIN_PATH"] = std::string(DSCORE_TEST_PLUGIN_DIR) + "/fake_bad_split";
  const fs::path overlap = dir_.write("overlap.json", R"({"train_batch_size": 2,
      "optimizer": {"type": "Adam", "params": {"lr": 0.01}}, "train_steps": 1,
      "model": {"type": "fake_bad_split"})" + tp2 + "}");
  ProcessResult r = run_dscore({"run", "--config", overlap.string(), "-n", "2"}, options);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("tensor-parallel parts of fc.bias do not tile the 6 entries"),
            std::string::npos)
      << r.describe();
  refused("own_rank",
          gpt().replace(gpt().find("\"vocab_size\": 255"), 17,
                        "\"vocab_size\": 255, \"tensor_parallel_rank\": 1"),
          1, "tensor_parallel_rank is set by the engine");
}

// Ulysses: the gpt's sequence split over 2 ranks (each computes 8 of the
// 16 positions and attention for 2 of the 4 heads).
TEST_F(TensorParallelRun, SequenceSplitOverTwoRanksGivesOneRanksLosses) {
  const std::vector<double> one = losses("sp1", gpt(), 1);
  ASSERT_EQ(one.size(), 6u);
  const std::vector<double> two = losses("sp2", gpt() + R"(, "sequence_parallel_size": 2)", 2);
  EXPECT_NE(out_.find("each sample's sequence split over 2 sequence-parallel ranks"),
            std::string::npos)
      << out_;
  EXPECT_NE(out_.find("x 1 data-parallel ranks"), std::string::npos) << out_;
  EXPECT_LT(max_relative(one, two), 1e-6);
}

// Under a pipeline each stage's ranks split its layers (or its sequence):
// 2 stages x 2 parts train as one rank, and the CSV holds the samples'
// loss (each stage's sequence-parallel ranks computed a slice's share).
TEST_F(TensorParallelRun, PipelineStagesSplitTheirLayersOrSequences) {
  const std::vector<double> one = losses("one", gpt(), 1);
  ASSERT_EQ(one.size(), 6u);
  const std::string stages = R"(, "pipeline": {"stages": 2})";
  const std::vector<double> pp_tp =
      losses("pp_tp", gpt() + stages + R"(, "tensor_parallel": {"autotp_size": 2})", 4);
  EXPECT_NE(out_.find("in 2 stages x 1 data-parallel"), std::string::npos) << out_;
  EXPECT_NE(out_.find("split over 2 tensor-parallel ranks"), std::string::npos) << out_;
  EXPECT_LT(max_relative(one, pp_tp), 1e-6);
  const std::vector<double> pp_sp =
      losses("pp_sp", gpt() + stages + R"(, "sequence_parallel_size": 2)", 4);
  EXPECT_LT(max_relative(one, pp_sp), 1e-6);
}

// A sequence-parallel run's checkpoint is a data-parallel one: `generate`
// and `export-hf` read it at one rank (they refused it, naming
// sequence_parallel_size, until the saved config's key was dropped for
// them as the tensor-parallel and pipeline keys are), and it generates
// what a one-rank run's checkpoint generates.
TEST_F(TensorParallelRun, ASequenceParallelCheckpointGeneratesAndExportsAtOneRank) {
  ProcessOptions options;
  options.env = mpi_test_env();
  const auto saved = [&](const std::string& name, const std::string& extra, int ranks) {
    const std::string ck = (dir_.path() / name).string();
    const fs::path config = dir_.write(
        name + ".json",
        "{" + gpt() + extra + R"(, "save_interval": 6, "checkpoint_dir": ")" + ck + R"("})");
    ProcessResult r =
        run_dscore({"run", "--config", config.string(), "-n", std::to_string(ranks)}, options);
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    return ck;
  };
  const auto generated = [&](const std::string& ck) {
    ProcessResult r = run_dscore({"generate", "--checkpoint", ck, "--prompt-tokens", "116,104,101",
                                  "--temperature", "0", "--max-new-tokens", "6"});
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    return r.out;
  };
  const std::string sp = saved("ck_sp", R"(, "sequence_parallel_size": 2)", 2);
  const std::string one = saved("ck_one", "", 1);
  EXPECT_EQ(generated(sp), generated(one));
  ProcessResult exported = run_dscore({"export-hf", sp, (dir_.path() / "hf_sp").string()});
  EXPECT_EQ(exported.exit_code, 0) << exported.describe();
  EXPECT_TRUE(fs::exists(dir_.path() / "hf_sp" / "config.json"));
}

// The comms_logger counts the model's collectives on its own groups (as
// DeepSpeed's logger counts every group's), and `dscore plan` foretells
// them (model.h collective_bytes). Per micro-batch the gpt's
// tensor-parallel allreduces: of B x T x C fp32 (4 x 16 x 32: 8 KB), 4 per
// block, 1 for the embedding and 1 for the head's input gradient, and the
// head's row statistics (64 rows: their maxima, 512 B, then 2 sums a row,
// 1 KB); its sequence group's all-to-alls, q|k|v ((B T / 2) x 3C: 12 KB)
// and the output (4 KB), each once forward and once backward per block.
// 6 steps of 2 micro-batches.
TEST_F(TensorParallelRun, TheCommsLoggerAndThePlanCountTheModelsCollectives) {
  const std::string logged = gpt() + R"(, "comms_logger": {"enabled": true})";
  const auto summary_has = [](const std::string& err, const std::string& op,
                              const std::string& size, int count) {
    const size_t table = err.find("comms_logger summary");
    const size_t at = err.find("\n" + op + "\n", table);
    if (table == std::string::npos || at == std::string::npos) return false;
    const std::regex row("^ +" + size + " +" + std::to_string(count) + " ");
    for (const std::string& line : split_lines(err.substr(at + op.size() + 2))) {
      if (!line.empty() && line[0] != ' ') return false;  // the next op
      if (std::regex_search(line, row)) return true;
    }
    return false;
  };
  const auto planned = [&](const std::string& name, const std::string& config) {
    const fs::path path = dir_.write(name + ".json", "{" + config + "}");
    ProcessResult r = run_dscore({"plan", "--config", path.string(), "-n", "2"});
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    return r.out;
  };
  const std::string tp2 = R"(, "tensor_parallel": {"autotp_size": 2})";
  ProcessResult tp = run("logged_tp", logged + tp2, 2);
  ASSERT_EQ(tp.exit_code, 0) << tp.describe();
  const int micro_batches = 2 * 6;
  EXPECT_TRUE(summary_has(tp.err, "all_reduce", "8\\.0 KB", (4 * 2 + 2) * micro_batches)) << tp.err;
  EXPECT_TRUE(summary_has(tp.err, "all_reduce", "512\\.0 B", micro_batches)) << tp.err;
  EXPECT_TRUE(summary_has(tp.err, "all_reduce", "1\\.0 KB", micro_batches)) << tp.err;
  // Per step: 2 micro-batches of 12 calls, 10 x 8192 + 512 + 1024 bytes.
  const std::string tp_plan = planned("plan_tp", gpt() + tp2);
  EXPECT_TRUE(
      std::regex_search(tp_plan, std::regex("tensor-parallel allreduce +24 calls, 166912 B")))
      << tp_plan;
  const std::string sp2 = R"(, "sequence_parallel_size": 2)";
  ProcessResult sp = run("logged_sp", logged + sp2, 2);
  ASSERT_EQ(sp.exit_code, 0) << sp.describe();
  EXPECT_TRUE(summary_has(sp.err, "all_to_all_single", "12\\.0 KB", 2 * 2 * micro_batches))
      << sp.err;
  EXPECT_TRUE(summary_has(sp.err, "all_to_all_single", "4\\.0 KB", 2 * 2 * micro_batches))
      << sp.err;
  // Per step: 2 micro-batches, 2 blocks, 2 passes, 2 calls of 12288 + 4096 bytes.
  const std::string sp_plan = planned("plan_sp", gpt() + sp2);
  EXPECT_TRUE(
      std::regex_search(sp_plan, std::regex("sequence-parallel all_to_all +16 calls, 131072 B")))
      << sp_plan;
  // Checkpointed blocks recompute their forward: the attention
  // projection's sum again (5 a block) and both exchanges again; with
  // number_checkpoints 1 the first block only.
  const std::string recomputed = R"(, "activation_checkpointing": {})";
  tp = run("logged_tp_ck", logged + tp2 + recomputed, 2);
  ASSERT_EQ(tp.exit_code, 0) << tp.describe();
  EXPECT_TRUE(summary_has(tp.err, "all_reduce", "8\\.0 KB", (5 * 2 + 2) * micro_batches)) << tp.err;
  EXPECT_TRUE(std::regex_search(planned("plan_tp_ck", gpt() + tp2 + recomputed),
                                std::regex("tensor-parallel allreduce +28 calls, 199680 B")));
  const std::string first_block = R"(, "activation_checkpointing": {"number_checkpoints": 1})";
  tp = run("logged_tp_ck1", logged + tp2 + first_block, 2);
  ASSERT_EQ(tp.exit_code, 0) << tp.describe();
  EXPECT_TRUE(summary_has(tp.err, "all_reduce", "8\\.0 KB", (4 * 2 + 1 + 2) * micro_batches))
      << tp.err;
  EXPECT_TRUE(std::regex_search(planned("plan_tp_ck1", gpt() + tp2 + first_block),
                                std::regex("tensor-parallel allreduce +26 calls, 183296 B")));
  sp = run("logged_sp_ck", logged + sp2 + recomputed, 2);
  ASSERT_EQ(sp.exit_code, 0) << sp.describe();
  EXPECT_TRUE(summary_has(sp.err, "all_to_all_single", "12\\.0 KB", 2 * 3 * micro_batches))
      << sp.err;
  EXPECT_TRUE(std::regex_search(planned("plan_sp_ck", gpt() + sp2 + recomputed),
                                std::regex("sequence-parallel all_to_all +24 calls, 196608 B")));
}

TEST_F(TensorParallelRun, SequenceParallelismRefusesWhatItDoesNotRunNamingTheKey) {
  const auto refused = [&](const std::string& name, const std::string& config, int ranks,
                           const std::string& message) {
    ProcessResult r = run(name, config, ranks);
    EXPECT_NE(r.exit_code, 0) << name;
    EXPECT_NE(r.err.find(message), std::string::npos) << name << ": " << r.err;
  };
  const std::string sp2 = R"(, "sequence_parallel_size": 2)";
  refused("sp_odd", gpt() + R"(, "sequence_parallel_size": 3)", 2,
          "sequence_parallel_size 3 does not divide the 2 ranks");
  refused("sp_heads", gpt(3) + R"(, "sequence_parallel_size": 3)", 3,
          "sequence_parallel_size 3 does not divide the block_size 16");
  refused("sp_mlp",
          R"("train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"lr": 0.01}},
             "train_steps": 2, "model": {"type": "mlp"})" +
              sp2,
          2, "model 'mlp' cannot be split for sequence parallelism");
  refused("sp_own_rank",
          gpt().replace(gpt().find("\"vocab_size\": 255"), 17,
                        "\"vocab_size\": 255, \"sequence_parallel_rank\": 1"),
          1, "sequence_parallel_rank is set by the engine");
}

}  // namespace
}  // namespace dscore::testing
