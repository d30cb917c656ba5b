#include "core/pipeline/partition.h"

#include <algorithm>
#include <limits>
#include <regex>

#include "core/model/model.h"

namespace dscore::pipeline {

std::vector<size_t> partition_uniform(size_t num_items, int num_parts) {
  const size_t parts = static_cast<size_t>(num_parts);
  std::vector<size_t> bounds(parts + 1, 0);
  if (num_items <= parts) {
    for (size_t p = 0; p <= parts; ++p) bounds[p] = std::min(p, num_items);
    return bounds;
  }
  const size_t chunk = num_items / parts, residual = num_items - chunk * parts;
  for (size_t p = 0; p <= parts; ++p) bounds[p] = p * chunk + std::min(p, residual);
  return bounds;
}

std::vector<size_t> partition_balanced(const std::vector<double>& weights, int num_parts) {
  const size_t n = weights.size(), m = static_cast<size_t>(num_parts);
  if (n <= m) return partition_uniform(n, num_parts);
  const double inf = std::numeric_limits<double>::infinity();
  const size_t width = m + 1;
  std::vector<double> dp_max((n + 1) * width, inf), dp_min((n + 1) * width, inf),
      dp_cost((n + 1) * width, inf);
  std::vector<size_t> position((n + 1) * width, 0);
  std::vector<double> prefix(n + 1, 0.0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + weights[i];
  dp_max[0] = 0;
  dp_cost[0] = 0;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= std::min(i, m); ++j) {
      for (size_t k = 0; k < i; ++k) {
        const double part = prefix[i] - prefix[k];
        const double max_sum = std::max(dp_max[k * width + j - 1], part);
        const double min_sum = std::min(dp_min[k * width + j - 1], part);
        const double cost = max_sum - min_sum;
        // ">=": the last k of equal cost wins, as in DeepSpeed.
        if (dp_cost[i * width + j] >= cost) {
          dp_cost[i * width + j] = cost;
          dp_max[i * width + j] = max_sum;
          dp_min[i * width + j] = min_sum;
          position[i * width + j] = k;
        }
      }
    }
  }
  std::vector<size_t> bounds{n};
  for (size_t i = m; i >= 1; --i) bounds.push_back(position[bounds.back() * width + i]);
  std::reverse(bounds.begin(), bounds.end());
  return bounds;
}

namespace {

// Each layer's parameters, with a tie's owner counted again on the
// reader's side.
std::vector<double> parameter_weights(const dscore_model_description& model) {
  std::vector<double> weights(model.layer_count, 0.0);
  for (size_t l = 0; l < model.layer_count; ++l)
    for (size_t p = 0; p < model.layers[l]->param_count; ++p)
      weights[l] += static_cast<double>(model.layers[l]->params[p]->numel);
  const std::vector<double> own = weights;
  for (const dscore_layer_tie& tie : layer_ties(model)) weights[tie.reader] += own[tie.owner];
  return weights;
}

}  // namespace

Result<std::vector<size_t>> partition_layers(const dscore_model_description& model, int stages,
                                             const std::string& method) {
  const size_t layers = model.layer_count;
  if (stages < 1) return invalid_argument("pipeline stages must be >= 1");
  if (static_cast<size_t>(stages) > layers)
    return invalid_argument("pipeline: " + std::to_string(stages) + " stages for a model of " +
                            std::to_string(layers) +
                            " layers; every stage needs at least one layer (use at most " +
                            std::to_string(layers) + " stages)");
  std::string lower = method;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::vector<size_t> bounds;
  if (lower == "uniform") {
    bounds = partition_uniform(layers, stages);
  } else if (lower == "parameters" || lower == "best") {
    bounds = partition_balanced(parameter_weights(model), stages);
  } else if (lower.rfind("type:", 0) == 0) {
    const std::string pattern = method.substr(5);
    std::regex re;
    try {
      re = std::regex(pattern, std::regex::icase);
    } catch (const std::regex_error& e) {
      return invalid_argument("pipeline.partition \"" + method + "\": \"" + pattern +
                              "\" is not a regular expression (" + e.what() + ")");
    }
    std::vector<double> marks(layers, 0.0);
    size_t matched = 0;
    for (size_t l = 0; l < layers; ++l) {
      const char* name = model.layers[l]->name != nullptr ? model.layers[l]->name : "";
      if (std::regex_search(name, re)) {
        marks[l] = 1.0;
        ++matched;
      }
    }
    if (matched == 0)
      return invalid_argument("pipeline.partition \"" + method +
                              "\" matches none of the model's layer names (`dscore plan` lists "
                              "them); use \"parameters\" or \"uniform\"");
    bounds = partition_balanced(marks, stages);
  } else {
    return invalid_argument("pipeline.partition \"" + method +
                            "\" is not a partition method: use \"parameters\", \"uniform\" or "
                            "\"type:REGEX\"");
  }
  for (int s = 0; s < stages; ++s)
    if (bounds[static_cast<size_t>(s)] >= bounds[static_cast<size_t>(s) + 1])
      return invalid_argument("pipeline.partition \"" + method + "\" leaves stage " +
                              std::to_string(s) + " without layers; use fewer stages or " +
                              "\"uniform\"");
  return bounds;
}

}  // namespace dscore::pipeline
