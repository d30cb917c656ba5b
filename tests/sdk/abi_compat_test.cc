// A plugin built against each frozen copy of the sdk headers (sdk/abi/v1.N)
// loads into the current host, is created and steps correctly: the promise
// to a vendor who built against an older dscore release.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/plugin_host/instances.h"
#include "core/plugin_host/registry.h"

namespace dscore::plugin_host {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> frozen_plugin_dirs() {
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(DSCORE_TEST_PLUGIN_DIR))
    if (e.is_directory() && e.path().filename().string().rfind("abi_v1_", 0) == 0)
      dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

TEST(AbiCompat, EveryFrozenMinorHasAPlugin) {
  // One plugin per sdk/abi/v1.N folder; a missing one would skip a minor silently.
  EXPECT_EQ(frozen_plugin_dirs().size(), static_cast<size_t>(DSCORE_FROZEN_ABI_COUNT));
  EXPECT_GE(frozen_plugin_dirs().size(), 1u);
}

TEST(AbiCompat, PluginBuiltAgainstFrozenHeadersLoadsCreatesAndSteps) {
  for (const fs::path& dir : frozen_plugin_dirs()) {
    SCOPED_TRACE(dir.string());
    const std::string tag = dir.filename().string();  // abi_v1_0
    SearchPath path;
    path.add(dir.string(), true, "test");
    auto registry = PluginRegistry::open(path);
    ASSERT_TRUE(registry.ok()) << registry.status().message();
    EXPECT_TRUE((*registry)->problems().empty());
    auto info = (*registry)->find(DSCORE_KIND_OPTIMIZER, tag + "_sgd");
    ASSERT_TRUE(info.ok()) << info.status().message();
    EXPECT_EQ((*info)->abi_major, 1u);

    ValidatedParams params =
        ValidatedParams::from_object(json::Value::object(), json::Value::object());
    auto optimizer = OptimizerInstance::create(**info, params, InstanceContext{});
    ASSERT_TRUE(optimizer.ok()) << optimizer.status().message();
    EXPECT_TRUE((*optimizer)->slots().empty());

    float p[3] = {1, 2, 3};
    float g[3] = {1, 1, 1};
    int64_t shape[1] = {3};
    dscore_tensor param{sizeof(dscore_tensor),
                        p,
                        DSCORE_DTYPE_F32,
                        DSCORE_DEVICE_CPU,
                        0,
                        1,
                        shape,
                        nullptr,
                        3,
                        "w"};
    dscore_tensor grad = param;
    grad.data = g;
    dscore_tensor* params_list[] = {&param};
    const dscore_tensor* grads_list[] = {&grad};
    dscore_optimizer_hparams hp{sizeof hp, 0.5, 0, 0.9, 0.999, 1.0, 1, 1.0, 0};
    dscore_optimizer_step_args args{sizeof args, &hp,     1,       params_list, grads_list,
                                    0,           nullptr, nullptr, nullptr};
    ASSERT_TRUE((*optimizer)->step(args).ok());
    EXPECT_FLOAT_EQ(p[0], 0.5f);
    EXPECT_FLOAT_EQ(p[1], 1.5f);
    EXPECT_FLOAT_EQ(p[2], 2.5f);
  }
}

}  // namespace
}  // namespace dscore::plugin_host
