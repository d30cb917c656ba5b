// Tests of plugins/monitors/wandb through the C ABI: the offline run folder
// (layout as wandb.init(mode="offline") leaves it) and its transaction log,
// read back with the reader in run_file_reader.h (block framing, CRCs,
// Record decode): run metadata (project/entity=team/group), history rows
// with _step = global_samples merged per step as wandb.log merges them
// (docs/deepspeed-reference.md#monitors), summaries, config and the exit record. wandb's
// own reader checks the same files in tests/external/check_wandb.py.
#include <dscore/monitor.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/fakes/fake_host.h"
#include "tests/plugins/monitors/host_schema_check.h"
#include "tests/plugins/monitors/monitor_test_util.h"
#include "tests/plugins/monitors/wandb/run_file_reader.h"

namespace dscore::testing {
namespace {

namespace fs = std::filesystem;

std::string item_value(const std::vector<WandbItem>& items, const std::string& key) {
  for (const WandbItem& i : items)
    if (i.key == key) return i.value_json;
  return "<absent>";
}
std::vector<std::string> item_keys(const std::vector<WandbItem>& items) {
  std::vector<std::string> keys;
  for (const WandbItem& i : items) keys.push_back(i.key);
  return keys;
}
std::string string_field(const std::vector<ProtoField>& body, uint32_t field) {
  std::vector<ProtoField> f = fields_of(body, field);
  return f.empty() ? "" : f.at(0).bytes;
}

class WandbMonitorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { lib_ = new TestPluginLibrary(DSCORE_WANDB_PLUGIN); }
  static void TearDownTestSuite() {
    delete lib_;
    lib_ = nullptr;
  }
  void SetUp() override {
    FakeHost::instance().clear_error();
    FakeHost::instance().clear_logs();
  }

  static const dscore_monitor_vtable* vt() {
    return lib_->vtable<dscore_monitor_vtable>(DSCORE_KIND_MONITOR, "wandb");
  }
  CreateArgs args() const {
    CreateArgs a = CreateArgs::with_defaults(lib_->find(DSCORE_KIND_MONITOR, "wandb"));
    a.string("dir", dir_.path().string());
    return a;
  }
  static dscore_monitor* create(CreateArgs a) {
    dscore_monitor* m = nullptr;
    EXPECT_EQ(vt()->create(a.get(), &m), DSCORE_OK) << FakeHost::instance().last_error();
    return m;
  }
  // The one offline run folder under base/wandb.
  static fs::path run_dir(const fs::path& base) {
    std::vector<fs::path> runs;
    for (const auto& e : fs::directory_iterator(base / "wandb"))
      if (e.path().filename().string().rfind("offline-run-", 0) == 0) runs.push_back(e.path());
    if (runs.size() != 1)
      throw std::runtime_error("expected one run folder, found " + std::to_string(runs.size()));
    return runs[0];
  }
  static fs::path run_file(const fs::path& run) {
    const std::string name = run.filename().string();
    return run / ("run-" + name.substr(name.rfind('-') + 1) + ".wandb");
  }
  std::vector<WandbRecord> records() const {
    return read_run_records(read_bytes(run_file(run_dir(dir_.path()))));
  }

  TempDir dir_;
  static TestPluginLibrary* lib_;
};
TestPluginLibrary* WandbMonitorTest::lib_ = nullptr;

TEST(Crc32Test, MatchesTheStandardCheckValue) {
  EXPECT_EQ(crc32_bitwise("123456789"), 0xCBF43926u);  // zlib's CRC-32 check value
}

TEST_F(WandbMonitorTest, OfflineRunFolderAsWandbLaysItOut) {
  CreateArgs a = args();
  a.string("team", "my-team").string("group", "ablation").string("project", "dscore-tests");
  dscore_monitor* m = create(a);
  ASSERT_NE(m, nullptr);
  const fs::path run = run_dir(dir_.path());
  const std::string run_name = run.filename().string();
  ASSERT_TRUE(matches_shape(run_name, "offline-run-99999999_999999-aaaaaaaa")) << run_name;
  const std::string run_id = run_name.substr(run_name.size() - 8);
  EXPECT_TRUE(fs::is_regular_file(run / ("run-" + run_id + ".wandb")));
  EXPECT_TRUE(fs::is_directory(run / "files"));
  EXPECT_TRUE(fs::is_directory(run / "logs"));
  EXPECT_EQ(fs::read_symlink(dir_.path() / "wandb" / "latest-run"), run_name);

  // Readable at once: header and run records are flushed by create().
  std::vector<WandbRecord> r = records();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].type, "header");
  EXPECT_EQ(r[0].num, 1);
  EXPECT_EQ(r[1].type, "run");
  EXPECT_EQ(r[1].num, 2);
  EXPECT_EQ(string_field(r[1].body, 1), run_id);
  EXPECT_EQ(string_field(r[1].body, 2), "my-team");  // entity = team, as DeepSpeed passes it
  EXPECT_EQ(string_field(r[1].body, 3), "dscore-tests");
  EXPECT_EQ(string_field(r[1].body, 6), "ablation");
  EXPECT_FALSE(string_field(r[1].body, 13).empty());  // host
  const std::vector<ProtoField> start = parse_proto(field_of(r[1].body, 17).bytes);
  EXPECT_NEAR(static_cast<double>(field_of(start, 1).number_value),
              static_cast<double>(std::time(nullptr)), 60.0);
  vt()->destroy(m);
}

TEST_F(WandbMonitorTest, DefaultsLeaveEntityAndGroupToWandb) {
  dscore_monitor* m = create(args());
  vt()->destroy(m);
  std::vector<WandbRecord> r = records();
  ASSERT_GE(r.size(), 2u);
  // docs/deepspeed-reference.md#monitors: project "deepspeed".
  EXPECT_EQ(string_field(r[1].body, 3), "deepspeed");
  EXPECT_TRUE(fields_of(r[1].body, 2).empty());
  EXPECT_TRUE(fields_of(r[1].body, 6).empty());
}

// The engine's pattern: train_loss at the pre-increment global_samples, lr at
// the post-increment one, so each wandb row holds lr of one step and
// train_loss of the next, as DeepSpeed's wandb.log calls produce.
TEST_F(WandbMonitorTest, HistoryRowsMergePerStepLikeWandbLog) {
  dscore_monitor* m = create(args());
  ASSERT_EQ(write_events(vt(), m,
                         {{"Train/Samples/train_loss", 0.5, 0, 100.0},
                          {"Train/Samples/lr", 1e-05, 32, 100.0}}),
            DSCORE_OK);
  // Row 0 is complete (step 32 arrived) and flushed; row 32 is still open.
  std::vector<WandbRecord> r = records();
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[2].type, "history");
  EXPECT_EQ(r[2].history_step, 0);

  ASSERT_EQ(write_events(vt(), m,
                         {{"Train/Samples/train_loss", 0.25, 32, 101.0},
                          {"Train/Samples/lr", 2e-05, 64, 101.0}}),
            DSCORE_OK);
  ASSERT_EQ(write_events(vt(), m, {{"Train/Samples/train_loss", std::stod("nan"), 64, 102.0}}),
            DSCORE_OK);
  vt()->destroy(m);

  r = records();
  // header, run, 3 x (history, summary) for steps 0, 32, 64, exit.
  ASSERT_EQ(r.size(), 9u);
  struct Row {
    int64_t step;
    std::vector<std::string> keys;
    std::vector<std::string> values;
  };
  const Row rows[] = {
      {0, {"Train/Samples/train_loss", "_step", "_runtime", "_timestamp"}, {"0.5", "0"}},
      {32,
       {"Train/Samples/lr", "Train/Samples/train_loss", "_step", "_runtime", "_timestamp"},
       {"1e-05", "0.25", "32"}},
      {64,
       {"Train/Samples/lr", "Train/Samples/train_loss", "_step", "_runtime", "_timestamp"},
       {"2e-05", "NaN", "64"}},
  };
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    const WandbRecord& history = r[2 + 2 * i];
    const WandbRecord& summary = r[3 + 2 * i];
    ASSERT_EQ(history.type, "history");
    EXPECT_EQ(history.num, static_cast<int64_t>(3 + 2 * i));
    EXPECT_EQ(history.history_step, rows[i].step);
    EXPECT_EQ(item_keys(history.items), rows[i].keys);
    for (size_t k = 0; k < rows[i].values.size(); ++k)
      EXPECT_EQ(history.items[k].value_json, rows[i].values[k]) << rows[i].keys[k];
    EXPECT_EQ(item_value(history.items, "_timestamp"), std::to_string(100 + i) + ".0");
    // _runtime: seconds since the run started (the event times here are in 1970).
    EXPECT_LT(std::stod(item_value(history.items, "_runtime")), 0.0);
    ASSERT_EQ(summary.type, "summary");
    EXPECT_EQ(item_keys(summary.items), rows[i].keys);
    EXPECT_EQ(item_value(summary.items, "_step"), std::to_string(rows[i].step));
  }
  EXPECT_EQ(r[8].type, "exit");
  EXPECT_EQ(r[8].num, 9);
  EXPECT_TRUE(fields_of(r[8].body, 1).empty());  // exit_code 0
}

TEST_F(WandbMonitorTest, AValueForAnEarlierStepIsDroppedWithAWarning) {
  dscore_monitor* m = create(args());
  ASSERT_EQ(write_events(vt(), m, {{"a", 1.0, 64, 1.0}}), DSCORE_OK);
  ASSERT_EQ(write_events(vt(), m, {{"a", 2.0, 32, 1.0}, {"b", 3.0, 64, 1.0}}), DSCORE_OK);
  vt()->destroy(m);
  std::vector<WandbRecord> r = records();
  ASSERT_EQ(r.size(), 5u);
  EXPECT_EQ(r[2].history_step, 64);
  EXPECT_EQ(item_value(r[2].items, "a"), "1.0");
  EXPECT_EQ(item_value(r[2].items, "b"), "3.0");
  bool warned = false;
  for (const LogLine& line : FakeHost::instance().logs())
    warned |= line.level == DSCORE_LOG_WARNING && line.message.find("step 32") != std::string::npos;
  EXPECT_TRUE(warned);
}

TEST_F(WandbMonitorTest, WriteConfigStoresTheResolvedConfig) {
  dscore_monitor* m = create(args());
  ASSERT_NE(vt()->write_config, nullptr);
  const char* config =
      R"({"train_batch_size": 32, "optimizer": {"type": "Adam", "params": {"lr": 0.001, "betas": [0.9, 0.999]}},)"
      R"( "caf\u00e9 \"x\"": "a,b}", "empty": {}, "none": null})";
  ASSERT_EQ(vt()->write_config(m, config), DSCORE_OK) << FakeHost::instance().last_error();
  vt()->destroy(m);
  std::vector<WandbRecord> r = records();
  ASSERT_GE(r.size(), 3u);
  ASSERT_EQ(r[2].type, "config");
  EXPECT_EQ(item_keys(r[2].items),
            (std::vector<std::string>{"train_batch_size", "optimizer", "caf\xC3\xA9 \"x\"", "empty",
                                      "none"}));
  EXPECT_EQ(item_value(r[2].items, "train_batch_size"), "32");
  EXPECT_EQ(item_value(r[2].items, "optimizer"),
            R"({"type": "Adam", "params": {"lr": 0.001, "betas": [0.9, 0.999]}})");
  EXPECT_EQ(item_value(r[2].items, "caf\xC3\xA9 \"x\""), R"("a,b}")");
  EXPECT_EQ(item_value(r[2].items, "none"), "null");
}

TEST_F(WandbMonitorTest, ConfigThatIsNotAnObjectIsAnError) {
  dscore_monitor* m = create(args());
  EXPECT_EQ(vt()->write_config(m, "[1, 2]"), DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(FakeHost::instance().last_error().find("not a JSON object"), std::string::npos);
  EXPECT_EQ(vt()->write_config(m, R"({"a": 1} x)"), DSCORE_INVALID_ARGUMENT);
  vt()->destroy(m);
}

// A record bigger than a block is split FIRST/MIDDLE/LAST, as wandb's
// writer splits it.
TEST_F(WandbMonitorTest, LargeRecordsSpanBlocks) {
  dscore_monitor* m = create(args());
  const std::string big(70000, 'x');
  ASSERT_EQ(vt()->write_config(m, ("{\"blob\": \"" + big + "\"}").c_str()), DSCORE_OK);
  for (int step = 0; step < 400; ++step)
    ASSERT_EQ(
        write_events(vt(), m, {{"Train/Samples/train_loss", 1.0 / (step + 1), step * 32, 5.0}}),
        DSCORE_OK);
  vt()->destroy(m);
  const RunFileChunks chunks = read_run_file(read_bytes(run_file(run_dir(dir_.path()))));
  EXPECT_EQ(chunks.chunk_types[2], 2);  // FIRST
  EXPECT_EQ(chunks.chunk_types[3], 3);  // MIDDLE
  EXPECT_EQ(chunks.chunk_types[4], 4);  // LAST
  std::vector<WandbRecord> r = records();
  ASSERT_EQ(r.size(), 3u + 2 * 400 + 1);
  EXPECT_EQ(item_value(r[2].items, "blob"), "\"" + big + "\"");
  EXPECT_EQ(item_value(r[2 + 2 * 399 + 1].items, "Train/Samples/train_loss"), "0.0025");
}

// A config record sized to end `left` bytes before the first block's end,
// then another record: with fewer than 7 bytes left wandb's writer pads the
// block with zeros; with exactly 7 it writes an empty FIRST chunk there.
TEST_F(WandbMonitorTest, RecordsAtABlockEndPadOrSplitAsWandbDoes) {
  for (size_t left : {3u, 7u}) {
    SCOPED_TRACE(left);
    TempDir dir;
    CreateArgs a = args();
    a.string("dir", dir.path().string());
    dscore_monitor* m = create(a);
    const fs::path file = run_file(run_dir(dir.path()));
    const size_t start = fs::file_size(file);
    // Record{num, config{update{key "k", value_json "\"x...x\""}}} is the
    // value's length + 20 bytes for values of 16 KiB..2 MiB; 7 of chunk header.
    const size_t value = 32768 - left - start - 7 - 20;
    ASSERT_EQ(vt()->write_config(m, ("{\"k\": \"" + std::string(value, 'x') + "\"}").c_str()),
              DSCORE_OK);
    ASSERT_EQ(fs::file_size(file), 32768 - left);
    ASSERT_EQ(vt()->write_config(m, R"({"after": 1})"), DSCORE_OK);
    vt()->destroy(m);
    const RunFileChunks chunks = read_run_file(read_bytes(file));
    if (left < 7) {
      EXPECT_EQ(chunks.paddings, std::vector<size_t>{32768 - left});
      EXPECT_EQ(chunks.chunk_offsets.at(3), 32768u);
      EXPECT_EQ(chunks.chunk_types.at(3), 1);  // FULL, in the next block
    } else {
      EXPECT_TRUE(chunks.paddings.empty());
      EXPECT_EQ(chunks.chunk_offsets.at(3), 32768u - 7);
      EXPECT_EQ(chunks.chunk_types.at(3), 2);  // an empty FIRST chunk ...
      EXPECT_EQ(chunks.chunk_types.at(4), 4);  // ... and the LAST in the next block
    }
    std::vector<WandbRecord> r = read_run_records(read_bytes(file));
    ASSERT_EQ(r.size(), 5u);
    EXPECT_EQ(item_value(r[3].items, "after"), "1");
  }
}

TEST_F(WandbMonitorTest, ACorruptByteFailsTheCrcCheck) {
  dscore_monitor* m = create(args());
  ASSERT_EQ(write_events(vt(), m, {{"x", 1.0, 0, 1.0}}), DSCORE_OK);
  vt()->destroy(m);
  const fs::path file = run_file(run_dir(dir_.path()));
  std::string bytes = read_bytes(file);
  ASSERT_EQ(read_run_records(bytes).size(), 5u);
  bytes[7 + 7 + 3] ^= 0x20;  // inside the header record's data
  try {
    read_run_file(bytes);
    ADD_FAILURE() << "a flipped bit went unnoticed";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "chunk at offset 7: CRC mismatch");
  }
}

TEST_F(WandbMonitorTest, DirDefaultsToWandbDirThenTheCurrentDirectory) {
  TempDir env_dir;
  setenv("WANDB_DIR", env_dir.path().c_str(), 1);
  CreateArgs a = CreateArgs::with_defaults(lib_->find(DSCORE_KIND_MONITOR, "wandb"));
  dscore_monitor* m = create(a);
  unsetenv("WANDB_DIR");
  vt()->destroy(m);
  EXPECT_NO_THROW(run_dir(env_dir.path()));

  const fs::path previous = fs::current_path();
  fs::current_path(dir_.path());
  m = create(a);
  fs::current_path(previous);
  vt()->destroy(m);
  EXPECT_NO_THROW(run_dir(dir_.path()));
}

TEST_F(WandbMonitorTest, InvalidProjectNameIsAnError) {
  CreateArgs a = args();
  a.string("project", "team/project");
  dscore_monitor* m = nullptr;
  EXPECT_EQ(vt()->create(a.get(), &m), DSCORE_INVALID_ARGUMENT);
  EXPECT_EQ(m, nullptr);
  EXPECT_NE(FakeHost::instance().last_error().find("team/project"), std::string::npos);
}

TEST_F(WandbMonitorTest, UnwritableDirIsAnErrorNamingIt) {
  const fs::path file = dir_.path() / "not_a_dir";
  write_bytes(file, "x");
  CreateArgs a = args();
  a.string("dir", file.string());
  dscore_monitor* m = nullptr;
  EXPECT_NE(vt()->create(a.get(), &m), DSCORE_OK);
  EXPECT_EQ(m, nullptr);
  const std::string message = FakeHost::instance().last_error();
  EXPECT_NE(message.find((file / "wandb").string()), std::string::npos) << message;
  EXPECT_NE(message.find("wandb.dir"), std::string::npos) << message;
}

TEST_F(WandbMonitorTest, AFailedWriteMidRunIsAnErrorNamingTheFile) {
  dscore_monitor* m = create(args());
  ASSERT_NE(m, nullptr);
  const fs::path file = run_file(run_dir(dir_.path()));
  ASSERT_EQ(write_events(vt(), m, {{"x", 1.0, 0, 1.0}}), DSCORE_OK);
  {
    FileSizeLimit full(fs::file_size(file));
    EXPECT_EQ(write_events(vt(), m, {{"x", 2.0, 32, 1.0}}), DSCORE_RESOURCE_EXHAUSTED);
  }
  const std::string message = FakeHost::instance().last_error();
  EXPECT_NE(message.find(file.string()), std::string::npos) << message;
  vt()->destroy(m);  // never fails
}

TEST_F(WandbMonitorTest, TheHostFillsDefaultsAndCatchesTypos) {
  const char* schema = lib_->find(DSCORE_KIND_MONITOR, "wandb")->params_schema;
  HostValidation v = host_validate(schema, "{}");
  EXPECT_TRUE(v.errors.empty()) << v.errors.at(0);
  EXPECT_EQ(v.params.find("project")->as_string(), "deepspeed");
  EXPECT_EQ(v.params.find("team"), nullptr);  // None in DeepSpeed: left to wandb
  EXPECT_EQ(v.params.find("group"), nullptr);
  v = host_validate(schema, R"({"teem": "x"})");
  ASSERT_EQ(v.errors.size(), 1u);
  EXPECT_NE(v.errors[0].find("team"), std::string::npos) << v.errors[0];
}

TEST_F(WandbMonitorTest, SchemaHasDeepSpeedDefaults) {
  std::vector<SchemaField> fields =
      parse_params_schema(lib_->find(DSCORE_KIND_MONITOR, "wandb")->params_schema);
  ASSERT_EQ(fields.size(), 4u);
  EXPECT_EQ(fields[0].name, "team");
  EXPECT_EQ(fields[0].default_json, "");  // None in DeepSpeed: not passed when absent
  EXPECT_EQ(fields[1].name, "group");
  EXPECT_EQ(fields[1].default_json, "");
  EXPECT_EQ(fields[2].name, "project");
  EXPECT_EQ(fields[2].default_json, "\"deepspeed\"");
  EXPECT_EQ(fields[3].name, "dir");
}

}  // namespace
}  // namespace dscore::testing
