// A job's ranks as threads of this test process on the loopback comm
// backend (plugins/comm/loopback), each with a host context of its own and
// one shared key-value store: what the communicator and topology tests run
// collectives on without MPI.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/comm/communicator.h"
#include "core/plugin_host/host_context.h"

namespace dscore::comm::testing {

// The plugins of `dir` (the build's plugin folder by default).
inline std::shared_ptr<plugin_host::PluginRegistry> build_plugin_registry(
    const std::string& dir = DSCORE_BUILD_PLUGIN_DIR) {
  plugin_host::SearchPath path;
  path.add(dir, true, "test");
  auto opened = plugin_host::PluginRegistry::open(path);
  EXPECT_TRUE(opened.ok()) << opened.status().message();
  return *opened;
}

// Runs body(communicator, rank) on `world` ranks of the comm plugin
// `backend` found in `dir`, one thread each; the body owns its communicator.
inline void run_ranks(const std::string& dir, const std::string& backend, int world,
                      const std::function<void(std::unique_ptr<Communicator>, int)>& body) {
  auto plugins = build_plugin_registry(dir);
  auto store = plugin_host::make_in_process_kv();
  config::CommConfig config;
  config.backend = backend;
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
      body(std::move(*comm), r);
    });
  }
  for (std::thread& t : threads) t.join();
}

// Runs body(communicator) on `world` loopback ranks, one thread each.
inline void run_loopback_ranks(int world, const std::function<void(Communicator&)>& body) {
  run_ranks(DSCORE_BUILD_PLUGIN_DIR, "loopback", world,
            [&](std::unique_ptr<Communicator> comm, int) { body(*comm); });
}

}  // namespace dscore::comm::testing
