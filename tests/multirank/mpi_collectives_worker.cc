// Runs under mpirun: the shared collective checks (collective_checks.h) on
// the "mpi" comm plugin through the host's Communicator (the counted path
// the engine uses), then the Communicator's own per-collective counters.
// Prints "OK <checks>" on rank 0 when every rank passed, else the first
// mismatches, and exits non-zero. Then the grouped-call checks.
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
  HostCheckedComm c(std::move(*created));
  CheckLog log(c.rank());
  run_collective_checks(c, CheckOptions{}, &log);
  // The host's counters: recv counted its 20 bytes (the ring), send its two
  // calls (the ring and the refused send to self: the host counts calls,
  // not outcomes), and allreduce its 8 calls on this communicator.
  const auto counters = c.get().counters();
  log.check(counters.at("send").calls == 2 && counters.at("recv").bytes == 20,
            "send/recv host counters");
  log.check(counters.at("allreduce").calls == 8, "host counters");
  // Grouped calls, natively (MPI nonblocking collectives, waited at the end).
  log.check(c.get().has_native_groups(), "the mpi plugin has group_start/group_end");
  run_grouped_checks(c, 0, &log);
  // The comms logger records a group's calls when the group has ended.
  c.get().enable_comms_logger(observability::CommsLoggerConfig{});
  std::vector<float> bucket(3000, 1.0f);
  const Status logged = c.get().grouped([&] {
    for (int k = 0; k < 3; ++k) {
      CommBuffer piece{bucket.data() + 1000 * k, DSCORE_DTYPE_F32, 1000};
      const int root = k % c.world_size();
      DSCORE_RETURN_IF_ERROR(
          c.get().reduce(piece, c.rank() == root ? piece : CommBuffer{}, DSCORE_REDUCE_SUM, root));
    }
    return Status::Ok();
  });
  const std::string summary = c.get().comms_summary();
  log.check(logged.ok() && summary.find("reduce") != std::string::npos,
            "grouped reduces in the comms logger: " + summary);
  return agree_and_report(c, log);
}

}  // namespace
}  // namespace dscore::testing

int main() { return dscore::testing::run(); }
