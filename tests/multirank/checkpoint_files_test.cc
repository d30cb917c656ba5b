// Checkpoint files on disk (issue 5): damage is detected with a message
// naming the file and what is wrong; `dscore zero-to-fp32` writes what
// safetensors readers load and equals the gathered masters; `dscore run`
// saves every save_interval steps and resumes with --resume exactly; a full
// disk fails a save cleanly while training goes on.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/checkpoint/checkpoint_info.h"
#include "core/checkpoint/safetensors.h"
#include "tests/multirank/harness.h"

namespace dscore::testing {
namespace {

namespace fs = std::filesystem;

RunSpec small_spec() {
  RunSpec spec;
  spec.world = 2;
  spec.stage = 2;
  spec.steps = 6;
  return spec;
}

// One saved checkpoint (2 ranks, stage 2, after 3 steps), copied per test.
class DamagedCheckpoint : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    source_ = new TempDir("dscore_damage_src");
    const RunResult r = run_workers(small_spec(), {"--save", (source_->path() / "ck").string(),
                                                   "--save-step", "3", "--stop-after-save"});
    ASSERT_TRUE(r.ok()) << r.process.describe();
  }
  static void TearDownTestSuite() { delete source_; }
  void SetUp() override { fs::copy(source_->path() / "ck", ck(), fs::copy_options::recursive); }
  fs::path ck() const { return dir_.path() / "ck"; }
  fs::path shard(int rank) const {
    return ck() / "global_step3" /
           ("zero_pp_rank_" + std::to_string(rank) + "_mp_rank_00_optim_states.safetensors");
  }
  // Loads the copy at 2 ranks; returns everything the job printed.
  std::string load_error() const {
    const RunResult r = run_workers(small_spec(), {"--load", ck().string()});
    EXPECT_FALSE(r.ok()) << "loading a damaged checkpoint succeeded";
    return r.process.out + r.process.err;
  }
  static TempDir* source_;
  TempDir dir_{"dscore_damage"};
};
TempDir* DamagedCheckpoint::source_ = nullptr;

void flip_byte(const fs::path& file, uint64_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ 0x10));
}

TEST_F(DamagedCheckpoint, IntactCopyLoads) {
  const RunResult r = run_workers(small_spec(), {"--load", ck().string()});
  EXPECT_TRUE(r.ok()) << r.process.describe();
}

TEST_F(DamagedCheckpoint, FlippedDataByteNamesFileAndTensor) {
  auto file = checkpoint::SafetensorsReader::open(shard(1).string());
  ASSERT_TRUE(file.ok()) << file.status().message();
  const checkpoint::TensorInfo& t = file->tensors().back();
  const std::string name = t.name;
  flip_byte(shard(1), t.offset + t.bytes / 2);
  const std::string err = load_error();
  EXPECT_NE(err.find(shard(1).filename().string()), std::string::npos) << err;
  EXPECT_NE(err.find("tensor " + name + " fails its checksum"), std::string::npos) << err;
}

TEST_F(DamagedCheckpoint, FlippedHeaderByteIsDetected) {
  flip_byte(shard(0), 40);  // inside the JSON header
  const std::string err = load_error();
  EXPECT_NE(err.find(shard(0).filename().string()), std::string::npos) << err;
  EXPECT_TRUE(err.find("corrupt") != std::string::npos ||
              err.find("truncated") != std::string::npos)
      << err;
}

TEST_F(DamagedCheckpoint, TruncatedShardIsReported) {
  fs::resize_file(shard(1), fs::file_size(shard(1)) - 100);
  const std::string err = load_error();
  EXPECT_NE(err.find(shard(1).filename().string()), std::string::npos) << err;
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;
}

TEST_F(DamagedCheckpoint, MissingShardIsNamed) {
  fs::remove(shard(1));
  const std::string err = load_error();
  EXPECT_NE(err.find("is missing " + shard(1).filename().string()), std::string::npos) << err;
  EXPECT_NE(err.find("saved by 2 rank(s)"), std::string::npos) << err;
}

TEST_F(DamagedCheckpoint, LatestNamingAMissingTag) {
  std::ofstream(ck() / "latest") << "global_step99";
  const std::string err = load_error();
  EXPECT_NE(err.find("latest names tag global_step99"), std::string::npos) << err;
  EXPECT_NE(err.find("does not exist"), std::string::npos) << err;
}

TEST_F(DamagedCheckpoint, NoLatestAtAll) {
  fs::remove(ck() / "latest");
  const std::string err = load_error();
  EXPECT_NE(err.find("no checkpoint in"), std::string::npos) << err;
}

TEST_F(DamagedCheckpoint, ADifferentModelIsRefused) {
  RunSpec other = small_spec();
  other.hidden = 32;
  const RunResult r = run_workers(other, {"--load", ck().string()});
  EXPECT_FALSE(r.ok());
  const std::string err = r.process.out + r.process.err;
  EXPECT_NE(err.find("with shape"), std::string::npos) << err;
}

TEST_F(DamagedCheckpoint, InspectVerifiesAndReportsCorruption) {
  ProcessResult good = run_dscore({"checkpoint", "inspect", ck().string()});
  EXPECT_EQ(good.exit_code, 0) << good.describe();
  EXPECT_NE(good.out.find("saved by 2 rank(s), ZeRO stage 2"), std::string::npos) << good.out;
  EXPECT_NE(good.out.find("every checksum matches"), std::string::npos) << good.out;
  auto file = checkpoint::SafetensorsReader::open(shard(0).string());
  ASSERT_TRUE(file.ok());
  flip_byte(shard(0), file->tensors().front().offset);
  ProcessResult bad = run_dscore({"checkpoint", "inspect", ck().string()});
  EXPECT_EQ(bad.exit_code, 1) << bad.describe();
  EXPECT_NE(bad.out.find("CORRUPT"), std::string::npos) << bad.out;
  EXPECT_NE(bad.err.find("fails its checksum"), std::string::npos) << bad.err;
}

// zero-to-fp32 of a stage-3 save by 2 ranks, sharded: every tensor equals
// the gathered fp32 masters.
TEST(ZeroToFp32, ShardedOutputEqualsTheGatheredMasters) {
  TempDir dir("dscore_z2f");
  const std::string ck = (dir.path() / "ck").string();
  RunSpec spec = small_spec();
  spec.stage = 3;
  const RunResult r =
      run_workers(spec, {"--save", ck, "--save-step", "3", "--stop-after-save", "--dump-state"});
  ASSERT_TRUE(r.ok()) << r.process.describe();
  const std::vector<float>& master = r.state.at("fp32");
  const fs::path out = dir.path() / "hf";
  ProcessResult z = run_dscore({"zero-to-fp32", ck, out.string(), "--max-shard-size", "10KB"});
  ASSERT_EQ(z.exit_code, 0) << z.describe();
  ASSERT_TRUE(fs::exists(out / "model.safetensors.index.json")) << z.out;
  auto info = checkpoint::open_checkpoint(ck, "");
  ASSERT_TRUE(info.ok()) << info.status().message();
  const std::string index = read_text_file(out / "model.safetensors.index.json");
  size_t offset = 0, shards_seen = 0;
  for (const checkpoint::SavedParam& p : info->state.params) {
    // The index maps the name to its shard; find it among the shards.
    bool found = false;
    for (const auto& entry : fs::directory_iterator(out)) {
      if (entry.path().extension() != ".safetensors") continue;
      auto file = checkpoint::SafetensorsReader::open(entry.path().string());
      ASSERT_TRUE(file.ok()) << file.status().message();
      const checkpoint::TensorInfo* t = file->find(p.name);
      if (t == nullptr) continue;
      found = true;
      EXPECT_EQ(t->shape, p.shape) << p.name;
      std::vector<float> values(static_cast<size_t>(t->numel()));
      ASSERT_TRUE(file->read_verified(*t, values.data()).ok());
      EXPECT_TRUE(std::equal(values.begin(), values.end(),
                             master.begin() + static_cast<std::ptrdiff_t>(offset)))
          << p.name;
      EXPECT_NE(index.find("\"" + p.name + "\": \"" + entry.path().filename().string() + "\""),
                std::string::npos)
          << index;
    }
    EXPECT_TRUE(found) << p.name;
    offset += static_cast<size_t>(p.numel);
  }
  for (const auto& entry : fs::directory_iterator(out))
    shards_seen += entry.path().extension() == ".safetensors";
  EXPECT_GT(shards_seen, 1u);
  EXPECT_EQ(offset, master.size());
}

// load_optimizer_states=false: the weights come from the model states (here
// fp32, so exactly the masters), the optimizer state stays fresh.
TEST(WeightsOnly, LoadsTheWeightsAndNotTheOptimizerState) {
  TempDir dir("dscore_weights_only");
  const std::string ck = (dir.path() / "ck").string();
  const RunResult saved = run_workers(
      small_spec(), {"--save", ck, "--save-step", "3", "--stop-after-save", "--dump-state"});
  ASSERT_TRUE(saved.ok()) << saved.process.describe();
  RunSpec other = small_spec();
  other.world = 1;
  other.stage = 3;
  const RunResult loaded =
      run_workers(other, {"--load", ck, "--load-weights-only", "--dump-state"});
  ASSERT_TRUE(loaded.ok()) << loaded.process.describe();
  EXPECT_TRUE(loaded.state.at("fp32") == saved.state.at("fp32"));
  const std::vector<float>& m = loaded.state.at("exp_avg");
  EXPECT_TRUE(std::all_of(m.begin(), m.end(), [](float v) { return v == 0.0f; }))
      << "optimizer state was loaded";
  EXPECT_FALSE(std::all_of(saved.state.at("exp_avg").begin(), saved.state.at("exp_avg").end(),
                           [](float v) { return v == 0.0f; }));
}

std::string run_config(const std::string& ck_dir, int save_interval) {
  RunSpec spec = small_spec();
  spec.steps = 8;
  spec.extra =
      "\"checkpoint_dir\": \"" + ck_dir + "\", \"save_interval\": " + std::to_string(save_interval);
  return spec.config_json();
}

// `dscore run` 8 steps == 4 steps, then --resume for 4 more: the final
// checkpoints' fp32 masters are the same bytes.
TEST(RunResume, ResumedRunEndsWhereTheUninterruptedOneDoes) {
  TempDir dir("dscore_run_resume");
  const std::string a = (dir.path() / "a").string(), b = (dir.path() / "b").string();
  const fs::path config_a = dir.write("a.json", run_config(a, 4));
  const fs::path config_b = dir.write("b.json", run_config(b, 4));
  ProcessOptions mpi;
  mpi.env = mpi_test_env();
  ProcessResult full = run_dscore(
      {"run", "--trust-config-plugin-paths", "--config", config_a.string(), "-n", "2"}, mpi);
  ASSERT_EQ(full.exit_code, 0) << full.describe();
  EXPECT_TRUE(fs::exists(fs::path(a) / "global_step4") && fs::exists(fs::path(a) / "global_step8"));
  ProcessResult part = run_dscore({"run", "--trust-config-plugin-paths", "--config",
                                   config_b.string(), "-n", "2", "--steps", "4"},
                                  mpi);
  ASSERT_EQ(part.exit_code, 0) << part.describe();
  ProcessResult rest = run_dscore({"run", "--trust-config-plugin-paths", "--config",
                                   config_b.string(), "-n", "2", "--resume", b},
                                  mpi);
  ASSERT_EQ(rest.exit_code, 0) << rest.describe();
  EXPECT_NE(rest.out.find("resuming at step 4 of 8") + rest.err.find("resuming at step 4 of 8"),
            2 * std::string::npos)
      << rest.describe();
  for (const std::string& d : {a, b}) {
    ProcessResult z = run_dscore({"zero-to-fp32", d, d + "_hf"});
    ASSERT_EQ(z.exit_code, 0) << z.describe();
  }
  auto fa = checkpoint::SafetensorsReader::open(a + "_hf/model.safetensors");
  auto fb = checkpoint::SafetensorsReader::open(b + "_hf/model.safetensors");
  ASSERT_TRUE(fa.ok() && fb.ok());
  ASSERT_EQ(fa->tensors().size(), fb->tensors().size());
  for (size_t i = 0; i < fa->tensors().size(); ++i)
    EXPECT_EQ(fa->tensors()[i].checksum, fb->tensors()[i].checksum) << fa->tensors()[i].name;
}

// The checkpoint folder on a 600 KiB tmpfs (a private mount namespace):
// the first save fits, the next ones hit ENOSPC. Training goes on to the
// end, the error names the full disk, the run exits 1 because the final
// save failed, and the first checkpoint still loads.
TEST(DiskFull, SaveFailsCleanlyAndTrainingGoesOn) {
  if (std::system("unshare -rm true >/dev/null 2>&1") != 0)
    GTEST_SKIP()
        << "unshare -rm (a private mount namespace for a small tmpfs) is not permitted here";
  TempDir dir("dscore_full");
  const fs::path mount = dir.path() / "disk";
  fs::create_directories(mount);
  RunSpec spec = small_spec();
  spec.world = 1;
  spec.hidden = 128;  // ~45K parameters: ~0.5 MiB per checkpoint (fp32 + Adam)
  spec.steps = 6;
  spec.extra = "\"checkpoint_dir\": \"" + mount.string() + "/ck\", \"save_interval\": 2";
  const fs::path config = dir.write("full.json", spec.config_json());
  const std::string script = "mount -t tmpfs -o size=600k none " + mount.string() + " && " +
                             DSCORE_EXE + " run --trust-config-plugin-paths --config " +
                             config.string() + " && exit 0; rc=$?; " + DSCORE_EXE +
                             " checkpoint inspect " + mount.string() + "/ck; exit $rc";
  ProcessResult r = run_process({"/usr/bin/unshare", "-rm", "/bin/sh", "-c", script});
  const std::string all = r.out + r.err;
  EXPECT_EQ(r.exit_code, 1) << r.describe();
  EXPECT_NE(all.find("the disk is full"), std::string::npos) << all;
  EXPECT_NE(all.find("training goes on"), std::string::npos) << all;
  EXPECT_NE(all.find("step 6/6"), std::string::npos) << "training must reach the last step\n"
                                                     << all;
  EXPECT_NE(all.find("the final checkpoint was not saved"), std::string::npos) << all;
  EXPECT_NE(all.find("tag global_step2; latest: global_step2"), std::string::npos) << all;
  EXPECT_NE(all.find("every checksum matches"), std::string::npos) << all;
}

}  // namespace
}  // namespace dscore::testing
