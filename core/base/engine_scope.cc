#include "core/base/engine_scope.h"

#include <utility>

namespace dscore {
namespace {

std::shared_ptr<const EngineIdentity>& this_thread() {
  thread_local std::shared_ptr<const EngineIdentity> identity;
  return identity;
}

}  // namespace

EngineScope::EngineScope(std::shared_ptr<const EngineIdentity> identity)
    : previous_(std::exchange(this_thread(), std::move(identity))) {}

EngineScope::~EngineScope() { this_thread() = std::move(previous_); }

const std::shared_ptr<const EngineIdentity>& EngineScope::current() { return this_thread(); }

}  // namespace dscore
