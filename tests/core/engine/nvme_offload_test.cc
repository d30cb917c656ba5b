// Optimizer state on NVMe ("offload_optimizer": {"device": "nvme"}, core/
// owned_state/nvme_state.h) against the same run in memory, in process (ranks
// are threads on the loopback backend: tests/fakes/in_process_job.h):
// - bitwise the same losses and final parameters at stages 1-3, 1 and 2
//   ranks, fp32 and bf16, every pipeline_read/pipeline_write combination,
//   on both swapper backends (DSCORE_NVME_BACKEND, read each time a swapper
//   is created, so each run picks its own);
// - checkpoints saved with offload load without it and the reverse, and
//   across world sizes;
// - a full disk (a small tmpfs), the swapper's EIO or short transfer, and
//   an unusable nvme_path end the run with an error naming the file or
//   folder, and an earlier checkpoint still loads as saved and resumes;
// - the swap files live under nvme_path/dscore-job*/rank<R>/ during the run
//   and are gone after it;
// - training, the plan, checkpoints and a full disk as from a GPU
//   (DSCORE_CPU_DEVICE_MEMORY=separate).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/falloc.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/engine/engine_testing.h"
#include "tests/fakes/in_process_job.h"

namespace dscore {
namespace {

namespace fs = std::filesystem;
using testing::InProcessHooks;
using testing::InProcessResult;
using testing::run_in_process_job;

constexpr int kSteps = 6;

// 7 -> 150 -> 150 -> 150 -> 3: 1,200 + 2 x 22,650 + 453 = 46,953 parameters.
// With sub_group_size 4096 a rank owns 12 (1 rank) or 6 (2 ranks) tiles, and
// tiles cut through the 22,650-element layers.
constexpr int64_t kParams = 46953;

struct Offload {
  Offload(std::string path = "", bool read = false, bool write = false, std::string params = "",
          int64_t in_cpu = 0)
      : nvme_path(std::move(path)),
        pipeline_read(read),
        pipeline_write(write),
        param_path(std::move(params)),
        max_in_cpu(in_cpu) {}
  std::string nvme_path;  // "" = no optimizer offload
  bool pipeline_read;
  bool pipeline_write;
  std::string param_path;  // "" = parameters in memory; else offload_param nvme (stage 3)
  int64_t max_in_cpu;      // offload_param.max_in_cpu
};

// `world` ranks with micro-batches of 3 and `gas` accumulation steps.
std::string config(int stage, int world, const std::string& precision, const Offload& offload,
                   int gas = 1) {
  std::string c = R"("train_micro_batch_size_per_gpu": 3, "train_batch_size": )" +
                  std::to_string(3 * world * gas) + R"(, "gradient_accumulation_steps": )" +
                  std::to_string(gas) + R"(, "train_steps": )" + std::to_string(kSteps) +
                  R"(, "seed": 7, "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.003, "warmup_num_steps": 3}},
  "model": {"type": "mlp", "input_dim": 7, "hidden_dim": 150, "output_dim": 3, "n_hidden_layers": 3},
  "zero_optimization": {"stage": )" +
                  std::to_string(stage) + R"(, "reduce_bucket_size": 5000, "sub_group_size": 4096)";
  if (!offload.nvme_path.empty()) {
    const int buffers = 1 + (offload.pipeline_read ? 1 : 0) + (offload.pipeline_write ? 1 : 0);
    c += R"(, "offload_optimizer": {"device": "nvme", "nvme_path": ")" + offload.nvme_path +
         R"(", "pipeline_read": )" + (offload.pipeline_read ? "true" : "false") +
         R"(, "pipeline_write": )" + (offload.pipeline_write ? "true" : "false") +
         R"(, "buffer_count": )" + std::to_string(buffers) + "}";
  }
  if (!offload.param_path.empty())
    c += R"(, "offload_param": {"device": "nvme", "nvme_path": ")" + offload.param_path +
         R"(", "max_in_cpu": )" + std::to_string(offload.max_in_cpu) + "}";
  c += "}";
  // As in the stage tests: bf16 gradients accumulate in bf16 at every stage.
  if (precision == "bf16")
    c += R"(, "bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "bf16"})";
  // A loss scale of 2^40 overflows: the first steps are skipped.
  if (precision == "fp16") c += R"(, "fp16": {"enabled": true, "initial_scale_power": 40})";
  return c;
}

// DSCORE_NVME_BACKEND for the runs in its scope (each swapper reads it when
// it is created; no job runs while it changes).
class BackendScope {
 public:
  explicit BackendScope(const std::string& backend) {
    ::setenv("DSCORE_NVME_BACKEND", backend.c_str(), 1);
  }
  ~BackendScope() { ::unsetenv("DSCORE_NVME_BACKEND"); }
};

// DSCORE_CPU_DEVICE_MEMORY for the runs in its scope: "separate" makes the
// CPU device's memory the host's to reach only through copies, so the
// engine takes the paths a GPU takes.
class SeparateMemoryScope {
 public:
  SeparateMemoryScope() { ::setenv("DSCORE_CPU_DEVICE_MEMORY", "separate", 1); }
  ~SeparateMemoryScope() { ::unsetenv("DSCORE_CPU_DEVICE_MEMORY"); }
};

InProcessResult run_with(const std::string& backend, const std::string& body, int world,
                         const InProcessHooks& hooks = {}) {
  BackendScope scope(backend);
  return run_in_process_job(body, world, hooks);
}

// The dscore-job* folders under `nvme_path`.
std::vector<fs::path> job_folders(const std::string& nvme_path) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(nvme_path, ec))
    if (e.path().filename().string().rfind("dscore-job", 0) == 0) out.push_back(e.path());
  return out;
}

// From after_each_step: this rank's swap files exist, sized for its part.
Status check_swap_files(const std::string& nvme_path, int rank, bool master_on_disk) {
  const std::vector<fs::path> jobs = job_folders(nvme_path);
  if (jobs.size() != 1)
    return internal_error("expected one dscore-job* folder under " + nvme_path + ", found " +
                          std::to_string(jobs.size()));
  const fs::path folder = jobs[0] / ("rank" + std::to_string(rank));
  std::error_code ec;
  int files = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(folder, ec)) {
    if (e.path().extension() != ".swp" || e.file_size() == 0)
      return internal_error("unexpected swap file " + e.path().string());
    ++files;
  }
  const int expected = 2 + (master_on_disk ? 1 : 0);  // AdamW: exp_avg, exp_avg_sq
  if (ec || files != expected)
    return internal_error(folder.string() + " holds " + std::to_string(files) +
                          " swap files, expected " + std::to_string(expected));
  return Status::Ok();
}

// The gathered parameters and every optimizer state slot (collective).
struct Snapshot {
  std::vector<float> params;
  std::vector<std::vector<float>> slots;
};

Status snapshot(Engine& e, Snapshot* out) {
  DSCORE_RETURN_IF_ERROR(EngineTesting::gather_parameters(e, &out->params));
  out->slots.resize(EngineTesting::optimizer_state_slots(e).size());
  for (size_t k = 0; k < out->slots.size(); ++k)
    DSCORE_RETURN_IF_ERROR(EngineTesting::gather_optimizer_state(e, k, &out->slots[k]));
  return Status::Ok();
}

// The last `n` losses of a run.
std::vector<double> tail(const std::vector<double>& losses, size_t n) {
  return std::vector<double>(losses.end() - static_cast<std::ptrdiff_t>(n), losses.end());
}

// Saves a checkpoint into `dir` after step `at` (global step at + 1) and
// keeps rank 0's snapshot of what it saved.
InProcessHooks save_at(int64_t at, const std::string& dir, Snapshot* saved) {
  InProcessHooks hooks;
  hooks.after_each_step = [=](Engine& e, int64_t step) -> Status {
    if (step != at) return Status::Ok();
    DSCORE_RETURN_IF_ERROR(e.save_checkpoint(dir));
    Snapshot s;
    DSCORE_RETURN_IF_ERROR(snapshot(e, &s));
    if (e.rank() == 0) *saved = std::move(s);
    return Status::Ok();
  };
  return hooks;
}

// Loads `dir` before training and keeps rank 0's snapshot of what it loaded.
InProcessHooks load_from(const std::string& dir, Snapshot* loaded) {
  InProcessHooks hooks;
  hooks.before_training = [=](Engine& e) -> Status {
    DSCORE_RETURN_IF_ERROR(e.load_checkpoint(dir).status());
    Snapshot s;
    DSCORE_RETURN_IF_ERROR(snapshot(e, &s));
    if (e.rank() == 0) *loaded = std::move(s);
    return Status::Ok();
  };
  return hooks;
}

void expect_same_state(const Snapshot& a, const Snapshot& b, const std::string& what) {
  ASSERT_EQ(a.params.size(), static_cast<size_t>(kParams)) << what;
  EXPECT_EQ(a.params, b.params) << what;
  ASSERT_EQ(a.slots.size(), 2u) << what;
  EXPECT_EQ(a.slots, b.slots) << what;
}

// Relative 1e-4 with a 1e-6 floor (the stage tests' tolerance across world
// sizes: the same math, other reduction orders).
void expect_close(const std::vector<double>& a, const std::vector<double>& b,
                  const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], 1e-4 * std::fabs(b[i]) + 1e-6) << what << " value " << i;
}

// Takes the disk away under a running job: frees the pages of every swap
// file under `nvme_path` (as a copy-on-write file system such as btrfs or
// ZFS needs new blocks for every overwrite) and fills the file system with
// another file, so the next swap write meets ENOSPC.
Status fill_disk_under(const std::string& nvme_path) {
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(nvme_path)) {
    if (e.path().extension() != ".swp") continue;
    const int fd = ::open(e.path().c_str(), O_RDWR);
    if (fd < 0) return internal_error("open " + e.path().string() + ": " + std::strerror(errno));
    const int rc = ::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                               static_cast<off_t>(e.file_size()));
    const int error = errno;
    ::close(fd);
    if (rc != 0) return internal_error("punch " + e.path().string() + ": " + std::strerror(error));
  }
  const std::string filler = nvme_path + "/filler";
  const int fd = ::open(filler.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return internal_error("open " + filler + ": " + std::strerror(errno));
  const std::vector<char> chunk(4096, 'x');
  while (::write(fd, chunk.data(), chunk.size()) > 0) {
  }
  const int error = errno;
  ::close(fd);
  if (error != ENOSPC) return internal_error("filling " + filler + ": " + std::strerror(error));
  return Status::Ok();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A scratch folder per test, and tmpfs mounts in it, removed at the end.
class NvmeOffload : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "dscore-nvme-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
    root_ = pattern;
  }
  void TearDown() override {
    for (const std::string& m : mounts_) ::umount2(m.c_str(), MNT_DETACH);
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  std::string dir(const std::string& name) {
    const fs::path p = root_ / name;
    fs::create_directories(p);
    return p.string();
  }
  // A tmpfs of `options` at root/name; "" with the reason in *why when the
  // test cannot mount (not root, no CAP_SYS_ADMIN).
  std::string tmpfs(const std::string& name, const std::string& options, std::string* why) {
    const std::string path = dir(name);
    if (::mount("tmpfs", path.c_str(), "tmpfs", 0, options.c_str()) != 0) {
      *why = "cannot mount a tmpfs at " + path + " (" + std::strerror(errno) +
             "): this test needs root or CAP_SYS_ADMIN";
      return "";
    }
    mounts_.push_back(path);
    return path;
  }
  // Whether io_uring works here: one short offloaded run asks for it.
  bool io_uring_available(std::string* why) {
    std::string body = config(1, 1, "fp32", {dir("probe")});
    body.replace(body.find(R"("train_steps": 6)"), 16, R"("train_steps": 1)");
    const InProcessResult r = run_with("io_uring", body, 1);
    if (r.error.empty()) return true;
    *why = r.error;
    EXPECT_NE(r.error.find("DSCORE_NVME_BACKEND=io_uring, but"), std::string::npos) << r.error;
    return false;
  }
  std::vector<std::string> backends() {
    std::string why;
    if (io_uring_available(&why)) return {"io_uring", "threads"};
    std::cout << "[  NOTE    ] io_uring is unavailable here, only the threads backend runs: " << why
              << "\n";
    return {"threads"};
  }

  fs::path root_;
  std::vector<std::string> mounts_;
};

// Every stage, world size and precision, on both backends; the four
// pipeline_read/pipeline_write combinations rotate over the cases so each
// meets both backends and both precisions.
TEST_F(NvmeOffload, TrainsBitwiseAsInMemory) {
  const std::vector<std::string> kinds = backends();
  int index = 0;
  for (int stage = 1; stage <= 3; ++stage)
    for (int world : {1, 2})
      for (const std::string precision : {"fp32", "bf16"}) {
        const InProcessResult memory =
            run_in_process_job(config(stage, world, precision, {}), world);
        ASSERT_EQ(memory.error, "");
        ASSERT_EQ(memory.losses.size(), static_cast<size_t>(kSteps));
        ASSERT_EQ(memory.params.size(), static_cast<size_t>(kParams));
        for (const std::string& backend : kinds) {
          const int combo = index++ % 4;
          Offload offload{dir("swap" + std::to_string(index)), (combo & 1) != 0, (combo & 2) != 0};
          const std::string what = "stage " + std::to_string(stage) +
                                   " W=" + std::to_string(world) + " " + precision + " " + backend +
                                   " pipeline_read " + std::to_string(offload.pipeline_read) +
                                   " pipeline_write " + std::to_string(offload.pipeline_write);
          InProcessHooks hooks;
          std::mutex mutex;
          int checked = 0;
          hooks.after_each_step = [&](Engine& e, int64_t) -> Status {
            DSCORE_RETURN_IF_ERROR(
                check_swap_files(offload.nvme_path, e.rank(), precision != "fp32"));
            std::lock_guard<std::mutex> lock(mutex);
            ++checked;
            return Status::Ok();
          };
          const InProcessResult nvme =
              run_with(backend, config(stage, world, precision, offload), world, hooks);
          ASSERT_EQ(nvme.error, "") << what;
          EXPECT_EQ(checked, kSteps * world) << what;
          EXPECT_EQ(nvme.losses, memory.losses) << what;
          EXPECT_EQ(nvme.params, memory.params) << what;
          EXPECT_TRUE(job_folders(offload.nvme_path).empty()) << what << ": swap files left";
        }
      }
}

// Stage 3, bf16 (the master weights on disk too), and stage 1, fp32 (only
// the slots on disk), 2 ranks: saved after step 3 of 6 with offload and
// resumed without it, and the reverse, each equal to the uninterrupted run;
// then the stage-3 checkpoints resumed on 1 rank (offloaded both times),
// bitwise as the same resume without offload, and within the world-size
// tolerance of the uninterrupted run.
TEST_F(NvmeOffload, CheckpointsMoveBetweenOffloadedAndInMemoryRuns) {
  constexpr int64_t kSaveAfter = 2;
  constexpr size_t kResumed = kSteps - kSaveAfter - 1;
  InProcessResult whole;
  std::string memory_ckpt, nvme_ckpt;
  Snapshot saved_memory, saved_nvme, loaded;
  for (const auto& [stage, precision] : {std::pair{1, "fp32"}, std::pair{3, "bf16"}}) {
    const std::string what = "stage " + std::to_string(stage) + " " + precision;
    const Offload offload{dir("swap" + what), true, true};
    const std::string with_nvme = config(stage, 2, precision, offload);
    const std::string in_memory = config(stage, 2, precision, {});
    memory_ckpt = dir("ckpt_memory" + what);
    nvme_ckpt = dir("ckpt_nvme" + what);
    whole = run_in_process_job(in_memory, 2, save_at(kSaveAfter, memory_ckpt, &saved_memory));
    ASSERT_EQ(whole.error, "") << what;
    const InProcessResult nvme_whole =
        run_with("auto", with_nvme, 2, save_at(kSaveAfter, nvme_ckpt, &saved_nvme));
    ASSERT_EQ(nvme_whole.error, "") << what;
    EXPECT_EQ(nvme_whole.losses, whole.losses) << what;
    expect_same_state(saved_nvme, saved_memory, what + ": saved with and without offload");

    // Offloaded -> in memory.
    InProcessResult r = run_in_process_job(in_memory, 2, load_from(nvme_ckpt, &loaded));
    ASSERT_EQ(r.error, "") << what;
    expect_same_state(loaded, saved_nvme, what + ": loaded without offload");
    EXPECT_EQ(r.losses, tail(whole.losses, kResumed)) << what;
    EXPECT_EQ(r.params, whole.params) << what;

    // In memory -> offloaded.
    r = run_with("auto", with_nvme, 2, load_from(memory_ckpt, &loaded));
    ASSERT_EQ(r.error, "") << what;
    expect_same_state(loaded, saved_memory, what + ": loaded with offload");
    EXPECT_EQ(r.losses, tail(whole.losses, kResumed)) << what;
    EXPECT_EQ(r.params, whole.params) << what;
    EXPECT_TRUE(job_folders(offload.nvme_path).empty()) << what;
  }

  // Stage 3 bf16, 2 ranks -> 1 (the same global batch: 2 micro-batches per
  // step on the one rank).
  const Offload one_rank{dir("swap1"), false, true};
  const InProcessResult nvme_one =
      run_with("auto", config(3, 1, "bf16", one_rank, 2), 1, load_from(nvme_ckpt, &loaded));
  ASSERT_EQ(nvme_one.error, "");
  expect_same_state(loaded, saved_nvme, "loaded on 1 rank with offload");
  const InProcessResult memory_one =
      run_in_process_job(config(3, 1, "bf16", {}, 2), 1, load_from(memory_ckpt, &loaded));
  ASSERT_EQ(memory_one.error, "");
  EXPECT_EQ(nvme_one.losses, memory_one.losses);
  EXPECT_EQ(nvme_one.params, memory_one.params);
  expect_close(nvme_one.losses, tail(whole.losses, kResumed), "losses on 1 rank vs 2");
  std::vector<double> one(nvme_one.params.begin(), nvme_one.params.end());
  std::vector<double> two(whole.params.begin(), whole.params.end());
  expect_close(one, two, "parameters on 1 rank vs 2");
}

// A tmpfs too small for the swap files (1 rank, fp32: 2 AdamW slots of
// 49,152 x 4 bytes = 384 KiB): refused before anything is allocated, with
// the numbers, the folder and the setting to change.
TEST_F(NvmeOffload, ADiskTooSmallIsRefusedBeforeTheRunStarts) {
  std::string why;
  const std::string small = tmpfs("small", "size=128k", &why);
  if (small.empty()) GTEST_SKIP() << why;
  const InProcessResult r = run_with("auto", config(1, 1, "fp32", {small}), 1);
  EXPECT_TRUE(contains(r.error, "does not fit")) << r.error;
  EXPECT_TRUE(contains(r.error, "nvme_path \"" + small + "\"")) << r.error;
  EXPECT_TRUE(contains(r.error, "384.00 KiB")) << r.error;
  EXPECT_TRUE(job_folders(small).empty());
  EXPECT_TRUE(r.losses.empty());
}

// The plan fits, then the disk fills during the run (after step 2 of 6): the
// run ends with ENOSPC naming the swap file and what to do, the swap files
// are removed, and the checkpoint saved after step 1 (in another folder)
// loads as it was saved and resumes as the uninterrupted run.
TEST_F(NvmeOffload, ADiskFillingUpEndsTheRunAndKeepsTheLastCheckpoint) {
  std::string why;
  const std::string disk = tmpfs("disk", "size=2m", &why);
  if (disk.empty()) GTEST_SKIP() << why;
  const InProcessResult whole = run_in_process_job(config(2, 2, "bf16", {}), 2);
  ASSERT_EQ(whole.error, "");
  // In memory, and staged as from a GPU.
  for (const bool separate : {false, true}) {
    const std::string what = separate ? "staged" : "in memory";
    const std::string ckpt = dir("ckpt" + what);
    std::optional<SeparateMemoryScope> scope;
    if (separate) scope.emplace();
    Snapshot saved;
    InProcessHooks hooks = save_at(0, ckpt, &saved);
    const auto save = hooks.after_each_step;
    hooks.after_each_step = [&](Engine& e, int64_t step) -> Status {
      DSCORE_RETURN_IF_ERROR(save(e, step));
      return step == 1 && e.rank() == 0 ? fill_disk_under(disk) : Status::Ok();
    };
    const InProcessResult failed = run_with("auto", config(2, 2, "bf16", {disk}), 2, hooks);
    EXPECT_TRUE(contains(failed.error, "ENOSPC")) << what << ": " << failed.error;
    EXPECT_TRUE(contains(failed.error, disk + "/dscore-job")) << failed.error;  // the file
    EXPECT_TRUE(contains(failed.error, "nvme_path")) << failed.error;           // the fix
    EXPECT_TRUE(job_folders(disk).empty()) << what << ": swap files left after the failure";
    for (const fs::directory_entry& e : fs::directory_iterator(disk))  // the filler
      fs::remove(e.path());

    Snapshot loaded;
    const InProcessResult resumed =
        run_with("auto", config(2, 2, "bf16", {dir("swap" + what)}), 2, load_from(ckpt, &loaded));
    ASSERT_EQ(resumed.error, "") << what;
    expect_same_state(loaded, saved, what + ": the checkpoint saved before the disk filled");
    EXPECT_EQ(resumed.losses, tail(whole.losses, kSteps - 1)) << what;
    EXPECT_EQ(resumed.params, whole.params) << what;
  }
}

// The swapper failing under the engine (the fault-injecting swapper of
// tests/fakes/plugins, named by "plugins": {"swapper": ...}): an EIO, or a
// transfer the plugin calls done with half its bytes, on each rank's 120th
// request (after the checkpoint of step 1, before the last step) ends the
// run naming the swap file and the offset; the swap files are removed; the
// checkpoint loads as saved and resumes as the uninterrupted run.
TEST_F(NvmeOffload, SwapperFaultsEndTheRunAndTheLastCheckpointResumes) {
  const InProcessResult whole = run_in_process_job(config(2, 2, "fp32", {}), 2);
  ASSERT_EQ(whole.error, "");
  for (const std::string fault : {"eio", "short_read"}) {
    const std::string swap = dir("swap_" + fault);
    const std::string ckpt = dir("ckpt_" + fault);
    Snapshot saved;
    InProcessHooks hooks = save_at(1, ckpt, &saved);
    hooks.plugin_paths = {std::string(DSCORE_TEST_PLUGIN_DIR) + "/fake_faulty_swapper"};
    hooks.plugins_members = R"("swapper": {"type": "fake_faulty_swapper", "params": )"
                            R"({"fail_request": 120, "fault": ")" +
                            fault + R"("}})";
    const InProcessResult failed = run_with("auto", config(2, 2, "fp32", {swap}), 2, hooks);
    EXPECT_TRUE(contains(failed.error, "swapper: ")) << fault << ": " << failed.error;
    EXPECT_TRUE(contains(failed.error, swap + "/dscore-job")) << failed.error;
    EXPECT_TRUE(contains(failed.error, ".swp at byte offset ")) << failed.error;
    EXPECT_TRUE(contains(failed.error, fault == "eio" ? "(EIO)" : " of ")) << failed.error;
    EXPECT_TRUE(job_folders(swap).empty()) << fault << ": swap files left after the failure";
    ASSERT_FALSE(saved.params.empty()) << fault << ": the fault came before the checkpoint";

    Snapshot loaded;
    const InProcessResult resumed = run_with("auto", config(2, 2, "fp32", {dir("resume_" + fault)}),
                                             2, load_from(ckpt, &loaded));
    ASSERT_EQ(resumed.error, "") << fault;
    expect_same_state(loaded, saved, fault + ": the checkpoint saved before the fault");
    EXPECT_EQ(resumed.losses, tail(whole.losses, kSteps - 2)) << fault;
    EXPECT_EQ(resumed.params, whole.params) << fault;
  }
}

// nvme_path where no folder can be made (a file in the way, a read-only
// file system): the error names the folder and the setting. A missing
// folder is created (as DeepSpeed's swapper does).
TEST_F(NvmeOffload, AnUnusableNvmePathIsNamed) {
  const std::string file = dir("x") + "/a_file";
  std::ofstream(file) << "not a folder";
  InProcessResult r = run_with("auto", config(1, 1, "fp32", {file + "/swap"}), 1);
  EXPECT_TRUE(contains(r.error, file + "/swap")) << r.error;
  EXPECT_TRUE(contains(r.error, "nvme_path")) << r.error;

  const std::string missing = (root_ / "missing" / "swap").string();
  r = run_with("auto", config(1, 1, "fp32", {missing}), 1);
  EXPECT_EQ(r.error, "");
  EXPECT_TRUE(fs::is_directory(missing));
  EXPECT_TRUE(job_folders(missing).empty());

  // A read-only file system (last: it needs root).
  std::string why;
  const std::string read_only = tmpfs("read_only", "size=1m", &why);
  if (read_only.empty()) GTEST_SKIP() << why;
  ASSERT_EQ(::mount("tmpfs", read_only.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, "size=1m"), 0)
      << std::strerror(errno);
  r = run_with("auto", config(1, 1, "fp32", {read_only + "/swap"}), 1);
  EXPECT_TRUE(contains(r.error, read_only + "/swap/dscore-job")) << r.error;
  EXPECT_TRUE(contains(r.error, "offload_optimizer.nvme_path")) << r.error;
}

// fp16 with a loss scale that overflows at first: the skipped steps leave
// the swapped state alone, as they leave it in memory, with accumulation.
TEST_F(NvmeOffload, Fp16SkippedStepsAreBitwiseAsInMemory) {
  for (int stage : {1, 3}) {
    const InProcessResult memory = run_in_process_job(config(stage, 2, "fp16", {}, 2), 2);
    ASSERT_EQ(memory.error, "");
    double scale = 0;
    InProcessHooks hooks;
    hooks.after_each_step = [&](Engine& e, int64_t step) {
      if (e.rank() == 0 && step == kSteps - 1) scale = e.loss_scale();
      return Status::Ok();
    };
    const Offload offload{dir("swap" + std::to_string(stage)), true};
    const InProcessResult nvme = run_with("auto", config(stage, 2, "fp16", offload, 2), 2, hooks);
    ASSERT_EQ(nvme.error, "");
    EXPECT_LT(scale, std::ldexp(1.0, 40)) << "no step overflowed";
    EXPECT_EQ(nvme.losses, memory.losses) << "stage " << stage;
    EXPECT_EQ(nvme.params, memory.params) << "stage " << stage;
  }
}

// Partial loads into an offloaded run (the weights only; the weights and
// the schedule without the optimizer state) give what they give in memory:
// the master on disk takes the loaded 16-bit weights, the slots start afresh.
TEST_F(NvmeOffload, PartialLoadsAreBitwiseAsInMemory) {
  const std::string ckpt = dir("ckpt");
  Snapshot saved;
  ASSERT_EQ(run_in_process_job(config(2, 2, "bf16", {}), 2, save_at(1, ckpt, &saved)).error, "");
  for (const bool module_only : {true, false}) {
    InProcessHooks hooks;
    std::vector<float> loaded;  // the master weights after the load (on disk when offloaded)
    hooks.before_training = [&](Engine& e) -> Status {
      LoadCheckpointOptions options;
      options.load_module_only = module_only;
      options.load_optimizer_states = false;
      DSCORE_RETURN_IF_ERROR(e.load_checkpoint(ckpt, options).status());
      std::vector<float> params;
      DSCORE_RETURN_IF_ERROR(EngineTesting::gather_parameters(e, &params));
      if (e.rank() == 0) loaded = std::move(params);
      return Status::Ok();
    };
    const InProcessResult memory = run_in_process_job(config(2, 2, "bf16", {}), 2, hooks);
    ASSERT_EQ(memory.error, "");
    const std::vector<float> loaded_in_memory = loaded;
    loaded.clear();
    const InProcessResult nvme = run_with(
        "auto", config(2, 2, "bf16", {dir("swap" + std::to_string(module_only))}), 2, hooks);
    ASSERT_EQ(nvme.error, "");
    // Without the optimizer state the master restarts from the 16-bit weights.
    ASSERT_EQ(loaded.size(), static_cast<size_t>(kParams));
    EXPECT_EQ(loaded, loaded_in_memory) << "module only " << module_only;
    EXPECT_NE(loaded, saved.params);
    for (size_t i = 0; i < loaded.size(); ++i)
      ASSERT_NEAR(loaded[i], saved.params[i], std::fabs(saved.params[i]) / 128) << i;
    EXPECT_EQ(nvme.losses, memory.losses) << "module only " << module_only;
    EXPECT_EQ(nvme.params, memory.params) << "module only " << module_only;
  }
}

// Settings that cannot work are refused before anything runs, naming the
// setting: too few buffers for the pipeline, no nvme_path, stage 0.
TEST_F(NvmeOffload, ImpossibleSettingsAreRefusedByName) {
  std::string body = config(2, 1, "fp32", {dir("swap"), true, true});
  body.replace(body.find(R"("buffer_count": 3)"), 17, R"("buffer_count": 2)");
  InProcessResult r = run_in_process_job(body, 1);
  EXPECT_TRUE(contains(r.error, "offload_optimizer.buffer_count")) << r.error;
  EXPECT_TRUE(contains(r.error, "set buffer_count to 3")) << r.error;
  body = config(2, 1, "fp32", {"-"});
  body.replace(body.find(R"("nvme_path": "-", )"), 18, "");
  r = run_in_process_job(body, 1);
  EXPECT_TRUE(contains(r.error, "offload_optimizer.nvme_path")) << r.error;
  r = run_in_process_job(config(0, 1, "fp32", {dir("swap0")}), 1);
  EXPECT_TRUE(contains(r.error, "needs ZeRO stage 1, 2 or 3")) << r.error;
  EXPECT_TRUE(job_folders(dir("swap0")).empty());
}

// The tile size (sub_group_size, rounded to 4096 elements, at least 4096,
// at most the owned partition) changes how the state moves, not the bits.
TEST_F(NvmeOffload, EveryTileSizeGivesTheSameBits) {
  const InProcessResult memory = run_in_process_job(config(2, 2, "bf16", {}), 2);
  ASSERT_EQ(memory.error, "");
  for (const std::string size : {"1000", "10000", "1000000000"}) {
    std::string body = config(2, 2, "bf16", {dir("swap" + size), true, false});
    body.replace(body.find(R"("sub_group_size": 4096)"), 22, R"("sub_group_size": )" + size);
    const InProcessResult nvme = run_with("auto", body, 2);
    ASSERT_EQ(nvme.error, "") << "sub_group_size " << size;
    EXPECT_EQ(nvme.losses, memory.losses) << "sub_group_size " << size;
    EXPECT_EQ(nvme.params, memory.params) << "sub_group_size " << size;
  }
}

}  // namespace
}  // namespace dscore

namespace dscore {
namespace {

// Stage 3 parameters on NVMe (core/zero/param_swap.h), bf16: alone and with
// the optimizer state on NVMe too, none or part of the shards resident
// (max_in_cpu), 1 and 2 ranks, both backends: bitwise as in memory; a
// checkpoint saved with the parameters on NVMe resumes in memory and the
// reverse.
TEST_F(NvmeOffload, ParametersOnNvmeTrainBitwiseAsInMemory) {
  const std::vector<std::string> kinds = backends();
  int index = 0;
  for (int world : {1, 2}) {
    const InProcessResult memory = run_in_process_job(config(3, world, "bf16", {}), world);
    ASSERT_EQ(memory.error, "");
    for (const bool with_optimizer : {false, true})
      for (const int64_t max_in_cpu : {int64_t{0}, int64_t{10000}}) {
        const std::string backend = kinds[static_cast<size_t>(index++) % kinds.size()];
        Offload offload;
        if (with_optimizer) offload = Offload(dir("opt" + std::to_string(index)), true, true);
        offload.param_path = dir("params" + std::to_string(index));
        offload.max_in_cpu = max_in_cpu;
        const std::string what = "W=" + std::to_string(world) + " optimizer on NVMe " +
                                 std::to_string(with_optimizer) + " max_in_cpu " +
                                 std::to_string(max_in_cpu) + " " + backend;
        std::mutex mutex;
        int files = 0;
        InProcessHooks hooks;
        hooks.after_each_step = [&](Engine& e, int64_t) -> Status {
          const std::vector<fs::path> jobs = job_folders(offload.param_path);
          if (jobs.size() != 1) return internal_error("no parameter swap folder");
          const fs::path file = jobs[0] / ("rank" + std::to_string(e.rank())) / "params_bf16.swp";
          if (!fs::exists(file)) return internal_error("missing " + file.string());
          std::lock_guard<std::mutex> lock(mutex);
          ++files;
          return Status::Ok();
        };
        const InProcessResult nvme =
            run_with(backend, config(3, world, "bf16", offload), world, hooks);
        ASSERT_EQ(nvme.error, "") << what;
        EXPECT_EQ(files, kSteps * world) << what;
        EXPECT_EQ(nvme.losses, memory.losses) << what;
        EXPECT_EQ(nvme.params, memory.params) << what;
        EXPECT_TRUE(job_folders(offload.param_path).empty()) << what << ": swap files left";
      }
  }
  // Checkpoints: saved with the parameters (and state) on NVMe, resumed in
  // memory, and the reverse; the model states stream from the swap file.
  constexpr int64_t kSaveAfter = 2;
  Offload offload{dir("ckopt"), true, false, dir("ckparams"), 0};
  const std::string with_nvme = config(3, 2, "bf16", offload);
  const std::string in_memory = config(3, 2, "bf16", {});
  Snapshot saved_memory, saved_nvme, loaded;
  const std::string memory_ckpt = dir("ck_memory"), nvme_ckpt = dir("ck_nvme");
  const InProcessResult whole =
      run_in_process_job(in_memory, 2, save_at(kSaveAfter, memory_ckpt, &saved_memory));
  ASSERT_EQ(whole.error, "");
  const InProcessResult nvme_whole =
      run_with("auto", with_nvme, 2, save_at(kSaveAfter, nvme_ckpt, &saved_nvme));
  ASSERT_EQ(nvme_whole.error, "");
  expect_same_state(saved_nvme, saved_memory, "saved with parameters on NVMe");
  InProcessResult r = run_in_process_job(in_memory, 2, load_from(nvme_ckpt, &loaded));
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.losses, tail(whole.losses, kSteps - kSaveAfter - 1));
  EXPECT_EQ(r.params, whole.params);
  r = run_with("auto", with_nvme, 2, load_from(memory_ckpt, &loaded));
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.losses, tail(whole.losses, kSteps - kSaveAfter - 1));
  EXPECT_EQ(r.params, whole.params);
}

// NVMe offload as from a GPU (core/owned_state/nvme_state.h staged, core/zero/
// sharded_zero.h's parameter bounce), on the asynchronous CPU device with
// separate memory: every stage, 1 and 2 ranks, fp32 (its master now in a
// file) and bf16, the pipeline combinations rotating, and stage 3 with the
// parameters on NVMe too: bitwise as in memory, holding what the plan says;
// a checkpoint saved so resumes in memory, and the reverse.
TEST_F(NvmeOffload, FromSeparateDeviceMemoryTrainsBitwiseAsInMemory) {
  int index = 0;
  for (int stage = 1; stage <= 3; ++stage)
    for (int world : {1, 2})
      for (const std::string precision : {"fp32", "bf16"}) {
        const InProcessResult memory =
            run_in_process_job(config(stage, world, precision, {}), world);
        ASSERT_EQ(memory.error, "");
        const int combo = index++ % 4;
        Offload offload{dir("staged" + std::to_string(index)), (combo & 1) != 0, (combo & 2) != 0};
        if (stage == 3 && precision == "bf16")
          offload.param_path = dir("params" + std::to_string(index));
        const std::string what = "stage " + std::to_string(stage) + " W=" + std::to_string(world) +
                                 " " + precision + " combo " + std::to_string(combo);
        std::mutex mutex;
        int checked = 0;
        std::string report;
        InProcessHooks hooks;
        // The memory ledger is the process's: one rank's engine alone.
        if (world == 1)
          hooks.before_training = [&](Engine& e) -> Status {
            const zero::MemoryPlan planned = e.plan().memory, held = e.measured_memory();
            if (held.master != 0 || held.optimizer != 0 ||
                held.offload_tiles != planned.offload_tiles)
              report = "planned " + zero::format_plans({e.plan()}) + "held master " +
                       std::to_string(held.master) + ", optimizer " +
                       std::to_string(held.optimizer) + ", tiles " +
                       std::to_string(held.offload_tiles);
            return Status::Ok();
          };
        hooks.after_each_step = [&](Engine& e, int64_t) -> Status {
          DSCORE_RETURN_IF_ERROR(check_swap_files(offload.nvme_path, e.rank(), true));
          std::lock_guard<std::mutex> lock(mutex);
          ++checked;
          return Status::Ok();
        };
        SeparateMemoryScope separate;
        const InProcessResult staged =
            run_with("auto", config(stage, world, precision, offload), world, hooks);
        ASSERT_EQ(staged.error, "") << what;
        EXPECT_EQ(report, "") << what;
        EXPECT_EQ(checked, kSteps * world) << what;
        EXPECT_EQ(staged.losses, memory.losses) << what;
        EXPECT_EQ(staged.params, memory.params) << what;
        EXPECT_TRUE(job_folders(offload.nvme_path).empty()) << what << ": swap files left";
      }

  // Checkpoints: stage 2 fp32 and stage 3 bf16 (parameters on NVMe too).
  constexpr int64_t kSaveAfter = 2;
  for (const auto& [stage, precision] : {std::pair{2, "fp32"}, std::pair{3, "bf16"}}) {
    const std::string what = "stage " + std::to_string(stage) + " " + precision;
    Offload offload{dir("ckswap" + what), true, false};
    if (stage == 3) offload.param_path = dir("ckparams" + what);
    const std::string staged = config(stage, 2, precision, offload);
    const std::string in_memory = config(stage, 2, precision, {});
    const std::string memory_ckpt = dir("ck_memory" + what), staged_ckpt = dir("ck_staged" + what);
    Snapshot saved_memory, saved_staged, loaded;
    const InProcessResult whole =
        run_in_process_job(in_memory, 2, save_at(kSaveAfter, memory_ckpt, &saved_memory));
    ASSERT_EQ(whole.error, "") << what;
    {
      SeparateMemoryScope separate;
      const InProcessResult r =
          run_with("auto", staged, 2, save_at(kSaveAfter, staged_ckpt, &saved_staged));
      ASSERT_EQ(r.error, "") << what;
    }
    expect_same_state(saved_staged, saved_memory, what + ": saved staged and in memory");
    InProcessResult r = run_in_process_job(in_memory, 2, load_from(staged_ckpt, &loaded));
    ASSERT_EQ(r.error, "") << what;
    EXPECT_EQ(r.losses, tail(whole.losses, kSteps - kSaveAfter - 1)) << what;
    EXPECT_EQ(r.params, whole.params) << what;
    SeparateMemoryScope separate;
    r = run_with("auto", staged, 2, load_from(memory_ckpt, &loaded));
    ASSERT_EQ(r.error, "") << what;
    expect_same_state(loaded, saved_memory, what + ": loaded staged");
    EXPECT_EQ(r.losses, tail(whole.losses, kSteps - kSaveAfter - 1)) << what;
    EXPECT_EQ(r.params, whole.params) << what;
  }
}

// What an offloaded engine holds in memory is what the plan says: no
// master or state, the tile buffers, the resident part of the parameters.
TEST_F(NvmeOffload, MemoryIsWhatThePlanSays) {
  const Offload offload(dir("opt"), true, true, dir("params"), 8192);
  InProcessHooks hooks;
  std::string report;
  hooks.before_training = [&](Engine& e) -> Status {
    const zero::MemoryPlan planned = e.plan().memory, held = e.measured_memory();
    if (held.master != 0 || held.optimizer != 0 || held.offload_tiles != planned.offload_tiles ||
        held.parameters != planned.parameters || planned.parameters != 8192 * 2 ||
        planned.offload_tiles == 0)
      report = "planned " + zero::format_plans({e.plan()}) + "held parameters " +
               std::to_string(held.parameters) + ", master " + std::to_string(held.master) +
               ", optimizer " + std::to_string(held.optimizer) + ", tiles " +
               std::to_string(held.offload_tiles);
    return Status::Ok();
  };
  const InProcessResult r = run_with("auto", config(3, 1, "bf16", offload), 1, hooks);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(report, "");
}

}  // namespace
}  // namespace dscore
