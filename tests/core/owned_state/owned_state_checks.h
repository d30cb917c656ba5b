// Checks every OwnedState that updates on the host must pass
// (host_offload_state_test.cc, nvme_state_test.cc).
#pragma once

#include <gtest/gtest.h>

#include "core/owned_state/owned_state.h"

namespace dscore::testing {

// An update walk over three tiles of `tile` elements whose visitor fails at
// the second: the walk ends with the visitor's error after two visits, the
// first tile's new parameters reached the model (`model_params`, fp32), and
// the next walk visits all three tiles.
inline void expect_a_visitor_error_ends_the_walk(OwnedState& state, const float* model_params,
                                                 int64_t tile) {
  int visited = 0;
  Status s = state.for_each_tile(TileAccess::kUpdate, [&](const StateTile& t) {
    ++visited;
    if (t.begin == tile) return internal_error("the optimizer plugin failed");
    t.master[0] = 5.0f;
    return Status::Ok();
  });
  EXPECT_EQ(s.message(), "the optimizer plugin failed");
  EXPECT_EQ(visited, 2);
  EXPECT_EQ(model_params[0], 5.0f);  // the tile before the error reached the model
  visited = 0;
  s = state.for_each_tile(TileAccess::kUpdate, [&](const StateTile&) {
    ++visited;
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(visited, 3);
}

}  // namespace dscore::testing
