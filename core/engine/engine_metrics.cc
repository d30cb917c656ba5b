// The model's metrics (model.h metrics: the MoE layers' aux loss, dropped
// routes, expert loads): added up after each micro-batch, combined over the
// data-parallel ranks at the boundary into the step's report.
#include <algorithm>
#include <string>
#include <vector>

#include "core/engine/engine.h"

namespace dscore {

Status Engine::accumulate_metrics() {
  std::vector<Model::Metric> pass;
  DSCORE_RETURN_IF_ERROR(model_->metrics(&pass));
  if (pass.empty() && metric_sums_.empty()) return Status::Ok();
  if (metric_sums_.empty()) {
    metric_sums_ = pass;
    for (Model::Metric& m : metric_sums_) m.value = 0;
  }
  if (pass.size() != metric_sums_.size())
    return internal_error(model_->display_name() + " reported " + std::to_string(pass.size()) +
                          " metrics after reporting " + std::to_string(metric_sums_.size()) +
                          " (model.h metrics: the same ones after every pass)");
  for (size_t i = 0; i < pass.size(); ++i) metric_sums_[i].value += pass[i].value;
  metric_passes_ += 1;
  return Status::Ok();
}

Status Engine::combine_metrics() {
  last_metrics_.clear();
  if (metric_sums_.empty()) return Status::Ok();
  // Summed over the data-parallel ranks (every one has the same model, so
  // the same metrics), with the passes for the means.
  std::vector<double> sums;
  for (const Model::Metric& m : metric_sums_) sums.push_back(m.value);
  sums.push_back(static_cast<double>(metric_passes_));
  const int n = static_cast<int>(sums.size());
  DSCORE_RETURN_IF_ERROR(topology_->group(comm::groups::kData)
                             ->allreduce({sums.data(), DSCORE_DTYPE_F64, n},
                                         {sums.data(), DSCORE_DTYPE_F64, n}, DSCORE_REDUCE_SUM));
  const double passes = std::max(1.0, sums.back());
  for (size_t i = 0; i < metric_sums_.size(); ++i) {
    Model::Metric& m = metric_sums_[i];
    last_metrics_.emplace_back(m.name, m.mean ? sums[i] / passes : sums[i]);
    m.value = 0;
  }
  metric_passes_ = 0;
  return Status::Ok();
}

}  // namespace dscore
