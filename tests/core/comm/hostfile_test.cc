// DeepSpeed's hostfile and host filters (core/comm/hostfile.h), with its
// rules: '<host> slots=<N>' lines, include/exclude by host or slot, the
// first N hosts or slots, and an error naming what is wrong.
#include "core/comm/hostfile.h"

#include <gtest/gtest.h>

namespace dscore::comm {
namespace {

std::vector<HostSlots> pool() {
  auto hosts = parse_hostfile("# cluster\n\nworker-0 slots=2\n  worker-1 slots=4  \n", "hf");
  EXPECT_TRUE(hosts.ok()) << hosts.status().message();
  return *hosts;
}

std::string describe(const std::vector<HostSlots>& hosts) {
  std::string s;
  for (const HostSlots& h : hosts) {
    s += h.host + ":";
    for (int slot : h.slots) s += std::to_string(slot);
    s += " ";
  }
  return s;
}

std::string error_of(const Result<std::vector<HostSlots>>& r) {
  return r.ok() ? "ok: " + describe(*r) : r.status().message();
}

TEST(Hostfile, ReadsHostsAndSlotsSkippingCommentsAndBlankLines) {
  EXPECT_EQ(describe(pool()), "worker-0:01 worker-1:0123 ");
}

TEST(Hostfile, BadLinesAreNamedWithTheirNumber) {
  EXPECT_EQ(error_of(parse_hostfile("a slots=1\nb slots=two\n", "hf")),
            "hf:2: 'b slots=two' is not a hostfile entry: write '<host> slots=<N>' (DeepSpeed's "
            "hostfile format)");
  EXPECT_NE(error_of(parse_hostfile("a\n", "hf")).find("hf:1: 'a' is not a hostfile entry"),
            std::string::npos);
  EXPECT_NE(error_of(parse_hostfile("a slots=1 extra\n", "hf")).find("hf:1:"), std::string::npos);
  EXPECT_EQ(error_of(parse_hostfile("a slots=1\na slots=2\n", "hf")),
            "hf:2: host a is listed twice");
  EXPECT_EQ(error_of(parse_hostfile("a slots=0\n", "hf")), "hf:1: host a has slots=0");
  EXPECT_NE(error_of(parse_hostfile("a slots=99999999999999\n", "hf")).find("hf:1:"),
            std::string::npos);
  EXPECT_NE(error_of(parse_hostfile("# nothing\n", "hf")).find("hf lists no hosts"),
            std::string::npos);
}

TEST(Hostfile, IncludeKeepsOnlyTheNamedHostsAndSlots) {
  EXPECT_EQ(error_of(select_hosts(pool(), {"worker-1", "", -1, -1})), "ok: worker-1:0123 ");
  EXPECT_EQ(error_of(select_hosts(pool(), {"worker-0@worker-1:0,2", "", -1, -1})),
            "ok: worker-0:01 worker-1:02 ");
}

TEST(Hostfile, ExcludeDropsTheNamedHostsAndSlots) {
  EXPECT_EQ(error_of(select_hosts(pool(), {"", "worker-1:1,3", -1, -1})),
            "ok: worker-0:01 worker-1:02 ");
  EXPECT_EQ(error_of(select_hosts(pool(), {"", "worker-0", -1, -1})), "ok: worker-1:0123 ");
  EXPECT_EQ(error_of(select_hosts(pool(), {"", "worker-0@worker-1", -1, -1})),
            "the host filter leaves no slots to run on");
}

TEST(Hostfile, UnknownHostsAndSlotsAndConflictingFlagsAreNamed) {
  EXPECT_EQ(error_of(select_hosts(pool(), {"worker-9", "", -1, -1})),
            "host worker-9 is not in the hostfile");
  EXPECT_EQ(error_of(select_hosts(pool(), {"worker-0:5", "", -1, -1})),
            "host worker-0 has no slot 5 (it has 2)");
  EXPECT_NE(error_of(select_hosts(pool(), {"worker-0:x", "", -1, -1})).find("'x' is not a slot"),
            std::string::npos);
  EXPECT_NE(error_of(select_hosts(pool(), {"worker-0:99999999999", "", -1, -1})).find("not a slot"),
            std::string::npos);
  EXPECT_EQ(error_of(select_hosts(pool(), {"worker-0", "worker-1", -1, -1})),
            "--include and --exclude are mutually exclusive (as in DeepSpeed)");
  EXPECT_NE(error_of(select_hosts(pool(), {"worker-0", "", 1, -1})).find("cannot be combined"),
            std::string::npos);
}

TEST(Hostfile, NumNodesAndNumGpusTakeTheFirstOnes) {
  EXPECT_EQ(error_of(select_hosts(pool(), {"", "", 1, -1})), "ok: worker-0:01 ");
  EXPECT_EQ(error_of(select_hosts(pool(), {"", "", -1, 1})), "ok: worker-0:0 worker-1:0 ");
  EXPECT_EQ(error_of(select_hosts(pool(), {"", "", 3, -1})),
            "--num_nodes 3: the hostfile lists 2 host(s)");
  EXPECT_EQ(error_of(select_hosts(pool(), {"", "", -1, 3})),
            "--num_gpus 3: host worker-0 has 2 slot(s)");
}

}  // namespace
}  // namespace dscore::comm
