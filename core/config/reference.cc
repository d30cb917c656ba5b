// Generates docs/config-reference.md from the schema: the top-level table,
// then one table per section, depth first in schema order, then the "auto"
// rules.
#include "core/config/reference.h"

#include <sstream>

#include "core/base/strings.h"
#include "core/config/auto_rules.h"
#include "core/config/deepspeed_schema.h"
#include "core/config/schema.h"
#include "core/config/schema_util.h"

namespace dscore::config {

namespace {

std::string cell(std::string text) {
  std::string out;
  for (char c : text) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n')
      out += ' ';
    else
      out += c;
  }
  return out;
}

std::string type_text(const FieldSpec& f) {
  switch (f.type) {
    case FieldType::kBool:
      return "bool";
    case FieldType::kInt:
      return "int";
    case FieldType::kNumber:
      return "number";
    case FieldType::kString:
      return "string";
    case FieldType::kNumberArray:
      return "list of numbers";
    case FieldType::kNumberOrArray:
      return "number or list of numbers";
    case FieldType::kStringArray:
      return "list of strings";
    case FieldType::kObject:
      return "object";
    case FieldType::kJson:
      return "any JSON";
    case FieldType::kObjectArray:
      return "list of objects";
  }
  return "?";
}

std::string notes(const FieldSpec& f) {
  std::vector<std::string> parts;
  if (!f.doc.empty()) parts.push_back(f.doc);
  if (f.required) parts.push_back("**required**");
  if (f.min && f.max)
    parts.push_back("range " + number_text(*f.min) + " to " + number_text(*f.max));
  else if (f.min)
    parts.push_back(">= " + number_text(*f.min));
  else if (f.max)
    parts.push_back("<= " + number_text(*f.max));
  if (!f.enum_values.empty())
    parts.push_back("one of " + join(f.enum_values, ", ") +
                    (f.enum_case_insensitive ? " (any case)" : ""));
  if (f.length) parts.push_back("exactly " + std::to_string(*f.length) + " items");
  for (const std::string& a : f.aliases) parts.push_back("also spelled `" + a + "`");
  if (!f.deprecated.empty()) parts.push_back("*" + f.deprecated + "*");
  if (!f.error.empty()) parts.push_back("rejected: " + f.error);
  if (!f.unsupported_what.empty()) {
    std::string when = f.type == FieldType::kObject ? "given" : "not the default";
    if (!f.switch_key.empty()) {
      const FieldSpec* sw = f.object ? f.object->find(f.switch_key) : nullptr;
      const bool degree = sw && sw->type != FieldType::kBool;
      when = "`" + f.switch_key + "` is " + (degree ? "above 1" : "true");
    }
    parts.push_back("not implemented by dscore: an error when " + when +
                    " (a warning with --allow-unsupported)");
  }
  if (f.not_used) parts.push_back("accepted, not used by dscore");
  return join(parts, "; ");
}

class Writer {
 public:
  std::string run() {
    out_ << "# ds_config.json reference\n\n"
         << "<!-- Generated from the schema (core/config/deepspeed_schema*.cc) by `dscore config "
            "reference`;\n"
         << "     do not edit by hand. A test fails when this file and the schema disagree. -->\n\n"
         << "Every key dscore reads, with its type and default. Defaults and meanings are "
            "DeepSpeed's\n"
         << "(v0.16) unless the notes say otherwise. Unlike DeepSpeed, **an unknown key is an "
            "error at\n"
         << "every level**, with a did-you-mean suggestion. The \"auto\" column names the rule "
            "that resolves\n"
         << "`\"auto\"` for that key (see the table at the end and docs/config-auto.md); a key "
            "without a\n"
         << "rule rejects `\"auto\"`. Ints accept integral floats (`5e8`).\n";
    section("Top level", "", deepspeed_schema());
    out_ << "\n## \"auto\" rules\n\n| rule | value |\n|---|---|\n";
    for (const AutoRuleInfo& r : auto_rules())
      out_ << "| `" << r.name << "` | " << cell(r.summary) << " |\n";
    return out_.str();
  }

 private:
  void section(const std::string& title, const std::string& path, const ObjectSpec& spec) {
    out_ << "\n## " << title << "\n\n";
    if (!spec.doc.empty()) out_ << cell(spec.doc) << ".\n\n";
    if (!spec.fields.empty()) {
      out_ << "| key | type | default | \"auto\" | notes |\n|---|---|---|---|---|\n";
      for (const FieldSpec& f : spec.fields) {
        std::string def = "—";
        if (f.default_value) {
          def = "`";  // appended piecewise: GCC 12 -Wrestrict false positive at -O3
          def += json::serialize(*f.default_value);
          def += "`";
        }
        std::string rule = f.auto_rule.empty() ? "—" : "`" + f.auto_rule + "`";
        out_ << "| `" << f.name << "` | " << type_text(f) << " | " << cell(def) << " | " << rule
             << " | " << cell(notes(f)) << " |\n";
      }
    }
    if (spec.allow_unknown)
      out_ << "\nOther keys are accepted"
           << (spec.quiet_unknown ? " and passed on as written"
                                  : " and reported as not used by dscore")
           << ".\n";
    for (const FieldSpec& f : spec.fields) {
      if (!f.object || (f.type != FieldType::kObject && f.type != FieldType::kObjectArray))
        continue;
      std::string child = join_path(path, f.name) + (f.type == FieldType::kObjectArray ? "[]" : "");
      section("`" + child + "`", child, *f.object);
    }
  }

  std::ostringstream out_;
};

}  // namespace

std::string config_reference_markdown() { return Writer().run(); }

}  // namespace dscore::config
