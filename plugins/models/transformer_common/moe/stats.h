// What a model's MoE layers did in one pass, for its loss and the monitors
// (model.h metrics).
#pragma once

#include <dscore/model.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace dscore::transformer::moe {

struct PassStats {
  double aux_loss = 0;         // sum over the MoE layers of l_aux
  int64_t dropped_routes = 0;  // routes past an expert's capacity, all layers
  int64_t routes = 0;          // routes chosen, all layers
  std::vector<int64_t> load;   // per expert, routes chosen, summed over the layers
  // Expert parallelism: bytes this rank's token exchanges sent (each
  // all-to-all at its send buffer's size), all layers.
  int64_t exchanged_bytes = 0;
};

// A pass's statistics as the model's metrics (model.h metrics; monitor
// tags under Train/Samples/): the aux loss and the dropped fraction (means
// over the cycle's passes), the dropped routes (a sum), and each expert's
// share of the routes (a mean; 1/E balanced); under expert parallelism the
// bytes the token exchanges sent (a sum: all ranks). The names live here,
// as long as the model.
class PassMetrics {
 public:
  explicit PassMetrics(int64_t experts, bool expert_parallel = false) {
    if (experts == 0) return;
    names_ = {"moe/aux_loss", "moe/dropped_routes", "moe/dropped_fraction"};
    for (int64_t e = 0; e < experts; ++e) names_.push_back("moe/expert_load/" + std::to_string(e));
    loads_ = experts;
    if (expert_parallel) names_.push_back("moe/all_to_all_bytes");
  }
  std::vector<dscore_model_metric> values(const PassStats& s) const {
    if (names_.empty()) return {};
    const double routes = static_cast<double>(std::max<int64_t>(1, s.routes));
    std::vector<dscore_model_metric> out;
    const auto add = [&](size_t name, double value, int32_t combine) {
      out.push_back({sizeof(dscore_model_metric), names_[name].c_str(), value, combine});
    };
    add(0, s.aux_loss, DSCORE_METRIC_MEAN);
    add(1, static_cast<double>(s.dropped_routes), DSCORE_METRIC_SUM);
    add(2, static_cast<double>(s.dropped_routes) / routes, DSCORE_METRIC_MEAN);
    for (size_t e = 0; e < static_cast<size_t>(loads_); ++e)
      add(3 + e, e < s.load.size() ? static_cast<double>(s.load[e]) / routes : 0.0,
          DSCORE_METRIC_MEAN);
    if (names_.size() > 3 + static_cast<size_t>(loads_))
      add(names_.size() - 1, static_cast<double>(s.exchanged_bytes), DSCORE_METRIC_SUM);
    return out;
  }

 private:
  std::vector<std::string> names_;
  int64_t loads_ = 0;
};

}  // namespace dscore::transformer::moe
