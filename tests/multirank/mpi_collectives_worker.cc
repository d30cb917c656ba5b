// Runs under mpirun: the shared collective checks (collective_checks.h) on
// the "mpi" comm plugin through the host's Communicator (the counted path
// the engine uses), then the Communicator's own per-collective counters.
// Prints "OK <checks>" on rank 0 when every rank passed, else the first
// mismatches, and exits non-zero.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/communicator.h"
#include "core/comm/job_env.h"
#include "core/plugin_host/registry.h"
#include "tests/multirank/collective_checks.h"

namespace dscore::testing {
namespace {

// The Communicator as the checks call it: host buffers go straight through.
class HostComm : public CheckedComm {
 public:
  explicit HostComm(std::unique_ptr<comm::Communicator> c) : c_(std::move(c)) {}
  comm::Communicator& get() { return *c_; }
  int rank() const override { return c_->rank(); }
  int world_size() const override { return c_->world_size(); }
  Status allreduce(CommBuffer s, CommBuffer r, dscore_reduce_op op) override {
    return c_->allreduce(s, r, op);
  }
  Status reduce(CommBuffer s, CommBuffer r, dscore_reduce_op op, int root) override {
    return c_->reduce(s, r, op, root);
  }
  Status reduce_scatter(CommBuffer s, CommBuffer r, dscore_reduce_op op) override {
    return c_->reduce_scatter(s, r, op);
  }
  Status allgather(CommBuffer s, CommBuffer r) override { return c_->allgather(s, r); }
  Status broadcast(CommBuffer b, int root) override { return c_->broadcast(b, root); }
  Status send(CommBuffer b, int peer) override { return c_->send(b, peer); }
  Status recv(CommBuffer b, int peer) override { return c_->recv(b, peer); }
  Status barrier() override { return c_->barrier(); }
  Result<dscore_comm_counters> wire_counters() const override { return c_->wire_counters(); }
  Result<std::unique_ptr<CheckedComm>> split(int color, int key) override {
    DSCORE_ASSIGN_OR_RETURN(auto group, c_->split(color, key));
    if (!group) return std::unique_ptr<CheckedComm>();
    return std::unique_ptr<CheckedComm>(new HostComm(std::move(group)));
  }

 private:
  std::unique_ptr<comm::Communicator> c_;
};

int run() {
  auto env = comm::detect_job_env();
  auto registry = plugin_host::PluginRegistry::open({{DSCORE_BUILD_PLUGIN_DIR}, {true}, {"test"}});
  if (!env.ok() || !registry.ok()) return 2;
  config::CommConfig config;
  config.backend = "mpi";
  config.timeout_ms = 20000;
  auto created = comm::Communicator::create(**registry, config, *env, 1);
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", created.status().message().c_str());
    return 2;
  }
  HostComm c(std::move(*created));
  CheckLog log(c.rank());
  run_collective_checks(c, CheckOptions{}, &log);
  // The host's counters: recv counted its 20 bytes (the ring), send its two
  // calls (the ring and the refused send to self: the host counts calls,
  // not outcomes), and allreduce its 8 calls on this communicator.
  const auto counters = c.get().counters();
  log.check(counters.at("send").calls == 2 && counters.at("recv").bytes == 20,
            "send/recv host counters");
  log.check(counters.at("allreduce").calls == 8, "host counters");
  return agree_and_report(c, log);
}

}  // namespace
}  // namespace dscore::testing

int main() { return dscore::testing::run(); }
