// Tests of plugins/monitors/tensorboard through the C ABI: the event file is
// read back with a TFRecord reader written here (length, masked CRC32C of
// the length, data, masked CRC32C of the data; bitwise CRC, independent of
// the plugin's table) and a protobuf decode of tensorflow.Event, and checked
// against what was written (docs/deepspeed-reference.md#monitors: SummaryWriter.add_scalar
// at global_samples, flushed after every batch). TensorBoard's own reader
// checks the same files in tests/external/check_tensorboard.py.
#include <dscore/monitor.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/fakes/fake_host.h"
#include "tests/plugins/monitors/host_schema_check.h"
#include "tests/plugins/monitors/monitor_test_util.h"

namespace dscore::testing {
namespace {

namespace fs = std::filesystem;

uint32_t crc32c_bitwise(std::string_view data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : data) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
  }
  return ~crc;
}
uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

// Every record of a TFRecord file; throws naming the record and the check
// that failed.
std::vector<std::string> read_tfrecords(const std::string& bytes) {
  std::vector<std::string> records;
  size_t pos = 0;
  while (pos < bytes.size()) {
    const std::string at = "record " + std::to_string(records.size()) + ": ";
    if (bytes.size() - pos < 12) throw std::runtime_error(at + "truncated header");
    const std::string_view length_bytes(bytes.data() + pos, 8);
    const uint64_t length = read_le(bytes, pos, 8);
    if (read_le(bytes, pos + 8, 4) != masked(crc32c_bitwise(length_bytes)))
      throw std::runtime_error(at + "length CRC mismatch");
    pos += 12;
    if (bytes.size() - pos < length + 4) throw std::runtime_error(at + "truncated data");
    const std::string data = bytes.substr(pos, length);
    if (read_le(bytes, pos + length, 4) != masked(crc32c_bitwise(data)))
      throw std::runtime_error(at + "data CRC mismatch");
    pos += length + 4;
    records.push_back(data);
  }
  return records;
}

struct DecodedEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> values;  // Summary.value: (tag, simple_value)
};

DecodedEvent decode_event(const std::string& record) {
  DecodedEvent e;
  for (const ProtoField& f : parse_proto(record)) {
    if (f.field == 1) e.wall_time = f.as_double();
    if (f.field == 2) e.step = static_cast<int64_t>(f.number_value);
    if (f.field == 3) e.file_version = f.bytes;
    if (f.field == 5)
      for (const ProtoField& v : fields_of(parse_proto(f.bytes), 1)) {
        const std::vector<ProtoField> value = parse_proto(v.bytes);
        e.values.emplace_back(field_of(value, 1).bytes, field_of(value, 2).as_float());
      }
  }
  return e;
}

std::string hostname() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

class TensorBoardMonitorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { lib_ = new TestPluginLibrary(DSCORE_TENSORBOARD_PLUGIN); }
  static void TearDownTestSuite() {
    delete lib_;
    lib_ = nullptr;
  }
  void SetUp() override { FakeHost::instance().clear_error(); }

  static const dscore_monitor_vtable* vt() {
    return lib_->vtable<dscore_monitor_vtable>(DSCORE_KIND_MONITOR, "tensorboard");
  }
  static CreateArgs args(const std::string& output_path, const std::string& job = "job") {
    CreateArgs a = CreateArgs::with_defaults(lib_->find(DSCORE_KIND_MONITOR, "tensorboard"));
    a.string("output_path", output_path).string("job_name", job);
    return a;
  }
  static dscore_monitor* create(CreateArgs a) {
    dscore_monitor* m = nullptr;
    EXPECT_EQ(vt()->create(a.get(), &m), DSCORE_OK) << FakeHost::instance().last_error();
    return m;
  }
  // The event files in `dir`.
  static std::vector<fs::path> event_files(const fs::path& dir) {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path());
    return out;
  }
  static std::vector<DecodedEvent> read_events(const fs::path& file) {
    std::vector<DecodedEvent> out;
    for (const std::string& r : read_tfrecords(read_bytes(file))) out.push_back(decode_event(r));
    return out;
  }

  TempDir dir_;
  static TestPluginLibrary* lib_;
};
TestPluginLibrary* TensorBoardMonitorTest::lib_ = nullptr;

TEST(Crc32cTest, MatchesTheStandardCheckValue) {
  // The check value of CRC-32C (RFC 3720), so the reader's CRC is the right one.
  EXPECT_EQ(crc32c_bitwise("123456789"), 0xE3069283u);
}

TEST_F(TensorBoardMonitorTest, WritesEventsTheReaderDecodes) {
  dscore_monitor* m = create(args(dir_.path().string()));
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(write_events(vt(), m, {{"Train/Samples/train_loss", 2.5, 0, 1700000000.25}}),
            DSCORE_OK);
  ASSERT_EQ(write_events(vt(), m,
                         {{"Train/Samples/lr", 1e-3, 32, 1700000001.5},
                          {"Train/Samples/loss_scale", 65536.0, 32, 1700000001.5}}),
            DSCORE_OK);
  ASSERT_EQ(write_events(vt(), m,
                         {{"Train/Samples/train_loss", 1.0 / 3, int64_t{1} << 40, 1700000002.0}}),
            DSCORE_OK);

  // Readable before destroy: every batch is flushed, as DeepSpeed flushes.
  std::vector<fs::path> files = event_files(dir_.path() / "job");
  ASSERT_EQ(files.size(), 1u);
  // events.out.tfevents.<10-digit seconds>.<host>.<pid>.<uid>, as torch names it.
  const std::string name = files[0].filename().string();
  const std::string prefix = "events.out.tfevents.";
  const std::string host_pid = "." + hostname() + "." + std::to_string(getpid()) + ".";
  ASSERT_GT(name.size(), prefix.size() + 10 + host_pid.size()) << name;
  EXPECT_EQ(name.substr(0, prefix.size()), prefix) << name;
  EXPECT_TRUE(matches_shape(name.substr(prefix.size(), 10), "9999999999")) << name;
  EXPECT_EQ(name.substr(prefix.size() + 10, host_pid.size()), host_pid) << name;
  const std::string uid = name.substr(prefix.size() + 10 + host_pid.size());
  EXPECT_TRUE(matches_shape(uid, std::string(uid.size(), '9'))) << name;

  std::vector<DecodedEvent> events = read_events(files[0]);
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_NEAR(events[0].wall_time, unix_now(), 60.0);
  EXPECT_TRUE(events[0].values.empty());

  struct Expected {
    double wall_time;
    int64_t step;
    std::string tag;
    float value;  // simple_value is a float32, as in SummaryWriter
  };
  const Expected expected[] = {
      {1700000000.25, 0, "Train/Samples/train_loss", 2.5f},
      {1700000001.5, 32, "Train/Samples/lr", 1e-3f},
      {1700000001.5, 32, "Train/Samples/loss_scale", 65536.0f},
      {1700000002.0, int64_t{1} << 40, "Train/Samples/train_loss", static_cast<float>(1.0 / 3)}};
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    const DecodedEvent& e = events[i + 1];
    EXPECT_EQ(e.wall_time, expected[i].wall_time);
    EXPECT_EQ(e.step, expected[i].step);
    EXPECT_TRUE(e.file_version.empty());
    ASSERT_EQ(e.values.size(), 1u);
    EXPECT_EQ(e.values[0].first, expected[i].tag);
    EXPECT_EQ(e.values[0].second, expected[i].value);
  }
  EXPECT_EQ(vt()->flush(m), DSCORE_OK);
  vt()->destroy(m);
  EXPECT_EQ(read_events(files[0]).size(), 5u);
}

TEST_F(TensorBoardMonitorTest, MissingWallTimeMeansNow) {
  dscore_monitor* m = create(args(dir_.path().string()));
  const double before = unix_now();
  ASSERT_EQ(write_events(vt(), m, {{"x", 1.0, 7, 0.0}}), DSCORE_OK);
  const double after = unix_now();
  vt()->destroy(m);
  std::vector<DecodedEvent> events = read_events(event_files(dir_.path() / "job").at(0));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_GE(events[1].wall_time, before);
  EXPECT_LE(events[1].wall_time, after);
  EXPECT_EQ(events[1].step, 7);
}

TEST_F(TensorBoardMonitorTest, ACorruptByteFailsTheCrcCheck) {
  dscore_monitor* m = create(args(dir_.path().string()));
  ASSERT_EQ(write_events(vt(), m, {{"Train/Samples/train_loss", 0.75, 32, 1.0}}), DSCORE_OK);
  vt()->destroy(m);
  const fs::path file = event_files(dir_.path() / "job").at(0);
  const std::string good = read_bytes(file);
  ASSERT_EQ(read_tfrecords(good).size(), 2u);
  const size_t second = 12 + read_le(good, 0, 8) + 4;  // offset of record 1

  std::string bad_data = good;
  bad_data[second + 12 + 5] ^= 0x01;  // a bit of record 1's Event bytes
  write_bytes(file, bad_data);
  try {
    read_tfrecords(read_bytes(file));
    ADD_FAILURE() << "a flipped data bit went unnoticed";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "record 1: data CRC mismatch");
  }

  std::string bad_length = good;
  bad_length[second] ^= 0x01;  // record 1's length
  write_bytes(file, bad_length);
  try {
    read_tfrecords(read_bytes(file));
    ADD_FAILURE() << "a flipped length bit went unnoticed";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "record 1: length CRC mismatch");
  }
}

TEST_F(TensorBoardMonitorTest, EachMonitorGetsItsOwnFile) {
  dscore_monitor* a = create(args(dir_.path().string()));
  dscore_monitor* b = create(args(dir_.path().string()));
  ASSERT_EQ(write_events(vt(), a, {{"a", 1.0, 1, 1.0}}), DSCORE_OK);
  ASSERT_EQ(write_events(vt(), b, {{"b", 2.0, 1, 1.0}}), DSCORE_OK);
  vt()->destroy(a);
  vt()->destroy(b);
  std::vector<fs::path> files = event_files(dir_.path() / "job");
  ASSERT_EQ(files.size(), 2u);
  EXPECT_NE(files[0], files[1]);
}

TEST_F(TensorBoardMonitorTest, DefaultJobNameAndEmptyOutputPath) {
  const fs::path previous = fs::current_path();
  fs::current_path(dir_.path());
  CreateArgs a = CreateArgs::with_defaults(lib_->find(DSCORE_KIND_MONITOR, "tensorboard"));
  dscore_monitor* m = create(a);  // output_path "" = current directory
  fs::current_path(previous);
  ASSERT_NE(m, nullptr);
  vt()->destroy(m);
  ASSERT_TRUE(fs::is_directory(dir_.path() / "DeepSpeedJobName"));
  EXPECT_EQ(event_files(dir_.path() / "DeepSpeedJobName").size(), 1u);
}

TEST_F(TensorBoardMonitorTest, UnwritableOutputPathIsAnErrorNamingIt) {
  const fs::path file =
      dir_.path() / "not_a_dir";  // a file where a folder is needed fails even for root
  write_bytes(file, "x");
  dscore_monitor* m = nullptr;
  CreateArgs a = args(file.string());
  EXPECT_NE(vt()->create(a.get(), &m), DSCORE_OK);
  EXPECT_EQ(m, nullptr);
  const std::string message = FakeHost::instance().last_error();
  EXPECT_NE(message.find((file / "job").string()), std::string::npos) << message;
  EXPECT_NE(message.find("tensorboard.output_path"), std::string::npos) << message;
}

TEST_F(TensorBoardMonitorTest, AFailedWriteMidRunIsAnErrorNamingTheFile) {
  dscore_monitor* m = create(args(dir_.path().string()));
  ASSERT_NE(m, nullptr);
  const fs::path file = event_files(dir_.path() / "job").at(0);
  {
    FileSizeLimit full(fs::file_size(file));  // the disk is full from now on
    EXPECT_EQ(write_events(vt(), m, {{"Train/Samples/lr", 0.1, 32, 1.0}}),
              DSCORE_RESOURCE_EXHAUSTED);
  }
  const std::string message = FakeHost::instance().last_error();
  EXPECT_NE(message.find(file.string()), std::string::npos) << message;
  EXPECT_NE(message.find("File too large"), std::string::npos) << message;
  vt()->destroy(m);  // never fails, even with unwritable buffered data
}

TEST_F(TensorBoardMonitorTest, TheHostFillsDeepSpeedsDefaults) {
  HostValidation v =
      host_validate(lib_->find(DSCORE_KIND_MONITOR, "tensorboard")->params_schema, "{}");
  EXPECT_TRUE(v.errors.empty()) << v.errors.at(0);
  EXPECT_EQ(v.params.find("output_path")->as_string(), "");
  EXPECT_EQ(v.params.find("job_name")->as_string(), "DeepSpeedJobName");
}

TEST_F(TensorBoardMonitorTest, SchemaHasDeepSpeedDefaults) {
  std::vector<SchemaField> fields =
      parse_params_schema(lib_->find(DSCORE_KIND_MONITOR, "tensorboard")->params_schema);
  ASSERT_EQ(fields.size(), 2u);  // "enabled" is consumed by the host
  EXPECT_EQ(fields[0].name, "output_path");
  EXPECT_EQ(fields[0].default_json, "\"\"");
  EXPECT_EQ(fields[1].name, "job_name");
  EXPECT_EQ(fields[1].default_json, "\"DeepSpeedJobName\"");
}

}  // namespace
}  // namespace dscore::testing
