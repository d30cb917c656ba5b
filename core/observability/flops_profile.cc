#include "core/observability/flops_profile.h"

#include <string_view>

#include "core/observability/ds_format.h"

namespace dscore::observability {
namespace {

std::string with_units(double num, double magnitude, const char* units) {
  return format_g(python_round(num / magnitude, 2)) + " " + units;
}

// Python's '{:<70}  {:<8}' line of the summary block.
std::string summary_line(std::string_view label, std::string_view value) {
  return pad_right(label, 70) + "  " + pad_right(value, 8) + "\n";
}

// '{:g}' of round(100 * part / total, 2), 0 when the total is 0.
std::string percent(double part, double total) {
  return total != 0 ? format_g(python_round(100 * part / total, 2)) : "0";
}

// flops_repr: the items DeepSpeed appends to each module's repr.
std::string layer_items(double params, double flops, double seconds, double total_params,
                        double total_flops, double total_seconds) {
  return params_to_string(params) + " = " + percent(params, total_params) + "% Params, " +
         macs_to_string(flops / 2) + " = " + percent(flops, total_flops) + "% MACs, " +
         duration_to_string(seconds) + " = " + percent(seconds, total_seconds) + "% latency, " +
         flops_to_string(seconds != 0 ? python_round(flops / seconds, 2) : 0);
}

// FLOPS from flops and seconds; 0 when nothing was timed (DeepSpeed would
// divide by zero).
double rate(double flops, double seconds) { return seconds > 0 ? flops / seconds : 0; }

}  // namespace

std::string number_to_string(double num) {
  if (num >= 1e12) return with_units(num, 1e12, "T");
  if (num >= 1e9) return with_units(num, 1e9, "G");
  if (num >= 1e6) return with_units(num, 1e6, "M");
  if (num >= 1e3) return with_units(num, 1e3, "K");
  if (num >= 1 || num == 0) return with_units(num, 1, "");
  if (num >= 1e-3) return with_units(num, 1e-3, "m");
  return with_units(num, 1e-6, "u");
}

std::string macs_to_string(double macs) { return number_to_string(macs) + "MACs"; }
std::string flops_to_string(double flops) { return number_to_string(flops) + "FLOPS"; }
std::string duration_to_string(double seconds) { return number_to_string(seconds) + "s"; }

std::string params_to_string(double params) {
  std::string s = number_to_string(params);
  for (char& c : s)
    if (c == 'G') c = 'B';  // billions of parameters
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

std::string flops_profile_report(const FlopsProfileInput& in) {
  double total_params = 0, total_flops = 0, layer_seconds = 0;
  for (const LayerProfile& l : in.layers) {
    total_params += static_cast<double>(l.params);
    total_flops += l.forward_flops;
    layer_seconds += l.forward_seconds;
  }
  const double fwd = in.forward_seconds > 0 ? in.forward_seconds : layer_seconds;
  const double mp = static_cast<double>(in.mp_size);

  std::string out =
      "\n-------------------------- DeepSpeed Flops Profiler --------------------------\n";
  out += "Profile Summary at step " + std::to_string(in.profile_step) + ":\n";
  out +=
      "Notations:\n"
      "data parallel size (dp_size), model parallel size(mp_size),\n"
      "number of parameters (params), number of multiply-accumulate operations(MACs),\n"
      "number of floating-point operations (flops), floating-point operations per second (FLOPS),\n"
      "fwd latency (forward propagation latency), bwd latency (backward propagation latency),\n"
      "step (weights update latency), iter latency (sum of fwd, bwd and step latency)\n\n";
  out += summary_line("world size: ", std::to_string(in.world_size));
  out += summary_line("data parallel size: ", std::to_string(in.dp_size));
  out += summary_line("model parallel size: ", std::to_string(in.mp_size));
  out += summary_line("batch size per GPU: ", std::to_string(in.micro_batch_per_gpu));
  out += summary_line("params per GPU: ", params_to_string(total_params));
  out += summary_line("params of model = params per GPU * mp_size: ",
                      params_to_string(total_params * mp));
  out += summary_line("fwd MACs per GPU: ", macs_to_string(total_flops / 2));
  out += summary_line("fwd flops per GPU: ", number_to_string(total_flops));
  out += summary_line("fwd flops of model = fwd flops per GPU * mp_size: ",
                      number_to_string(total_flops * mp));
  out += summary_line("fwd latency: ", duration_to_string(fwd));
  out += summary_line("fwd FLOPS per GPU = fwd flops per GPU / fwd latency: ",
                      flops_to_string(rate(total_flops, fwd)));
  if (in.backward_seconds && in.step_seconds) {
    const double bwd_factor = 2 + in.recompute_fwd_factor;
    const double bwd = *in.backward_seconds;
    const double iter = fwd + bwd + *in.step_seconds;
    const std::string f = format_g(bwd_factor), f1 = format_g(bwd_factor + 1);
    out += summary_line("bwd latency: ", duration_to_string(bwd));
    out += summary_line("bwd FLOPS per GPU = " + f + " * fwd flops per GPU / bwd latency: ",
                        flops_to_string(rate(bwd_factor * total_flops, bwd)));
    out +=
        summary_line("fwd+bwd FLOPS per GPU = " + f1 + " * fwd flops per GPU / (fwd+bwd latency): ",
                     flops_to_string(rate((bwd_factor + 1) * total_flops, fwd + bwd)));
    out += summary_line("step latency: ", duration_to_string(*in.step_seconds));
    out += summary_line("iter latency: ", duration_to_string(iter));
    out += summary_line("FLOPS per GPU = " + f1 + " * fwd flops per GPU / iter latency: ",
                        flops_to_string(rate((bwd_factor + 1) * total_flops, iter)));
    const double samples = static_cast<double>(in.micro_batch_per_gpu * in.world_size);
    out += summary_line("samples/second: ", format_repr(python_round(rate(samples, iter), 2)));
  }

  // The layers form depth 1 under the model, so DeepSpeed's aggregated
  // profile lists depth 0 only: the model itself.
  const std::string quoted_name = "'" + in.model_name + "'";
  out +=
      "\n----------------------------- Aggregated Profile per GPU -----------------------------\n";
  out += "Top 1 modules in terms of params, MACs or fwd latency at different model depths:\n";
  out += "depth 0:\n";
  out += "    params      - {" + quoted_name + ": '" + params_to_string(total_params) + "'}\n";
  out += "    MACs        - {" + quoted_name + ": '" + macs_to_string(total_flops / 2) + "'}\n";
  out += "    fwd latency - {" + quoted_name + ": '" + duration_to_string(layer_seconds) + "'}\n";

  out +=
      "\n------------------------------ Detailed Profile per GPU ------------------------------\n";
  out +=
      "Each module profile is listed after its name in the following order: \n"
      "params, percentage of total params, MACs, percentage of total MACs, fwd latency, "
      "percentage of total fwd latency, fwd FLOPS\n\n"
      "Note: Number of floating-point operations is a theoretical estimation, thus FLOPS computed "
      "using that could be larger than the maximum system throughput.\n\n";
  out += in.model_name + "(\n  " +
         layer_items(total_params, total_flops, layer_seconds, total_params, total_flops,
                     layer_seconds) +
         "\n";
  for (const LayerProfile& l : in.layers)
    out += "  (" + l.name + "): " +
           layer_items(static_cast<double>(l.params), l.forward_flops, l.forward_seconds,
                       total_params, total_flops, layer_seconds) +
           "\n";
  out += ")\n------------------------------------------------------------------------------\n";
  return out;
}

}  // namespace dscore::observability
