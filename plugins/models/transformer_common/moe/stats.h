// What a model's MoE layers did in one pass, for its loss and the monitors
// (model.h metrics).
#pragma once

#include <cstdint>
#include <vector>

namespace dscore::transformer::moe {

struct PassStats {
  double aux_loss = 0;         // sum over the MoE layers of l_aux
  int64_t dropped_routes = 0;  // routes past an expert's capacity, all layers
  int64_t routes = 0;          // routes chosen, all layers
  std::vector<int64_t> load;   // per expert, routes chosen, summed over the layers
};

}  // namespace dscore::transformer::moe
