// Tests of core/observability/comms_logger: DeepSpeed's comms_logger
// (docs/deepspeed-reference.md#comms-logger; deepspeed/utils/comms_logging.py) — bandwidth
// formulas per op family with fixed sizes and latencies (no timing), the
// Gbps conversion, prof_all/prof_ops filtering, records keyed by (name,
// size), the verbose line, log_summary's table with 10% trimmed means, and
// convert_size. Expected figures are the formulas evaluated here; the
// formatting strings are DeepSpeed's (checked against its Python code).
#include "core/observability/comms_logger.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/observability/ds_format.h"

namespace dscore::observability {
namespace {

constexpr uint64_t kS = 4 << 20;  // 4 MiB message
constexpr double kT = 2.0;        // ms
constexpr int64_t kN = 4;         // global world size

double gbps(double bytes_per_ms) { return bytes_per_ms * 8 / 1e6; }

Bandwidth bw(std::string_view op, uint64_t s = kS, double t = kT, int64_t n = kN) {
  Result<Bandwidth> r = comm_bandwidth(op, s, t, n);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : Bandwidth{};
}

TEST(CommBandwidth, AllReduceFamilyCountsTwiceTheMessage) {
  for (const char* op : {"all_reduce", "all_reduce_coalesced", "inference_all_reduce"}) {
    SCOPED_TRACE(op);
    EXPECT_DOUBLE_EQ(bw(op).algbw_gbps, gbps(2.0 * kS / kT));  // 33.554432 Gbps
    EXPECT_DOUBLE_EQ(bw(op).busbw_gbps, gbps(kS / kT * 2 * (kN - 1) / kN));
  }
}

TEST(CommBandwidth, GatherAndScatterFamilyScaleTheMessageByN) {
  for (const char* op :
       {"all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor"}) {
    SCOPED_TRACE(op);
    EXPECT_DOUBLE_EQ(bw(op).algbw_gbps, gbps(double(kS) * kN / kT));
    EXPECT_DOUBLE_EQ(bw(op).busbw_gbps, gbps(double(kS) * kN / kT * (kN - 1) / kN));
  }
}

TEST(CommBandwidth, AllToAllSingleAndPointToPoint) {
  EXPECT_DOUBLE_EQ(bw("all_to_all_single").algbw_gbps, gbps(kS / kT));
  EXPECT_DOUBLE_EQ(bw("all_to_all_single").busbw_gbps, gbps(kS / kT * (kN - 1) / kN));
  for (const char* op :
       {"send", "recv", "isend", "irecv", "broadcast", "reduce", "gather", "scatter", "barrier"}) {
    SCOPED_TRACE(op);
    EXPECT_DOUBLE_EQ(bw(op).algbw_gbps, gbps(kS / kT));
    EXPECT_DOUBLE_EQ(bw(op).busbw_gbps, bw(op).algbw_gbps);
  }
  EXPECT_EQ(bw("barrier", 0).algbw_gbps, 0.0);
}

TEST(CommBandwidth, UsesTheWorldSizeItIsGiven) {
  EXPECT_EQ(bw("all_reduce", kS, kT, 1).busbw_gbps, 0.0);  // one rank moves nothing across the bus
  EXPECT_DOUBLE_EQ(bw("all_gather", kS, kT, 8).algbw_gbps,
                   2 * bw("all_gather", kS, kT, 4).algbw_gbps);
}

TEST(CommBandwidth, UnknownOpIsAnErrorNotAnExit) {
  Result<Bandwidth> r = comm_bandwidth("all_to_all", kS, kT, kN);  // the list form has no formula
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'all_to_all'"), std::string::npos);
  EXPECT_NE(r.status().message().find("wrong comm_op specified"), std::string::npos);
}

TEST(CommBandwidth, ZeroLatencyIsInfiniteNotACrash) {
  EXPECT_TRUE(std::isinf(bw("broadcast", kS, 0.0).algbw_gbps));
  EXPECT_EQ(bw("barrier", 0, 0.0).algbw_gbps, 0.0);
}

TEST(ConvertSize, PrintsAsDeepSpeed) {
  EXPECT_EQ(convert_size(0), "0B");
  EXPECT_EQ(convert_size(512), "512.0 B");
  EXPECT_EQ(convert_size(1000), "1000.0 B");
  EXPECT_EQ(convert_size(1536), "1.5 KB");
  EXPECT_EQ(convert_size(kS), "4.0 MB");
  EXPECT_EQ(convert_size(1234567), "1.18 MB");
  EXPECT_EQ(convert_size(1048575), "1024.0 KB");  // rounds up within the unit, as Python does
  EXPECT_EQ(convert_size(uint64_t{3} << 30), "3.0 GB");
  EXPECT_EQ(convert_size(uint64_t{1} << 50), "1.0 PB");
}

TEST(CommsLogger, ProfilesPerProfAllProfOpsAndTheProfArgument) {
  CommsLogger all(CommsLoggerConfig{});
  EXPECT_TRUE(all.should_profile("all_gather"));  // prof_all defaults to true
  CommsLoggerConfig some;
  some.prof_all = false;
  some.prof_ops = {"all_reduce"};
  CommsLogger chosen(some);
  EXPECT_TRUE(chosen.should_profile("all_reduce"));
  EXPECT_FALSE(chosen.should_profile("all_gather"));
  EXPECT_TRUE(chosen.should_profile("all_gather", /*prof=*/true));
}

TEST(CommsLogger, RecordNameAddsTheCallerWithDebug) {
  CommsLoggerConfig c;
  EXPECT_EQ(CommsLogger(c).record_name("all_reduce", "reduce_bucket"), "all_reduce");
  c.debug = true;
  EXPECT_EQ(CommsLogger(c).record_name("all_reduce", "reduce_bucket"),
            "all_reduce | [Caller Func: reduce_bucket]");
}

TEST(CommsLogger, VerboseLineAsDeepSpeedPrintsIt) {
  CommsLoggerConfig c;
  c.verbose = true;
  CommsLogger logger(c);
  Result<std::string> line = logger.append("all_reduce", "all_reduce", kT, kS, kN);
  ASSERT_TRUE(line.ok());
  EXPECT_EQ(*line,
            "comm op: all_reduce | time (ms): 2.00 | msg size: 4.0 MB | algbw (Gbps): 33.55 | "
            "busbw (Gbps): 25.17");
  CommsLogger quiet(CommsLoggerConfig{});
  EXPECT_EQ(*quiet.append("all_reduce", "all_reduce", kT, kS, kN), "");
}

TEST(CommsLogger, RecordsAreKeyedByNameAndSize) {
  CommsLogger logger(CommsLoggerConfig{});
  ASSERT_TRUE(logger.append("all_gather_into_tensor", "allgather_params", 1.0, 1024, kN).ok());
  ASSERT_TRUE(logger.append("all_reduce", "all_reduce", 1.0, 4096, kN).ok());
  ASSERT_TRUE(logger.append("all_reduce", "all_reduce", 3.0, 4096, kN).ok());
  ASSERT_TRUE(logger.append("all_reduce", "all_reduce", 1.0, 512, kN).ok());
  EXPECT_FALSE(logger.append("broadcast_object_list", "x", 1.0, 8, kN).ok());
  ASSERT_EQ(logger.records().size(), 2u);
  EXPECT_EQ(logger.records()[0].name, "allgather_params");  // first-seen order
  const auto& sizes = logger.records()[1].sizes;
  ASSERT_EQ(sizes.size(), 2u);
  EXPECT_EQ(sizes[0].message_bytes, 512u);  // ascending
  const CommsLogger::Entry* e = logger.find("all_reduce", 4096);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->count, 2);
  EXPECT_EQ(e->latencies_ms, (std::vector<double>{1.0, 3.0}));
  EXPECT_DOUBLE_EQ(e->algbw_gbps[1], gbps(2.0 * 4096 / 3.0));
}

TEST(CommsLogger, SummaryTableWithTrimmedMeans) {
  CommsLogger logger(CommsLoggerConfig{});
  // Ten all_reduces of 4 MiB taking 1..10 ms: round(0.1 * 10) = 1 value
  // trimmed from each end, so the averages cover 2..9 ms.
  std::vector<double> algbw, busbw;
  for (int t = 1; t <= 10; ++t) {
    ASSERT_TRUE(logger.append("all_reduce", "all_reduce", t, kS, kN).ok());
    algbw.push_back(gbps(2.0 * kS / t));
    busbw.push_back(gbps(kS / double(t) * 2 * (kN - 1) / kN));
  }
  ASSERT_TRUE(logger.append("barrier", "barrier", 0.5, 0, kN).ok());
  double avg_algbw = 0, avg_busbw = 0;
  for (int i = 1; i <= 8; ++i) {  // t = 2..9: the slowest and the fastest dropped
    avg_algbw += algbw[i];
    avg_busbw += busbw[i];
  }
  avg_algbw /= 8;
  avg_busbw /= 8;
  auto col = [](const std::string& s) { return pad_right(s, 20); };
  const std::string expected =
      "Comm. Op            Message Size        Count               Total Latency(ms)   Avg "
      "Latency(ms)     "
      "tput_avg (Gbps)     busbw_avg (Gbps)    \n"
      "all_reduce\n" +
      col(" ") + col("4.0 MB") + col("10") + col("55.00") + col("5.50") +
      col(format_fixed(avg_algbw, 2)) + col(format_fixed(avg_busbw, 2)) + "\n" + "barrier\n" +
      col(" ") + col("0B") + col("1") + col("0.50") + col("0.50") + col("0.00") + col("0.00") +
      "\n";
  EXPECT_EQ(logger.summary(), expected);
}

TEST(CommsLogger, StragglerTableUsesTheCrossRankMinimum) {
  CommsLogger logger(CommsLoggerConfig{});
  for (double t : {4.0, 6.0})
    ASSERT_TRUE(logger.append("all_reduce", "all_reduce", t, kS, kN).ok());
  int calls = 0;
  const std::string table = logger.straggler_summary([&](const std::vector<double>& lats) {
    ++calls;
    std::vector<double> min = lats;
    for (double& v : min) v -= 1.0;  // another rank was 1 ms faster each time
    return min;
  });
  EXPECT_EQ(calls, 1);
  auto col = [](const std::string& s) { return pad_right(s, 20); };
  EXPECT_NE(table.find("Breakdown with straggler effect"), std::string::npos);
  EXPECT_NE(table.find(col(" ") + col("4.0 MB") + col("2") + col("8.00") + col("2.00") +
                       col("4.00") + col("1.00")),
            std::string::npos)
      << table;
}

TEST(TrimMean, TrimsRoundHalfToEvenOfTenPercent) {
  // Outliers at both ends show how many values each size trims.
  auto with_outliers = [](size_t n) {
    std::vector<double> v(n, 1.0);
    v.front() = -1000;
    v.back() = 1000;
    return v;
  };
  EXPECT_NE(trim_mean(with_outliers(5), 0.1), 1.0);   // round(0.5) = 0: nothing trimmed
  EXPECT_EQ(trim_mean(with_outliers(15), 0.1), 1.0);  // round(1.5) = 2
  EXPECT_EQ(trim_mean(with_outliers(25), 0.1), 1.0);  // round(2.5) = 2
  EXPECT_EQ(trim_mean({}, 0.1), 0.0);
  EXPECT_DOUBLE_EQ(trim_mean({3, 1, 2}, 0.1), 2.0);  // sorted first
}

TEST(CommsLoggerConfigTest, PresenceOfTheKeyEnablesTheLogger) {
  auto parse = [](const char* text) { return *json::parse(text, "test"); };
  const json::Value resolved =
      parse(R"({"comms_logger": {"enabled": false, "prof_all": false, "prof_ops": ["all_reduce"],
                                 "verbose": true, "debug": true}})");
  EXPECT_FALSE(comms_logger_config(parse("{}"), resolved).has_value());
  std::optional<CommsLoggerConfig> c =
      comms_logger_config(parse(R"({"comms_logger": {}})"), resolved);
  ASSERT_TRUE(c.has_value());  // "enabled": false is never read, as in DeepSpeed
  EXPECT_FALSE(c->prof_all);
  EXPECT_EQ(c->prof_ops, std::vector<std::string>{"all_reduce"});
  EXPECT_TRUE(c->verbose);
  EXPECT_TRUE(c->debug);
  std::optional<CommsLoggerConfig> d =
      comms_logger_config(parse(R"({"comms_logger": {}})"), parse("{}"));
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE(d->prof_all);  // DeepSpeed's default
}

}  // namespace
}  // namespace dscore::observability
