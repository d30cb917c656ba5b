// Checkpoint tools:
//   dscore checkpoint inspect DIR [--tag T]
//   dscore checkpoint import DEEPSPEED_DIR OUT [--tag T]
//   dscore checkpoint export-deepspeed DIR OUT (--world-size N | --universal) [--stage 1|2] [--tag
//   T] dscore zero-to-fp32 DIR OUT [--tag T] [--max-shard-size 5GB] dscore export-hf DIR OUT [--tag
//   T] [--max-shard-size 5GB] [--dtype fp32|bf16|fp16]
#include <cstdio>

#include "core/app/hf_export.h"
#include "core/checkpoint/checkpoint_info.h"
#include "core/checkpoint/consolidate.h"
#include "core/checkpoint/deepspeed_export.h"
#include "core/checkpoint/deepspeed_import.h"
#include "core/checkpoint/inspect.h"
#include "core/cli/commands.h"
#include "core/cli/options.h"
#include "core/config/json.h"
#include "core/engine/environment.h"

namespace dscore::cli {
namespace {

int report_error(const Status& status) {
  std::fprintf(stderr, "error: %s\n", status.message().c_str());
  return kExitFailure;
}

// `dscore checkpoint import DEEPSPEED_DIR OUT [--tag T]`.
int import_command(const std::vector<std::string>& args) {
  const char* usage = "usage: dscore checkpoint import DEEPSPEED_DIR OUT [--tag T]";
  po::options_description options("checkpoint import options");
  std::string dir, out, tag;
  options.add_options()("dir", po::value<std::string>(&dir)->required(),
                        "the folder DeepSpeed's save_checkpoint wrote (holding `latest`)")(
      "out", po::value<std::string>(&out)->required(),
      "the dscore checkpoint folder to write (`dscore run --resume OUT` continues from it)")(
      "tag", po::value<std::string>(&tag), "the tag to import (default: the one `latest` names)");
  po::positional_options_description positional;
  positional.add("dir", 1).add("out", 1);
  po::variables_map vm;
  int exit_code = kExitOk;
  if (!parse_options(args, options, positional, usage, &vm, &exit_code)) return exit_code;
  auto result = checkpoint::import_deepspeed_checkpoint(dir, out, {tag});
  if (!result.ok()) return report_error(result.status());
  std::printf(
      "imported %s of %s: ZeRO stage %d, %d rank(s), %s, optimizer %s, %zu parameters "
      "(%lld elements) in %zu group(s), step %lld\n",
      result->tag.c_str(), dir.c_str(), result->zero_stage, result->world_size,
      result->model_dtype.c_str(), result->optimizer.empty() ? "none" : result->optimizer.c_str(),
      result->params, static_cast<long long>(result->elements), result->groups,
      static_cast<long long>(result->global_steps));
  for (const std::string& f : result->files)
    std::printf("  %s/%s/%s\n", out.c_str(), result->tag.c_str(), f.c_str());
  return kExitOk;
}

// `dscore checkpoint export-deepspeed DIR OUT (--world-size N | --universal) [--stage 1|2] [--tag
// T]`.
int export_deepspeed_command(const std::vector<std::string>& args) {
  const char* usage =
      "usage: dscore checkpoint export-deepspeed DIR OUT (--world-size N | --universal) "
      "[--stage 1|2] [--tag T]";
  po::options_description options("checkpoint export-deepspeed options");
  std::string dir, out;
  checkpoint::DeepSpeedExportOptions exported;
  options.add_options()("dir", po::value<std::string>(&dir)->required(),
                        "the dscore checkpoint folder (holding `latest`)")(
      "out", po::value<std::string>(&out)->required(),
      "the folder to write, for DeepSpeed's engine.load_checkpoint(OUT)")(
      "world-size", po::value<int>(&exported.world_size),
      "the data-parallel ranks DeepSpeed will load it with")(
      "universal",
      "write ds_to_universal.py's layout instead, which DeepSpeed loads at any world size "
      "(\"checkpoint\": {\"load_universal\": true})")(
      "stage", po::value<int>(&exported.zero_stage)->default_value(2),
      "the ZeRO stage DeepSpeed will load it at: 1 or 2")(
      "tag", po::value<std::string>(&exported.tag),
      "the tag to export (default: the one `latest` names)");
  po::positional_options_description positional;
  positional.add("dir", 1).add("out", 1);
  po::variables_map vm;
  int exit_code = kExitOk;
  if (!parse_options(args, options, positional, usage, &vm, &exit_code)) return exit_code;
  exported.universal = vm.count("universal") != 0;
  if (vm.count("world-size") == exported.universal) {
    std::fprintf(stderr,
                 "dscore: give --world-size N (the ranks DeepSpeed loads it with) or "
                 "--universal (any world size), not both\n%s\n",
                 usage);
    return kExitUsage;
  }
  // The lr DeepSpeed's param group resumes with: the schedule of the config
  // the checkpoint was trained with, at its saved position.
  auto info = checkpoint::open_checkpoint(dir, exported.tag);
  if (!info.ok()) return report_error(info.status());
  InitializeOptions init;
  init.own_model = true;
  init.trust_config_plugin_paths = read_engine_environment().trust_config_plugin_paths;
  comm::JobEnv saved_job;  // the config was resolved for the world size that saved it
  saved_job.world_size = info->header0.world_size;
  init.job = saved_job;
  const std::optional<Setup> setup = prepare_text_or_report(
      json::serialize(info->state.ds_config), info->path + " (its saved config)", info->path, init);
  if (!setup) return kExitFailure;
  if (!setup->selection.optimizer)
    return report_error(
        invalid_argument(info->path + ": its saved config has no optimizer section"));
  double base_lr = 0;
  auto schedule = make_schedule(*setup, &base_lr);
  if (!schedule.ok()) return report_error(schedule.status());
  exported.next_lr = base_lr;
  if (*schedule) {
    auto point = (*schedule)->point_at(info->state.lr_last_batch_iteration, 0);
    if (!point.ok()) return report_error(point.status());
    exported.next_lr = point->lr;
  }
  auto result = checkpoint::export_deepspeed_checkpoint(dir, out, exported);
  if (!result.ok()) return report_error(result.status());
  if (exported.universal)
    std::printf("exported %s at step %lld for DeepSpeed in the universal format:\n",
                result->tag.c_str(), static_cast<long long>(result->global_steps));
  else
    std::printf("exported %s at step %lld for DeepSpeed at ZeRO stage %d on %d rank(s):\n",
                result->tag.c_str(), static_cast<long long>(result->global_steps),
                exported.zero_stage, exported.world_size);
  for (const std::string& f : result->files)
    std::printf("  %s/%s/%s\n", out.c_str(), result->tag.c_str(), f.c_str());
  return kExitOk;
}

}  // namespace

int checkpoint_command(const std::vector<std::string>& args) {
  const char* usage =
      "usage: dscore checkpoint inspect DIR [--tag T]\n"
      "       dscore checkpoint import DEEPSPEED_DIR OUT [--tag T]\n"
      "       dscore checkpoint export-deepspeed DIR OUT (--world-size N | --universal) [--stage "
      "1|2] "
      "[--tag T]";
  if (!args.empty() && args[0] == "import") return import_command({args.begin() + 1, args.end()});
  if (!args.empty() && args[0] == "export-deepspeed")
    return export_deepspeed_command({args.begin() + 1, args.end()});
  if (args.empty() || args[0] != "inspect") {
    if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
      std::printf(
          "%s\n  inspect: verify a checkpoint's checksums and completeness and print what it "
          "holds\n  import: make a checkpoint DeepSpeed's save_checkpoint wrote into a dscore "
          "checkpoint\n  export-deepspeed: write a dscore checkpoint as DeepSpeed's ZeRO-1/2 "
          "checkpoint, for its load_checkpoint\n",
          usage);
      return kExitOk;
    }
    std::fprintf(stderr, "%s\n", usage);
    return kExitUsage;
  }
  po::options_description options("checkpoint inspect options");
  std::string dir, tag;
  options.add_options()("dir", po::value<std::string>(&dir)->required(),
                        "the checkpoint folder (holding `latest`)")(
      "tag", po::value<std::string>(&tag), "the tag to inspect (default: the one `latest` names)");
  po::positional_options_description positional;
  positional.add("dir", 1);
  po::variables_map vm;
  int exit_code = kExitOk;
  if (!parse_options({args.begin() + 1, args.end()}, options, positional, usage, &vm, &exit_code))
    return exit_code;
  std::string report;
  const Status status = checkpoint::inspect_checkpoint(dir, tag, &report);
  std::fputs(report.c_str(), stdout);
  return status.ok() ? kExitOk : report_error(status);
}

int zero_to_fp32_command(const std::vector<std::string>& args) {
  po::options_description options("zero-to-fp32 options");
  std::string dir, out, tag, max_shard = "5GB";
  options.add_options()("dir", po::value<std::string>(&dir)->required(),
                        "the checkpoint folder (holding `latest`)")(
      "out", po::value<std::string>(&out)->required(), "the output folder")(
      "tag", po::value<std::string>(&tag), "the tag to convert (default: the one `latest` names)")(
      "max-shard-size", po::value<std::string>(&max_shard)->default_value("5GB"),
      "split into model-0000i-of-0000n.safetensors shards past this size (HuggingFace units: 5GB = "
      "5e9 bytes)");
  po::positional_options_description positional;
  positional.add("dir", 1).add("out", 1);
  po::variables_map vm;
  int exit_code = kExitOk;
  if (!parse_options(args, options, positional,
                     "usage: dscore zero-to-fp32 DIR OUT [--tag T] [--max-shard-size 5GB]", &vm,
                     &exit_code))
    return exit_code;
  checkpoint::ConsolidateOptions consolidate;
  consolidate.tag = tag;
  auto size = checkpoint::parse_size(max_shard);
  if (!size.ok()) {
    std::fprintf(stderr, "dscore: --max-shard-size: %s\n", size.status().message().c_str());
    return kExitUsage;
  }
  consolidate.max_shard_bytes = *size;
  auto result = checkpoint::zero_to_fp32(dir, out, consolidate);
  if (!result.ok()) return report_error(result.status());
  std::printf("wrote %zu fp32 tensors (%llu bytes):\n", result->tensors,
              static_cast<unsigned long long>(result->total_bytes));
  for (const std::string& f : result->files) std::printf("  %s\n", f.c_str());
  return kExitOk;
}

int export_hf_command(const std::vector<std::string>& args) {
  po::options_description options("export-hf options");
  std::string dir, out, tag, max_shard = "5GB", dtype = "fp32";
  options.add_options()("dir", po::value<std::string>(&dir)->required(),
                        "the checkpoint folder (holding `latest`)")(
      "out", po::value<std::string>(&out)->required(), "the Hugging Face folder to write")(
      "tag", po::value<std::string>(&tag), "the tag to export (default: the one `latest` names)")(
      "max-shard-size", po::value<std::string>(&max_shard)->default_value("5GB"),
      "split into model-0000i-of-0000n.safetensors shards past this size (5GB = 5e9 bytes)")(
      "dtype", po::value<std::string>(&dtype)->default_value("fp32"),
      "the weights' dtype: fp32, bf16 or fp16");
  po::positional_options_description positional;
  positional.add("dir", 1).add("out", 1);
  po::variables_map vm;
  int exit_code = kExitOk;
  const char* usage =
      "usage: dscore export-hf CHECKPOINT OUT [--tag T] [--max-shard-size 5GB] "
      "[--dtype fp32|bf16|fp16]";
  if (!parse_options(args, options, positional, usage, &vm, &exit_code)) return exit_code;
  HfExportOptions export_options;
  export_options.tag = tag;
  auto size = checkpoint::parse_size(max_shard);
  if (!size.ok()) {
    std::fprintf(stderr, "dscore: --max-shard-size: %s\n", size.status().message().c_str());
    return kExitUsage;
  }
  export_options.max_shard_bytes = *size;
  if (dtype == "fp32") {
    export_options.dtype = DSCORE_DTYPE_F32;
  } else if (dtype == "bf16") {
    export_options.dtype = DSCORE_DTYPE_BF16;
  } else if (dtype == "fp16") {
    export_options.dtype = DSCORE_DTYPE_F16;
  } else {
    std::fprintf(stderr, "dscore: --dtype must be fp32, bf16 or fp16, not \"%s\"\n%s\n",
                 dtype.c_str(), usage);
    return kExitUsage;
  }
  auto result = export_hf(dir, out, export_options);
  if (!result.ok()) return report_error(result.status());
  std::printf("exported %s: %zu %s tensors (%llu bytes):\n", result->model.c_str(),
              result->weights.tensors, dtype.c_str(),
              static_cast<unsigned long long>(result->weights.total_bytes));
  for (const std::string& f : result->weights.files) std::printf("  %s\n", f.c_str());
  for (const std::string& f : result->copied) std::printf("  %s (copied)\n", f.c_str());
  return kExitOk;
}

}  // namespace dscore::cli
