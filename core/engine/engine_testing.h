// Test and benchmark access to an Engine: whole-model gathers of the
// weights and optimizer state, and the engine's own time accounting. Not
// part of the training API (engine.h); tools and tests include this header.
#pragma once

#include <cstddef>
#include <vector>

#include "core/base/status.h"
#include "core/engine/engine.h"
#include "core/engine/engine_timing.h"
#include "core/zero/plan.h"

namespace dscore {

struct EngineTesting {
  // The full model's fp32 master weights in layout order (collective).
  static Status gather_parameters(Engine& e, std::vector<float>* out);
  // Optimizer state slot `slot` (optimizer_state_slots() order) of the whole
  // model in layout order, as fp32 (collective).
  static Status gather_optimizer_state(Engine& e, size_t slot, std::vector<float>* out);
  static std::vector<zero::StateSlot> optimizer_state_slots(const Engine& e);

  // Where forward_backward() and step() spent their time since the last reset.
  static EngineTiming timing(const Engine& e);
  static void reset_timing(Engine& e);
};

}  // namespace dscore
