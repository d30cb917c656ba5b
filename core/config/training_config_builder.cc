// The normalised ds_config.json -> TrainingConfig. Everything here has been
// validated already; a missing key means the schema gives it no default, so
// the struct's own default (DeepSpeed's) applies.
#include "core/config/training_config_builder.h"

#include "core/config/schema.h"

namespace dscore::config {

namespace {

const json::Value kNull;

const json::Value& at(const json::Value& obj, const char* key) {
  const json::Value* v = obj.is_object() ? obj.find(key) : nullptr;
  return v ? *v : kNull;
}

bool get(const json::Value& obj, const char* key, bool fallback) {
  const json::Value& v = at(obj, key);
  return v.is_bool() ? v.as_bool() : fallback;
}
int64_t get(const json::Value& obj, const char* key, int64_t fallback) {
  const json::Value& v = at(obj, key);
  return v.is_integral() ? v.as_int() : fallback;
}
double get(const json::Value& obj, const char* key, double fallback) {
  const json::Value& v = at(obj, key);
  return v.is_number() ? v.as_number() : fallback;
}
std::string get(const json::Value& obj, const char* key, const std::string& fallback) {
  const json::Value& v = at(obj, key);
  return v.is_string() ? v.as_string() : fallback;
}

template <typename T>
void read(const json::Value& obj, const char* key, T* out) {
  *out = get(obj, key, *out);
}
void read(const json::Value& obj, const char* key, int* out) {
  *out = static_cast<int>(get(obj, key, int64_t{*out}));
}

// A plugin's params: the object as written, or {} placed at the section.
json::Value params_or_empty(const json::Value& section) {
  const json::Value& params = at(section, "params");
  if (params.is_object()) return params;
  json::Value empty = json::Value::object();
  empty.location = section.location;
  return empty;
}

PluginRef plugin_ref(const json::Value& section, const std::string& path) {
  return PluginRef{get(section, "type", std::string()), params_or_empty(section), join_path(path, "params"),
                   section.location};
}

OffloadConfig offload(const json::Value& o) {
  OffloadConfig c;
  read(o, "device", &c.device);
  read(o, "nvme_path", &c.nvme_path);
  read(o, "buffer_count", &c.buffer_count);
  read(o, "buffer_size", &c.buffer_size);
  read(o, "max_in_cpu", &c.max_in_cpu);
  read(o, "pin_memory", &c.pin_memory);
  read(o, "pipeline_read", &c.pipeline_read);
  read(o, "pipeline_write", &c.pipeline_write);
  read(o, "fast_init", &c.fast_init);
  read(o, "ratio", &c.ratio);
  return c;
}

ZeroConfig zero(const json::Value& z) {
  ZeroConfig c;
  read(z, "stage", &c.stage);
  read(z, "contiguous_gradients", &c.contiguous_gradients);
  read(z, "reduce_scatter", &c.reduce_scatter);
  read(z, "reduce_bucket_size", &c.reduce_bucket_size);
  read(z, "use_multi_rank_bucket_allreduce", &c.use_multi_rank_bucket_allreduce);
  read(z, "allgather_partitions", &c.allgather_partitions);
  read(z, "allgather_bucket_size", &c.allgather_bucket_size);
  read(z, "overlap_comm", &c.overlap_comm);
  read(z, "load_from_fp32_weights", &c.load_from_fp32_weights);
  read(z, "elastic_checkpoint", &c.elastic_checkpoint);
  if (at(z, "offload_param").is_object()) c.offload_param = offload(at(z, "offload_param"));
  if (at(z, "offload_optimizer").is_object()) c.offload_optimizer = offload(at(z, "offload_optimizer"));
  read(z, "sub_group_size", &c.sub_group_size);
  read(z, "prefetch_bucket_size", &c.prefetch_bucket_size);
  read(z, "param_persistence_threshold", &c.param_persistence_threshold);
  read(z, "model_persistence_threshold", &c.model_persistence_threshold);
  read(z, "max_live_parameters", &c.max_live_parameters);
  read(z, "max_reuse_distance", &c.max_reuse_distance);
  read(z, "gather_16bit_weights_on_model_save", &c.gather_16bit_weights_on_model_save);
  read(z, "ignore_unused_parameters", &c.ignore_unused_parameters);
  read(z, "round_robin_gradients", &c.round_robin_gradients);
  return c;
}

Fp16Config fp16(const json::Value& f, const json::Value& written) {
  Fp16Config c;
  read(f, "enabled", &c.enabled);
  read(f, "auto_cast", &c.auto_cast);
  read(f, "loss_scale", &c.loss_scale);
  read(f, "initial_scale_power", &c.initial_scale_power);
  read(f, "loss_scale_window", &c.loss_scale_window);
  read(f, "hysteresis", &c.hysteresis);
  read(f, "consecutive_hysteresis", &c.consecutive_hysteresis);
  read(f, "min_loss_scale", &c.min_loss_scale);
  read(f, "fp16_master_weights_and_grads", &c.fp16_master_weights_and_grads);
  // docs/deepspeed-reference.md#precision-sections: the scalers use their own defaults unless at
  // least one dynamic key is written.
  const json::Value& w = at(written, "fp16");
  for (const char* k :
       {"initial_scale_power", "loss_scale_window", "min_loss_scale", "hysteresis", "consecutive_hysteresis"})
    if (w.is_object() && w.find(k)) c.dynamic_args_given = true;
  return c;
}

void monitors(const json::Value& doc, std::vector<PluginRef>* out) {
  for (const char* name : {"tensorboard", "csv_monitor", "wandb", "comet"}) {
    const json::Value& section = at(doc, name);
    if (!get(section, "enabled", false)) continue;
    json::Value params = json::Value::object();
    params.location = section.location;
    for (const json::Member& m : section.members())
      if (m.key != "enabled" && !m.value.is_null()) params.members().push_back(m);
    out->push_back(PluginRef{name, std::move(params), name, section.location});
  }
  const json::Value& extra = at(at(doc, "plugins"), "monitors");
  if (!extra.is_array()) return;
  for (size_t i = 0; i < extra.items().size(); ++i)
    out->push_back(plugin_ref(extra.items()[i], "plugins.monitors[" + std::to_string(i) + "]"));
}

}  // namespace

TrainingConfig build_training_config(const json::Value& doc, const json::Value& written) {
  TrainingConfig c;
  read(doc, "train_batch_size", &c.batch.train_batch_size);
  read(doc, "train_micro_batch_size_per_gpu", &c.batch.train_micro_batch_size_per_gpu);
  read(doc, "gradient_accumulation_steps", &c.batch.gradient_accumulation_steps);
  read(doc, "steps_per_print", &c.steps_per_print);
  if (at(doc, "optimizer").is_object()) c.optimizer = plugin_ref(at(doc, "optimizer"), "optimizer");
  if (at(doc, "scheduler").is_object()) c.scheduler = plugin_ref(at(doc, "scheduler"), "scheduler");
  read(doc, "zero_allow_untested_optimizer", &c.zero_allow_untested_optimizer);
  read(doc, "zero_force_ds_cpu_optimizer", &c.zero_force_ds_cpu_optimizer);
  c.fp16 = fp16(at(doc, "fp16"), written);
  read(at(doc, "bf16"), "enabled", &c.bf16.enabled);
  read(at(doc, "bf16"), "immediate_grad_update", &c.bf16.immediate_grad_update);
  read(doc, "gradient_clipping", &c.gradient_clipping);
  if (at(doc, "communication_data_type").is_string())
    c.communication_data_type = at(doc, "communication_data_type").as_string();
  if (at(at(doc, "data_types"), "grad_accum_dtype").is_string())
    c.grad_accum_dtype = at(at(doc, "data_types"), "grad_accum_dtype").as_string();
  read(doc, "prescale_gradients", &c.prescale_gradients);
  read(doc, "gradient_predivide_factor", &c.gradient_predivide_factor);
  read(doc, "wall_clock_breakdown", &c.wall_clock_breakdown);
  read(doc, "memory_breakdown", &c.memory_breakdown);
  read(doc, "dataloader_drop_last", &c.dataloader_drop_last);
  c.zero = zero(at(doc, "zero_optimization"));

  const json::Value& ac = at(doc, "activation_checkpointing");
  c.activation_checkpointing.present = ac.is_object();
  read(ac, "partition_activations", &c.activation_checkpointing.partition_activations);
  if (at(ac, "number_checkpoints").is_integral())
    c.activation_checkpointing.number_checkpoints = at(ac, "number_checkpoints").as_int();
  read(ac, "contiguous_memory_optimization", &c.activation_checkpointing.contiguous_memory_optimization);
  read(ac, "cpu_checkpointing", &c.activation_checkpointing.cpu_checkpointing);
  read(ac, "profile", &c.activation_checkpointing.profile);
  read(ac, "synchronize_checkpoint_boundary", &c.activation_checkpointing.synchronize_checkpoint_boundary);

  c.aio = at(doc, "aio");
  const json::Value& fp = at(doc, "flops_profiler");
  read(fp, "enabled", &c.flops_profiler.enabled);
  read(fp, "profile_step", &c.flops_profiler.profile_step);
  read(fp, "module_depth", &c.flops_profiler.module_depth);
  read(fp, "top_modules", &c.flops_profiler.top_modules);
  read(fp, "detailed", &c.flops_profiler.detailed);
  read(fp, "recompute_fwd_factor", &c.flops_profiler.recompute_fwd_factor);
  if (at(fp, "output_file").is_string()) c.flops_profiler.output_file = at(fp, "output_file").as_string();
  const json::Value& cl = at(doc, "comms_logger");
  c.comms_logger.present = cl.is_object();
  read(cl, "enabled", &c.comms_logger.enabled);
  read(cl, "prof_all", &c.comms_logger.prof_all);
  if (at(cl, "prof_ops").is_array())
    for (const json::Value& op : at(cl, "prof_ops").items())
      c.comms_logger.prof_ops.push_back(op.as_string());
  read(cl, "verbose", &c.comms_logger.verbose);
  read(cl, "debug", &c.comms_logger.debug);

  const json::Value& ck = at(doc, "checkpoint");
  read(ck, "tag_validation", &c.checkpoint.tag_validation);
  read(ck, "load_universal", &c.checkpoint.load_universal);
  read(ck, "use_node_local_storage", &c.checkpoint.use_node_local_storage);

  monitors(doc, &c.monitors);

  const json::Value& model = at(doc, "model");
  if (model.is_object()) {
    json::Value params = json::Value::object();
    params.location = model.location;
    for (const json::Member& m : model.members())
      if (m.key != "type") params.members().push_back(m);
    c.model = PluginRef{get(model, "type", std::string()), std::move(params), "model", model.location};
  }
  read(at(doc, "data"), "type", &c.data.type);
  read(at(doc, "data"), "path", &c.data.path);
  read(at(doc, "data"), "shuffle", &c.data.shuffle);
  if (at(at(doc, "plugins"), "paths").is_array())
    for (const json::Value& p : at(at(doc, "plugins"), "paths").items())
      c.plugin_paths.push_back(p.as_string());
  read(at(doc, "comm"), "backend", &c.comm.backend);
  read(at(doc, "comm"), "timeout_ms", &c.comm.timeout_ms);
  read(doc, "train_steps", &c.train_steps);
  read(doc, "checkpoint_dir", &c.checkpoint_dir);
  c.save_interval = get(doc, "save_interval", int64_t{0});
  c.resolved = doc;
  c.seed = static_cast<uint64_t>(get(doc, "seed", int64_t{42}));
  return c;
}

}  // namespace dscore::config
