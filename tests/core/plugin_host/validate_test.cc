// The ABI version rule of docs/architecture.md#the-plugin-abi (core/plugin_host/validate.cc):
// plugin minor <= host minor loads; a newer plugin loads when its declared
// minimum host minor is met; never an exact-match check.
#include "core/plugin_host/validate.h"

#include <gtest/gtest.h>

namespace dscore::plugin_host {
namespace {

const std::string kLib = "library 'x' (/p/libx.so)";

TEST(AbiVersionRule, SameOrOlderMinorAlwaysLoads) {
  EXPECT_FALSE(abi_version_problem(kLib, 1, 0, 0, 0));
  EXPECT_FALSE(abi_version_problem(kLib, 1, 0, 0, 3));  // built against 1.0, host 1.3
  EXPECT_FALSE(abi_version_problem(kLib, 1, 3, 3, 3));
  EXPECT_FALSE(abi_version_problem(kLib, 1, 2, 1, 3));
}

TEST(AbiVersionRule, NewerMinorLoadsWhenTheHostMeetsItsMinimum) {
  EXPECT_FALSE(abi_version_problem(kLib, 1, 5, 0, 3));
  EXPECT_FALSE(abi_version_problem(kLib, 1, 5, 3, 3));
}

TEST(AbiVersionRule, NewerMinorAboveTheHostIsRejectedWithTheFix) {
  auto problem = abi_version_problem(kLib, 1, 5, 4, 3);
  ASSERT_TRUE(problem);
  EXPECT_EQ(*problem,
            "library 'x' (/p/libx.so) was built against plugin ABI 1.5 and needs a host of ABI 1.4 "
            "or later; this dscore is ABI 1.3: upgrade dscore to ABI 1.4 or later or rebuild the "
            "plugin against sdk 1.3");
}

TEST(AbiVersionRule, OtherMajorIsRejectedNamingBothMajors) {
  auto problem = abi_version_problem(kLib, 2, 1, 0, 0);
  ASSERT_TRUE(problem);
  EXPECT_EQ(*problem,
            "library 'x' (/p/libx.so) was built against dscore plugin ABI major 2 (2.1), but this "
            "dscore speaks ABI major 1 (1.0): rebuild the plugin against this dscore's sdk");
  EXPECT_TRUE(abi_version_problem(kLib, 0, 0, 0, 0));
}

TEST(AbiVersionRule, MinimumHostMinorAboveItsOwnMinorIsAnInconsistentTable) {
  auto problem = abi_version_problem(kLib, 1, 0, 2, 5);
  ASSERT_TRUE(problem);
  EXPECT_NE(problem->find("declares min_host_minor 2 above its own ABI minor 0"), std::string::npos)
      << *problem;
}

}  // namespace
}  // namespace dscore::plugin_host
