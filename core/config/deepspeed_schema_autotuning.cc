// DeepSpeed's "autotuning" section (deepspeed/autotuning/config.py and
// constants.py, DeepSpeed 0.19.8), read by `dscore autotune`
// (core/autotune). `dscore run` trains the config as written and leaves the
// section alone, as DeepSpeed's engine does. "metric_path" (a user script's
// metrics) is refused by name; "arg_mappings" and "model_info" are accepted
// and not used (a notice): dscore writes tuned values into each trial's
// config and reads the model's size from its plugin.
#include "core/config/schema_builder.h"

namespace dscore::config {

using T = FieldType;

FieldSpec autotuning_section() {
  using A = AutotuningConfig;
  return F("autotuning", T::kObject, "the autotuner of `dscore autotune` (DeepSpeed's autotuning)")
      .nullable()
      .object(make_object(
          {
              F("enabled", T::kBool,
                "DeepSpeed's switch for `deepspeed --autotuning`; `dscore autotune` tunes either "
                "way")
                  .def(false)
                  .to(&A::enabled),
              F("fast", T::kBool,
                "tune the ZeRO stage and micro-batch size only; false: also activation "
                "checkpointing, offload, buckets, overlap and threads")
                  .def(true)
                  .to(&A::fast),
              F("results_dir", T::kString, "where the table and best_config.json go")
                  .def("autotuning_results")
                  .to(&A::results_dir),
              F("exps_dir", T::kString, "one folder per trial: its config and output")
                  .def("autotuning_exps")
                  .to(&A::exps_dir),
              F("overwrite", T::kBool,
                "run every trial again; false: reuse a trial's result found in exps_dir")
                  .def(true)
                  .to(&A::overwrite),
              F("metric", T::kString, "what the best config maximizes (latency: minimizes)")
                  .def("throughput")
                  .enums({"throughput", "latency", "flops"})
                  .to(&A::metric),
              F("start_profile_step", T::kInt, "first optimizer step measured")
                  .def(3)
                  .min(1)
                  .to(&A::start_profile_step),
              F("end_profile_step", T::kInt,
                "last optimizer step measured (a trial runs this many)")
                  .def(5)
                  .min(1)
                  .to(&A::end_profile_step),
              F("tuner_type", T::kString,
                "trial order: gridsearch (as enumerated), random, model_based (predicted best "
                "first, the model refit after each trial)")
                  .def("gridsearch")
                  .enums({"gridsearch", "random", "model_based"})
                  .to(&A::tuner_type),
              F("tuner_early_stopping", T::kInt, "stop after this many trials without a better one")
                  .def(5)
                  .min(1)
                  .to(&A::tuner_early_stopping),
              F("tuner_num_trials", T::kInt, "at most this many trials run")
                  .def(50)
                  .min(1)
                  .to(&A::tuner_num_trials),
              F("max_train_batch_size", T::kInt, "largest train_batch_size tried (unset: no limit)")
                  .nullable()
                  .min(1)
                  .to(&A::max_train_batch_size),
              F("min_train_batch_size", T::kInt, "smallest train_batch_size tried")
                  .def(1)
                  .min(1)
                  .to(&A::min_train_batch_size),
              F("max_train_micro_batch_size_per_gpu", T::kInt, "largest micro-batch size tried")
                  .def(1024)
                  .min(1)
                  .to(&A::max_train_micro_batch_size_per_gpu),
              F("min_train_micro_batch_size_per_gpu", T::kInt, "smallest micro-batch size tried")
                  .def(1)
                  .min(1)
                  .to(&A::min_train_micro_batch_size_per_gpu),
              F("num_tuning_micro_batch_sizes", T::kInt, "micro-batch sizes tried per setting")
                  .def(3)
                  .min(1)
                  .to(&A::num_tuning_micro_batch_sizes),
              F("mp_size", T::kInt, "model-parallel degree")
                  .def(1)
                  .min(1)
                  .unsupported("\"mp_size\" above 1 tunes with DeepSpeed's model parallelism",
                               "Leave mp_size at 1: dscore has no tensor parallelism yet")
                  .to(&A::mp_size),
              F("metric_path", T::kString, "where DeepSpeed's trial writes its metrics")
                  .nullable()
                  .error("\"metric_path\" is where DeepSpeed's trial script writes its metrics; "
                         "dscore measures each trial itself: remove the key"),
              F("arg_mappings", T::kObject,
                "DeepSpeed's map from config keys to the training script's arguments; `dscore "
                "autotune` writes the tuned values into each trial's config instead")
                  .nullable()
                  .not_used()
                  .object(make_object({}, "argument mappings",
                                      {.allow_unknown = true, .quiet_unknown = true})),
              F("model_info", T::kObject,
                "DeepSpeed's model size hints; dscore reads the size from the model plugin")
                  .nullable()
                  .not_used()
                  .object(make_object({}, "model information",
                                      {.allow_unknown = true, .quiet_unknown = true})),
              F("model_info_path", T::kString, "DeepSpeed's model size hints, from a file")
                  .nullable()
                  .not_used(),
          },
          "autotuning"))
      .to(&TrainingConfig::autotuning);
}

}  // namespace dscore::config
