// Tests for core/config/reference.cc: the checked-in docs/config-reference.md
// is exactly the text generated from the schema, and that text covers every
// key of the schema and every "auto" rule.
#include "core/config/reference.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <sstream>

#include "core/config/auto_rules.h"
#include "core/config/deepspeed_schema.h"

namespace dscore::config {
namespace {

TEST(ConfigReference, CheckedInFileMatchesTheSchema) {
  const std::string path = std::string(DSCORE_SOURCE_DIR) + "/docs/config-reference.md";
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << "missing " << path;
  std::stringstream content;
  content << in.rdbuf();
  EXPECT_TRUE(content.str() == config_reference_markdown())
      << path
      << " is out of date with the schema (core/config/deepspeed_schema*.cc). Regenerate it:\n"
      << "  <build>/bin/dscore config reference > docs/config-reference.md";
}

TEST(ConfigReference, CoversEveryKeyAliasAndRule) {
  const std::string text = config_reference_markdown();
  std::function<void(const ObjectSpec&, const std::string&)> walk = [&](const ObjectSpec& spec,
                                                                        const std::string& path) {
    for (const FieldSpec& f : spec.fields) {
      EXPECT_NE(text.find("| `" + f.name + "` |"), std::string::npos) << path << f.name;
      for (const std::string& a : f.aliases)
        EXPECT_NE(text.find("`" + a + "`"), std::string::npos) << a;
      if (f.object) {
        const std::string child = path + f.name + (f.type == FieldType::kObjectArray ? "[]" : "");
        EXPECT_NE(text.find("## `" + child + "`"), std::string::npos) << child;
        walk(*f.object, child + ".");
      }
    }
  };
  walk(deepspeed_schema(), "");
  for (const AutoRuleInfo& r : auto_rules())
    EXPECT_NE(text.find("| `" + std::string(r.name) + "` |"), std::string::npos);
  EXPECT_EQ(text, config_reference_markdown());  // deterministic
}

}  // namespace
}  // namespace dscore::config
