// The config reference (docs/config-reference.md), generated from the schema
// so the documentation cannot drift from what the validator accepts. A test
// compares the checked-in file with this text; regenerate with
//   build/<dir>/bin/dscore config reference > docs/config-reference.md
#pragma once

#include <string>

namespace dscore::config {

// Markdown: one table per section (key, type, default, "auto", notes), then
// the "auto" rules. Deterministic.
std::string config_reference_markdown();

}  // namespace dscore::config
