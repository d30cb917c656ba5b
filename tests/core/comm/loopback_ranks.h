// A job's ranks as threads of this test process on the loopback comm
// backend (plugins/comm/loopback), each with a host context of its own and
// one shared key-value store: what the communicator and topology tests run
// collectives on without MPI.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "core/comm/communicator.h"
#include "core/plugin_host/host_context.h"

namespace dscore::comm::testing {

inline std::shared_ptr<plugin_host::PluginRegistry> build_plugin_registry() {
  plugin_host::SearchPath path;
  path.add(DSCORE_BUILD_PLUGIN_DIR, true, "test");
  auto opened = plugin_host::PluginRegistry::open(path);
  EXPECT_TRUE(opened.ok()) << opened.status().message();
  return *opened;
}

// Runs body(communicator) on `world` loopback ranks, one thread each.
inline void run_loopback_ranks(int world, const std::function<void(Communicator&)>& body) {
  auto plugins = build_plugin_registry();
  auto store = plugin_host::make_in_process_kv();
  config::CommConfig config;
  config.backend = "loopback";
  config.timeout_ms = 20000;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      JobEnv env;
      env.rank = r;
      env.world_size = world;
      auto host = std::make_shared<plugin_host::HostContext>(store);
      auto comm = Communicator::create(*plugins, config, env, 42, host);
      ASSERT_TRUE(comm.ok()) << comm.status().message();
      body(**comm);
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace dscore::comm::testing
