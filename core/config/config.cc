// load_config_*: parse -> legacy forms -> schema validation (every error
// collected) -> DeepSpeed's cross-key rules -> batch triad -> TrainingConfig.
#include "core/config/config.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/config/auto_rules.h"
#include "core/config/batch.h"
#include "core/config/config_rules.h"
#include "core/config/deepspeed_schema.h"
#include "core/config/placement.h"
#include "core/config/schema.h"
#include "core/config/schema_util.h"
#include "core/config/training_config_builder.h"

namespace dscore::config {

namespace {

// Errors in file order; those without a position (derived values) last.
void sort_errors(std::vector<ConfigError>* errors) {
  std::stable_sort(errors->begin(), errors->end(), [](const ConfigError& a, const ConfigError& b) {
    if (a.location.known() != b.location.known()) return a.location.known();
    if (a.location.line != b.location.line) return a.location.line < b.location.line;
    return a.location.column < b.location.column;
  });
}

}  // namespace

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalid:
      return "invalid";
    case ErrorKind::kUnsupported:
      return "unsupported";
    case ErrorKind::kDeepSpeedRejects:
      return "deepspeed_rejects";
    case ErrorKind::kRemoved:
      return "removed";
  }
  return "?";
}

namespace {

// The pipeline stages the written config asks for (pipeline.stages, else
// pipeline_parallel_size, else 1), checked against the world size; 1 after
// an error (reported in `errors`).
int64_t written_pipeline_stages(const json::Value& written, int64_t world_size,
                                std::vector<ConfigError>* errors) {
  const json::Value* section = written.find("pipeline");
  const json::Value* in_section =
      section != nullptr && section->is_object() ? section->find("stages") : nullptr;
  const json::Value* job = written.find("pipeline_parallel_size");
  const bool by_section = in_section != nullptr && in_section->is_int();
  const bool by_job = job != nullptr && job->is_int();
  if (!by_section && !by_job) return 1;
  const int64_t stages = by_section ? in_section->as_int() : job->as_int();
  const std::string key = by_section ? "pipeline.stages" : "pipeline_parallel_size";
  if (by_section && by_job && job->as_int() != stages) {
    errors->push_back({"pipeline_parallel_size", job->location,
                       "pipeline_parallel_size " + std::to_string(job->as_int()) +
                           " disagrees with pipeline.stages " + std::to_string(stages) +
                           ": give one of them"});
    return 1;
  }
  if (stages < 1) {
    errors->push_back({key, {}, key + " must be >= 1, got " + std::to_string(stages)});
    return 1;
  }
  if (world_size % stages != 0) {
    errors->push_back({key,
                       {},
                       key + " " + std::to_string(stages) + " does not divide the world size " +
                           std::to_string(world_size) +
                           ": each pipeline needs that many ranks (launch a multiple of " +
                           std::to_string(stages) + " ranks)"});
    return 1;
  }
  return stages;
}

// The tensor-parallel size the written config asks for
// (tensor_parallel.autotp_size, 1 when absent, 0 or 1), checked against the
// ranks of one pipeline stage; 1 after an error (reported in `errors`).
int64_t written_tensor_parallel(const json::Value& written, int64_t stage_ranks,
                                std::vector<ConfigError>* errors) {
  const json::Value* section = written.find("tensor_parallel");
  const json::Value* size =
      section != nullptr && section->is_object() ? section->find("autotp_size") : nullptr;
  if (size == nullptr || !size->is_int() || size->as_int() <= 1) return 1;
  const int64_t tp = size->as_int();
  if (stage_ranks % tp != 0) {
    errors->push_back({"tensor_parallel.autotp_size", size->location,
                       "tensor_parallel.autotp_size " + std::to_string(tp) +
                           " does not divide the " + std::to_string(stage_ranks) +
                           " ranks of each pipeline stage: launch a multiple of " +
                           std::to_string(tp) + " ranks per stage"});
    return 1;
  }
  return tp;
}

// The Ulysses sequence-parallel size the written config asks for
// (sequence_parallel_size, 1 when absent or 1), checked against the ranks of
// one tensor-parallel part of a pipeline stage; 1 after an error.
int64_t written_sequence_parallel(const json::Value& written, int64_t part_ranks,
                                  std::vector<ConfigError>* errors) {
  const json::Value* size = written.find("sequence_parallel_size");
  if (size == nullptr || !size->is_int() || size->as_int() <= 1) return 1;
  const int64_t sp = size->as_int();
  if (part_ranks % sp != 0) {
    errors->push_back({"sequence_parallel_size", size->location,
                       "sequence_parallel_size " + std::to_string(sp) + " does not divide the " +
                           std::to_string(part_ranks) +
                           " ranks left for it (the world over the pipeline stages and "
                           "tensor_parallel.autotp_size): launch a multiple of " +
                           std::to_string(sp) + " times that"});
    return 1;
  }
  return sp;
}

// The expert-parallel size the written config asks for
// (expert_parallel.autoep_size where enabled), checked against the
// data-parallel ranks it divides; 1 after an error.
int64_t written_expert_parallel(const json::Value& written, int64_t data_ranks,
                                std::vector<ConfigError>* errors) {
  const json::Value* section = written.find("expert_parallel");
  if (section == nullptr || !section->is_object()) return 1;
  const json::Value* enabled = section->find("enabled");
  const json::Value* size = section->find("autoep_size");
  if (enabled == nullptr || !enabled->is_bool() || !enabled->as_bool()) return 1;
  if (size == nullptr || !size->is_int() || size->as_int() <= 1) return 1;
  const int64_t ep = size->as_int();
  if (data_ranks % ep != 0) {
    errors->push_back({"expert_parallel.autoep_size", size->location,
                       "expert_parallel.autoep_size " + std::to_string(ep) +
                           " does not divide the " + std::to_string(data_ranks) +
                           " data-parallel ranks: launch a multiple of " + std::to_string(ep) +
                           " ranks (the experts' replicas are the data-parallel ranks over it)"});
    return 1;
  }
  return ep;
}

}  // namespace

LoadedConfig load_config_text(std::string_view text, std::string_view source_name,
                              const ResolveContext& context) {
  LoadedConfig out;
  out.source_name = std::string(source_name);
  json::Value written;
  json::ParseError parse_error;
  if (!json::parse_with_location(text, &written, &parse_error)) {
    out.errors.push_back({"", parse_error.location, parse_error.message});
    return out;
  }
  if (!written.is_object()) {
    out.errors.push_back({"", written.location,
                          "a ds_config.json holds a JSON object, got " + describe_value(written)});
    return out;
  }
  if (context.world_size < 1) {
    out.errors.push_back(
        {"", {}, "the world size must be at least 1, got " + std::to_string(context.world_size)});
    return out;
  }

  apply_legacy_forms(&written, &out.notices);
  ValidationSink sink{&out.errors, &out.notices};
  json::Value resolved =
      validate_object(written, deepspeed_schema(), "", make_auto_resolver(context, written), sink);
  apply_deepspeed_rules(&resolved, &out.errors, &out.notices);
  // The batch triad's world is the data-parallel one: each pipeline's
  // stages, each tensor-parallel group's ranks and each sequence-parallel
  // group's ranks share its samples (DeepSpeed: world / sequence_parallel_size).
  const int64_t stages = written_pipeline_stages(written, context.world_size, &out.errors);
  const int64_t tp = written_tensor_parallel(written, context.world_size / stages, &out.errors);
  const int64_t sp =
      written_sequence_parallel(written, context.world_size / stages / tp, &out.errors);
  (void)written_expert_parallel(written, context.world_size / stages / tp / sp, &out.errors);
  resolve_batch(written, &resolved, context.world_size / stages / tp / sp, &out.errors,
                &out.notices);

  if (context.train_steps) {
    const json::Value* file_steps = resolved.find("train_steps");
    if (file_steps && file_steps->is_int() && file_steps->as_int() != *context.train_steps)
      out.notices.push_back({"train_steps", "--steps " + std::to_string(*context.train_steps) +
                                                " overrides " +
                                                std::to_string(file_steps->as_int())});
    if (*context.train_steps < 0)
      out.errors.push_back(
          {"train_steps", {}, "--steps must be >= 0, got " + std::to_string(*context.train_steps)});
    else
      set_in_schema_order(&resolved, deepspeed_schema(), "train_steps",
                          json::Value(*context.train_steps));
  }

  if (context.allow_unsupported) {
    auto unsupported = [](const ConfigError& e) { return e.kind == ErrorKind::kUnsupported; };
    for (const ConfigError& e : out.errors) {
      if (!unsupported(e)) continue;
      std::string message = e.message;
      if (message.ends_with(kUnsupportedHint))
        message.replace(message.size() - kUnsupportedHint.size(), kUnsupportedHint.size(),
                        kUnsupportedAllowed);
      out.notices.push_back({e.path, "warning: " + message});
    }
    std::erase_if(out.errors, unsupported);
  }
  sort_errors(&out.errors);
  if (out.errors.empty()) {
    out.config = build_training_config(resolved);
    for (ConfigNotice& n : placement_notices(*out.config)) out.notices.push_back(std::move(n));
  }
  out.resolved = std::move(resolved);
  return out;
}

LoadedConfig load_config_file(const std::string& path, const ResolveContext& context) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  std::error_code ec;
  if (in && std::filesystem::is_directory(path, ec)) {
    errno = EISDIR;  // opening a folder succeeds; reading it does not
    in.setstate(std::ios::failbit);
  }
  if (in) content << in.rdbuf();
  if (!in || in.bad()) {
    int err = errno;
    LoadedConfig out;
    out.source_name = path;
    out.errors.push_back(
        {"",
         {},
         std::string("cannot read config file: ") + (err ? std::strerror(err) : "read failed")});
    return out;
  }
  return load_config_text(content.str(), path, context);
}

std::string format_error(const ConfigError& error, std::string_view source_name) {
  std::string out(source_name);
  if (error.location.known()) {
    // Appended piecewise: `":" + std::to_string(...)` trips GCC 12's
    // -Wrestrict false positive at -O3.
    out += ':';
    out += std::to_string(error.location.line);
    out += ':';
    out += std::to_string(error.location.column);
  }
  out += ": ";
  if (!error.path.empty()) out += error.path + ": ";
  out += error.message;
  // One line, whatever the user put in a key: escape control characters.
  std::string line;
  for (char c : out) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '\n') {
      line += "\\n";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      line += buf;
    } else {
      line += c;
    }
  }
  return line;
}

}  // namespace dscore::config
