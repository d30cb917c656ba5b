// Every built-in plugin's params_schema (and the sdk example's) is accepted
// by the host's own schema parser (core/config parse_params_schema), and an
// empty params object validates against it: only parameters declared
// "required" may be missing. A schema the host rejects would make the plugin
// unusable from any config.
#include <dscore/plugin.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/config/schema.h"
#include "tests/fakes/fake_host.h"

namespace dscore::testing {
namespace {

TEST(BuiltinSchemasTest, HostParsesEverySchemaAndFillsDefaults) {
  const char* libraries[] = {
      DSCORE_ADAM_PLUGIN,       DSCORE_LR_SCHEDULES_PLUGIN, DSCORE_CSV_MONITOR_PLUGIN,
      DSCORE_MLP_PLUGIN,        DSCORE_SGD_MOMENTUM_PLUGIN, DSCORE_SGD_PLUGIN,
      DSCORE_ADAGRAD_PLUGIN,    DSCORE_LION_PLUGIN,         DSCORE_LAMB_PLUGIN,
      DSCORE_ONEBITADAM_PLUGIN, DSCORE_ZEROONEADAM_PLUGIN,  DSCORE_ONEBITLAMB_PLUGIN,
      DSCORE_LLAMA_PLUGIN};
  size_t checked = 0;
  for (const char* path : libraries) {
    TestPluginLibrary lib(path);
    for (size_t i = 0; i < lib.table()->plugin_count; ++i) {
      const dscore_plugin_descriptor* d = lib.table()->plugins[i];
      SCOPED_TRACE(d->name);
      ASSERT_NE(d->params_schema, nullptr) << "every built-in plugin declares its params";
      auto spec = config::parse_params_schema(d->params_schema);
      ASSERT_TRUE(spec.ok()) << spec.status().message();
      std::vector<config::ConfigError> errors;
      config::validate_object(json::Value::object(), *spec, "params", config::AutoResolver(),
                              config::ValidationSink{&errors, nullptr});
      std::vector<std::string> required;
      for (const config::FieldSpec& f : spec->fields)
        if (f.required) required.push_back(f.name);
      EXPECT_EQ(errors.size(), required.size());
      for (const config::ConfigError& e : errors) {
        bool names_required = false;
        for (const std::string& r : required)
          names_required |=
              e.path.find(r) != std::string::npos || e.message.find(r) != std::string::npos;
        EXPECT_TRUE(names_required) << e.path << ": " << e.message;
      }
      for (const config::FieldSpec& f : spec->fields)
        EXPECT_FALSE(f.doc.empty()) << f.name << " has no \"doc\"";
      ++checked;
    }
  }
  // adam, adamw, 5 LR schedules, csv_monitor, mlp, sgd_momentum, sgd, adagrad,
  // lion, lamb, onebitadam, zerooneadam, onebitlamb, llama
  EXPECT_EQ(checked, 18u);
}

}  // namespace
}  // namespace dscore::testing
