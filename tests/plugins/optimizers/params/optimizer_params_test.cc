// Every built-in optimizer's params through the REAL host path a config
// takes (dscore::prepare_text: the plugin registry, the plugin's params
// schema, then plugin_host::OptimizerInstance::create): DeepSpeed's type
// names in any case, unknown keys with a did-you-mean, wrong types, negative
// lr, DeepSpeed's max_grad_norm message, betas out of range.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/engine/initialize.h"
#include "core/plugin_host/instances.h"

namespace dscore {
namespace {

struct Case {
  const char* type;  // as a DeepSpeed user writes it
  const char* plugin;
  bool has_betas;
};
const Case kCases[] = {{"Adam", "adam", true},
                       {"AdamW", "adamw", true},
                       {"Lamb", "lamb", true},
                       {"SGD", "sgd", false},
                       {"Adagrad", "adagrad", false},
                       {"Lion", "lion", true},
                       {"OneBitAdam", "onebitadam", true},
                       {"ZeroOneAdam", "zerooneadam", true},
                       {"OneBitLamb", "onebitlamb", true},
                       // DeepSpeed's class names of the fused implementations
                       {"FusedAdam", "adam", true},
                       {"FusedLamb", "lamb", true}};

Setup prepare_params(const std::string& type, const std::string& params) {
  const std::string text = R"({"train_batch_size": 1, "optimizer": {"type": ")" + type +
                           R"(", "params": )" + params + "}}";
  auto setup = prepare_text(text, "ds_config.json", ".", {});
  EXPECT_TRUE(setup.ok()) << setup.status().message();
  return setup.ok() ? std::move(*setup) : Setup{};
}

// The single config error of `params`, formatted as `dscore config check`
// prints it.
std::string config_error(const std::string& type, const std::string& params) {
  Setup setup = prepare_params(type, params);
  EXPECT_EQ(setup.loaded.errors.size(), 1u) << format_config_errors(setup.loaded);
  return format_config_errors(setup.loaded);
}

std::string create_error(const std::string& type, const std::string& params) {
  Setup setup = prepare_params(type, params);
  EXPECT_TRUE(setup.loaded.ok()) << format_config_errors(setup.loaded);
  if (!setup.loaded.ok() || !setup.selection.optimizer) return "";
  auto created = plugin_host::OptimizerInstance::create(*setup.selection.optimizer->info,
                                                        setup.selection.optimizer->params, {});
  EXPECT_FALSE(created.ok());
  return created.ok() ? "" : created.status().message();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(OptimizerParams, DeepSpeedNamesInAnyCaseCreate) {
  for (const Case& c : kCases) {
    for (std::string type : {std::string(c.type), std::string(c.plugin)}) {
      SCOPED_TRACE(type);
      dscore::Setup setup = prepare_params(type, R"({"lr": 0.01})");
      ASSERT_TRUE(setup.loaded.ok()) << format_config_errors(setup.loaded);
      ASSERT_TRUE(setup.selection.optimizer.has_value());
      EXPECT_EQ(setup.selection.optimizer->info->name, c.plugin);
      EXPECT_EQ(optimizer_base_lr(*setup.selection.optimizer), 0.01);
      auto created = plugin_host::OptimizerInstance::create(*setup.selection.optimizer->info,
                                                            setup.selection.optimizer->params, {});
      EXPECT_TRUE(created.ok()) << created.status().message();
    }
  }
}

TEST(OptimizerParams, UnknownKeyIsAnErrorWithASuggestion) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.type);
    const std::string e = config_error(c.type, R"({"lrr": 0.01})");
    EXPECT_TRUE(contains(e, "optimizer.params.lrr")) << e;
    EXPECT_TRUE(contains(e, "\"lr\"") || contains(e, "'lr'")) << e;
  }
}

TEST(OptimizerParams, WrongTypeAndNegativeLrAreErrors) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.type);
    std::string e = config_error(c.type, R"({"lr": "fast"})");
    EXPECT_TRUE(contains(e, "optimizer.params.lr")) << e;
    e = config_error(c.type, R"({"lr": -0.1})");
    EXPECT_TRUE(contains(e, "optimizer.params.lr")) << e;
    EXPECT_TRUE(contains(e, "-0.1")) << e;
  }
}

TEST(OptimizerParams, MaxGradNormGetsDeepSpeedsMessage) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.type);
    const std::string e = config_error(c.type, R"({"max_grad_norm": 1.0})");
    EXPECT_TRUE(contains(e, "optimizer.params.max_grad_norm")) << e;
    EXPECT_TRUE(contains(e,
                         "'max_grad_norm' is not supported as an optimizer parameter, please "
                         "switch to using the deepspeed parameter 'gradient_clipping'"))
        << e;
  }
}

TEST(OptimizerParams, BetasOutOfRangeFailAtCreation) {
  for (const Case& c : kCases) {
    if (!c.has_betas) continue;
    SCOPED_TRACE(c.type);
    std::string e = create_error(c.type, R"({"betas": [0.9, 1.0]})");
    EXPECT_TRUE(contains(e, "betas[1] = 1 is out of range")) << e;
    EXPECT_TRUE(contains(e, c.plugin)) << "the message names the plugin: " << e;
    e = config_error(c.type, R"({"betas": [0.9]})");
    EXPECT_TRUE(contains(e, "optimizer.params.betas")) << e;
  }
}

}  // namespace
}  // namespace dscore
