// `dscore plugins list --json` data (core/plugin_host/listing.cc): every
// plugin with kind, name, versions, capabilities, library and schema, the
// problems and the search path.
#include "core/plugin_host/listing.h"

#include <dscore/optimizer.h>
#include <gtest/gtest.h>

#include "tests/core/plugin_host/test_plugins.h"

namespace dscore::plugin_host {
namespace {

TEST(PluginListing, ListsPluginsSortedByKindThenNameWithProblems) {
  auto registry = testing::open_test_registry({"fake_kinds", "fake_sgd", "fake_not_a_plugin"});
  ASSERT_TRUE(registry);
  json::Value list = list_json(*registry);
  const json::Value* plugins = list.find("plugins");
  ASSERT_TRUE(plugins && plugins->is_array());
  std::vector<std::string> order;
  for (const json::Value& p : plugins->items())
    order.push_back(p.find("kind")->as_string() + "/" + p.find("name")->as_string());
  EXPECT_EQ(order, (std::vector<std::string>{"optimizer/fake_sgd", "scheduler/fake_const",
                                             "offload/fake_ram_swapper", "comm/fake_loopback",
                                             "monitor/fake_counter", "model/fake_linear"}));

  const json::Value& sgd = plugins->items()[0];
  EXPECT_EQ(sgd.find("version")->as_string(), "1.2.3");
  EXPECT_EQ(sgd.find("abi")->as_string(), "1.2");
  EXPECT_EQ(sgd.find("min_host_minor")->as_int(), 0);
  EXPECT_EQ(json::serialize(*sgd.find("capabilities")), R"(["cpu","f32"])");
  const json::Value* library = sgd.find("library");
  EXPECT_EQ(library->find("name")->as_string(), "lib-fake_sgd");
  EXPECT_EQ(library->find("vendor")->as_string(), "dscore tests");
  EXPECT_EQ(library->find("path")->as_string(), testing::test_plugin_file("fake_sgd"));
  const json::Value* schema = sgd.find("params_schema");
  ASSERT_TRUE(schema->is_object());
  EXPECT_TRUE(schema->find("lr"));
  EXPECT_TRUE(plugins->items()[4].find("params_schema")->is_null());  // fake_counter has none

  const json::Value* problems = list.find("problems");
  ASSERT_EQ(problems->items().size(), 1u);
  EXPECT_EQ(problems->items()[0].find("path")->as_string(),
            testing::test_plugin_file("fake_not_a_plugin"));
  EXPECT_EQ(list.find("search_path")->items().size(), 3u);

  // The whole thing is valid JSON text.
  EXPECT_TRUE(json::parse(json::serialize(list, true), "list").ok());
}

TEST(PluginListing, CapabilityNamesKnowKindSpecificAndUnknownBits) {
  EXPECT_EQ(
      capability_names(DSCORE_KIND_OPTIMIZER, DSCORE_CAP_CUDA | DSCORE_CAP_OPTIMIZER_WHOLE_TENSORS),
      (std::vector<std::string>{"cuda", "whole_tensors"}));
  EXPECT_EQ(capability_names(DSCORE_KIND_MONITOR,
                             DSCORE_CAP_OPTIMIZER_WHOLE_TENSORS | (uint64_t{1} << 40)),
            (std::vector<std::string>{"bit24", "bit40"}));
  EXPECT_TRUE(capability_names(DSCORE_KIND_MODEL, 0).empty());
}

}  // namespace
}  // namespace dscore::plugin_host
