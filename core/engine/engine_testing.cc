// EngineTesting: forwards to the Engine's private gathers and timing.
#include "core/engine/engine_testing.h"

namespace dscore {

Status EngineTesting::gather_parameters(Engine& e, std::vector<float>* out) {
  return e.gather_parameters(out);
}

Status EngineTesting::gather_optimizer_state(Engine& e, size_t slot, std::vector<float>* out) {
  return e.gather_optimizer_state(slot, out);
}

std::vector<zero::StateSlot> EngineTesting::optimizer_state_slots(const Engine& e) {
  return e.optimizer_->slots();
}

EngineTiming EngineTesting::timing(const Engine& e) { return e.timing(); }

void EngineTesting::reset_timing(Engine& e) { e.reset_timing(); }

}  // namespace dscore
