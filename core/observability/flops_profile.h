// The flops profiler's report at `profile_step`, laid out as DeepSpeed's
// FlopsProfiler.print_model_profile prints it (deepspeed/profiling/
// flops_profiler/profiler.py): the summary block ("fwd flops per GPU",
// "fwd FLOPS per GPU = ...", bwd/step/iter lines when wall_clock_breakdown
// timed them), the aggregated profile and one line per layer with params,
// MACs, fwd latency (each with its share of the total) and achieved FLOPS.
//
// Inputs come from the model's optional layer_flops ABI function (forward
// FLOPs per layer for the micro-batch, multiply-adds counted as 2) and the
// engine's per-layer forward timings. MACs are taken as FLOPs / 2 (DeepSpeed
// counts MACs only for matmul-like ops; for the dense layers of the built-in
// models the two agree). Backward is taken as 2x forward, as DeepSpeed does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dscore::observability {

struct LayerProfile {
  std::string name;            // the model's layer name ("fc1", "block.3.attn")
  int64_t params = 0;          // parameters of the layer on this rank
  double forward_flops = 0;    // one forward pass over the micro-batch
  double forward_seconds = 0;  // measured forward latency of the layer
};

struct FlopsProfileInput {
  int64_t profile_step = 1;
  std::string model_name = "model";  // the top line of the detailed profile
  int64_t world_size = 1;
  int64_t dp_size = 1;
  int64_t mp_size = 1;
  int64_t micro_batch_per_gpu = 1;
  std::vector<LayerProfile> layers;  // in forward order
  // The forward latency the summary uses: the engine's fwd timer when
  // wall_clock_breakdown is on, else the model's own forward duration
  // (<= 0 = the sum of the layers' times).
  double forward_seconds = 0;
  // Set when wall_clock_breakdown timed them (seconds): adds the bwd, step
  // and iter lines and samples/second.
  std::optional<double> backward_seconds;
  std::optional<double> step_seconds;
  double recompute_fwd_factor = 0;  // activation checkpointing recomputation
};

// The whole report, lines ended with '\n'.
std::string flops_profile_report(const FlopsProfileInput& input);

// DeepSpeed's number formatting (precision 2): number_to_string(1234567) =
// "1.23 M", macs "1.23 MMACs", flops "1.23 MFLOPS", params "1.23 M" (G shown
// as B), duration "1.23 ms".
std::string number_to_string(double num);
std::string macs_to_string(double macs);
std::string flops_to_string(double flops);
std::string params_to_string(double params);
std::string duration_to_string(double seconds);

}  // namespace dscore::observability
