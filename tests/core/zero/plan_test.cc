// The memory plan with optimizer offload: swap files on disk and tile
// buffers in RAM for offload_optimizer.device "nvme" (fp32 and bf16 models,
// stages 1-3, 1 and 2 ranks), the tile size's edge cases, buffer_count, and
// the fit check against injected node capacities.
#include <gtest/gtest.h>

#include "core/base/strings.h"
#include "core/config/config.h"
#include "core/zero/plan.h"

namespace dscore::zero {
namespace {

// Two layers: 3000 and 2001 elements (Psi = 5001).
class TwoLayers {
 public:
  TwoLayers() { layout_ = ParamLayout::from_description(description_).value(); }
  const ParamLayout& layout() const { return layout_; }

 private:
  int64_t s0_[2] = {30, 100}, s1_[1] = {2001};
  dscore_model_param p0_{sizeof(dscore_model_param), "a.w", 2, s0_, 3000, 0, 0, 0, 0, 0};
  dscore_model_param p1_{sizeof(dscore_model_param), "b.w", 1, s1_, 2001, 0, 0, 0, 0, 0};
  const dscore_model_param* l0p_[1] = {&p0_};
  const dscore_model_param* l1p_[1] = {&p1_};
  dscore_model_layer l0_{sizeof(dscore_model_layer), "a", 1, l0p_};
  dscore_model_layer l1_{sizeof(dscore_model_layer), "b", 1, l1p_};
  const dscore_model_layer* layers_[2] = {&l0_, &l1_};
  dscore_model_description description_{
      sizeof(dscore_model_description), 2, layers_, 0, nullptr, 0, 0, nullptr};
  ParamLayout layout_;
};

const std::vector<StateSlot> kAdam = {{"exp_avg", DSCORE_DTYPE_F32, 1},
                                      {"exp_avg_sq", DSCORE_DTYPE_F32, 1}};

config::TrainingConfig load(const std::string& zero, const std::string& precision, int world) {
  config::ResolveContext context;
  context.world_size = world;
  const std::string text = R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": )" + zero +
                           (precision.empty() ? "" : ", " + precision) + "}";
  config::LoadedConfig loaded = config::load_config_text(text, "test.json", context);
  EXPECT_TRUE(loaded.ok()) << (loaded.errors.empty() ? "" : loaded.errors.front().message);
  return *loaded.config;
}

std::string nvme_zero(int stage, const std::string& offload_extra = "",
                      const std::string& zero_extra = "") {
  return R"({"stage": )" + std::to_string(stage) + zero_extra +
         R"(, "offload_optimizer": {"device": "nvme", "nvme_path": "/swap")" + offload_extra + "}}";
}

TEST(OffloadPlan, Fp32ModelSwapsOnlyTheSlotsAndKeepsItsParameters) {
  TwoLayers model;
  for (int stage : {1, 2, 3}) {
    for (int world : {1, 2}) {
      SCOPED_TRACE("stage " + std::to_string(stage) + ", " + std::to_string(world) + " rank(s)");
      const auto cfg = load(nvme_zero(stage), "", world);
      const ZeroPlan in_ram =
          make_plan(load(R"({"stage": )" + std::to_string(stage) + "}", "", world), model.layout(),
                    kAdam, world, world - 1);
      const ZeroPlan plan = make_plan(cfg, model.layout(), kAdam, world, world - 1);
      // Owned: the flat partition (5002 / 5004 padded) or stage 3's shards
      // (1500 + 1001 at two ranks); files round up to 4096 elements.
      const int64_t owned = stage < 3 ? (world == 1 ? 5002 : 2502) : (world == 1 ? 5001 : 2501);
      const int64_t file = world == 1 ? 8192 : 4096;
      EXPECT_EQ(in_ram.memory.optimizer, owned * 8);
      ASSERT_TRUE(plan.swap.has_value());
      EXPECT_EQ(plan.optimizer_device, "nvme");
      EXPECT_EQ(plan.swap->file_elements, file);
      ASSERT_EQ(plan.swap->files.size(), 2u);  // no master: fp32 parameters are the master
      EXPECT_EQ(plan.swap->files[0].state, "exp_avg");
      EXPECT_EQ(plan.swap->files[1].bytes, file * 4);
      EXPECT_EQ(plan.memory.disk_master, 0);
      EXPECT_EQ(plan.memory.disk_optimizer, 2 * file * 4);
      EXPECT_EQ(plan.memory.disk(), 2 * file * 4);
      // RAM: the parameters, gradients and buffers stay; the state becomes
      // one tile buffer of the whole (rounded) partition.
      EXPECT_EQ(plan.memory.master, 0);
      EXPECT_EQ(plan.memory.optimizer, 0);
      EXPECT_EQ(plan.memory.parameters, in_ram.memory.parameters);
      EXPECT_EQ(plan.memory.gradients, in_ram.memory.gradients);
      EXPECT_EQ(plan.memory.buffers, in_ram.memory.buffers);
      EXPECT_EQ(plan.swap->tile_elements, file);
      EXPECT_EQ(plan.swap->buffers, 1);
      EXPECT_EQ(plan.memory.offload_tiles, file * 8);
      EXPECT_EQ(plan.memory.total(), in_ram.memory.total() - owned * 8 + file * 8);
    }
  }
}

TEST(OffloadPlan, SixteenBitModelSwapsTheMasterToo) {
  TwoLayers model;
  for (int stage : {1, 2, 3}) {
    for (int world : {1, 2}) {
      SCOPED_TRACE("stage " + std::to_string(stage) + ", " + std::to_string(world) + " rank(s)");
      const std::string bf16 = R"("bf16": {"enabled": true})";
      const ZeroPlan in_ram =
          make_plan(load(R"({"stage": )" + std::to_string(stage) + "}", bf16, world),
                    model.layout(), kAdam, world, 0);
      const ZeroPlan plan = make_plan(
          load(nvme_zero(stage, R"(, "pipeline_read": true, "pipeline_write": true)"), bf16, world),
          model.layout(), kAdam, world, 0);
      const int64_t owned = stage < 3 ? (world == 1 ? 5002 : 2502) : (world == 1 ? 5001 : 2501);
      const int64_t file = world == 1 ? 8192 : 4096;
      EXPECT_EQ(in_ram.memory.master, owned * 4);
      ASSERT_TRUE(plan.swap.has_value());
      ASSERT_EQ(plan.swap->files.size(), 3u);
      EXPECT_EQ(plan.swap->files[0].state, "fp32 master");
      EXPECT_EQ(plan.memory.disk_master, file * 4);
      EXPECT_EQ(plan.memory.disk_optimizer, 2 * file * 4);
      EXPECT_EQ(plan.memory.master, 0);
      EXPECT_EQ(plan.memory.optimizer, 0);
      EXPECT_EQ(plan.memory.parameters, in_ram.memory.parameters);  // bf16 stays in RAM
      EXPECT_EQ(plan.swap->buffers, 3);  // 1 + pipeline_read + pipeline_write
      EXPECT_EQ(plan.swap->tile_bytes, file * 12);
      EXPECT_EQ(plan.memory.offload_tiles, 3 * file * 12);
    }
  }
}

// From device memory the host does not address (a "cuda" config, or the
// engine's say): the master has a file for fp32 models too, and each tile
// buffer a tile of gradients, beside two parameter staging tiles; stage 3's
// swapped parameters add a host bounce (host staging).
TEST(OffloadPlan, StagedFromTheDeviceAddsGradientTilesAndStaging) {
  TwoLayers model;
  for (const std::string precision : {"", R"("bf16": {"enabled": true})"}) {
    SCOPED_TRACE(precision);
    const auto cfg = load(nvme_zero(2, R"(, "pipeline_read": true)"), precision, 1);
    const ZeroPlan on_cpu = make_plan(cfg, model.layout(), kAdam, 1, 0);
    const ZeroPlan staged = make_plan(cfg, model.layout(), kAdam, 1, 0, false);
    const int64_t tile = 8192, size = precision.empty() ? 4 : 2;  // model and grad dtype
    ASSERT_TRUE(staged.swap.has_value());
    ASSERT_EQ(staged.swap->files.size(), 3u);
    EXPECT_EQ(staged.swap->files[0].state, "fp32 master");
    EXPECT_EQ(staged.memory.disk_master, tile * 4);
    EXPECT_EQ(staged.swap->tile_bytes, tile * 12);
    EXPECT_EQ(staged.memory.offload_tiles, 2 * tile * 12 + 2 * tile * size + 2 * tile * size);
    EXPECT_EQ(on_cpu.swap->files.size(), precision.empty() ? 2u : 3u);
    config::TrainingConfig on_gpu = cfg;
    on_gpu.device = "cuda";
    EXPECT_EQ(make_plan(on_gpu, model.layout(), kAdam, 1, 0).memory.offload_tiles,
              staged.memory.offload_tiles);
  }
  const std::string bf16 = R"("bf16": {"enabled": true})";
  const auto params = load(
      R"({"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/swap", "max_in_cpu": 0}})",
      bf16, 1);
  const ZeroPlan from_gpu = make_plan(params, model.layout(), kAdam, 1, 0, false);
  const ZeroPlan in_ram = make_plan(params, model.layout(), kAdam, 1, 0);
  EXPECT_EQ(from_gpu.memory.buffers, in_ram.memory.buffers);
  // Two read chunks of the part on disk (8192 elements rounded up), and
  // from a GPU the ring: all the shards (5 x 1e8 > them) in whole granules,
  // two granules for a span's ends, 4 KiB to align it.
  const int64_t read_staging = 2 * 8192 * 2, ring_slack = 2 * 4096 * 2 + 4096;
  EXPECT_EQ(from_gpu.memory.host_staging, read_staging + 8192 * 2 + ring_slack);
  EXPECT_EQ(in_ram.memory.host_staging, read_staging);
  const auto staging = [&](const std::string& offload_param) {
    const auto cfg =
        load(R"({"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/swap", )" +
                 offload_param + "}}",
             bf16, 1);
    return make_plan(cfg, model.layout(), kAdam, 1, 0, false).memory.host_staging;
  };
  EXPECT_EQ(staging(R"("max_in_cpu": 0, "buffer_count": 2, "buffer_size": 1000)"),
            read_staging + 4096 * 2 + ring_slack);
  // The resident part (max_in_cpu, rounded down to 4096) is pinned and needs
  // no ring; it is read from no file.
  EXPECT_EQ(staging(R"("max_in_cpu": 5000)"), 2 * 4096 * 2 + 4096 * 2 + ring_slack);
  EXPECT_EQ(staging(R"("max_in_cpu": 1000000000)"), 0);
}

TEST(OffloadPlan, TheParameterStagingRingIsTheSwapBuffersAtMostTheShards) {
  // The buffers, at most the shards on disk, in whole granules, and two
  // granules for a read span's unaligned ends.
  const int64_t ends = 2 * 4096;
  EXPECT_EQ(zero::param_swap_ring_elements(5, 100000000, 5001), 8192 + ends);
  EXPECT_EQ(zero::param_swap_ring_elements(5, 100000000, int64_t{1} << 40), 500002816 + ends);
  EXPECT_EQ(zero::param_swap_ring_elements(2, 1000, 5001), 4096 + ends);
  EXPECT_EQ(zero::param_swap_ring_elements(0, 0, 5001), 4096 + ends);  // at least a granule
  EXPECT_EQ(zero::param_swap_ring_elements(int64_t{1} << 40, int64_t{1} << 40, 5001), 8192 + ends);
}

// On a GPU the model states, buffers and activations are in its memory,
// but what is offloaded: ZeRO-Offload's master and state, offload_param's
// shards. Host memory holds those, the staging and the process; the nccl
// backend's buffers are not counted (no mpi scratch).
TEST(DevicePlan, SplitsTheGpusMemoryFromTheHosts) {
  TwoLayers model;
  const std::string bf16 = R"("bf16": {"enabled": true})";
  const std::string nccl = bf16 + R"(, "comm": {"backend": "nccl"})";
  const ZeroPlan gpu =
      make_plan(load(R"({"stage": 2})", nccl, 2), model.layout(), kAdam, 2, 0, false);
  const ZeroPlan cpu = make_plan(load(R"({"stage": 2})", bf16, 2), model.layout(), kAdam, 2, 0);
  EXPECT_FALSE(cpu.on_device);
  EXPECT_EQ(cpu.device_memory(), 0);
  EXPECT_EQ(cpu.host_memory(), cpu.memory.total());
  EXPECT_GT(cpu.memory.comm_scratch, 0);
  ASSERT_TRUE(gpu.on_device);
  EXPECT_EQ(gpu.memory.comm_scratch, 0);
  EXPECT_EQ(gpu.device_memory(), gpu.memory.model_states() + gpu.memory.buffers);
  EXPECT_EQ(gpu.host_memory(), 0);

  const ZeroPlan offload =
      make_plan(load(R"({"stage": 2, "offload_optimizer": {"device": "cpu"}})", nccl, 2),
                model.layout(), kAdam, 2, 0, false);
  EXPECT_TRUE(offload.state_on_host);
  EXPECT_EQ(offload.device_memory(),
            offload.memory.parameters + offload.memory.gradients + offload.memory.buffers);
  EXPECT_EQ(offload.host_memory(),
            offload.memory.master + offload.memory.optimizer + offload.memory.offload_tiles);

  const ZeroPlan params = make_plan(
      load(
          R"({"stage": 3, "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}})",
          bf16, 2),
      model.layout(), kAdam, 2, 0, false);
  EXPECT_TRUE(params.params_on_host);
  EXPECT_EQ(params.device_memory(), params.memory.gradients + params.memory.buffers);

  // Partial offload (ratio 0.5 of two sub-groups at one rank): the first
  // sub-group's fp32 master and Adam's two slots stay on the GPU; the host
  // holds the rest, and gradients and staging for the rest only.
  const std::string z3 = R"({"stage": 3, "sub_group_size": 4096, "offload_optimizer": )";
  const config::TrainingConfig partial_config =
      load(z3 + R"({"device": "cpu", "ratio": 0.5}})", nccl, 1);
  ASSERT_EQ(zero::kept_on_device_elements(config::make_placement(partial_config),
                                          partial_config.zero.sub_group_size, 5001),
            4096);
  const ZeroPlan partial = make_plan(partial_config, model.layout(), kAdam, 1, 0, false);
  const ZeroPlan whole =
      make_plan(load(z3 + R"({"device": "cpu"}})", nccl, 1), model.layout(), kAdam, 1, 0, false);
  EXPECT_EQ(partial.master_kept, 4096 * 4);
  EXPECT_EQ(partial.optimizer_kept, 4096 * 8);
  EXPECT_EQ(partial.device_memory(), whole.device_memory() + 4096 * (4 + 8));
  EXPECT_EQ(partial.memory.master, whole.memory.master);  // bf16: every fp32 master somewhere
  EXPECT_EQ(partial.memory.offload_tiles,
            whole.memory.offload_tiles - 4096 * 2);  // bf16 host gradients of the kept part
  // The table shows the kept part among the GPU's rows and the rest among
  // the host's; a GPU too small for it is told to offload more.
  const std::string partial_table = format_plans({partial});
  for (const auto& [label, bytes] :
       {std::pair<std::string, int64_t>{"kept master (fp32)", 4096 * 4},
        {"kept optimizer state", 4096 * 8}}) {
    const size_t at = partial_table.find("  " + label + " ");
    ASSERT_NE(at, std::string::npos) << label << "\n" << partial_table;
    const std::string line = partial_table.substr(at, partial_table.find('\n', at) - at);
    EXPECT_NE(line.find(format_bytes(bytes)), std::string::npos) << line;
    EXPECT_LT(at, partial_table.find("in host memory")) << label << " is not in the GPU's rows";
  }
  NodeCapacity small_gpu;
  small_gpu.device_available = partial.device_memory() - 1;
  const std::string raise = check_fits(partial, small_gpu).message();
  EXPECT_NE(raise.find("raise zero_optimization.offload_optimizer.ratio: the part kept takes " +
                       format_bytes(4096 * 12) + " per rank"),
            std::string::npos)
      << raise;

  ZeroPlan with_process = gpu;
  ProcessMemory process;
  process.model = "model 'two_layers'";
  process.activations = int64_t{3} << 20;
  process.baseline = int64_t{100} << 20;
  process.allocator_slack = 0.01;
  add_process_memory(process, &with_process);
  EXPECT_EQ(with_process.device_memory(), gpu.device_memory() + (int64_t{3} << 20));
  EXPECT_EQ(with_process.memory.process, int64_t{100} << 20) << "no slack on GPU memory";
  EXPECT_EQ(with_process.host_memory(), int64_t{100} << 20);
  const std::string table = format_plans({with_process});
  for (const char* row : {"  in GPU memory", "  activations (declared)", "  total (GPU)",
                          "  in host memory", "  process and allocator", "  total (host, peak)"})
    EXPECT_NE(table.find(row), std::string::npos) << row << "\n" << table;
  EXPECT_EQ(table.find("in RAM"), std::string::npos) << table;
  const std::string offload_table = format_plans({offload});
  EXPECT_LT(offload_table.find("in host memory"), offload_table.find("optimizer state"))
      << offload_table;
}

TEST(OffloadPlan, TilesAreWholeGranulesAndNoLargerThanThePartition) {
  TwoLayers model;
  auto tile = [&](const std::string& sub_group, const std::string& offload) {
    const ZeroPlan plan =
        make_plan(load(nvme_zero(1, offload, R"(, "sub_group_size": )" + sub_group), "", 1),
                  model.layout(), kAdam, 1, 0);
    return *plan.swap;
  };
  EXPECT_EQ(tile("100", "").tile_elements, 4096) << "below 4096: one granule";
  EXPECT_EQ(tile("0", "").tile_elements, 4096);
  EXPECT_EQ(tile("6000", "").tile_elements, 4096) << "rounded down";
  EXPECT_EQ(tile("8192", "").tile_elements, 8192);
  EXPECT_EQ(tile("1000000000", "").tile_elements, 8192) << "the rounded partition";
  const OptimizerSwapPlan read_only = tile("4096", R"(, "pipeline_read": true)");
  EXPECT_EQ(read_only.buffers, 2);
  EXPECT_EQ(read_only.tile_bytes, 4096 * 8);
  EXPECT_EQ(tile("4096", R"(, "pipeline_write": true)").buffers, 2);
  // A slot of another dtype and width counts with its own size.
  const std::vector<StateSlot> mixed = {{"m", DSCORE_DTYPE_BF16, 2}};
  const ZeroPlan plan = make_plan(load(nvme_zero(2, "", R"(, "sub_group_size": 4096)"), "", 1),
                                  model.layout(), mixed, 1, 0);
  EXPECT_EQ(plan.swap->tile_bytes, 4096 * 2 * 2);
  EXPECT_EQ(plan.memory.disk_optimizer, 8192 * 2 * 2);
}

// ZeRO-Offload: the master in host memory (for fp32 models beside the
// parameters), a host copy of the owned gradients and, for 16-bit models,
// two staging tiles of parameters, a note; at stage 0 nothing moves and the
// note says why.
TEST(OffloadPlan, CpuDeviceCountsTheHostMasterGradientsAndStaging) {
  TwoLayers model;
  const ZeroPlan in_ram = make_plan(load(R"({"stage": 2})", "", 2), model.layout(), kAdam, 2, 0);
  const ZeroPlan cpu = make_plan(
      load(R"({"stage": 2, "sub_group_size": 4096, "offload_optimizer": {"device": "cpu"}})", "",
           2),
      model.layout(), kAdam, 2, 0);
  EXPECT_EQ(cpu.optimizer_device, "cpu");
  EXPECT_FALSE(cpu.swap.has_value());
  const int64_t owned = in_ram.memory.optimizer / 8;  // Adam: m and v, fp32
  EXPECT_EQ(cpu.memory.master, owned * 4);            // fp32: a copy of the parameters
  EXPECT_EQ(cpu.memory.offload_tiles, owned * 4);     // the host gradients; no staging
  EXPECT_EQ(cpu.memory.total(), in_ram.memory.total() + owned * 4 + owned * 4);
  EXPECT_EQ(cpu.memory.disk(), 0);
  const std::string table = format_plans({cpu});
  EXPECT_NE(table.find("(ZeRO-Offload)"), std::string::npos) << table;
  EXPECT_NE(table.find("  offload buffers"), std::string::npos) << table;
  EXPECT_EQ(table.find("disk total"), std::string::npos) << table;

  const ZeroPlan bf16 = make_plan(load(R"({"stage": 2, "offload_optimizer": {"device": "cpu"}})",
                                       R"("bf16": {"enabled": true})", 2),
                                  model.layout(), kAdam, 2, 0);
  const ZeroPlan bf16_ram = make_plan(load(R"({"stage": 2})", R"("bf16": {"enabled": true})", 2),
                                      model.layout(), kAdam, 2, 0);
  EXPECT_EQ(bf16.memory.master, bf16_ram.memory.master);  // moved, not copied
  const int64_t tile = (owned + 4095) / 4096 * 4096;      // sub_group_size's default: one tile
  EXPECT_EQ(bf16.memory.offload_tiles, owned * 2 + 2 * tile * 2);

  const ZeroPlan stage0 =
      make_plan(load(R"({"stage": 0, "offload_optimizer": {"device": "cpu"}})", "", 2),
                model.layout(), kAdam, 2, 0);
  EXPECT_EQ(stage0.memory.offload_tiles, 0);
  EXPECT_NE(format_plans({stage0}).find("ZeRO-Offload needs stage 1, 2 or 3"), std::string::npos);
}

TEST(OffloadPlan, TableShowsTileBuffersAndDiskPerRank) {
  TwoLayers model;
  const auto cfg = load(nvme_zero(2), R"("bf16": {"enabled": true})", 2);
  const std::string table = format_plans(
      {make_plan(cfg, model.layout(), kAdam, 2, 0), make_plan(cfg, model.layout(), kAdam, 2, 1)});
  for (const char* row : {"  offload tile buffers", "  disk master (fp32)",
                          "  disk optimizer state", "  disk total", "  total"})
    EXPECT_NE(table.find(row), std::string::npos) << row << "\n" << table;
  EXPECT_NE(table.find("nvme_path \"/swap\""), std::string::npos) << table;
  EXPECT_NE(table.find("48.00 KiB"), std::string::npos) << table;  // 4096 x 12 bytes
  EXPECT_NE(table.find("activations"), std::string::npos) << table;
}

TEST(FitCheck, FitsWhenEveryRankOnTheNodeFits) {
  TwoLayers model;
  const ZeroPlan plan = make_plan(load(nvme_zero(2), "", 2), model.layout(), kAdam, 2, 0);
  NodeCapacity node;
  node.local_ranks = 2;
  node.ram_available = 2 * plan.memory.total();
  node.disk_available = 2 * plan.memory.disk();
  EXPECT_TRUE(check_fits(plan, node).ok());
  EXPECT_TRUE(check_fits(plan, NodeCapacity{}).ok()) << "unknown capacity is not checked";
}

TEST(FitCheck, ShortRamNamesTheNumbersAndTheSettings) {
  TwoLayers model;
  const ZeroPlan plan = make_plan(load(R"({"stage": 1})", "", 4), model.layout(), kAdam, 4, 1);
  NodeCapacity node;
  node.local_ranks = 4;
  node.ram_available = 4 * plan.memory.total() - 1;
  const Status s = check_fits(plan, node);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), DSCORE_RESOURCE_EXHAUSTED);
  const std::string& m = s.message();
  for (const std::string& part :
       {std::string("rank 1 of 4"), format_bytes(plan.memory.total()) + " per rank",
        format_bytes(4 * plan.memory.total()) + " for the 4 ranks on this node",
        format_bytes(*node.ram_available) + " (", std::string("offload_optimizer.device \"nvme\""),
        std::string("zero_optimization.stage is 1"), std::string("more ranks"),
        std::string("Activations are not counted")})
    EXPECT_NE(m.find(part), std::string::npos) << part << "\n" << m;
  EXPECT_EQ(m.find("disk: "), std::string::npos) << m;
  // Already offloaded at stage 3: the tiles and more ranks are what is left.
  const ZeroPlan swapped = make_plan(load(nvme_zero(3, R"(, "pipeline_read": true)"), "", 1),
                                     model.layout(), kAdam, 1, 0);
  NodeCapacity one;
  one.ram_available = swapped.memory.total() / 2;
  const std::string m3 = check_fits(swapped, one).message();
  EXPECT_NE(m3.find("sub_group_size"), std::string::npos) << m3;
  EXPECT_EQ(m3.find("higher ZeRO stage"), std::string::npos) << m3;
  EXPECT_EQ(m3.find("\"nvme\" with"), std::string::npos) << m3;
}

// A GPU run: the model states and the activations the model declares for
// its CUDA compute are checked against the GPU's free memory, not the
// node's RAM, which holds only what the ranks keep on the host (8 ranks of
// a node whose RAM could not hold their model states fit).
TEST(FitCheck, OnAGpuTheStatesAreCheckedAgainstItsMemoryNotRam) {
  TwoLayers model;
  ZeroPlan plan = make_plan(load(R"({"stage": 1})", "", 8), model.layout(), kAdam, 8, 0, false);
  ProcessMemory process;
  process.model = "model 'two_layers'";
  process.activations = int64_t{1} << 20;  // in GPU memory
  process.baseline = 1000;
  add_process_memory(process, &plan);
  const int64_t states = plan.memory.model_states() + plan.memory.buffers;
  const int64_t needed = states + (int64_t{1} << 20);
  NodeCapacity node;
  node.local_ranks = 8;
  node.ram_available = 8 * plan.host_memory();
  node.device_available = needed;
  EXPECT_TRUE(check_fits(plan, node).ok()) << check_fits(plan, node).message();
  EXPECT_LT(*node.ram_available, 8 * states) << "the old check, all in RAM, refused this";

  node.device_available = needed - 1;
  const Status s = check_fits(plan, node);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), DSCORE_RESOURCE_EXHAUSTED);
  for (const std::string& part :
       {std::string("GPU memory: the model states, buffers and activations there need ") +
            format_bytes(needed) + " per rank",
        format_bytes(needed - 1) + " free (cudaMemGetInfo)",
        std::string("lower train_micro_batch_size_per_gpu or turn on activation_checkpointing "
                    "(activations take 1.00 MiB per rank)"),
        std::string("offload_optimizer"), std::string("zero_optimization.stage is 1"),
        std::string("more ranks")})
    EXPECT_NE(s.message().find(part), std::string::npos) << part << "\n" << s.message();
  EXPECT_EQ(s.message().find("RAM:"), std::string::npos) << s.message();

  // A model that declares none: the states alone, and the message says so.
  process.activations.reset();
  add_process_memory(process, &plan);
  node.device_available = states - 1;
  const std::string uncounted = check_fits(plan, node).message();
  EXPECT_NE(uncounted.find("GPU memory: the model states, buffers (activations not counted) "
                           "there need " +
                           format_bytes(states)),
            std::string::npos)
      << uncounted;
  EXPECT_EQ(uncounted.find("lower train_micro_batch_size_per_gpu"), std::string::npos) << uncounted;

  // ZeRO-Offload: the state is on the host, so RAM is what runs short.
  ZeroPlan offload =
      make_plan(load(R"({"stage": 2, "offload_optimizer": {"device": "cpu"}})", "", 8),
                model.layout(), kAdam, 8, 0, false);
  NodeCapacity short_ram;
  short_ram.local_ranks = 8;
  short_ram.ram_available = 8 * offload.host_memory() - 1;
  short_ram.device_available = int64_t{1} << 40;
  const std::string m = check_fits(offload, short_ram).message();
  for (const char* part :
       {"RAM: what the ranks keep in host memory", "\"nvme\"", "keep it on the GPU", "fewer ranks"})
    EXPECT_NE(m.find(part), std::string::npos) << part << "\n" << m;
  EXPECT_EQ(m.find("GPU memory"), std::string::npos) << m;
}

TEST(FitCheck, ShortDiskNamesTheNvmePath) {
  TwoLayers model;
  const ZeroPlan plan =
      make_plan(load(nvme_zero(1), R"("fp16": {"enabled": true})", 2), model.layout(), kAdam, 2, 0);
  NodeCapacity node;
  node.local_ranks = 2;
  node.ram_available = int64_t{1} << 40;
  node.disk_available = plan.memory.disk();  // room for one rank only
  const Status s = check_fits(plan, node);
  ASSERT_FALSE(s.ok());
  const std::string& m = s.message();
  for (const std::string& part :
       {std::string("disk: the swap files need"), format_bytes(plan.memory.disk()) + " per rank",
        format_bytes(2 * plan.memory.disk()) + " for the 2 ranks",
        std::string("nvme_path \"/swap\""), std::string("more free space")})
    EXPECT_NE(m.find(part), std::string::npos) << part << "\n" << m;
  EXPECT_EQ(m.find("RAM:"), std::string::npos) << m;
}

TEST(ProcessMemory, ActivationsAndTheProcessAreInThePeakAndTheFitCheck) {
  TwoLayers model;
  ZeroPlan plan = make_plan(load(R"({"stage": 1})", "", 4), model.layout(), kAdam, 4, 1);
  const int64_t states = plan.memory.total();
  ProcessMemory process;
  process.model = "model 'two_layers'";
  process.activations = int64_t{3} << 20;
  process.other_setting = int64_t{1} << 20;
  process.baseline = int64_t{100} << 20;
  process.allocator_slack = 0.01;
  add_process_memory(process, &plan);
  const int64_t allocated = states + (int64_t{3} << 20);
  EXPECT_EQ(plan.memory.activations, int64_t{3} << 20);
  EXPECT_EQ(plan.memory.process,
            (int64_t{100} << 20) + static_cast<int64_t>(static_cast<double>(allocated) * 0.01));
  EXPECT_EQ(plan.memory.total(), allocated + plan.memory.process);
  const std::string table = format_plans({plan});
  for (const char* row : {"  activations  ", "  process and allocator", "  total (peak)"})
    EXPECT_NE(table.find(row), std::string::npos) << row << "\n" << table;
  EXPECT_NE(table.find("3.00 MiB per micro-batch (1.00 MiB with activation_checkpointing)"),
            std::string::npos)
      << table;
  EXPECT_EQ(table.find("not counted"), std::string::npos) << table;

  NodeCapacity node;
  node.local_ranks = 4;
  node.ram_available = 4 * plan.memory.total() - 1;
  const std::string m = check_fits(plan, node).message();
  for (const char* part : {"activations and the process need", "train_micro_batch_size_per_gpu",
                           "activation_checkpointing"})
    EXPECT_NE(m.find(part), std::string::npos) << part << "\n" << m;
  EXPECT_EQ(m.find("Activations are not counted"), std::string::npos) << m;
  node.ram_available = 4 * plan.memory.total();
  EXPECT_TRUE(check_fits(plan, node).ok());
}

TEST(ProcessMemory, AModelThatDoesNotDeclareActivationsIsNamed) {
  TwoLayers model;
  ZeroPlan plan = make_plan(load(R"({"stage": 0})", "", 1), model.layout(), kAdam, 1, 0);
  ProcessMemory process;
  process.model = "model 'two_layers'";
  process.baseline = 1 << 20;
  add_process_memory(process, &plan);
  EXPECT_EQ(plan.memory.activations, 0);
  const std::string table = format_plans({plan});
  EXPECT_NE(table.find("activations are not counted: model 'two_layers' does not declare them"),
            std::string::npos)
      << table;
  EXPECT_EQ(table.find("  activations  "), std::string::npos) << table;
}

}  // namespace
}  // namespace dscore::zero
