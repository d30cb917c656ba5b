#include "core/zero/scale_plan.h"

#include <dscore/cpp/dtype.hpp>

#include <cstdio>
#include <cstdlib>

#include "core/base/strings.h"
#include "core/zero/quantization.h"

namespace dscore::zero {
namespace {

// Bytes per element of a quantized run (codes and scales).
double quantized_per_element(QuantBits bits) {
  const double n = static_cast<double>(quant_block(bits));
  return static_cast<double>(quantized_bytes(quant_block(bits), bits)) / n;
}

}  // namespace

Result<LinkRates> parse_link_rates(const std::string& text) {
  LinkRates rates;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    char* stop = nullptr;
    const double value = eq == std::string::npos ? 0 : std::strtod(item.c_str() + eq + 1, &stop);
    if (eq == std::string::npos || stop == item.c_str() + eq + 1 || *stop != '\0' || value <= 0 ||
        (key != "intra" && key != "inter"))
      return invalid_argument("--link \"" + text +
                              "\": expected intra=GB/s,inter=GB/s (positive numbers), e.g. "
                              "intra=50,inter=12.5");
    (key == "intra" ? rates.intra : rates.inter) = value * 1e9;
    pos = end + 1;
  }
  if (rates.intra <= 0 || rates.inter <= 0)
    return invalid_argument("--link \"" + text + "\" needs both intra= and inter= (GB/s)");
  return rates;
}

ScaleEstimate estimate_scale(const ZeroPlan& plan, const config::ZeroConfig& zero, int nodes,
                             int ranks_per_node, const LinkRates& links,
                             std::optional<double> compute_seconds) {
  ScaleEstimate e;
  e.nodes = nodes;
  e.ranks_per_node = ranks_per_node;
  const double n = nodes, r = ranks_per_node, w = n * r;
  const double md = static_cast<double>(sdk::dtype_size(plan.model_dtype));
  const double gd = static_cast<double>(sdk::dtype_size(plan.grad_dtype));
  const auto add = [&](const std::string& name, double node_bytes, double cross_bytes) {
    if (node_bytes <= 0 && cross_bytes <= 0) return;
    e.collectives.push_back({name, node_bytes, cross_bytes,
                             node_bytes / links.intra + cross_bytes * kLinkFraming / links.inter});
  };
  // A flat collective over every rank of S bytes.
  const auto flat = [&](const std::string& name, double s) {
    add(name, r * s * (r - 1) / w, r * s * (n - 1) / n);
  };
  if (plan.stage == 3) {
    const double gas = static_cast<double>(plan.gradient_accumulation_steps);
    const double gathered = static_cast<double>(plan.gathered_per_pass);
    const double persistent = static_cast<double>(plan.persistent_elements);
    const double padded = static_cast<double>(plan.padded_elements);
    const double weight_bytes =
        zero.quantized_weights ? quantized_per_element(QuantBits::kInt8) : md;
    if (zero.hpz_partition_size > 1) {
      // The first forward from the primary partition, the rest from each
      // node's secondary copy (exact, at the model's dtype).
      flat("allgather (parameters)", (gathered + persistent) * weight_bytes);
      add("allgather (hpZ, within nodes)", r * (2 * gathered * gas - gathered) * md * (r - 1) / r,
          0);
    } else {
      flat("allgather (parameters)", (2 * gathered * gas + persistent) * weight_bytes);
    }
    if (zero.quantized_gradients) {
      const double s = padded * gas * quantized_per_element(QuantBits::kInt4);
      add("all_to_all (qgZ gradients)", r * s * (r - 1) / r, s * (n - 1) / n);
    } else {
      flat("reduce_scatter (gradients)", padded * gas * gd);
    }
  } else {
    for (const auto& [op, elements] : plan.comm_elements) {
      if (op.find("statistics") != std::string::npos) continue;
      const double bytes_each = op == "allgather" ? md : gd;
      flat(op, static_cast<double>(elements) * bytes_each);
    }
  }
  for (const CollectiveTraffic& c : e.collectives) e.comm_seconds += c.seconds;
  e.compute_seconds = compute_seconds;
  if (compute_seconds) e.step_seconds = *compute_seconds + e.comm_seconds;
  return e;
}

std::string format_scale(const ScaleEstimate& e, const LinkRates& links) {
  char line[256];
  std::string out;
  std::snprintf(line, sizeof line,
                "at %d node(s) x %d rank(s), links %.3g GB/s inside a node, %.3g GB/s between "
                "nodes (per node):\n",
                e.nodes, e.ranks_per_node, links.intra / 1e9, links.inter / 1e9);
  out += line;
  for (const CollectiveTraffic& c : e.collectives) {
    std::snprintf(line, sizeof line, "  %-32s %10s in each node %10s across  %9.4f s\n",
                  c.name.c_str(), format_bytes(static_cast<uint64_t>(c.node_bytes)).c_str(),
                  format_bytes(static_cast<uint64_t>(c.cross_bytes)).c_str(), c.seconds);
    out += line;
  }
  std::snprintf(line, sizeof line, "  communication per step %.4f s\n", e.comm_seconds);
  out += line;
  if (e.step_seconds) {
    std::snprintf(line, sizeof line,
                  "  step time %.4f s (compute %.4f s + communication, not overlapped)\n",
                  *e.step_seconds, *e.compute_seconds);
  } else {
    std::snprintf(line, sizeof line,
                  "  step time: give --compute-seconds (one rank's step measured on one node, "
                  "e.g. `dscore run` at the same micro-batch and accumulation)\n");
  }
  out += line;
  return out;
}

}  // namespace dscore::zero
