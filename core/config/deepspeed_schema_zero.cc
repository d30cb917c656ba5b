// The ZeRO part of the schema: zero_optimization
// (docs/deepspeed-reference.md#zero-optimization-keys, #deprecated-keys-and-aliases),
// offload_param / offload_optimizer (#offload) and aio (#aio). These sections are
// pydantic models in DeepSpeed, which silently drops "auto" in them; dscore
// rejects it unless the key has an HF-style rule.
#include <cstdint>

#include "core/config/schema_builder.h"

namespace dscore::config {

using T = FieldType;

namespace {

F device_field(const std::string& what) {
  return F("device", T::kString, "where " + what + " live: none, cpu or nvme")
      .def("none")
      .enums({"none", "cpu", "nvme"})
      .to(&OffloadConfig::device);
}

}  // namespace

std::shared_ptr<const ObjectSpec> offload_param_spec() {
  return make_object(
      {
          device_field("parameters"),
          F("nvme_path", T::kString, "NVMe folder for swapped parameters")
              .nullable()
              .to(&OffloadConfig::nvme_path),
          F("buffer_count", T::kInt,
            "swap buffers (from a GPU: the parameter staging ring, x buffer_size)")
              .def(5)
              .min(0)
              .auto_rule("default")
              .to(&OffloadConfig::buffer_count),
          F("buffer_size", T::kInt, "elements per swap buffer")
              .def_int(100000000)
              .min(0)
              .auto_rule("default")
              .to(&OffloadConfig::buffer_size),
          F("max_in_cpu", T::kInt, "parameter elements kept in pinned CPU memory with nvme")
              .def_int(1000000000)
              .min(0)
              .auto_rule("default")
              .to(&OffloadConfig::max_in_cpu),
          F("pin_memory", T::kBool, "page-lock the CPU copies")
              .def(true)
              .auto_rule("default")
              .to(&OffloadConfig::pin_memory),
      },
      "parameter offload (ZeRO stage 3 only)", {.pydantic = true});
}

std::shared_ptr<const ObjectSpec> offload_optimizer_spec() {
  return make_object(
      {
          device_field("optimizer states"),
          F("nvme_path", T::kString, "NVMe folder for swapped optimizer state")
              .nullable()
              .to(&OffloadConfig::nvme_path),
          F("buffer_count", T::kInt, "swap buffers (>= tensors per parameter: Adam 4)")
              .def(4)
              .min(0)
              .auto_rule("default")
              .to(&OffloadConfig::buffer_count),
          F("pin_memory", T::kBool, "page-lock the CPU buffers")
              .def(true)
              .auto_rule("default")
              .to(&OffloadConfig::pin_memory),
          F("pipeline_read", T::kBool, "overlap swap-in with the step")
              .def(false)
              .to(&OffloadConfig::pipeline_read),
          F("pipeline_write", T::kBool, "overlap swap-out with the step")
              .def(false)
              .to(&OffloadConfig::pipeline_write),
          F("fast_init", T::kBool, "skip the initial swap-out")
              .def(false)
              .to(&OffloadConfig::fast_init),
          F("ratio", T::kNumber, "fraction of sub-groups offloaded (< 1 only with stage 3)")
              .def(1.0)
              .range(0, 1)
              .to(&OffloadConfig::ratio),
          F("super_offload", T::kBool, "SuperOffload for Superchips (stage 3)")
              .def(false)
              .not_used()
              .unsupported("\"super_offload\" turns on DeepSpeed's SuperOffload, CPU offload "
                           "tuned for GPU-CPU Superchips (GH200, GB200)",
                           "Remove it; dscore's offload runs the optimizer on the CPU already"),
          F("cpuadam_cores_perc", T::kNumber, "share of CPU cores for CPU Adam (super_offload)")
              .def(0.8)
              .range(0, 1)
              .not_used(),
      },
      "optimizer offload (ZeRO-Offload / ZeRO-Infinity)", {.pydantic = true});
}

std::shared_ptr<const ObjectSpec> aio_spec() {
  return make_object(
      {
          F("block_size", T::kInt, "bytes per I/O request")
              .def_int(1048576)
              .min(1)
              .auto_rule("aio_measured")
              .to(&AioConfig::block_size),
          F("queue_depth", T::kInt, "requests in flight")
              .def(8)
              .min(1)
              .auto_rule("aio_measured")
              .to(&AioConfig::queue_depth),
          F("intra_op_parallelism", T::kInt, "I/O threads per operation")
              .def(1)
              .min(1)
              .auto_rule("aio_measured")
              .to(&AioConfig::intra_op_parallelism),
          F("thread_count", T::kInt, "old name of intra_op_parallelism")
              .min(1)
              .replaced_by("intra_op_parallelism", true)
              .deprecated(
                  "deprecated: renamed to \"intra_op_parallelism\" in DeepSpeed 0.16.4 (which now "
                  "ignores \"thread_count\"); dscore uses it as intra_op_parallelism"),
          F("single_submit", T::kBool, "submit requests one at a time")
              .def(false)
              .auto_rule("aio_measured")
              .to(&AioConfig::single_submit),
          F("overlap_events", T::kBool, "overlap submission and completion")
              .def(true)
              .auto_rule("aio_measured")
              .to(&AioConfig::overlap_events),
          F("use_gds", T::kBool, "NVIDIA GPUDirect Storage (needs CUDA)")
              .def(false)
              .unsupported("\"use_gds\" makes DeepSpeed move NVMe offload data straight "
                           "between the drive and GPU memory with NVIDIA GPUDirect Storage",
                           "Remove it: dscore's NVMe offload reads and writes through host "
                           "memory"),
          F("keep_stale", T::kBool,
            "dscore: report the swap folders of jobs gone from this host instead of removing "
            "them")
              .def(false)
              .to(&AioConfig::keep_stale),
      },
      "asynchronous I/O for NVMe offload");
}

std::shared_ptr<const ObjectSpec> zero_optimization_spec() {
  const std::string kS3 = "stage3_";
  auto s3 = [&](const std::string& name, T type, const std::string& doc) {
    return F(name, type, doc + " (stage 3)").alias(kS3 + name);
  };
  return make_object(
      {
          F("stage", T::kInt, "0 off, 1 optimizer states, 2 + gradients, 3 + parameters")
              .def(0)
              .range(0, 3)
              .auto_note("DeepSpeed would silently drop it and run ZeRO stage 0; give 0-3")
              .to(&ZeroConfig::stage),
          F("contiguous_gradients", T::kBool, "copy gradients into a contiguous bucket as produced")
              .def(true)
              .to(&ZeroConfig::contiguous_gradients),
          F("reduce_scatter", T::kBool, "reduce gradients with reduce-scatter")
              .def(true)
              .to(&ZeroConfig::reduce_scatter),
          F("reduce_bucket_size", T::kInt,
            "elements per gradient-reduction bucket (dscore reduces at most 2^24 at once)")
              .def_int(500000000)
              .min(1)
              .auto_rule("hidden_squared")
              .to(&ZeroConfig::reduce_bucket_size),
          F("use_multi_rank_bucket_allreduce", T::kBool, "all-reduce whole buckets")
              .def(true)
              .to(&ZeroConfig::use_multi_rank_bucket_allreduce),
          F("allgather_partitions", T::kBool, "all-gather updated partitions")
              .def(true)
              .to(&ZeroConfig::allgather_partitions),
          F("allgather_bucket_size", T::kInt, "elements per parameter all-gather (multiple of 2)")
              .def_int(500000000)
              .min(0)
              .to(&ZeroConfig::allgather_bucket_size),
          // No default here: config_rules.cc resolves it from the stage.
          F("overlap_comm", T::kBool,
            "overlap reduction with backward (default: true for stage 3 only)")
              .nullable()
              .to(&ZeroConfig::overlap_comm),
          F("load_from_fp32_weights", T::kBool, "restore fp32 masters from the checkpoint")
              .def(true)
              .to(&ZeroConfig::load_from_fp32_weights),
          F("elastic_checkpoint", T::kBool, "DeepSpeed elastic checkpoint format")
              .def(false)
              .to(&ZeroConfig::elastic_checkpoint),
          F("offload_param", T::kObject,
            "offload parameters (stage 3); {} = defaults, absent = off")
              .nullable()
              .object(offload_param_spec())
              .to(&ZeroConfig::offload_param),
          F("offload_optimizer", T::kObject,
            "offload optimizer states; {} = defaults, absent = off")
              .nullable()
              .object(offload_optimizer_spec())
              .to(&ZeroConfig::offload_optimizer),
          F("sub_group_size", T::kInt, "elements per optimizer sub-group (stage 3)")
              .def_int(1000000000)
              .min(0)
              .auto_rule("default")
              .to(&ZeroConfig::sub_group_size),
          s3("prefetch_bucket_size", T::kInt, "elements prefetched ahead")
              .def_int(50000000)
              .min(0)
              .auto_rule("hidden_squared_0_9")
              .to(&ZeroConfig::prefetch_bucket_size),
          s3("param_persistence_threshold", T::kInt, "parameters this small stay gathered")
              .def_int(100000)
              .min(0)
              .auto_rule("hidden_x10")
              .to(&ZeroConfig::param_persistence_threshold),
          s3("model_persistence_threshold", T::kInt, "total elements of persistent parameters")
              .def_int(INT64_MAX)
              .min(0)
              .auto_rule("default")
              .to(&ZeroConfig::model_persistence_threshold),
          s3("max_live_parameters", T::kInt, "gathered elements kept at most")
              .def_int(1000000000)
              .min(0)
              .auto_rule("default")
              .to(&ZeroConfig::max_live_parameters),
          s3("max_reuse_distance", T::kInt,
             "keep a parameter gathered if reused within this many elements")
              .def_int(1000000000)
              .min(0)
              .auto_rule("default")
              .to(&ZeroConfig::max_reuse_distance),
          s3("gather_16bit_weights_on_model_save", T::kBool,
             "gather full 16-bit weights when saving the model")
              .def(false)
              .auto_rule("default")
              .to(&ZeroConfig::gather_16bit_weights_on_model_save),
          s3("module_granularity_threshold", T::kInt, "module fetch granularity").def(0).not_used(),
          s3("use_all_reduce_for_fetch_params", T::kBool, "gather parameters with all-reduce")
              .def(false)
              .not_used(),
          F("ignore_unused_parameters", T::kBool, "tolerate parameters without gradients")
              .def(true)
              .to(&ZeroConfig::ignore_unused_parameters),
          F("legacy_stage1", T::kBool, "removed in DeepSpeed 0.5.9 (true is an error)").def(false),
          F("round_robin_gradients", T::kBool, "order gradients round-robin across ranks")
              .def(false)
              .to(&ZeroConfig::round_robin_gradients),
          F("zero_hpz_partition_size", T::kInt,
            "ZeRO++ hpZ: a secondary copy of the stage-3 parameters over groups of this many "
            "ranks (a node's), which the backward pass gathers from")
              .def(1)
              .min(0)
              .to(&ZeroConfig::hpz_partition_size),
          F("zero_quantized_weights", T::kBool,
            "ZeRO++ qwZ: stage 3 gathers parameters as int8 (blocks of 4096 with fp32 scales)")
              .def(false)
              .to(&ZeroConfig::quantized_weights),
          F("zero_quantized_nontrainable_weights", T::kBool, "ZeRO++ quantized frozen weights")
              .def(false)
              .not_used()
              .unsupported("\"zero_quantized_nontrainable_weights\" turns on a ZeRO++ "
                           "communication optimization in "
                           "DeepSpeed (quantized or hierarchical collectives)",
                           "Remove it: dscore's ZeRO communicates full-precision, flat"),
          F("zero_quantized_gradients", T::kBool,
            "ZeRO++ qgZ: stage 3 reduces gradients as int4 (blocks of 4096 with fp32 scales) "
            "through an all-to-all")
              .def(false)
              .to(&ZeroConfig::quantized_gradients),
          F("zeropp_loco_param", T::kJson, "ZeRO++ LoCo parameters")
              .nullable()
              .removed("LoCo-Zero++", "remove the key"),
          F("mics_shard_size", T::kInt, "MiCS shard size")
              .nullable()
              .removed("MiCS ZeRO-3 sharding", "remove the key (dscore shards across all ranks)"),
          F("mics_hierarchical_params_gather", T::kBool, "MiCS hierarchical gather")
              .nullable()
              .removed("MiCS ZeRO-3 sharding", "remove the key"),
          F("compute_grad_norm", T::kBool,
            "compute the global gradient norm at ZeRO stage 1/2 steps (false: only without "
            "clipping)")
              .def(true)
              .not_used(),
          F("parameter_alignment", T::kBool, "pad stage 1/2 flat buffers to 16-byte alignment")
              .def(false)
              .not_used(),
          F("zenflow", T::kObject, "ZenFlow stall-free offloading")
              .nullable()
              .not_used()
              .unsupported("\"zenflow\" turns on DeepSpeed's ZenFlow, which updates the "
                           "most important gradients on the GPU and the rest asynchronously on "
                           "the CPU",
                           "Remove it; use offload_optimizer {\"device\": \"cpu\"} for CPU "
                           "offload")
              .object(make_object({}, "ZenFlow", {.allow_unknown = true, .quiet_unknown = true})),
          s3("allgather_sequential", T::kBool, "gather parameters one by one, without buckets")
              .def(false)
              .not_used(),
          F("enable_sanity_checks", T::kBool, "DeepSpeed's internal ZeRO-3 sanity checks")
              .def(false)
              .not_used(),
          F("leaf_module", T::kObject, "modules ZeRO-3 treats as leaves (classes, names)")
              .nullable()
              .not_used()
              .object(make_object({}, "ZeRO-3 leaf modules",
                                  {.allow_unknown = true, .quiet_unknown = true})),
          F("aio", T::kObject, "misplaced: \"aio\" is a top-level section")
              .rejected_form("\"aio\" belongs at the top level of the config, not inside "
                             "\"zero_optimization\" (DeepSpeed rejects it here: extra fields not "
                             "permitted); move the \"aio\" object out of \"zero_optimization\""),
          F("memory_efficient_linear", T::kBool, "DeepSpeed's memory-efficient linear")
              .def(true)
              .not_used(),
          F("pipeline_loading_checkpoint", T::kBool, "pipeline checkpoint loading")
              .def(false)
              .not_used(),
          F("override_module_apply", T::kBool, "override torch Module.apply").def(true).not_used(),
          F("log_trace_cache_warnings", T::kBool, "log trace cache warnings").def(false).not_used(),
          // Deprecated keys (docs/deepspeed-reference.md#deprecated-keys-and-aliases);
          // config_rules.cc maps the ones that change type.
          F("cpu_offload", T::kBool, "deprecated: true = offload_optimizer {device: cpu}")
              .nullable()
              .replaced_by("offload_optimizer", false)
              .deprecated("deprecated: use \"offload_optimizer\": {\"device\": \"cpu\"}"),
          F("cpu_offload_param", T::kBool, "deprecated: true = offload_param {device: cpu}")
              .nullable()
              .replaced_by("offload_param", false)
              .deprecated("deprecated: use \"offload_param\": {\"device\": \"cpu\"}"),
          F("cpu_offload_use_pin_memory", T::kBool, "deprecated and ignored")
              .nullable()
              .deprecated("deprecated and ignored (DeepSpeed does not transfer it either); set "
                          "offload_optimizer.pin_memory / offload_param.pin_memory"),
          F("stage3_gather_fp16_weights_on_model_save", T::kBool,
            "deprecated name of gather_16bit_weights_on_model_save")
              .replaced_by("gather_16bit_weights_on_model_save", true)
              .deprecated("deprecated: use \"gather_16bit_weights_on_model_save\""),
      },
      "ZeRO redundancy optimizer (docs/deepspeed-reference.md#zero-optimization-keys)",
      {.pydantic = true});
}

}  // namespace dscore::config
