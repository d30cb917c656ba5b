// Named crash points for the crash-safety tests, and a few error points.
// A run started with
//   DSCORE_FAILPOINTS="checkpoint.before_latest@0,checkpoint.mid_write@1"
// kills itself with SIGKILL when rank 0 reaches failpoint("checkpoint.before_latest")
// or rank 1 reaches "checkpoint.mid_write" ("name" alone: any rank). Without
// the variable a failpoint costs one cached lookup. The points are listed
// where they are called; tests name them to crash a save at a known moment.
#pragma once

#include <string_view>

namespace dscore {

void failpoint(std::string_view name, int rank);

// Whether DSCORE_FAILPOINTS names `name` for `rank`: for points that inject
// an error instead of a crash (the caller makes it).
bool failpoint_armed(std::string_view name, int rank);

}  // namespace dscore
