#include "core/engine/flops_probe.h"

#include <fstream>

#include "core/base/logging.h"
#include "core/observability/flops_profile.h"

namespace dscore {

FlopsProbe::FlopsProbe(const config::TrainingConfig& config, const ParamLayout& layout,
                       int world_size, int rank, const Model& model, const int64_t* global_steps)
    : config_(config.flops_profiler),
      layout_(layout),
      world_size_(world_size),
      rank_(rank),
      model_(model),
      global_steps_(global_steps),
      micro_batch_(config.batch.train_micro_batch_size_per_gpu),
      micro_steps_(config.batch.gradient_accumulation_steps),
      forward_seconds_(layout.layer_count(), 0.0),
      started_(layout.layer_count()),
      timing_(layout.layer_count(), 0) {}

void FlopsProbe::forward_acquired(size_t layer) {
  started_[layer] = Clock::now();
  timing_[layer] = 1;
}

void FlopsProbe::released(size_t layer) {
  if (!timing_[layer]) return;
  forward_seconds_[layer] += std::chrono::duration<double>(Clock::now() - started_[layer]).count();
  timing_[layer] = 0;
}

void FlopsProbe::on_boundary(const StepReport& r, std::vector<ScalarEvent>*) {
  if (!profiling(r.global_steps - 1)) return;
  finish();
  if (rank_ != 0) return;
  auto text = report(model_);
  if (!text.ok()) {
    log_warning("flops profiler: " + text.status().message());
  } else if (output_file().empty()) {
    log_info("flops profile\n" + *text);
  } else if (std::ofstream out(output_file()); out << *text) {
    log_info("flops profile written to " + output_file());
  } else {
    log_warning("flops profiler: cannot write " + output_file());
  }
}

Result<std::string> FlopsProbe::report(const Model& model) {
  observability::FlopsProfileInput input;
  input.profile_step = config_.profile_step;
  // "model 'mlp' (/path/libdscore_mlp.so)" -> "model 'mlp'"
  input.model_name = model.display_name().substr(0, model.display_name().find(" ("));
  input.world_size = world_size_;
  input.dp_size = world_size_;
  input.micro_batch_per_gpu = micro_batch_;
  input.recompute_fwd_factor = config_.recompute_fwd_factor;
  const dscore_model_description& d = model.description();
  for (size_t l = 0; l < layout_.layer_count(); ++l) {
    observability::LayerProfile layer;
    layer.name = d.layers[l]->name != nullptr ? d.layers[l]->name : "layer " + std::to_string(l);
    for (size_t p = layout_.layer_first(l); p < layout_.layer_end(l); ++p)
      layer.params += layout_.params()[p].numel;
    DSCORE_ASSIGN_OR_RETURN(layer.forward_flops, model.layer_flops(l, micro_batch_));
    layer.forward_seconds = forward_seconds_[l] / static_cast<double>(micro_steps_);
    input.layers.push_back(std::move(layer));
  }
  return observability::flops_profile_report(input);
}

}  // namespace dscore
