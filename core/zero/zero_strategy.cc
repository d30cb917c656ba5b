#include "core/zero/zero_strategy.h"

#include "core/zero/flat_zero.h"
#include "core/zero/sharded_zero.h"

namespace dscore::zero {

std::unique_ptr<ZeroStrategy> make_zero_strategy(const ZeroContext& context) {
  const int stage = context.config->zero.stage;
  if (stage == 3) return std::make_unique<ShardedZero>(context);
  return std::make_unique<FlatZero>(context, stage);
}

}  // namespace dscore::zero
