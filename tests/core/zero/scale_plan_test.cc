// dscore plan --nodes's model (core/zero/scale_plan.h) on a plan of known
// sizes: each collective's bytes inside and across nodes and its time, plain
// and with ZeRO++, and the --link parser.
#include "core/zero/scale_plan.h"

#include <gtest/gtest.h>

namespace dscore::zero {
namespace {

ZeroPlan stage3_bf16() {
  ZeroPlan p;
  p.stage = 3;
  p.model_dtype = DSCORE_DTYPE_BF16;
  p.grad_dtype = DSCORE_DTYPE_BF16;
  p.gathered_per_pass = 1000;
  p.persistent_elements = 0;
  p.padded_elements = 1000;
  p.gradient_accumulation_steps = 1;
  return p;
}

TEST(ScalePlan, FlatCollectivesSendEachNodesShareAcross) {
  const LinkRates links{1e9, 1e8};
  const ScaleEstimate e = estimate_scale(stage3_bf16(), config::ZeroConfig{}, 2, 2, links, 0.5);
  ASSERT_EQ(e.collectives.size(), 2u);
  // Gathers: forward and backward, 2 x 1000 bf16 = 4000 bytes; W = 4, N = 2.
  EXPECT_EQ(e.collectives[0].name, "allgather (parameters)");
  EXPECT_DOUBLE_EQ(e.collectives[0].node_bytes, 2 * 4000.0 * 1 / 4);  // R S (R-1)/W
  EXPECT_DOUBLE_EQ(e.collectives[0].cross_bytes, 2 * 4000.0 / 2);     // R S (N-1)/N
  EXPECT_DOUBLE_EQ(e.collectives[0].seconds, 2000 / 1e9 + 4000 * kLinkFraming / 1e8);
  EXPECT_EQ(e.collectives[1].name, "reduce_scatter (gradients)");
  EXPECT_DOUBLE_EQ(e.collectives[1].cross_bytes, 2000.0);
  EXPECT_DOUBLE_EQ(e.comm_seconds, e.collectives[0].seconds + e.collectives[1].seconds);
  EXPECT_DOUBLE_EQ(*e.step_seconds, 0.5 + e.comm_seconds);
  // One node: nothing across.
  const ScaleEstimate one = estimate_scale(stage3_bf16(), config::ZeroConfig{}, 1, 4, links, {});
  EXPECT_DOUBLE_EQ(one.collectives[0].cross_bytes, 0);
  EXPECT_FALSE(one.step_seconds.has_value());
  EXPECT_NE(format_scale(one, links).find("give --compute-seconds"), std::string::npos);
}

TEST(ScalePlan, ZeroPlusPlusKeepsTheBackwardInsideAndQuantizesTheRest) {
  config::ZeroConfig z;
  z.hpz_partition_size = 2;
  z.quantized_weights = true;
  z.quantized_gradients = true;
  const ScaleEstimate e = estimate_scale(stage3_bf16(), z, 2, 2, {1e9, 1e8}, 0.5);
  ASSERT_EQ(e.collectives.size(), 3u);
  const double int8 = (4096.0 + 4) / 4096, int4 = (128.0 + 4) / 256;    // bytes per value
  EXPECT_DOUBLE_EQ(e.collectives[0].cross_bytes, 2 * 1000 * int8 / 2);  // the first forward
  EXPECT_EQ(e.collectives[1].name, "allgather (hpZ, within nodes)");
  EXPECT_DOUBLE_EQ(e.collectives[1].node_bytes, 2 * 1000 * 2.0 / 2);  // R S (R-1)/R
  EXPECT_DOUBLE_EQ(e.collectives[1].cross_bytes, 0);
  EXPECT_EQ(e.collectives[2].name, "all_to_all (qgZ gradients)");
  EXPECT_DOUBLE_EQ(e.collectives[2].node_bytes, 2 * 1000 * int4 / 2);
  EXPECT_DOUBLE_EQ(e.collectives[2].cross_bytes, 1000 * int4 / 2);  // S (N-1)/N
  const ScaleEstimate plain = estimate_scale(stage3_bf16(), {}, 2, 2, {1e9, 1e8}, 0.5);
  double across = 0, plain_across = 0;
  for (const CollectiveTraffic& c : e.collectives) across += c.cross_bytes;
  for (const CollectiveTraffic& c : plain.collectives) plain_across += c.cross_bytes;
  EXPECT_GT(plain_across / across, 4.0);  // 6000 / 1258: DeepSpeed's "4x less"
}

TEST(ScalePlan, LinkRatesAreGigabytesPerSecond) {
  auto rates = parse_link_rates("intra=50,inter=12.5");
  ASSERT_TRUE(rates.ok()) << rates.status().message();
  EXPECT_DOUBLE_EQ(rates->intra, 50e9);
  EXPECT_DOUBLE_EQ(rates->inter, 12.5e9);
  for (const char* bad :
       {"intra=50", "inter=0,intra=1", "intra=x,inter=1", "fast=1,inter=1", "intra=1,inter=2GB"})
    EXPECT_FALSE(parse_link_rates(bad).ok()) << bad;
}

}  // namespace
}  // namespace dscore::zero
