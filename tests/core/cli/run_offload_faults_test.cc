// NVMe offload's I/O failing under a training run (issue 54, item 4): the
// fault-injecting swapper (tests/fakes/plugins/fake_faulty_swapper.cc),
// named in the config's "plugins": {"swapper": ...}, fails its Nth request
// with EIO, ENOSPC, or a short read reported as success. For each fault,
// during a step and (for reads) during a save: the run ends with exit 1 and
// a message naming the swap file, the byte offset, the error and the fix;
// no swap folder is left; and the last checkpoint resumes to the same final
// parameters, bit for bit, as a run that never failed. And the swap folder
// a run killed with SIGKILL leaves is reclaimed by the next run.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>

#include "tests/core/cli/process.h"
#include "tests/core/cli/run_config.h"

namespace dscore::testing {
namespace {

namespace fs = std::filesystem;

class OffloadFaults : public ::testing::Test {
 protected:
  // The mlp at ZeRO-2 with its optimizer state on NVMe, saving every step.
  std::string config(const std::string& name, const std::string& checkpoint_dir,
                     const std::string& swapper) {
    std::string text = R"({"train_batch_size": 32, "seed": 1, "train_steps": 6,
      "optimizer": {"type": "Adam", "params": {"lr": 0.001}},
      "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": ")" +
                       dir_.file("nvme") + R"("}},
      "model": {"type": "mlp", "input_dim": 8, "hidden_dim": 16, "output_dim": 2,
                "n_hidden_layers": 1},
      "checkpoint_dir": ")" +
                       checkpoint_dir + R"(", "save_interval": 1)";
    if (!swapper.empty())
      text += R"(, "plugins": {"paths": [")" + std::string(DSCORE_TEST_PLUGIN_DIR) +
              R"(/fake_faulty_swapper"], "swapper": )" + swapper + "}";
    return dir_.write(name, text + "}\n").string();
  }
  ProcessResult dscore(const std::vector<std::string>& args) {
    ProcessOptions options;
    options.cwd = dir_.path();
    return run_dscore(args, options);
  }
  // model.safetensors of a checkpoint folder's latest tag, as bytes.
  std::string final_parameters(const std::string& checkpoint_dir, const std::string& out) {
    ProcessResult r = dscore({"zero-to-fp32", checkpoint_dir, dir_.file(out)});
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    return read_text_file(dir_.path() / out / "model.safetensors");
  }
  TempDir dir_{"dscore_offload_faults"};
};

TEST_F(OffloadFaults, EndTheRunNamingTheFileAndTheLastCheckpointResumes) {
  ProcessResult whole = dscore({"run", "--config", config("whole.json", dir_.file("whole"), "")});
  ASSERT_EQ(whole.exit_code, 0) << whole.describe();
  const std::string expected = final_parameters(dir_.file("whole"), "whole_fp32");
  ASSERT_FALSE(expected.empty());

  struct Fault {
    const char* name;
    std::vector<std::string> says;  // one of these is in the message
    bool reads;                     // the fault hits reads (also those of a save)
  };
  const Fault faults[] = {
      {"eio", {"Input/output error (EIO); the drive reported an I/O error"}, true},
      {"enospc", {"No space left on device (ENOSPC); free space on"}, false},
      // A transfer the plugin calls done with half its bytes.
      {"short_read", {"end of file after", "short write: "}, true},
  };
  int resumed = 0;
  for (const Fault& fault : faults) {
    bool in_step = false, in_save = !fault.reads;
    for (int n = 1; n <= 80 && !(in_step && in_save); ++n) {
      SCOPED_TRACE(std::string(fault.name) + " on request " + std::to_string(n));
      const std::string ck = dir_.file(std::string("ck_") + fault.name + std::to_string(n));
      const std::string swapper = R"({"type": "fake_faulty_swapper", "params": {"fail_request": )" +
                                  std::to_string(n) + R"(, "fault": ")" + fault.name + R"("}})";
      ProcessResult r = dscore(
          {"run", "--config", config("fault.json", ck, swapper), "--trust-config-plugin-paths"});
      if (r.exit_code == 0) continue;  // the fault hit no request this fault kind fails
      ASSERT_EQ(r.exit_code, 1) << r.describe();
      EXPECT_NE(r.err.find(dir_.file("nvme") + "/dscore-job"), std::string::npos) << r.err;
      EXPECT_NE(r.err.find(".swp at byte offset "), std::string::npos) << r.err;
      EXPECT_TRUE(std::any_of(fault.says.begin(), fault.says.end(), [&](const std::string& s) {
        return r.err.find(s) != std::string::npos;
      })) << r.err;
      EXPECT_TRUE(fs::is_empty(dir_.file("nvme"))) << "a swap folder was left";
      // Each phase once, after a checkpoint was saved.
      const bool save = r.err.find("cannot save checkpoint") != std::string::npos;
      if ((save ? in_save : in_step) || !fs::exists(ck + "/latest")) continue;
      (save ? in_save : in_step) = true;
      // The last checkpoint, resumed without the fault, ends where the
      // uninterrupted run did.
      ProcessResult resume =
          dscore({"run", "--config", config("resume.json", ck, ""), "--resume", ck});
      ASSERT_EQ(resume.exit_code, 0) << resume.describe();
      EXPECT_EQ(final_parameters(ck, std::string("fp32_") + fault.name + std::to_string(n)),
                expected);
      ++resumed;
    }
    EXPECT_TRUE(in_step) << fault.name << ": no request failed during a step";
    EXPECT_TRUE(in_save) << fault.name << ": no request failed during a save";
  }
  EXPECT_GE(resumed, 4);
}

// A run killed with SIGKILL leaves its NVMe swap folder; the next run on
// that nvme_path removes it, naming it and the bytes freed (with
// "keep_stale" it only says so), and its own ends with it.
TEST(CliRun, ASwapFolderAKilledRunLeftIsReclaimedByTheNext) {
  TempDir dir("dscore_cli_run");
  const fs::path nvme = dir.path() / "nvme";
  auto config = [&](const std::string& aio) {
    MlpRunConfig cfg;
    cfg.train_steps = 4;
    cfg.extra = R"("zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", )"
                R"("nvme_path": ")" +
                nvme.string() + R"("}}, "checkpoint_dir": ")" + dir.file("ck") +
                R"(", "save_interval": 2)" + aio;
    return dir.write("ds_config.json", cfg.text()).string();
  };
  auto job_folders = [&] {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(nvme, ec)) names.push_back(e.path().string());
    return names;
  };
  ProcessOptions killed;
  killed.env["DSCORE_FAILPOINTS"] = "checkpoint.before_latest";  // SIGKILL at the first save
  ProcessResult first = run_dscore({"run", "--config", config("")}, killed);
  ASSERT_EQ(first.signal, SIGKILL) << first.describe();
  const auto left = job_folders();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_TRUE(fs::exists(left[0] + "/owner.rank0"));

  ProcessResult kept = run_dscore({"run", "--config", config(R"(, "aio": {"keep_stale": true})")});
  ASSERT_EQ(kept.exit_code, 0) << kept.describe();
  EXPECT_NE(kept.err.find("kept swap folder " + left[0] + " of a job that is gone"),
            std::string::npos)
      << kept.err;
  EXPECT_EQ(job_folders(), left);  // its own folder went with it

  ProcessResult next = run_dscore({"run", "--config", config("")});
  ASSERT_EQ(next.exit_code, 0) << next.describe();
  EXPECT_NE(next.err.find("removed swap folder " + left[0] + " of a job that is gone (pid "),
            std::string::npos)
      << next.err;
  EXPECT_NE(next.err.find(" freed"), std::string::npos) << next.err;
  EXPECT_TRUE(job_folders().empty());
}

}  // namespace
}  // namespace dscore::testing
