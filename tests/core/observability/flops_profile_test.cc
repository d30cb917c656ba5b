// Tests of core/observability/flops_profile: DeepSpeed's number formatting
// (deepspeed/profiling/flops_profiler/profiler.py: round to 2 digits, '{:g}',
// K/M/G/T and m/u units) and the report for a two-layer model with known
// FLOPs and times (figures derived here from the formulas).
#include "core/observability/flops_profile.h"

#include <gtest/gtest.h>

#include "core/observability/ds_format.h"

namespace dscore::observability {
namespace {

TEST(FlopsFormat, NumbersAsDeepSpeedPrintsThem) {
  EXPECT_EQ(number_to_string(0), "0 ");
  EXPECT_EQ(number_to_string(178), "178 ");
  EXPECT_EQ(number_to_string(1234), "1.23 K");
  EXPECT_EQ(number_to_string(999.999), "1000 ");  // rounded within the unit, as Python does
  EXPECT_EQ(number_to_string(1.5e9), "1.5 G");
  EXPECT_EQ(number_to_string(2.5e12), "2.5 T");
  EXPECT_EQ(number_to_string(0.0123), "12.3 m");
  EXPECT_EQ(number_to_string(5e-7), "0.5 u");
  EXPECT_EQ(params_to_string(178), "178");
  EXPECT_EQ(params_to_string(1.5e9), "1.5 B");
  EXPECT_EQ(macs_to_string(8192), "8.19 KMACs");
  EXPECT_EQ(flops_to_string(2.5e10), "25 GFLOPS");
  EXPECT_EQ(duration_to_string(0.0012), "1.2 ms");
}

FlopsProfileInput two_layers() {
  FlopsProfileInput in;
  in.profile_step = 5;
  in.model_name = "mlp";
  in.micro_batch_per_gpu = 32;
  // fc1: Linear(16, 64) on 32 samples = 2*32*16*64 flops; fc2: Linear(64, 4).
  in.layers = {{"fc1", 16 * 64 + 64, 2.0 * 32 * 16 * 64, 0.001},
               {"fc2", 64 * 4 + 4, 2.0 * 32 * 64 * 4, 0.0005}};
  return in;
}

std::string line(const std::string& label, const std::string& value) {
  return pad_right(label, 70) + "  " + pad_right(value, 8) + "\n";
}

TEST(FlopsProfile, SummaryAndPerLayerLines) {
  const std::string report = flops_profile_report(two_layers());
  EXPECT_EQ(report.rfind("\n-------------------------- DeepSpeed Flops Profiler ---", 0), 0u);
  EXPECT_NE(report.find("Profile Summary at step 5:\n"), std::string::npos);
  const double flops = 2.0 * 32 * 16 * 64 + 2.0 * 32 * 64 * 4;  // 81920
  const std::string expected_lines[] = {
      line("batch size per GPU: ", "32"),
      line("params per GPU: ", "1.35 K"),
      line("fwd MACs per GPU: ", macs_to_string(flops / 2)),
      line("fwd flops per GPU: ", "81.92 K"),
      line("fwd latency: ", "1.5 ms"),
      line("fwd FLOPS per GPU = fwd flops per GPU / fwd latency: ",
           flops_to_string(flops / 0.0015)),
      // 1088 of 1348 params, 65536 of 81920 flops, 1 of 1.5 ms; 65536 flops in 1 ms.
      "  (fc1): 1.09 K = 80.71% Params, 32.77 KMACs = 80% MACs, 1 ms = 66.67% latency, 65.54 "
      "MFLOPS\n",
      "  (fc2): 260 = 19.29% Params, 8.19 KMACs = 20% MACs, 500 us = 33.33% latency, 32.77 "
      "MFLOPS\n",
      "mlp(\n  1.35 K = 100% Params, 40.96 KMACs = 100% MACs, 1.5 ms = 100% latency, 54.61 "
      "MFLOPS\n",
      "    params      - {'mlp': '1.35 K'}\n",
  };
  for (const std::string& l : expected_lines)
    EXPECT_NE(report.find(l), std::string::npos) << l << "\n" << report;
  EXPECT_EQ(report.find("bwd latency: "), std::string::npos);  // only with wall_clock_breakdown
}

TEST(FlopsProfile, BackwardStepAndIterWithWallClockBreakdown) {
  FlopsProfileInput in = two_layers();
  in.forward_seconds = 0.002;  // the engine's fwd timer
  in.backward_seconds = 0.0025;
  in.step_seconds = 0.0005;
  const std::string report = flops_profile_report(in);
  const double flops = 81920;
  const std::string expected_lines[] = {
      line("fwd latency: ", "2 ms"),
      line("bwd latency: ", "2.5 ms"),
      line("bwd FLOPS per GPU = 2 * fwd flops per GPU / bwd latency: ",
           flops_to_string(2 * flops / 0.0025)),
      line("fwd+bwd FLOPS per GPU = 3 * fwd flops per GPU / (fwd+bwd latency): ",
           flops_to_string(3 * flops / 0.0045)),
      line("step latency: ", "500 us"),
      line("iter latency: ", "5 ms"),
      line("FLOPS per GPU = 3 * fwd flops per GPU / iter latency: ",
           flops_to_string(3 * flops / 0.005)),
      line("samples/second: ", "6400.0"),  // 32 samples per 5 ms iteration
  };
  for (const std::string& l : expected_lines)
    EXPECT_NE(report.find(l), std::string::npos) << l << "\n" << report;
}

TEST(FlopsProfile, UntimedLayersReportZeroFlopsNotADivisionByZero) {
  FlopsProfileInput in = two_layers();
  for (LayerProfile& l : in.layers) l.forward_seconds = 0;
  const std::string report = flops_profile_report(in);
  EXPECT_NE(
      report.find(
          "  (fc1): 1.09 K = 80.71% Params, 32.77 KMACs = 80% MACs, 0 s = 0% latency, 0 FLOPS\n"),
      std::string::npos)
      << report;
}

}  // namespace
}  // namespace dscore::observability
