// `dscore checkpoint inspect`: what a checkpoint holds (tag, stage, world
// size, counters, files, tensors, sizes) with every tensor's checksum
// verified and every parameter's fragments checked for completeness.
#pragma once

#include <string>

#include "core/base/status.h"

namespace dscore::checkpoint {

// Appends the report to *report; returns the first problem found (the
// report then says how far it got).
Status inspect_checkpoint(const std::string& dir, const std::string& tag, std::string* report);

}  // namespace dscore::checkpoint
