// `dscore io-bench PATH` through the real executable, on a temporary folder
// with a tiny size per point: it finishes, prints the table, the limit and
// the best "aio" settings as JSON, caches them for the folder's device (in a
// temporary XDG_CACHE_HOME), and `dscore config check` then resolves
// "auto" in "aio" to them. Usage errors exit 2.
#include <gtest/gtest.h>

#include "core/config/aio_cache.h"
#include "core/config/json.h"
#include "tests/core/cli/process.h"

namespace dscore::testing {
namespace {

const std::vector<std::string> kTiny = {
    "--block-sizes",         "128KiB,1MiB", "--queue-depths", "2,4", "--bytes-per-point", "1MiB",
    "--max-bytes-per-point", "2MiB",        "--probe-bytes",  "2MiB"};

ProcessResult io_bench(const TempDir& dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"io-bench", (dir.path() / "disk").string()};
  args.insert(args.end(), kTiny.begin(), kTiny.end());
  args.insert(args.end(), extra.begin(), extra.end());
  ProcessOptions options;
  options.env["XDG_CACHE_HOME"] = (dir.path() / "cache").string();
  return run_dscore(args, options);
}

TEST(CliIoBench, MeasuresPrintsTheBestSettingsAndCachesThemForTheDevice) {
  TempDir dir("dscore_cli_io_bench");
  std::filesystem::create_directories(dir.path() / "disk");
  ProcessResult r = io_bench(dir);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(lines_starting_with(r.out, "  limit, before: disk probe").size(), 1u) << r.out;
  EXPECT_EQ(lines_starting_with(r.out, "  limit, after: disk probe").size(), 1u) << r.out;
  // 2 block sizes x 2 depths, then the switches at the best of them:
  // single_submit, overlap_events (and intra_op_parallelism on threads).
  EXPECT_GE(lines_starting_with(r.out, "    128K ").size(), 2u) << r.out;
  const size_t rows = lines_starting_with(r.out, "      1M ").size() +
                      lines_starting_with(r.out, "    128K ").size();
  EXPECT_EQ(rows, r.out.find("backend threads") == std::string::npos ? 6u : 7u) << r.out;
  ASSERT_EQ(lines_starting_with(r.out, "{\"aio\": ").size(), 1u) << r.out;
  Result<json::Value> best = json::parse(lines_starting_with(r.out, "{\"aio\": ")[0], "stdout");
  ASSERT_TRUE(best.ok()) << best.status().message();
  const json::Value& aio = *best->find("aio");
  for (const char* key :
       {"block_size", "queue_depth", "intra_op_parallelism", "single_submit", "overlap_events"})
    EXPECT_NE(aio.find(key), nullptr) << key;
  EXPECT_EQ(lines_starting_with(r.out, "took ").size(), 1u) << r.out;
  // Nothing of the measurement is left in the folder.
  EXPECT_TRUE(std::filesystem::is_empty(dir.path() / "disk"));

  // The cache file for the folder's device holds the printed settings...
  ::setenv("XDG_CACHE_HOME", (dir.path() / "cache").c_str(), 1);
  const config::DeviceId device = *config::device_of((dir.path() / "disk").string());
  config::AioCacheLookup cached = config::read_aio_cache(device);
  ::unsetenv("XDG_CACHE_HOME");
  ASSERT_TRUE(cached.measured) << cached.warning;
  EXPECT_EQ(cached.measured->block_size, aio.find("block_size")->as_int());
  EXPECT_EQ(cached.measured->queue_depth, aio.find("queue_depth")->as_int());
  EXPECT_EQ(cached.measured->path, (dir.path() / "disk").string());
  EXPECT_NE(r.out.find("cached for device " + device.text() + " in " + cached.file),
            std::string::npos)
      << r.out;

  // ... and "auto" in a config whose nvme_path is on that device resolves to them.
  const auto config =
      dir.write("ds_config.json",
                R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "offload_optimizer": )"
                R"({"device": "nvme", "nvme_path": ")" +
                    (dir.path() / "disk" / "swap").string() +
                    R"("}}, "aio": {"block_size": "auto", "queue_depth": "auto"}})");
  ProcessOptions options;
  options.env["XDG_CACHE_HOME"] = (dir.path() / "cache").string();
  ProcessResult check = run_dscore({"config", "check", config.string()}, options);
  ASSERT_EQ(check.exit_code, 0) << check.describe();
  Result<json::Value> resolved = json::parse(check.out, "stdout");
  ASSERT_TRUE(resolved.ok()) << check.out;
  EXPECT_EQ(*resolved->find("aio")->find("block_size"), *aio.find("block_size"));
  EXPECT_EQ(*resolved->find("aio")->find("queue_depth"), *aio.find("queue_depth"));
  EXPECT_NE(check.err.find("note: aio.block_size: \"auto\" -> "), std::string::npos) << check.err;
  EXPECT_NE(check.err.find("measured by `dscore io-bench"), std::string::npos) << check.err;
}

TEST(CliIoBench, NoCacheLeavesTheCacheAlone) {
  TempDir dir("dscore_cli_io_bench");
  std::filesystem::create_directories(dir.path() / "disk");
  ProcessResult r = io_bench(dir, {"--no-cache"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(lines_starting_with(r.out, "{\"aio\": ").size(), 1u) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "cache"));
}

TEST(CliIoBench, UsageErrorsExitTwoAndNameTheProblem) {
  TempDir dir("dscore_cli_io_bench");
  ProcessResult missing = io_bench(dir);  // "disk" was never created
  EXPECT_EQ(missing.exit_code, 2) << missing.describe();
  EXPECT_NE(missing.err.find((dir.path() / "disk").string() + " is not a folder"),
            std::string::npos)
      << missing.err;
  std::filesystem::create_directories(dir.path() / "disk");
  ProcessResult bad =
      run_dscore({"io-bench", (dir.path() / "disk").string(), "--block-sizes", "1MiB,lots"});
  EXPECT_EQ(bad.exit_code, 2) << bad.describe();
  EXPECT_NE(bad.err.find("--block-sizes: \"lots\""), std::string::npos) << bad.err;
  ProcessResult none = run_dscore({"io-bench"});
  EXPECT_EQ(none.exit_code, 2) << none.describe();
}

}  // namespace
}  // namespace dscore::testing
