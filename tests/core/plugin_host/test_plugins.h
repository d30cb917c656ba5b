// Helpers for plugin-host tests: where the fault-injecting test plugins
// (tests/fakes/plugins) were built, and a registry over exactly the ones a
// test names.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/plugin_host/registry.h"

namespace dscore::plugin_host::testing {

// The folder of one test plugin, e.g. test_plugin_dir("fake_sgd").
inline std::string test_plugin_dir(const std::string& name) {
  return std::string(DSCORE_TEST_PLUGIN_DIR) + "/" + name;
}

// The canonical path of its library file.
inline std::string test_plugin_file(const std::string& name) {
  return std::filesystem::canonical(test_plugin_dir(name) + "/lib" + name + ".so").string();
}

// A search path of the named plugins' folders, as scanned (not explicit) entries.
inline SearchPath folders_of(const std::vector<std::string>& names) {
  SearchPath path;
  for (const std::string& n : names) path.add(test_plugin_dir(n), false);
  return path;
}

// A registry over the named test plugins' folders; fails the test if it cannot open.
inline std::shared_ptr<PluginRegistry> open_test_registry(const std::vector<std::string>& names) {
  auto registry = PluginRegistry::open(folders_of(names));
  EXPECT_TRUE(registry.ok()) << registry.status().message();
  return registry.ok() ? *registry : nullptr;
}

}  // namespace dscore::plugin_host::testing
