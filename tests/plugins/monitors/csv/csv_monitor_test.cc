// Tests of plugins/monitors/csv through the C ABI: the files DeepSpeed's
// csvMonitor would write (docs/deepspeed-reference.md#monitors) — names, header once per
// process, append with a second header after a restart, Python repr values,
// CRLF lines — and errors that name the path.
#include <dscore/monitor.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/fakes/fake_host.h"

namespace dscore::testing {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class CsvMonitorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { lib_ = new TestPluginLibrary(DSCORE_CSV_MONITOR_PLUGIN); }
  static void TearDownTestSuite() {
    delete lib_;
    lib_ = nullptr;
  }
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "dscore_csv_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    FakeHost::instance().clear_error();
  }
  void TearDown() override { fs::remove_all(dir_); }

  static const dscore_monitor_vtable* vt() {
    return lib_->vtable<dscore_monitor_vtable>(DSCORE_KIND_MONITOR, "csv_monitor");
  }
  CreateArgs args(const std::string& output_path, const std::string& job = "job") {
    CreateArgs a = CreateArgs::with_defaults(lib_->find(DSCORE_KIND_MONITOR, "csv_monitor"));
    a.string("output_path", output_path).string("job_name", job);
    return a;
  }
  dscore_monitor* create(CreateArgs a) {
    dscore_monitor* m = nullptr;
    EXPECT_EQ(vt()->create(a.get(), &m), DSCORE_OK) << FakeHost::instance().last_error();
    return m;
  }
  static dscore_status write(dscore_monitor* m, std::vector<std::pair<std::string, double>> tv,
                             int64_t step) {
    std::vector<dscore_scalar_event> events;
    for (const auto& [tag, value] : tv)
      events.push_back({sizeof(dscore_scalar_event), tag.c_str(), value, step, 0.0});
    std::vector<const dscore_scalar_event*> ptrs;
    for (const auto& e : events) ptrs.push_back(&e);
    return vt()->write_scalars(m, ptrs.data(), ptrs.size());
  }

  fs::path dir_;
  static TestPluginLibrary* lib_;
};
TestPluginLibrary* CsvMonitorTest::lib_ = nullptr;

TEST_F(CsvMonitorTest, OneFilePerTagWithHeaderOnce) {
  dscore_monitor* m = create(args(dir_.string()));
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(write(m, {{"Train/Samples/train_loss", 2.5}}, 0), DSCORE_OK);
  ASSERT_EQ(write(m, {{"Train/Samples/lr", 1e-05}, {"Train/Samples/loss_scale", 65536.0}}, 32),
            DSCORE_OK);
  ASSERT_EQ(
      write(m, {{"Train/Samples/train_loss", 1.25}, {"Train/Samples/elapsed time ms", 12.0}}, 32),
      DSCORE_OK);
  // Visible before destroy: every call flushes, as DeepSpeed closes each file.
  const fs::path job = dir_ / "job";
  EXPECT_EQ(read_file(job / "Train_Samples_train_loss.csv"),
            "step,train_loss\r\n0,2.5\r\n32,1.25\r\n");
  EXPECT_EQ(read_file(job / "Train_Samples_lr.csv"), "step,lr\r\n32,1e-05\r\n");
  EXPECT_EQ(read_file(job / "Train_Samples_loss_scale.csv"), "step,loss_scale\r\n32,65536.0\r\n");
  // Spaces become '_' in the file name, but the header keeps the leaf as is.
  EXPECT_EQ(read_file(job / "Train_Samples_elapsed_time_ms.csv"),
            "step,elapsed time ms\r\n32,12.0\r\n");
  EXPECT_EQ(vt()->flush(m), DSCORE_OK);
  vt()->destroy(m);
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(job)) files += entry.is_regular_file();
  EXPECT_EQ(files, 4u);
}

TEST_F(CsvMonitorTest, ASecondProcessAppendsWithASecondHeader) {
  dscore_monitor* first = create(args(dir_.string()));
  ASSERT_EQ(write(first, {{"Train/Samples/train_loss", 3.0}}, 0), DSCORE_OK);
  vt()->destroy(first);
  dscore_monitor* second = create(args(dir_.string()));  // a resumed run
  ASSERT_EQ(write(second, {{"Train/Samples/train_loss", 0.5}}, 64), DSCORE_OK);
  vt()->destroy(second);
  EXPECT_EQ(read_file(dir_ / "job" / "Train_Samples_train_loss.csv"),
            "step,train_loss\r\n0,3.0\r\nstep,train_loss\r\n64,0.5\r\n");
}

TEST_F(CsvMonitorTest, ValuesArePythonReprAndHeadersAreCsvQuoted) {
  dscore_monitor* m = create(args(dir_.string()));
  const double values[] = {1e-05, 0.0001, 1e16, 123.0, 1.0 / 3, std::stod("inf"), std::stod("nan")};
  for (double v : values) ASSERT_EQ(write(m, {{"x", v}}, 7), DSCORE_OK);
  ASSERT_EQ(write(m, {{"Eval/a,b", 1.0}}, 1), DSCORE_OK);
  vt()->destroy(m);
  EXPECT_EQ(read_file(dir_ / "job" / "x.csv"),
            "step,x\r\n7,1e-05\r\n7,0.0001\r\n7,1e+16\r\n7,123.0\r\n7,0.3333333333333333\r\n"
            "7,inf\r\n7,nan\r\n");
  EXPECT_EQ(read_file(dir_ / "job" / "Eval_a,b.csv"), "step,\"a,b\"\r\n1,1.0\r\n");
}

TEST_F(CsvMonitorTest, CreatesNestedDirectoriesAndUsesDefaultJobName) {
  CreateArgs a = CreateArgs::with_defaults(lib_->find(DSCORE_KIND_MONITOR, "csv_monitor"));
  a.string("output_path", (dir_ / "a" / "b").string());
  dscore_monitor* m = create(a);
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(fs::is_directory(dir_ / "a" / "b" / "DeepSpeedJobName"));
  vt()->destroy(m);
}

TEST_F(CsvMonitorTest, EmptyOutputPathMeansCurrentDirectory) {
  fs::path previous = fs::current_path();
  fs::current_path(dir_);
  dscore_monitor* m = create(args("", "run1"));
  ASSERT_EQ(write(m, {{"Train/Samples/lr", 0.001}}, 32), DSCORE_OK);
  vt()->destroy(m);
  fs::current_path(previous);
  EXPECT_EQ(read_file(dir_ / "run1" / "Train_Samples_lr.csv"), "step,lr\r\n32,0.001\r\n");
}

TEST_F(CsvMonitorTest, UnwritableOutputPathIsAnErrorNamingIt) {
  // A regular file where a directory is needed fails even for root.
  fs::path file = dir_ / "not_a_dir";
  std::ofstream(file) << "x";
  dscore_monitor* m = nullptr;
  CreateArgs a = args(file.string());
  EXPECT_NE(vt()->create(a.get(), &m), DSCORE_OK);
  EXPECT_EQ(m, nullptr);
  std::string message = FakeHost::instance().last_error();
  EXPECT_NE(message.find((file / "job").string()), std::string::npos) << message;
  EXPECT_NE(message.find("Not a directory"), std::string::npos) << message;
  EXPECT_NE(message.find("output_path"), std::string::npos) << message;
}

TEST_F(CsvMonitorTest, WriteErrorNamesTheFile) {
  dscore_monitor* m = create(args(dir_.string()));
  fs::create_directories(dir_ / "job" / "blocked.csv");  // fopen of a directory fails
  EXPECT_NE(write(m, {{"blocked", 1.0}}, 0), DSCORE_OK);
  std::string message = FakeHost::instance().last_error();
  EXPECT_NE(message.find((dir_ / "job" / "blocked.csv").string()), std::string::npos) << message;
  vt()->destroy(m);
}

TEST_F(CsvMonitorTest, SchemaHasDeepSpeedDefaults) {
  std::vector<SchemaField> fields =
      parse_params_schema(lib_->find(DSCORE_KIND_MONITOR, "csv_monitor")->params_schema);
  ASSERT_EQ(fields.size(), 2u);  // "enabled" is consumed by the host
  EXPECT_EQ(fields[0].name, "output_path");
  EXPECT_EQ(fields[0].default_json, "\"\"");
  EXPECT_EQ(fields[1].name, "job_name");
  EXPECT_EQ(fields[1].default_json, "\"DeepSpeedJobName\"");
}

}  // namespace
}  // namespace dscore::testing
