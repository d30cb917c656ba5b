#!/bin/bash
# `dscore plan --nodes`'s step time against two hosts whose link tc shapes
# (issue 50, item 6): the quick-start gpt at ZeRO 3 in bf16 on 2 hosts x 2
# ranks (network namespaces, tests/core/cli/two_hosts_test.cc), plain and
# with ZeRO++, at 100 and 20 Mbit/s. Each line prints the step on the open
# link (the plan's compute), the shaped step, the plan's prediction and the
# bytes across beside the plan's. Needs root and `ip netns`.
#   bash bench/multinode_plan.sh [BUILD_DIR]   (default build/release)
set -euo pipefail
build="${1:-build/release}"
exec "$build/bin/cli_two_hosts_test" --gtest_also_run_disabled_tests \
  --gtest_filter='TwoHosts.DISABLED_ThePlanPredictsTheStepTimeOverAShapedLink'
